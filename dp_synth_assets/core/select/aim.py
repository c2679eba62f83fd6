"""AIM: adaptive and iterative selection and measurement of marginals (McKenna, Mullins, Sheldon,
Miklau 2022; benchmark-dp-tabular-synthesis.txt section 6.1 "adaptive feature selection" and the
scale-penalty analysis of section 6.2; hyperparameters of its Table 7), adapted to our interface
and to mbi 2.0 (DESIGN.md section 9). Written from the paper and from reading private-pgm's
mechanisms/aim.py (older mbi API); no code of it is reused.

Guarantee: the data is read only by the 1-way marginals and, per round, one exponential
mechanism and one discrete Gaussian measurement, each charged with its OpenDP map's answer right
after its draw. Together they spend `budget.total` exactly (the last round takes the remainder).
AIM spends the whole run budget inside selection (`METHODS["aim"].measures_in_selection`).

1. Workload W: every 2-way marginal, weight 1 (our choice; the paper also runs 3-way
   workloads). Candidates are W's downward closure (the 1-way and 2-way marginals), weighted by
   AIM's rule w_r = sum_{s in W} |r & s|: 2(d-1) for a pair, d-1 for a single attribute. We divide
   every weight by the largest, 2(d-1): a pair weighs 1 and a single attribute 1/2. The
   exponential mechanism is invariant to that common factor, and the score's sensitivity becomes 1.
2. Initialization: all 1-way marginals with `budget.one_way`, split evenly (`measure_one_way`),
   and a first mbi model fitted to them. AIM measures them at the first round's sigma (about
   5.6% of rho with T = 16 d); our registered share is 10%.
3. Rounds: T = min(16 d, max_rounds), where max_rounds is `settings.max_rounds` or
   `DEFAULT_MAX_ROUNDS` = 8. AIM's T = 16 d needs a model refit per round (each compiles mbi's
   estimator anew), so T is capped. The rest of the budget, rho_R = budget.total - (1-way spend),
   starts at rho_t = rho_R / T. Per round, with AIM's alpha = `MEASURE_SHARE` = 0.9:
   sigma_t = sqrt(1 / (2 * 0.9 rho_t)), and the exponential mechanism gets 0.1 rho_t
   (epsilon_t = sqrt(8 * 0.1 rho_t)).
   a. Size filter: candidate r is kept when r lies inside a measured clique, or when the junction
      tree of the measured cliques plus r stays within max_model_mb * min(1, (spent + rho_t) /
      budget.total). This is AIM's growing limit; at the end it is `settings.max_model_mb`.
   b. Quality: q_r = w_r (||M_r - model_r||_1 - sqrt(2/pi) sigma_t n_r), where n_r is the cells
      of r: the model's l1 error on r minus the expected l1 error of measuring it. L_inf
      sensitivity 1 under add/remove-one-row, non-monotonic. The choice is OpenDP's
      `make_noisy_max` (Gumbel noise, i.e. the exponential mechanism) in zCDP.
   c. The chosen marginal is measured by `measure_marginal` at 0.9 rho_t. The last round
      instead gets what is left after its exponential mechanism's charge.
   d. The model is refitted for `FIT_ITERATIONS` = 200 iterations, warm-started from the
      previous one, on every measurement so far, with the noisy total (`measure.noisy_total`,
      never the exact count). This happens after the last round too; that refit only feeds the
      trace. Repeats of one clique are pooled by inverse variance (`pooled`: the same
      least-squares objective up to a constant), so a repeat does not change the program mbi
      compiles. The final model is fitted by the `model` stage with `model.iterations`.
   e. Annealing (AIM): if the refit moved the model's estimate of the chosen marginal by at most
      sqrt(2/pi) sigma_t n_r in l1, sigma_t is halved and epsilon_t doubled, which multiplies
      rho_t by 4.
   f. A round is the last when less than 2 rho_t remains (then rho_t = the remainder) or when it
      is round T. rho_t never shrinks, so at most T rounds run and the budget is spent exactly.
The model's marginals of all candidates come from `generate.pgm.model_marginals` (numpy
variable elimination on the potentials), not mbi's `project`, which compiles per clique.
Cost measurements behind T's cap and the 200 iterations: bench/results/method_notes.md.
"""

