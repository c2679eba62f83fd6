"""ABSyn's marginal selection: noisy R-scores, the CR-score and the greedy triangulated selection.

Implements ABSyn (Jia et al.) section V (Eq. 6-8, Algorithm 1) and section VI (Algorithms 2-3,
Eq. 9-11), with the corrections and additions (score floor, posterior scores, coarse versions,
tau) of docs/decisions/0013-absyn.md, whose section "As implemented" gives the steps.

Guarantee: the data is read by the 1-way marginals (`budget.one_way`) and one Gaussian release of
all R-scores, fine and coarse (`budget.score`), each charged with its OpenDP map's answer right
after its draw; the greedy is post-processing of those. `budget.measure` is split over the
selected marginals (`budgets`) and spent by the `measurements` stage."""

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..config import SelectionSettings
from ..measure import (adjacent_groups, clique_size, coarsen, coarsened_size,
                       expected_noise_error, fine_columns, fitted_noise_error, measure_marginal,
                       noisy_total, optimal_split)
from ..privacy import gaussian_scores
from . import Budget, Charge, Clique, Log, MarginalOracle, Selection, round_line
from .privsyn import INDIF_SENSITIVITY, indif, measure_one_way

TAU_CELLS = 100_000  # default clique-size threshold tau (cells)
SCORE_FLOOR_SD = 2.0  # scores below this many noise sds count as 0 (0013-absyn.md, step 2)
FIT_NOISE_SHARE = 0.5  # E_eta: the share of the raw noise error left after the fit (step 4)
COARSE_LEVELS = (6, 16)  # coarse versions: groups of 1/level of a large column's mass (step 5)
COARSE_MIN_CELLS = 1_000  # pairs with fewer cells have no coarse version (step 5)
COARSE_TAU_CELLS = 50_000  # tau for a coarse candidate (step 5)
SIGMA_GRID = 2.0 ** np.arange(12)  # sigma / sigma_0 at which a pair's shrink is computed
PRIOR_GRID = 200  # grid points of the scores' estimated prior (step 2, `prior_on_grid`)
PRIOR_ITERATIONS = 500  # EM steps of that estimate


def normalize_scores(noisy: np.ndarray, pairs: list[Clique], domain: dict[str, int],
                     noisy_total: float) -> np.ndarray:
    """Count-scale noisy R-scores -> R_bar in [0, 1] (divide by noisy_total, Eq. 6, clip)."""
    r = noisy / max(noisy_total, 1.0)
    factor = np.array([min(domain[a], domain[b]) / (2 * (min(domain[a], domain[b]) - 1))
                       if min(domain[a], domain[b]) > 1 else 0.0 for a, b in pairs])
    return np.clip(r * factor, 0.0, 1.0)


def score_sd(m: int, rho_score: float) -> float:
    """The noise sd of each of m count-scale scores released together at rho_s (public):
    sqrt(8 m / rho_s), each score of sensitivity `INDIF_SENSITIVITY`."""
    return math.sqrt(INDIF_SENSITIVITY ** 2 * m / (2 * rho_score))


def above_noise(noisy: np.ndarray, rho_score: float) -> np.ndarray:
    """The count-scale scores with those below `SCORE_FLOOR_SD` noise standard deviations
    (`score_sd`) set to 0: indistinguishable from independence."""
    if noisy.size == 0 or rho_score <= 0:
        return noisy
    return np.where(noisy >= SCORE_FLOOR_SD * score_sd(noisy.size, rho_score), noisy, 0.0)


def posterior_scores(noisy: np.ndarray, rho_score: float) -> np.ndarray:
    """The count-scale scores as their empirical-Bayes posterior means (0013-absyn.md, step 2):
    each released score is its true score (>= 0: a sum of absolute values) plus Gaussian noise
    of the public sd sqrt(8 m / rho_s). The prior of the true scores is estimated from all the
    released ones by nonparametric maximum likelihood on a grid (`prior_on_grid`), and each score
    is replaced by its mean under the posterior. A score that won its place by noise is pulled
    back to what scores like it are worth on average (the winner's curse the greedy paid for);
    one far above the rest keeps nearly its value. Post-processing: it reads only the released
    scores and their public sd; monotone, so the scores keep their order."""
    z = np.asarray(noisy, dtype=np.float64)
    if z.size < 2 or rho_score <= 0:
        return z
    sd = score_sd(z.size, rho_score)
    grid, weights = prior_on_grid(z, sd)
    log_like = -0.5 * ((z[:, None] - grid[None, :]) / sd) ** 2
    post = np.exp(log_like - log_like.max(axis=1, keepdims=True)) * weights
    return (post @ grid) / post.sum(axis=1)


