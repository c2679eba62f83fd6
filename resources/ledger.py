"""The privacy ledger (DESIGN.md section 5): an append-only SQLite table of budget events.

Every event is one row of `privacy_ledger` with kind
- `reserve`: a run sets aside its whole budget before it reads private data;
- `charge`: one mechanism invocation spends part of that reservation (its privacy map's answer);
- `release`: the run's reservation is closed; the row's rho is the unspent remainder.

A run's open reservation is its last `reserve` row with no later `release` row. Spent = the sum of all
charges, forever (a crashed run keeps what it spent). Reserved = open reservations minus their charges.
Every read-modify-write is one `BEGIN IMMEDIATE` transaction, so concurrent processes serialize on the
database's write lock and cannot overspend. Rows are never updated or deleted: this module only
inserts, and triggers make the database refuse UPDATE and DELETE as well.

`PrivacyLedger` uses only the standard library; `LedgerResource` at the end is its Dagster wrapper.
(This file must not postpone annotations with a __future__ import: Dagster inspects them.)
"""

import json
import math
import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import dagster
from pydantic import Field

from dp_synth_assets.core.privacy import Spend, epsilon_from_rho

KINDS = ("reserve", "charge", "release")
REL_TOL = 1e-12  # relative tolerance of every budget comparison (float sums of rho)
BUSY_TIMEOUT_MS = 30_000
DEFAULT_STALE_AFTER_SECONDS = 6 * 3600.0

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS privacy_ledger (
        id INTEGER PRIMARY KEY,
        ts TEXT NOT NULL,
        dataset TEXT NOT NULL,
        run_id TEXT NOT NULL,
        stage TEXT,
        mechanism TEXT,
        kind TEXT NOT NULL CHECK (kind IN ('reserve', 'charge', 'release')),
        rho REAL NOT NULL CHECK (rho >= 0),
        delta_extra REAL NOT NULL DEFAULT 0 CHECK (delta_extra >= 0),
        parameters TEXT NOT NULL DEFAULT '{}',
        owner TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS privacy_ledger_dataset_run ON privacy_ledger (dataset, run_id)",
    """CREATE TRIGGER IF NOT EXISTS privacy_ledger_append_only_u BEFORE UPDATE ON privacy_ledger
        BEGIN SELECT RAISE(ABORT, 'privacy_ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS privacy_ledger_append_only_d BEFORE DELETE ON privacy_ledger
        BEGIN SELECT RAISE(ABORT, 'privacy_ledger is append-only'); END""",
)
_INSERT = (
    "INSERT INTO privacy_ledger"
    " (ts, dataset, run_id, stage, mechanism, kind, rho, delta_extra, parameters, owner)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SELECT = (
    "SELECT id, ts, dataset, run_id, stage, mechanism, kind, rho, delta_extra, parameters, owner"
    " FROM privacy_ledger"
)


class LedgerError(Exception):
    """A misuse of the ledger, e.g. a charge by a run that holds no reservation."""


def budget_message(
    dataset: str,
    requested_rho: float,
    spent_rho: float,
    reserved_rho: float,
    limit_rho: float,
    delta: float | None,
) -> str:
    """Why a reservation was refused, in epsilon (at `delta`) and rho, and how to raise the limit."""
    left_rho = max(0.0, limit_rho - spent_rho - reserved_rho)

    def amount(rho: float) -> str:
        if delta is None:
            return f"rho {rho:.6g}"
        return f"epsilon {epsilon_from_rho(rho, delta):.6g} (rho {rho:.6g})"

    lines = [
        f"The privacy budget of dataset '{dataset}' cannot cover this run.",
        f"Requested: {amount(requested_rho)}.",
        f"Spent: {amount(spent_rho)}; reserved by runs in progress: {amount(reserved_rho)}.",
        f"Left: {amount(left_rho)} of the limit {amount(limit_rho)}.",
    ]
    if delta is None:
        lines.append("(No delta was given, so epsilon cannot be shown; only rho adds up.)")
    else:
        lines.append(
            f"(Each epsilon is that amount alone at delta={delta:g}; epsilons do not add up, rho does.)"
        )
    if reserved_rho > 0:
        lines.append("Runs in progress release what they do not spend when they finish.")
    lines.append(
        f"To allow this run, raise `privacy.limit.epsilon` of dataset '{dataset}' in datasets.yaml,"
        f" or lower its `privacy.epsilon` (the per-run budget) so that it fits in what is left."
    )
    return " ".join(lines)


