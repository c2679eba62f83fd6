"""The privacy ledger's meaning over plain rows, no I/O (docs/decisions/0004-privacy-ledger.md).

Its records (one row of `privacy_ledger` per `reserve`, `charge`, `release` or `limit` event),
its refusals (`LimitNotGranted` for a reservation above the unit's granted limit, naming the
command that raises it) and the fold of a unit's rows into its budget (`Book`, `scope`): spent
is the sum of all charges, forever; reserved is the open reservations minus their charges. Rows
are keyed by privacy unit (`core.units`), so the arithmetic sums over the unit whatever entry
wrote them. The hash chain is `core.ledger_chain`; `infra.ledger.PrivacyLedger` reads and
writes the rows. The event kinds and the limit rule: docs/decisions/0004-privacy-ledger.md,
"As implemented: core/ledger.py"."""

import json
from dataclasses import dataclass, field

from .budget import remaining_rho
from .budget import fits as _fits
from .privacy import epsilon_from_rho
from .units import alias_digest

KINDS = ("reserve", "charge", "release", "limit")


class LedgerError(Exception):
    """A misuse of the ledger (a charge by a run that holds no reservation), or a ledger that
    fails its tamper checks or cannot be reached (the message says what and how to fix it)."""


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
class OpenReservation:
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


class Book:
    """The state of one privacy unit, folded from its rows in id order (dicts with the ledger's
    columns: id, ts, unit, source, dataset, run_id, stage, mechanism, kind, rho, delta_extra,
    parameters as JSON text, owner). A reservation belongs to a (dataset, run): one Dagster run
    may materialize two datasets of one unit.

    Attributes:
        spent_rho, spent_delta_extra: the sums of every charge, whether its run is open or not.
        open: (dataset, run_id) -> its `OpenReservation` (a reserve row not yet released).
        runs: run_id -> stage -> the rho that stage charged.
        limit: the unit's kept limit {rho, delta_extra, row, explicit}, or None before its
            first reservation (0004-privacy-ledger.md).
    """

    def __init__(self, rows: list[dict]):
        self.open: dict[tuple[str, str], OpenReservation] = {}
        self.spent_rho = 0.0
        self.spent_delta_extra = 0.0
        self.runs: dict[str, dict[str, float]] = {}
        self.limit: dict | None = None  # the unit's granted limit (0004, core/ledger.py)
        for row in rows:
            key, kind = (row["dataset"], row["run_id"]), row["kind"]
            if kind == "reserve":
                self.open[key] = OpenReservation(row, last_ts=row["ts"], last_owner=row["owner"])
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


def recorded(mapping: dict[str, str], column: str, dataset: str, rows: list[dict]) -> str:
    """`mapping[dataset]`, else the `column` of the dataset's latest row, else the dataset."""
    if dataset in mapping:
        return mapping[dataset]
    for row in reversed(rows):
        if row["dataset"] == dataset:
            return row[column]
    return dataset


def scope(dataset: str, rows: list[dict], units: dict[str, str], sources: dict[str, str],
          aliases: dict[str, tuple[str, ...]]) -> tuple[tuple[str, str], list[dict]]:
    """(unit, source) of the dataset, and every row its budget counts: the rows of its unit and
    the rows on any source of the unit, whatever unit they were recorded in (so joining or
    leaving a budget group does not forget what a source has spent), and the rows recorded
    under an earlier name of one of those sources (`aliases`, as `units.alias_digest`s).

    Args:
        dataset: the entry name.
        rows: the ledger's rows in id order.
        units, sources: dataset -> privacy unit, resp. source identity; a dataset they do not
            name is where its latest row was recorded, else a unit of its own name.
        aliases: dataset -> earlier names of its source.

    Returns:
        ((unit, source), the counted rows in id order): fold them with `Book`.
    """
    unit = recorded(units, "unit", dataset, rows)
    source = recorded(sources, "source", dataset, rows)
    members = {d for d, u in units.items() if u == unit} | {dataset}
    found = {source} | {sources[d] for d in members if d in sources}
    earlier = {a for d in members for a in aliases.get(d, ())}
    if not earlier:
        return (unit, source), [r for r in rows if r["unit"] == unit or r["source"] in found]
    return (unit, source), [r for r in rows if r["unit"] == unit or r["source"] in found
                            or alias_digest(r["unit"]) in earlier
                            or alias_digest(r["source"]) in earlier]


def summarize(dataset: str, unit: str, book: Book) -> LedgerSummary:
    """The `LedgerSummary` of a dataset whose unit's rows `book` folded."""
    reserved_rho, reserved_delta_extra = book.reserved()
    return LedgerSummary(dataset, book.spent_rho, reserved_rho, book.spent_delta_extra,
                         book.runs, reserved_delta_extra, unit)