def prior_on_grid(z: np.ndarray, sd: float, cells: int = PRIOR_GRID,
                  iterations: int = PRIOR_ITERATIONS) -> tuple[np.ndarray, np.ndarray]:
    """The nonparametric maximum-likelihood prior (Kiefer and Wolfowitz 1956; computed as Jiang
    and Zhang 2009 do, by EM on a fixed grid) of values >= 0 observed as `z` with Gaussian noise
    of sd `sd`: `cells` grid points from 0 to max(z) + sd and their probabilities. The EM runs
    on the observations rounded to sd / 8 (counted once per distinct value), which moves each
    likelihood by under 1% where it matters and keeps thousands of scores fast."""
    grid = np.linspace(0.0, max(float(z.max()), 0.0) + sd, cells)
    values, counts = np.unique(np.round(z / (sd / 8)), return_counts=True)
    log_like = -0.5 * ((values[:, None] * (sd / 8) - grid[None, :]) / sd) ** 2
    like = np.exp(log_like - log_like.max(axis=1, keepdims=True))  # each row's scale cancels
    share = counts / counts.sum()
    weights = np.full(cells, 1.0 / cells)
    for _ in range(iterations):
        post = like * weights
        post /= post.sum(axis=1, keepdims=True)
        weights = share @ post
    return grid, weights


def cr_scores(index: dict[str, int], pairs: list[Clique], r_bar: np.ndarray,
              edges: set[Clique], edge_r: np.ndarray | None = None) -> np.ndarray:
    """Alg. 1: CR(i, j) = R_bar(i, j) - max-product path weight between i and j over `edges`
    (each edge weighted by `edge_r`, default `r_bar`: a coarse edge carries its coarse score)."""
    d = len(index)
    edge_r = r_bar if edge_r is None else edge_r
    rows = np.array([index[a] for a, _ in pairs], dtype=np.int64)
    cols = np.array([index[b] for _, b in pairs], dtype=np.int64)
    on = np.array([(a, b) in edges or (b, a) in edges for a, b in pairs], dtype=bool) & (edge_r > 0)
    # the best path's product of weights (a weight above 1 counts as 1), by Floyd-Warshall in
    # the (max, x) semiring: d is tens of columns, so d vectorized steps beat a graph library's
    # per-call set-up (this runs for every candidate of every round)
    w = np.minimum(np.where(on, edge_r, 0.0), 1.0)
    tilde = np.zeros((d, d))  # 0: no path
    tilde[rows[on], cols[on]] = w[on]
    tilde[cols[on], rows[on]] = w[on]
    for k in range(d):
        np.maximum(tilde, np.multiply.outer(tilde[:, k], tilde[k, :]), out=tilde)
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


@dataclass(frozen=True)
class Version:
    """A coarse version of one pair: its groups (`measure.Measurement.groups`), its normalized
    score R_bar on the groups, the factor taking R_bar back to counts, and its cells."""

    groups: tuple
    r_bar: float
    to_count: float
    cells: int


def to_count_factor(da: int, db: int, noisy_total: float) -> float:
    """n_hat 2 (min d - 1) / min d: R_bar back on the count scale
    (docs/decisions/0013-absyn.md)."""
    k = min(da, db)
    return noisy_total * 2 * (k - 1) / k if k > 1 else 0.0


