"""The scan engines' connectors, one module per engine of `core.scan_engines.SCAN_ENGINES`:
each defines the engine's settings model and `open`, which connects to where the rows are."""

from contextlib import contextmanager

from ...core.plugins import plugin_module
from ...core.scan_engines import PACKAGE, SCAN_ENGINES


def engine_module(name: str):
    """The module of the scan engine `name` (a key of SCAN_ENGINES)."""
    return plugin_module(SCAN_ENGINES, name, PACKAGE, "scan engine")


@contextmanager
def serving(engine, drop_views: bool = False, close=None):
    """Yield `engine`; when the block ends, drop the views it created if `drop_views` (its
    `drop_views()`), then call `close` (its connection's, if any), even after an error."""
    try:
        yield engine
        if drop_views:
            engine.drop_views()
    finally:
        if close is not None:
            close()


@contextmanager
def open_engine(engine_spec, store, drop_views: bool = False):
    """The scan engine of a dataset (`DatasetSpec.engine`; None: DuckDB's) over the store
    connection `store`; the engine's own connection, if any, is closed when the block ends,
    after dropping the views it created when `drop_views` (the notebook API's, whose store ends
    with the run; the pipeline's encoded view stays for the next stages)."""
    name = "duckdb" if engine_spec is None else engine_spec.type
    with engine_module(name).open(engine_spec, store, drop_views) as engine:
        yield engine
