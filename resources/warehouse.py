"""The warehouse resource: the one place that opens DuckDB connections, and where public
artifacts are written.

DuckDB locks its database file per process, so connections are short-lived and opening retries
while another process holds the lock: the wait is logged every `lock_report_seconds` and ends
after `lock_timeout_seconds` in a `WarehouseError` naming the holder and the fix. A missing
warehouse is never created by a read-only connection nor with `create=False`; a file DuckDB
cannot open raises a `WarehouseError` naming the file and the fix. The private and public zones
it holds (tables, `private_dir`, `public_dir`, object-store URLs): docs/where-data-lives.md.

A connection gets the DuckDB `memory_limit` the deployment sets (`duckdb_memory_limit`;
docs/deploy.md, "How large a table")."""

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb

from dp_synth_assets.core.source import SourceError
from dp_synth_assets.infra.store import location, make_folder


class WarehouseError(SourceError):
    """The warehouse file cannot be opened: missing, locked past the timeout, or not a DuckDB
    database. Its `public` text names the file, the holder of a lock and the fix (no data);
    DuckDB's own message is the `detail`."""


HOLDER = re.compile(r"PID (\d+)")
MEMORY_LIMIT_ENV = "DP_SYNTH_DUCKDB_MEMORY_LIMIT"


def _holder(message: str) -> str:
    """'PID 123 (command)' from DuckDB's lock conflict message, or 'another process'."""
    from dp_synth_assets.infra.locks import describe_processes

    found = HOLDER.search(message)
    return describe_processes([int(found.group(1))] if found else [])


class WarehouseResource(dg.ConfigurableResource):
    """database: the DuckDB file. public_dir: the public-zone folder (a path or an object-store
    URL). private_dir: the private zone's folder (a path or a URL; default: `private` beside the
    database file). base_dir: where relative Parquet/CSV source paths resolve (the folder of
    datasets.yaml)."""

    database: str
    public_dir: str
    base_dir: str = "."
    private_dir: str | None = None
    lock_timeout_seconds: float = 120.0
    lock_report_seconds: float = 5.0
    # how long a run waits for another run of the same dataset (one at a time) before it gives up
    run_wait_seconds: float = 600.0
    # the environment variable holding the change-detection secret (64 hex digits), which a
    # secret store fills in a container; unset or empty: a file in the private zone
    change_secret_env: str | None = "DP_SYNTH_CHANGE_SECRET"
    # DuckDB's memory_limit for every connection ("2GB", "75%"); None: the environment
    # variable MEMORY_LIMIT_ENV, else DuckDB's own default
    memory_limit: str | None = None

    def duckdb_memory_limit(self) -> str | None:
        """DuckDB's `memory_limit` for every connection: the field, else the environment
        variable MEMORY_LIMIT_ENV, else None (DuckDB's own default, 80% of the machine). Its
        buffer pool grows with the table scanned, so a container shared with the run's Python
        may want less; too little fails the queries that cannot spill (docs/deploy.md)."""
        return self.memory_limit or os.environ.get(MEMORY_LIMIT_ENV) or None

    @contextmanager
    def connect(self, read_only: bool = False, lock_timeout_seconds: float | None = None,
                create: bool = True, log=None):
        """A short-lived connection; waits up to the lock timeout for another process's lock,
        reporting the wait through `log` (default: Dagster's logger) while it lasts. A missing
        database file is created only by a writable connection with `create` (module doc)."""
        database = Path(self.database)
        if not database.exists() and (read_only or not create):
            raise WarehouseError(
                f"the warehouse {database.resolve()} does not exist (moved or deleted?). Point "
                "DP_SYNTH_WAREHOUSE (the warehouse resource's `database`) at it, or load the "
                "source first; nothing was created in its place")
        database.parent.mkdir(parents=True, exist_ok=True)
        wait = self.lock_timeout_seconds if lock_timeout_seconds is None else lock_timeout_seconds
        log = log or dg.get_dagster_logger().warning
        started = time.monotonic()
        reported = started
        while True:
            try:
                limit = self.duckdb_memory_limit()
                con = duckdb.connect(self.database, read_only=read_only,
                                     config={"memory_limit": limit} if limit else {})
                break
            except (duckdb.InvalidInputException, duckdb.ParserException) as e:
                raise WarehouseError(
                    f"DuckDB refuses the warehouse's memory limit "
                    f"{self.duckdb_memory_limit()!r}: give a size such as '2GB' or a share such "
                    f"as '75%' (the warehouse resource's `memory_limit` or {MEMORY_LIMIT_ENV})",
                    detail=str(e)) from None
            except duckdb.IOException as e:
                text = str(e)
                if "lock" not in text.lower():
                    raise WarehouseError(
                        f"the warehouse {database.resolve()} cannot be opened: it is not a "
                        "readable DuckDB database (truncated, overwritten, another file or no "
                        "permission). Restore it from a backup or point DP_SYNTH_WAREHOUSE at "
                        "the right file", detail=text) from None
                now = time.monotonic()
                if now - started > wait:
                    raise WarehouseError(
                        f"the warehouse {database.resolve()} is locked by {_holder(text)} for "
                        f"over {wait:g} s: DuckDB lets one process write it at a time. Wait for "
                        "that process to finish, stop it if it is stuck, or raise the "
                        "warehouse's `lock_timeout_seconds`", detail=text) from None
                if now - reported >= self.lock_report_seconds:
                    reported = now
                    log(f"waiting for DuckDB's lock on the warehouse {database}, held by "
                        f"{_holder(text)}: {now - started:.0f} s of {wait:g} s")
                time.sleep(0.2)
        try:
            yield con
        finally:
            con.close()

    def public_path(self, dataset: str, name: str):
        path = location(self.public_dir) / dataset / name
        make_folder(path.parent)
        return path

    def private_root(self):
        """The private zone's folder: `private_dir`, else `<folder of database>/private`."""
        if self.private_dir:
            return location(self.private_dir)
        return Path(self.database).resolve().parent / "private"

    def private_path(self, dataset: str, name: str):
        """A file in the private zone (owner-only outputs such as the utility report):
        `<private_root>/<dataset>/<name>`."""
        path = self.private_root() / dataset / name
        make_folder(path.parent)
        return path