def coupling(one_a: np.ndarray, one_b: np.ndarray) -> np.ndarray:
    """The north-west corner coupling of two 1-way count arrays, each taken in decreasing order:
    a joint of those margins on at most d_a + d_b - 1 cells, the sparsest shape a strong
    dependency can take (a function, a near-diagonal pair). Returned on the original codes."""
    order_a, order_b = np.argsort(-one_a, kind="stable"), np.argsort(-one_b, kind="stable")
    left, right = one_a[order_a].astype(np.float64), one_b[order_b].astype(np.float64)
    out = np.zeros((left.size, right.size))
    i = j = 0
    while i < left.size and j < right.size:
        step = min(left[i], right[j])
        out[order_a[i], order_b[j]] += step
        left[i] -= step
        right[j] -= step
        if left[i] <= 1e-9 * max(step, 1.0):
            i += 1
        elif right[j] <= 1e-9 * max(step, 1.0):
            j += 1
    return out


def support_proxy(one_a: np.ndarray, one_b: np.ndarray, score: float) -> np.ndarray:
    """Public expected counts of a pair (step 4): its noisy 1-way counts (negatives read as 0,
    scaled to one total) joined as (1 - w) their independent product + w their `coupling`,
    w = (R - s) / (R_C - s) clipped to [0, 1]: R the released count-scale score, R_C the
    coupling's distance from independence, s the score sampling alone gives an independent
    pair of these margins (sum over cells of min(sqrt(2 mu / pi), 2 mu): E|count - mu| about
    the true product; the score is taken about the sample's own margins, which absorb part of
    that, so s errs high by up to the factor 1 / sqrt((1 - p_a)(1 - p_b)) a cell). A score at
    the sampling level spreads over every cell: w = 0."""
    a = np.clip(np.asarray(one_a, dtype=np.float64), 0.0, None)
    b = np.clip(np.asarray(one_b, dtype=np.float64), 0.0, None)
    total = max(a.sum(), 1.0)
    b = b * total / b.sum() if b.sum() > 0 else np.full(b.size, total / b.size)
    independent = np.outer(a, b) / total
    sampling = float(np.sum(np.minimum(np.sqrt(2 * independent / math.pi), 2 * independent)))
    if score <= sampling:
        return independent
    joint = coupling(a, b)
    reach = float(np.abs(joint - independent).sum())
    w = min((score - sampling) / (reach - sampling), 1.0) if reach > sampling else 0.0
    return (1 - w) * independent + w * joint


def shrink_curve(expected: np.ndarray, sigma_0: float) -> np.ndarray:
    """h(sigma) = `fitted_noise_error` / raw l1 noise (cells sqrt(2 / pi) sigma) at sigma =
    sigma_0 `SIGMA_GRID`: the share of a marginal's raw noise its fit keeps (1 for dense ones)."""
    sigmas = sigma_0 * SIGMA_GRID
    return fitted_noise_error(expected, sigmas) / (expected.size * sigmas * math.sqrt(2 / math.pi))


def fit_shrink(one_a: np.ndarray, one_b: np.ndarray, score: float,
               sigma_0: float) -> tuple[float, ...] | None:
    """The share of a pair's raw noise price that step 4 keeps, at sigma_0 `SIGMA_GRID`: the
    fitted error of its `support_proxy` over that of its margins' independent product (at most
    1), so a pair is priced below the raw noise only as far as its released dependency makes it
    sparser than independence. None (a share of 1 at every sigma) at score 0 or when the two
    are within 0.1%."""
    if score <= 0:
        return None
    curve = np.minimum(shrink_curve(support_proxy(one_a, one_b, score), sigma_0)
                       / shrink_curve(support_proxy(one_a, one_b, 0.0), sigma_0), 1.0)
    return None if curve.min() > 0.999 else tuple(curve.tolist())


def shrink_at(curve: tuple[float, ...], sigma_0: float, sigma: float) -> float:
    """`shrink_curve` (as a tuple) read at sigma: linear in log sigma, held at the grid's ends
    (plain floats: the greedy reads it for every pair of every candidate)."""
    x = min(max(math.log2(sigma / sigma_0), 0.0), len(curve) - 1.0)
    k = min(int(x), len(curve) - 2)
    return curve[k] + (x - k) * (curve[k + 1] - curve[k])


