"""The privacy ledger that reads and writes its rows: `PrivacyLedger`.

Used by the notebook API and, through `dp_synth_assets.resources.ledger.LedgerResource`, by the
pipeline. What the rows mean is `core.ledger`, the hash chain `core.ledger_chain`; the rows live
in a store (`infra.ledger_store`). Guarantee: every read-modify-write is one transaction that
serializes it across processes (and hosts, in PostgreSQL), so concurrent runs cannot overspend;
rows are only inserted; every access recomputes the chain against the mirrored head and raises
`LedgerError`, spending nothing, on an edited, truncated, older or missing ledger, a lock held
too long, or a ledger that cannot be opened. Details: docs/decisions/0004-privacy-ledger.md,
"As implemented: infra/ledger.py"."""

import json
import math
import socket
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..core.budget import fits as _fits
from ..core.ledger import (Book, BudgetExceeded, ChargeExceedsReservation, LedgerError,
                           LedgerSummary, LimitNotGranted, OpenReservation, Reservation,
                           recorded, scope, summarize)
from ..core.ledger_chain import link, verify
from ..core.privacy import Spend
from ..core.units import group_name
from .ledger_store import DEFAULT_SCHEMA, StoreTx, open_store
from .locks import owner_alive, owner_id

BUSY_TIMEOUT_MS = 30_000  # the default lock timeout (`PrivacyLedger.lock_timeout_seconds`)
LOCK_REPORT_SECONDS = 5.0
DEFAULT_STALE_AFTER_SECONDS = 6 * 3600.0


def _check_amount(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def utc_now() -> datetime:
    """The ledger's default clock: the time now, in UTC."""
    return datetime.now(timezone.utc)


def _utc(now: datetime | None, clock: Callable[[], datetime]) -> datetime:
    if now is None:
        return clock()
    return now if now.tzinfo else now.replace(tzinfo=timezone.utc)


def _json(parameters: dict) -> str:
    """JSON text of a parameters dict; numpy scalars become numbers, anything else its str()."""
    return json.dumps(parameters, sort_keys=True,
                      default=lambda o: o.item() if hasattr(o, "item") else str(o))


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


class PrivacyLedger:
    """The append-only privacy ledger at `path`: the SQLite file `path` (created on first use),
    or, when `path` is a postgresql:// (postgres://) URL, the schema `schema` of that database
    (created on first use); `infra.ledger_store` keeps the rows, `core.ledger` says what they mean.

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
    `infra.ledger_store`), or when the run has written nothing for `stale_after_seconds`.
    `owner_pid` names the process whose death makes this ledger's reservations stale (default:
    the calling process); a Dagster step running in a child process of the run worker may pass
    the run worker's pid (its death is then seen from its host only). `clock` gives the time now
    (UTC) for rows' timestamps and staleness (default `utc_now`; a test moves one by hand).
    """

    def __init__(self, path: str | Path, stale_after_seconds: float = DEFAULT_STALE_AFTER_SECONDS,
                 owner_pid: int | None = None, units: dict[str, str] | None = None,
                 head_path: str | Path | None = None, sources: dict[str, str] | None = None,
                 lock_timeout_seconds: float = BUSY_TIMEOUT_MS / 1000,
                 lock_report_seconds: float = LOCK_REPORT_SECONDS, log=None,
                 entries: dict[str, str] | None = None, schema: str = DEFAULT_SCHEMA,
                 aliases: dict[str, tuple[str, ...]] | None = None,
                 clock: Callable[[], datetime] = utc_now):
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
        self.clock = clock  # the time now (UTC): rows' timestamps and staleness

    # -- units

    def unit_of(self, dataset: str, rows: list[dict]) -> str:
        """The dataset's privacy unit: from `units`, else as its latest row recorded it."""
        return recorded(self.units, "unit", dataset, rows)

    def _scope(self, dataset: str, rows: list[dict]) -> tuple[tuple[str, str], Book]:
        where, counted = self._counted(dataset, rows)
        return where, Book(counted)

    def _counted(self, dataset: str, rows: list[dict]) -> tuple[tuple[str, str], list[dict]]:
        """(unit, source) of the dataset and every row its budget counts (`core.ledger.scope`)."""
        return scope(dataset, rows, self.units, self.sources, self.aliases)

    def _members(self, unit: str, dataset: str) -> tuple[str, ...]:
        return tuple(sorted({d for d, u in self.units.items() if u == unit} | {dataset}))

    # -- tamper evidence

    def _restore_hint(self) -> str:
        return self._store.restore_hint()

    def _verify(self, rows: list[dict], genesis: str, head: dict | None) -> None:
        """Refuse (LedgerError) unless the chain recomputes and the ledger extends the head
        (`core.ledger_chain.verify`)."""
        verify(rows, genesis, head, name=self._store.name, mirror=self._store.head_name,
               restore_hint=self._restore_hint(), adopt_command=self._store.adopt_command())

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
               "ts": ts or self.clock().isoformat(timespec="microseconds"),
               "unit": scope[0], "source": scope[1], "dataset": dataset, "run_id": run_id, "stage": stage,
               "mechanism": mechanism, "kind": kind, "rho": float(rho),
               "delta_extra": float(delta_extra), "parameters": _json(parameters or {}),
               "owner": owner or owner_id(self.owner_pid)}
        row["hash"] = link(tx.last_hash, row)
        tx.store.insert(row)
        tx.rows.append(row)
        return row

    def _insert_release(self, tx: _Tx, o: OpenReservation, reason: str) -> None:
        parameters = {"reason": reason, "reserve_id": o.row["id"], "reserved_rho": o.row["rho"],
                      "charged_rho": o.charged_rho, "charged_delta_extra": o.charged_delta_extra}
        self._insert(tx, (o.row["unit"], o.row["source"]), o.row["dataset"], o.row["run_id"],
                     "release",
                     o.remaining_rho, o.remaining_delta_extra, parameters=parameters)

    # -- staleness

    def _stale_reason(self, o: OpenReservation, now: datetime, gone=frozenset()) -> str | None:
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
        books = [Book([r for r in tx.rows if r["unit"] == unit])
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
            return self._release_stale(tx, _utc(now, self.clock))

    # -- the run's life: reserve, charge, release

    def reserve(self, dataset: str, run_id: str, rho: float, limit_rho: float,
                delta_extra: float = 0.0, limit_delta_extra: float = 0.0, *,
                delta: float | None = None) -> Reservation:
        """Reserve a run's whole budget, or raise BudgetExceeded (after releasing stale
        reservations).

        Fits when the unit's spent + reserved + rho <= limit_rho (and likewise for delta_extra). A
        `limit_rho` (or `limit_delta_extra`) above the unit's kept limit raises `LimitNotGranted`;
        the first reservation of a unit keeps its limit. A run that already holds an open
        reservation for this dataset gets that one back. `delta` only serves the refusal's message
        (epsilon figures) and is recorded in the row's parameters.
        """
        rho, limit_rho = _check_amount("rho", rho), _check_amount("limit_rho", limit_rho)
        delta_extra = _check_amount("delta_extra", delta_extra)
        limit_delta_extra = _check_amount("limit_delta_extra", limit_delta_extra)
        if delta is not None and not 0 < delta < 1:
            raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
        refusal = None
        with self._transaction() as tx:
            self._release_stale(tx, self.clock())
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
        or lower, what the ledger keeps; 0004-privacy-ledger.md). `reason` is required and kept with
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
            found[dataset] = summarize(dataset, unit, book)
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
        now = _utc(now, self.clock)
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

