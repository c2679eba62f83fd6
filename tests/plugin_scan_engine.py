"""A scan engine that lives outside the package, for tests/test_plugins.py: the source rows are in
another DuckDB database file (`path:`), which the engine opens itself; every aggregate runs there
(the encoded view too, in the engine's `schema`), and only each query's result crosses to the
store, as PostgreSQL's engine does. It implements the whole engine contract (core/scans.py)."""

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

import duckdb
import numpy as np
from pydantic import ConfigDict

from dp_synth_assets.core.config import EngineSpec, TableSource
from dp_synth_assets.core.scans import SchemaViews, append_result, object_columns
from dp_synth_assets.core.sql import sql
from dp_synth_assets.infra.engines import serving


class Settings(EngineSpec):
    """`path`: the DuckDB database file that holds the source table."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    path: str
    OWNED: ClassVar[str] = "path is for engine duckdb_file"


def refusal(settings: Settings, source, report) -> str | None:
    if not isinstance(source, TableSource) or source.asset is not None:
        return "engine duckdb_file reads `source: {table: ...}`, a table of its database"
    return None


@dataclass
class FileEngine(SchemaViews):
    store: duckdb.DuckDBPyConnection
    connection: duckdb.DuckDBPyConnection
    schema: str = "dp_synth"
    name = "duckdb_file"
    copies = False
    errors = (duckdb.Error,)
    fetched: int = 0  # the most rows one query returned
    created: list = field(default_factory=list)

    def fetchone(self, statement: str, params=None) -> tuple:
        self.fetched = max(self.fetched, 1)
        return self.connection.execute(statement, params).fetchone()

    def fetchnumpy(self, statement: str, params=None) -> dict[str, np.ndarray]:
        cursor = self.connection.execute(statement, params)
        names = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
        self.fetched = max(self.fetched, len(rows))
        return object_columns(names, rows)

    def execute(self, statement: str) -> None:
        self.connection.execute(statement)

    def describe(self, relation: str) -> dict[str, str]:
        rows = self.connection.execute(sql("describe_source", source=relation)).fetchall()
        return {name: sql_type for name, sql_type, *_ in rows}

    def append_counts(self, table: str, counts: str) -> None:
        append_result(self.store, table, self.fetchnumpy(counts))

    def content_summary(self, relation: str) -> str:
        return self.connection.execute(sql("content_summary", source=relation)).fetchone()[0]


@contextmanager
def open(settings: Settings, store: duckdb.DuckDBPyConnection, drop_views: bool = False):
    connection = duckdb.connect(settings.path)
    with serving(FileEngine(store, connection, settings.schema_), drop_views,
                 connection.close) as engine:
        yield engine
