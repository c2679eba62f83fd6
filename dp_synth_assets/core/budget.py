"""The budget of one synthesis run, in zCDP terms (DESIGN.md section 3), with no Dagster in it.

`DatasetBudget.of(spec)` converts a dataset's (epsilon, delta) run budget and lifetime limit into
rho, and splits the run's rho between the stages; `measurement_plan` splits the measurement
stage's rho between the marginals to measure. The pipeline (dp_synth_assets/budget.py, with the
ledger) and the notebook API (dp_synth_assets/api.py) both spend exactly these amounts.

`BudgetStatus` is the one place where what is left of a limit is computed: remaining rho =
max(0, limit - spent - reserved) (zCDP composes by adding rho, Bun-Steinke 2016 Lemma 2.3), its
epsilon at the limit's delta, and how many more runs of the dataset's run rho fit, with the
same relative tolerance `REL_TOL` the ledger compares every sum with. The ledger's refusal
messages, the published ledger metadata and the schedules' skip reasons all read it.
"""

import math
from dataclasses import dataclass

from .config import DatasetSpec
from .measure import optimal_split
from .preprocess import all_tasks
from .privacy import epsilon_from_rho, rho_from_epsilon_delta
from .select import METHODS, Budget, Selection

PRIVATE_STAGES = ("preprocessed", "marginals", "selection", "measurements")

REL_TOL = 1e-12  # relative tolerance of every budget comparison (float sums of rho)

# the share of the run's rho spent learning domains: PREPROCESS_SHARE when a column's categories
# are discovered (the thresholded histogram keeps only categories above ~6 sigma, so on small
# tables a tenth of the budget dropped most of each column: bench/results/raw_tables.md), else
# BOUNDS_SHARE (benchmark paper App. D.2: 10%)
PREPROCESS_SHARE = 0.5
BOUNDS_SHARE = 0.1
DELTA_EXTRA_SHARE = 0.5  # of each delta, for thresholding (approximate zCDP) when a column needs it


@dataclass(frozen=True)
class DatasetBudget:
    """The run budget and the lifetime limit of one dataset, in rho (and extra delta).

    Accounting (DESIGN.md section 3): mechanisms compose as approximate zCDP, (sum rho,
    sum delta_extra), which implies (epsilon(sum rho, delta'), delta' + sum delta_extra)-DP. When a
    column's categories are discovered by thresholding, half of each delta (run and limit) is set
    aside for delta_extra and rho is computed at the other half; otherwise rho uses all of delta.
    """

    run_rho: float
    limit_rho: float
    delta: float              # the delta the limit's rho was computed at (epsilon shown at it)
    run_delta_extra: float
    limit_delta_extra: float
    preprocess: float         # rho of the preprocessing stage
    split: Budget             # rho of selection and measurement
    measures_in_selection: bool = False

    @classmethod
    def of(cls, spec: DatasetSpec) -> "DatasetBudget":
        tasks = all_tasks(spec.columns)
        extra = DELTA_EXTRA_SHARE if any(t.mechanism == "discover" for t in tasks) else 0.0
        run_rho = rho_from_epsilon_delta(spec.privacy.epsilon, spec.privacy.delta * (1 - extra))
        limit_delta = spec.privacy.limit.delta * (1 - extra)
        limit_rho = rho_from_epsilon_delta(spec.privacy.limit.epsilon, limit_delta)
        pre = (PREPROCESS_SHARE if extra else BOUNDS_SHARE) * run_rho if tasks else 0.0
        rest = run_rho - pre
        method = METHODS[spec.method]
        one_way = (spec.selection.one_way_share or method.one_way_share) * rest
        score = (spec.selection.score_share or method.score_share) * rest
        return cls(run_rho, limit_rho, limit_delta, spec.privacy.delta * extra,
                   spec.privacy.limit.delta * extra, pre,
                   Budget(one_way, score, rest - one_way - score), method.measures_in_selection)

    def stage_rho(self, stage: str) -> float:
        """The rho a stage spends: adaptive methods spend the measurement budget in selection."""
        in_selection = self.measures_in_selection
        return {"preprocessed": self.preprocess,
                "selection": self.split.one_way + self.split.score + (self.split.measure if in_selection else 0.0),
                "measurements": 0.0 if in_selection else self.split.measure}.get(stage, 0.0)

    def stage_delta_extra(self, stage: str) -> float:
        return self.run_delta_extra if stage == "preprocessed" else 0.0

    def epsilon(self, rho: float) -> float:
        return epsilon_from_rho(rho, self.delta)


def measurement_plan(chosen: Selection, domain: dict[str, int], rho: float) -> dict:
    """The rho of each marginal the measurement stage draws: the selection's split scaled to this
    run's measurement budget; a selection with no marginal to measure (too little data for any
    pair to beat its noise) spends it on the 1-way marginals instead (c^(2/3) split, ABSyn
    Eq. 11), which consistency then merges with the selection's by inverse variance."""
    if rho <= 0:
        return {}
    if chosen.cliques and sum(chosen.budgets.values()) > 0:
        scale = rho / sum(chosen.budgets.values())
        return {c: chosen.budgets[c] * scale for c in chosen.cliques}
    singles = [(a,) for a in domain]
    return dict(zip(singles, optimal_split(rho, [domain[a] for a in domain])))


def fits(total: float, limit: float) -> bool:
    """`total` rho (or delta_extra) stays within `limit`, up to the float error of sums of rho."""
    return total <= limit + REL_TOL * abs(limit)


def remaining_rho(limit_rho: float, spent_rho: float, reserved_rho: float = 0.0) -> float:
    """What a new reservation may take under `limit_rho`: max(0, limit - spent - reserved)."""
    return max(0.0, limit_rho - spent_rho - reserved_rho)


@dataclass(frozen=True)
class BudgetStatus:
    """Where a privacy unit stands against its lifetime limit: spent (every charge) and reserved
    (open reservations minus their charges), as the ledger sums them over the unit, with the
    dataset's run rho and the delta its epsilons are shown at (None: rho only)."""

    limit_rho: float
    spent_rho: float
    reserved_rho: float
    run_rho: float = 0.0
    delta: float | None = None

    @classmethod
    def of(cls, summary, budget: DatasetBudget) -> "BudgetStatus":
        """From a `ledger.LedgerSummary` and the dataset's `DatasetBudget`."""
        return cls(budget.limit_rho, summary.spent_rho, summary.reserved_rho, budget.run_rho,
                   budget.delta)

    @property
    def remaining_rho(self) -> float:
        return remaining_rho(self.limit_rho, self.spent_rho, self.reserved_rho)

    def epsilon(self, rho: float) -> float:
        """The epsilon of `rho` alone at `delta` (epsilons do not add up; rho does)."""
        if self.delta is None:
            raise ValueError("no delta: only rho can be shown")
        return epsilon_from_rho(rho, self.delta)

    @property
    def remaining_epsilon(self) -> float:
        return self.epsilon(self.remaining_rho)

    @property
    def runs_left(self) -> int | None:
        """The largest k >= 0 such that k more runs of `run_rho` fit beside what is spent and
        reserved (the ledger's `can_cover` test applied k times); None when a run spends no rho."""
        if not self.run_rho > 0:
            return None
        used = self.spent_rho + self.reserved_rho
        k = max(0, math.floor(self.remaining_rho / self.run_rho))
        while k > 0 and not fits(used + k * self.run_rho, self.limit_rho):
            k -= 1
        while fits(used + (k + 1) * self.run_rho, self.limit_rho):
            k += 1
        return k