import itertools
import math

import numpy as np

from ..config import SelectionSettings
from ..measure import Measurement, clique_size, measure_marginal, noisy_total
from ..generate.pgm import model_marginals
from ..privacy import Spend, exponential_mechanism
from . import Budget, Charge, Clique, Log, MarginalOracle, Selection, round_line
from .privsyn import measure_one_way


ROUNDS_PER_ATTRIBUTE = 16   # AIM's T = 16 d
DEFAULT_MAX_ROUNDS = 8      # our cap on T (see the module docstring)
FIT_ITERATIONS = 200        # warm-started refit between rounds
MEASURE_SHARE = 0.9         # AIM's alpha: share of rho_t for the Gaussian measurement
SCORE_SENSITIVITY = 1.0     # L_inf sensitivity of the (normalized-weight) quality scores


# ------------------------------------------------------------------------------ mechanisms

# ------------------------------------------------------------------------------ workload

def candidate_weights(attributes: list[str]) -> dict[Clique, float]:
    """AIM's candidate weights for the all-pairs workload, divided by the largest (2(d-1)):
    1 for a pair, 1/2 for a single attribute. With fewer than two attributes, the 1-way
    marginals are the workload (weight 1)."""
    attributes = list(attributes)
    if len(attributes) < 2:
        return {(a,): 1.0 for a in attributes}
    weights = {(a,): 0.5 for a in attributes}
    weights.update({pair: 1.0 for pair in itertools.combinations(attributes, 2)})
    return weights


# ------------------------------------------------------------------------------ model marginals

