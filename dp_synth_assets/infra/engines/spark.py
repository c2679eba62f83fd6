"""The Spark scan engine (`engine: {type: spark}`): its settings, its connector (the session)
and the engine that runs every aggregate as Spark SQL (pyspark, imported when the engine opens).
The dialect translation it uses is `core.scans.translate` (pure text)."""

from contextlib import contextmanager
from typing import ClassVar
from dataclasses import dataclass, field

import duckdb
import numpy as np
from pydantic import ConfigDict, Field, model_validator

from ...core.config import EngineSpec, ParquetSource, TableSource
from ...core.scans import ScanError, ScanValueError, Untranslatable, append_result, \
    object_columns, saved_view, translate, views_table
from ...core.sql import ident, qualified, sql
from . import serving


class Settings(EngineSpec):
    """The session is Spark Connect's `remote` (sc://host:15002), or built with `master` and
    `conf`; neither: the process's active session, or a local one."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    # the master to build a session with
    master: str | None = None
    # Spark Connect's address (`sc://host:15002`)
    remote: str | None = Field(default=None, pattern=r"^sc://")
    # the session's settings, with `master`
    conf: dict[str, str] = {}
    # what the message of another engine says when its block sets one of these keys
    OWNED: ClassVar[str] = "master, remote and conf are for engine spark"
    # what this engine's message says before the owner's, for a key of another engine
    READS: ClassVar[str] = "engine spark reads its session's catalog"

    @model_validator(mode="after")
    def _session(self) -> "Settings":
        if self.master and self.remote:
            raise ValueError("engine spark takes `remote` (Spark Connect) or `master`, not both")
        return self


def refusal(settings: Settings, source, report) -> str | None:
    """Why the engine cannot run a dataset reading `source` with `report` (None: it can)."""
    if not isinstance(source, (TableSource, ParquetSource)) or source.asset is not None:
        return ("engine spark reads `source: {table: ...}`, a table of its database, or "
                "`source: {parquet: path}`")
    if report is not None:
        return ("the owner-only report reads the source through DuckDB: remove `report:` for "
                "engine spark")
    return None


def _spark_errors() -> tuple:
    from pyspark.errors import PySparkException

    try:
        from py4j.protocol import Py4JError
    except ImportError:  # Spark Connect's client has no JVM gateway
        return (PySparkException,)
    return (PySparkException, Py4JError)


@dataclass
class SparkEngine:
    """A Spark session (local, a cluster master, or Spark Connect) that runs every aggregate
    as Spark SQL: the source is a table of its catalog or a Parquet path read by Spark, and
    only the aggregates' results are collected. The encoded view is a temporary view of the
    session (nothing is written to the catalog); its statement is kept in the store
    (`sql/engine_views.sql`), so an engine of another process (a later pipeline stage)
    creates it again in its own session. `fetched` is the largest number of rows one query
    returned (aggregates: bounded by the domain)."""

    store: duckdb.DuckDBPyConnection
    session: object
    name = "spark"
    copies = False
    fetched: int = 0
    errors: tuple = field(default=())
    native: tuple = field(default=())  # pyspark's own errors
    created: list = field(default_factory=list)  # the views this engine created

    def __post_init__(self):
        self.native = _spark_errors()
        self.errors = self.native + (ScanError, Untranslatable)
        # pyspark logs an error's message (which can quote a value) to stderr, which Dagster
        # captures: the message goes to the private log through ScanError instead
        try:
            from pyspark.logger import PySparkLogger
        except ImportError:  # Spark 3.5 has no such loggers
            PySparkLogger = None
        for logger in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            if PySparkLogger is not None:
                PySparkLogger.getLogger(logger).disabled = True
        # in local mode the executors log a failed task's error (and its value) to this
        # process's stderr: only fatal errors are logged there
        context = getattr(self.session, "sparkContext", None) if not _is_remote(
            self.session) else None
        if context is not None and context.master.startswith("local"):
            context.setLogLevel("FATAL")

    def _frame(self, statement: str, dialect: str = "duckdb"):
        """The frame of `statement`, written in `dialect` (sql/'s DuckDB, translated, or Spark
        SQL's own for the templates docs/engines.md names)."""
        text = translate(statement, "spark") if dialect == "duckdb" else statement
        try:
            return self.session.sql(text)
        except self.native as e:
            raise _spark_error(e) from None

    def _collect(self, statement: str, dialect: str = "duckdb") -> tuple[list[str], list]:
        frame = self._frame(statement, dialect)
        try:
            return frame.columns, frame.collect()
        except self.native as e:
            raise _spark_error(e) from None

    def fetchone(self, statement: str, params=None) -> tuple:
        _, rows = self._collect(_bind(statement, params))
        self.fetched = max(self.fetched, len(rows))
        return tuple(rows[0]) if rows else None

    def fetchnumpy(self, statement: str, params=None) -> dict[str, np.ndarray]:
        names, rows = self._collect(_bind(statement, params))
        self.fetched = max(self.fetched, len(rows))
        return object_columns(names, [tuple(r) for r in rows])

    def execute(self, statement: str) -> None:
        self._collect(statement)

    def describe(self, relation: str) -> dict[str, str]:
        frame = self._frame(sql("read_columns", columns="*", source=relation, limit=0))
        try:
            return {f.name: f.dataType.simpleString().upper() for f in frame.schema.fields}
        except self.native as e:
            raise _spark_error(e) from None

    def relation(self, view: str) -> str:
        """The session's temporary view for the store's view name `view` (its dots become
        double underscores), created again from the store's statement if this session lacks
        it."""
        if view not in self.created:
            statement = saved_view(self.store, view)
            if statement is not None:
                try:  # a stale statement (the source changed) is replaced by create_view
                    self.execute(statement)
                    self.created.append(view)
                except ScanError:
                    pass
        return ident(view.replace(".", "__"))

    def create_view(self, view: str, statement: str) -> None:
        self.execute(statement)
        self.created.append(view)
        schema = view.rsplit(".", 1)[0]
        self.store.execute(sql("create_schema", schema=qualified(schema)))
        table = views_table(view)
        self.store.execute(sql("engine_views", table=table))
        self.store.execute(sql("engine_view_save", table=table), [view, statement])

    def content_summary(self, relation: str) -> str:
        """The change detection's private summary of `relation`, computed in Spark
        (sql/content_summary_spark.sql: row count and exact sums of the two 64-bit halves of
        each row's md5 digest, an aggregate independent of the rows' order and partitioning)."""
        rows = translate(sql("read_columns", columns="*", source=relation, limit="ALL"), "spark")
        _, result = self._collect(sql("content_summary_spark", rows=rows), dialect="spark")
        return result[0][0]

    def drop_views(self) -> None:
        """Drop the views this engine created (a notebook run's, which end with it)."""
        for view in self.created:
            self.execute(sql("drop_view", view=ident(view.replace(".", "__"))))
        self.created.clear()

    def append_counts(self, table: str, counts: str) -> None:
        """Run the count query in Spark and add its cells to the store's table."""
        append_result(self.store, table, self.fetchnumpy(counts))


def _is_remote(session) -> bool:
    """A Spark Connect session (no JVM in this process)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def _bind(statement: str, params) -> str:
    if params:
        raise ScanError("the Spark engine runs statements without parameters")
    return statement


def _spark_error(e: Exception) -> ScanError:
    """A Spark error as a private ScanError: a value error when its SQLSTATE is of class 22
    (data exception: a cast, an overflow), as PostgreSQL's DataError."""
    state = getattr(e, "getSqlState", lambda: None)() or ""
    kind = ScanValueError if state.startswith("22") else ScanError
    return kind(f"Spark: {e}")



def spark_session(spec):
    """The Spark session of a `spark` engine: Spark Connect at `remote`, else the builder's
    session with `master` and `conf` (the process's active session when there is one: a
    session the user created first is the one used)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if spec.remote is not None:
        builder = builder.remote(spec.remote)
    elif spec.master is not None:
        builder = builder.master(spec.master)
    for key, value in spec.conf.items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except _spark_errors() as e:
        raise ScanError(f"Spark: cannot start or reach the session: {e}") from None


@contextmanager
def open(settings: Settings, store: duckdb.DuckDBPyConnection, drop_views: bool = False):
    """The engine over the process's session (it outlives the run), dropping the views it
    created when the block ends if `drop_views`."""
    with serving(SparkEngine(store, spark_session(settings)), drop_views) as engine:
        yield engine
