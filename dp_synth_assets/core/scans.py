"""Scan engines: where a dataset's private scans run (`engine:` in datasets.yaml).

A scan engine holds a dataset's source rows and runs every aggregate query over them; it returns
aggregates (bounded by the domain) to the store, never rows. This module holds the `ScanEngine`
contract, the DuckDB engine over the store (it opens nothing) and the dialect translation
(`translate`: sqlglot plus `REWRITES`), which only builds SQL text from the sql/ templates
written in DuckDB's dialect. Connectors live under `dp_synth_assets.infra.engines`. A
`ScanError` keeps the engine's message (which can quote a value) for the private log only. The
contract and each translated construct: docs/engines.md, "The scan engine contract"."""

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, runtime_checkable

import duckdb
import numpy as np

from .sql import bookkeeping, ident, qualified, sql


class ScanError(RuntimeError):
    """A scan engine refused a statement. The message is the engine's own (it can quote a
    value of the source): private, for the private log only."""


class ScanValueError(ScanError, ValueError):
    """The engine could not convert a value of the source (a cast, a range): the public kind
    is "a value does not fit its declared spec" (private_log.problem_kind)."""


class Untranslatable(ValueError):
    """A template uses a construct the engine's dialect has no equivalent for (docs/engines.md)."""


# --------------------------------------------------------------------------------- translation

_TEXT_TYPES = ("text", "character varying", "character", "name")

_YEAR = "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_LEAP = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
_DAY = (f"({_YEAR}-(0?[1-9]|1[0-2])-(0?[1-9]|1[0-9]|2[0-8])|{_YEAR}-(0?[13-9]|1[0-2])-(29|30)"
        f"|{_YEAR}-(0?[13578]|1[02])-31|{_LEAP}-0?2-29)")
_CLOCK = ("([ T]([01]?[0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\\.[0-9]{1,6})?)?"
          "(\\s*(z|[+-]([01]?[0-9]|2[0-3])(:?[0-5][0-9])?))?)?")
_MOMENT = f"^{_DAY}{_CLOCK}$"
# text PostgreSQL's input function of the type reads without error (docs/engines.md); ~* (any case)
SAFE_CAST_PATTERNS = {
    # plain (at most 10^299 with a two-digit exponent) or scientific (a nonzero leading digit,
    # at most 8 before the point, exponent up to 299): never out of a double's range
    "DOUBLE": "^\\s*([+-]?([0-9]{1,200}(\\.[0-9]{0,200})?(e[+-]?[0-9]{1,2})?|\\.[0-9]{1,200}"
              "(e[+-]?[0-9]{1,2})?|[1-9][0-9]{0,7}(\\.[0-9]{0,200})?e[+-]?[12]?[0-9]{1,2})"
              "|nan|[+-]?inf(inity)?)\\s*$",
    "BOOLEAN": "^(t|true|f|false|y|yes|n|no|1|0)$",
    "DATE": f"^\\s*{_DAY}{_CLOCK}\\s*$",
    "TIMESTAMP": _MOMENT, "TIMESTAMPNTZ": _MOMENT, "TIMESTAMPTZ": _MOMENT,
}


DOUBLE_MAX, DOUBLE_MIN = "1.7976931348623157e308", "2.2250738585072014e-308"  # normal doubles


