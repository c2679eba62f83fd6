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
3. CR-score (Alg. 1, Eq. 7-8): R_tilde(i, j) is the maximum over paths from i to j in the graph
   of selected marginals of the product of R_bar along the path; CR = R_bar - R_tilde. We compute
   all pairs at once as shortest paths on -log R_bar (scipy's Dijkstra), which is Alg. 1's
   max-product search. A negative CR (a path explains more than the pair's own score) counts as
   no missing information: max(CR, 0).
4. Greedy (Alg. 3): start from E_0 = sum of the noisy count-scale R-scores as drawn (not
   normalized or clipped, so noise can make it smaller than the error of any selection and then
   nothing is selected). Each round, for every unselected pair, add it to the selected graph,
   triangulate (networkx's chordal completion; the fill-in edges become selected marginals, so
   every separator of the junction tree is measured), skip it if a maximal clique has tau cells
   or more, and score
       E = E_cor + E_eta,
       E_cor = sum over unselected pairs of noisy_total * max(CR, 0) * 2 (min d - 1) / min d
               (the CR back on the count scale of E_0, SEED-NOTES),
       E_eta = sum over selected pairs of c_i sqrt(1 / (pi rho_i)) with rho_i by Eq. 11.
   Keep the best candidate while it lowers E; stop otherwise.
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
from ..measure import clique_size, expected_noise_error, optimal_split, noisy_total
from . import Budget, Charge, Clique, Log, MarginalOracle, Selection, round_line
from .privsyn import measure_one_way, noisy_indif

TAU_CELLS = 100_000  # default clique-size threshold tau (cells)


def normalize_scores(noisy: np.ndarray, pairs: list[Clique], domain: dict[str, int],
                     noisy_total: float) -> np.ndarray:
    """Count-scale noisy R-scores -> R_bar in [0, 1] (divide by noisy_total, Eq. 6, clip)."""
    r = noisy / max(noisy_total, 1.0)
    factor = np.array([min(domain[a], domain[b]) / (2 * (min(domain[a], domain[b]) - 1))
                       if min(domain[a], domain[b]) > 1 else 0.0 for a, b in pairs])
    return np.clip(r * factor, 0.0, 1.0)


def cr_scores(index: dict[str, int], pairs: list[Clique], r_bar: np.ndarray,
              edges: set[Clique]) -> np.ndarray:
    """Alg. 1: CR(i, j) = R_bar(i, j) - max-product path weight between i and j over `edges`."""
    d = len(index)
    weights = np.zeros((d, d))
    for (a, b), r in zip(pairs, r_bar):
        if (a, b) in edges or (b, a) in edges:
            if r > 0:
                # -log of the weight; scipy treats 0 as "no edge", so shift exact 1s slightly
                weights[index[a], index[b]] = weights[index[b], index[a]] = max(-math.log(r), 1e-12)
    dist = shortest_path(weights, method="D", directed=False)
    tilde = np.exp(-dist)  # unreachable: exp(-inf) = 0
    return np.array([r - tilde[index[a], index[b]] for (a, b), r in zip(pairs, r_bar)])


def triangulate(nodes: list[str], edges: set[Clique]) -> tuple[set[Clique], list[tuple[str, ...]]]:
    """Chordal completion of the selected graph: its edges (with fill-ins) and maximal cliques."""
    graph = nx.Graph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(edges)
    chordal, _ = nx.complete_to_chordal_graph(graph)
    order = {a: i for i, a in enumerate(nodes)}
    filled = {tuple(sorted(e, key=order.get)) for e in chordal.edges}
    cliques = [tuple(sorted(c, key=order.get)) for c in nx.chordal_graph_cliques(chordal)]
    return filled, cliques


def greedy(pairs: list[Clique], count_scores: np.ndarray, r_bar: np.ndarray,
           domain: dict[str, int], noisy_total: float, rho_measure: float,
           tau: int, log: Log | None = None) -> tuple[list[Clique], list[dict]]:
    """Alg. 3 lines 9-37; returns the selected pairs (triangulated) and a public trace. `log`,
    if given, gets each round's `round_line` (rho 0: the greedy post-processes the scores)."""
    nodes = list(domain)
    index = {a: i for i, a in enumerate(nodes)}
    to_count = np.array([noisy_total * 2 * (min(domain[a], domain[b]) - 1) / min(domain[a], domain[b])
                         if min(domain[a], domain[b]) > 1 else 0.0 for a, b in pairs])
    selected: set[Clique] = set()
    best_error = float(np.sum(count_scores))  # E_0
    trace = []
    while True:
        best = None
        for pair in pairs:
            if pair in selected:
                continue
            filled, cliques = triangulate(nodes, selected | {pair})
            if max(clique_size(c, domain) for c in cliques) >= tau:
                continue
            cr = np.clip(cr_scores(index, pairs, r_bar, filled), 0.0, None)
            unselected = np.array([p not in filled for p in pairs])
            e_cor = float(np.sum(cr * to_count * unselected))
            e_eta = expected_noise_error(rho_measure, [clique_size(p, domain) for p in filled])
            if best is None or e_cor + e_eta < best[0]:
                best = (e_cor + e_eta, pair, filled)
        if best is None or best[0] >= best_error:
            break
        best_error, pair, selected = best[0], best[1], best[2]
        trace.append({"round": len(trace) + 1, "pair": list(pair), "selected": len(selected),
                      "total_error": round(best_error, 3)})
        if log is not None:
            log(round_line("absyn", len(trace), pair, 0.0))
    order = {p: i for i, p in enumerate(pairs)}
    return sorted(selected, key=order.get), trace


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    one_way = measure_one_way(domain, oracle, budget.one_way, charge)
    total = noisy_total(list(one_way))
    pairs = list(itertools.combinations(list(domain), 2))
    noisy = noisy_indif(pairs, oracle, budget.score, charge, "R-scores")
    r_bar = normalize_scores(noisy, pairs, domain, total)
    selected, trace = greedy(pairs, noisy, r_bar, domain, total, budget.measure, TAU_CELLS,
                             log)
    rhos = optimal_split(budget.measure, [clique_size(p, domain) for p in selected]) if selected else []
    return Selection(
        method="absyn",
        one_way=one_way,
        cliques=tuple(selected),
        budgets=dict(zip(selected, rhos)),
        scores={p: float(r) for p, r in zip(pairs, r_bar)},
        details={"rounds": trace, "tau_cells": TAU_CELLS,
                 "expected_noise_error": expected_noise_error(
                     budget.measure, [clique_size(p, domain) for p in selected])},
    )
