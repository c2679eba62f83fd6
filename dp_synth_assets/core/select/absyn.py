"""ABSyn's marginal selection: noisy R-scores, the CR-score, and the greedy triangulated selection.

References: absyn.txt section V (Eq. 6-8, Algorithm 1) and section VI (Algorithms 2-3, Eq. 9-11),
corrected by SEED-NOTES.md.

Guarantee: the data is read by the 1-way marginals (`budget.one_way`) and one Gaussian release of
all R-scores (`budget.score`), each charged with its OpenDP map's answer right after its draw;
the greedy is post-processing of those. `budget.measure` is split over the selected marginals
(`budgets`) and spent by the `measurements` stage. Steps:

1. 1-way marginals with rho_1 split evenly over the d attributes (section VI.B).
2. R-scores: R(a, b) = || M_ab - M_a x M_b / n ||_1 on exact counts (sensitivity 4, as InDif),
   published for all m pairs at once with Gaussian noise of variance 8m / rho_s (Alg. 3 line 5 as
   SEED-NOTES corrects it), then divided by the noisy total (never the exact count; at least 1),
   normalized by Eq. 6, R_bar = R min(d_a, d_b) / (2 (min(d_a, d_b) - 1)), and clipped to [0, 1].
   Our addition: a count-scale score below `SCORE_FLOOR_SD` = 2 standard deviations of its
   noise (sqrt(8 m / rho_s), public) is set to 0 first. Without it, the positive half of the
   noise of every pair independent of the rest reads as dependency once clipped at 0 (about
   0.4 sd each), and the greedy buys those pairs, measuring noise with budget the dependent
   pairs need; a truly independent pair passes the floor with probability 2.3%.
3. CR-score (Alg. 1, Eq. 7-8): R_tilde(i, j) is the maximum over paths from i to j in the graph
   of selected marginals of the product of R_bar along the path; CR = R_bar - R_tilde. We compute
   all pairs at once as shortest paths on -log R_bar (scipy's Dijkstra), which is Alg. 1's
   max-product search. A negative CR (a path explains more than the pair's own score) counts as
   no missing information: max(CR, 0).
4. Greedy (Alg. 3). Every selection S, the empty one included, is scored by one function on
   one scale (counts, each pair's score clipped at 0):
       E(S) = E_cor(S) + E_eta(S),
       E_cor(S) = sum over pairs not in S of noisy_total * max(CR_S, 0) * 2 (min d - 1) / min d
                  (the CR back on the count scale, SEED-NOTES),
       E_eta(S) = FIT_NOISE_SHARE * sum over pairs in S of c_i sqrt(1 / (pi rho_i)),
                  rho_i by Eq. 11.
   E_eta is the L1 error the measurements leave in the fitted model, where the paper's Eq. 10
   counts the raw noise: `FIT_NOISE_SHARE` = 1/2. The model is a distribution of total n_hat
   with counts >= 0; on a cell whose count is near 0, fitting keeps only the positive half of
   the noise, E max(N, 0) = sigma / sqrt(2 pi), half of E |N| = sigma sqrt(2 / pi), and the
   marginals whose noise decides the selection are the large sparse ones, most of whose cells
   are near 0 (on a dense cell the fit removes less; the factor is the sparse limit). The
   split (Eq. 11) is unchanged: a constant factor does not move its optimum.
   Our addition, E_1(S): the 1-way noise S leaves. The paper's E compares dependency with
   the noise of the selected marginals only; but selecting takes rho_2 from the 1-way
   marginals (with nothing selected, `budget.measurement_plan` spends it on them), and with
   little data their noise dominates every pair's error. So the greedy minimizes
       E(S) + (d - 1) E_1(S),
   E_1(S) = sum over columns a of d_a s_a sqrt(2 / pi), s_a^2 the inverse-variance pool of
   a's 1-way measurement and, at the rho the measurement stage gives them (`measurement_rhos`:
   the c^(2/3) split over S and the 1-way marginals of the columns S leaves uncovered, as
   `stages.cover_columns` does), the projections onto a of the marginals that contain it
   (variance c / (2 rho_c d_a) per cell) (`one_way_error`); d - 1 because a column's 1-way
   error enters the error of each of its d - 1 pairs. E_eta is taken at that same split.
   So E_0 = E(empty) = (d - 1) E_1(empty) + the sum of the noisy count-scale R-scores clipped to [0, noisy_total *
   2 (min d - 1) / min d] (CR = R_bar without paths), not the raw noisy sum the paper writes:
   the raw sum lets the noise of many weak pairs (negative draws) pull E_0 below the clipped
   E of every candidate, and the greedy then stops before its first round whatever the strong
   pairs score. Clipping (rather than not) because a negative score claims a pair explains
   less than nothing, and E_cor of a candidate, made of max(CR, 0), must compare with E_0 term
   by term. Each round, for every unselected pair, add it to the selected graph, triangulate
   (`triangulate`: min-fill elimination; the fill-in edges become selected marginals, so every
   separator of the junction tree is measured), skip it if a maximal clique has tau cells or
   more, and score E. Candidates are the pairs of positive R_bar (a pair of score 0 adds no
   path and only noise error).    Keep the best candidate while it lowers E; stop otherwise.
   tau has no default in the paper: ours is `TAU_CELLS` = 10^5 cells (SEED-NOTES), fixed: no
   setting changes it and `settings.max_model_mb` does not apply to absyn. The selected pairs
   (fill-ins included) are measured by `measurements` with the c^(2/3) split of rho_2 (Eq. 11).
   An empty selection leaves rho_2 to the 1-way marginals (`budget.measurement_plan`).
"""