def _safe_cast(node):
    """`TRY_CAST(x AS t)` as PostgreSQL reads it (docs/engines.md)."""
    from sqlglot import exp

    value = node.this
    target = node.to.copy()
    cast = exp.Cast(this=value.copy(), to=target.copy())
    pattern = SAFE_CAST_PATTERNS.get(target.this.name)
    if pattern is None:
        return cast
    text = exp.cast(value.copy(), "TEXT")
    matches = exp.RegexpILike(this=text, expression=exp.Literal.string(pattern))
    if target.this == exp.DataType.Type.BOOLEAN:  # every type through its text
        return exp.Case(ifs=[exp.If(this=matches, true=exp.Cast(this=text.copy(), to=target))])
    kind = exp.cast(exp.Anonymous(this="pg_typeof", expressions=[value.copy()]), "TEXT")
    typed = exp.Not(this=exp.In(this=kind, expressions=[exp.Literal.string(t)
                                                        for t in _TEXT_TYPES]))
    ifs = [exp.If(this=typed, true=cast), exp.If(this=matches, true=cast.copy())]
    if target.this == exp.DataType.Type.DOUBLE:  # a NUMERIC outside a double's range: NULL
        number = exp.cast(exp.cast(value.copy(), "TEXT"), "DECIMAL")  # plans for any type
        size = exp.Abs(this=number)
        beyond = exp.and_(
            exp.NEQ(this=number.copy(), expression=exp.Literal.number(0)),
            exp.or_(exp.GT(this=size.copy(), expression=exp.Literal.number(DOUBLE_MAX)),
                    exp.LT(this=size.copy(), expression=exp.Literal.number(DOUBLE_MIN))),
            exp.NEQ(this=size.copy(), expression=exp.cast(exp.Literal.string("Infinity"),
                                                          "DECIMAL")))
        numeric = exp.EQ(this=kind.copy(), expression=exp.Literal.string("numeric"))
        ifs.insert(0, exp.If(this=numeric, true=exp.Case(
            ifs=[exp.If(this=beyond, true=exp.Null())], default=cast.copy())))
    return exp.Case(ifs=ifs)


def _postgres_rewrite(node):
    """One node of a DuckDB statement as PostgreSQL reads it (docs/engines.md)."""
    from sqlglot import exp

    if isinstance(node, exp.TryCast):
        return _safe_cast(node)
    if isinstance(node, exp.Anonymous):
        name = node.name.lower()
        if name == "list_position":
            return exp.Anonymous(this="array_position", expressions=node.expressions)
        if name == "round_even":
            return exp.Anonymous(this="round", expressions=node.expressions[:1])
        if name == "hash":
            raise Untranslatable("hash(...) has no PostgreSQL equivalent (docs/engines.md)")
    if isinstance(node, exp.IsNan):
        return exp.paren(exp.EQ(this=node.this.copy(), expression=exp.cast(
            exp.Literal.string("NaN"), exp.DataType.build("DOUBLE"))), copy=False)
    if isinstance(node, exp.Typeof):
        kind = exp.cast(exp.Anonymous(this="pg_typeof", expressions=[node.this.copy()]), "TEXT")
        return exp.Case(ifs=[exp.If(this=exp.In(this=kind, expressions=[
            exp.Literal.string(t) for t in _TEXT_TYPES]), true=exp.Literal.string("VARCHAR"))],
            default=exp.Upper(this=kind.copy()))
    if isinstance(node, exp.Array) and not node.expressions:
        return exp.cast(node.copy(), exp.DataType.build("TEXT[]", dialect="postgres"))
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.INT128:
        return exp.DataType.build("DECIMAL")
    if isinstance(node, exp.Subquery) and not node.alias and isinstance(node.parent, (exp.From,
                                                                                    exp.Join)):
        node.set("alias", exp.TableAlias(this=exp.to_identifier(f"_q{id(node) % 10 ** 8}")))
    return node


