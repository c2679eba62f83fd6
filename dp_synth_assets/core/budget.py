"""The budget of one synthesis run, in zCDP terms (docs/decisions/0002-zcdp-accounting.md).

`DatasetBudget.of(spec)` converts a dataset's (epsilon, delta) run budget and lifetime limit into
rho and splits the run's rho between the stages (`preprocess_share`, `DatasetBudget.with_rows`);
`measurement_plan` splits the measurement stage's rho between the marginals. The pipeline and the
notebook API both spend exactly these amounts. `BudgetStatus` is the one place where what is left
of a limit is computed: remaining rho = max(0, limit - spent - reserved) (zCDP composes by adding
rho, Bun-Steinke 2016 Lemma 2.3), its epsilon at the limit's delta, and how many more runs fit,
with the relative tolerance `REL_TOL` the ledger compares every sum with."""

import math
from dataclasses import dataclass, replace

from .config import DatasetSpec
from .measure import optimal_split
from .preprocess import all_tasks
from .privacy import epsilon_from_rho, rho_from_epsilon_delta
from .select import METHODS, Budget, Selection

PRIVATE_STAGES = ("preprocessed", "marginals", "selection", "measurements")  # they spend
STAGES = (*PRIVATE_STAGES, "model", "synthetic")  # every stage asset of a dataset, in order

REL_TOL = 1e-12  # relative tolerance of every budget comparison (float sums of rho)

# the share of the run's rho spent learning domains when a column's categories are discovered
# (the thresholded histogram keeps only categories above ~6 sigma, so on small tables a tenth of
# the budget dropped most of each column: bench/results/raw_tables.md): `preprocess_share`, from
# MIN_PREPROCESS_SHARE to SMALL_PREPROCESS_SHARE; else BOUNDS_SHARE (benchmark paper App. D.2: 10%)
PREPROCESS_SHARE = 0.55          # at a small run rho (<= LOW_RHO)
MIN_PREPROCESS_SHARE = 0.3       # at a large run rho (>= HIGH_RHO)
SMALL_PREPROCESS_SHARE = 0.7     # on small tables (z <= SMALL_Z)
LOW_RHO, HIGH_RHO = 1e-3, 1e-2   # run rho where the large-table share is PREPROCESS_..., MIN_...
SMALL_Z, LARGE_Z = 100.0, 200.0  # noisy rows x sqrt(run rho) where the share is SMALL_..., the rho's
COUNT_SHARE = 0.01  # of the run's rho: the noisy row count the preprocessing share follows
BOUNDS_SHARE = 0.1
DELTA_EXTRA_SHARE = 0.5  # of each delta, for thresholding (approximate zCDP) when a column needs it


def preprocess_share(noisy_rows: float | None, run_rho: float) -> float:
    """The share of the run's rho a run that discovers categories spends on preprocessing (the
    noisy row count included), from public facts only: the noisy row count (None: not drawn)
    and the run's rho.

    What preprocessing buys saturates: discovery keeps a category above a threshold of about
    6.5 noise scales, a number of rows that shrinks as 1 / sqrt(share x rho) whatever the table,
    and once the categories that hold a visible share of the rows are found (and the bounds and
    quantile edges are within a bin), more share only takes budget from the marginals. So the
    share falls as the budget grows and as the table grows:
    - the share of a table with enough rows: PREPROCESS_SHARE at run rho <= LOW_RHO (epsilon
      about 0.25 at delta 1e-9), MIN_PREPROCESS_SHARE at rho >= HIGH_RHO (epsilon about 0.8),
      linear in log rho between;
    - small tables, z = noisy_rows * sqrt(run rho) (rows per unit of the noise a count gets at
      the whole run's rho) <= SMALL_Z: SMALL_PREPROCESS_SHARE, where a category must hold a
      large share of the rows to be found at all; linear in log z up to the rho's share at
      z >= LARGE_Z.
    The ends and thresholds are measured (a sweep of shares on the four raw tables:
    docs/decisions/0011-preprocessing-share.md). The share lies in
    [MIN_PREPROCESS_SHARE, SMALL_PREPROCESS_SHARE], the range `DatasetBudget.reservation`
    covers before the count."""
    high = _rho_share(run_rho)
    if noisy_rows is None or run_rho <= 0:
        return high
    z = max(float(noisy_rows), 1.0) * math.sqrt(run_rho)
    t = min(max(math.log(LARGE_Z / z) / math.log(LARGE_Z / SMALL_Z), 0.0), 1.0)
    return high + t * (SMALL_PREPROCESS_SHARE - high)


