"""`auto`: one of the selection methods (absyn or MST), chosen from public facts only.

Budget (METHODS["auto"]): rho_1 = 0.3 rho for the 1-way marginals, split by codes^(2/3), 0.1
for selection, the rest for the selected marginals. A third of rho_1 measures the 1-way
marginals first, giving the noisy row count; the rule then picks MST only when absyn's pair
scores would be drowned in noise (`SCORE_NOISE_MAX`) and MST's edges are cheap to measure
(`MST_NOISE_MAX`), else absyn, and runs the picked branch. A third branch, `tree` (absyn's greedy
over MST's private tree), runs only when `selection.pick` names it. Every input of the rule is
public (the noisy row count, the domain, rho); `details` says what was picked and why. The rule,
its thresholds, the branches and their measurement: docs/decisions/0017-auto-method.md."""

import itertools
import math
from dataclasses import replace
from typing import ClassVar, Literal

import numpy as np
from pydantic import ConfigDict

from ..config import SelectionSettings
from ..measure import measure, merge, noisy_total
from . import Budget, Charge, Log, MarginalOracle, Selection
from .privsyn import INDIF_SENSITIVITY, measure_one_way

# the rule's thresholds (step 2), chosen on the development suite's fourteen tables and checked
# by leave-one-table-out: docs/decisions/0017-auto-method.md
SCORE_NOISE_MAX = 0.15  # sigma_s / n_hat above which absyn's scores are noise
MST_NOISE_MAX = 0.12  # nu: MST's expected L1 noise per edge / n_hat at most this
PICK_ONE_WAY_SHARE = 1 / 3  # of rho_1, measured before the pick (steps 1 and 3)
TREE_SCORE_SHARE = 0.5  # of the selection rho, spent on MST's tree under absyn's greedy (step 3)
PICKS = ("absyn", "tree", "mst")


class Settings(SelectionSettings):
    """Method auto's `selection:` block: `pick`, the branch to run whatever the rule says
    (`absyn`, `tree` or `mst`), for comparing the rule with each branch on one table; unset:
    the rule picks."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # auto's branch, fixed: absyn, tree (absyn's greedy over MST's tree) or mst; unset: the rule
    pick: Literal[PICKS] | None = None
    # the message of another method whose block sets `pick`
    OWNED: ClassVar[str] = ("selection.pick is for method auto; method {name} has no branches "
                            "(remove it, or set method: auto)")


def mst_edge_noise(domain: dict[str, int], n_hat: float, rho_measure: float) -> float:
    """nu of the 0017-auto-method.md: the expected L1 noise of one of MST's d - 1 measured edges at
    the median pair's cell count, as a share of n_hat (public: domain sizes, n_hat, and
    `rho_measure`, the edges' rho_e)."""
    d = len(domain)
    if d < 2:
        return 0.0
    if rho_measure <= 0:
        return math.inf
    cells = [domain[a] * domain[b] for a, b in itertools.combinations(domain, 2)]
    sigma = math.sqrt((d - 1) / (2 * rho_measure))
    return float(np.median(cells)) * sigma * math.sqrt(2 / math.pi) / max(n_hat, 1.0)


def pick(domain: dict[str, int], n_hat: float, rho_score: float,
         rho_measure: float) -> tuple[str, float, float]:
    """(branch, sigma_s / n_hat, nu) by the rule of the 0017-auto-method.md."""
    m = len(domain) * (len(domain) - 1) // 2
    if m == 0 or rho_score <= 0:
        return "absyn", 0.0, 0.0
    share = math.sqrt(INDIF_SENSITIVITY ** 2 * m / (2 * rho_score)) / max(n_hat, 1.0)
    nu = mst_edge_noise(domain, n_hat, rho_measure)
    return ("mst" if share > SCORE_NOISE_MAX and nu <= MST_NOISE_MAX else "absyn"), share, nu


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    """The `auto` rule: 1-way marginals, then absyn or MST (or, when `settings.pick` says so,
    absyn over MST's tree).

    Args: those of `select.select` (core/select/__init__.py), but `method`; `settings.pick`
        fixes the branch (`Settings`).

    Returns:
        The branch's selection; `details["picked"]` names it and the rule's figures.
    """
    from . import absyn, mst

    first = budget.one_way * PICK_ONE_WAY_SHARE
    rest = budget.one_way - first
    one_way = measure_one_way(domain, oracle, first, charge, by_cells=True)
    method, share, nu = pick(domain, noisy_total(list(one_way)), budget.score,
                             budget.measure + rest)
    if len(domain) > 1:  # with one column there is nothing to select, whatever `pick` says
        method = getattr(settings, "pick", None) or method
    if method == "mst":
        chosen = mst.select_after(domain, oracle, Budget(first, budget.score, budget.measure),
                                  charge, one_way, log)
        total = sum(chosen.budgets.values())
        if chosen.cliques and total > 0:
            rhos = {c: rest * chosen.budgets[c] / total for c in chosen.cliques}
            extra = tuple(measure(oracle(list(rhos)), rhos, charge, chosen.coarse))
        else:  # no edge to measure: the 1-way marginals take it
            extra = measure_one_way(domain, oracle, rest, charge, by_cells=True)
        chosen = replace(chosen, measured=chosen.measured + extra)
    else:
        again = measure_one_way(domain, oracle, rest, charge, by_cells=True)
        one_way = tuple(merge(a, b) for a, b in zip(one_way, again))
        tree, score = (), budget.score
        if method == "tree" and budget.score > 0:
            pairs = list(itertools.combinations(domain, 2))
            scores = mst.independence_errors(pairs, oracle(pairs), one_way)
            tree_rho = budget.score * TREE_SCORE_SHARE
            tree, _ = mst.private_spanning_tree(list(domain), pairs, scores, tree_rho, charge, log)
            del scores  # private
            score = budget.score - tree_rho
        chosen = absyn.select_after(domain, oracle, replace(budget, score=score), charge, one_way,
                                    log, tuple(tree))
        if method == "tree":
            chosen = replace(chosen, details={**chosen.details, "tree": [list(e) for e in tree]})
    return Selection("auto", chosen.one_way, chosen.cliques, chosen.budgets, chosen.scores,
                     {**chosen.details, "picked": method,
                      "score_noise_share": round(share, 6),
                      "mst_edge_noise": round(nu, 6) if math.isfinite(nu) else None},
                     chosen.measured, chosen.coarse)