def pooled(measurements: list[Measurement]) -> list[Measurement]:
    """One measurement per clique (in order of first appearance): the inverse-variance weighted
    mean of its repeats, with sigma = (sum 1/sigma_i^2)^(-1/2). The least-squares objective mbi
    minimizes is the same up to a constant."""
    groups: dict[Clique, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(tuple(m.clique), []).append(m)
    out = []
    for clique, group in groups.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        weights = np.array([1.0 / m.sigma ** 2 for m in group])
        noisy = sum(w * m.noisy for w, m in zip(weights, group)) / weights.sum()
        out.append(Measurement(clique, noisy, float(weights.sum() ** -0.5),
                               float(sum(m.rho for m in group))))
    return out


def _fit(domain, one_way, measured, iterations, warm_start):
    from ..generate import pgm

    everything = list(one_way) + list(measured)
    return pgm.fit(domain, pooled(everything), noisy_total(everything), iterations,
                   warm_start=warm_start)


# ------------------------------------------------------------------------------ AIM

def run(domain: dict[str, int], oracle: MarginalOracle, budget: Budget, charge: Charge, *,
        max_model_mb: float = 4.0, max_rounds: int = DEFAULT_MAX_ROUNDS,
        fit_iterations: int = FIT_ITERATIONS, log: Log | None = None) -> Selection:
    """AIM as described in the module docstring; `select` calls it with the dataset's settings.
    `log`, if given, gets each round's `round_line` when its refit is done."""
    from mbi import Domain
    from mbi.junction_tree import hypothetical_model_size

    if max_rounds < 1:
        raise ValueError(f"max_rounds must be at least 1, got {max_rounds!r}")
    attributes = list(domain)
    mbi_domain = Domain(attributes, [domain[a] for a in attributes])
    spent = 0.0

    def pay(spend: Spend, **params) -> None:
        nonlocal spent
        charge(spend, **params)
        spent += spend.rho

    one_way = measure_one_way(domain, oracle, budget.one_way, pay)
    weights = candidate_weights(attributes)
    candidates = list(weights)
    exact = oracle(candidates)  # private: only the quality scores and the measurements read it

    rounds_cap = min(ROUNDS_PER_ATTRIBUTE * len(attributes), int(max_rounds))
    rho_t = (budget.total - spent) / rounds_cap
    model = _fit(domain, one_way, [], fit_iterations, None)
    measured: list[Measurement] = []
    trace: list[dict] = []
    t = 0
    while budget.total - spent > 0:
        t += 1
        remaining = budget.total - spent
        # less than two rounds' worth left (up to float error in the sum of spends): take it all
        last = remaining < 2 * rho_t * (1 - 1e-9) or t >= rounds_cap
        if last:
            rho_t = remaining
        sigma_t = 1.0 / math.sqrt(2.0 * MEASURE_SHARE * rho_t)

        # a. candidates that keep the model small (AIM's limit grows with the budget spent)
        limit = max_model_mb * min((spent + rho_t) / budget.total, 1.0)
        cliques = [m.clique for m in one_way] + [m.clique for m in measured]
        free = {sub for cl in cliques for k in range(1, len(cl) + 1)
                for sub in itertools.combinations(cl, k)}
        allowed = [r for r in candidates
                   if r in free or hypothetical_model_size(mbi_domain, cliques + [r]) <= limit]

        # b. quality scores and the exponential mechanism
        estimates = model_marginals(model, allowed)
        bias = math.sqrt(2.0 / math.pi) * sigma_t
        scores = np.array([weights[r] * (np.abs(exact[r] - estimates[r]).sum()
                                         - bias * clique_size(r, domain)) for r in allowed])
        index, em_spend = exponential_mechanism(scores, (1.0 - MEASURE_SHARE) * rho_t)
        chosen = allowed[index]
        pay(em_spend, purpose="AIM selection (exponential mechanism)", round=t,
            candidates=len(allowed))

        # c. the Gaussian measurement (the last round takes exactly what is left)
        rho_m = budget.total - spent if last else MEASURE_SHARE * rho_t
        measurement = measure_marginal(exact[chosen], chosen, rho_m, pay,
                                       purpose="AIM measurement", round=t)
        measured.append(measurement)

        # d. refit, warm-started
        before = estimates[chosen]
        model = _fit(domain, one_way, measured, fit_iterations, model)
        after = model_marginals(model, [chosen])[chosen]
        moved = float(np.abs(after - before).sum())
        trace.append({"round": t, "clique": list(chosen), "rho": em_spend.rho + measurement.rho,
                      "sigma": measurement.sigma, "epsilon_em": math.sqrt(8.0 * em_spend.rho),
                      "candidates": len(allowed), "model_mb_limit": float(limit),
                      "moved_l1": round(moved, 3)})
        if log is not None:
            log(round_line("aim", t, chosen, em_spend.rho + measurement.rho))
        if last:
            break
        # e. annealing: a measurement that barely changed the model asks for less noise
        if moved <= math.sqrt(2.0 / math.pi) * measurement.sigma * clique_size(chosen, domain):
            rho_t *= 4.0
            trace[-1]["annealed"] = True
    del exact
    final_cliques = [m.clique for m in one_way] + [m.clique for m in measured]
    return Selection(
        method="aim",
        one_way=one_way,
        cliques=(),
        budgets={},
        measured=tuple(measured),
        details={"rounds": trace,
                 "workload": "all 2-way marginals",
                 "round_cap": rounds_cap,
                 "fit_iterations": fit_iterations,
                 "model_mb": float(hypothetical_model_size(mbi_domain, final_cliques))},
    )


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    max_rounds = settings.max_rounds or DEFAULT_MAX_ROUNDS
    return run(domain, oracle, budget, charge, max_model_mb=settings.max_model_mb,
               max_rounds=max_rounds, log=log)
