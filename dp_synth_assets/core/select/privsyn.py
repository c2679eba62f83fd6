"""PrivSyn's marginal selection: noisy InDif scores and DenseMarg's greedy choice of pairs.

Implements PrivSyn (Zhang et al., USENIX Security 2021) section 4 (Lemma 4, Theorems 5-6), with
the noise figures corrected (InDif variance 8m/rho', marginal variance 1/(2 rho)) and the greedy
loop of its section 4.2 completed: docs/decisions/0014-privsyn.md ("As implemented": the steps).

Guarantee: the data is read by the 1-way marginals (`budget.one_way`) and one Gaussian release of
all InDif scores (`budget.score`), each charged with its OpenDP map's answer right after its
draw; the greedy is post-processing. `budget.measure` is split over the selected pairs and spent
by the `measurements` stage (on the 1-way marginals when nothing is selected)."""

import itertools

import numpy as np

from ..config import SelectionSettings
from ..measure import (Measurement, clique_size, expected_noise_error, measure_marginal,
                       optimal_split)
from ..privacy import gaussian_scores
from . import Budget, Charge, Clique, Log, MarginalOracle, Selection, aim_fit, round_line

INDIF_SENSITIVITY = 4.0  # PrivSyn Lemma 4


def indif(pair_counts: np.ndarray) -> float:
    """InDif of an exact 2-way count array: l1 distance to the product of its own 1-way
    marginals."""
    n = pair_counts.sum()
    if n == 0:
        return 0.0
    independent = np.outer(pair_counts.sum(axis=1), pair_counts.sum(axis=0)) / n
    return float(np.abs(pair_counts - independent).sum())


def noisy_indif(pairs: list[Clique], oracle: MarginalOracle, rho: float, charge: Charge,
                purpose: str) -> np.ndarray:
    """InDif (ABSyn's count-scale R-score) of every pair from the exact pair marginals, published
    at once with Gaussian noise of variance 8m / rho (sensitivity 4 each, PrivSyn Thm 5)."""
    exact = oracle(pairs)
    noisy, spend = gaussian_scores(np.array([indif(exact[p]) for p in pairs]), rho,
                                   INDIF_SENSITIVITY)
    charge(spend, purpose=purpose, pairs=len(pairs))
    return noisy


def measure_one_way(domain: dict[str, int], oracle: MarginalOracle, rho: float,
                    charge: Charge, by_cells: bool = False) -> tuple[Measurement, ...]:
    """1-way marginals, rho split evenly across attributes (ABSyn section VI.B,
    docs/decisions/0013-absyn.md), or with `by_cells` in proportion to each attribute's codes^(2/3)
    (`measure.optimal_split`: the split that minimizes their summed expected L1 noise; ours,
    for `auto` and `aim`). The split reads only the public domain."""
    attrs = list(domain)
    exact = oracle([(a,) for a in attrs])
    rhos = (optimal_split(rho, [domain[a] for a in attrs]) if by_cells
            else [rho / len(attrs)] * len(attrs))
    return tuple(measure_marginal(exact[(a,)], (a,), rho_a, charge, purpose="one-way marginal")
                 for a, rho_a in zip(attrs, rhos))


def greedy_dense_marg(pairs: list[Clique], dependency: np.ndarray, domain: dict[str, int],
                      rho_measure: float, max_model_mb: float,
                      log: Log | None = None) -> tuple[list[Clique], list[dict]]:
    """DenseMarg's greedy loop; returns the selected pairs and a public per-round trace. `log`,
    if given, gets each round's `round_line` (rho 0: the greedy post-processes the scores)."""
    base = [(a,) for a in domain]
    sizes = np.array([clique_size(p, domain) for p in pairs], dtype=np.float64)
    chosen: list[int] = []
    remaining = set(range(len(pairs)))
    current = float(dependency.sum())  # nothing selected: all dependency error
    trace = []
    while remaining:
        s = float(np.sum(sizes[chosen] ** (2 / 3))) if chosen else 0.0
        candidates = np.array(sorted(remaining))
        # total error if candidate i joins: drop its dependency error, grow the noise error
        noise = (s + sizes[candidates] ** (2 / 3)) ** 1.5 / np.sqrt(np.pi * rho_measure)
        totals = (dependency.sum() - dependency[chosen].sum() - dependency[candidates]) + noise
        order = np.lexsort((candidates, totals))
        picked = None
        for k in order:
            if totals[k] >= current:
                break
            i = int(candidates[k])
            model_mb = aim_fit.model_mb(domain, base + [pairs[j] for j in chosen] + [pairs[i]])
            if model_mb <= max_model_mb:
                picked = (i, float(totals[k]), model_mb)
                break
            remaining.discard(i)  # it only gets bigger as more pairs join
        if picked is None:
            break
        i, total, model_mb = picked
        chosen.append(i)
        remaining.discard(i)
        trace.append({"round": len(chosen), "pair": list(pairs[i]), "total_error": round(total, 3),
                      "model_mb": round(model_mb, 4)})
        if log is not None:
            log(round_line("privsyn", len(chosen), pairs[i], 0.0))
        current = total
    return [pairs[i] for i in chosen], trace


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    """PrivSyn: 1-way marginals, noisy InDif scores of every pair, then DenseMarg's greedy.

    Args: those of `select.select` (core/select/__init__.py), but `method`.

    Returns:
        The selected pairs with their c^(2/3) share of `budget.measure`.
    """
    one_way = measure_one_way(domain, oracle, budget.one_way, charge)
    pairs = list(itertools.combinations(list(domain), 2))
    noisy_scores = noisy_indif(pairs, oracle, budget.score, charge, "InDif scores")
    selected, trace = greedy_dense_marg(pairs, noisy_scores, domain, budget.measure,
                                        settings.max_model_mb, log)
    sizes = [clique_size(p, domain) for p in selected]
    rhos = optimal_split(budget.measure, sizes) if selected else []
    return Selection(
        method="privsyn",
        one_way=one_way,
        cliques=tuple(selected),
        budgets=dict(zip(selected, rhos)),
        scores={p: float(s) for p, s in zip(pairs, noisy_scores)},
        details={"rounds": trace,
                 "expected_noise_error": expected_noise_error(budget.measure, sizes)},
    )
