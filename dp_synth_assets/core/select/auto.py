"""`auto`: one of the selection methods, chosen from public facts only.

Budget: 0.1 rho for the 1-way marginals, 0.1 for selection, the rest for the selected marginals
(METHODS["auto"]), whichever method it picks; the picked method runs with this split.

1. The 1-way marginals are measured first (`privsyn.measure_one_way`, rho_1 split evenly) and
   give the noisy row count n_hat (`measure.noisy_total`): public.
2. Rule. absyn's pair scores are released together, each with Gaussian noise of standard
   deviation sigma_s = sqrt(8 m / rho_s) counts (m = d (d - 1) / 2 pairs, rho_s the selection
   budget); a pair's dependency is at most about n_hat. When sigma_s / n_hat > `SCORE_NOISE_MAX`
   the scores cannot tell a dependent pair from noise, and MST's selection is used instead: its
   exponential mechanism picks d - 1 edges round by round with sensitivity 1, so its noise grows
   with sqrt(d), not with m. Otherwise absyn (the greedy on the noisy R-scores). With one
   column there is nothing to select and no selection mechanism runs.
3. The picked method's selection on those 1-way marginals (`absyn.select_after`,
   `mst.select_after`); `details["picked"]` and `details["score_noise_share"]` say which and
   why (public: functions of n_hat, d and rho).
Whatever it picks, the measurement stage's guard (`select.guard`) keeps only the marginals that
beat the independent model.
"""

import math

from ..config import SelectionSettings
from ..measure import noisy_total
from . import Budget, Charge, Log, MarginalOracle, Selection
from .privsyn import INDIF_SENSITIVITY, measure_one_way

SCORE_NOISE_MAX = 0.1  # sigma_s / n_hat above which absyn's scores are noise: MST instead


def pick(domain: dict[str, int], n_hat: float, rho_score: float) -> tuple[str, float]:
    """(method, sigma_s / n_hat) by the rule of the module docstring."""
    m = len(domain) * (len(domain) - 1) // 2
    if m == 0 or rho_score <= 0:
        return "absyn", 0.0
    share = math.sqrt(INDIF_SENSITIVITY ** 2 * m / (2 * rho_score)) / max(n_hat, 1.0)
    return ("mst" if share > SCORE_NOISE_MAX else "absyn"), share


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    from . import absyn, mst

    one_way = measure_one_way(domain, oracle, budget.one_way, charge)
    method, share = pick(domain, noisy_total(list(one_way)), budget.score)
    chosen = (mst if method == "mst" else absyn).select_after(domain, oracle, budget, charge,
                                                              one_way, log)
    return Selection("auto", chosen.one_way, chosen.cliques, chosen.budgets, chosen.scores,
                     {**chosen.details, "picked": method,
                      "score_noise_share": round(share, 6)}, chosen.measured, chosen.coarse)
