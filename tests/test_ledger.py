"""The privacy ledger (docs/decisions/0004-privacy-ledger.md): arithmetic,
refusals, append-only, processes, staleness."""

import ast
import json
import multiprocessing
import os
import queue
import re
import signal
import socket
import sqlite3
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dagster
import pytest

import dp_synth_assets.infra.ledger as ledger_module
import dp_synth_assets.infra.ledger_migrate as migrate_module
import dp_synth_assets.infra.ledger_store as store_module
import dp_synth_assets.resources.ledger as resource_module
from dp_synth_assets.core.budget import BudgetStatus
from dp_synth_assets.core.privacy import Spend, epsilon_from_rho
from dp_synth_assets.core.sql import SQL_DIR
from dp_synth_assets.resources.ledger import (
    BudgetExceeded,
    ChargeExceedsReservation,
    LedgerError,
    LedgerResource,
    PrivacyLedger,
    budget_message,
    owner_alive,
    owner_id,
)
from tests.helpers import ledger_rows, pre_chain_ledger

DELTA = 1e-6


def spend(rho: float, mechanism: str = "gaussian_counts", delta_extra: float = 0.0) -> Spend:
    return Spend(mechanism, rho, delta_extra=delta_extra, sensitivity=1.0, scale=1.5)


@pytest.fixture
def ledger(location) -> PrivacyLedger:
    """A new ledger in each store (conftest `location`: a SQLite file, a PostgreSQL schema)."""
    path, schema = location
    return PrivacyLedger(path, schema=schema)


def row_count(ledger: PrivacyLedger) -> int:
    return len(ledger.events())


# ---- arithmetic ----------------------------------------------------------------------------------


def test_reserve_charge_release_arithmetic_is_exact(ledger):
    reservation = ledger.reserve("adult", "r1", 0.5, 1.0)
    assert (reservation.dataset, reservation.run_id, reservation.rho) == ("adult", "r1", 0.5)
    summary = ledger.summary("adult")
    assert (summary.spent_rho, summary.reserved_rho, summary.remaining_rho(1.0)) == (0.0, 0.5, 0.5)

    ledger.charge("adult", "r1", "select", spend(0.0625, "gaussian_scores"), {"cliques": 3})
    ledger.charge("adult", "r1", "measure", spend(0.125))
    ledger.charge("adult", "r1", "measure", spend(0.125))
    summary = ledger.summary("adult")
    assert (summary.spent_rho, summary.reserved_rho, summary.remaining_rho(1.0)) == (
        0.3125, 0.1875, 0.5)
    assert summary.runs == {"r1": {"select": 0.0625, "measure": 0.25}}
    assert ledger.spent_by_run("adult", "r1") == {"select": 0.0625, "measure": 0.25}

    ledger.release("adult", "r1")
    summary = ledger.summary("adult")
    assert (summary.spent_rho, summary.reserved_rho, summary.remaining_rho(1.0)) == (
        0.3125, 0.0, 0.6875)
    release = ledger.events("adult")[-1]
    assert (release["kind"], release["rho"], release["parameters"]["reason"]) == (
        "release", 0.1875, "run finished")
    charge = ledger.events("adult")[1]
    assert charge["mechanism"] == "gaussian_scores"
    assert charge["parameters"] == {"cliques": 3, "sensitivity": 1.0, "scale": 1.5}

    count = row_count(ledger)
    ledger.release("adult", "r1")  # idempotent
    ledger.release("adult", "never-reserved")
    assert row_count(ledger) == count


def test_datasets_have_separate_budgets(ledger):
    ledger.reserve("adult", "r1", 0.75, 1.0)
    ledger.reserve("census", "r1", 0.75, 1.0)
    ledger.charge("census", "r1", "measure", spend(0.5))
    assert ledger.summary("adult").spent_rho == 0.0
    assert ledger.summary("census").spent_rho == 0.5
    assert [e["dataset"] for e in ledger.events("census")] == ["census", "census"]