class BudgetExceeded(Exception):
    """A reservation (or, in the subclass, a charge) that does not fit in the budget."""

    def __init__(
        self,
        dataset: str,
        requested_rho: float,
        spent_rho: float,
        reserved_rho: float,
        limit_rho: float,
        delta: float | None = None,
        detail: str = "",
    ):
        super().__init__(dataset, requested_rho, spent_rho, reserved_rho, limit_rho)
        self.dataset = dataset
        self.requested_rho = requested_rho
        self.spent_rho = spent_rho
        self.reserved_rho = reserved_rho
        self.limit_rho = limit_rho
        self.delta = delta
        self.detail = detail

    def __str__(self) -> str:
        message = budget_message(
            self.dataset, self.requested_rho, self.spent_rho, self.reserved_rho, self.limit_rho,
            self.delta,
        )
        return f"{message} {self.detail}".strip()


class ChargeExceedsReservation(BudgetExceeded):
    """A charge beyond the run's own reservation: a bug in the run's budget split, not a limit.

    Here `limit_rho` is the run's reservation, `spent_rho` what the run has charged so far and
    `reserved_rho` is 0.
    """

    def __init__(self, dataset: str, run_id: str, stage: str, requested_rho: float,
                 charged_rho: float, reservation_rho: float, delta: float | None = None,
                 detail: str = ""):
        super().__init__(dataset, requested_rho, charged_rho, 0.0, reservation_rho, delta, detail)
        self.run_id = run_id
        self.stage = stage

    def __str__(self) -> str:
        left = max(0.0, self.limit_rho - self.spent_rho)
        return (
            f"Run '{self.run_id}' of dataset '{self.dataset}': the charge of rho "
            f"{self.requested_rho:.6g} at stage '{self.stage}' exceeds the run's reservation "
            f"(reserved rho {self.limit_rho:.6g}, already charged {self.spent_rho:.6g}, left "
            f"{left:.6g}). Nothing was charged. The run's stages spend more than the run reserved:"
            f" fix its budget split; raising the dataset's limit does not help. {self.detail}"
        ).strip()


@dataclass(frozen=True)
class Reservation:
    """An open reservation: the `reserve` row of a run."""

    dataset: str
    run_id: str
    rho: float
    delta_extra: float
    id: int
    ts: str
    owner: str


@dataclass(frozen=True)
class LedgerSummary:
    """One dataset's budget: spent (all charges) and reserved (open reservations minus charges)."""

    dataset: str
    spent_rho: float
    reserved_rho: float
    spent_delta_extra: float
    runs: dict[str, dict[str, float]] = field(default_factory=dict)  # run_id -> stage -> rho
    reserved_delta_extra: float = 0.0

    def remaining_rho(self, limit_rho: float) -> float:
        """What a new reservation may take under `limit_rho`."""
        return max(0.0, limit_rho - self.spent_rho - self.reserved_rho)


# ---- owners: which process wrote a row, and is it still alive --------------------------------------


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a process from /proc/<pid>/stat (fields 3 and 22), or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may contain spaces and ')'
    return fields[0], fields[19]


def owner_id(pid: int | None = None) -> str:
    """'host:pid:start' of a process; the start time tells a reused pid from the original."""
    pid = os.getpid() if pid is None else pid
    stat = _proc_stat(pid)
    return f"{socket.gethostname()}:{pid}:{stat[1] if stat else ''}"


