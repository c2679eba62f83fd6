"""The warehouse resource: the one place that opens DuckDB connections, and where public
artifacts are written.

DuckDB locks its database file per process, so connections are short-lived (closed in `finally`)
and opening retries for a while when another process (a concurrent run, a sensor) holds the lock.
The private zone lives in the warehouse (source, `private.*` views and tables); the public zone is
`synthetic.*` tables and the `public_dir` folder (plans, selections, measurements, models,
synthetic Parquet, validation results).
"""

import time
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb


class WarehouseResource(dg.ConfigurableResource):
    """database: the DuckDB file. public_dir: the public-zone folder. base_dir: where relative
    Parquet/CSV source paths resolve (the folder of datasets.yaml)."""

    database: str
    public_dir: str
    base_dir: str = "."
    lock_timeout_seconds: float = 120.0
    # how long a run waits for another run of the same dataset (one at a time) before it gives up
    run_wait_seconds: float = 600.0

    @contextmanager
    def connect(self, read_only: bool = False, lock_timeout_seconds: float | None = None):
        """A short-lived connection; waits up to the lock timeout for another process's lock."""
        Path(self.database).parent.mkdir(parents=True, exist_ok=True)
        wait = self.lock_timeout_seconds if lock_timeout_seconds is None else lock_timeout_seconds
        deadline = time.monotonic() + wait
        while True:
            try:
                con = duckdb.connect(self.database, read_only=read_only)
                break
            except duckdb.IOException as e:
                if "lock" not in str(e).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            yield con
        finally:
            con.close()

    def public_path(self, dataset: str, name: str) -> Path:
        path = Path(self.public_dir) / dataset / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def private_path(self, dataset: str, name: str) -> Path:
        """A file in the private zone, beside the warehouse file (owner-only outputs such as the
        utility report): `<folder of database>/private/<dataset>/<name>`."""
        path = Path(self.database).resolve().parent / "private" / dataset / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path
