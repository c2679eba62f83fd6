"""One run per dataset at a time: the lock file `<public_dir>/<dataset>/run.lock`, or, when the
privacy ledger is in PostgreSQL, the dataset's row of the ledger schema's `run_locks` table
(`dataset_lock` picks it: in a container deployment, or with the public zone on object storage,
a file is not a lock that every run sees), or, with the public zone on an object store and the
ledger elsewhere, the object `run.lock` written with conditional requests
(`ObjectStoreDatasetLock`).

A lock, rather than Dagster's run or tag concurrency, because it holds the same way under every
executor (in-process, multiprocess, one pod per step), for runs launched by the CLI, the UI, a
sensor or `dagster.materialize`, and without the daemon's queued run coordinator.
"""

import json
import multiprocessing
import os
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from ..core.sql import sql
from .ledger_store import PostgresDatabase, _key
from .locks import owner_alive, owner_id
from .store import (atomic_write, exclusive_lock, is_remote, location, object_version,
                    replace_object)

LOCK = "run.lock"
DEFAULT_RUN_WAIT_SECONDS = 600.0


class RunWaitTimeout(TimeoutError):
    """Another run of the dataset held it longer than the wait allowed (the message names it)."""


def run_owner() -> str:
    """The process whose death frees the dataset a run holds ('host:pid:start'): the run
    worker, i.e. the parent of a step run by a multiprocess executor, else this process."""
    parent = multiprocessing.parent_process()
    return owner_id(parent.pid if parent is not None else None)


class DatasetLock:
    """One run of a dataset at a time: `<root>/run.lock` names the run holding the dataset.

    A run takes it at its first step (before the ledger reservation) and keeps it until its last
    step publishes, or until a step fails; every step of the run takes it again (re-entrant by
    run id). Another run waits, saying once whom it waits for, and gives up with
    `RunWaitTimeout` after `timeout` seconds. A lock whose owner process is gone (this host) or
    whose run `finished(run_id)` reports ended is stale and taken over. The file is read and
    written under an flock of `<root>/run.lock.guard`, so two runs never both take it."""

    def __init__(self, root: str | os.PathLike, dataset: str):
        self.root, self.dataset = Path(root), dataset
        self.path = self.root / LOCK

    # -- where the holder is kept (a file here; a table row in DatabaseDatasetLock)

    @contextmanager
    def _guarded(self):
        """Exclusive access to the holder, for one read-modify-write."""
        self.root.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.path.with_name(LOCK + ".guard"), mode=0o644):
            yield

    def holder(self) -> dict | None:
        try:
            held = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return held if isinstance(held, dict) and held.get("run_id") else None

    def _take(self, run_id: str, owner: str) -> None:
        atomic_write(self.path, json.dumps({"run_id": run_id, "owner": owner}).encode(),
                     mode=0o644)

    def _free(self) -> None:
        self.path.unlink(missing_ok=True)

    def _take_over(self, held: dict | None, run_id: str, owner: str) -> bool:
        """Take the dataset from `held` (None: nobody holds it), under `_guarded`; False when
        another run took it first (only where the guard does not exclude other runs)."""
        if held is not None:
            self._free()
        self._take(run_id, owner)
        return True

    def _manual_fix(self) -> str:
        return f"delete {self.path}"

    # -- the lock

    def _stale(self, held: dict, finished) -> bool:
        if owner_alive(str(held.get("owner", ""))) is False:
            return True
        return bool(finished is not None and finished(held["run_id"]))

    def acquire(self, run_id: str, owner: str | None = None,
                timeout: float = DEFAULT_RUN_WAIT_SECONDS, finished=None, log=None,
                poll: float = 0.5, wait_setting: str = "warehouse resource, run_wait_seconds"
                ) -> bool:
        """Hold the dataset for `run_id`; returns True when the run takes it now (its first
        step, or a stale lock taken over), False when it held it already. `wait_setting`: where
        the caller sets `timeout`, named in the timeout's message."""
        owner = owner or run_owner()
        deadline = time.monotonic() + timeout
        waited = None
        while True:
            with self._guarded():
                held = self.holder()
                if held is not None and held["run_id"] == run_id:
                    return False
                if held is None or self._stale(held, finished):
                    if held is not None and log:
                        log(f"dataset {self.dataset!r}: run {held['run_id']} left the dataset "
                            "held and has ended; taking it over")
                    if not self._take_over(held, run_id, owner):
                        continue  # another run took it first: read who holds it
                    if waited and log:
                        log(f"dataset {self.dataset!r}: run {waited} finished; this run goes on")
                    return True
            if waited != held["run_id"]:
                waited = held["run_id"]
                if log:
                    log(f"dataset {self.dataset!r}: waiting for run {waited} to finish (one run "
                        f"per dataset at a time; gives up after {timeout:g} s)")
            if time.monotonic() > deadline:
                raise RunWaitTimeout(
                    f"dataset {self.dataset!r}: run {held['run_id']} (process "
                    f"{held.get('owner', '?')}) still holds it after {timeout:g} s; one run per "
                    f"dataset runs at a time. Retry when it has finished, or raise the wait "
                    f"({wait_setting}). If that run is dead on another "
                    f"host, {self._manual_fix()}")
            time.sleep(poll)

    def release(self, run_id: str) -> bool:
        """Free the dataset if `run_id` holds it; returns whether it did."""
        with self._guarded():
            held = self.holder()
            if held is None or held["run_id"] != run_id:
                return False
            self._free()
            return True


