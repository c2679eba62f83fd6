"""PPSyn (partition-based private data synthesis), made differentially private.

Implements "Partition-based differentially private synthetic data generation" (Zhang, Deng, Yin),
Algorithms 1-4 and Theorems 2-5, which is not DP as published; how we make it DP, and the steps
as implemented: docs/decisions/0015-ppsyn-made-dp.md.

Guarantee: the data is read only by OpenDP mechanisms, each charged with its privacy map's answer
right after its draw: the 1-way marginals, then per round an exponential mechanism, a Gaussian
release of one contribution and a discrete Gaussian measurement. Together they spend
budget.one_way + budget.score + budget.measure (the last round takes what is left). Everything
else (partitions, rho_w, the trace) is computed from published values."""

import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np
from ..opendp_api import dp

from ..config import SelectionSettings
from ..measure import Measurement, clique_size, measure_marginal, optimal_split, noisy_total
from ..generate import mirror, pgm
from ..privacy import exponential_mechanism, gaussian_scores
from . import Budget, Charge, Clique, Log, MarginalOracle, Selection, aim_fit, round_line

dp.enable_features("contrib")

ETA = 0.7                     # L474: "eta close to 0.7"
WORKLOAD_SEED = 0             # fixed, independent of settings (L411)
WORKLOAD_ORDER = 3            # 3-way marginals (L411)
WORKLOAD_SIZE = 64            # random workload marginals (the paper gives no number)
WORKLOAD_MAX_CELLS = 100_000  # size cap of a workload marginal (the paper gives none)
EM_SHARE = 0.5                # of a round's selection rho: exponential mechanism; rest: noisy Contr
ROUND_ITERATIONS = 1000       # mirror-descent iterations of each refit between rounds
QUALITY_SENSITIVITY = 1.0     # ||M_w(D) - p_hat_w||_1 under add/remove-one-row
MULTI_DIM_PARTITION = "split"  # multi-dimensional marginals: Algorithm 4 (see `partition`)


def default_rounds(d: int) -> int:
    """T = 2d (ours: the paper has no default)."""
    return max(2 * d, 1)


# ---------------------------------------------------------------------------------------------
# Partitions (Algorithms 3 and 4), built from a reference marginal: p_hat in `select`
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Partition:
    """A partition of a marginal's cells into `size` groups (labels 0..size-1, shaped like the
    marginal). `re` is the reconstruction error of the reference it was built from,
    ||ref - U_P(ref)||_1; `rho` the paper's required budget |P|^2 / (pi (eta contr - re)^2)
    (inf when re >= eta contr)."""

    labels: np.ndarray
    size: int
    re: float
    rho: float
    algorithm: str  # "merge" (Algorithm 3) | "split" (Algorithm 4)
    boxes: tuple = ()  # split: ((lo, hi) per dimension) per label, for the public trace

    def cell_counts(self) -> np.ndarray:
        """Number of marginal cells in each partition cell."""
        return np.bincount(self.labels.ravel(), minlength=self.size)

    def describe(self) -> dict:
        if self.algorithm == "split":
            return {"algorithm": "split", "boxes": [[[int(lo), int(hi)] for lo, hi in box]
                                                    for box in self.boxes]}
        groups = [[] for _ in range(self.size)]
        for i, g in enumerate(self.labels.ravel().tolist()):
            groups[g].append(i)
        return {"algorithm": "merge", "groups": groups}


def required_rho(size: int, re: float, contr: float, eta: float = ETA) -> float:
    """Alg. 3 lines 4/9, Alg. 4 lines 6/16: rho = |P|^2 / (pi (eta Contr - RE)^2)."""
    slack = eta * contr - re
    if not slack > 0:
        return math.inf
    return float(size * size / (math.pi * slack * slack))


def expected_noise_error(size: int, rho: float) -> float:
    """Theorem 3 at sigma = 1/sqrt(2 rho): sqrt(2/pi) |P| sigma = |P| / sqrt(pi rho)."""
    return size / math.sqrt(math.pi * rho)