def greedy(pairs: list[Clique], r_bar: np.ndarray, domain: dict[str, int], noisy_total: float,
           rho_measure: float, tau: int, log: Log | None = None,
           coarse: dict[Clique, list[Version]] | None = None, start: tuple[Clique, ...] = (),
           rho_one_way: float | None = None, one_way: dict[str, np.ndarray] | None = None
           ) -> tuple[list[Clique], list[dict], dict[Clique, tuple]]:
    """Alg. 3 lines 9-37 with coarse versions (docstring, step 5); returns the selected pairs
    (triangulated), a public trace and the groups of the pairs selected coarse. `log`, if given,
    gets each round's `round_line` (rho 0: the greedy post-processes the scores). `start`: pairs
    of `pairs` selected before the first round (fine, forming a forest: `auto`'s tree), kept.
    `rho_one_way` (the 1-way marginals' rho; with no `start`): the selection returned is the
    round of the greedy's path, the empty one included, whose measurement plan has the least
    error, E_cor + `plan_noise_error` (step 6). `one_way` (each column's noisy 1-way counts): each
    pair's noise is priced by the share of it its fit keeps (`support_proxy`, `shrink_curve`;
    step 4); without it, at the raw noise."""
    coarse = coarse or {}
    nodes = list(domain)
    index = {a: i for i, a in enumerate(nodes)}
    position = {p: i for i, p in enumerate(pairs)}
    to_count = np.array([to_count_factor(domain[a], domain[b], noisy_total) for a, b in pairs])
    fine_cells = [clique_size(p, domain) for p in pairs]

    def order(pair: Clique) -> int:  # a fill-in edge no score was released for goes last
        return position.get(pair, len(position))

    def cells(pair: Clique, version: int) -> int:
        if version:
            return coarse[pair][version - 1].cells
        return fine_cells[position[pair]] if pair in position else clique_size(pair, domain)

    def fill_version(pair: Clique) -> int:  # a fill-in edge: its cheapest version
        versions = coarse.get(pair, [])
        if not versions:
            return 0
        return 1 + min(range(len(versions)), key=lambda k: versions[k].cells)

    sigma_0 = 1 / math.sqrt(2 * rho_measure)  # the least sigma a pair can be measured at
    curves: dict[tuple[Clique, int], tuple[float, ...] | None] = {}  # fit_shrink, per version

    def shrink(pair: Clique, version: int, sigma: float) -> float:  # step 4
        if one_way is None:
            return 1.0
        if (pair, version) not in curves:
            at = position.get(pair)
            if version:
                c = coarse[pair][version - 1]
                score, groups = c.r_bar * c.to_count, c.groups
            else:
                score = 0.0 if at is None else float(r_bar[at] * to_count[at])
                groups = (None, None)
            margins = [coarsen(one_way[x], (g,)) for x, g in zip(pair, groups)]
            curves[(pair, version)] = fit_shrink(*margins, score, sigma_0)
        curve = curves[(pair, version)]
        return 1.0 if curve is None else shrink_at(curve, sigma_0, sigma)

    def noise_error(filled: set[Clique], version: dict[Clique, int]) -> float:  # E_eta
        chosen = list(filled)
        sizes = [cells(p, version[p]) for p in chosen]
        rhos = optimal_split(rho_measure, sizes) if chosen else []
        return FIT_NOISE_SHARE * sum(c / math.sqrt(math.pi * r)
                                     * shrink(p, version[p], 1 / math.sqrt(2 * r))
                                     for p, c, r in zip(chosen, sizes, rhos))

    def error(filled: set[Clique], version: dict[Clique, int]) -> float:  # E(S), step 4-5
        return correlation_error(filled, version) + noise_error(filled, version)

    def correlation_error(filled: set[Clique], version: dict[Clique, int]) -> float:  # E_cor
        edge_r = r_bar.copy()
        residual = 0.0
        for p in filled:
            v = version[p]
            if v:
                c = coarse[p][v - 1]
                edge_r[position[p]] = min(c.r_bar, r_bar[position[p]]) if r_bar[position[p]] > 0 \
                    else c.r_bar
                # the dependency the groups cannot show stays an error
                residual += max(r_bar[position[p]] * to_count[position[p]]
                                - c.r_bar * c.to_count, 0.0)
        cr = np.clip(cr_scores(index, pairs, r_bar, filled, edge_r), 0.0, None)
        unselected = np.array([p not in filled for p in pairs])
        return float(np.sum(cr * to_count * unselected)) + residual

    # a version of score 0 adds no path and only noise error: never a candidate
    candidates = [(p, 0) for p, r in zip(pairs, r_bar) if r > 0]
    candidates += [(p, k + 1) for p, versions in coarse.items()
                   for k, v in enumerate(versions) if v.r_bar > 0]
    selected: set[Clique] = set(start)
    version: dict[Clique, int] = {p: 0 for p in start}
    best_error = error(selected, version)  # E_0
    trace = []
    path = [(selected, version)]  # each round's selection, for step 6
    # cells of the largest maximal clique of the selected (chordal) graph
    largest = max((clique_size(p, domain) for p in start), default=0)
    while True:
        best = None
        component = {a: i for i, part in enumerate(
            nx.connected_components(nx.Graph(list(selected)))) for a in part}
        for pair, v in candidates:
            if pair in selected:
                # a selected pair may move to a finer version (more cells) only
                if cells(pair, v) <= cells(pair, version[pair]):
                    continue
                filled, size = selected, largest
            else:
                a, b = pair
                if component.get(a, ("alone", a)) != component.get(b, ("alone", b)):
                    # a bridge between two components keeps the graph chordal: no fill-in,
                    # and the new maximal clique is the pair itself
                    filled, size = selected | {pair}, max(largest, clique_size(pair, domain))
                else:
                    filled, cliques = triangulate(nodes, selected | {pair})
                    size = max(clique_size(c, domain) for c in cliques)
            versions = {**{p: version.get(p, fill_version(p)) for p in filled}, pair: v}
            # a coarse edge is a fine clique of the model: adding one keeps cliques smaller
            if size >= (min(tau, COARSE_TAU_CELLS) if v else tau):
                continue
            e = error(filled, versions)
            if best is None or e < best[0]:
                best = (e, pair, filled, size, versions)
        if best is None or best[0] >= best_error:
            break
        best_error, pair, selected, largest, version = best
        path.append((selected, version))
        entry = {"round": len(trace) + 1, "pair": list(pair), "selected": len(selected),
                 "total_error": round(best_error, 3)}
        if version[pair]:
            entry["cells"] = cells(pair, version[pair])
        trace.append(entry)
        if log is not None:
            log(round_line("absyn", len(trace), pair, 0.0))
    if rho_one_way is not None and not start and trace:  # step 6: the plan's error, the path
        def plan_error(k: int) -> float:
            filled, versions = path[k]
            chosen = sorted(filled, key=order)
            grouped = {p: coarse[p][versions[p] - 1].groups for p in chosen if versions[p]}
            return correlation_error(filled, versions) + plan_noise_error(
                domain, rho_one_way, rho_measure, chosen,
                [cells(p, versions[p]) for p in chosen], grouped,
                lambda p, sigma: shrink(p, versions[p], sigma))

        totals = [plan_error(k) for k in range(len(path))]
        keep = int(np.argmin(totals))
        for entry, total in zip(trace, totals[1:]):
            entry.update(plan_error=round(total, 3), kept=entry["round"] <= keep)
        selected, version = path[keep]
    chosen = sorted(selected, key=order)
    groups = {p: coarse[p][version[p] - 1].groups for p in chosen if version[p]}
    return chosen, trace, groups


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    """ABSyn's selection: 1-way marginals at `budget.one_way`, then `select_after`.

    Args: those of `select.select` (core/select/__init__.py), but `method`.

    Returns:
        The selected pairs and fill-ins (`cliques`) with their Eq. 11 rho, coarse versions included.
    """
    return select_after(domain, oracle, budget, charge,
                        measure_one_way(domain, oracle, budget.one_way, charge), log)