def test_reserving_twice_returns_the_open_reservation(ledger):
    first = ledger.reserve("adult", "r1", 0.5, 1.0)
    again = ledger.reserve("adult", "r1", 0.75, 1.0)
    assert again == first
    assert [e["kind"] for e in ledger.events()] == ["reserve"]


def test_zero_reservation_is_allowed_and_limits_are_met_with_float_tolerance(ledger):
    ledger.reserve("adult", "zero", 0.0, 0.3)
    for i in range(3):  # 0.1 + 0.1 + 0.1 = 0.30000000000000004 > 0.3 without the tolerance
        ledger.reserve("adult", f"r{i}", 0.1, 0.3)
    with pytest.raises(BudgetExceeded):
        ledger.reserve("adult", "r3", 1e-9, 0.3)


def test_invalid_amounts_are_rejected(ledger):
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            ledger.reserve("adult", "r1", bad, 1.0)
    ledger.reserve("adult", "r1", 0.5, 1.0)
    with pytest.raises(ValueError):
        ledger.charge("adult", "r1", "measure", spend(float("nan")))
    assert row_count(ledger) == 1


@pytest.mark.parametrize("run_rho,limit_rho,spent_runs", [
    (0.1, 0.3, 0), (0.1, 0.3, 1), (0.25, 1.0, 1), (0.3, 1.0, 2), (0.4, 0.39, 0), (1 / 3, 1.0, 0)])
def test_runs_left_is_how_many_more_runs_the_ledger_accepts(ledger, run_rho, limit_rho, spent_runs):
    """`BudgetStatus.runs_left` against the ledger itself: reserve whole runs until refused
    (0.1 + 0.1 + 0.1 > 0.3 in floats: the ledger's tolerance must agree)."""
    for i in range(spent_runs):
        ledger.reserve("adult", f"spent{i}", run_rho, limit_rho)
        ledger.charge("adult", f"spent{i}", "select", spend(run_rho), {})
        ledger.release("adult", f"spent{i}")
    status = BudgetStatus(limit_rho, ledger.summary("adult").spent_rho,
                          ledger.summary("adult").reserved_rho, run_rho, DELTA)
    predicted = status.runs_left
    accepted = 0
    while True:
        try:
            ledger.reserve("adult", f"new{accepted}", run_rho, limit_rho)
        except BudgetExceeded:
            break
        accepted += 1
    assert predicted == accepted


def test_budget_status_remaining_is_the_limit_minus_spent_and_reserved_in_rho_and_epsilon(ledger):
    ledger.reserve("adult", "r1", 0.5, 2.0)
    ledger.charge("adult", "r1", "select", spend(0.125), {})
    ledger.reserve("adult", "r2", 0.25, 2.0)
    status = BudgetStatus(2.0, *(lambda s: (s.spent_rho, s.reserved_rho))(ledger.summary("adult")),
                          run_rho=0.5, delta=DELTA)
    assert (status.spent_rho, status.reserved_rho, status.remaining_rho) == (0.125, 0.625, 1.25)
    assert status.remaining_rho == ledger.summary("adult").remaining_rho(2.0)
    assert status.remaining_epsilon == epsilon_from_rho(1.25, DELTA)
    assert status.runs_left == 2
    assert BudgetStatus(0.1, 0.2, 0.0, 0.05).remaining_rho == 0.0  # never negative
    assert BudgetStatus(1.0, 0.0, 0.0, run_rho=0.0).runs_left is None


# ---- refusals ------------------------------------------------------------------------------------