def interval_counts(marginal: np.ndarray, labels: np.ndarray, size: int) -> np.ndarray:
    """q(I) = sum of the marginal's cells in each partition cell (Def. 9)."""
    return np.bincount(labels.ravel(), weights=np.asarray(marginal, dtype=np.float64).ravel(),
                       minlength=size)


def uniform_reconstruction(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Est(m, P~) (Def. 9): each cell gets its partition cell's value divided by its size."""
    sizes = np.bincount(labels.ravel(), minlength=len(values))
    return (np.asarray(values, dtype=np.float64) / sizes)[labels]


def reconstruction_error(marginal: np.ndarray, labels: np.ndarray) -> float:
    """RE = ||q - U_P(q)||_1 (Theorem 3) of any marginal q under the partition `labels`."""
    size = int(labels.max()) + 1
    return float(np.abs(np.asarray(marginal, dtype=np.float64)
                        - uniform_reconstruction(interval_counts(marginal, labels, size), labels)).sum())


def _l1_dev(x: np.ndarray) -> float:
    return float(np.abs(x - x.mean()).sum()) if x.size else 0.0


def choose(steps, contr: float, eta: float, rho: float | None, increasing: bool):
    """Pick a step (size, re, key) from a partition sequence.

    rho None (the paper): the least required rho; rho given (a floored or capped round): the least
    expected error re + size / sqrt(pi rho). At rho = rho_w of the first rule both pick the same
    partition: for any P, required_rho(P) >= rho_w means re_P + |P| / sqrt(pi rho_w) >= eta contr,
    with equality at the minimizer. For a sequence of increasing size the scan stops once no later
    step can win (re >= 0 bounds both objectives from below)."""
    best, best_value = None, math.inf
    for size, re, key in steps:
        if rho is None:
            value = required_rho(size, re, contr, eta)
            bound = size * size / (math.pi * (eta * contr) ** 2) if contr > 0 else math.inf
        else:
            value = re + expected_noise_error(size, rho)
            bound = expected_noise_error(size, rho)
        if best is None or value < best_value:
            best, best_value = (size, re, key), value
        if increasing and bound >= best_value:
            break
    return best


def merge_partition(reference: np.ndarray, contr: float, eta: float = ETA,
                    rho: float | None = None) -> Partition:
    """Algorithm 3 (one-dimensional marginal partition) on `reference` (flattened if not 1-D).

    Line 1 sorts the cells by their reference count; line 2 starts from singletons; lines 6-7 merge
    the two adjacent intervals (adjacent in that order) whose merge adds the least reconstruction
    error; lines 8-9 track RE and rho_t. We run the merges down to one interval and take the
    global minimum (0015-ppsyn-made-dp.md, step 8)."""
    values = np.asarray(reference, dtype=np.float64)
    flat = values.ravel()
    n = flat.size
    order = np.argsort(flat, kind="stable")
    v = flat[order]
    prefix = np.concatenate([[0.0], np.cumsum(v)])

    def dev(a: int, b: int) -> float:  # sum |v - mean| over sorted positions [a, b)
        k = b - a
        if k <= 1:
            return 0.0
        m = (prefix[b] - prefix[a]) / k
        j = min(max(int(np.searchsorted(v, m, side="left")), a), b)
        out = (m * (j - a) - (prefix[j] - prefix[a])) + ((prefix[b] - prefix[j]) - m * (b - j))
        return max(out, 0.0)

    end = list(range(1, n + 1))   # end[a]: end of the interval starting at a (if alive)
    prev = list(range(-1, n - 1))
    alive = [True] * n
    within = [0.0] * n            # RE of the interval starting at a
    heap = [(dev(a, a + 2), a, a + 1, a + 2) for a in range(n - 1)]
    heapq.heapify(heap)
    total_re = 0.0
    history = [(n, 0.0)]          # (|P_t|, RE_t), t = number of merges
    merges = []                   # the start b of the right interval of each merge
    while heap:
        _, a, b, c = heapq.heappop(heap)
        if not (alive[a] and alive[b] and end[a] == b and end[b] == c):
            continue
        merged = dev(a, c)
        total_re += merged - within[a] - within[b]
        within[a], alive[b], end[a] = merged, False, c
        if c < n:
            prev[c] = a
            heapq.heappush(heap, (dev(a, end[c]) - merged - within[c], a, c, end[c]))
        if prev[a] >= 0:
            p = prev[a]
            heapq.heappush(heap, (dev(p, c) - within[p] - merged, p, a, c))
        merges.append(b)
        history.append((n - len(merges), max(total_re, 0.0)))
    size, re, t = choose(((s, r, i) for i, (s, r) in enumerate(history)), contr, eta, rho,
                         increasing=False)
    starts = np.ones(n, dtype=bool)
    starts[np.asarray(merges[:t], dtype=np.int64)] = False
    labels = np.empty(n, dtype=np.int64)
    labels[order] = np.cumsum(starts) - 1
    labels = labels.reshape(values.shape)
    re = reconstruction_error(values, labels)  # exact, not the running sum of merge errors
    return Partition(labels, int(size), re, required_rho(size, re, contr, eta), "merge")


def _best_split(block: np.ndarray, axis: int) -> tuple[int, float]:
    """Split point k (1 <= k < extent) along `axis` minimizing RE(left) + RE(right)."""
    x = np.moveaxis(block, axis, 0).reshape(block.shape[axis], -1)
    best_k, best = 1, math.inf
    for k in range(1, x.shape[0]):
        value = _l1_dev(x[:k]) + _l1_dev(x[k:])
        if value < best:
            best_k, best = k, value
    return best_k, best


def _split_steps(values: np.ndarray, record: list):
    """Algorithm 4's sequence: yields (|P_t|, RE_t, t); `record` gets each split
    (box index split, its new right box) so that any step can be replayed."""
    d = values.ndim
    boxes = [tuple((0, s) for s in values.shape)]
    res = [_l1_dev(values)]
    heap = [(-res[0], 0)]
    total = res[0]
    t = 0
    yield 1, total, 0
    while heap:
        neg, i = heapq.heappop(heap)
        if -neg <= 0:
            break  # every box is constant: further splits only add noise
        box = boxes[i]
        dims = [(t + j) % d for j in range(d)]
        axis = next((a for a in dims if box[a][1] - box[a][0] > 1), None)
        if axis is None:
            continue
        block = values[tuple(slice(lo, hi) for lo, hi in box)]
        k, after = _best_split(block, axis)
        lo, hi = box[axis]
        left = tuple((lo, lo + k) if a == axis else box[a] for a in range(d))
        right = tuple((lo + k, hi) if a == axis else box[a] for a in range(d))
        left_re = _l1_dev(values[tuple(slice(a, b) for a, b in left)])
        right_re = after - left_re
        total += after - res[i]
        boxes[i], res[i] = left, left_re
        boxes.append(right)
        res.append(right_re)
        record.append((i, right))
        heapq.heappush(heap, (-left_re, i))
        heapq.heappush(heap, (-right_re, len(boxes) - 1))
        t += 1
        yield len(boxes), max(total, 0.0), t


def split_partition(reference: np.ndarray, contr: float, eta: float = ETA,
                    rho: float | None = None) -> Partition:
    """Algorithm 4 (multi-dimensional marginal partition) on `reference`: line 1 starts from the
    whole domain; each step splits the box of largest RE (L305) in dimension t mod d (line 11) at
    the point of largest RE reduction (line 12); lines 14-20 track RE and rho_t. The scan stops as
    described in `choose` and returns the global minimum (0015-ppsyn-made-dp.md, step 8)."""
    values = np.asarray(reference, dtype=np.float64)
    record: list = []
    size, re, t = choose(_split_steps(values, record), contr, eta, rho, increasing=True)
    boxes = [tuple((0, s) for s in values.shape)]
    for i, right in record[:t]:
        box = boxes[i]
        axis = next(a for a in range(values.ndim) if right[a] != box[a])
        boxes[i] = tuple((box[a][0], right[a][0]) if a == axis else box[a]
                         for a in range(values.ndim))
        boxes.append(right)
    labels = np.empty(values.shape, dtype=np.int64)
    for label, box in enumerate(boxes):
        labels[tuple(slice(lo, hi) for lo, hi in box)] = label
    re = reconstruction_error(values, labels)  # exact, not the running sum of split gains
    return Partition(labels, int(size), re, required_rho(size, re, contr, eta), "split",
                     tuple(boxes))


def partition(reference: np.ndarray, contr: float, eta: float = ETA, rho: float | None = None,
              multi_dim: str | None = None) -> Partition:
    """Algorithm 3 for one-dimensional marginals; for the others `multi_dim` (default
    `MULTI_DIM_PARTITION`): "split" is Algorithm 4, "merge" is Algorithm 3 on the flattened cells
    (groups of cells with similar reference counts, wherever they lie)."""
    reference = np.asarray(reference, dtype=np.float64)
    if reference.ndim <= 1:
        return merge_partition(reference.reshape(-1), contr, eta, rho)
    multi_dim = multi_dim or MULTI_DIM_PARTITION
    if multi_dim == "split":
        return split_partition(reference, contr, eta, rho)
    if multi_dim == "merge":
        return merge_partition(reference, contr, eta, rho)
    raise ValueError(f"multi_dim must be 'split' or 'merge', got {multi_dim!r}")


# ---------------------------------------------------------------------------------------------
# Mechanisms
# ---------------------------------------------------------------------------------------------

def measure_one_way(domain: dict[str, int], oracle: MarginalOracle, rho: float,
                    charge: Charge) -> tuple[tuple[Measurement, ...], dict[Clique, np.ndarray]]:
    """Alg. 1 line 1: 1-way marginals with rho_i = rho c_i^(2/3) / sum_j c_j^(2/3)."""
    attrs = list(domain)
    exact = oracle([(a,) for a in attrs])
    rhos = optimal_split(rho, [domain[a] for a in attrs])
    return tuple(measure_marginal(exact[(a,)], (a,), rho_a, charge, purpose="one-way marginal")
                 for a, rho_a in zip(attrs, rhos)), exact


def partition_measurement(part: Partition, cells: Measurement) -> Measurement:
    """The noisy partition-cell counts `cells` (one value per cell of `part`) as a dense
    measurement of their clique: uniform reconstruction, sigma / sqrt(min |I|) (module
    docstring, measurement)."""
    dense = uniform_reconstruction(cells.noisy, part.labels)
    sigma = cells.sigma / math.sqrt(int(part.cell_counts().min()))
    return Measurement(tuple(cells.clique), dense, sigma, cells.rho)


# ---------------------------------------------------------------------------------------------
# Workload and the selection loop (Algorithms 1 and 2)
# ---------------------------------------------------------------------------------------------

def workload(domain: dict[str, int], order: int = WORKLOAD_ORDER, size: int = WORKLOAD_SIZE,
             max_cells: int = WORKLOAD_MAX_CELLS, seed: int = WORKLOAD_SEED) -> list[Clique]:
    """Random `order`-way marginals of at most `max_cells` cells, `size` of them (all when fewer
    qualify), drawn with a fixed seed: a function of the public domain only."""
    attrs = list(domain)
    fits = [c for c in itertools.combinations(attrs, order) if clique_size(c, domain) <= max_cells]
    if len(fits) <= size:
        return fits
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(fits), size=size, replace=False).tolist())
    return [fits[i] for i in picked]