def coarse_groupings(domain: dict[str, int], one_way: tuple,
                     levels: tuple[int, ...] = COARSE_LEVELS) -> dict[int, dict[str, tuple]]:
    """Per level g of `levels`: each column of at least 2g codes grouped into about g runs of
    adjacent codes of near-equal noisy mass (`measure.adjacent_groups` on its noisy 1-way
    marginal; public), when that makes fewer groups than codes."""
    noisy = {m.clique[0]: m.noisy for m in one_way if len(m.clique) == 1}
    out: dict[int, dict[str, tuple]] = {}
    for g in levels:
        out[g] = {}
        for a, d in domain.items():
            if d >= 2 * g and a in noisy:
                grouping = adjacent_groups(noisy[a], g)
                if max(grouping) + 1 < d:
                    out[g][a] = grouping
    return out


def coarse_versions(pairs: list[Clique], domain: dict[str, int],
                    groupings: dict[int, dict[str, tuple]]) -> list[tuple[Clique, tuple]]:
    """Each pair's distinct coarse versions: per level, the pair with its coarsened columns
    grouped (the others kept), in level order; only pairs of `COARSE_MIN_CELLS` cells or more."""
    out = []
    for a, b in pairs:
        if domain[a] * domain[b] < COARSE_MIN_CELLS:
            continue
        seen = set()
        for level in groupings.values():
            groups = (level.get(a), level.get(b))
            if groups == (None, None) or groups in seen:
                continue
            seen.add(groups)
            out.append(((a, b), groups))
    return out


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
        floor = SCORE_FLOOR_SD * score_sd(len(kept), rho_score)
        top = [2 * noisy_total * (min(domain[a], domain[b]) - 1) / min(domain[a], domain[b])
               for a, b in kept]
        now = [p for p, t in zip(kept, top) if t >= floor]
        if len(now) == len(kept):
            break
        kept = now
    return kept