def test_reservation_beyond_the_limit_is_refused_with_a_useful_message_and_no_row(ledger):
    ledger.reserve("adult", "r1", 0.5, 1.0)
    ledger.charge("adult", "r1", "measure", spend(0.25))
    count = row_count(ledger)

    with pytest.raises(BudgetExceeded) as refused:
        ledger.reserve("adult", "r2", 0.75, 1.0, delta=DELTA)
    error = refused.value
    assert (error.dataset, error.requested_rho, error.spent_rho, error.reserved_rho,
            error.limit_rho) == ("adult", 0.75, 0.25, 0.25, 1.0)
    message = str(error)
    for needed in ("adult", "epsilon", "rho", "privacy.limit.epsilon", "datasets.yaml",
                   "privacy.epsilon"):
        assert needed in message
    assert f"{epsilon_from_rho(1.0, DELTA):.6g}" in message  # the limit in epsilon
    assert f"{epsilon_from_rho(0.5, DELTA):.6g}" in message  # what is left, in epsilon
    assert row_count(ledger) == count
    assert not ledger.can_cover("adult", 0.75, 1.0)

    assert ledger.can_cover("adult", 0.5, 1.0)
    ledger.reserve("adult", "r2", 0.5, 1.0)  # exactly what is left


def test_budget_message_names_amounts_in_epsilon_and_rho():
    message = budget_message("adult", 0.5, 0.25, 0.125, 1.0, DELTA)
    assert "'adult'" in message
    for rho in (0.5, 0.25, 0.125, 0.625, 1.0):  # requested, spent, reserved, left, limit
        assert f"rho {rho:.6g}" in message
        assert f"epsilon {epsilon_from_rho(rho, DELTA):.6g}" in message
    assert "privacy.limit.epsilon" in message and "privacy.epsilon" in message


def test_delta_extra_has_its_own_limit(ledger):
    ledger.reserve("adult", "r1", 0.25, 1.0, delta_extra=1e-7, limit_delta_extra=1e-7)
    with pytest.raises(BudgetExceeded, match="delta_extra"):
        ledger.reserve("adult", "r2", 0.25, 1.0, delta_extra=1e-7, limit_delta_extra=1e-7)
    with pytest.raises(ChargeExceedsReservation, match="delta_extra"):
        ledger.charge("adult", "r1", "discover", spend(0.125, "gaussian_threshold", 2e-7))
    ledger.charge("adult", "r1", "discover", spend(0.125, "gaussian_threshold", 1e-7))
    assert ledger.summary("adult").spent_delta_extra == 1e-7


def test_charge_beyond_the_reservation_is_refused_and_writes_nothing(ledger):
    ledger.reserve("adult", "r1", 0.5, 10.0, delta=DELTA)
    ledger.charge("adult", "r1", "measure", spend(0.375))
    count = row_count(ledger)
    with pytest.raises(ChargeExceedsReservation) as refused:
        ledger.charge("adult", "r1", "measure", spend(0.25))
    assert isinstance(refused.value, BudgetExceeded)
    assert "'r1'" in str(refused.value) and "reservation" in str(refused.value)
    assert row_count(ledger) == count
    ledger.charge("adult", "r1", "measure", spend(0.125))  # exactly the rest
    assert ledger.summary("adult").spent_rho == 0.5


def test_charge_without_reservation_raises(ledger):
    with pytest.raises(LedgerError, match="no open reservation"):
        ledger.charge("adult", "r1", "measure", spend(0.125))
    ledger.reserve("adult", "r1", 0.5, 1.0)
    ledger.release("adult", "r1")
    with pytest.raises(LedgerError):
        ledger.charge("adult", "r1", "measure", spend(0.125))
    assert [e["kind"] for e in ledger.events()] == ["reserve", "release"]


# ---- append-only ---------------------------------------------------------------------------------