import itertools
import math

import networkx as nx
import numpy as np
from scipy.sparse.csgraph import shortest_path

from ..config import SelectionSettings
from ..measure import (clique_size, expected_noise_error, measure_marginal, noisy_total,
                       optimal_split)
from . import Budget, Charge, Clique, Log, MarginalOracle, Selection, round_line
from .privsyn import INDIF_SENSITIVITY, measure_one_way, noisy_indif

TAU_CELLS = 100_000  # default clique-size threshold tau (cells)
SCORE_FLOOR_SD = 2.0  # scores below this many noise sds count as 0 (docstring, step 2)
FIT_NOISE_SHARE = 0.5  # E_eta: the share of the raw noise error left after the fit (step 4)


def normalize_scores(noisy: np.ndarray, pairs: list[Clique], domain: dict[str, int],
                     noisy_total: float) -> np.ndarray:
    """Count-scale noisy R-scores -> R_bar in [0, 1] (divide by noisy_total, Eq. 6, clip)."""
    r = noisy / max(noisy_total, 1.0)
    factor = np.array([min(domain[a], domain[b]) / (2 * (min(domain[a], domain[b]) - 1))
                       if min(domain[a], domain[b]) > 1 else 0.0 for a, b in pairs])
    return np.clip(r * factor, 0.0, 1.0)


def above_noise(noisy: np.ndarray, rho_score: float) -> np.ndarray:
    """The count-scale scores with those below `SCORE_FLOOR_SD` noise standard deviations
    (sqrt(8 m / rho_s), public) set to 0: indistinguishable from independence."""
    if noisy.size == 0 or rho_score <= 0:
        return noisy
    sd = math.sqrt(INDIF_SENSITIVITY ** 2 * noisy.size / (2 * rho_score))
    return np.where(noisy >= SCORE_FLOOR_SD * sd, noisy, 0.0)


def cr_scores(index: dict[str, int], pairs: list[Clique], r_bar: np.ndarray,
              edges: set[Clique]) -> np.ndarray:
    """Alg. 1: CR(i, j) = R_bar(i, j) - max-product path weight between i and j over `edges`."""
    d = len(index)
    rows = np.array([index[a] for a, _ in pairs], dtype=np.int64)
    cols = np.array([index[b] for _, b in pairs], dtype=np.int64)
    on = np.array([(a, b) in edges or (b, a) in edges for a, b in pairs], dtype=bool) & (r_bar > 0)
    weights = np.zeros((d, d))
    # -log of the weight; scipy treats 0 as "no edge", so shift exact 1s slightly
    w = np.maximum(-np.log(np.where(on, r_bar, 1.0)), 1e-12)
    weights[rows[on], cols[on]] = w[on]
    weights[cols[on], rows[on]] = w[on]
    dist = shortest_path(weights, method="D", directed=False)
    tilde = np.exp(-dist)  # unreachable: exp(-inf) = 0
    return r_bar - tilde[rows, cols]


