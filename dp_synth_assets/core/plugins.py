"""Plug-in lookup shared by the selection methods (`methods.METHODS`) and the generation engines
(`engines.ENGINES`): one refusal message for an unregistered name, and one rule for where a
registered module lives. A leaf module: it imports nothing of the package, so `config` can
validate names without importing any method or engine.
"""

import importlib
from collections.abc import Mapping


def require_registered(registry: Mapping, name: str, what: str, also: str = "") -> None:
    """Refuse `name` unless it is a key of `registry`, naming the registered choices (and
    `also`, e.g. " or auto")."""
    if name not in registry:
        raise ValueError(f"unknown {what} {name!r}; choose one of {sorted(registry)}{also}")


def plugin_module(registry: Mapping, name: str, package: str, what: str, also: str = ""):
    """The module of the registered `name`: its `.module` under `package`, or a fully qualified
    module path when it is dotted (a plug-in living outside the package)."""
    require_registered(registry, name, what, also)
    module = registry[name].module
    return importlib.import_module(module if "." in module else f"{package}.{module}")
