"""The privacy ledger (docs/decisions/0004-privacy-ledger.md; the hash chain:
docs/decisions/0005-ledger-hash-chain.md): an append-only table of budget events, in a SQLite
file or in a schema of a PostgreSQL database (`core.ledger_store`: this module is the ledger's
logic, the store keeps its rows).

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
Every read-modify-write is one transaction of the store that serializes it across processes
(SQLite: `BEGIN IMMEDIATE` under a lock file; PostgreSQL: under an advisory lock, across hosts
too), so concurrent runs cannot overspend. Rows are never updated or deleted: this module only
inserts, and triggers make the database refuse UPDATE and DELETE as well.

Rows are keyed by privacy unit (dp_synth_assets.core.units): the source's identity or a budget
group; the budget arithmetic (spent, reserved, reserve, can_cover) sums over the unit, whatever
entry name wrote the rows. The `dataset` column keeps the entry name for display.

Tamper evidence: row i carries hash_i = sha256(hash_{i-1} "\n" canonical(row i)), where hash_0
derives from a random secret drawn when the ledger is created (so the public head hash cannot be
tested against guessed row contents); a row hashes alike in both stores. Each write that adds
rows mirrors the head (row count, hash of the last row, hash_0): SQLite, after the commit, to the
head file `<ledger>.head`; PostgreSQL, in the same transaction, to the table `ledger_head`.
Spending assets also publish the head in their metadata. Every reading or writing access
recomputes the chain and requires the ledger to extend the mirrored head: an edited row, a
truncated ledger, an older copy, another ledger, or a missing ledger whose head file records
rows, raise LedgerError and nothing is spent (`core.ledger_store` says what each mirror can and
cannot see). A crash between a SQLite commit and its head update leaves the ledger ahead of its
mirror, which is accepted.

Locks and errors: a wait for the ledger's lock is reported through `log` every
`lock_report_seconds` while it lasts and ends after `lock_timeout_seconds` in a LedgerError
naming the ledger, who holds the lock and the fix. A ledger that cannot be opened, read or
written (a corrupt or read-only file, an unreachable server, a missing permission) raises a
LedgerError naming it (never a password) and the fix, before anything is spent.

`PrivacyLedger` uses only the standard library (and psycopg, imported when the ledger is in
PostgreSQL) and its statements in sql/ledger_*.sql, so the pipeline (through
`dp_synth_assets.resources.ledger.LedgerResource`, its Dagster wrapper) and the notebook API
share it.
"""

import hashlib
import json
import math
import socket
import sqlite3
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
from .ledger_store import (  # noqa: F401 - re-exported: the ledger's names, wherever it is stored
    DEFAULT_SCHEMA,
    LEDGER_HEAD_SUFFIX,
    LEDGER_LOCK_SUFFIX,
    LedgerError,
    PostgresStore,
    SqliteStore,
    StoreTx,
    describe_processes,
    is_postgres,
    lock_holders,
    open_store,
    owner_alive,
    owner_id,
    redact,
)

KINDS = ("reserve", "charge", "release", "limit")
BUSY_TIMEOUT_MS = 30_000  # the default lock timeout (`PrivacyLedger.lock_timeout_seconds`)
LOCK_REPORT_SECONDS = 5.0
DEFAULT_STALE_AFTER_SECONDS = 6 * 3600.0

# What `migrate_legacy` reads of a ledger from before the hash chain (sql/ledger_legacy_rows.sql).
_LEGACY_SELECT = sql("ledger_legacy_rows")


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


# ---- the hash chain and its mirrored head -----------------------------------------------------------


def _canonical(row: dict) -> str:
    """A row's content as hashed: its columns in a fixed order, floats as exact reprs."""
    values = [row["id"], row["ts"], row["unit"], row["source"], row["dataset"], row["run_id"], row["stage"],
              row["mechanism"], row["kind"], float(row["rho"]), float(row["delta_extra"]),
              row["parameters"], row["owner"]]
    return json.dumps(values, separators=(",", ":"), ensure_ascii=True)


def _chain(previous: str, row: dict) -> str:
    return hashlib.sha256(f"{previous}\n{_canonical(row)}".encode()).hexdigest()


