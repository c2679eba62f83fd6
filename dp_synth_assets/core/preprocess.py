"""DP preprocessing: the domain of each column, learned with DP where it is not declared.

Benchmark paper (benchmark-dp-tabular-synthesis.txt) section 5 and appendix B, PrivSyn's
filter-and-combine (privsyn-gum-excerpt.txt), corrected by SEED-NOTES.md. Per column, the
mechanisms (`mechanisms`) are:

- `discover` (categorical without `categories`): the value counts (one GROUP BY in DuckDB) go
  through OpenDP's thresholded Gaussian histogram; only values whose noisy count clears the
  threshold are released (approximate zCDP: its map gives (rho, delta), both charged). The
  threshold is the smallest integer whose delta fits the column's delta share.
- `rare` (categorical with declared `categories` and a `rare` rule): noisy counts of the declared
  categories with the Gaussian mechanism.
  The rare rule then runs on the noisy counts (of `discover` or `rare`; post-processing):
  `merge` is benchmark Algorithm 1: a category whose noisy count is below max(theta * n_hat,
  3 sigma), n_hat = sum of the noisy counts, joins the rare code. `filter_combine` is PrivSyn's:
  categories below 3 sigma are filtered; if their noisy total reaches 3 sigma they form the rare
  code, otherwise they go to the `other` code. The rare code decodes to a member drawn in
  proportion to the members' noisy counts.
- `bounds` (numeric / datetime without `bounds`): a Gaussian-noised histogram over public
  buckets (0 and +-2^k for numbers, calendar years for dates), counted by DuckDB; the bounds are
  the outer edges of the outermost buckets whose noisy count clears a threshold that an empty
  bucket passes with probability below 1e-6 in total (like Google's ApproxBounds). We first
  tried two exponential-mechanism quantiles over a fine grid: at the 1e-4 rho a column gets at
  epsilon 1, the many far-away candidates (scores only alpha n below the best) won, and the
  bounds were off by orders of magnitude.
- `privtree` (`binning: privtree`): PrivTree (Zhang, Xiao, Xie 2016; benchmark Algorithm 2)
  with fanout 2 over [low, high]: a node's biased count b = max(c - depth * delta, theta - delta)
  gets Laplace(lambda) noise (OpenDP); it splits when the noisy value exceeds theta. With
  lambda = (2 beta - 1) / ((beta - 1) epsilon) and delta = lambda ln beta the whole tree is
  epsilon-DP (Zhang et al. Thm 1), charged epsilon^2 / 2 in rho (Bun-Steinke; SEED-NOTES
  corrects the appendix). We use theta = 0 (Tao et al.'s choice; the benchmark gives none) and
  two public stopping rules: a node is not split beyond depth 16, and an integer node narrower
  than 2 values is not split. Node counts come from one DuckDB histogram of 2^16 cells.

Budget: the preprocessing rho is split evenly across all mechanism invocations of the run;
`discover` invocations share the run's extra delta evenly. Every invocation calls `charge` with
the spend its privacy map reports, right after drawing the noise.
"""

import math
from dataclasses import dataclass

import duckdb
import numpy as np
import opendp.prelude as dp

from .config import ColumnSpec
from .domain import Derived, integer_valued, is_null_condition, value_expression
from .privacy import Spend, gaussian_counts, gaussian_scale
from .sql import ident, sql

dp.enable_features("contrib")

PRIVTREE_FANOUT = 2
PRIVTREE_THETA = 0.0
PRIVTREE_MAX_DEPTH = 16


@dataclass(frozen=True)
class Task:
    column: str
    mechanism: str  # discover | rare | bounds | privtree


def mechanisms(name: str, spec: ColumnSpec) -> list[Task]:
    """The DP mechanisms preprocessing runs for one column (empty: the domain is declared)."""
    tasks = []
    if spec.kind == "categorical":
        if spec.categories is None:
            tasks.append(Task(name, "discover"))
        elif spec.rare_rule != "none":
            tasks.append(Task(name, "rare"))
    elif spec.kind in ("integer", "float", "datetime"):
        if spec.bounds is None:
            tasks.append(Task(name, "bounds"))
        if spec.binning_rule == "privtree":
            tasks.append(Task(name, "privtree"))
    return tasks


def all_tasks(columns: dict[str, ColumnSpec]) -> list[Task]:
    return [t for name, spec in columns.items() for t in mechanisms(name, spec)]


