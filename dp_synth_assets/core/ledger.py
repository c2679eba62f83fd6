"""The privacy ledger (DESIGN.md section 5): an append-only SQLite table of budget events.

Every event is one row of `privacy_ledger` with kind
- `reserve`: a run sets aside its whole budget before it reads private data;
- `charge`: one mechanism invocation spends part of that reservation (its privacy map's answer);
- `release`: the run's reservation is closed; the row's rho is the unspent remainder;
- `limit`: the unit's limit is set by an explicit ledger command (`set_limit`, the command line's
  `raise-limit`); the row's rho and delta_extra are the new limit, its parameters say who set it,
  when and why.

The ledger keeps the limit a unit was first given: the limit of its first reservation (or the
largest of the reservations made before this rule existed), until a `limit` row sets another. A
reservation that asks for a larger limit (a datasets.yaml, a Component or a notebook's
`Synthesizer` edited to a larger `privacy.limit`) is refused with `LimitNotGranted`, naming the
command that raises it; a smaller one applies, and pins nothing.

A run's open reservation is its last `reserve` row with no later `release` row. Spent = the sum of all
charges, forever (a crashed run keeps what it spent). Reserved = open reservations minus their charges.
Every read-modify-write is one `BEGIN IMMEDIATE` transaction, so concurrent processes serialize on the
database's write lock and cannot overspend. Rows are never updated or deleted: this module only
inserts, and triggers make the database refuse UPDATE and DELETE as well.

Rows are keyed by privacy unit (dp_synth_assets.core.units): the source's identity or a budget
group; the budget arithmetic (spent, reserved, reserve, can_cover) sums over the unit, whatever
entry name wrote the rows. The `dataset` column keeps the entry name for display.

Tamper evidence: row i carries hash_i = sha256(hash_{i-1} "\n" canonical(row i)), where hash_0
derives from a random secret drawn when the file is created (so the public head hash cannot be
tested against guessed row contents). After each write transaction commits, the head (row count,
hash of the last row, hash_0) is mirrored, atomically (temporary file + os.replace), to a head
file beside the ledger (`<ledger>.head`); a lock file (`<ledger>.lock`) serializes the whole
write, SQLite transaction and head update, across processes. Spending assets also publish the
head in their metadata. Every reading or writing access recomputes the chain and requires the
ledger to extend the mirrored head: an edited row, a truncated ledger, an older copy, another
ledger file, or a missing ledger whose head file records rows, raise LedgerError and nothing is
spent. A crash between the commit and the head update leaves the ledger ahead of its mirror,
which is accepted.

Locks and files: a wait for the ledger's lock file or for SQLite's write lock is reported through
`log` every `lock_report_seconds` while it lasts and ends after `lock_timeout_seconds` in a
LedgerError naming the file, the processes holding its lock (read from /proc/locks where the
system has it) and the fix. A ledger file that SQLite cannot open, read or write (not a
database, truncated, read-only, a folder) raises a LedgerError naming the file and the fix,
before anything is spent.

`PrivacyLedger` uses only the standard library and its SQLite statements in sql/ledger_*.sql, so
the pipeline (through `dp_synth_assets.resources.ledger.LedgerResource`, its Dagster wrapper)
and the notebook API share it.
"""

import fcntl
import hashlib
import json
import math
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .budget import REL_TOL, remaining_rho  # noqa: F401 - REL_TOL: re-exported
from .budget import fits as _fits
from .privacy import Spend, epsilon_from_rho
from .sql import sql
from .units import alias_digest, group_name

KINDS = ("reserve", "charge", "release", "limit")
BUSY_TIMEOUT_MS = 30_000  # the default lock timeout (`PrivacyLedger.lock_timeout_seconds`)
LOCK_REPORT_SECONDS = 5.0
DEFAULT_STALE_AFTER_SECONDS = 6 * 3600.0

LEDGER_HEAD_SUFFIX = ".head"
LEDGER_LOCK_SUFFIX = ".lock"
_COLUMNS = ("id", "ts", "unit", "source", "dataset", "run_id", "stage", "mechanism", "kind", "rho",
            "delta_extra", "parameters", "owner")

# The SQLite statements live in sql/ledger_*.sql, like every statement of the project.
_SCHEMA = (
    sql("ledger_create_events"),
    sql("ledger_create_index"),
    *(sql("ledger_append_only", table="privacy_ledger", event=event,
          name=f"privacy_ledger_append_only_{event[0].lower()}") for event in ("UPDATE", "DELETE")),
    sql("ledger_create_meta"),
    *(sql("ledger_append_only", table="ledger_meta", event=event,
          name=f"ledger_meta_append_only_{event[0].lower()}") for event in ("UPDATE", "DELETE")),
)
_INSERT = sql("ledger_insert")
_SELECT = sql("ledger_rows", columns=", ".join(_COLUMNS))
_COLUMNS_OF = sql("ledger_columns")
_LEGACY_SELECT = sql("ledger_legacy_rows")
_GENESIS = sql("ledger_genesis")
_INSERT_GENESIS = sql("ledger_insert_genesis")


class LedgerError(Exception):
    """A misuse of the ledger (a charge by a run that holds no reservation), or a ledger that
    fails its tamper checks (the message says what was detected and how to restore it)."""