def plan_noise_error(domain: dict[str, int], rho_one_way: float, rho_measure: float,
                     chosen: list[Clique], sizes: list[int], grouped: dict[Clique, tuple],
                     shrink: Callable[[Clique, float], float] | None = None) -> float:
    """E_eta + E_1 of the measurement plan a selection leads to (docs/decisions/0013-absyn.md,
    step 6): the `measurements` stage draws the `chosen` pairs (`sizes` cells; those `grouped`
    maps to groups, as `Selection.coarse`, on them) and the 1-way marginal of every column no
    pair holds on its own codes (`stages.cover_columns`), splitting `rho_measure` over them by
    Eq. 11; with nothing chosen it spends `rho_measure` on the 1-way marginals.
    E_eta = FIT_NOISE_SHARE sum over the pairs of c sqrt(1 / (pi rho)) h, h = `shrink`(pair,
    sigma = 1 / sqrt(2 rho)) (the greedy's step-4 price; 1 without it);
    E_1 = FIT_NOISE_SHARE sum over the pairs not chosen of L1_a + L1_b,
    L1_a = d_a / sqrt(pi rho_a), rho_a = a's Eq. 11 share of `rho_one_way`, plus its share of
    `rho_measure` if no pair holds it, plus r_p d_a / c_p for each pair p holding a on its own
    codes (summed over the other column, the pair gives a's counts at c_p / d_a times its noise
    variance). Public: the domain, the sizes and the rhos."""
    attrs = list(domain)
    rho = dict(zip(attrs, optimal_split(rho_one_way, [domain[a] for a in attrs])))
    fine = fine_columns(chosen, grouped)
    single = [a for a in attrs if a not in fine] if chosen else attrs
    rhos = optimal_split(rho_measure, list(sizes) + [domain[a] for a in single])
    for a, r in zip(single, rhos[len(chosen):]):
        rho[a] += r
    e_eta = 0.0
    for p, c, r in zip(chosen, sizes, rhos):
        e_eta += c / math.sqrt(math.pi * r) * (shrink(p, 1 / math.sqrt(2 * r)) if shrink else 1.0)
        for a in fine_columns([p], grouped):
            rho[a] += r * domain[a] / c
    l1 = {a: domain[a] / math.sqrt(math.pi * rho[a]) if rho[a] > 0 else math.inf for a in attrs}
    measured = {frozenset(p) for p in chosen}
    e_one = sum(l1[a] + l1[b] for a, b in itertools.combinations(attrs, 2)
                if frozenset((a, b)) not in measured)
    return FIT_NOISE_SHARE * (e_eta + e_one)


