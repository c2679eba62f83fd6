"""PPSyn (partition-based private data synthesis), made differentially private.

Reference: ppsyn-partition-based.txt (Zhang, Deng, Yin), Algorithms 1-4 and Theorems 2-5, as
corrected by SEED-NOTES.md ("PPSyn -- not DP as published"). Line numbers "L<n>" below are the
lines of that text file; "Alg. k line j" is the pseudo-code line inside Algorithm k.

What the paper does, and why it is not DP
-----------------------------------------
Every round (Alg. 1 lines 5-11) scores each workload marginal w by Contr_w = ||M_w(D) - M_w(p_hat)||_1
(Alg. 2 line 2), builds a partition P_w of the *exact* marginal M_w(D) (Alg. 3 line 1 sorts its
exact counts; Alg. 3 line 8 and Alg. 4 lines 4, 12, 14 compute the reconstruction error RE from
it), derives rho_w = |P|^2 / (pi (eta Contr - RE)^2) from both (Alg. 3 lines 4, 9; Alg. 4 lines 6,
16), and picks w by the exponential mechanism on score = Contr_w / rho_w (Alg. 2 lines 4, 6).
The partition, its sort order, RE and rho_w are released without charge and Contr / rho_w has
unbounded sensitivity (it grows like Contr^3).

What this module does instead (each change against the paper's lines)
----------------------------------------------------------------------
1. 1-way marginals (Alg. 1 lines 1-2, L150): `budget.one_way` split by c^(2/3) over the d
   attributes (`measure.optimal_split`, as Alg. 1 line 1 says), one discrete-Gaussian draw per
   attribute, each charged at once. Unchanged.
2. Initial model (Alg. 1 line 3): mbi fitted to the 1-way measurements (`pgm.fit`), known total
   noisy_total = the inverse-variance weighted noisy total (`measure.noisy_total`), never |D|.
3. Workload W (L411): random 3-way marginals, each at most `WORKLOAD_MAX_CELLS` = 1e5 cells,
   `WORKLOAD_SIZE` = 64 of them (all of them when fewer qualify), drawn with the fixed seed
   `WORKLOAD_SEED` = 0 independent of every setting, so the workload depends only on the public
   domain (the paper: "generated using a fixed random seed"; it gives no size or cap, we choose
   these). Fallback: the shared `marginals` stage stores only 1- and 2-way marginals today, so when
   the oracle cannot serve the 3-way workload the workload is all pairs under the same cap, and
   `details["workload_order"]` says 2 (reported to the project with a proposed fix). Measured on
   the example table (50,000 rows, numpy oracle): the pair workload scored better than the
   3-way one (2-way TVD 0.020 vs 0.026 at epsilon 1, 0.045 vs 0.073 at epsilon 0.2; 3-way TVD
   0.052 vs 0.062, 0.086 vs 0.130) but took longer (about 3 min vs 30 s at epsilon 1: more
   rounds, and the chained pairs grow a larger junction tree).
4. Rounds (Alg. 1 lines 4-11): T = 2d by default (`default_rounds`; the paper gives no default,
   SEED-NOTES fixes 2d). The selection budget is spent as rho_sel = budget.score / T per round
   (Alg. 1 line 4's rho_exp); score and measurement budget form one pool and the loop runs while
   it lasts (Alg. 1 line 5: `while rho_used < rho`). Two public rules keep it bounded and make it
   end exactly on the budget: a round's measurement never gets less than rho_floor =
   budget.measure / T (so at most T rounds run, each spending >= (score + measure) / T), and a
   round whose leftover could not pay for another round of rho_sel + rho_floor takes the whole
   leftover ("cap the last round at what is left"; SEED-NOTES). A larger rho than the paper's
   rho_w only lowers the noise, so the eta bound of step 8 still holds.
5. Quality (Alg. 2 lines 2, 4): q_w = ||M_w(D) - p_hat_w||_1, with p_hat_w the current model's
   marginal (public, post-processing). Under add/remove-one-row neighbours M_w changes by 1 in one
   cell and p_hat_w not at all, so every q_w moves by at most 1, up or down (sensitivity 1,
   non-monotonic). The paper's score Contr / rho_w is replaced by Contr itself: the
   per-unit-budget idea enters through rho_w (step 7), which decides how much of the pool the
   chosen marginal gets, not which one is chosen.
6. Selection (Alg. 2 line 6): OpenDP's `make_noisy_max` (exponential mechanism, Gumbel noise,
   zCDP map, non-monotonic L-inf d_in = 1) with rho_exp = `EM_SHARE` (1/2) of rho_sel. Candidates
   whose addition would grow the junction tree beyond `settings.max_model_mb` are left out (a
   public rule on the domain and the cliques measured so far; AIM does the same; the paper does
   not bound the model). If none fits, the 1-way marginals are the candidates.
7. rho_w from noisy values only (Alg. 2 line 3, Alg. 3 lines 4/9, Alg. 4 lines 6/16): the chosen
   marginal's Contr is released once more with the Gaussian mechanism (sensitivity 1) at the other
   half of rho_sel, and rho_w uses the one-sigma lower bound C_hat = noisy Contr - sigma_C (so that
   the bound of step 8 holds against the true Contr about 84% of the time rather than 50%). If
   C_hat <= 0 the marginal gets rho_floor (or the last round's leftover). The noisy Contr and
   C_hat are published in `details["rounds"]`; the exact Contr never is.
8. Partitions from p_hat (Alg. 3 lines 1, 8; Alg. 4 lines 4, 12, 14): every count in Algorithms
   3 and 4 is read from p_hat_w, not from M_w(D): the sort order, the merge errors, the split
   points and RE = ||p_hat_w - U_P(p_hat_w)||_1 (U_P: uniform reconstruction within each
   partition cell, Def. 9). The partition is therefore public and free. By construction the
   returned partition satisfies RE + |P| / sqrt(pi rho_w) <= eta C_hat (Theorems 4-5 as
   SEED-NOTES states them: the expected noise, not the realized one), with RE measured on p_hat;
   the RE of the true marginal is private and not bounded by this rule. eta = 0.7 (L474).
   - Algorithm 3 (one-dimensional marginals; `merge_partition`): cells sorted by p_hat, adjacent
     intervals merged greedily by least merge error, as published. Instead of stopping at the
     first increase of rho (Alg. 3 lines 10-11) we run the merges to one interval and take the
     global minimum of rho_t over the sequence (the "skill to improve efficiency", L346, computes
     that sequence anyway); it is never larger than the first local minimum.
   - Algorithm 4 (multi-dimensional marginals; `split_partition`, the default
     `MULTI_DIM_PARTITION`): start from the whole domain,
     split the box of largest RE (L305) in dimension t mod d (Alg. 4 line 11; the next dimension
     if the box is one cell wide there) at the point of largest RE reduction (line 12). Instead of
     breaking at the first increase (lines 17-18) we continue while a better rho is still
     possible (rho_t >= |P_t|^2 / (pi (eta C)^2) grows with |P_t|, so we stop once that lower
     bound reaches the best rho seen) and take the global minimum. Algorithm 3 on the flattened
     cells (`MULTI_DIM_PARTITION = "merge"`) needs far less rho for the same bound, but its
     groups of cells that p_hat already deems alike tell the model little: 2-way TVD 0.050 instead
     of 0.027 on the example table (50,000 rows, epsilon 1), so boxes stay the default.
   When the round's rho_m differs from rho_w (step 4's floor or cap, or C_hat <= 0), the
   partition is re-chosen from the same sequence to minimize the expected error
   RE + |P| / sqrt(pi rho_m) at the rho actually spent (at rho_m = rho_w this is the same
   partition: see `choose`).
9. Measurement (Alg. 1 lines 7-8): the partition-cell (interval) counts sum_{i in I} M_w(D)[i]
   get discrete Gaussian noise at rho_m; each row lies in exactly one cell, so the L2 sensitivity
   is 1. Est(m, P~) is the paper's uniform reconstruction (Def. 9): each cell of interval I gets
   noisy(I) / |I|, giving a dense `Measurement` that `pgm.fit` and the `measurements` stage take
   as is. This is an approximation of the aggregated linear query: mbi's loss on the dense array
   splits, per interval, into (s_I - noisy_I)^2 / (|I| sigma_m^2) (the information the mechanism
   released) plus a penalty on non-uniformity inside I (the paper's uniformity assumption, not
   data). The measurement's sigma is sigma_m = sigma / sqrt(min_I |I|) with sigma = 1/sqrt(2
   rho_m) the mechanism's scale: the largest per-interval scale at which the dense array carries
   exactly the interval sums' information, so no interval is over-trusted and intervals larger
   than the smallest are under-weighted by min|I| / |I|. `Measurement.rho` is the mechanism's
   rho_m; a measurement without merged cells (min |I| = 1) has sigma_m = sigma.
   (An exact alternative, an mbi `LinearMeasurement` with a query that sums the cells of each
   interval, needs a new measurement type in `measure.py` / `pgm.fit`.)
10. Refit (Alg. 1 line 9): `pgm.fit(..., warm_start=previous model)` with `ROUND_ITERATIONS` =
   1000 mirror-descent iterations per round (the paper refits to convergence and gives no number;
   the final model is fitted in the `model` stage with `model.iterations`). Measured on the
   example table (50,000 rows, epsilon 1, 3-way workload): with 100 iterations the model does not
   absorb a measurement before the next round, the same marginal wins 11 rounds in a row and
   2-way TVD is 0.037; with 1000 it is 0.026-0.028 in 9-11 rounds and less time (30-50 s),
   since each round's cost is mostly mbi's JAX compile for the new clique set, not iterations.
   p_hat_w of every candidate comes from `model_marginals` (numpy variable elimination on the
   model's potentials) rather than mbi's `project`, which compiles anew for every clique.
11. Output: every marginal is measured here (`measures_in_selection`), so `cliques` / `budgets`
   are empty and `measured` holds the reconstructed measurements; `details` has the workload, the
   per-round public trace and each measured partition (boxes or groups of cell indices).
"""