def owner_alive(owner: str) -> bool | None:
    """Whether the owner process still runs; None when this host cannot tell (another host)."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return None
    pid, start = int(parts[1]), parts[2]
    if pid <= 0:
        return None
    if os.path.isdir("/proc/self"):
        stat = _proc_stat(pid)
        if stat is None:
            return False
        state, current_start = stat
        return state not in ("Z", "X") and (not start or current_start == start)
    try:  # no /proc (macOS): the pid alone
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- folding rows into the state of a dataset -------------------------------------------------------


@dataclass
class _Open:
    """An open reservation and the activity since it was made."""

    row: dict
    charged_rho: float = 0.0
    charged_delta_extra: float = 0.0
    last_ts: str = ""
    last_owner: str = ""

    @property
    def remaining_rho(self) -> float:
        return max(0.0, self.row["rho"] - self.charged_rho)

    @property
    def remaining_delta_extra(self) -> float:
        return max(0.0, self.row["delta_extra"] - self.charged_delta_extra)

    def reservation(self) -> Reservation:
        r = self.row
        return Reservation(r["dataset"], r["run_id"], r["rho"], r["delta_extra"], r["id"], r["ts"],
                           r["owner"])


class _Book:
    """The state of one dataset, folded from its rows in id order."""

    def __init__(self, rows: list[dict]):
        self.open: dict[str, _Open] = {}
        self.spent_rho = 0.0
        self.spent_delta_extra = 0.0
        self.runs: dict[str, dict[str, float]] = {}
        for row in rows:
            run_id, kind = row["run_id"], row["kind"]
            if kind == "reserve":
                self.open[run_id] = _Open(row, last_ts=row["ts"], last_owner=row["owner"])
            elif kind == "charge":
                self.spent_rho += row["rho"]
                self.spent_delta_extra += row["delta_extra"]
                stages = self.runs.setdefault(run_id, {})
                stages[row["stage"]] = stages.get(row["stage"], 0.0) + row["rho"]
                if run_id in self.open:
                    o = self.open[run_id]
                    o.charged_rho += row["rho"]
                    o.charged_delta_extra += row["delta_extra"]
                    o.last_ts, o.last_owner = row["ts"], row["owner"]
            elif kind == "release":
                self.open.pop(run_id, None)

    def reserved(self, opens=None) -> tuple[float, float]:
        """(rho, delta_extra) still held by open reservations."""
        opens = self.open.values() if opens is None else opens
        return (sum(o.remaining_rho for o in opens), sum(o.remaining_delta_extra for o in opens))


def _fits(total: float, limit: float) -> bool:
    return total <= limit + REL_TOL * abs(limit)


def _check_amount(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _utc(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(timezone.utc)
    return now if now.tzinfo else now.replace(tzinfo=timezone.utc)


def _json(parameters: dict) -> str:
    """JSON text of a parameters dict; numpy scalars become numbers, anything else its str()."""
    return json.dumps(parameters, sort_keys=True,
                      default=lambda o: o.item() if hasattr(o, "item") else str(o))


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch the database to WAL mode (persistent), retrying while another process holds it.

    SQLite answers a journal-mode change with "database is locked" at once, without waiting for
    the busy timeout, when another connection is creating the database at the same moment.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() == "wal":
                return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("could not switch the privacy ledger to WAL mode")
        time.sleep(0.01)


# ---- the ledger -------------------------------------------------------------------------------------


class PrivacyLedger:
    """The append-only privacy ledger in the SQLite file `path` (created on first use).

    An open reservation is stale, and released by the next `reserve` or by `release_stale`, when the
    process that last wrote for its run (reserve or charge) ran on this host and is gone, or when the
    run has written nothing for `stale_after_seconds`. `owner_pid` names the process whose death
    makes this ledger's reservations stale (default: the calling process); a Dagster step running in
    a child process of the run worker may pass the run worker's pid.
    """

    def __init__(self, path: str | Path, stale_after_seconds: float = DEFAULT_STALE_AFTER_SECONDS,
                 owner_pid: int | None = None):
        self.path = Path(path)
        self.stale_after_seconds = float(stale_after_seconds)
        self.owner_pid = owner_pid
        self._ready = False

    # -- connections

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not self._ready:
            _enable_wal(conn)
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("COMMIT")
            self._ready = True
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction: committed on success, rolled back on any exception."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            conn.close()

    def _rows(self, conn: sqlite3.Connection, dataset: str | None = None) -> list[dict]:
        if dataset is None:
            cursor = conn.execute(f"{_SELECT} ORDER BY id")
        else:
            cursor = conn.execute(f"{_SELECT} WHERE dataset = ? ORDER BY id", (dataset,))
        return [dict(row) for row in cursor]

    def _read(self, dataset: str | None = None) -> list[dict]:
        conn = self._connect()
        try:
            return self._rows(conn, dataset)
        finally:
            conn.close()

    def _insert(self, conn, dataset, run_id, kind, rho, delta_extra=0.0, stage=None, mechanism=None,
                parameters=None) -> tuple[int, str, str]:
        ts = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        owner = owner_id(self.owner_pid)
        cursor = conn.execute(_INSERT, (ts, dataset, run_id, stage, mechanism, kind, rho, delta_extra,
                                        _json(parameters or {}), owner))
        return cursor.lastrowid, ts, owner

    def _insert_release(self, conn, dataset: str, run_id: str, o: _Open, reason: str) -> None:
        parameters = {"reason": reason, "reserve_id": o.row["id"], "reserved_rho": o.row["rho"],
                      "charged_rho": o.charged_rho, "charged_delta_extra": o.charged_delta_extra}
        self._insert(conn, dataset, run_id, "release", o.remaining_rho, o.remaining_delta_extra,
                     parameters=parameters)

    # -- staleness

    def _stale_reason(self, o: _Open, now: datetime) -> str | None:
        if owner_alive(o.last_owner) is False:
            return "stale: owner process gone"
        idle = (now - datetime.fromisoformat(o.last_ts)).total_seconds()
        if idle > self.stale_after_seconds:
            return f"stale: no activity for {idle:.0f} s (stale after {self.stale_after_seconds:g} s)"
        return None

    def _release_stale(self, conn: sqlite3.Connection, now: datetime) -> list[str]:
        by_dataset: dict[str, list[dict]] = {}
        for row in self._rows(conn):
            by_dataset.setdefault(row["dataset"], []).append(row)
        released = []
        for dataset, rows in by_dataset.items():
            for run_id, o in _Book(rows).open.items():
                reason = self._stale_reason(o, now)
                if reason:
                    self._insert_release(conn, dataset, run_id, o, reason)
                    released.append(run_id)
        return released

    def release_stale(self, now: datetime | None = None) -> list[str]:
        """Release every stale open reservation (any dataset); returns the released run ids."""
        with self._transaction() as conn:
            return self._release_stale(conn, _utc(now))

    # -- the run's life: reserve, charge, release

    def reserve(self, dataset: str, run_id: str, rho: float, limit_rho: float,
                delta_extra: float = 0.0, limit_delta_extra: float = 0.0, *,
                delta: float | None = None) -> Reservation:
        """Reserve a run's whole budget, or raise BudgetExceeded (after releasing stale reservations).

        Fits when spent + reserved + rho <= limit_rho (and likewise for delta_extra). A run that
        already holds an open reservation gets that one back. `delta` only serves the refusal's
        message (epsilon figures) and is recorded in the row's parameters.
        """
        rho, limit_rho = _check_amount("rho", rho), _check_amount("limit_rho", limit_rho)
        delta_extra = _check_amount("delta_extra", delta_extra)
        limit_delta_extra = _check_amount("limit_delta_extra", limit_delta_extra)
        if delta is not None and not 0 < delta < 1:
            raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
        refusal = None
        with self._transaction() as conn:
            self._release_stale(conn, _utc(None))
            book = _Book(self._rows(conn, dataset))
            if run_id in book.open:
                return book.open[run_id].reservation()
            reserved_rho, reserved_delta_extra = book.reserved()
            if not _fits(book.spent_rho + reserved_rho + rho, limit_rho):
                refusal = BudgetExceeded(dataset, rho, book.spent_rho, reserved_rho, limit_rho, delta)
            elif not _fits(book.spent_delta_extra + reserved_delta_extra + delta_extra,
                           limit_delta_extra):
                refusal = BudgetExceeded(
                    dataset, rho, book.spent_rho, reserved_rho, limit_rho, delta,
                    detail=f"It is delta_extra that does not fit: requested {delta_extra:g}, spent "
                    f"{book.spent_delta_extra:g}, reserved {reserved_delta_extra:g}, limit "
                    f"{limit_delta_extra:g}.",
                )
            else:
                parameters = {"limit_rho": limit_rho, "limit_delta_extra": limit_delta_extra,
                              "delta": delta, "spent_rho": book.spent_rho,
                              "reserved_rho": reserved_rho}
                row_id, ts, owner = self._insert(conn, dataset, run_id, "reserve", rho, delta_extra,
                                                 parameters=parameters)
        if refusal is not None:  # raised after the commit, which keeps the stale releases
            raise refusal
        return Reservation(dataset, run_id, rho, delta_extra, row_id, ts, owner)

    def charge(self, dataset: str, run_id: str, stage: str, spend: Spend,
               parameters: dict | None = None) -> None:
        """Record one mechanism's spend against the run's open reservation, or refuse it."""
        rho = _check_amount("spend.rho", spend.rho)
        delta_extra = _check_amount("spend.delta_extra", spend.delta_extra)
        with self._transaction() as conn:
            o = _Book(self._rows(conn, dataset)).open.get(run_id)
            if o is None:
                raise LedgerError(
                    f"Run '{run_id}' of dataset '{dataset}' holds no open reservation, so stage "
                    f"'{stage}' cannot charge rho {rho:g}: reserve before reading private data (the "
                    f"reservation may also have been released as stale)."
                )
            delta = json.loads(o.row["parameters"]).get("delta")
            if not _fits(o.charged_rho + rho, o.row["rho"]):
                raise ChargeExceedsReservation(dataset, run_id, stage, rho, o.charged_rho,
                                               o.row["rho"], delta)
            if not _fits(o.charged_delta_extra + delta_extra, o.row["delta_extra"]):
                raise ChargeExceedsReservation(
                    dataset, run_id, stage, rho, o.charged_rho, o.row["rho"], delta,
                    detail=f"It is delta_extra that does not fit: charge {delta_extra:g}, charged "
                    f"{o.charged_delta_extra:g}, reserved {o.row['delta_extra']:g}.",
                )
            recorded = dict(parameters or {})
            recorded.update(sensitivity=spend.sensitivity, scale=spend.scale)
            self._insert(conn, dataset, run_id, "charge", rho, delta_extra, stage=stage,
                         mechanism=spend.mechanism, parameters=recorded)

    def release(self, dataset: str, run_id: str, reason: str = "run finished") -> None:
        """Close the run's reservation, giving back the unspent remainder; no-op if none is open."""
        with self._transaction() as conn:
            o = _Book(self._rows(conn, dataset)).open.get(run_id)
            if o is not None:
                self._insert_release(conn, dataset, run_id, o, reason)

    # -- reading

    def summary(self, dataset: str) -> LedgerSummary:
        """Spent and reserved budget of a dataset, with charges per run and stage."""
        book = _Book(self._read(dataset))
        reserved_rho, reserved_delta_extra = book.reserved()
        return LedgerSummary(dataset, book.spent_rho, reserved_rho, book.spent_delta_extra,
                             book.runs, reserved_delta_extra)

    def spent_by_run(self, dataset: str, run_id: str) -> dict[str, float]:
        """A run's charges by stage (every charge it ever made)."""
        return dict(_Book(self._read(dataset)).runs.get(run_id, {}))

    def events(self, dataset: str | None = None) -> list[dict]:
        """All rows in order (of one dataset if given), with `parameters` decoded."""
        rows = self._read(dataset)
        for row in rows:
            row["parameters"] = json.loads(row["parameters"])
        return rows

    def can_cover(self, dataset: str, rho: float, limit_rho: float, delta_extra: float = 0.0,
                  limit_delta_extra: float = 0.0, now: datetime | None = None) -> bool:
        """Whether `reserve` would succeed now (stale reservations count as released); writes nothing."""
        now = _utc(now)
        book = _Book(self._read(dataset))
        live = [o for o in book.open.values() if self._stale_reason(o, now) is None]
        reserved_rho, reserved_delta_extra = book.reserved(live)
        return _fits(book.spent_rho + reserved_rho + rho, limit_rho) and _fits(
            book.spent_delta_extra + reserved_delta_extra + delta_extra, limit_delta_extra
        )


# ---- Dagster ----------------------------------------------------------------------------------------


class LedgerResource(dagster.ConfigurableResource):
    """The privacy ledger as a Dagster resource: where its SQLite file lives, when runs go stale."""

    path: str = Field(description="Path of the ledger's SQLite database file.")
    stale_after_seconds: float = Field(
        default=DEFAULT_STALE_AFTER_SECONDS,
        description="An open reservation with no ledger activity for this long is released.",
    )

    def ledger(self) -> PrivacyLedger:
        """The ledger at `path`."""
        return PrivacyLedger(self.path, self.stale_after_seconds)
