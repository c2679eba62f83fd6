"""The DuckDB scan engine (`engine: duckdb`, the default): the source is read by the store's own
DuckDB connection (`core.scans.DuckDBEngine`), so opening it opens nothing."""

from contextlib import contextmanager
from typing import ClassVar

from pydantic import ConfigDict

from ...core.config import EngineSpec
from ...core.scans import DuckDBEngine


class Settings(EngineSpec):
    """No key beyond `type` (and `schema`, which the DuckDB engine does not use)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    # what this engine's message says before the owner's, for a key of another engine
    READS: ClassVar[str] = "engine duckdb reads the warehouse"


@contextmanager
def open(settings: Settings, store, drop_views: bool = False):
    """The engine over the store connection `store` (nothing to close)."""
    yield DuckDBEngine(store)
