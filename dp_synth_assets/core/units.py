"""Privacy units: what one privacy budget belongs to.

A budget protects the rows of a source, not a name in datasets.yaml and not a path on one
machine. Each entry's privacy unit is the normalized identity of its source (`source_identity`), or
`group:<name>` when it declares `privacy.budget_group`; no identity holds the absolute path of a
file the project holds, nor a secret. `privacy_units` refuses two entries on one source without
a shared `budget_group`, or one unit with two limits (RegistryError naming entries and fix).
`path_identity` gives the older absolute-path name, counted as an alias by the ledger. The
normal forms: docs/decisions/0001-privacy-unit.md, "As implemented"."""

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

from .config import AttachSource, CsvSource, DatasetSpec, ParquetSource, RegistryError, is_uri

GROUP_PREFIX = "group:"
DEFAULT_WAREHOUSE_NAME = "default"
_DEFAULT_SCHEMA = {"duckdb": "main", "sqlite": "main", "postgres": "public", "spark": "default"}
# connection settings that say where or as whom, not which data: left out of a unit
_LOCATION_KEYS = {"user", "password", "host", "hostaddr", "port", "passfile", "sslmode",
                  "sslcert", "sslkey", "sslrootcert", "sslpassword", "connect_timeout"}


def checked_warehouse_name(name: str) -> str:
    """The warehouse's name, or a RegistryError: letters, digits, `_`, `-` and `.`, at most
    100 characters (it becomes part of every unit of its tables)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", name):
        raise RegistryError(
            f"the warehouse name {name!r} is not a name: use letters, digits, '_', '-' and '.' "
            f"(at most 100), e.g. 'analytics-prod'. It names the warehouse's tables in the "
            f"privacy ledger (DP_SYNTH_WAREHOUSE_NAME, the factory's and the Component's "
            f"`warehouse_name`), so keep it once chosen.")
    return name


def _absolute(path: str, base_dir: Path) -> str:
    p = Path(path).expanduser()
    return str((p if p.is_absolute() else Path(base_dir) / p).resolve())


def _resolved(path: str, base_dir: Path) -> str:
    if is_uri(path):
        return path  # object storage: the URI as written
    return _absolute(path, base_dir)


def _portable(path: str, base_dir: Path) -> str:
    """A file's name in a unit: a URI as written; a path relative to `base_dir` (the registry's
    folder, resolved) when it lies inside it, else absolute."""
    if is_uri(path):
        return path
    absolute, base = Path(_absolute(path, base_dir)), Path(base_dir).resolve()
    try:
        return absolute.relative_to(base).as_posix()
    except ValueError:
        return str(absolute)


def _file(src: ParquetSource | CsvSource) -> str:
    return src.parquet if isinstance(src, ParquetSource) else src.csv


def _table(name: str, default_schema: str | None, default_catalog: str | None = None) -> str:
    parts = name.lower().split(".")
    if len(parts) == 3 and default_catalog is not None and parts[0] == default_catalog.lower():
        parts = parts[1:]
    if len(parts) == 1 and default_schema is not None:
        parts = [default_schema, *parts]
    return ".".join(parts)


def _connection(text: str, keep_location: bool = True) -> str:
    """A libpq/MySQL `key=value ...` string with its pairs sorted (without the location and
    credential keys unless `keep_location`); a URI is kept as written, without its password."""
    pairs = text.split()
    if pairs and all("=" in p for p in pairs):
        return " ".join(sorted(p for p in pairs
                               if keep_location or p.split("=", 1)[0].lower() not in _LOCATION_KEYS))
    text = text.strip()
    if not keep_location and "://" in text:
        scheme, rest = text.split("://", 1)
        return f"{scheme}://{rest.rsplit('@', 1)[-1].split('/', 1)[-1]}"  # the database
    return text


def source_identity(spec: DatasetSpec, base_dir: str | Path, warehouse: str | Path,
                    warehouse_name: str = DEFAULT_WAREHOUSE_NAME) -> str:
    """The normalized identity of a dataset's source (0001-privacy-unit.md): equal exactly when two
    specs name the same table, file or glob, whatever the spelling and wherever the project
    lies. `warehouse`: the warehouse file (its stem is the default catalog; attaching it is
    reading the warehouse); `warehouse_name`: the name the user gives the warehouse."""
    src, base_dir = spec.source, Path(base_dir)
    if isinstance(src, (ParquetSource, CsvSource)):
        return "file:" + _portable(_file(src), base_dir)
    if isinstance(src, AttachSource):
        if src.type in ("duckdb", "sqlite"):
            target = _resolved(src.attach, base_dir)
            if src.type == "duckdb" and target == _absolute(str(warehouse), base_dir):
                return f"table:{warehouse_name}:{_table(src.table, 'main', Path(target).stem)}"
            catalog = Path(target).stem if src.type == "duckdb" else None
            return (f"{src.type}:{_portable(src.attach, base_dir)}:"
                    f"{_table(src.table, 'main', catalog)}")
        return (f"{src.type}:{_connection(src.attach, keep_location=False)}:"
                f"{_table(src.table, _DEFAULT_SCHEMA.get(src.type))}")
    engine = spec.engine.type
    if engine == "postgres":
        return f"postgres:{spec.engine.dsn_env or warehouse_name}:{_table(src.table, 'public')}"
    if engine == "spark":
        return f"spark:{warehouse_name}:{_table(src.table, 'default')}"
    return f"table:{warehouse_name}:{_table(src.table, 'main', Path(warehouse).stem)}"


def path_identity(spec: DatasetSpec, base_dir: str | Path, warehouse: str | Path) -> str:
    """The identity earlier releases gave a source, by absolute paths (0001-privacy-unit.md): the
    ledger's rows recorded under it still count for the source's unit."""
    src, base_dir = spec.source, Path(base_dir)
    if isinstance(src, (ParquetSource, CsvSource)):
        return "file:" + _resolved(_file(src), base_dir)
    if isinstance(src, AttachSource) and src.type in ("duckdb", "sqlite"):
        target = _resolved(src.attach, base_dir)
    elif isinstance(src, AttachSource):
        return f"{src.type}:{_connection(src.attach)}:{_table(src.table, _DEFAULT_SCHEMA.get(src.type))}"
    else:
        target = str(Path(warehouse).expanduser().resolve())
    kind = src.type if isinstance(src, AttachSource) else "duckdb"
    return f"{kind}:{target}:{_table(src.table, 'main', Path(target).stem if kind == 'duckdb' else None)}"


def alias_digest(identity: str) -> str:
    """How an earlier name of a source is kept in configuration: its SHA-256 (an earlier name
    of a server source held its connection string, password included)."""
    return "sha256:" + hashlib.sha256(identity.encode()).hexdigest()


def aliases(registry: Mapping[str, DatasetSpec], base_dir: str | Path,
            warehouse: str | Path, warehouse_name: str = DEFAULT_WAREHOUSE_NAME
            ) -> dict[str, tuple[str, ...]]:
    """Each entry's earlier names of its source (`path_identity`, as `alias_digest`s) where they
    differ from its identity: the ledger counts rows recorded under them for the entry's unit."""
    found = {}
    for name, spec in registry.items():
        old = path_identity(spec, base_dir, warehouse)
        if old != source_identity(spec, base_dir, warehouse, warehouse_name):
            found[name] = (alias_digest(old),)
    return found