@dataclass
class _Tx:
    """An open write transaction: the store's (`ledger_store.StoreTx`) and the verified rows,
    grown by each insert."""

    store: StoreTx
    rows: list[dict]
    genesis: str

    @property
    def last_hash(self) -> str:
        return self.rows[-1]["hash"] if self.rows else self.genesis


# ---- the ledger -------------------------------------------------------------------------------------


class PrivacyLedger:
    """The append-only privacy ledger at `path`: the SQLite file `path` (created on first use),
    or, when `path` is a postgresql:// (postgres://) URL, the schema `schema` of that database
    (created on first use); `core.ledger_store` keeps the rows, this class their meaning.

    `units` maps dataset names to privacy units (dp_synth_assets.core.units.privacy_units) and
    `sources` to their source identities (a unit's budget also counts the rows recorded on its
    sources under another unit); a dataset they do not name is taken to be where its latest row
    was recorded, else in a unit of its own name. `head_path` is the mirrored head file of a
    SQLite ledger (default `<path>.head`; a PostgreSQL ledger mirrors its head in a table).
    `entries` maps dataset names to where their entries are written (`config.DatasetSpec.entry`),
    which a budget refusal names. `aliases` maps dataset names to earlier names of their source
    (`units.aliases`, as `units.alias_digest`s): rows recorded under them count for the
    dataset's unit.

    An open reservation is stale, and released by the next `reserve` or by `release_stale`, when the
    process that last wrote for its run (reserve or charge) is gone: seen on this host from its
    process table, and from any host with a PostgreSQL ledger (its presence lock,
    `core.ledger_store`), or when the run has written nothing for `stale_after_seconds`.
    `owner_pid` names the process whose death makes this ledger's reservations stale (default:
    the calling process); a Dagster step running in a child process of the run worker may pass
    the run worker's pid (its death is then seen from its host only).
    """

    def __init__(self, path: str | Path, stale_after_seconds: float = DEFAULT_STALE_AFTER_SECONDS,
                 owner_pid: int | None = None, units: dict[str, str] | None = None,
                 head_path: str | Path | None = None, sources: dict[str, str] | None = None,
                 lock_timeout_seconds: float = BUSY_TIMEOUT_MS / 1000,
                 lock_report_seconds: float = LOCK_REPORT_SECONDS, log=None,
                 entries: dict[str, str] | None = None, schema: str = DEFAULT_SCHEMA,
                 aliases: dict[str, tuple[str, ...]] | None = None):
        self._store = open_store(path, self, head_path, schema)
        self.path = self._store.path  # the file, or the URL without its password
        self.head_path = self._store.head_path  # None in PostgreSQL
        self.database = self._store.database  # the PostgreSQL schema, None for a file
        self.stale_after_seconds = float(stale_after_seconds)
        self.owner_pid = owner_pid
        self.units = dict(units or {})
        self.sources = dict(sources or {})
        self.entries = dict(entries or {})
        self.aliases = {name: tuple(names) for name, names in (aliases or {}).items()}
        self.lock_timeout_seconds = float(lock_timeout_seconds)
        self.lock_report_seconds = float(lock_report_seconds)
        self.log = log  # a callable taking one line (a wait still going on), or None

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
        return self._store.restore_hint()

    def _verify(self, rows: list[dict], genesis: str, head: dict | None) -> None:
        """Refuse (LedgerError) unless the chain recomputes and the ledger extends the head."""
        name, mirror = self._store.name, self._store.head_name
        previous = genesis
        for position, row in enumerate(rows, start=1):
            if row["id"] != position or _chain(previous, row) != row["hash"]:
                raise LedgerError(
                    f"The privacy ledger {name} fails its hash chain at row {row['id']}: a "
                    f"row was edited, removed or inserted. {self._restore_hint()}")
            previous = row["hash"]
        if head is None:
            if rows:
                raise LedgerError(
                    f"The privacy ledger {name} has {len(rows)} rows but no {mirror}, so a "
                    f"truncated or swapped ledger cannot be ruled out. If you moved the ledger, "
                    f"move its head with it. If this ledger is complete (compare with the "
                    f"`privacy/ledger_head` metadata of the latest spending materialization), "
                    f"record its head with `{self._store.adopt_command()}`.")
            return
        if head["genesis"] != genesis:
            raise LedgerError(
                f"The privacy ledger {name} is not the ledger its {mirror} mirrors (it is "
                f"another ledger, or a new one: the ledger was swapped or deleted). "
                f"{self._restore_hint()}")
        if len(rows) < head["rows"]:
            raise LedgerError(
                f"The privacy ledger {name} has {len(rows)} rows, but its {mirror} records "
                f"{head['rows']}: rows were removed (the ledger was truncated, or an older copy "
                f"was put in its place). {self._restore_hint()}")
        if head["rows"] and rows[head["rows"] - 1]["hash"] != head["head"]:
            raise LedgerError(
                f"Row {head['rows']} of the privacy ledger {name} does not carry the head "
                f"hash its {mirror} records: the ledger was replaced or rewritten. "
                f"{self._restore_hint()}")

    # -- the store

    @contextmanager
    def _transaction(self) -> Iterator[_Tx]:
        """One serialized write (`ledger_store`): the verified rows, committed on success (and
        the head mirrored), rolled back on any exception."""
        with self._store.transaction() as stx:
            self._verify(stx.rows, stx.genesis, stx.head)
            yield _Tx(stx, stx.rows, stx.genesis)

    def _snapshot(self) -> tuple[list[dict], str]:
        """All rows, verified, and the chain's starting hash."""
        rows, genesis, head = self._store.snapshot()
        self._verify(rows, genesis, head)
        return rows, genesis

    def _read(self) -> list[dict]:
        """All rows, verified."""
        return self._snapshot()[0]

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
        tx.store.insert(row)
        tx.rows.append(row)
        return row

    def _insert_release(self, tx: _Tx, o: _Open, reason: str) -> None:
        parameters = {"reason": reason, "reserve_id": o.row["id"], "reserved_rho": o.row["rho"],
                      "charged_rho": o.charged_rho, "charged_delta_extra": o.charged_delta_extra}
        self._insert(tx, (o.row["unit"], o.row["source"]), o.row["dataset"], o.row["run_id"],
                     "release",
                     o.remaining_rho, o.remaining_delta_extra, parameters=parameters)

    # -- staleness

    def _stale_reason(self, o: _Open, now: datetime, gone=frozenset()) -> str | None:
        """Why an open reservation is stale, or None; `gone`: the owners the store knows are
        dead (`gone_owners`)."""
        if owner_alive(o.last_owner) is False or o.last_owner in gone:
            return "stale: owner process gone"
        idle = (now - datetime.fromisoformat(o.last_ts)).total_seconds()
        if idle > self.stale_after_seconds:
            return f"stale: no activity for {idle:.0f} s (stale after {self.stale_after_seconds:g} s)"
        return None

    def _release_stale(self, tx: _Tx, now: datetime) -> list[str]:
        released = []
        books = [_Book([r for r in tx.rows if r["unit"] == unit])
                 for unit in dict.fromkeys(row["unit"] for row in tx.rows)]
        gone = tx.store.gone({o.last_owner for book in books for o in book.open.values()})
        for book in books:
            for (_, run_id), o in book.open.items():
                reason = self._stale_reason(o, now, gone)
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
        rows, genesis = self._snapshot()
        return (len(rows), rows[-1]["hash"]) if rows else (0, genesis)

    def verify_published(self, rows: int, head: str, where: str) -> None:
        """Refuse (LedgerError) unless this ledger extends a head published elsewhere (`rows`
        rows ending in hash `head`, e.g. the `privacy/ledger_*` metadata of a spending
        materialization, named by `where`): a ledger deleted together with its head file (or,
        in PostgreSQL, its schema), or swapped for another or an older one, has fewer rows than
        the public outputs prove were spent, or another hash at that row. Creates no ledger."""
        if rows <= 0:
            return
        if not self._store.exists():
            raise LedgerError(
                f"The privacy ledger {self._store.name} does not exist, but {where} records "
                f"that it had {rows} rows: the ledger was deleted or moved. "
                f"{self._restore_hint()}")
        recorded = self._read()
        if len(recorded) < rows or recorded[rows - 1]["hash"] != head:
            raise LedgerError(
                f"The privacy ledger {self._store.name} does not extend the head that {where} "
                f"records ({rows} rows, head {head[:16]}...): it has "
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
        gone = self._store.gone_owners({o.last_owner for o in book.open.values()})
        live = [o for o in book.open.values() if self._stale_reason(o, now, gone) is None]
        reserved_rho, reserved_delta_extra = book.reserved(live)
        return _fits(book.spent_rho + reserved_rho + rho, limit_rho) and _fits(
            book.spent_delta_extra + reserved_delta_extra + delta_extra, limit_delta_extra
        )

    def adopt(self) -> tuple[int, str]:
        """Record the current head of a ledger whose chain recomputes as its mirrored head (after
        the head file, or the head table's rows, were lost); returns it. The caller vouches that
        the ledger is complete."""
        rows, genesis = self._store.adopt(
            lambda rows, genesis: self._verify(
                rows, genesis, {"rows": 0, "head": genesis, "genesis": genesis}))
        return len(rows), rows[-1]["hash"] if rows else genesis


def migrate_legacy(old: str | Path, new: str | Path, units: dict[str, str],
                   sources: dict[str, str] | None = None, schema: str = DEFAULT_SCHEMA) -> int:
    """Copy the rows of a ledger written before the hash chain (keyed by dataset name), in order
    and unchanged, into a new chained ledger at `new` (a file, or a PostgreSQL URL and `schema`);
    each row's unit is its dataset's unit in `units` (its dataset name for an entry no longer
    registered). Returns the number of rows. The old file is only read; a new file must not
    exist, a PostgreSQL ledger must hold no rows."""
    if not is_postgres(str(new)) and Path(new).exists():
        raise LedgerError(f"{new} exists; migrate into a new file")
    source = sqlite3.connect(f"file:{Path(old).resolve()}?mode=ro", uri=True)
    source.row_factory = sqlite3.Row
    try:
        rows = [dict(row) for row in source.execute(_LEGACY_SELECT)]
    finally:
        source.close()
    sources = sources or {}
    ledger = PrivacyLedger(new, units=units, sources=sources, schema=schema)
    with ledger._transaction() as tx:
        if tx.rows:
            raise LedgerError(f"The privacy ledger {ledger._store.name} already holds "
                              f"{len(tx.rows)} rows; migrate into an empty ledger. Nothing was "
                              f"copied.")
        for r in rows:
            unit = units.get(r["dataset"], r["dataset"])
            ledger._insert(tx, (unit, sources.get(r["dataset"], unit)), r["dataset"], r["run_id"],
                           r["kind"], r["rho"], r["delta_extra"], r["stage"], r["mechanism"],
                           json.loads(r["parameters"]), ts=r["ts"], owner=r["owner"])
    return len(rows)


def chained(path: str | Path) -> bool:
    """Whether the SQLite file at `path` is a ledger with the hash chain (else one from before
    it, which `migrate_legacy` copies); reads the file only."""
    source = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        return "hash" in {row[0] for row in source.execute(sql("ledger_columns"))}
    except sqlite3.Error as e:
        raise LedgerError(f"{path} is not a readable SQLite ledger ({e}); nothing was "
                          f"copied.") from None
    finally:
        source.close()


def migrate_chain(old: str | Path, new: str, schema: str = DEFAULT_SCHEMA,
                  old_head: str | Path | None = None) -> tuple[int, str]:
    """Copy a chained SQLite ledger (`old`, verified against its head file `old_head`, default
    `<old>.head`) into the empty PostgreSQL ledger at the URL `new`, schema `schema`: the same
    ids, rows, hashes and chain secret, in one transaction, then verified by reading it back
    through its own store. Returns (rows, head hash). The old file is only read; a target
    that already holds rows is refused and nothing is copied."""
    if not is_postgres(str(new)):
        raise LedgerError(
            f"{new} is not a postgresql:// URL: a chained SQLite ledger moves to another file "
            f"by copying it with its head file (`sqlite3 {old} \".backup <file>\"`, then the "
            f".head), not by migrate.")
    source = PrivacyLedger(old, head_path=old_head)
    rows, genesis = source._snapshot()
    target = PrivacyLedger(new, schema=schema)
    target._store.import_chain(source._store.secret(), rows)
    copied, copied_genesis = target._snapshot()
    if copied != rows or copied_genesis != genesis:
        raise LedgerError(f"The copy in {target._store.name} does not read back as the rows of "
                          f"{old}; do not use it.")
    return len(copied), copied[-1]["hash"] if copied else copied_genesis
