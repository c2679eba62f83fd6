"""Load the project's SQL statements from `sql/` (one file per query) and fill their parameters.

The templates are package data (`dp_synth_assets/sql/`), read through importlib.resources.
Identifiers and literals are quoted by `ident`, `qualified` and `literal` before they are
substituted; data values are passed as prepared-statement parameters (`?`). A column name is one
identifier whatever it contains: `ident` never splits it; only a table name (`schema.table`) is
split, by `qualified`. Bookkeeping names never share a namespace with user names: the user's
columns are positional (`c0`, `c1`, ...) inside private tables, and working and staging tables
carry a `:` in their name (`bookkeeping`), which no dataset or source table name can contain."""

from functools import lru_cache
from importlib.resources import files

SQL_DIR = files("dp_synth_assets") / "sql"


@lru_cache(maxsize=None)
def _template(name: str) -> str:
    path = SQL_DIR / f"{name}.sql"
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()


def sql(template: str, **params: object) -> str:
    """The statement `sql/<name>.sql` with `{param}` placeholders filled."""
    return _template(template).format(**params)


def ident(name: str) -> str:
    """One quoted identifier (a column, a schema, a catalog): never split, so `a.b` is the
    column named `a.b`."""
    return '"' + name.replace('"', '""') + '"'


def sql_text(value: object) -> str:
    """How DuckDB's CAST(x AS VARCHAR) writes a declared category."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def same_identifier(names) -> list[list[str]]:
    """The groups of `names` that are one identifier to DuckDB, which compares identifiers with
    ASCII letters folded to lower case even when they are quoted (`"A"` and `"a"`; not `"Ä"`
    and `"ä"`), each in the given order; empty when every name is its own."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.translate(_ASCII_LOWER), []).append(name)
    return [group for group in groups.values() if len(group) > 1]


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def qualified(name: str) -> str:
    """A quoted table name, `[catalog.][schema.]table`, quoted part by part."""
    return ".".join(ident(part) for part in name.split("."))


def bookkeeping(name: str) -> str:
    """The name of a dp-synth working table: `dp_synth:<name>`, which no dataset or source table
    can take (their names are letters, digits and underscores)."""
    return f"dp_synth:{name}"


def literal(value: object) -> str:
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"