def privacy_unit(spec: DatasetSpec, base_dir: str | Path, warehouse: str | Path,
                 warehouse_name: str = DEFAULT_WAREHOUSE_NAME) -> str:
    """The unit a dataset's budget belongs to: its budget group, else its source's identity."""
    if spec.privacy.budget_group is not None:
        return GROUP_PREFIX + spec.privacy.budget_group
    return source_identity(spec, base_dir, warehouse, warehouse_name)


def group_name(unit: str) -> str | None:
    """The budget group a unit names, or None for a source identity."""
    return unit[len(GROUP_PREFIX):] if unit.startswith(GROUP_PREFIX) else None


def privacy_units(registry: Mapping[str, DatasetSpec], base_dir: str | Path,
                  warehouse: str | Path, warehouse_name: str = DEFAULT_WAREHOUSE_NAME
                  ) -> dict[str, str]:
    """Each entry's privacy unit (`privacy_unit`), the registry checked first.

    Raises:
        RegistryError: entries on one source do not share one `budget_group`, or entries
            sharing a unit declare different limits; the message names the entries and the fix.
    """
    by_source: dict[str, list[str]] = {}
    for name, spec in registry.items():
        by_source.setdefault(source_identity(spec, base_dir, warehouse, warehouse_name),
                             []).append(name)
    for source, names in by_source.items():
        groups = {registry[n].privacy.budget_group for n in names}
        if len(names) > 1 and (len(groups) > 1 or None in groups):
            listed = " and ".join(repr(n) for n in names)
            raise RegistryError(
                f"datasets {listed} read the same source ({source.split(':', 1)[0]} "
                f"{source.split(':', 1)[1]}), so they must spend one privacy budget, but "
                f"{'none declares' if groups == {None} else 'they do not share'} a budget group. "
                f"Give each of them the same `privacy.budget_group: <name>` (and the same "
                f"`privacy.limit`), or remove all but one entry."
            )
    units = {name: privacy_unit(spec, base_dir, warehouse, warehouse_name)
             for name, spec in registry.items()}
    by_unit: dict[str, list[str]] = {}
    for name, unit in units.items():
        by_unit.setdefault(unit, []).append(name)
    for unit, names in by_unit.items():
        limits = {(registry[n].privacy.limit.epsilon, registry[n].privacy.limit.delta)
                  for n in names}
        if len(limits) > 1:
            described = ", ".join(f"{n!r}: epsilon {registry[n].privacy.limit.epsilon:g}, delta "
                                  f"{registry[n].privacy.limit.delta:g}" for n in names)
            raise RegistryError(
                f"datasets in budget group {group_name(unit)!r} declare different limits "
                f"({described}); one budget has one limit: give every entry of the group the "
                f"same `privacy.limit`."
            )
    return units