def needed_cliques(domain: dict[str, int], settings: SelectionSettings | None = None) -> list[Clique]:
    """The workload (`_exact_workload`: 3-way, or 2-way when no 3-way marginal qualifies), which
    the `marginals` stage computes for this method instead of every pair."""
    cliques = workload(domain, WORKLOAD_ORDER) if len(domain) >= WORKLOAD_ORDER else []
    return cliques or (workload(domain, 2) if len(domain) >= 2 else [])


def _exact_workload(domain: dict[str, int], oracle: MarginalOracle
                    ) -> tuple[list[Clique], dict[Clique, np.ndarray], int, str]:
    """The workload, its exact marginals, its order and why it fell back to pairs (if it did)."""
    if len(domain) < 2:
        return [], {}, 0, "fewer than two attributes: the 1-way marginals are the candidates"
    fallback = "fewer than three attributes"
    if len(domain) >= WORKLOAD_ORDER:
        cliques = workload(domain, WORKLOAD_ORDER)
        fallback = f"no {WORKLOAD_ORDER}-way marginal has at most {WORKLOAD_MAX_CELLS} cells"
        if cliques:
            try:
                return cliques, oracle(cliques), WORKLOAD_ORDER, ""
            except KeyError:
                fallback = (f"the marginal oracle serves no {WORKLOAD_ORDER}-way marginals (the "
                            "marginals stage stores 1- and 2-way ones): 2-way workload")
    cliques = workload(domain, 2)
    return cliques, (oracle(cliques) if cliques else {}), 2, fallback