def test_ledger_is_append_only(ledger):
    seen: list[dict] = []

    def check() -> None:
        events = ledger.events()
        assert events[: len(seen)] == seen  # earlier rows are unchanged
        assert len(events) >= len(seen)
        seen[:] = events

    ledger.reserve("adult", "r1", 0.5, 1.0)
    check()
    ledger.charge("adult", "r1", "measure", spend(0.25))
    check()
    with pytest.raises(BudgetExceeded):
        ledger.reserve("adult", "r2", 0.75, 1.0)
    check()
    ledger.release("adult", "r1")
    check()
    ledger.release_stale(now=datetime.now(timezone.utc) + timedelta(days=365))
    check()
    assert [e["id"] for e in seen] == sorted(e["id"] for e in seen)

    # no statement of the ledger updates, deletes or replaces: neither its source (the ledger
    # and its two stores, its migration) nor the sql/ files they load (every statement they run;
    # test_architecture keeps SQL out of Python)
    texts, loads = {}, []
    for module in (ledger_module, migrate_module, store_module):
        source = Path(module.__file__).read_text()
        texts[module.__name__] = source
        loads += [node.args[0] for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "sql"
                                                     or getattr(node.func, "attr", None)
                                                     == "statement")]
    assert loads and all(isinstance(name, ast.Constant) for name in loads)
    texts |= {f"sql/{name.value}.sql": (SQL_DIR / f"{name.value}.sql").read_text()
              for name in loads}
    assert "sql/ledger_insert.sql" in texts and "sql/ledger_pg_insert.sql" in texts
    # the one DROP: the schema upgrade drops the old events table once its rows are copied, in
    # the same transaction (tests/test_ledger_limits.py checks that every row is kept)
    assert re.fullmatch(r"(--[^\n]*\n)*DROP TABLE privacy_ledger_upgraded\n?",
                        texts.pop("sql/ledger_upgrade_drop.sql"))
    for where, text in texts.items():
        for statement in (r"UPDATE\s+privacy_ledger", r"UPDATE\s+\S+\s+SET", r"DELETE\s+FROM",
                          r"OR\s+REPLACE", r"REPLACE\s+INTO", r"DROP\s+TABLE", r"ON\s+CONFLICT"):
            assert not re.search(statement, text, re.IGNORECASE), (where, statement)

    raw_refuses_changes(ledger)  # the database itself refuses, too
    assert ledger.events() == seen


def raw_refuses_changes(ledger: PrivacyLedger) -> None:
    """The ledger's database refuses UPDATE and DELETE (and, in PostgreSQL, TRUNCATE) of its
    rows, whoever connects."""
    if ledger.database is None:
        conn = sqlite3.connect(ledger.path)
        try:
            for statement in ("UPDATE privacy_ledger SET rho = 0", "DELETE FROM privacy_ledger"):
                with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                    conn.execute(statement)
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(ledger.database.url, autocommit=True) as conn:
        for table in ("privacy_ledger", "ledger_meta", "ledger_head"):
            for statement in (f"UPDATE {ledger.database.schema}.{table} SET rows = 0"
                              if table == "ledger_head" else
                              f"UPDATE {ledger.database.schema}.{table} SET id = 0",
                              f"DELETE FROM {ledger.database.schema}.{table}",
                              f"TRUNCATE {ledger.database.schema}.{table}"):
                with pytest.raises(psycopg.Error, match="append-only"):
                    conn.execute(statement)


# ---- real processes ------------------------------------------------------------------------------


def _race(locations: list[tuple[str, str]], run_id: str, barrier, results) -> None:
    """Reserve 30% of the limit in each ledger, at the same moment as the other processes."""
    for path, schema in locations:
        ledger = PrivacyLedger(path, schema=schema)
        barrier.wait(timeout=60)
        try:
            ledger.reserve("adult", run_id, 0.3, 1.0, delta=DELTA)
            results.put((schema + path, run_id, True))
        except BudgetExceeded:
            results.put((schema + path, run_id, False))