def preprocess(con: duckdb.DuckDBPyConnection, relation: str, columns: dict[str, ColumnSpec],
               source_types: dict[str, str], rho: float, delta_extra: float,
               charge) -> dict[str, Derived]:
    """Run every column's mechanisms; returns what each column's encoding needs (public)."""
    tasks = all_tasks(columns)
    if not tasks:
        return {}
    if rho <= 0:
        raise ValueError("preprocessing needs a positive rho")
    rho_each = rho / len(tasks)
    discovers = sum(t.mechanism == "discover" for t in tasks)
    delta_each = delta_extra / discovers if discovers else 0.0
    derived: dict[str, Derived] = {}
    for name, spec in columns.items():
        found = {t.mechanism for t in mechanisms(name, spec)}
        if not found:
            continue
        src_type = source_types[name]
        if spec.kind == "categorical":
            if "discover" in found:
                counts, sigma = discover_categories(con, relation, name, spec, rho_each, delta_each,
                                                    charge)
            else:
                counts, sigma = measure_declared_categories(con, relation, name, spec, rho_each,
                                                            charge)
            derived[name] = apply_rare_rule(counts, sigma, spec)
            continue
        bounds = None
        if "bounds" in found:
            bounds = dp_bounds(con, relation, name, spec, src_type, rho_each, charge)
        low, high = bounds if bounds is not None else spec.numeric_bounds()
        edges = None
        if "privtree" in found:
            edges = privtree_edges(con, relation, name, spec, src_type, low, high, rho_each, charge)
        derived[name] = Derived(bounds=bounds, edges=edges)
    return derived


# ------------------------------------------------------------------------------ categories

def _value_counts(con, relation: str, name: str, spec: ColumnSpec) -> dict[str, int]:
    rows = con.execute(sql("value_counts", column=ident(name), source=relation,
                           is_null=is_null_condition(name, spec.missing))).fetchall()
    return {str(v): int(n) for v, n in rows}


def discovery_threshold(scale: float, delta: float) -> int:
    """The smallest integer threshold at which OpenDP's Gaussian threshold mechanism with this
    scale has delta <= `delta` for one added or removed row."""
    low, high = 1, 2
    while _threshold_measurement(scale, high).map((1, 1, 1))[1] > delta:
        low, high = high, high * 2
    while low < high:
        mid = (low + high) // 2
        if _threshold_measurement(scale, mid).map((1, 1, 1))[1] > delta:
            low = mid + 1
        else:
            high = mid
    return high


def _threshold_measurement(scale: float, threshold: int):
    return dp.m.make_gaussian_threshold(
        dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T="i64")),
        dp.l02inf_distance(dp.absolute_distance(T="i64")), scale=scale, threshold=threshold)


def discover_categories(con, relation: str, name: str, spec: ColumnSpec, rho: float, delta: float,
                        charge) -> tuple[dict[str, float], float]:
    """Kept categories and their noisy counts from the thresholded Gaussian histogram."""
    if delta <= 0:
        raise ValueError("category discovery needs a positive delta")
    scale = gaussian_scale(rho)
    threshold = discovery_threshold(scale, delta)
    meas = _threshold_measurement(scale, threshold)
    released = meas(_value_counts(con, relation, name, spec))
    spent_rho, spent_delta = meas.map((1, 1, 1))
    charge(Spend("gaussian_threshold", float(spent_rho), float(spent_delta), 1.0, scale),
           column=name, purpose="category discovery", threshold=threshold)
    return {k: float(v) for k, v in sorted(released.items())}, scale


def measure_declared_categories(con, relation: str, name: str, spec: ColumnSpec, rho: float,
                                charge) -> tuple[dict[str, float], float]:
    """Noisy counts of the declared categories (Gaussian mechanism, sensitivity 1)."""
    from .domain import sql_text

    exact = _value_counts(con, relation, name, spec)
    labels = [sql_text(c) for c in spec.categories]
    noisy, spend = gaussian_counts(np.array([exact.get(c, 0) for c in labels], dtype=np.int64), rho)
    charge(spend, column=name, purpose="rare-category counts")
    return dict(zip(labels, noisy.tolist())), spend.scale