def triangulate(nodes: list[str], edges: set[Clique]) -> tuple[set[Clique], list[tuple[str, ...]]]:
    """Chordal completion of the selected graph: its edges (with fill-ins) and maximal cliques.
    Elimination game with the min-fill order (ties: fewest neighbours, then column order): each
    eliminated vertex's remaining neighbours are joined, which makes the graph chordal, and the
    eliminated vertex with them forms a clique; the maximal ones are the graph's maximal cliques."""
    order = {a: i for i, a in enumerate(nodes)}
    adj: dict[str, set[str]] = {a: set() for a in nodes}
    for a, b in edges:
        adj[a].add(b)
        adj[b].add(a)
    filled = {tuple(sorted(e, key=order.get)) for e in edges}
    remaining = set(nodes)
    found: list[frozenset] = []

    def fill(v: str) -> int:
        nb = list(adj[v] & remaining)
        return sum(1 for i, x in enumerate(nb) for y in nb[i + 1:] if y not in adj[x])

    while remaining:
        v = min(remaining, key=lambda a: (fill(a), len(adj[a] & remaining), order[a]))
        nb = sorted(adj[v] & remaining, key=order.get)
        for i, x in enumerate(nb):
            for y in nb[i + 1:]:
                if y not in adj[x]:
                    adj[x].add(y)
                    adj[y].add(x)
                    filled.add((x, y))
        found.append(frozenset([v, *nb]))
        remaining.discard(v)
    maximal = [c for c in found if not any(c < o for o in found)]
    cliques = list(dict.fromkeys(tuple(sorted(c, key=order.get)) for c in maximal))
    return filled, cliques


def measurement_rhos(selected: set[Clique] | list[Clique], domain: dict[str, int],
                     rho_measure: float) -> dict[Clique, float]:
    """The rho each marginal gets when the measurement stage measures `selected`: the c^(2/3)
    split (Eq. 11) over the selected pairs and the 1-way marginal of every column no pair covers
    (`stages.cover_columns`), or, with nothing selected, over every column's 1-way marginal
    (`budget.measurement_plan`)."""
    covered = {a for c in selected for a in c}
    cliques = list(selected) + [(a,) for a in domain if a not in covered]
    if rho_measure <= 0 or not cliques:
        return {}
    return dict(zip(cliques, optimal_split(rho_measure, [clique_size(c, domain) for c in cliques])))


def one_way_error(domain: dict[str, int], one_way_sigma: dict[str, float],
                  rhos: dict[Clique, float]) -> float:
    """Expected L1 noise (counts) of the 1-way marginals the model is fitted to, summed over the
    columns: each column's direct measurements (`one_way_sigma`, and a 1-way marginal of `rhos`)
    and the projections of the marginals of `rhos` that contain it, pooled by inverse variance
    (a clique of c cells at rho_c projects onto a column of d_a cells with variance
    c / (2 rho_c d_a) per cell, as consistency combines them); d_a cells of sd s each leave
    d_a s sqrt(2 / pi)."""
    precision = {a: 1.0 / one_way_sigma[a] ** 2 if one_way_sigma.get(a) else 0.0 for a in domain}
    for clique, rho in rhos.items():
        cells = clique_size(clique, domain)
        for a in clique:
            precision[a] += 2.0 * rho * domain[a] / cells
    return float(sum(domain[a] * math.sqrt(2.0 / math.pi / p) for a, p in precision.items()
                     if p > 0))


def greedy(pairs: list[Clique], r_bar: np.ndarray, domain: dict[str, int], noisy_total: float,
           rho_measure: float, tau: int, log: Log | None = None,
           one_way_sigma: dict[str, float] | None = None) -> tuple[list[Clique], list[dict]]:
    """Alg. 3 lines 9-37; returns the selected pairs (triangulated) and a public trace. `log`,
    if given, gets each round's `round_line` (rho 0: the greedy post-processes the scores).
    With `one_way_sigma` (the sigma of each column's 1-way measurement already made), E(S) also
    counts the 1-way noise each S leaves (E_1, docstring step 4); None: E_cor + E_eta only."""
    nodes = list(domain)
    index = {a: i for i, a in enumerate(nodes)}
    to_count = np.array([noisy_total * 2 * (min(domain[a], domain[b]) - 1) / min(domain[a], domain[b])
                         if min(domain[a], domain[b]) > 1 else 0.0 for a, b in pairs])

    def error(filled: set[Clique]) -> float:  # E(S), one scale for every S (docstring, step 4)
        cr = np.clip(cr_scores(index, pairs, r_bar, filled), 0.0, None)
        unselected = np.array([p not in filled for p in pairs])
        e_cor = float(np.sum(cr * to_count * unselected))
        if one_way_sigma is None:
            return e_cor + FIT_NOISE_SHARE * expected_noise_error(
                rho_measure, [clique_size(p, domain) for p in filled])
        rhos = measurement_rhos(filled, domain, rho_measure)
        e_eta = FIT_NOISE_SHARE * sum(clique_size(p, domain) / math.sqrt(math.pi * rhos[p])
                                      for p in filled)
        return e_cor + e_eta + (len(nodes) - 1) * one_way_error(domain, one_way_sigma, rhos)

    # a pair of score 0 adds no path and only noise error: never a candidate
    candidates = [p for p, r in zip(pairs, r_bar) if r > 0]
    selected: set[Clique] = set()
    best_error = error(selected)  # E_0
    trace = []
    largest = 0  # cells of the largest maximal clique of the selected (chordal) graph
    while True:
        best = None
        component = {a: i for i, part in enumerate(
            nx.connected_components(nx.Graph(list(selected)))) for a in part}
        for pair in candidates:
            if pair in selected:
                continue
            a, b = pair
            if component.get(a, ("alone", a)) != component.get(b, ("alone", b)):
                # a bridge between two components keeps the graph chordal: no fill-in, and
                # the new maximal clique is the pair itself
                filled, size = selected | {pair}, max(largest, clique_size(pair, domain))
            else:
                filled, cliques = triangulate(nodes, selected | {pair})
                size = max(clique_size(c, domain) for c in cliques)
            if size >= tau:
                continue
            e = error(filled)
            if best is None or e < best[0]:
                best = (e, pair, filled, size)
        if best is None or best[0] >= best_error:
            break
        best_error, pair, selected, largest = best
        trace.append({"round": len(trace) + 1, "pair": list(pair), "selected": len(selected),
                      "total_error": round(best_error, 3)})
        if log is not None:
            log(round_line("absyn", len(trace), pair, 0.0))
    order = {p: i for i, p in enumerate(pairs)}
    return sorted(selected, key=order.get), trace


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    return select_after(domain, oracle, budget, charge,
                        measure_one_way(domain, oracle, budget.one_way, charge), log)