@pytest.mark.e2e
def test_concurrent_reservations_from_separate_processes_cannot_overspend(store, tmp_path,
                                                                           request):
    """Six processes reserve 0.3 of a limit of 1 at the same moment, in each of three new
    ledgers of the store: exactly three fit each time, whatever the interleaving."""
    rounds, n = 3, 6
    if store == "sqlite":
        locations = [(str(tmp_path / f"round{i}" / "ledger.sqlite"), "dp_synth")
                     for i in range(rounds)]
    else:
        url = request.getfixturevalue("pg_server").url
        locations = [(url, f"race_{os.getpid()}_{i}_{time.monotonic_ns()}") for i in range(rounds)]
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(n), context.Queue()
    workers = [context.Process(target=_race, args=(locations, f"run-{k}", barrier, results))
               for k in range(n)]
    for worker in workers:
        worker.start()
    outcomes = []
    deadline = time.monotonic() + 900  # a bound, not a timing: at load 13 on CI, six spawned
    # interpreters importing the package had not all passed the barrier after 2 min
    while len(outcomes) < n * rounds and time.monotonic() < deadline:
        try:
            outcomes.append(results.get(timeout=0.5))
        except queue.Empty:
            if any(worker.exitcode not in (None, 0) for worker in workers):
                break  # a worker crashed; its traceback is in the captured stderr
    for worker in workers:  # a worker that put its last outcome may still be shutting down:
        # at load 10-14 on CI that took over 10 s; a peer's crash frees the others within the
        # barrier's 60 s, so the same bound as above only stops a worker that truly hangs
        worker.join(timeout=max(deadline - time.monotonic(), 60))
        if worker.exitcode is None:
            worker.kill()
            worker.join()
    assert [worker.exitcode for worker in workers] == [0] * n
    assert len(outcomes) == n * rounds

    for path, schema in locations:
        accepted = sorted(ok for where, _, ok in outcomes if where == schema + path)
        assert accepted == [False] * 3 + [True] * 3, (path, schema)
        ledger = PrivacyLedger(path, schema=schema)
        assert ledger.summary("adult").reserved_rho == pytest.approx(0.9)
        assert [e["kind"] for e in ledger.events()] == ["reserve"] * 3


def _reserve_charge_and_hang(path: str, ready, schema: str = "dp_synth") -> None:
    ledger = PrivacyLedger(path, schema=schema)
    ledger.reserve("adult", "doomed", 0.625, 1.0)
    ledger.charge("adult", "doomed", "measure", spend(0.25))
    ready.set()
    time.sleep(300)


@pytest.mark.e2e
def test_killed_run_keeps_its_charges_and_its_reservation_is_released(location):
    path, schema = location
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=_reserve_charge_and_hang, args=(path, ready, schema))
    process.start()
    try:
        assert ready.wait(timeout=60)
        ledger = PrivacyLedger(path, schema=schema)
        # 0.25 spent + 0.375 reserved + 0.5 > 1 while the run lives
        assert not ledger.can_cover("adult", 0.5, 1.0)
        with pytest.raises(BudgetExceeded):
            ledger.reserve("adult", "fresh", 0.5, 1.0)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=60)
    assert process.exitcode == -signal.SIGKILL

    count = row_count(ledger)
    assert ledger.can_cover("adult", 0.5, 1.0)  # counts the dead run as released, writes nothing
    assert row_count(ledger) == count
    ledger.reserve("adult", "fresh", 0.5, 1.0)
    summary = ledger.summary("adult")
    assert (summary.spent_rho, summary.reserved_rho) == (0.25, 0.5)
    assert summary.runs == {"doomed": {"measure": 0.25}}
    release = [e for e in ledger.events() if e["kind"] == "release"]
    assert [(e["run_id"], e["rho"], e["parameters"]["reason"]) for e in release] == [
        ("doomed", 0.375, "stale: owner process gone")]


# ---- staleness -----------------------------------------------------------------------------------


def test_live_recent_reservation_is_not_stale(ledger):
    ledger.reserve("adult", "r1", 0.5, 1.0)
    assert ledger.release_stale() == []
    assert owner_alive(owner_id()) is True


def test_stale_by_inactivity_releases_the_remainder_and_keeps_charges(ledger):
    ledger.reserve("adult", "r1", 0.5, 1.0)
    ledger.charge("adult", "r1", "measure", spend(0.125))
    later = datetime.now(timezone.utc) + timedelta(hours=7)
    assert ledger.can_cover("adult", 0.875, 1.0, now=later)
    assert ledger.release_stale(now=later) == ["r1"]
    release = ledger.events()[-1]
    assert release["kind"] == "release" and release["rho"] == 0.375
    assert release["parameters"]["reason"].startswith("stale: no activity for")
    summary = ledger.summary("adult")
    assert (summary.spent_rho, summary.reserved_rho) == (0.125, 0.0)
    assert ledger.release_stale(now=later) == []


