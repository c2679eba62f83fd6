"""Privacy units: what one privacy budget belongs to (DESIGN.md section 5).

A budget protects the rows of a source, not a name in datasets.yaml. Each entry's privacy unit is
the normalized identity of its source, or `group:<name>` when it declares
`privacy.budget_group`. The ledger keys every row by the unit, so renaming an entry keeps its
spend and two entries on one source spend one budget.

Normal forms (identifiers are case-insensitive in DuckDB, so they are lower-cased):
- `table: t` read from the warehouse file W: `duckdb:<W resolved>:main.t` (schema `main` when
  unqualified; a catalog equal to W's default catalog name, its file stem, is dropped);
- `attach:` a DuckDB or SQLite file F, table t: `duckdb:<F resolved>:main.t` (resp. `sqlite:`), so
  attaching the warehouse itself names the same unit as a `table:` source;
- `attach:` a database server: `<type>:<connection string, key=value pairs sorted>:<table>`
  (postgres' default schema is `public`);
- `parquet:` / `csv:` path or glob: `file:<absolute path, resolved against datasets.yaml's
  folder>`.
Two entries on one source must share one `budget_group`, and entries sharing a unit must declare
the same limit; `privacy_units` refuses anything else with a RegistryError naming the entries and
the fix. Overlapping globs (`x/*.parquet` and `x/a.parquet`) are different units: a unit is the
source's name, not its bytes.
"""

from collections.abc import Mapping
from pathlib import Path

from .config import AttachSource, CsvSource, DatasetSpec, ParquetSource, RegistryError, is_uri

GROUP_PREFIX = "group:"
_DEFAULT_SCHEMA = {"duckdb": "main", "sqlite": "main", "postgres": "public"}


def _resolved(path: str, base_dir: Path) -> str:
    if is_uri(path):
        return path  # object storage: the URI as written
    p = Path(path).expanduser()
    return str((p if p.is_absolute() else Path(base_dir) / p).resolve())


def _table(name: str, default_schema: str | None, default_catalog: str | None = None) -> str:
    parts = name.lower().split(".")
    if len(parts) == 3 and default_catalog is not None and parts[0] == default_catalog.lower():
        parts = parts[1:]
    if len(parts) == 1 and default_schema is not None:
        parts = [default_schema, *parts]
    return ".".join(parts)


def _connection(text: str) -> str:
    """A libpq/MySQL `key=value ...` string with its pairs sorted; a URI is kept as written."""
    pairs = text.split()
    if pairs and all("=" in p for p in pairs):
        return " ".join(sorted(pairs))
    return text.strip()


def source_identity(spec: DatasetSpec, base_dir: str | Path, warehouse: str | Path) -> str:
    """The normalized identity of a dataset's source (module docstring): equal exactly when two
    specs name the same table, file or glob, whatever the spelling."""
    src, base_dir = spec.source, Path(base_dir)
    if isinstance(src, (ParquetSource, CsvSource)):
        return "file:" + _resolved(src.parquet if isinstance(src, ParquetSource) else src.csv,
                                   base_dir)
    if isinstance(src, AttachSource):
        if src.type in ("duckdb", "sqlite"):
            target = _resolved(src.attach, base_dir)
            catalog = Path(target).stem if src.type == "duckdb" else None
            return f"{src.type}:{target}:{_table(src.table, 'main', catalog)}"
        return f"{src.type}:{_connection(src.attach)}:{_table(src.table, _DEFAULT_SCHEMA.get(src.type))}"
    target = str(Path(warehouse).expanduser().resolve())
    return f"duckdb:{target}:{_table(src.table, 'main', Path(target).stem)}"


def privacy_unit(spec: DatasetSpec, base_dir: str | Path, warehouse: str | Path) -> str:
    """The unit a dataset's budget belongs to: its budget group, else its source's identity."""
    if spec.privacy.budget_group is not None:
        return GROUP_PREFIX + spec.privacy.budget_group
    return source_identity(spec, base_dir, warehouse)


def group_name(unit: str) -> str | None:
    """The budget group a unit names, or None for a source identity."""
    return unit[len(GROUP_PREFIX):] if unit.startswith(GROUP_PREFIX) else None


def privacy_units(registry: Mapping[str, DatasetSpec], base_dir: str | Path,
                  warehouse: str | Path) -> dict[str, str]:
    """Each entry's privacy unit, after checking that entries on one source share one
    `budget_group` and that entries sharing a unit declare the same limit (RegistryError)."""
    by_source: dict[str, list[str]] = {}
    for name, spec in registry.items():
        by_source.setdefault(source_identity(spec, base_dir, warehouse), []).append(name)
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
    units = {name: privacy_unit(spec, base_dir, warehouse) for name, spec in registry.items()}
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