def _spark_rewrite(node):
    """One node of a DuckDB statement as Spark SQL reads it (docs/engines.md)."""
    from sqlglot import exp

    if isinstance(node, exp.Anonymous):
        name = node.name.lower()
        if name == "list_position":
            return exp.Anonymous(this="array_position", expressions=node.expressions)
        if name == "round_even":
            return exp.Anonymous(this="bround", expressions=node.expressions)
        if name == "isfinite":
            value = node.expressions[0]
            if isinstance(value, (exp.Cast, exp.TryCast)) and value.to.is_type(
                    *exp.DataType.TEMPORAL_TYPES):
                return exp.paren(exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null())),
                                 copy=False)
            return exp.paren(exp.LT(this=exp.Abs(this=value.copy()), expression=exp.cast(
                exp.Literal.string("inf"), "DOUBLE")), copy=False)
        if name == "hash":
            raise Untranslatable("hash(...) has no Spark equivalent with DuckDB's values "
                                 "(docs/engines.md)")
    if isinstance(node, exp.TimeToUnix):  # epoch(x): seconds since 1970, no time zone
        value = node.this
        if isinstance(value, (exp.Cast, exp.TryCast)) and value.to.is_type("DATE"):
            return exp.Mul(this=exp.cast(exp.Anonymous(this="unix_date", expressions=[
                value.copy()]), "DOUBLE"), expression=exp.Literal.number(86400))
        return exp.Div(this=exp.cast(exp.Anonymous(this="timestampdiff", expressions=[
            exp.var("MICROSECOND"), exp.cast(exp.Literal.string("1970-01-01 00:00:00"),
                                             exp.DataType.build("TIMESTAMP_NTZ", dialect="spark")),
            value.copy()]), "DOUBLE"), expression=exp.Literal.number(1_000_000))
    if isinstance(node, exp.Typeof):
        kind = exp.Anonymous(this="typeof", expressions=[node.this.copy()])
        return exp.Case(ifs=[exp.If(this=exp.or_(*(exp.Like(
            this=kind.copy(), expression=exp.Literal.string(f"{t}%")) for t in (
                "string", "varchar", "char"))), true=exp.Literal.string("VARCHAR"))],
            default=exp.Upper(this=kind.copy()))
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1:  # lists are 1-based
        return exp.Anonymous(this="try_element_at", expressions=[node.this.copy(),
                                                                 node.expressions[0].copy()])
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.INT128:
        return exp.DataType.build("DECIMAL(38, 0)")
    if isinstance(node, exp.Create) and node.kind == "VIEW":  # session-scoped: no catalog write
        node.set("properties", exp.Properties(expressions=[exp.TemporaryProperty()]))
    return node


REWRITES = {"postgres": _postgres_rewrite, "spark": _spark_rewrite}


@lru_cache(maxsize=None)
def _read_dialect(dialect: str):
    """DuckDB's dialect as sqlglot reads it for `dialect`; for Spark, list indexes stay as
    written (1-based), which `_spark_rewrite` turns into element_at: sqlglot's own shift to
    0-based applies only where it can type the index, so `edges[(b)]` would stay 1-based."""
    if dialect != "spark":
        return "duckdb"
    from sqlglot.dialects.duckdb import DuckDB

    return type("DuckDBIndexesAsWritten", (DuckDB,), {"INDEX_OFFSET": 0})


@lru_cache(maxsize=4096)
def translate(statement: str, dialect: str, rewrite=None) -> str:
    """`statement` (DuckDB's dialect, as written in sql/) in sqlglot's `dialect`, through
    sqlglot and `rewrite` (a function of one node returning its replacement; default: the
    dialect's in `REWRITES`); `duckdb` returns it unchanged."""
    if dialect == "duckdb":
        return statement
    import sqlglot

    tree = sqlglot.parse_one(statement, read=_read_dialect(dialect))
    rewrite = rewrite or REWRITES.get(dialect)
    if rewrite is not None:  # children first, so a rewritten node holds rewritten children
        for node in reversed(list(tree.dfs())):
            new = rewrite(node)
            if new is node:
                continue
            if node is tree:
                tree = new
            else:
                node.parent.set(node.arg_key, new, node.index)
    return tree.sql(dialect=dialect)


# --------------------------------------------------------------------------------- the engines


@dataclass
class DuckDBEngine:
    """The default: the source is read by the store's own DuckDB connection (a warehouse table,
    Parquet, CSV, or a database attached through a DuckDB extension)."""

    store: duckdb.DuckDBPyConnection
    name = "duckdb"
    copies = True
    errors = (duckdb.Error,)

    def fetchone(self, statement: str, params=None) -> tuple:
        return self.store.execute(statement, params).fetchone()

    def fetchnumpy(self, statement: str, params=None) -> dict[str, np.ndarray]:
        return self.store.execute(statement, params).fetchnumpy()

    def execute(self, statement: str) -> None:
        self.store.execute(statement)

    def describe(self, relation: str) -> dict[str, str]:
        rows = self.store.execute(sql("describe_source", source=relation)).fetchall()
        return {name: sql_type for name, sql_type, *_ in rows}

    def relation(self, view: str) -> str:
        return qualified(view)

    def create_view(self, view: str, statement: str) -> None:
        self.store.execute(statement)

    def append_counts(self, table: str, counts: str) -> None:
        self.store.execute(sql("append_marginals", table=qualified(table), counts=counts))

    def content_summary(self, relation: str) -> str | None:
        """The change detection's private summary of `relation` (sql/content_summary.sql)."""
        return self.store.execute(sql("content_summary", source=relation)).fetchone()[0]