def budget_message(
    dataset: str,
    requested_rho: float,
    spent_rho: float,
    reserved_rho: float,
    limit_rho: float,
    delta: float | None,
    group: str | None = None,
    members: tuple[str, ...] = (),
    entry: str | None = None,
) -> str:
    """Why a reservation was refused, in epsilon (at `delta`) and rho, and how to raise the limit;
    `group` is the dataset's budget group and `members` the entries sharing it; `entry` where the
    dataset's entry is written (`config.DatasetSpec.entry`; default: its datasets.yaml entry)."""
    left_rho = remaining_rho(limit_rho, spent_rho, reserved_rho)

    def amount(rho: float) -> str:
        if delta is None:
            return f"rho {rho:.6g}"
        return f"epsilon {epsilon_from_rho(rho, delta):.6g} (rho {rho:.6g})"

    others = [m for m in members if m != dataset]
    shared = (f" (budget group '{group}'" + (f", shared with {', '.join(repr(m) for m in others)}"
                                             if others else "") + ")") if group else ""
    lines = [
        f"The privacy budget of dataset '{dataset}'{shared} cannot cover this run.",
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
    every = (f" (and of every entry of budget group '{group}': one budget, one limit)"
             if group else "")
    lines.append(
        f"To allow this run, raise `privacy.limit.epsilon` of "
        f"{entry or f'dataset {dataset!r} in datasets.yaml'}{every}, or lower its "
        f"`privacy.epsilon` (the per-run budget) so that it fits in what is left."
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
        group: str | None = None,
        members: tuple[str, ...] = (),
        entry: str | None = None,
    ):
        super().__init__(dataset, requested_rho, spent_rho, reserved_rho, limit_rho)
        self.group = group
        self.members = members
        self.entry = entry
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
            self.delta, self.group, self.members, self.entry,
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
        left = remaining_rho(self.limit_rho, self.spent_rho)
        return (
            f"Run '{self.run_id}' of dataset '{self.dataset}': the charge of rho "
            f"{self.requested_rho:.6g} at stage '{self.stage}' exceeds the run's reservation "
            f"(reserved rho {self.limit_rho:.6g}, already charged {self.spent_rho:.6g}, left "
            f"{left:.6g}). Nothing was charged. The run's stages spend more than the run reserved:"
            f" fix its budget split; raising the dataset's limit does not help. {self.detail}"
        ).strip()


class LimitNotGranted(LedgerError):
    """A reservation whose limit is above the one the ledger keeps for its unit (module
    docstring): a configuration cannot raise a unit's limit; `set_limit` (the command line's
    `raise-limit`) can, explicitly and on the record."""

    def __init__(self, dataset: str, unit: str, asked_rho: float, asked_delta_extra: float,
                 granted: dict, delta: float | None, entry: str | None = None):
        self.dataset, self.unit, self.granted = dataset, unit, granted
        self.asked_rho, self.asked_delta_extra, self.delta = asked_rho, asked_delta_extra, delta
        row = granted["row"]
        how = (f"set by `raise-limit` on {row['ts'][:19]}" if granted["explicit"] else
               f"first given by run {row['run_id']} on {row['ts'][:19]}")

        def amount(rho: float) -> str:
            if delta is None:
                return f"rho {rho:.6g}"
            return f"epsilon {epsilon_from_rho(rho, delta):.6g} (rho {rho:.6g})"

        what = (f"{amount(asked_rho)}, above the limit {amount(granted['rho'])}"
                if not _fits(asked_rho, granted["rho"]) else
                f"delta_extra {asked_delta_extra:g}, above the limit's delta_extra "
                f"{granted['delta_extra']:g}")
        super().__init__(
            f"The privacy ledger keeps the limit of dataset '{dataset}' (privacy unit {unit}): "
            f"{amount(granted['rho'])}, {how}. This run asks for {what}: a configuration "
            f"cannot raise the limit of data that has been spent on. Nothing was spent. To "
            f"raise it, record the new limit in the ledger: `python -m "
            f"dp_synth_assets.resources.ledger raise-limit {dataset} --reason '<why>'` (it reads "
            f"the limit from {entry or 'datasets.yaml'}; a notebook calls "
            f"`PrivacyLedger.set_limit`); or keep {entry or 'the entry'} at the ledger's limit.")


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
    unit: str = ""


@dataclass(frozen=True)
class LedgerSummary:
    """One privacy unit's budget, as seen from one of its datasets: spent (all charges of the
    unit) and reserved (open reservations minus their charges)."""

    dataset: str
    spent_rho: float
    reserved_rho: float
    spent_delta_extra: float
    runs: dict[str, dict[str, float]] = field(default_factory=dict)  # run_id -> stage -> rho
    reserved_delta_extra: float = 0.0
    unit: str = ""

    def remaining_rho(self, limit_rho: float) -> float:
        """What a new reservation may take under `limit_rho` (`budget.remaining_rho`)."""
        return remaining_rho(limit_rho, self.spent_rho, self.reserved_rho)


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
                           r["owner"], r["unit"])


