"""One run per dataset at a time: the lock file `<public_dir>/<dataset>/run.lock`.

A lock, rather than Dagster's run or tag concurrency, because it holds the same way under every
executor (in-process, multiprocess, one pod per step), for runs launched by the CLI, the UI, a
sensor or `dagster.materialize`, and without the daemon's queued run coordinator.

On an object store (a public zone at a URL, `store.location`) there is no flock: the lock object
is created with a conditional write (create-if-absent, `store.atomic_write(keep_existing=True)`),
which the definitions check the store supports when they load (`store.check_zone`).
"""

import json
import multiprocessing
import os
import time
from contextlib import nullcontext

from .ledger import owner_alive, owner_id
from .store import (atomic_write, exclusive_lock, is_remote, location, make_folder,
                    object_version, replace_object)

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
    written under an flock of `<root>/run.lock.guard`, so two runs never both take it. On an
    object store, the lock object is created only if absent (a conditional write: of two runs,
    one creates it, the other finds it held); a stale one is replaced, and a run's own one
    deleted, only if it is still the version read (S3's If-Match)."""

    def __init__(self, root: str | os.PathLike, dataset: str):
        self.root, self.dataset = location(root), dataset
        self.path = self.root / LOCK
        self.remote = is_remote(self.root)
        self._version = None  # the lock object's version when `holder` read it

    def _guard(self):
        if self.remote:
            return nullcontext()
        return exclusive_lock(self.path.with_name(LOCK + ".guard"), mode=0o644)

    def _take(self, data: bytes, stale: bool) -> bool:
        """Write the lock naming this run; False when another run wrote it first (object store:
        a conditional write, create-if-absent or, over a stale lock, replace-if-unchanged;
        locally the guard's flock serializes the takers)."""
        if not self.remote:
            atomic_write(self.path, data, mode=0o644)
            return True
        if stale or self._version is not None:  # stale, or there but unreadable
            return replace_object(self.path, data, self._version)
        return atomic_write(self.path, data, keep_existing=True)

    def holder(self) -> dict | None:
        # on an object store, the version read first guards a takeover or a release
        self._version = object_version(self.path) if self.remote else None
        try:
            held = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return held if isinstance(held, dict) and held.get("run_id") else None

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
        make_folder(self.root)
        owner = owner or run_owner()
        deadline = time.monotonic() + timeout
        waited = None
        while True:
            with self._guard():
                held = self.holder()
                if held is not None and held["run_id"] == run_id:
                    return False
                if held is None or self._stale(held, finished):
                    if held is not None and log:
                        log(f"dataset {self.dataset!r}: run {held['run_id']} left the dataset "
                            "held and has ended; taking it over")
                    claim = json.dumps({"run_id": run_id, "owner": owner}).encode()
                    if not self._take(claim, stale=held is not None):
                        continue  # another run created it first: read who holds it
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
                    f"host, delete {self.path}")
            time.sleep(poll)

    def release(self, run_id: str) -> bool:
        """Free the dataset if `run_id` holds it; returns whether it did."""
        with self._guard():
            held = self.holder()
            if held is None or held["run_id"] != run_id:
                return False
            if self.remote:
                return replace_object(self.path, None, self._version)
            self.path.unlink(missing_ok=True)
            return True
