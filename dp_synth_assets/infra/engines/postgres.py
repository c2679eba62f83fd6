"""The PostgreSQL scan engine (`engine: {type: postgres}`): its settings, its connector and
the engine that runs every aggregate in PostgreSQL through its own SQL (psycopg 3, imported when
the engine opens). The dialect translation it uses is `core.scans.translate` (pure text)."""

import os
from contextlib import contextmanager
from typing import ClassVar
from dataclasses import dataclass, field

import duckdb
import numpy as np
from pydantic import ConfigDict, model_validator

from ...core.config import EngineSpec, TableSource
from ...core.scans import SchemaViews, ScanError, ScanValueError, Untranslatable, \
    append_result, object_columns, translate
from ...core.sql import sql
from . import serving


class Settings(EngineSpec):
    """`dsn_env` names the environment variable holding the connection string (so no password
    sits in datasets.yaml), or `dsn` gives it; the encoded view is created in `schema`."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    # the connection string (prefer `dsn_env`: no password in datasets.yaml)
    dsn: str | None = None
    # the environment variable holding the connection string
    dsn_env: str | None = None
    # what the message of another engine says when its block sets one of these keys
    OWNED: ClassVar[str] = "dsn and dsn_env are for postgres"

    @model_validator(mode="after")
    def _connection(self) -> "Settings":
        if not (self.dsn or self.dsn_env):
            raise ValueError("engine postgres needs dsn_env (the environment variable holding "
                             "the connection string) or dsn")
        return self


def refusal(settings: Settings, source, report) -> str | None:
    """Why the engine cannot run a dataset reading `source` with `report` (None: it can)."""
    if not isinstance(source, TableSource) or source.asset is not None:
        return "engine postgres reads `source: {table: ...}`, a table of its database"
    if report is not None:
        return ("the owner-only report reads the source through DuckDB: remove `report:` for "
                "engine postgres")
    return None


@dataclass
class PostgresEngine(SchemaViews):
    """A PostgreSQL database read through its own SQL (psycopg 3): every aggregate runs in
    PostgreSQL, GROUPING SETS included, and only its result crosses the connection. The
    encoded view is a view in `schema` (created if missing). `fetched` is the largest number
    of rows one query returned (aggregates: bounded by the domain)."""

    store: duckdb.DuckDBPyConnection
    connection: object
    schema: str = "dp_synth"
    name = "postgres"
    copies = False
    fetched: int = 0
    errors: tuple = field(default=())
    created: list = field(default_factory=list)  # the views `create_view` made

    def __post_init__(self):
        import psycopg

        self.errors = (psycopg.Error, ScanError, Untranslatable)

    def _run(self, statement: str, params=None, dialect: str = "duckdb"):
        """Run `statement`, written in `dialect` (sql/'s DuckDB, translated, or PostgreSQL's
        own for the templates docs/engines.md names)."""
        import psycopg

        text = translate(statement, "postgres") if dialect == "duckdb" else statement
        try:
            cursor = self.connection.execute(text, params)
        except psycopg.Error as e:
            kind = ScanValueError if isinstance(e, psycopg.errors.DataError) else ScanError
            raise kind(f"PostgreSQL: {e}") from None
        return cursor

    def fetchone(self, statement: str, params=None) -> tuple:
        row = self._run(statement, params).fetchone()
        self.fetched = max(self.fetched, 1)
        return row

    def fetchnumpy(self, statement: str, params=None) -> dict[str, np.ndarray]:
        cursor = self._run(statement, params)
        names = [d.name for d in cursor.description]
        rows = cursor.fetchall()
        self.fetched = max(self.fetched, len(rows))
        return object_columns(names, rows)

    def execute(self, statement: str) -> None:
        self._run(statement)

    def describe(self, relation: str) -> dict[str, str]:
        cursor = self._run(sql("read_columns", columns="*", source=relation, limit=0))
        cursor.fetchall()
        types = self.connection.adapters.types
        return {d.name: (types.get(d.type_code).name if types.get(d.type_code) else
                         str(d.type_code)) for d in cursor.description}

    def content_summary(self, relation: str) -> str:
        """The change detection's private summary of `relation`, computed in PostgreSQL
        (sql/content_summary_postgres.sql: row count and sums of per-row md5 digests)."""
        return self._run(sql("content_summary_postgres", source=relation),
                         dialect="postgres").fetchone()[0]

    def append_counts(self, table: str, counts: str) -> None:
        """Run the count query in PostgreSQL and add its cells to the store's table."""
        append_result(self.store, table, self.fetchnumpy(counts))


def postgres_dsn(spec) -> str:
    """The connection string of a `postgres` engine: `dsn_env`'s environment variable (so no
    password sits in datasets.yaml), else `dsn`."""
    if spec.dsn_env is not None:
        value = os.environ.get(spec.dsn_env)
        if not value:
            raise ScanError(f"the environment variable {spec.dsn_env} (engine.dsn_env) is not "
                            "set; set it to the PostgreSQL connection string")
        return value
    return spec.dsn or ""



@contextmanager
def open(settings: Settings, store: duckdb.DuckDBPyConnection, drop_views: bool = False):
    """The engine over a new connection, closed when the block ends (after dropping the views
    it created, when `drop_views`)."""
    import psycopg

    try:
        connection = psycopg.connect(postgres_dsn(settings), autocommit=True)
    except psycopg.Error as e:
        raise ScanError(f"PostgreSQL: cannot connect: {e}") from None
    with serving(PostgresEngine(store, connection, settings.schema_), drop_views,
                 connection.close) as engine:
        yield engine
