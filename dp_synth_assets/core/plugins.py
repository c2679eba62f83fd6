"""What every plug-in registry shares: the refusal of an unregistered name, where a registered
module lives, and how a plug-in's own settings are found and validated.

The registries, one per kind of plug-in: `methods.METHODS`, `engines.ENGINES`,
`scan_engines.SCAN_ENGINES`, `preprocess.MECHANISMS` and `checks.suites.CHECKS`. Each maps a name
to a frozen entry whose `module` names the plug-in's module (of the registry's package, or a
dotted path) and whose `settings` names its frozen settings model (a class of that module,
`module:Class`, or `NO_SETTINGS`); tests/test_architecture.py checks every entry. A leaf module:
`config` validates names without importing any plug-in; a plug-in's module is imported only when
its settings are validated or it runs."""

import importlib
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, ValidationError


class Settings(BaseModel):
    """The base of a plug-in's own settings model: frozen, and no key it does not declare."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoSettings(Settings):
    """The settings of a plug-in that takes none."""


NO_SETTINGS = f"{__name__}:NoSettings"


def require_registered(registry: Mapping, name: str, what: str, also: str = "") -> None:
    """Refuse `name` unless it is a key of `registry`, naming the registered choices (and
    `also`, e.g. " or auto")."""
    if name not in registry:
        raise ValueError(f"unknown {what} {name!r}; choose one of {sorted(registry)}{also}")


def _import(module: str, package: str):
    return importlib.import_module(module if "." in module else f"{package}.{module}")


def plugin_module(registry: Mapping, name: str, package: str, what: str, also: str = ""):
    """The module of the registered `name`: its `.module` under `package`, or a fully qualified
    module path when it is dotted (a plug-in living outside the package)."""
    require_registered(registry, name, what, also)
    return _import(registry[name].module, package)


def settings_model(registry: Mapping, name: str, package: str, what: str,
                   also: str = "") -> type[Settings]:
    """The settings model of the registered `name`: its `.settings`, a class of its module, or
    `module:Class` (the module as in `plugin_module`)."""
    require_registered(registry, name, what, also)
    entry = registry[name]
    module, _, cls = entry.settings.rpartition(":")
    found = getattr(_import(module, package) if module else plugin_module(
        registry, name, package, what, also), cls, None)
    if not (isinstance(found, type) and issubclass(found, BaseModel)):
        raise TypeError(f"the settings of {what} {name!r} ({entry.settings}) are not a "
                        "pydantic model")
    return found


def validate_settings(registry: Mapping, name: str, package: str, what: str, data: Mapping,
                      context: Mapping | None = None) -> Settings:
    """`data` validated by the settings model of `name` (`settings_model`), with `context`
    (facts of the dataset the model's rules read, e.g. its columns) as pydantic's validation
    context. A refusal is a ValueError carrying the model's own message (the first problem),
    prefixed by the key it concerns when the model names one."""
    model = settings_model(registry, name, package, what)
    try:
        return model.model_validate(dict(data), context=dict(context or {}))
    except ValidationError as e:
        err = e.errors()[0]
        error = (err.get("ctx") or {}).get("error")
        message = str(error) if isinstance(error, ValueError) else err["msg"]
        key = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{key}: {message}" if key else message) from None


def validate_plugin_settings(registry: Mapping, name: str, package: str, what: str,
                             data: Mapping, context: Mapping | None = None) -> Settings:
    """`validate_settings`, after looking at each key of `data` that the settings model of
    `name` does not declare and that of another registered plug-in does: left empty (None, an
    empty text, mapping or list) it is dropped, as unset; set, it is refused with that model's
    `OWNED` text (`{name}` standing for `name`), after the `READS` text of `name`'s model when it
    has one (e.g. "engine duckdb reads the warehouse: dsn and dsn_env are for postgres"). The
    other plug-ins' modules are imported only when such a key is written. A key no plug-in
    declares is left to the model, which refuses it."""
    model = settings_model(registry, name, package, what)
    own = _keys(model)
    data = dict(data)
    foreign = set(data) - own
    for other in registry if foreign else ():
        if other == name:
            continue
        theirs = settings_model(registry, other, package, what)
        for key in sorted(foreign & (_keys(theirs) - own)):
            if data.get(key) in (None, "", {}, []):
                data.pop(key, None)
                continue
            owned = getattr(theirs, "OWNED", None)
            if owned:
                message = owned.format(name=name)
                reads = getattr(model, "READS", None)
                raise ValueError(f"{reads}: {message}" if reads else message)
    return validate_settings(registry, name, package, what, data, context)


def _keys(model: type[BaseModel]) -> set[str]:
    """The keys a settings model declares, by name and by alias."""
    return set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}


def entry_problems(registry: Mapping, package: str, what: str) -> list[str]:
    """What is wrong with the entries of `registry`: each must name a module (`module`, text
    that imports) and a settings model (`settings`, a frozen pydantic model)."""
    problems = []
    for name, entry in registry.items():
        module, settings = getattr(entry, "module", None), getattr(entry, "settings", None)
        if not isinstance(module, str) or not module:
            problems.append(f"{what} {name!r}: names no module")
            continue
        try:
            plugin_module(registry, name, package, what)
        except ImportError as e:
            problems.append(f"{what} {name!r}: its module {module!r} does not import ({e})")
            continue
        if not isinstance(settings, str) or not settings:
            problems.append(f"{what} {name!r}: names no settings model")
            continue
        try:
            model = settings_model(registry, name, package, what)
        except (ImportError, TypeError) as e:
            problems.append(f"{what} {name!r}: {e}")
            continue
        if not model.model_config.get("frozen"):
            problems.append(f"{what} {name!r}: its settings model {model.__name__} is not frozen")
    return problems