class HandClock:
    """A ledger clock that moves only when the test says (`advance`), from the real time now."""

    def __init__(self):
        self.now = datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def test_a_charge_counts_as_activity(tmp_path):
    clock = HandClock()
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", stale_after_seconds=1.0, clock=clock)
    ledger.reserve("adult", "r1", 0.5, 1.0)
    clock.advance(0.6)
    ledger.charge("adult", "r1", "measure", spend(0.125))
    charged_at = datetime.fromisoformat(ledger.events()[-1]["ts"])
    assert charged_at == clock.now  # rows are stamped by the ledger's clock
    # the reservation is over 1 s old, its last charge is not
    assert ledger.release_stale(now=charged_at + timedelta(seconds=0.7)) == []
    clock.advance(0.7)
    assert ledger.release_stale() == []
    assert ledger.release_stale(now=charged_at + timedelta(seconds=1.5)) == ["r1"]


def test_tiny_stale_after_lets_a_new_run_reserve(tmp_path):
    clock = HandClock()
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", stale_after_seconds=0.05, clock=clock)
    ledger.reserve("adult", "r1", 0.75, 1.0)
    clock.advance(0.04)
    with pytest.raises(BudgetExceeded):  # r1 is not stale yet
        ledger.reserve("adult", "r2", 0.75, 1.0)
    clock.advance(0.06)
    ledger.reserve("adult", "r2", 0.75, 1.0)
    assert [(e["run_id"], e["kind"]) for e in ledger.events()] == [
        ("r1", "reserve"), ("r1", "release"), ("r2", "reserve")]


def _insert_reservation(ledger: PrivacyLedger, run_id: str, owner: str, monkeypatch) -> None:
    """A reservation recorded as written by `owner` (through the ledger, so the chain holds)."""
    with monkeypatch.context() as patch:
        patch.setattr(ledger_module, "owner_id", lambda pid=None: owner)
        ledger.reserve("adult", run_id, 0.5, 1.0)


def test_a_reused_pid_is_not_mistaken_for_the_owner(ledger, monkeypatch):
    _insert_reservation(ledger, "old", f"{socket.gethostname()}:{os.getpid()}:1", monkeypatch)
    assert ledger.release_stale() == ["old"]
    assert ledger.events()[-1]["parameters"]["reason"] == "stale: owner process gone"


def test_an_owner_on_another_host_is_only_judged_by_inactivity(ledger, monkeypatch):
    _insert_reservation(ledger, "remote", "some-other-host.example:1:1", monkeypatch)
    assert ledger.release_stale() == []
    assert ledger.release_stale(now=datetime.now(timezone.utc) + timedelta(hours=7)) == ["remote"]


# ---- Dagster -------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_ledger_resource_works_in_a_dagster_asset(tmp_path):
    path = str(tmp_path / "ledger.sqlite")

    @dagster.asset
    def measurements(ledger: LedgerResource) -> None:
        book = ledger.ledger()
        book.reserve("adult", "run", 0.5, 1.0)
        book.charge("adult", "run", "measure", spend(0.25))
        book.release("adult", "run")

    result = dagster.materialize([measurements], resources={"ledger": LedgerResource(path=path)})
    assert result.success
    assert PrivacyLedger(path).summary("adult").spent_rho == 0.25
    assert LedgerResource(path=path).ledger().stale_after_seconds == 21600


# ---- privacy units -------------------------------------------------------------------------------


def test_datasets_of_one_unit_share_one_limit_and_the_refusal_names_the_group(tmp_path):
    units = {"a": "group:census", "b": "group:census", "c": "duckdb:/w:main.c"}
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", units=units)
    ledger.reserve("a", "r1", 0.5, 1.0, delta=DELTA)
    ledger.charge("a", "r1", "measure", spend(0.5))
    ledger.release("a", "r1")
    assert ledger.summary("b").spent_rho == 0.5
    assert ledger.can_cover("b", 0.5, 1.0) and not ledger.can_cover("b", 0.6, 1.0)
    with pytest.raises(BudgetExceeded) as refusal:
        ledger.reserve("b", "r2", 0.6, 1.0, delta=DELTA)
    message = str(refusal.value)
    assert "dataset 'b' (budget group 'census', shared with 'a')" in message
    assert "every entry of budget group 'census'" in message
    ledger.reserve("c", "r3", 1.0, 1.0)  # another unit: its own limit