def detectable(pairs: list[Clique], domain: dict[str, int], noisy_total: float,
               rho_score: float) -> list[Clique]:
    """The pairs whose score could clear the floor at all (docstring, step 2): a pair of smallest
    domain k has count-scale score at most 2 n_hat (k - 1) / k (perfect dependency), and one
    below `SCORE_FLOOR_SD` noise sds (sqrt(8 m / rho_s) for m released pairs) passes only through
    its noise. Dropping such pairs lowers m and so the floor; repeated until none drops (public:
    n_hat, the domain sizes and rho_s)."""
    if rho_score <= 0:
        return []
    kept = list(pairs)
    while kept:
        floor = SCORE_FLOOR_SD * math.sqrt(INDIF_SENSITIVITY ** 2 * len(kept) / (2 * rho_score))
        top = [2 * noisy_total * (min(domain[a], domain[b]) - 1) / min(domain[a], domain[b])
               for a, b in kept]
        now = [p for p, t in zip(kept, top) if t >= floor]
        if len(now) == len(kept):
            break
        kept = now
    return kept


def select_after(domain: dict[str, int], oracle: MarginalOracle, budget: Budget, charge: Charge,
                 one_way: tuple, log: Log | None = None) -> Selection:
    """Steps 2-4 on 1-way marginals already measured (`auto` measures them first). When no pair
    is `detectable`, no score is released and nothing selected: the score budget measures the
    1-way marginals a second time (c^(2/3) split, `measured`), so the run spends its whole
    budget on the independent model."""
    total = noisy_total(list(one_way))
    pairs = list(itertools.combinations(list(domain), 2))
    scored = detectable(pairs, domain, total, budget.score)
    if not scored:
        singles = [(a,) for a in domain]
        rhos = dict(zip(singles, optimal_split(budget.score, [domain[a] for a in domain])))
        exact = oracle(singles) if budget.score > 0 else {}
        measured = tuple(measure_marginal(exact[c], c, rho, charge,
                                          purpose="one-way marginal (no detectable pair)")
                         for c, rho in rhos.items() if rho > 0)
        return Selection(method="absyn", one_way=one_way, cliques=(), budgets={},
                         details={"rounds": [], "tau_cells": TAU_CELLS, "detectable_pairs": 0,
                                  "expected_noise_error": 0.0},
                         measured=measured)
    noisy = noisy_indif(scored, oracle, budget.score, charge, "R-scores")
    r_bar = normalize_scores(above_noise(noisy, budget.score), scored, domain, total)
    selected, trace = greedy(scored, r_bar, domain, total, budget.measure, TAU_CELLS,
                             log, {m.clique[0]: m.sigma for m in one_way})
    rhos = optimal_split(budget.measure, [clique_size(p, domain) for p in selected]) if selected else []
    return Selection(
        method="absyn",
        one_way=one_way,
        cliques=tuple(selected),
        budgets=dict(zip(selected, rhos)),
        scores={p: float(r) for p, r in zip(scored, r_bar)},
        details={"rounds": trace, "tau_cells": TAU_CELLS, "detectable_pairs": len(scored),
                 "expected_noise_error": FIT_NOISE_SHARE * expected_noise_error(
                     budget.measure, [clique_size(p, domain) for p in selected])},
    )
