"""`auto`: one of the selection methods, chosen from public facts only.

Budget (METHODS["auto"]): rho_1 = 0.3 rho for the 1-way marginals, 0.1 for selection, the
rest (rho_m) for the selected marginals. Ours: ABSyn gives the 1-way marginals 0.1 rho split
evenly (section VI.B; `absyn` keeps that); here every attribute's 1-way error reaches each of its
d - 1 pairs and a large column's is the largest, so they get more, split by codes^(2/3)
(`measure_one_way(by_cells=True)`, `measure.optimal_split`: the split that minimizes their
summed expected L1 noise). Measured: docs/decisions/0017-auto-method.md.

1. A third of rho_1 (`PICK_ONE_WAY_SHARE`) measures the 1-way marginals first; they give the
   noisy row count n_hat (`measure.noisy_total`): public.
2. Rule. absyn's pair scores are released together, each with Gaussian noise of standard
   deviation sigma_s = sqrt(8 m / rho_s) counts (m = d (d - 1) / 2 pairs, rho_s the selection
   budget); a pair's dependency is at most about n_hat. When sigma_s / n_hat > `SCORE_NOISE_MAX`
   the scores cannot tell a dependent pair from noise. MST's exponential mechanism picks d - 1
   edges round by round with sensitivity 1, so its selection noise grows with sqrt(d), not
   with m; but MST then measures every edge it picked, each at rho_e / (d - 1) (rho_e =
   rho_m + 2 rho_1 / 3, step 3), and on a table
   with little data for its domains those measurements are noise the guard drops (spending
   most of the budget for nothing: a dropped pair gives back only d_a / c of its rho to each
   1-way marginal). So MST is picked only when, besides, its edges are cheap: the expected L1
   noise of one edge at the median cell count c_med of all pairs,
       nu = c_med sqrt((d - 1) / (2 rho_e)) sqrt(2 / pi) / n_hat,
   is at most `MST_NOISE_MAX`; otherwise absyn (the greedy on the noisy R-scores, which with
   nothing detectable measures nothing and leaves the budget to the 1-way marginals). With one
   column there is nothing to select and no selection mechanism runs.
   Both thresholds are measured on bench/suite.py's grid (docs/decisions/0017-auto-method.md).
3. The picked method's selection (`absyn.select_after`, `mst.select_after`). absyn: the other
   two thirds of rho_1 measure the 1-way marginals again, merged with the first by inverse
   variance (`measure.merge`: one measurement at rho_1). MST:
   its edges are worth more than 1-way precision (the tables it is picked on have small
   domains), so it runs with 1-way marginals at rho_1 / 3 and the other two thirds measure its
   edges at once, split as the measurement stage splits rho_m over them (`measured`; the stage
   merges the two measurements of an edge, `measure.merge_repeats`): MST's edges get
   rho_m + 2 rho_1 / 3. `details["picked"]`, `details["score_noise_share"]` and
   `details["mst_edge_noise"]` say which and why (public: functions of n_hat, the domain and
   rho).
Whatever it picks, the measurement stage's guard (`select.guard`) keeps only the marginals that
beat the independent model.
"""

import itertools
import math
from dataclasses import replace

import numpy as np

from ..config import SelectionSettings
from ..measure import measure, merge, noisy_total
from . import Budget, Charge, Log, MarginalOracle, Selection
from .privsyn import INDIF_SENSITIVITY, measure_one_way

SCORE_NOISE_MAX = 0.1  # sigma_s / n_hat above which absyn's scores are noise (rule, step 2)
MST_NOISE_MAX = 0.05  # nu: MST's expected L1 noise per edge / n_hat at most this (rule, step 2)
PICK_ONE_WAY_SHARE = 1 / 3  # of rho_1, measured before the pick (steps 1 and 3)


def mst_edge_noise(domain: dict[str, int], n_hat: float, rho_measure: float) -> float:
    """nu of the module docstring: the expected L1 noise of one of MST's d - 1 measured edges at
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
    """(method, sigma_s / n_hat, nu) by the rule of the module docstring."""
    m = len(domain) * (len(domain) - 1) // 2
    if m == 0 or rho_score <= 0:
        return "absyn", 0.0, 0.0
    share = math.sqrt(INDIF_SENSITIVITY ** 2 * m / (2 * rho_score)) / max(n_hat, 1.0)
    nu = mst_edge_noise(domain, n_hat, rho_measure)
    return ("mst" if share > SCORE_NOISE_MAX and nu <= MST_NOISE_MAX else "absyn"), share, nu


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    from . import absyn, mst

    first = budget.one_way * PICK_ONE_WAY_SHARE
    rest = budget.one_way - first
    one_way = measure_one_way(domain, oracle, first, charge, by_cells=True)
    method, share, nu = pick(domain, noisy_total(list(one_way)), budget.score,
                             budget.measure + rest)
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
        chosen = absyn.select_after(domain, oracle, budget, charge, one_way, log)
    return Selection("auto", chosen.one_way, chosen.cliques, chosen.budgets, chosen.scores,
                     {**chosen.details, "picked": method,
                      "score_noise_share": round(share, 6),
                      "mst_edge_noise": round(nu, 6) if math.isfinite(nu) else None},
                     chosen.measured, chosen.coarse)