class _Book:
    """The state of one privacy unit, folded from its rows in id order. A reservation belongs
    to a (dataset, run): one Dagster run may materialize two datasets of one unit."""

    def __init__(self, rows: list[dict]):
        self.open: dict[tuple[str, str], _Open] = {}
        self.spent_rho = 0.0
        self.spent_delta_extra = 0.0
        self.runs: dict[str, dict[str, float]] = {}
        self.limit: dict | None = None  # the unit's granted limit (module docstring)
        for row in rows:
            key, kind = (row["dataset"], row["run_id"]), row["kind"]
            if kind == "reserve":
                self.open[key] = _Open(row, last_ts=row["ts"], last_owner=row["owner"])
                self._granted(row)
            elif kind == "limit":
                self.limit = {"rho": row["rho"], "delta_extra": row["delta_extra"], "row": row,
                              "explicit": True}
            elif kind == "charge":
                self.spent_rho += row["rho"]
                self.spent_delta_extra += row["delta_extra"]
                stages = self.runs.setdefault(row["run_id"], {})
                stages[row["stage"]] = stages.get(row["stage"], 0.0) + row["rho"]
                if key in self.open:
                    o = self.open[key]
                    o.charged_rho += row["rho"]
                    o.charged_delta_extra += row["delta_extra"]
                    o.last_ts, o.last_owner = row["ts"], row["owner"]
            elif kind == "release":
                self.open.pop(key, None)

    def _granted(self, row: dict) -> None:
        """A reservation's limit pins the unit's limit when none is pinned; before an explicit
        `limit` row, a larger one (a raise made before limits were kept) replaces it."""
        if self.limit is not None and self.limit["explicit"]:
            return
        parameters = json.loads(row["parameters"])
        rho = float(parameters.get("limit_rho", row["rho"]))
        delta_extra = float(parameters.get("limit_delta_extra", row["delta_extra"]))
        if self.limit is None or rho > self.limit["rho"] or (
                rho == self.limit["rho"] and delta_extra > self.limit["delta_extra"]):
            self.limit = {"rho": rho, "delta_extra": delta_extra, "row": row, "explicit": False}

    def reserved(self, opens=None) -> tuple[float, float]:
        """(rho, delta_extra) still held by open reservations."""
        opens = self.open.values() if opens is None else opens
        return (sum(o.remaining_rho for o in opens), sum(o.remaining_delta_extra for o in opens))


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


def _enable_wal(conn: sqlite3.Connection, timeout: float = BUSY_TIMEOUT_MS / 1000) -> None:
    """Switch the database to WAL mode (persistent), retrying while another process holds it.

    SQLite answers a journal-mode change with "database is locked" at once, without waiting for
    the busy timeout, when another connection is creating the database at the same moment.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if conn.execute(sql("ledger_journal_wal")).fetchone()[0].lower() == "wal":
                return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("could not switch the privacy ledger to WAL mode")
        time.sleep(0.01)


# ---- the hash chain and its mirrored head -----------------------------------------------------------


def _is_locked(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


def lock_holders(*paths: Path) -> list[int]:
    """The processes holding a lock (flock or POSIX) on any of `paths`, from /proc/locks
    (empty where the system has none, or when no lock is visible)."""
    inodes = set()
    for path in paths:
        try:
            inodes.add(os.stat(path).st_ino)
        except OSError:
            continue
    pids = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        try:
            i = fields.index("->") + 1 if "->" in fields else 0
            pid, where = int(fields[i + 4]), fields[i + 5]
            inode = int(where.rsplit(":", 1)[1])
        except (ValueError, IndexError):
            continue
        if inode in inodes and pid != os.getpid() and pid not in pids:
            pids.append(pid)
    return pids


def describe_processes(pids: list[int]) -> str:
    """'PID 123 (python -m dagster ...), PID 456' for a message; 'another process' if none."""
    if not pids:
        return "another process"
    shown = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace").strip()
        except OSError:
            command = ""
        shown.append(f"PID {pid}" + (f" ({command[:120]})" if command else ""))
    return ", ".join(shown)


def _canonical(row: dict) -> str:
    """A row's content as hashed: its columns in a fixed order, floats as exact reprs."""
    values = [row["id"], row["ts"], row["unit"], row["source"], row["dataset"], row["run_id"], row["stage"],
              row["mechanism"], row["kind"], float(row["rho"]), float(row["delta_extra"]),
              row["parameters"], row["owner"]]
    return json.dumps(values, separators=(",", ":"), ensure_ascii=True)


def _chain(previous: str, row: dict) -> str:
    return hashlib.sha256(f"{previous}\n{_canonical(row)}".encode()).hexdigest()


def _genesis_hash(secret: str) -> str:
    return hashlib.sha256(f"dp-synth privacy ledger\n{secret}".encode()).hexdigest()


@dataclass
class _Tx:
    """An open write transaction: its connection and the verified rows, grown by each insert."""

    conn: sqlite3.Connection
    rows: list[dict]
    genesis: str

    @property
    def last_hash(self) -> str:
        return self.rows[-1]["hash"] if self.rows else self.genesis


# ---- the ledger -------------------------------------------------------------------------------------