class DatabaseDatasetLock(DatasetLock):
    """`DatasetLock` (same interface and semantics) kept in the dataset's row of the table
    `run_locks` of a PostgreSQL ledger's schema (`database`, a `ledger_store.PostgresDatabase`):
    each read-modify-write is one transaction under the dataset's transaction-level advisory
    lock, so runs on any host exclude each other. A holder whose process is gone is seen from
    its own host; from any other host, once Dagster reports its run `finished` (a run worker
    killed in a container is marked failed by Dagster's run monitoring)."""

    def __init__(self, database: PostgresDatabase, dataset: str):
        self.database, self.dataset = database, dataset
        self._conn = None

    @contextmanager
    def _guarded(self):
        db = self.database
        conn = db.connect("dp-synth run lock")
        try:
            with db.errors(), conn.transaction():
                conn.execute(sql("ledger_pg_run_lock_xact"),
                             (_key("run lock", db.schema), _key("dataset", self.dataset)))
                self._conn = conn
                try:
                    yield
                finally:
                    self._conn = None
        finally:
            conn.close()

    def _table_missing(self) -> bool:
        found = self._conn.execute(sql("ledger_pg_exists"),
                                   (self.database.schema, "run_locks")).fetchone()[0]
        return not found

    def holder(self) -> dict | None:
        if self._conn is None:
            with self._guarded():
                return self.holder()
        if self._table_missing():
            return None
        found = self._conn.execute(sql("ledger_pg_run_lock_holder", schema=self.database.quoted),
                                   (self.dataset,)).fetchone()
        return None if found is None else {"run_id": found[0], "owner": found[1]}

    def _take(self, run_id: str, owner: str) -> None:
        if self._table_missing():  # the ledger creates its schema on first use
            from .ledger import PrivacyLedger

            PrivacyLedger(self.database.url, schema=self.database.schema).head()
        self._conn.execute(sql("ledger_pg_run_lock_take", schema=self.database.quoted),
                           (self.dataset, run_id, owner,
                            datetime.now(timezone.utc).isoformat(timespec="seconds")))

    def _free(self) -> None:
        self._conn.execute(sql("ledger_pg_run_lock_free", schema=self.database.quoted),
                           (self.dataset,))

    def _manual_fix(self) -> str:
        return (f"delete the dataset's row {self.dataset!r} of the table "
                f"{self.database.table('run_locks')} in {self.database.name}")


class ObjectStoreDatasetLock(DatasetLock):
    """`DatasetLock` (same interface and semantics) as the object `<root>/run.lock` on an object
    store (`root` a `UPath`), where there is no flock to guard a read-modify-write: the lock is
    created only if absent (a conditional write: of two runs, one creates it, the other finds
    it held), and a stale or unreadable one is replaced, and a run's own one deleted, only if
    it is still the version read (S3's If-Match; `store.replace_object`). The definitions check
    when they load that the store refuses a second create (`store.check_zone`)."""

    def __init__(self, root, dataset: str):
        self.root, self.dataset = location(root), dataset
        self.path = self.root / LOCK
        self._version = None  # the lock object's version when `holder` last read it

    @contextmanager
    def _guarded(self):
        yield  # each write below is conditional on what `holder` read

    def holder(self) -> dict | None:
        self._version = object_version(self.path)  # read first: it guards the next write
        return super().holder()

    def _take_over(self, held: dict | None, run_id: str, owner: str) -> bool:
        claim = json.dumps({"run_id": run_id, "owner": owner}).encode()
        if held is None and self._version is None:
            return atomic_write(self.path, claim, keep_existing=True)
        return replace_object(self.path, claim, self._version)  # stale, or unreadable

    def _free(self) -> None:
        replace_object(self.path, None, self._version)

    def _manual_fix(self) -> str:
        return f"delete the object {self.path}"


def dataset_lock(root: str | os.PathLike, dataset: str, database: PostgresDatabase | None = None
                 ) -> DatasetLock:
    """The run lock of `dataset`: in the ledger's PostgreSQL schema when there is one
    (`PrivacyLedger.database`), else the object under `root` when `root` is on an object store
    (`ObjectStoreDatasetLock`), else the file under `root`."""
    if database is not None:
        return DatabaseDatasetLock(database, dataset)
    root = location(root)
    return ObjectStoreDatasetLock(root, dataset) if is_remote(root) else DatasetLock(root, dataset)