def refit(domain: dict[str, int], measurements: list[Measurement], total: float, warm=None,
          estimator: str | None = None):
    """The model fitted to `measurements` and a function giving its marginals (times the total)
    on a list of cliques. `estimator` ("numpy" or "mbi"; default: `pgm.estimator`'s choice, the
    pgm engine's, 0015-ppsyn-made-dp.md, step 8) fits it; it is warm-started from `warm` (a model
    this function returned) when `warm` came from the same estimator, else cold."""
    which = estimator or pgm.estimator(domain, measurements, None)
    numpy_warm = isinstance(warm, mirror.FitState)
    if which == "mbi":
        model = pgm.fit(domain, measurements, total, ROUND_ITERATIONS,
                        warm_start=None if numpy_warm else warm)
        return model, lambda cliques: pgm.model_marginals(model, cliques)
    state, calibrated = mirror.fit(domain, measurements, total, mirror.DEFAULT_ITERATIONS,
                                   warm=warm if numpy_warm else None)
    return state, lambda cliques: {tuple(c): calibrated.project(c) for c in cliques}


def _public(x: float) -> float | None:
    """A float for the JSON trace (inf, e.g. a required rho without contribution, as None)."""
    return float(x) if math.isfinite(x) else None


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, rounds: int | None = None,
           eta: float = ETA, log: Log | None = None) -> Selection:
    """PPSyn's Algorithm 1 as corrected in the 0015-ppsyn-made-dp.md. `rounds` is T (default 2d).
    `log`, if given, gets each round's `round_line` when the round is done."""
    if not (budget.one_way > 0 and budget.score > 0 and budget.measure > 0):
        raise ValueError(f"ppsyn needs rho > 0 for 1-way marginals, selection and measurement, "
                         f"got {budget}")
    attrs = list(domain)
    T = rounds or default_rounds(len(attrs))
    one_way, exact_one = measure_one_way(domain, oracle, budget.one_way, charge)
    total = noisy_total(list(one_way))
    model, marginals = refit(domain, list(one_way), total)  # Alg. 1 line 3

    work, exact, order, fallback = _exact_workload(domain, oracle)
    exact.update(exact_one)
    base = [(a,) for a in attrs]

    rho_sel = budget.score / T                      # Alg. 1 line 4
    rho_exp, rho_contr = EM_SHARE * rho_sel, (1 - EM_SHARE) * rho_sel
    rho_floor = budget.measure / T
    pool = budget.score + budget.measure
    remaining = pool
    measured: list[Measurement] = []
    trace, partitions, scores = [], [], {}

    def fits(clique: Clique) -> bool:
        cliques = base + [m.clique for m in measured] + [clique]
        return aim_fit.model_mb(domain, cliques) <= settings.max_model_mb

    while remaining > 1e-12 * pool:                 # Alg. 1 line 5
        r = len(trace) + 1
        candidates = [w for w in work if fits(w)] or list(base)
        projections = marginals(candidates)
        quality = np.array([np.abs(exact[w] - projections[w]).sum() for w in candidates])
        index, spend = exponential_mechanism(quality, rho_exp, QUALITY_SENSITIVITY)  # Alg. 2 line 6
        charge(spend, purpose="ppsyn selection (exponential mechanism)", round=r,
               candidates=len(candidates))
        used = spend.rho
        chosen = candidates[index]
        noisy_c, spend = gaussian_scores(np.array([quality[index]]), rho_contr, QUALITY_SENSITIVITY)
        charge(spend, purpose="ppsyn contribution of the chosen marginal", clique=list(chosen),
               round=r)
        used += spend.rho
        contr_noisy = float(noisy_c[0])
        contr_hat = contr_noisy - spend.scale       # one-sigma lower bound (step 7)
        reference = projections[chosen]
        part = partition(reference, max(contr_hat, 0.0), eta)  # Alg. 2 line 3
        rho_required = part.rho

        available = remaining - used
        rho_m = max(rho_required, rho_floor)
        rule = ("no contribution" if not contr_hat > 0 else
                "paper" if rho_required >= rho_floor else "floor")
        if available - rho_m < rho_sel + rho_floor:  # no full round would be left: take it all
            rho_m, rule = available, "last round"
        if rho_m != rho_required:  # re-choose the partition for the rho actually spent
            part = partition(reference, max(contr_hat, 0.0), eta, rho=rho_m)
        sums = interval_counts(exact[chosen], part.labels, part.size).round().astype(np.int64)
        cells = measure_marginal(sums, chosen, rho_m, charge,  # Alg. 1 line 7
                                 purpose="ppsyn partition measurement", round=r,
                                 partition_cells=part.size)
        remaining -= used + cells.rho                # Alg. 1 line 10
        measurement = partition_measurement(part, cells)  # Alg. 1 line 8
        measured.append(measurement)
        scores[tuple(chosen)] = contr_noisy
        if remaining > 1e-12 * pool:                 # Alg. 1 line 9 (not after the last round)
            model, marginals = refit(domain, list(one_way) + measured, total, warm=model)
        trace.append({
            "round": r, "clique": list(chosen), "candidates": len(candidates),
            "noisy_contribution": round(contr_noisy, 3), "contribution_lower": round(contr_hat, 3),
            "algorithm": part.algorithm, "partition_cells": part.size,
            "marginal_cells": int(reference.size), "min_interval": int(part.cell_counts().min()),
            "re_model": round(part.re, 3), "rho_required": _public(rho_required),
            "rho_measure": cells.rho, "rho_rule": rule, "rho_selection": used,
            "sigma": cells.sigma, "sigma_dense": measurement.sigma,
        })  # no wall time: a round's duration is private work
        # (docs/decisions/0003-privacy-perimeter.md)
        partitions.append({"clique": list(chosen), **part.describe()})
        if log is not None:
            log(round_line("ppsyn", r, chosen, used + cells.rho))

    return Selection(
        method="ppsyn",
        one_way=one_way,
        cliques=(),
        budgets={},
        scores=scores,
        details={"rounds": trace, "T": T, "eta": eta, "workload": [list(c) for c in work],
                 "workload_order": order, "workload_fallback": fallback,
                 "partitions": partitions, "rho_floor": rho_floor, "rho_selection_round": rho_sel,
                 "round_iterations": ROUND_ITERATIONS},
        measured=tuple(measured),
    )