def test_one_run_of_two_datasets_in_one_unit_holds_two_reservations(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", units={"a": "group:g", "b": "group:g"})
    ledger.reserve("a", "run", 0.25, 1.0)
    ledger.reserve("b", "run", 0.5, 1.0)
    assert ledger.summary("a").reserved_rho == 0.75
    ledger.release("a", "run")
    assert ledger.summary("b").reserved_rho == 0.5


def test_renaming_a_dataset_keeps_its_spend(tmp_path):
    path = tmp_path / "ledger.sqlite"
    source = {"old": "file:/data/x.parquet"}
    before = PrivacyLedger(path, units=dict(source), sources=dict(source))
    before.reserve("old", "r1", 0.75, 1.0)
    before.charge("old", "r1", "measure", spend(0.75))
    before.release("old", "r1")
    renamed = {"new": "file:/data/x.parquet"}
    after = PrivacyLedger(path, units=renamed, sources=renamed)
    assert after.summary("new").spent_rho == 0.75
    with pytest.raises(BudgetExceeded):
        after.reserve("new", "r2", 0.5, 1.0)


def test_joining_a_budget_group_keeps_the_sources_spend(tmp_path):
    path = tmp_path / "ledger.sqlite"
    alone = PrivacyLedger(path, units={"a": "file:/x"}, sources={"a": "file:/x"})
    alone.reserve("a", "r1", 0.75, 1.0)
    alone.charge("a", "r1", "measure", spend(0.75))
    alone.release("a", "r1")
    grouped = PrivacyLedger(path, units={"a": "group:g", "b": "group:g"},
                            sources={"a": "file:/x", "b": "file:/x"})
    assert grouped.summary("b").spent_rho == 0.75
    assert not grouped.can_cover("b", 0.5, 1.0)


# ---- tamper evidence -----------------------------------------------------------------------------


def spend_once(ledger: PrivacyLedger, run_id: str, rho: float = 0.25) -> None:
    ledger.reserve("adult", run_id, rho, 1.0)
    ledger.charge("adult", run_id, "measure", spend(rho))
    ledger.release("adult", run_id)



def snapshot(path: Path, to: Path) -> None:
    """A consistent copy of the ledger (WAL content included), as a backup would be."""
    source, target = sqlite3.connect(path), sqlite3.connect(to)
    source.backup(target)
    source.close()
    target.close()


def put_in_place(copy: Path, path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(copy.read_bytes())


def assert_refused(ledger: PrivacyLedger, *phrases: str) -> str:
    """Both a reservation and `can_cover` are refused with a LedgerError holding `phrases`,
    saying nothing was spent and how to restore this store's ledger; returns the message."""
    restore = ((f"Restore the schema {ledger.database.schema}",) if ledger.database is not None
               else ("Restore the ledger file", str(ledger.head_path)))
    for attempt in (lambda: ledger.reserve("adult", "next", 0.25, 1.0),
                    lambda: ledger.can_cover("adult", 0.25, 1.0)):
        with pytest.raises(LedgerError) as error:
            attempt()
        message = str(error.value)
        for phrase in (*phrases, "Nothing was spent", *restore):
            assert phrase in message, (phrase, message)
    return message


def test_a_new_installation_starts_and_the_head_is_mirrored_beside_the_ledger(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    assert not ledger.path.exists() and not ledger.head_path.exists()
    spend_once(ledger, "r1")
    head = json.loads(ledger.head_path.read_text())
    assert ledger.head_path == tmp_path / "ledger.sqlite.head"
    assert (head["rows"], head["head"]) == ledger.head() == (3, ledger.events()[-1]["hash"])


def test_an_edited_row_is_refused(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(ledger, "r1", rho=0.75)
    conn = sqlite3.connect(ledger.path)
    conn.execute("DROP TRIGGER privacy_ledger_append_only_u")
    conn.execute("UPDATE privacy_ledger SET rho = 0 WHERE kind = 'charge'")
    conn.commit()
    conn.close()
    assert_refused(ledger, "fails its hash chain at row 2")
    assert ledger_rows(ledger.path) == 3


def test_deleted_last_rows_are_refused(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(ledger, "r1", rho=0.75)
    conn = sqlite3.connect(ledger.path)
    conn.execute("DROP TRIGGER privacy_ledger_append_only_d")
    conn.execute("DELETE FROM privacy_ledger WHERE id > 1")
    conn.commit()
    conn.close()
    assert_refused(ledger, "has 1 rows, but its head file", "records 3")
    assert ledger_rows(ledger.path) == 1


def test_an_older_copy_of_the_ledger_is_refused(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(ledger, "r1")
    snapshot(ledger.path, tmp_path / "backup.sqlite")
    spend_once(ledger, "r2", rho=0.75)
    put_in_place(tmp_path / "backup.sqlite", ledger.path)
    assert_refused(ledger, "has 3 rows, but its head file", "records 6")
    assert ledger_rows(ledger.path) == 3


def test_another_ledger_file_is_refused(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(ledger, "r1")
    other = PrivacyLedger(tmp_path / "other" / "ledger.sqlite")
    for run in ("a", "b"):
        spend_once(other, run, rho=0.0)
    snapshot(other.path, tmp_path / "other.sqlite")
    put_in_place(tmp_path / "other.sqlite", ledger.path)
    assert_refused(ledger, "is not the ledger its head file")


def test_a_deleted_ledger_is_refused_and_not_recreated(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(ledger, "r1")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{ledger.path}{suffix}").unlink(missing_ok=True)
    assert_refused(ledger, "does not exist, but its head file", "records 3 rows")
    assert not ledger.path.exists()


def test_restoring_the_backup_lets_runs_continue(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(ledger, "r1")
    snapshot(ledger.path, tmp_path / "backup.sqlite")
    ledger.path.unlink()
    with pytest.raises(LedgerError):
        ledger.reserve("adult", "r2", 0.25, 1.0)
    put_in_place(tmp_path / "backup.sqlite", ledger.path)
    spend_once(ledger, "r2")
    assert ledger.summary("adult").spent_rho == 0.5


def test_a_ledger_without_its_head_file_is_refused_until_adopted(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(ledger, "r1")
    ledger.head_path.unlink()
    with pytest.raises(LedgerError, match="no head file"):
        ledger.reserve("adult", "r2", 0.25, 1.0)
    assert resource_module.main(["adopt", str(ledger.path)]) is None
    spend_once(ledger, "r2")
    assert json.loads(ledger.head_path.read_text())["rows"] == 6


def test_a_ledger_from_before_the_chain_is_refused_and_migrates(tmp_path):
    old = tmp_path / "old.sqlite"
    rows = [(None, "reserve", 0.5, "{}"), ("measure", "charge", 0.5, '{"scale": 2}'),
            (None, "release", 0.0, '{"reason": "run finished"}')]
    pre_chain_ledger(old, rows)
    with pytest.raises(LedgerError, match="python -m dp_synth_assets.resources.ledger migrate"):
        PrivacyLedger(old).summary("adult")
    units = {"adult_v2": "file:/x", "adult": "file:/x"}
    assert migrate_module.migrate_legacy(old, tmp_path / "new.sqlite", units, units) == 3
    new = PrivacyLedger(tmp_path / "new.sqlite", units={"adult_v2": "file:/x"},
                        sources={"adult_v2": "file:/x"})
    assert new.summary("adult_v2").spent_rho == 0.5
    assert [(e["kind"], e["parameters"]) for e in new.events()] == [
        ("reserve", {}), ("charge", {"scale": 2}), ("release", {"reason": "run finished"})]