def select_after(domain: dict[str, int], oracle: MarginalOracle, budget: Budget, charge: Charge,
                 one_way: tuple, log: Log | None = None,
                 start: tuple[Clique, ...] = ()) -> Selection:
    """Steps 2-6 on 1-way marginals already measured (`auto` measures them first); with no
    `detectable` pair, the 1-way marginals measured a second time (step 2). `start`: pairs
    already selected (`auto`'s private tree, a forest): the greedy begins with them and they are
    measured with the rest (a pair of them without a released score counts as score 0)."""
    total = noisy_total(list(one_way))
    pairs = detectable(list(itertools.combinations(list(domain), 2)), domain, total, budget.score)
    if not pairs:
        singles = [(a,) for a in domain]
        rhos = dict(zip(singles, optimal_split(budget.score, [domain[a] for a in domain])))
        exact = oracle(singles) if budget.score > 0 else {}
        measured = tuple(measure_marginal(exact[c], c, rho, charge,
                                          purpose="one-way marginal (no detectable pair)")
                         for c, rho in rhos.items() if rho > 0)
        sizes = [clique_size(p, domain) for p in start]
        return Selection(method="absyn", one_way=one_way, cliques=tuple(start),
                         budgets=dict(zip(start, optimal_split(budget.measure, sizes)))
                         if start else {},
                         details={"rounds": [], "tau_cells": TAU_CELLS, "detectable_pairs": 0,
                                  "expected_noise_error": FIT_NOISE_SHARE * expected_noise_error(
                                      budget.measure, sizes)},
                         measured=measured)
    versions = coarse_versions(pairs, domain, coarse_groupings(domain, one_way))
    exact = oracle(pairs)
    values = [indif(exact[p]) for p in pairs] + [indif(coarsen(exact[p], g)) for p, g in versions]
    released, spend = gaussian_scores(np.array(values), budget.score, INDIF_SENSITIVITY)
    charge(spend, purpose="R-scores", pairs=len(values))
    released = np.where(above_noise(released, budget.score) > 0,
                        posterior_scores(released, budget.score), 0.0)
    r_bar = normalize_scores(released[:len(pairs)], pairs, domain, total)
    coarse: dict[Clique, list[Version]] = {}
    for ((a, b), groups), score in zip(versions, released[len(pairs):]):
        da, db = (domain[x] if g is None else max(g) + 1 for x, g in zip((a, b), groups))
        factor = min(da, db) / (2 * (min(da, db) - 1)) if min(da, db) > 1 else 0.0
        r = float(np.clip(score / max(total, 1.0) * factor, 0.0, 1.0))
        coarse.setdefault((a, b), []).append(
            Version(groups, r, to_count_factor(da, db, total), da * db))
    scored = set(pairs)
    unscored = [p for p in start if p not in scored]
    pairs, r_bar = pairs + unscored, np.concatenate([r_bar, np.zeros(len(unscored))])
    margins = {m.clique[0]: np.clip(m.noisy, 0.0, None) for m in one_way}
    selected, trace, groups = greedy(pairs, r_bar, domain, total, budget.measure, TAU_CELLS,
                                     log, coarse, tuple(start),
                                     None if start else budget.one_way, margins)
    sizes = [coarsened_size(p, domain, groups.get(p)) for p in selected]
    rhos = optimal_split(budget.measure, sizes) if selected else []
    return Selection(
        method="absyn",
        one_way=one_way,
        cliques=tuple(selected),
        budgets=dict(zip(selected, rhos)),
        scores={p: float(r) for p, r in zip(pairs, r_bar)},
        details={"rounds": trace, "tau_cells": TAU_CELLS, "detectable_pairs": len(pairs),
                 "coarse_levels": list(COARSE_LEVELS),
                 "coarse_scores": [[list(p), [v.cells, round(v.r_bar, 6)]]
                                   for p, vs in coarse.items() for v in vs],
                 "expected_noise_error": FIT_NOISE_SHARE * expected_noise_error(
                     budget.measure, sizes)},
        coarse=groups,
    )
