"""Load the project's SQL statements from `sql/` (one file per query) and fill their parameters.

The templates are package data of `dp_synth_assets` (`dp_synth_assets/sql/`, the repository's
top-level `sql/` folder), read through importlib.resources: the same code serves the source tree,
an editable install and an installed wheel.

Identifiers and literals are quoted by `ident` and `literal` before they are substituted; values
that are data are passed as DuckDB prepared-statement parameters (`?`) instead.
"""

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
    """A quoted identifier; dotted names are quoted part by part."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def literal(value: object) -> str:
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"