def apply_rare_rule(counts: dict[str, float], sigma: float, spec: ColumnSpec) -> Derived:
    """Split the noisy counts into kept categories and rare members (post-processing)."""
    rule = spec.rare_rule
    declared = spec.categories is not None
    if rule == "merge":  # benchmark Algorithm 1
        n_hat = max(sum(counts.values()), 0.0)
        cut = max(spec.theta * n_hat, 3 * sigma)
        rare = {k: v for k, v in counts.items() if v < cut}
    elif rule == "filter_combine":  # PrivSyn section on low-count values
        rare = {k: v for k, v in counts.items() if v < 3 * sigma}
        if sum(rare.values()) < 3 * sigma and spec.other:  # too few to keep: into `other`
            kept = [k for k in counts if k not in rare]
            return Derived(categories=_original(kept, spec) if declared else tuple(kept))
    else:
        rare = {}
    kept = [k for k in counts if k not in rare]
    members = tuple((_original([k], spec)[0] if declared else k, float(v)) for k, v in rare.items())
    if len(members) == 1:  # a rare code of one member is just that category
        kept.append(next(iter(rare)))
        members = ()
    categories = _original(kept, spec) if declared else tuple(kept)
    return Derived(categories=categories, rare=members or None)


def _original(labels: list[str], spec: ColumnSpec) -> tuple:
    """Declared categories in their declared type, for the given text labels."""
    from .domain import sql_text

    by_text = {sql_text(c): c for c in spec.categories}
    return tuple(by_text[label] for label in labels)


# ------------------------------------------------------------------------------ numeric bounds

def bucket_edges(spec: ColumnSpec) -> np.ndarray:
    """Public bucket edges for DP bounds (numeric space; days for datetimes): 0 and +-2^k
    (k = 0..40 for integers, -10..40 otherwise), or calendar years 1900-2101 for datetimes."""
    if spec.kind == "datetime":
        import datetime as dt

        return np.array([(dt.date(y, 1, 1) - dt.date(1970, 1, 1)).days for y in range(1900, 2102)],
                        dtype=np.float64)
    powers = [2.0 ** k for k in range(0 if spec.kind == "integer" else -10, 41)]
    return np.array([-p for p in reversed(powers)] + [0.0] + powers, dtype=np.float64)


def bounds_threshold(sigma: float, buckets: int, false_positive: float = 1e-6) -> float:
    """The noisy count above which a bucket counts as occupied: an empty bucket exceeds it with
    probability false_positive / buckets (Gaussian tail), so all empty ones together with at most
    `false_positive`."""
    from statistics import NormalDist

    return sigma * NormalDist().inv_cdf(1 - false_positive / buckets)


def occupied_span(noisy: np.ndarray, threshold: float, neighbour: float) -> tuple[int, int]:
    """First and last occupied bucket of a noisy histogram (post-processing): the outermost
    buckets above `threshold` (or, when none is, the largest bucket), widened through contiguous
    neighbours above `neighbour` (small datasets, where no bucket may clear the threshold)."""
    occupied = np.flatnonzero(noisy > threshold)
    first, last = (occupied[0], occupied[-1]) if occupied.size else (int(np.argmax(noisy)),) * 2
    while first > 0 and noisy[first - 1] > neighbour:
        first -= 1
    while last < noisy.size - 1 and noisy[last + 1] > neighbour:
        last += 1
    return int(first), int(last)


def dp_bounds(con, relation: str, name: str, spec: ColumnSpec, source_type: str, rho: float,
              charge) -> tuple[float, float]:
    """DP bounds from a Gaussian-noised histogram over public buckets (the approach of Google's
    differential-privacy library's ApproxBounds): the bounds are the outer edges of the outermost
    buckets whose noisy count clears `bounds_threshold`. Bucket b holds the values x with
    edges[b-1] <= x < edges[b]; values below the first edge or above the last are clamped into
    the outer buckets by the histogram query (see `occupied_span` for small tables)."""
    edges = bucket_edges(spec)
    candidates = "[" + ", ".join(repr(float(g)) for g in edges) + "]"
    rows = con.execute(sql("grid_histogram", candidates=candidates, source=relation,
                           value=value_expression(name, spec.kind, source_type),
                           is_null=is_null_condition(name, spec.missing))).fetchall()
    hist = np.zeros(edges.size + 1, dtype=np.int64)
    for b, n in rows:
        hist[int(b)] += int(n)
    noisy, spend = gaussian_counts(hist, rho)
    charge(spend, column=name, purpose="DP bounds (bucket histogram)")
    first, last = occupied_span(noisy, bounds_threshold(spend.scale, hist.size), 3 * spend.scale)
    padded = np.concatenate([[edges[0]], edges, [edges[-1]]])  # outer buckets are clamped
    low, high = float(padded[first]), float(padded[last + 1])
    if integer_valued(spec, source_type):
        high = high - 1 if high > low + 1 else high  # [low, high) holds integers up to high - 1
    if high <= low:
        high = low + 1.0
    return low, high


