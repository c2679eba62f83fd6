"""Locks and files (issue 17): a wait for DuckDB's or SQLite's lock is reported while it lasts
and ends in a clear error naming the holder and the fix; a failure path that cannot record its
release leaves a reservation the next run frees; a missing warehouse is never created by a
read; a corrupt or unopenable ledger or warehouse gets a message naming the file and the fix.
Lock timeouts are set to seconds here (resources' `lock_timeout_seconds`)."""

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import dagster as dg
import duckdb
import pytest

from dp_synth_assets.budget import private_stage
from dp_synth_assets.core.budget import DatasetBudget
from dp_synth_assets.core.config import parse_registry
from dp_synth_assets.core.ledger import LedgerError
from dp_synth_assets.infra.ledger import PrivacyLedger
from dp_synth_assets.resources.warehouse import WarehouseError, WarehouseResource
from tests.helpers import make_project

HOLD_DUCKDB = """
import duckdb, sys, time
con = duckdb.connect(sys.argv[1])
print("ready", flush=True)
time.sleep(120)
"""
HOLD_SQLITE = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("ready", flush=True)
time.sleep(120)
"""
HOLD_FLOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""


class Holder:
    """A subprocess holding a lock until `stop()` (killed by its own pid)."""

    def __init__(self, script: str, path):
        self.process = subprocess.Popen([sys.executable, "-c", script, str(path)],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "ready"
        self.pid = self.process.pid

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def hold():
    holders = []

    def start(script, path):
        holders.append(Holder(script, path))
        return holders[-1]
    yield start
    for h in holders:
        h.stop()


def fresh_ledger(tmp_path, **kw) -> PrivacyLedger:
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", **kw)
    ledger.reserve("d", "warm-up", 0.1, 100.0)  # the kept limit: above every run's below
    ledger.release("d", "warm-up")
    return ledger


# ------------------------------------------------------------------------------- DuckDB's lock


def test_a_warehouse_locked_by_another_process_is_reported_then_names_the_holder(tmp_path, hold):
    path = tmp_path / "warehouse.duckdb"
    duckdb.connect(str(path)).close()
    holder = hold(HOLD_DUCKDB, path)
    warehouse = WarehouseResource(database=str(path), public_dir=str(tmp_path / "public"),
                                  lock_timeout_seconds=1.6, lock_report_seconds=0.5)
    lines = []
    started = time.monotonic()
    with pytest.raises(WarehouseError) as caught:
        with warehouse.connect(log=lines.append):
            pass
    assert time.monotonic() - started < 10
    message = caught.value.public
    assert f"PID {holder.pid}" in message and str(path) in message, message
    assert "lock_timeout_seconds" in message, message
    assert len(lines) >= 2 and all(f"PID {holder.pid}" in line for line in lines), lines
    holder.stop()
    with warehouse.connect(read_only=True) as con:  # free again
        assert con.execute("SELECT 1").fetchone() == (1,)


# ------------------------------------------------------------------------------- SQLite's locks


@pytest.mark.parametrize("script,suffix", [(HOLD_SQLITE, ""), (HOLD_FLOCK, ".lock")])
def test_a_ledger_locked_by_another_process_is_reported_then_names_the_holder(tmp_path, hold,
                                                                              script, suffix):
    lines = []
    ledger = fresh_ledger(tmp_path, lock_timeout_seconds=1.6, lock_report_seconds=0.5,
                          log=lines.append)
    rows = len(ledger.events())
    holder = hold(script, f"{ledger.path}{suffix}")
    with pytest.raises(LedgerError) as caught:
        ledger.reserve("d", "run-1", 0.1, 1.0)
    message = str(caught.value)
    assert f"PID {holder.pid}" in message and str(ledger.path) in message, message
    assert "Nothing was spent" in message and "lock_timeout_seconds" in message, message
    assert len(lines) >= 2 and all(f"PID {holder.pid}" in line for line in lines), lines
    holder.stop()
    assert len(ledger.events()) == rows  # nothing was written


def test_a_release_locked_out_on_the_failure_path_is_logged_and_freed_by_the_next_run(tmp_path,
                                                                                      hold):
    spec = parse_registry({"datasets": {"d": {
        "source": {"table": "main.t"}, "privacy": {"epsilon": 1.0, "delta": 1e-9,
                                                   "limit": {"epsilon": 10.0, "delta": 1e-8}},
        "columns": {"a": {"kind": "integer", "bounds": [0, 9]}, "b": {"kind": "boolean"}}}}})["d"]
    budget = DatasetBudget.of(spec)
    now = [datetime.now(timezone.utc)]  # the ledger's clock, moved by hand below
    ledger = fresh_ledger(tmp_path, lock_timeout_seconds=1.0, lock_report_seconds=0.5,
                          stale_after_seconds=2.0, clock=lambda: now[0])
    errors = []
    context = SimpleNamespace(
        run=SimpleNamespace(asset_selection=None), run_id="run-1",
        assets_def=SimpleNamespace(keys={dg.AssetKey(["d", "preprocessed"])}),
        instance=SimpleNamespace(get_latest_materialization_event=lambda key: None),
        log=SimpleNamespace(error=errors.append, warning=errors.append, info=lambda m: None))
    holders = []
    with pytest.raises(RuntimeError, match="the stage's own failure"):
        with private_stage(context, ledger, "d", "preprocessed", budget):
            holders.append(hold(HOLD_SQLITE, ledger.path))
            raise RuntimeError("the stage's own failure")
    assert len(errors) == 1 and "run-1" in errors[0] and "stale" in errors[0], errors
    holders[0].stop()
    assert ledger.summary("d").reserved_rho == pytest.approx(budget.run_rho)  # still open
    now[0] += timedelta(seconds=1.9)
    ledger.reserve("d", "run-2", budget.run_rho, budget.limit_rho)  # run-1 is not yet stale
    assert ledger.summary("d").reserved_rho == pytest.approx(2 * budget.run_rho)
    ledger.release("d", "run-2")
    now[0] += timedelta(seconds=0.3)
    ledger.reserve("d", "run-3", budget.run_rho, budget.limit_rho)  # frees run-1 as stale
    released = [e for e in ledger.events() if e["kind"] == "release" and e["run_id"] == "run-1"]
    assert len(released) == 1 and released[0]["parameters"]["reason"].startswith("stale")
    assert ledger.summary("d").spent_rho == 0


# ------------------------------------------------------------------------------------- files


def garbage(path):
    path.write_bytes(b"this is not a database\n" * 200)


def truncated(path):
    ledger = PrivacyLedger(path)
    for i in range(30):
        ledger.reserve("d", f"r{i}", 0.01, 1.0)
        ledger.release("d", f"r{i}")
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{path}{suffix}"):
            os.remove(f"{path}{suffix}")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 3] + b"\xff" * 1000)


def a_folder(path):
    path.mkdir()


@pytest.mark.parametrize("damage,says", [
    (garbage, "is not a SQLite database"), (truncated, "Restore it from a backup"),
    (a_folder, "cannot be opened"),
])
def test_a_broken_ledger_file_gets_a_message_naming_the_file_and_the_fix(tmp_path, damage, says):
    path = tmp_path / "ledger.sqlite"
    damage(path)
    ledger = PrivacyLedger(path, lock_timeout_seconds=2.0)
    for attempt in (lambda: ledger.reserve("d", "run", 0.1, 1.0), lambda: ledger.summary("d")):
        with pytest.raises(LedgerError) as caught:
            attempt()
        message = str(caught.value)
        assert str(path) in message and says in message and "Nothing was spent" in message, message


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_ledger_gets_a_message_naming_the_file_and_the_fix(tmp_path):
    ledger = fresh_ledger(tmp_path)
    os.chmod(ledger.path, 0o444)
    with pytest.raises(LedgerError, match="cannot be written"):
        ledger.reserve("d", "run", 0.1, 1.0)


@pytest.mark.parametrize("damage", [garbage, "truncated"])
def test_a_broken_warehouse_gets_a_message_naming_the_file_and_the_fix(tmp_path, damage):
    path = tmp_path / "warehouse.duckdb"
    if damage == "truncated":
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE t AS SELECT range AS i FROM range(100000)")
        con.close()
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        damage(path)
    warehouse = WarehouseResource(database=str(path), public_dir=str(tmp_path / "public"))
    for read_only in (True, False):
        with pytest.raises(WarehouseError) as caught:
            with warehouse.connect(read_only=read_only):
                pass
        assert str(path) in caught.value.public and "backup" in caught.value.public


def test_a_missing_warehouse_is_never_created_by_a_read(tmp_path):
    path = tmp_path / "gone" / "warehouse.duckdb"
    warehouse = WarehouseResource(database=str(path), public_dir=str(tmp_path / "public"))
    for kwargs in ({"read_only": True}, {"create": False}):
        with pytest.raises(WarehouseError, match="does not exist"):
            with warehouse.connect(**kwargs):
                pass
    assert not path.exists()


@pytest.mark.e2e
def test_a_moved_warehouse_fails_the_run_clearly_and_leaves_no_file_behind(tmp_path):
    project = make_project(tmp_path, rows=500)
    project.warehouse.rename(tmp_path / "moved.duckdb")
    defs = project.defs_fn()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert "does not exist" in message and str(project.warehouse.name) in message, message
    assert not project.warehouse.exists()
    assert not project.ledger.exists() or PrivacyLedger(project.ledger).summary(
        "example").spent_rho == 0


def test_every_warehouse_connection_opens_with_the_memory_limit_and_a_bad_one_is_named(
        tmp_path, monkeypatch):
    """DuckDB's buffer pool is held to the memory limit a deployment sets: none set, DuckDB's
    own default; the environment variable; the resource's field over it. A value DuckDB cannot
    read is refused naming the setting and the fix, and creates no database."""
    from dp_synth_assets.resources.warehouse import MEMORY_LIMIT_ENV

    def limit(**fields) -> float:
        warehouse = WarehouseResource(database=str(tmp_path / "w.duckdb"),
                                      public_dir=str(tmp_path / "public"), **fields)
        with warehouse.connect() as con:
            return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]

    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    default = duckdb.connect().execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit() == default
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "512MB")
    assert limit() == "488.2 MiB"  # DuckDB shows 10^6 B in MiB
    assert limit(memory_limit="2GB") == "1.8 GiB"
    bad = WarehouseResource(database=str(tmp_path / "other.duckdb"),
                            public_dir=str(tmp_path / "public"), memory_limit="lots")
    with pytest.raises(WarehouseError, match="memory limit 'lots'.*such as '2GB'"):
        with bad.connect():
            pass
    assert not (tmp_path / "other.duckdb").exists()