class PrivacyLedger:
    """The append-only privacy ledger in the SQLite file `path` (created on first use).

    `units` maps dataset names to privacy units (dp_synth_assets.core.units.privacy_units) and
    `sources` to their source identities (a unit's budget also counts the rows recorded on its
    sources under another unit); a dataset they do not name is taken to be where its latest row
    was recorded, else in a unit of its own name. `head_path` is the mirrored head file (default `<path>.head`).
    `entries` maps dataset names to where their entries are written (`config.DatasetSpec.entry`),
    which a budget refusal names. `aliases` maps dataset names to earlier names of their source
    (`units.aliases`, as `units.alias_digest`s): rows recorded under them count for the
    dataset's unit.

    An open reservation is stale, and released by the next `reserve` or by `release_stale`, when the
    process that last wrote for its run (reserve or charge) ran on this host and is gone, or when the
    run has written nothing for `stale_after_seconds`. `owner_pid` names the process whose death
    makes this ledger's reservations stale (default: the calling process); a Dagster step running in
    a child process of the run worker may pass the run worker's pid.
    """

    def __init__(self, path: str | Path, stale_after_seconds: float = DEFAULT_STALE_AFTER_SECONDS,
                 owner_pid: int | None = None, units: dict[str, str] | None = None,
                 head_path: str | Path | None = None, sources: dict[str, str] | None = None,
                 lock_timeout_seconds: float = BUSY_TIMEOUT_MS / 1000,
                 lock_report_seconds: float = LOCK_REPORT_SECONDS, log=None,
                 entries: dict[str, str] | None = None,
                 aliases: dict[str, tuple[str, ...]] | None = None):
        self.path = Path(path)
        self.head_path = (Path(head_path) if head_path
                          else self.path.with_name(self.path.name + LEDGER_HEAD_SUFFIX))
        self.lock_path = self.path.with_name(self.path.name + LEDGER_LOCK_SUFFIX)
        self.stale_after_seconds = float(stale_after_seconds)
        self.owner_pid = owner_pid
        self.units = dict(units or {})
        self.sources = dict(sources or {})
        self.entries = dict(entries or {})
        self.aliases = {name: tuple(names) for name, names in (aliases or {}).items()}
        self.lock_timeout_seconds = float(lock_timeout_seconds)
        self.lock_report_seconds = float(lock_report_seconds)
        self.log = log  # a callable taking one line (a wait still going on), or None
        self._ready = False

    # -- units

    def _recorded(self, mapping: dict[str, str], column: str, dataset: str,
                  rows: list[dict]) -> str:
        if dataset in mapping:
            return mapping[dataset]
        for row in reversed(rows):
            if row["dataset"] == dataset:
                return row[column]
        return dataset

    def unit_of(self, dataset: str, rows: list[dict]) -> str:
        """The dataset's privacy unit: from `units`, else as its latest row recorded it."""
        return self._recorded(self.units, "unit", dataset, rows)

    def _scope(self, dataset: str, rows: list[dict]) -> tuple[tuple[str, str], "_Book"]:
        scope, counted = self._counted(dataset, rows)
        return scope, _Book(counted)

    def _counted(self, dataset: str, rows: list[dict]) -> tuple[tuple[str, str], list[dict]]:
        """(unit, source) of the dataset, and the book of every row its budget counts: the rows
        of its unit and the rows on any source of the unit, whatever unit they were recorded in
        (so joining or leaving a budget group does not forget what a source has spent), and the
        rows recorded under an earlier name of one of those sources (`aliases`)."""
        unit = self.unit_of(dataset, rows)
        source = self._recorded(self.sources, "source", dataset, rows)
        members = {d for d, u in self.units.items() if u == unit} | {dataset}
        sources = {source} | {self.sources[d] for d in members if d in self.sources}
        earlier = {a for d in members for a in self.aliases.get(d, ())}
        if not earlier:
            return (unit, source), [r for r in rows
                                    if r["unit"] == unit or r["source"] in sources]
        return (unit, source), [r for r in rows if r["unit"] == unit or r["source"] in sources
                                or alias_digest(r["unit"]) in earlier
                                or alias_digest(r["source"]) in earlier]

    def _members(self, unit: str, dataset: str) -> tuple[str, ...]:
        return tuple(sorted({d for d, u in self.units.items() if u == unit} | {dataset}))

    # -- tamper evidence

    def _restore_hint(self) -> str:
        return (
            f"Nothing was spent. Restore the ledger file {self.path} from a backup that contains "
            f"the mirrored head (take backups with `sqlite3 {self.path} \".backup <file>\"`; the "
            f"file is in WAL mode), or point DP_SYNTH_LEDGER at the right file. The head is "
            f"mirrored in {self.head_path} and in the `privacy/ledger_rows` and "
            f"`privacy/ledger_head` metadata of the latest spending materializations."
        )

    def _head(self) -> dict | None:
        """The mirrored head {rows, head, genesis}, or None when there is no head file."""
        try:
            text = self.head_path.read_text()
        except FileNotFoundError:
            return None
        try:
            head = json.loads(text)
            head = {"rows": int(head["rows"]), "head": str(head["head"]),
                    "genesis": str(head["genesis"])}
        except (ValueError, KeyError, TypeError):
            raise LedgerError(f"The privacy ledger's head file {self.head_path} is unreadable; "
                              f"restore it from a backup. {self._restore_hint()}") from None
        return head

    def _write_head(self, rows: list[dict], genesis: str) -> None:
        """Mirror the head atomically (`store.atomic_write`: a complete temporary file, then
        os.replace)."""
        from .store import atomic_write

        head = {"ledger": str(self.path.resolve()), "rows": len(rows),
                "head": rows[-1]["hash"] if rows else genesis, "genesis": genesis}
        atomic_write(self.head_path, json.dumps(head).encode())

    def _verify(self, rows: list[dict], genesis: str, head: dict | None) -> None:
        """Refuse (LedgerError) unless the chain recomputes and the ledger extends the head."""
        previous = genesis
        for position, row in enumerate(rows, start=1):
            if row["id"] != position or _chain(previous, row) != row["hash"]:
                raise LedgerError(
                    f"The privacy ledger {self.path} fails its hash chain at row {row['id']}: a "
                    f"row was edited, removed or inserted. {self._restore_hint()}")
            previous = row["hash"]
        if head is None:
            if rows:
                raise LedgerError(
                    f"The privacy ledger {self.path} has {len(rows)} rows but no head file "
                    f"{self.head_path}, so a truncated or swapped ledger cannot be ruled out. If "
                    f"you moved the ledger, move its head file with it. If this ledger is complete "
                    f"(compare with the `privacy/ledger_head` metadata of the latest spending "
                    f"materialization), record its head with "
                    f"`python -m dp_synth_assets.resources.ledger adopt {self.path}`.")
            return
        if head["genesis"] != genesis:
            raise LedgerError(
                f"The privacy ledger {self.path} is not the ledger its head file {self.head_path} "
                f"mirrors (it is another ledger file, or a new one: the ledger was swapped or "
                f"deleted). {self._restore_hint()}")
        if len(rows) < head["rows"]:
            raise LedgerError(
                f"The privacy ledger {self.path} has {len(rows)} rows, but its head file "
                f"{self.head_path} records {head['rows']}: rows were removed (the ledger was "
                f"truncated, or an older copy was put in its place). {self._restore_hint()}")
        if head["rows"] and rows[head["rows"] - 1]["hash"] != head["head"]:
            raise LedgerError(
                f"Row {head['rows']} of the privacy ledger {self.path} does not carry the head "
                f"hash its head file {self.head_path} records: the ledger was replaced or "
                f"rewritten. {self._restore_hint()}")

    # -- connections

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """The cross-process lock around a write: SQLite transaction plus head update."""
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise LedgerError(self._unusable(self.lock_path, e)) from None
        try:
            wait = self._waiting(self.lock_path)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    wait()
                    time.sleep(0.005)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _waiting(self, path: Path, *others: Path):
        """A function called on each failed attempt to take a lock on `path`: it reports the wait
        through `log` every `lock_report_seconds` and raises LedgerError after
        `lock_timeout_seconds`, naming the holders (`lock_holders`) and the fix."""
        started = time.monotonic()
        reported = [started]

        def wait() -> None:
            now = time.monotonic()
            if now - started > self.lock_timeout_seconds:
                holders = describe_processes(lock_holders(path, *others))
                raise LedgerError(
                    f"The privacy ledger {self.path} is locked by {holders} for over "
                    f"{self.lock_timeout_seconds:g} s ({path}). Nothing was spent by this "
                    f"attempt. Wait for that process to finish (a run holds the lock for a "
                    f"moment per ledger row), stop it if it is stuck, or raise the ledger's "
                    f"`lock_timeout_seconds`.")
            if self.log is not None and now - reported[0] >= self.lock_report_seconds:
                reported[0] = now
                self.log(f"waiting for the privacy ledger's lock on {path}, held by "
                         f"{describe_processes(lock_holders(path, *others))}: "
                         f"{now - started:.0f} s of {self.lock_timeout_seconds:g} s")
        return wait

    def _unusable(self, path: Path, error: BaseException) -> str:
        """The message for a ledger file that cannot be opened, read or written."""
        text = str(error)
        if "not a database" in text or "malformed" in text or "disk image" in text:
            what, fix = ("is not a SQLite database (it is corrupt, truncated or another file)",
                         "Restore it from a backup (with its .head file)")
        elif "readonly" in text or "read-only" in text or isinstance(error, PermissionError):
            what, fix = ("cannot be written (a read-only file or folder)",
                         "Make the file, its folder and its -wal/-shm/.lock files writable by "
                         "this user")
        else:
            what, fix = (f"cannot be opened ({text})",
                         "Check that the path is a file in a folder this user can write, or "
                         "point DP_SYNTH_LEDGER (the ledger resource's `path`) at the ledger")
        return (f"The privacy ledger {self.path} {what}: {path}. Nothing was spent. {fix}; "
                f"never start a new, empty ledger in its place, which would forget what was "
                f"spent.")

    def _begin(self, conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE, waiting for SQLite's write lock as `_waiting` says."""
        wait = self._waiting(self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                if not _is_locked(e):
                    raise
                wait()

    def _connect(self, locked: bool = False) -> sqlite3.Connection:
        if not self.path.exists():
            self._ready = False
            head = self._head()
            if head is not None and head["rows"] > 0:
                raise LedgerError(
                    f"The privacy ledger {self.path} does not exist, but its head file "
                    f"{self.head_path} records {head['rows']} rows: the ledger was deleted or "
                    f"moved. {self._restore_hint()}")
        if self.path.is_dir():
            raise LedgerError(self._unusable(self.path, IsADirectoryError("it is a folder")))
        # SQLite waits at most this long inside one statement; `_begin` retries and reports
        step = max(0.001, min(self.lock_report_seconds, self.lock_timeout_seconds) / 5)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=step, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute(sql("ledger_busy_timeout", milliseconds=int(step * 1000)))
        except (OSError, sqlite3.Error) as e:
            raise LedgerError(self._unusable(self.path, e)) from None
        if not self._ready:
            try:
                if locked:
                    self._setup(conn)
                else:
                    with self._lock():
                        self._setup(conn)
            except BaseException:
                conn.close()
                raise
            self._ready = True
        return conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        """Create the tables and the chain's secret on first use; refuse a pre-chain ledger."""
        _enable_wal(conn, self.lock_timeout_seconds)
        self._begin(conn)
        try:
            columns = {row[0] for row in conn.execute(_COLUMNS_OF)}
            if columns and "hash" not in columns:
                raise LedgerError(
                    f"The privacy ledger {self.path} was written by an earlier dp-synth, without "
                    f"hash chain and privacy units. Migrate it into a new file: `python -m "
                    f"dp_synth_assets.resources.ledger migrate {self.path} <new ledger>` (run "
                    f"from the project folder, with DP_SYNTH_DATASETS and DP_SYNTH_WAREHOUSE set "
                    f"as for Dagster), then point DP_SYNTH_LEDGER at the new file (or move it to "
                    f"the default .dp_synth/ledger.sqlite, with its .head file).")
            self._upgrade_kinds(conn)
            for statement in _SCHEMA:
                conn.execute(statement)
            if conn.execute(_GENESIS).fetchone() is None:
                conn.execute(_INSERT_GENESIS, (secrets.token_hex(32),))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if self._head() is None:
            rows, genesis = self._load(conn)
            if not rows:
                self._write_head(rows, genesis)

    @staticmethod
    def _upgrade_kinds(conn: sqlite3.Connection) -> None:
        """Inside `_setup`'s transaction: a ledger whose events table predates the `limit` kind
        (its CHECK constraint refuses it) gets the current table, its rows copied unchanged,
        so the hash chain is the same."""
        found = conn.execute(sql("ledger_events_schema")).fetchone()
        if found is None or "'limit'" in found[0]:
            return
        conn.execute(sql("ledger_upgrade_rename"))
        conn.execute(_SCHEMA[0])
        conn.execute(sql("ledger_upgrade_copy"))
        conn.execute(sql("ledger_upgrade_drop"))

    def _load(self, conn: sqlite3.Connection) -> tuple[list[dict], str]:
        """All rows in id order and the chain's starting hash, unverified."""
        secret = conn.execute(_GENESIS).fetchone()
        if secret is None:
            raise LedgerError(f"The privacy ledger {self.path} has lost its chain secret "
                              f"(table ledger_meta). {self._restore_hint()}")
        return [dict(row) for row in conn.execute(_SELECT)], _genesis_hash(secret[0])

    @contextmanager
    def _transaction(self) -> Iterator[_Tx]:
        """One write under the lock: a BEGIN IMMEDIATE transaction over the verified rows,
        committed on success (then the head is mirrored), rolled back on any exception."""
        with self._lock(), self._file_errors():
            head = self._head()
            conn = self._connect(locked=True)
            try:
                self._begin(conn)
                try:
                    rows, genesis = self._load(conn)
                    self._verify(rows, genesis, head)
                    tx = _Tx(conn, rows, genesis)
                    before = len(rows)
                    yield tx
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            finally:
                conn.close()
            if len(tx.rows) != before:
                self._write_head(tx.rows, tx.genesis)

    def _read(self) -> list[dict]:
        """All rows, verified. The head is read first: it only advances after a commit, so the
        rows read next extend it unless the ledger was tampered with."""
        with self._file_errors():
            head = self._head()
            conn = self._connect()
            try:
                rows, genesis = self._load(conn)
            finally:
                conn.close()
        self._verify(rows, genesis, head)
        return rows

    @contextmanager
    def _file_errors(self) -> Iterator[None]:
        """SQLite's and the file system's errors (not a lock wait: `_waiting`) as a LedgerError
        naming the file and the fix (`_unusable`)."""
        try:
            yield
        except sqlite3.OperationalError as e:
            if _is_locked(e):
                raise LedgerError(
                    f"The privacy ledger {self.path} stayed locked by "
                    f"{describe_processes(lock_holders(self.path))}: {e}. Nothing was spent by "
                    f"this attempt; retry when that process is done, or raise the ledger's "
                    f"`lock_timeout_seconds`.") from None
            self._ready = False
            raise LedgerError(self._unusable(self.path, e)) from None
        except (sqlite3.Error, OSError) as e:
            self._ready = False
            raise LedgerError(self._unusable(self.path, e)) from None

    def _insert(self, tx: _Tx, scope: tuple[str, str], dataset: str, run_id: str, kind: str,
                rho: float,
                delta_extra: float = 0.0, stage=None, mechanism=None, parameters=None,
                ts: str | None = None, owner: str | None = None) -> dict:
        row = {"id": len(tx.rows) + 1,
               "ts": ts or datetime.now(timezone.utc).isoformat(timespec="microseconds"),
               "unit": scope[0], "source": scope[1], "dataset": dataset, "run_id": run_id, "stage": stage,
               "mechanism": mechanism, "kind": kind, "rho": float(rho),
               "delta_extra": float(delta_extra), "parameters": _json(parameters or {}),
               "owner": owner or owner_id(self.owner_pid)}
        row["hash"] = _chain(tx.last_hash, row)
        tx.conn.execute(_INSERT, (*(row[c] for c in _COLUMNS), row["hash"]))
        tx.rows.append(row)
        return row

    def _insert_release(self, tx: _Tx, o: _Open, reason: str) -> None:
        parameters = {"reason": reason, "reserve_id": o.row["id"], "reserved_rho": o.row["rho"],
                      "charged_rho": o.charged_rho, "charged_delta_extra": o.charged_delta_extra}
        self._insert(tx, (o.row["unit"], o.row["source"]), o.row["dataset"], o.row["run_id"],
                     "release",
                     o.remaining_rho, o.remaining_delta_extra, parameters=parameters)

    # -- staleness

    def _stale_reason(self, o: _Open, now: datetime) -> str | None:
        if owner_alive(o.last_owner) is False:
            return "stale: owner process gone"
        idle = (now - datetime.fromisoformat(o.last_ts)).total_seconds()
        if idle > self.stale_after_seconds:
            return f"stale: no activity for {idle:.0f} s (stale after {self.stale_after_seconds:g} s)"
        return None

    def _release_stale(self, tx: _Tx, now: datetime) -> list[str]:
        released = []
        for unit in dict.fromkeys(row["unit"] for row in tx.rows):
            for (_, run_id), o in _Book([r for r in tx.rows if r["unit"] == unit]).open.items():
                reason = self._stale_reason(o, now)
                if reason:
                    self._insert_release(tx, o, reason)
                    released.append(run_id)
        return released

    def release_stale(self, now: datetime | None = None) -> list[str]:
        """Release every stale open reservation (any dataset); returns the released run ids."""
        with self._transaction() as tx:
            return self._release_stale(tx, _utc(now))

    # -- the run's life: reserve, charge, release

    def reserve(self, dataset: str, run_id: str, rho: float, limit_rho: float,
                delta_extra: float = 0.0, limit_delta_extra: float = 0.0, *,
                delta: float | None = None) -> Reservation:
        """Reserve a run's whole budget, or raise BudgetExceeded (after releasing stale reservations).

        Fits when the unit's spent + reserved + rho <= limit_rho (and likewise for delta_extra).
        A `limit_rho` (or `limit_delta_extra`) above the unit's kept limit raises
        `LimitNotGranted`; the first reservation of a unit keeps its limit. A run that already holds an open reservation for this dataset gets that one back. `delta`
        only serves the refusal's message (epsilon figures) and is recorded in the row's parameters.
        """
        rho, limit_rho = _check_amount("rho", rho), _check_amount("limit_rho", limit_rho)
        delta_extra = _check_amount("delta_extra", delta_extra)
        limit_delta_extra = _check_amount("limit_delta_extra", limit_delta_extra)
        if delta is not None and not 0 < delta < 1:
            raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
        refusal = None
        with self._transaction() as tx:
            self._release_stale(tx, _utc(None))
            scope, book = self._scope(dataset, tx.rows)
            unit = scope[0]
            if (dataset, run_id) in book.open:
                return book.open[dataset, run_id].reservation()
            reserved_rho, reserved_delta_extra = book.reserved()
            group = dict(group=group_name(unit), members=self._members(unit, dataset),
                         entry=self.entries.get(dataset))
            if book.limit is not None and not (
                    _fits(limit_rho, book.limit["rho"])
                    and _fits(limit_delta_extra, book.limit["delta_extra"])):
                refusal = LimitNotGranted(dataset, unit, limit_rho, limit_delta_extra,
                                          book.limit, delta, self.entries.get(dataset))
            elif not _fits(book.spent_rho + reserved_rho + rho, limit_rho):
                refusal = BudgetExceeded(dataset, rho, book.spent_rho, reserved_rho, limit_rho, delta,
                                         **group)
            elif not _fits(book.spent_delta_extra + reserved_delta_extra + delta_extra,
                           limit_delta_extra):
                refusal = BudgetExceeded(
                    dataset, rho, book.spent_rho, reserved_rho, limit_rho, delta,
                    detail=f"It is delta_extra that does not fit: requested {delta_extra:g}, spent "
                    f"{book.spent_delta_extra:g}, reserved {reserved_delta_extra:g}, limit "
                    f"{limit_delta_extra:g}.", **group,
                )
            else:
                parameters = {"limit_rho": limit_rho, "limit_delta_extra": limit_delta_extra,
                              "delta": delta, "spent_rho": book.spent_rho,
                              "reserved_rho": reserved_rho}
                row = self._insert(tx, scope, dataset, run_id, "reserve", rho, delta_extra,
                                   parameters=parameters)
        if refusal is not None:  # raised after the commit, which keeps the stale releases
            raise refusal
        return Reservation(dataset, run_id, rho, delta_extra, row["id"], row["ts"], row["owner"],
                           unit)

    def charge(self, dataset: str, run_id: str, stage: str, spend: Spend,
               parameters: dict | None = None) -> None:
        """Record one mechanism's spend against the run's open reservation, or refuse it."""
        rho = _check_amount("spend.rho", spend.rho)
        delta_extra = _check_amount("spend.delta_extra", spend.delta_extra)
        with self._transaction() as tx:
            scope, book = self._scope(dataset, tx.rows)
            o = book.open.get((dataset, run_id))
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
            self._insert(tx, scope, dataset, run_id, "charge", rho, delta_extra, stage=stage,
                         mechanism=spend.mechanism, parameters=recorded)

    def release(self, dataset: str, run_id: str, reason: str = "run finished") -> None:
        """Close the run's reservation, giving back the unspent remainder; no-op if none is open."""
        with self._transaction() as tx:
            o = self._scope(dataset, tx.rows)[1].open.get((dataset, run_id))
            if o is not None:
                self._insert_release(tx, o, reason)

    def set_limit(self, dataset: str, limit_rho: float, limit_delta_extra: float = 0.0, *,
                  reason: str, delta: float | None = None, by: str | None = None) -> dict:
        """Record a new limit for the dataset's unit (a `limit` row: the explicit way to raise,
        or lower, what the ledger keeps; module docstring). `reason` is required and kept with
        `by` (default: the user and host running this) and `delta` (for epsilon figures).
        Returns the row."""
        limit_rho = _check_amount("limit_rho", limit_rho)
        limit_delta_extra = _check_amount("limit_delta_extra", limit_delta_extra)
        if not reason or not reason.strip():
            raise ValueError("a limit change needs a reason, recorded in the ledger")
        if by is None:
            import getpass

            by = f"{getpass.getuser()}@{socket.gethostname()}"
        with self._transaction() as tx:
            scope, book = self._scope(dataset, tx.rows)
            before = book.limit
            parameters = {"reason": reason.strip(), "by": by, "delta": delta,
                          "previous_rho": None if before is None else before["rho"],
                          "previous_delta_extra": None if before is None
                          else before["delta_extra"]}
            return self._insert(tx, scope, dataset, "", "limit", limit_rho, limit_delta_extra,
                                parameters=parameters)

    def limit(self, dataset: str) -> tuple[float, float] | None:
        """(rho, delta_extra) of the limit the ledger keeps for the dataset's unit, or None
        before its first reservation."""
        book = self._scope(dataset, self._read())[1]
        return None if book.limit is None else (book.limit["rho"], book.limit["delta_extra"])

    # -- reading

    def summary(self, dataset: str) -> LedgerSummary:
        """Spent and reserved budget of the dataset's unit, with charges per run and stage."""
        return self.summaries([dataset])[dataset]

    def summaries(self, datasets: Iterable[str]) -> dict[str, LedgerSummary]:
        """`summary` of each of `datasets`, from one read (and one tamper check) of the ledger:
        a reader of every dataset's budget reads the rows once, not once per dataset."""
        rows = self._read()
        found = {}
        for dataset in datasets:
            (unit, _), book = self._scope(dataset, rows)
            reserved_rho, reserved_delta_extra = book.reserved()
            found[dataset] = LedgerSummary(dataset, book.spent_rho, reserved_rho,
                                           book.spent_delta_extra, book.runs,
                                           reserved_delta_extra, unit)
        return found

    def spent_by_run(self, dataset: str, run_id: str) -> dict[str, float]:
        """A run's charges for this dataset by stage (every charge it ever made)."""
        by_stage: dict[str, float] = {}
        for row in self._read():
            if row["kind"] == "charge" and row["dataset"] == dataset and row["run_id"] == run_id:
                by_stage[row["stage"]] = by_stage.get(row["stage"], 0.0) + row["rho"]
        return by_stage

    def events(self, dataset: str | None = None) -> list[dict]:
        """All rows in order (those the dataset's budget counts, if given), `parameters` decoded."""
        rows = self._read()
        if dataset is not None:
            rows = self._counted(dataset, rows)[1]
        for row in rows:
            row["parameters"] = json.loads(row["parameters"])
        return rows

    def head(self) -> tuple[int, str]:
        """(row count, hash of the last row) of the verified ledger: what the mirrors record."""
        rows = self._read()
        if rows:
            return len(rows), rows[-1]["hash"]
        with self._file_errors():
            conn = self._connect()
            try:
                return 0, self._load(conn)[1]
            finally:
                conn.close()

    def verify_published(self, rows: int, head: str, where: str) -> None:
        """Refuse (LedgerError) unless this ledger extends a head published elsewhere (`rows`
        rows ending in hash `head`, e.g. the `privacy/ledger_*` metadata of a spending
        materialization, named by `where`): a ledger deleted together with its head file, or
        swapped for another or an older one, has fewer rows than the public outputs prove were
        spent, or another hash at that row. Creates no ledger file."""
        if rows <= 0:
            return
        if not self.path.exists():
            raise LedgerError(
                f"The privacy ledger {self.path} does not exist, but {where} records that it had "
                f"{rows} rows: the ledger was deleted or moved. {self._restore_hint()}")
        recorded = self._read()
        if len(recorded) < rows or recorded[rows - 1]["hash"] != head:
            raise LedgerError(
                f"The privacy ledger {self.path} does not extend the head that {where} records "
                f"({rows} rows, head {head[:16]}...): it has "
                f"{'fewer rows' if len(recorded) < rows else 'another hash at that row'}, so "
                f"spending recorded there is missing. {self._restore_hint()}")

    def can_cover(self, dataset: str, rho: float, limit_rho: float, delta_extra: float = 0.0,
                  limit_delta_extra: float = 0.0, now: datetime | None = None) -> bool:
        """Whether `reserve` would succeed now (stale reservations count as released); writes
        nothing. Raises LedgerError like `reserve` when the ledger fails its tamper checks."""
        now = _utc(now)
        rows = self._read()
        book = self._scope(dataset, rows)[1]
        if book.limit is not None and not (_fits(limit_rho, book.limit["rho"]) and
                                           _fits(limit_delta_extra, book.limit["delta_extra"])):
            return False  # `reserve` would refuse: the limit is above the kept one
        live = [o for o in book.open.values() if self._stale_reason(o, now) is None]
        reserved_rho, reserved_delta_extra = book.reserved(live)
        return _fits(book.spent_rho + reserved_rho + rho, limit_rho) and _fits(
            book.spent_delta_extra + reserved_delta_extra + delta_extra, limit_delta_extra
        )

    def adopt(self) -> tuple[int, str]:
        """Record the current head of a ledger whose chain recomputes as its mirrored head (after
        the head file was lost); returns it. The caller vouches that the ledger is complete."""
        with self._lock():
            conn = self._connect(locked=True)
            try:
                rows, genesis = self._load(conn)
            finally:
                conn.close()
            self._verify(rows, genesis, {"rows": 0, "head": genesis, "genesis": genesis})
            self._write_head(rows, genesis)
        return len(rows), rows[-1]["hash"] if rows else genesis


def migrate_legacy(old: str | Path, new: str | Path, units: dict[str, str],
                   sources: dict[str, str] | None = None) -> int:
    """Copy the rows of a ledger written before the hash chain (keyed by dataset name), in order
    and unchanged, into a new chained ledger at `new`; each row's unit is its dataset's unit in
    `units` (its dataset name for an entry no longer registered). Returns the number of rows.
    The old file is only read; the new one must not exist."""
    if Path(new).exists():
        raise LedgerError(f"{new} exists; migrate into a new file")
    source = sqlite3.connect(f"file:{Path(old).resolve()}?mode=ro", uri=True)
    source.row_factory = sqlite3.Row
    try:
        rows = [dict(row) for row in source.execute(_LEGACY_SELECT)]
    finally:
        source.close()
    sources = sources or {}
    ledger = PrivacyLedger(new, units=units, sources=sources)
    with ledger._transaction() as tx:
        for r in rows:
            unit = units.get(r["dataset"], r["dataset"])
            ledger._insert(tx, (unit, sources.get(r["dataset"], unit)), r["dataset"], r["run_id"],
                           r["kind"], r["rho"], r["delta_extra"], r["stage"], r["mechanism"],
                           json.loads(r["parameters"]), ts=r["ts"], owner=r["owner"])
    return len(rows)