import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np
from ..opendp_api import dp

from ..config import SelectionSettings
from ..measure import Measurement, clique_size, measure_marginal, optimal_split, noisy_total
from ..generate.pgm import model_marginals
from ..privacy import exponential_mechanism, gaussian_scores
from . import Budget, Charge, Clique, MarginalOracle, Selection

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
    """T = 2d (SEED-NOTES; the paper has no default)."""
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
    global minimum (module docstring, step 8)."""
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
    described in `choose` and returns the global minimum (module docstring, step 8)."""
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


def _public(x: float) -> float | None:
    """A float for the JSON trace (inf, e.g. a required rho without contribution, as None)."""
    return float(x) if math.isfinite(x) else None


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, rounds: int | None = None,
           eta: float = ETA) -> Selection:
    """PPSyn's Algorithm 1 as corrected in the module docstring. `rounds` is T (default 2d)."""
    from mbi import Domain
    from mbi.junction_tree import hypothetical_model_size

    from ..generate import pgm

    if not (budget.one_way > 0 and budget.score > 0 and budget.measure > 0):
        raise ValueError(f"ppsyn needs rho > 0 for 1-way marginals, selection and measurement, "
                         f"got {budget}")
    attrs = list(domain)
    T = rounds or default_rounds(len(attrs))
    one_way, exact_one = measure_one_way(domain, oracle, budget.one_way, charge)
    total = noisy_total(list(one_way))
    model = pgm.fit(domain, list(one_way), total, ROUND_ITERATIONS)  # Alg. 1 line 3

    work, exact, order, fallback = _exact_workload(domain, oracle)
    exact.update(exact_one)
    mbi_domain = Domain(attrs, [domain[a] for a in attrs])
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
        return hypothetical_model_size(mbi_domain, cliques) <= settings.max_model_mb

    while remaining > 1e-12 * pool:                 # Alg. 1 line 5
        r = len(trace) + 1
        candidates = [w for w in work if fits(w)] or list(base)
        projections = model_marginals(model, candidates)
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
            model = pgm.fit(domain, list(one_way) + measured, total, ROUND_ITERATIONS,
                            warm_start=model)
        trace.append({
            "round": r, "clique": list(chosen), "candidates": len(candidates),
            "noisy_contribution": round(contr_noisy, 3), "contribution_lower": round(contr_hat, 3),
            "algorithm": part.algorithm, "partition_cells": part.size,
            "marginal_cells": int(reference.size), "min_interval": int(part.cell_counts().min()),
            "re_model": round(part.re, 3), "rho_required": _public(rho_required),
            "rho_measure": cells.rho, "rho_rule": rule, "rho_selection": used,
            "sigma": cells.sigma, "sigma_dense": measurement.sigma,
        })  # no wall time: a round's duration is private work (DESIGN.md section 4)
        partitions.append({"clique": list(chosen), **part.describe()})

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