# ------------------------------------------------------------------------------ PrivTree

def privtree_lambda(epsilon: float, fanout: int = PRIVTREE_FANOUT) -> float:
    """Zhang et al. 2016, Theorem 1: lambda = (2 beta - 1) / ((beta - 1) epsilon)."""
    return (2 * fanout - 1) / ((fanout - 1) * epsilon)


def privtree_epsilon(scale: float, fanout: int = PRIVTREE_FANOUT) -> float:
    """The privacy map of PrivTree: the epsilon (pure DP) of a tree built with Laplace(scale)."""
    return (2 * fanout - 1) / ((fanout - 1) * scale)


@dataclass(frozen=True)
class TreeNode:
    first: int   # first cell
    stop: int    # one past the last cell
    depth: int


def privtree_split_decisions(cell_counts: np.ndarray, scale: float, theta: float, integer_width,
                             max_depth: int, laplace) -> list[TreeNode]:
    """PrivTree's leaves over cells 0..len-1 (fanout 2). `laplace(b)` returns b plus Laplace
    noise of `scale`; `integer_width(node)` is the node's width in values (None for floats)."""
    prefix = np.concatenate([[0], np.cumsum(cell_counts)])
    delta = scale * math.log(PRIVTREE_FANOUT)
    leaves, queue = [], [TreeNode(0, cell_counts.size, 0)]
    while queue:
        node = queue.pop(0)
        count = float(prefix[node.stop] - prefix[node.first])
        biased = max(count - node.depth * delta, theta - delta)
        noisy = laplace(biased)
        splittable = (node.stop - node.first >= 2 and node.depth < max_depth
                      and (integer_width is None or integer_width(node) >= 2))
        if noisy > theta and splittable:
            mid = (node.first + node.stop) // 2
            queue += [TreeNode(node.first, mid, node.depth + 1), TreeNode(mid, node.stop, node.depth + 1)]
        else:
            leaves.append(node)
    return sorted(leaves, key=lambda n: n.first)


def privtree_edges(con, relation: str, name: str, spec: ColumnSpec, source_type: str, low: float,
                   high: float, rho: float, charge) -> tuple[float, ...]:
    """Adaptive bin edges [low, ..., high] from PrivTree (see the module docstring)."""
    integer = integer_valued(spec, source_type)
    top = high + 1 if integer else high  # integers: the root is [low, high + 1)
    cells = 2 ** PRIVTREE_MAX_DEPTH
    width = (top - low) / cells
    value = value_expression(name, spec.kind, source_type)
    rows = con.execute(sql("cell_histogram", value=value, low=repr(float(low)), width=repr(width),
                           last=cells - 1, source=relation,
                           is_null=is_null_condition(name, spec.missing))).fetchall()
    counts = np.zeros(cells, dtype=np.int64)
    for cell, n in rows:
        counts[int(cell)] += int(n)
    epsilon = math.sqrt(2 * rho)  # rho = epsilon^2 / 2 (pure DP -> zCDP)
    scale = privtree_lambda(epsilon)
    noise = dp.m.make_laplace(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float),
                              scale=scale)
    integer_width = (lambda n: (n.stop - n.first) * width) if integer else None
    leaves = privtree_split_decisions(counts, scale, PRIVTREE_THETA, integer_width,
                                      PRIVTREE_MAX_DEPTH, noise)
    spent = privtree_epsilon(scale) ** 2 / 2
    charge(Spend("privtree", spent, 0.0, 1.0, scale), column=name, purpose="PrivTree binning",
           leaves=len(leaves))
    bounds = [low + leaf.first * width for leaf in leaves]
    if integer:
        edges = sorted({math.ceil(b - 1e-9) for b in bounds})
        return tuple(float(e) for e in edges) + (float(high),)
    return tuple(float(b) for b in bounds) + (float(high),)