def _rho_share(run_rho: float) -> float:
    """The share of a table with enough rows (`preprocess_share`): log-linear in the run's rho."""
    if run_rho <= 0:
        return PREPROCESS_SHARE
    t = min(max(math.log(run_rho / LOW_RHO) / math.log(HIGH_RHO / LOW_RHO), 0.0), 1.0)
    return PREPROCESS_SHARE + t * (MIN_PREPROCESS_SHARE - PREPROCESS_SHARE)


@dataclass(frozen=True)
class DatasetBudget:
    """The run budget and the lifetime limit of one dataset, in rho (and extra delta).

    Accounting (docs/decisions/0002-zcdp-accounting.md): mechanisms compose as approximate zCDP,
    (sum rho, sum delta_extra), which implies (epsilon(sum rho, delta'), delta' + sum
    delta_extra)-DP. When a column's categories are discovered by thresholding, half of each delta
    (run and limit) is set aside for delta_extra and rho is computed at the other half; otherwise
    rho uses all of delta.

    Split between the stages: with no discovery, BOUNDS_SHARE of the run's rho (none without
    preprocessing tasks) to preprocessing. With discovery, preprocessing first draws a noisy row
    count at `count` = COUNT_SHARE of the run's rho (its first mechanism, part of its share),
    and the run's split is `with_rows(noisy count)`: preprocessing gets `preprocess_share` of
    the run's rho, selection and measurement the method's shares of the rest. `of(spec)` is
    the split before the count (`preprocess_share` without a count); the stages after
    preprocessing read the count from the plan (`EncodingPlan.noisy_rows`).
    """

    run_rho: float
    limit_rho: float
    delta: float              # the delta the limit's rho was computed at (epsilon shown at it)
    run_delta_extra: float
    limit_delta_extra: float
    preprocess: float         # rho of the preprocessing stage
    split: Budget             # rho of selection and measurement
    measures_in_selection: bool = False
    count: float = 0.0        # rho of the noisy row count (within `preprocess`); 0: none drawn
    shares: tuple[float, float] = (0.0, 0.0)  # one-way and score shares of the rest

    @classmethod
    def of(cls, spec: DatasetSpec, noisy_rows: float | None = None) -> "DatasetBudget":
        tasks = all_tasks(spec.columns, spec.declared_constraints)
        extra = DELTA_EXTRA_SHARE if any(t.mechanism == "discover" for t in tasks) else 0.0
        run_rho = rho_from_epsilon_delta(spec.privacy.epsilon, spec.privacy.delta * (1 - extra))
        limit_delta = spec.privacy.limit.delta * (1 - extra)
        limit_rho = rho_from_epsilon_delta(spec.privacy.limit.epsilon, limit_delta)
        method = METHODS[spec.method]
        shares = (spec.selection.one_way_share or method.one_way_share,
                  spec.selection.score_share or method.score_share)
        budget = cls(run_rho, limit_rho, limit_delta, spec.privacy.delta * extra,
                     spec.privacy.limit.delta * extra, 0.0, Budget(0.0, 0.0, run_rho),
                     method.measures_in_selection, COUNT_SHARE * run_rho if extra else 0.0,
                     shares)
        share = (_rho_share(run_rho) if extra else BOUNDS_SHARE) if tasks else 0.0
        return budget._split(share * run_rho).with_rows(noisy_rows)

    def _split(self, pre: float) -> "DatasetBudget":
        rest = self.run_rho - pre
        one_way, score = self.shares[0] * rest, self.shares[1] * rest
        return replace(self, preprocess=pre, split=Budget(one_way, score, rest - one_way - score))

    def with_rows(self, noisy_rows: float | None) -> "DatasetBudget":
        """The split once the noisy row count is known (`preprocess_share`); unchanged without a
        count (None, or a budget that draws none)."""
        if not self.count or noisy_rows is None:
            return self
        return self._split(preprocess_share(noisy_rows, self.run_rho) * self.run_rho)

    def domains_rho(self, noisy_rows: float | None = None) -> float:
        """The rho preprocessing spends after the count: its share at `noisy_rows` minus the
        count's own rho."""
        return self.with_rows(noisy_rows).preprocess - self.count

    def reservation(self, stages) -> float:
        """The rho a run materializing `stages` reserves before the count: the most its stages
        can spend at any share `preprocess_share` gives. Their spend is linear in the share, so
        the most is at MIN_PREPROCESS_SHARE or at SMALL_PREPROCESS_SHARE; for every private stage
        together both are the run's rho."""
        ends = [self] if not self.count else [
            self._split(s * self.run_rho) for s in (MIN_PREPROCESS_SHARE, SMALL_PREPROCESS_SHARE)]
        return max(sum(b.stage_rho(s) for s in stages) for b in ends)

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