class SchemaViews:
    """The views of an engine whose views live in its own database, in its working schema
    `schema` (PostgreSQL's): `relation`, `create_view` and `drop_views` over the engine's
    `execute`, recording the views it made in `created`."""

    def relation(self, view: str) -> str:
        """The engine-side name of a view named `view` in the store's terms (its dots become
        underscores inside the working schema)."""
        return ident(self.schema) + "." + ident(view.replace(".", "__"))

    def create_view(self, view: str, statement: str) -> None:
        self.execute(sql("create_schema", schema=ident(self.schema)))
        self.execute(sql("drop_view", view=self.relation(view)))
        self.execute(statement)
        self.created.append(view)

    def drop_views(self) -> None:
        """Drop the views this engine created (a notebook run's, which end with it)."""
        for view in self.created:
            self.execute(sql("drop_view", view=self.relation(view)))
        self.created.clear()


def object_columns(names: list[str], rows: list[tuple]) -> dict[str, np.ndarray]:
    """Fetched `rows` as one object array per name of `names` (no type conversion)."""
    columns = list(zip(*rows)) if rows else [()] * len(names)
    out = {}
    for name, values in zip(names, columns):
        array = np.empty(len(values), dtype=object)
        array[:] = values
        out[name] = array
    return out


def append_result(store: duckdb.DuckDBPyConnection, table: str,
                   result: dict[str, np.ndarray]) -> None:
    """Add the cells of a count query's result to the store's marginal table `table`."""
    import pyarrow as pa

    frame = pa.table({name: pa.array(list(values)) for name, values in result.items()})
    staged = bookkeeping("counts")
    store.register(staged, frame)
    try:
        store.execute(sql("append_marginals", table=qualified(table),
                          counts=sql("read_columns", columns="*", source=ident(staged),
                                     limit="ALL")))
    finally:
        store.unregister(staged)


def views_table(view: str) -> str:
    """The store's table of engine view statements, beside the view's own store name."""
    return qualified(view.rsplit(".", 1)[0]) + "." + ident(bookkeeping("engine_views"))


def saved_view(store: duckdb.DuckDBPyConnection, view: str) -> str | None:
    """The statement an engine view `view` was created with, kept in the store, or None."""
    try:
        rows = store.execute(sql("engine_view_read", table=views_table(view)), [view]).fetchall()
    except duckdb.CatalogException:
        return None
    return rows[0][0] if rows else None


@runtime_checkable
class ScanEngine(Protocol):
    """The contract of a scan engine (docs/engines.md); DuckDBEngine is the default one."""

    store: duckdb.DuckDBPyConnection
    name: str
    copies: bool
    errors: tuple

    def fetchone(self, statement: str, params=None) -> tuple: ...
    def fetchnumpy(self, statement: str, params=None) -> dict[str, np.ndarray]: ...
    def execute(self, statement: str) -> None: ...
    def describe(self, relation: str) -> dict[str, str]: ...
    def relation(self, view: str) -> str: ...
    def create_view(self, view: str, statement: str) -> None: ...
    def append_counts(self, table: str, counts: str) -> None: ...
    def content_summary(self, relation: str) -> str | None: ...


def as_engine(con) -> ScanEngine:
    """A scan engine as is; a DuckDB connection as the DuckDB engine over it."""
    return con if isinstance(con, ScanEngine) else DuckDBEngine(con)


def store_of(con) -> duckdb.DuckDBPyConnection:
    """The store connection of an engine (a DuckDB connection is its own)."""
    return con.store if isinstance(con, ScanEngine) else con
