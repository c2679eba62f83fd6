"""DP preprocessing: the domain of each column, learned with DP where it is not declared.

Implements the benchmark paper of Chen et al. (section 5, appendix B; Algorithm 1 `merge`,
Algorithm 2 PrivTree after Zhang, Xiao, Xie 2016) and PrivSyn's filter-and-combine, as
corrected in docs/decisions/0009-dp-preprocessing.md and 0010-category-discovery.md. Mechanisms
per column: `discover`, `rare`, `bounds` (numbers), `calendar` (datetimes), `density`,
`privtree`; quantile bins are post-processing of the bounds' release. They are pure functions
(numpy + OpenDP) of exact aggregates computed in one scan of the source (`exact_aggregates`; a
second for PrivTree over DP bounds), each bounded by the domains, not the rows. Every invocation
calls `charge` with its privacy map's spend right after its draw; the rho is split by
`task_weight`. Each mechanism, the scans and the budget split: 0009-dp-preprocessing.md."""

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
import numpy as np
from .opendp_api import dp

from .config import DEFAULT_BINS, ColumnSpec, DatasetSpec, sql_type_range
from .domain import (Derived, EncodingPlan, SchemaError, bin_count, build_plan, check_columns,
                     encode_view_sql, encoded_columns, equal_mass_edges, grid_points,
                     integer_valued, is_null_condition, uniform_bins, uniform_edges,
                     value_expression)
from .plugins import NO_SETTINGS, plugin_module
from .privacy import Spend, gaussian_counts, gaussian_scale
from .progress import due
from .scans import as_engine
from .source import (Fallbacks, SourceError, count_fallbacks, describe_source,
                     holdout_relation, training_relation)
from .sql import bookkeeping, ident, qualified, sql

dp.enable_features("contrib")

PRIVTREE_FANOUT = 2
PRIVTREE_THETA = 0.0
PRIVTREE_MAX_DEPTH = 16
PRIVTREE_CELLS = 2 ** PRIVTREE_MAX_DEPTH  # leaves of a full tree
BOUNDS_PARTS = 32  # equal parts of each public bounds bucket, to tighten the outer ones
DENSITY_CELLS = 1024  # most cells of a `density` histogram
DENSITY_Z = 2.0  # `density` cells below DENSITY_Z sigma are zeroed
DENSITY_FLAT_Z = 4.0  # a bin is flat unless its cells' spread exceeds chi-square by this many sd
HEAP_RATIO = 0.25  # a kept `density` cell is a heap when no neighbour's noisy count is this share
# `gap` histograms: public edges in days, 0 then 2^(i/2) seconds up to about 190 years (a bucket
# spans a factor of sqrt 2: a gap is known to about 20%, from a second to centuries)
GAP_EDGES = np.array([0.0] + [2.0 ** (i / 2) / 86400.0 for i in range(66)])
GAP_Z = 2.0  # `gap` cells below GAP_Z sigma are zeroed


@dataclass(frozen=True)
class Task:
    """One invocation to run: a mechanism of `MECHANISMS` on one column."""

    column: str
    # a key of MECHANISMS: discover | rare | bounds | calendar | privtree | density | gap
    mechanism: str
    earlier: str | None = None  # a `gap` task's earlier column (`gap_pairs`)


@dataclass(frozen=True)
class Mechanism:
    """A preprocessing mechanism of the registry `MECHANISMS`: `function` of `module` (a module of
    `dp_synth_assets.core`, or a dotted path for one that lives elsewhere) releases a task's result
    from its `MechanismCall`; `aggregate` is the exact aggregate it reads (`values`: the value
    counts; `buckets`: the bounds histogram over `bucket_edges`; `grid`: the density histogram over
    `density_grid` of its span; `cells`: PRIVTREE_CELLS cells over its span); `weight`: its share of
    the preprocessing rho relative to the other tasks (0009, "As implemented: preprocessing");
    `gaps`: the histogram of a later timestamp minus its earlier one over GAP_EDGES;
    `settings`: its settings model (none takes any yet: `plugins.NO_SETTINGS`)."""

    module: str
    function: str
    aggregate: str  # values | buckets | hours | grid | cells | gaps
    weight: float = 1.0
    settings: str = NO_SETTINGS

    @property
    def spanned(self) -> bool:
        """Whether its aggregate spans the column's bounds (declared, or the DP bounds of the
        first scan)."""
        return self.aggregate in ("grid", "cells")


@dataclass(frozen=True)
class MechanismCall:
    """What a mechanism reads: the task's column and its spec, the exact aggregate (private),
    its span (PrivTree's or the density's [low, high], else None), its rho and delta, the
    `charge` callback it calls with each spend right after drawing the noise, and the bins a
    density shapes (`edges`, when not uniform)."""

    column: str
    spec: ColumnSpec
    exact: object
    span: tuple[float, float] | None
    rho: float
    delta: float
    charge: Callable
    edges: np.ndarray | None = None


def _discover(call: MechanismCall):
    return discover_categories(call.exact, call.column, call.rho, call.delta, call.charge)


def _rare(call: MechanismCall):
    return measure_declared_categories(call.exact, call.column, call.spec, call.rho, call.charge)


def _bounds(call: MechanismCall):
    return bounds_and_density(call.exact, call.column, call.spec, call.rho, call.charge)


def _calendar(call: MechanismCall):
    return calendar_bounds(call.exact, call.column, call.spec, call.rho, call.charge)


def _density(call: MechanismCall):
    return grid_density(call.exact, call.column, call.spec, *call.span, call.rho, call.charge,
                        call.edges)


def _privtree(call: MechanismCall):
    return privtree_edges(call.exact, call.column, call.spec, *call.span, call.rho, call.charge)


def _gap(call: MechanismCall):
    return gap_density(call.exact, call.column, call.rho, call.charge)


# The preprocessing mechanisms (0009-dp-preprocessing.md). Adding one is its module plus one
# line here; a column's tasks are planned by `mechanisms` and their releases read by `preprocess`.
MECHANISMS = {
    "discover": Mechanism("preprocess", "_discover", "values", weight=2.0),
    "rare": Mechanism("preprocess", "_rare", "values"),
    "bounds": Mechanism("preprocess", "_bounds", "buckets"),
    "calendar": Mechanism("preprocess", "_calendar", "hours"),
    "privtree": Mechanism("preprocess", "_privtree", "cells"),
    "density": Mechanism("preprocess", "_density", "grid", weight=0.25),
    "gap": Mechanism("preprocess", "_gap", "gaps", weight=0.5),
}


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
            tasks.append(bounds_task(name, spec))
        if spec.binning_rule == "privtree":
            tasks.append(Task(name, "privtree"))
        elif needs_density(spec):
            tasks.append(Task(name, "density"))
    return tasks


def bounds_task(name: str, spec: ColumnSpec) -> Task:
    """The task that learns a column's bounds (and a first density): `calendar` for a datetime
    (a descent through calendar units), `bounds` for a number (power-of-two buckets)."""
    return Task(name, "calendar" if spec.kind == "datetime" else "bounds")


def needs_density(spec: ColumnSpec) -> bool:
    """Whether a numeric / datetime column gets a `density` histogram: its bins (uniform or
    quantile) may hold more than one value (public: from the spec alone). Undeclared bounds of a
    number get one, integers too: their range is not known when the tasks are planned, and the
    bounds' own density (parts of a power-of-two bucket, or the whole bucket when parts could
    not move a bound) is too coarse for a heap (docs/decisions/0009-dp-preprocessing.md,
    "Densities and heaps"). A datetime without bounds does not: its calendar descent stops at
    the finest unit its rows inform, and that level, made consistent, is its density."""
    if spec.kind not in ("integer", "float", "datetime"):
        return False
    if spec.bounds is None:
        return spec.kind != "datetime"  # the calendar's last level is the density
    if not integer_valued(spec):
        return True
    low, high = spec.numeric_bounds()
    return math.floor(high) - math.ceil(low) + 1 > (spec.bins or DEFAULT_BINS)


# A discovery's weight grows with the categories it is expected to reveal, linearly above
# REFERENCE_CATEGORIES, up to MAX_DISCOVERY_SCALE times its base weight
# (docs/decisions/0010-category-discovery.md, "A discovery's share")
REFERENCE_CATEGORIES = 16
MAX_DISCOVERY_SCALE = 16.0


def discovery_weight(spec: ColumnSpec) -> float:
    """The weight of a column's `discover` task in the preprocessing split: the mechanism's
    base weight, times expected_categories / REFERENCE_CATEGORIES when the column declares more
    than REFERENCE_CATEGORIES (the same rho per expected category), at most
    MAX_DISCOVERY_SCALE times. A function of the spec alone: public."""
    scale = (spec.expected_categories or 0) / REFERENCE_CATEGORIES
    return MECHANISMS["discover"].weight * min(max(scale, 1.0), MAX_DISCOVERY_SCALE)


def task_weight(task: Task, spec: ColumnSpec) -> float:
    """A task's weight in the preprocessing split: its mechanism's (`Mechanism.weight`), a
    discovery's sized by `discovery_weight`."""
    if task.mechanism == "discover":
        return discovery_weight(spec)
    return MECHANISMS[task.mechanism].weight


def gap_pairs(columns: dict[str, ColumnSpec], constraints=()) -> dict[str, str]:
    """Later column -> earlier column, for each declared constraint that orders two timestamp
    columns (`later >= earlier`, `later > earlier`, or the same with `<=` / `<`), the first
    constraint a later column appears in; DATE columns (whole days, decoded in whole days) are
    left out. Each pair gets a `gap` task: the histogram of later - earlier, which decoding
    follows inside the later column's bin (`constraints.draw_gaps`). Public: the spec's."""
    pairs: dict[str, str] = {}
    for c in constraints:
        if c.right is None or c.op not in (">=", ">", "<=", "<"):
            continue
        later, earlier = (c.left, c.right) if c.op in (">=", ">") else (c.right, c.left)
        specs = [columns.get(later), columns.get(earlier)]
        if any(s is None or s.kind != "datetime" or integer_valued(s) for s in specs):
            continue
        pairs.setdefault(later, earlier)
    return pairs


def all_tasks(columns: dict[str, ColumnSpec], constraints=()) -> list[Task]:
    """Every column's tasks (`mechanisms`), in declaration order, then a `gap` task per pair of
    `gap_pairs(columns, constraints)`."""
    return [t for name, spec in columns.items() for t in mechanisms(name, spec)] + [
        Task(later, "gap", earlier) for later, earlier in gap_pairs(columns, constraints).items()]


def preprocess(con: duckdb.DuckDBPyConnection, relation: str, columns: dict[str, ColumnSpec],
               rho: float, delta_extra: float, charge, log=None,
               constraints=()) -> dict[str, Derived]:
    """Run every column's mechanisms over the source's exact aggregates.

    With no rho, a spec whose only tasks are `density` and `gap` histograms (accuracy
    refinements: the domain is declared) runs none of them, and its values are drawn uniformly
    inside their bins.

    Args:
        con: the connection the source is read on (the scan engine's store).
        relation: the source relation.
        columns: the declared columns.
        rho: the preprocessing budget, split over the invocations by `task_weight`.
        delta_extra: the run's extra delta, shared evenly by the `discover` invocations.
        charge: records each invocation's spend, right after its draw.
        log: a line as each scan starts and about ten as the mechanisms run (`progress.due`):
            counts of scans and mechanisms (the spec's) only, never a time.
        constraints: the declared constraints (`constraints.Constraint`), for `gap_pairs`.

    Returns:
        Column -> what its encoding needs (`Derived`; public: DP releases only).
    """
    tasks = all_tasks(columns, constraints)
    if rho <= 0 and all(t.mechanism in ("density", "gap") for t in tasks):
        return {}
    if rho <= 0:
        raise ValueError("preprocessing needs a positive rho")
    weights = [task_weight(t, columns[t.column]) for t in tasks]
    rho_of = {t: rho * w / sum(weights) for t, w in zip(tasks, weights)}
    discovers = sum(t.mechanism == "discover" for t in tasks)
    delta_each = delta_extra / discovers if discovers else 0.0
    out: dict[Task, object] = {}  # what each task's mechanism released

    edges_of: dict[str, np.ndarray] = {}  # the bins a `density` task shapes (public)
    say = log or (lambda line: None)

    def run(batch: list[Task], spans: dict[str, tuple[float, float]], scan: str) -> None:
        if batch:
            say(f"preprocessed: scan {scan}: the exact aggregates of {len(batch)} mechanisms")
        exact = exact_aggregates(con, relation, columns, batch, spans)
        for t in batch:
            out[t] = run_mechanism(t, exact[t], columns[t.column], spans.get(t.column), rho_of[t],
                                   delta_each, charge, edges_of.get(t.column))
            if due(len(out), len(tasks)):
                say(f"preprocessed: {len(out)}/{len(tasks)} mechanisms run")

    # PrivTree and density over DP bounds wait for them: their cells span what the first scan
    # releases
    spanned = {name for name, m in MECHANISMS.items() if m.spanned}
    second = [t for t in tasks if t.mechanism in spanned and columns[t.column].bounds is None]
    first = [t for t in tasks if t not in second]
    scans = bool(first) + bool(second)
    run(first, {t.column: columns[t.column].numeric_bounds() for t in first
                if t.mechanism in spanned}, f"1/{scans}")
    for name, spec in columns.items():  # post-processing of the first scan's releases
        edges = quantile_edges(spec, *out[bounds_task(name, spec)]) \
            if spec.binning_rule == "quantile" else None
        if edges is not None:
            edges_of[name] = np.asarray(edges)
    if second:
        run(second, {t.column: out[bounds_task(t.column, columns[t.column])][0] for t in second},
            f"{scans}/{scans}")
    derived: dict[str, Derived] = {}
    for name, spec in columns.items():
        if not mechanisms(name, spec):
            continue
        if spec.kind == "categorical":
            counts, sigma = out.get(Task(name, "discover")) or out[Task(name, "rare")]
            derived[name] = replace(apply_rare_rule(counts, sigma, spec),
                                    counts=unbiased_counts(counts, sigma, delta_each, spec),
                                    count_sd=float(sigma))
            if spec.categories is None:
                derived[name] = complete_boolean(derived[name])
        else:
            bounds, density = out.get(bounds_task(name, spec)) or (None, None)
            quantile = edges_of.get(name)
            if Task(name, "density") in out:
                edges = quantile if quantile is not None else \
                    uniform_bin_edges(spec, *(bounds or spec.numeric_bounds()))
                density = merge_density(out[Task(name, "density")], density or (), edges)
            derived[name] = Derived(
                bounds=bounds, density=density or None,
                edges=out.get(Task(name, "privtree")) if quantile is None
                else tuple(float(x) for x in quantile))
    for t in tasks:
        if t.mechanism == "gap" and out[t]:
            derived[t.column] = replace(derived.get(t.column, Derived()), gap=(t.earlier, out[t]))
    return derived


def run_mechanism(task: Task, exact, spec: ColumnSpec, span, rho: float, delta: float,
                  charge, edges=None):
    """One task's mechanism (its entry of MECHANISMS) on its exact aggregate (`span`: PrivTree's
    or the density's [low, high]; `edges`: the bins a density shapes, when not uniform)."""
    entry = MECHANISMS[task.mechanism]
    module = plugin_module(MECHANISMS, task.mechanism, __package__, "preprocessing mechanism")
    return getattr(module, entry.function)(MechanismCall(task.column, spec, exact, span, rho,
                                                         delta, charge, edges))


# ------------------------------------------------------------------------------ exact aggregates

def exact_aggregates(con, relation: str, columns: dict[str, ColumnSpec], tasks: list[Task],
                     spans: dict[str, tuple[float, float]]) -> dict[Task, dict | np.ndarray]:
    """The exact aggregate each task's mechanism needs, all from ONE scan of the source (one
    grouping set per task, sql/preprocess_counts.sql). Private: they feed the mechanisms only.
    `discover` / `rare`: the value counts {CAST(value AS VARCHAR): n}; `bounds`: the histogram over
    bucket_edges(spec) (len + 1 buckets); `calendar`: the histogram of the CALENDAR_CELLS hour
    cells (sql/preprocess_hour.sql); `privtree`: the histogram of PRIVTREE_CELLS cells over
    spans[column]; `density`: the histogram over `density_grid(*spans[column])`. Rows that read as
    NULL (a `missing` marker, NaN, a value that does not cast) do not count; +-inf and values beyond
    the buckets or the span count in the outer ones. The keys are total like the encodings
    (domain.py): nothing is cast before it is clamped."""
    if not tasks:
        return {}
    values, keys, sizes = [], [], []
    for i, t in enumerate(tasks):
        spec, v = columns[t.column], f"v{i}"
        aggregate = MECHANISMS[t.mechanism].aggregate
        is_null = is_null_condition(t.column, spec.missing, spec.kind)
        if aggregate == "values":
            value, key, size = f"CAST({ident(t.column)} AS VARCHAR)", v, None
        elif aggregate == "gaps":  # later - earlier in days (sql/gap_days.sql); below 0: bucket 0
            before = columns[t.earlier]
            value = sql("gap_days", later=f"TRY_CAST({ident(t.column)} AS TIMESTAMP)",
                        earlier=f"TRY_CAST({ident(t.earlier)} AS TIMESTAMP)")
            is_null = f"({is_null} OR {is_null_condition(t.earlier, before.missing, before.kind)})"
            key = sql("preprocess_bucket", v=v, comparisons=" + ".join(
                f"CAST({float(e)!r} <= {v} AS INTEGER)" for e in GAP_EDGES))
            size = GAP_EDGES.size + 1
        else:
            value = value_expression(t.column, spec.kind, spec.sql_type)
            if aggregate == "buckets":
                edges = bucket_edges(spec)
                bucket = sql("preprocess_bucket", v=v, comparisons=" + ".join(
                    f"CAST({float(e)!r} <= {v} AS INTEGER)" for e in edges))
                key = sql("preprocess_fine_bucket", v=v, bucket=bucket, sub=BOUNDS_PARTS,
                          outer=edges.size,
                          edges="[" + ", ".join(repr(float(e)) for e in edges) + "]")
                size = (edges.size + 1) * BOUNDS_PARTS
            elif aggregate == "hours":
                key = sql("preprocess_hour", v=v, first=CALENDAR_FIRST_HOUR,
                          last=CALENDAR_CELLS - 1)
                size = CALENDAR_CELLS
            else:
                low, high = spans[t.column]
                if aggregate == "grid":
                    low, width, size = density_grid(low, high, integer_valued(spec))
                    template = "preprocess_grid_cell"
                else:
                    width = privtree_cell_width(low, high, integer_valued(spec))
                    size, template = PRIVTREE_CELLS, "preprocess_cell"
                key = sql(template, v=v, low=repr(float(low)), width=repr(width),
                          top=repr(float(low) + size * width), last=size - 1)
        values.append(f"{sql('preprocess_value', is_null=is_null, value=value)} AS {v}")
        keys.append(f"{key} AS k{i}")
        sizes.append(size)
    labels = [f"k{i}" for i, size in enumerate(sizes) if size is None]
    codes = [f"k{i}" for i, size in enumerate(sizes) if size is not None]
    engine = as_engine(con)  # a temporary copy of the keys where the engine makes them
    keys_table = ident(bookkeeping("preprocess_keys"))
    if engine.copies:
        engine.execute(sql("preprocess_keys", keys_table=keys_table, values=", ".join(values),
                           keys=", ".join(keys), source=relation))
    else:
        keys_table = sql("preprocess_keys_relation", values=", ".join(values),
                         keys=", ".join(keys), source=relation)
    try:
        result = engine.fetchnumpy(sql(
            "preprocess_counts", keys_table=keys_table,
            groupings=", ".join(f"GROUPING(k{i})" for i in range(len(tasks))),
            sets=", ".join(f"(k{i})" for i in range(len(tasks))),
            label=_coalesce(labels, "VARCHAR"), code=_coalesce(codes, "BIGINT")))
    finally:
        if engine.copies:
            engine.execute(sql("drop_table", table=keys_table))
    task_of, n = np.asarray(result["task"]), np.asarray(result["n"], dtype=np.int64)
    exact: dict[Task, dict[str, int] | np.ndarray] = {}
    for i, (t, size) in enumerate(zip(tasks, sizes)):
        rows = task_of == i
        if size is None:
            exact[t] = dict(zip(np.asarray(result["label"][rows]).tolist(), n[rows].tolist()))
        else:
            hist = np.zeros(size, dtype=np.int64)
            hist[np.asarray(result["code"][rows], dtype=np.int64)] = n[rows]
            exact[t] = hist
    return exact


def _coalesce(keys: list[str], sql_type: str) -> str:
    return f"COALESCE({', '.join(keys)})" if keys else f"CAST(NULL AS {sql_type})"


# ------------------------------------------------------------------------------ categories

PRIOR_MARGIN = 2.0  # a count is a 1-way prior only this many sds above the cut that selected it


def unbiased_counts(counts: dict[str, float], sigma: float, delta: float,
                    spec: ColumnSpec) -> tuple:
    """The released counts the measurement stage may merge into the 1-way marginal
    (`domain.category_prior`). A category's code was decided by its own noisy count: discovery
    released it for clearing the threshold, the rare rule kept it for clearing `rare_cut`; so a
    count near the higher of the two cuts is biased upward, and a rare member's downward. Only
    the counts PRIOR_MARGIN sds above that cut are passed: a true count at the cut is then
    biased by 0.8 sd, one 2 sds above it by phi(2) / Phi(2) = 0.06 sd, and the counts near the
    cut itself, the most biased, and every rare member are left out. Declared categories with
    no rare rule: every count (nothing was selected by it)."""
    cut = rare_cut(counts, sigma, spec)
    if spec.categories is None:
        cut = max(cut, discovery_threshold(sigma, delta))
    if cut == -math.inf:
        return tuple(counts.items())
    return tuple((k, v) for k, v in counts.items() if v >= cut + PRIOR_MARGIN * sigma)


def discovery_threshold(scale: float, delta: float) -> int:
    """The smallest integer threshold at which the Gaussian threshold mechanism with this
    scale has delta (`threshold_delta`) <= `delta` for one added or removed row."""
    low, high = 1, 2
    while threshold_delta(scale, high) > delta:
        low, high = high, high * 2
    while low < high:
        mid = (low + high) // 2
        if threshold_delta(scale, mid) > delta:
            low = mid + 1
        else:
            high = mid
    return high


def threshold_delta(scale: float, threshold: int) -> float:
    """The delta of OpenDP's Gaussian threshold mechanism for one added or removed row: at
    least the probability that a key only one table holds (count 1) is released, P[Z >=
    threshold - 1] for the discrete Gaussian Z it draws (a count at or above the threshold is
    released). OpenDP's map answers the continuous Gaussian's tail, which is smaller for
    discrete noise (docs/decisions/0010-category-discovery.md, "The threshold's delta"); the
    larger of the two is charged."""
    span = int(math.ceil(40 * scale)) + abs(threshold) + 2
    z = np.arange(-span, span + 1)
    weights = np.exp(-(z.astype(float) ** 2) / (2 * scale ** 2))
    tail = float(weights[z >= threshold - 1].sum() / weights.sum())
    return max(tail, float(_threshold_measurement(scale, threshold).map((1, 1, 1))[1]))


def _threshold_measurement(scale: float, threshold: int):
    return dp.m.make_gaussian_threshold(
        dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T="i64")),
        dp.l02inf_distance(dp.absolute_distance(T="i64")), scale=scale, threshold=threshold)


def discover_categories(exact: dict[str, int], name: str, rho: float, delta: float,
                        charge) -> tuple[dict[str, float], float]:
    """Kept categories and their noisy counts from the thresholded Gaussian histogram of the
    exact value counts."""
    if delta <= 0:
        raise ValueError("category discovery needs a positive delta")
    scale = gaussian_scale(rho)
    threshold = discovery_threshold(scale, delta)
    meas = _threshold_measurement(scale, threshold)
    released = meas(exact)
    spent_rho = meas.map((1, 1, 1))[0]
    spent_delta = threshold_delta(scale, threshold)
    charge(Spend("gaussian_threshold", float(spent_rho), float(spent_delta), 1.0, scale),
           column=name, purpose="category discovery", threshold=threshold)
    return {k: float(v) for k, v in sorted(released.items())}, scale


def measure_declared_categories(exact: dict[str, int], name: str, spec: ColumnSpec, rho: float,
                                charge) -> tuple[dict[str, float], float]:
    """Noisy counts of the declared categories from the exact value counts (Gaussian mechanism,
    sensitivity 1)."""
    from .domain import sql_text

    labels = [sql_text(c) for c in spec.categories]
    noisy, spend = gaussian_counts(np.array([exact.get(c, 0) for c in labels], dtype=np.int64), rho)
    charge(spend, column=name, purpose="rare-category counts")
    return dict(zip(labels, noisy.tolist())), spend.scale


def rare_cut(counts: dict[str, float], sigma: float, spec: ColumnSpec) -> float:
    """The noisy count below which a category is rare: `merge` (benchmark Algorithm 1)
    max(theta * noisy_total, 3 sigma), `filter_combine` (PrivSyn's low-count values) 3 sigma,
    `none` -inf (post-processing)."""
    if spec.rare_rule == "merge":
        return max(spec.theta * max(sum(counts.values()), 0.0), 3 * sigma)
    if spec.rare_rule == "filter_combine":
        return 3 * sigma
    return -math.inf


def apply_rare_rule(counts: dict[str, float], sigma: float, spec: ColumnSpec) -> Derived:
    """Split the noisy counts into kept categories and rare members (post-processing)."""
    declared = spec.categories is not None
    cut = rare_cut(counts, sigma, spec)
    rare = {k: v for k, v in counts.items() if v < cut}
    if spec.rare_rule == "filter_combine":
        if sum(rare.values()) < 3 * sigma and spec.other:  # too few to keep: into `other`
            kept = [k for k in counts if k not in rare]
            return Derived(categories=_original(kept, spec) if declared else tuple(kept))
    kept = [k for k in counts if k not in rare]
    members = tuple((_original([k], spec)[0] if declared else k, float(v)) for k, v in rare.items())
    if len(members) == 1:  # a rare code of one member is just that category
        kept.append(next(iter(rare)))
        members = ()
    categories = _original(kept, spec) if declared else tuple(kept)
    return Derived(categories=categories, rare=members or None)


BOOLEAN_PAIRS = {"true": "false", "t": "f", "yes": "no", "y": "n", "1": "0"}
BOOLEAN_PAIRS.update({v: k for k, v in list(BOOLEAN_PAIRS.items())})


def complete_boolean(derived: Derived) -> Derived:
    """A discovered column whose every released value (kept or rare) spells one side of a boolean
    ('yes', 'False', 'n', ...) also gets the other side, in the same spelling and case, as a
    kept category (post-processing of public output): its rows are then encoded and measured
    like any category's, where thresholding would have put them in `other`."""
    released = list(derived.categories or ()) + [m for m, _ in (derived.rare or ())]
    lowered = {str(v).strip().lower() for v in released}
    if not released or not lowered <= set(BOOLEAN_PAIRS):
        return derived
    added = []
    for value in released:
        text = str(value).strip()
        partner = BOOLEAN_PAIRS[text.lower()]
        if partner in lowered or any(a.lower() == partner for a in added):
            continue
        added.append(partner.upper() if text.isupper() and len(text) > 1 else
                     partner.capitalize() if text[:1].isupper() else partner)
    if not added:
        return derived
    return replace(derived, categories=tuple(derived.categories or ()) + tuple(added))


def _original(labels: list[str], spec: ColumnSpec) -> tuple:
    """Declared categories in their declared type, for the given text labels."""
    from .domain import sql_text

    by_text = {sql_text(c): c for c in spec.categories}
    return tuple(by_text[label] for label in labels)


# ------------------------------------------------------------------------------ numeric bounds

def bucket_edges(spec: ColumnSpec) -> np.ndarray:
    """Public bucket edges for the DP bounds of a number: 0 and +-2^k (k = 0..40 for integers,
    -10..40 otherwise). A datetime's bounds descend through calendar units instead
    (`calendar_bounds`)."""
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
    buckets above `threshold` (or, when none is, `densest_run`), widened through contiguous
    neighbours above `neighbour` (small datasets, where no bucket may clear the threshold)."""
    occupied = np.flatnonzero(noisy > threshold)
    first, last = (occupied[0], occupied[-1]) if occupied.size else densest_run(noisy)
    while first > 0 and noisy[first - 1] > neighbour:
        first -= 1
    while last < noisy.size - 1 and noisy[last + 1] > neighbour:
        last += 1
    return int(first), int(last)


def densest_run(noisy: np.ndarray) -> tuple[int, int]:
    """The run of contiguous buckets whose noisy sum is the most standard deviations above 0,
    sum / sqrt(length) (a scan statistic; post-processing): with no bucket above the
    threshold, a column's rows still lie in a few neighbouring buckets, whose sum stands out
    where the largest single bucket is often noise (titanic_raw at epsilon 0.2: age learned as
    [16384, 32768])."""
    best, run = -math.inf, (0, 0)
    cumulative = np.concatenate([[0.0], np.cumsum(noisy)])
    for length in range(1, noisy.size + 1):
        sums = (cumulative[length:] - cumulative[:-length]) / math.sqrt(length)
        i = int(np.argmax(sums))
        if sums[i] > best:
            best, run = float(sums[i]), (i, i + length - 1)
    return run


def dp_bounds(hist: np.ndarray, name: str, spec: ColumnSpec, rho: float,
              charge) -> tuple[float, float]:
    """The DP bounds of `bounds_and_density` (the density is dropped)."""
    return bounds_and_density(hist, name, spec, rho, charge)[0]


def bounds_and_density(hist: np.ndarray, name: str, spec: ColumnSpec, rho: float, charge
                       ) -> tuple[tuple[float, float], tuple[tuple[float, float, float], ...]]:
    """DP bounds from Gaussian-noised histograms over public buckets (the approach of Google's
    differential-privacy library's ApproxBounds), tightened inside the outer buckets.

    `hist` is the exact histogram over the buckets of `bucket_edges` (len + 1 buckets, bucket b
    holds edges[b-1] <= x < edges[b], values beyond the edges clamped into the outer ones), each
    split into `parts` equal parts (`hist.size // buckets`; 1: no parts), part-major within its
    bucket (`exact_aggregates`). Two Gaussian histograms, rho / 2 each (one: rho), charged
    together as one spend, the sum of their OpenDP maps:
    1. the bucket histogram: the bounds span the outermost buckets whose noisy count clears
       `bounds_threshold` (see `occupied_span` for small tables);
    2. the part histogram: inside the first (last) bucket of the span, the bound moves inward
       past the parts that, by an upper confidence bound (noisy count + Z_TIGHTEN sigma sqrt(parts
       skipped)), hold at most CLAMP_SHARE of the noisy total: the rows the tighter bound clamps
       into its outer bin. With little data (sigma sqrt(parts) above that share) the edge stays.
    Where the parts cannot move a bound (`can_tighten` on the first histogram's noisy total
    inside its span, post-processing), the second histogram is the bucket histogram again and
    the two are averaged (the variance of one histogram at rho): small tables get their buckets
    detected at the task's whole rho instead of spending half of it on parts that stay put.
    Integer bounds are integer; the bounds are cut to the values of the declared SQL type.
    The density is the part counts made consistent with the bucket counts
    (`consistent_counts`: a bucket's count is known to one sigma, the sum of its parts to
    sqrt(parts)), clipped at 0 (without parts: the bucket counts), inside the bounds, as (low,
    high, count) pieces: decoding draws values inside a bin in proportion to it, and quantile
    bins are cut at its cumulative mass (post-processing)."""
    edges = bucket_edges(spec)
    buckets = edges.size + 1
    parts = max(hist.size // buckets, 1)
    fine = np.asarray(hist, dtype=np.int64).reshape(buckets, parts)
    coarse = fine.sum(axis=1)
    noisy, spend = gaussian_counts(coarse, rho / 2 if parts > 1 else rho)
    noisy_parts, sigma = None, spend.scale
    if parts > 1:
        first, last = occupied_span(noisy, bounds_threshold(sigma, buckets), NEIGHBOUR_Z * sigma)
        if can_tighten(max(float(noisy[first:last + 1].sum()), 0.0), sigma):
            noisy_parts, second = gaussian_counts(fine, rho / 2)
        else:  # a second bucket histogram; the mean of the two has the variance of one at rho
            again, second = gaussian_counts(coarse, rho / 2)
            noisy, sigma = (noisy + again) / 2, sigma / math.sqrt(2)
        spend = Spend("gaussian_counts", spend.rho + second.rho, 0.0, 1.0, spend.scale)
    charge(spend, column=name, purpose="DP bounds (bucket histogram)")
    first, last = occupied_span(noisy, bounds_threshold(sigma, buckets), NEIGHBOUR_Z * sigma)
    padded = np.concatenate([[edges[0]], edges, [edges[-1]]])  # outer buckets are clamped
    low, high = float(padded[first]), float(padded[last + 1])
    pieces: tuple = ()
    if noisy_parts is not None:
        total = max(float(noisy.sum()), 0.0)
        cells = buckets * parts  # the parts' counts made consistent with their buckets'
        consistent = consistent_counts([
            (np.arange(0, cells + 1, parts), noisy, sigma),
            (np.arange(cells + 1), noisy_parts.ravel(), second.scale)]).reshape(buckets, parts)
        if 0 < first < buckets - 1:
            k = _tighten(noisy_parts[first], sigma, total)
            low = low + k * (padded[first + 1] - padded[first]) / parts
        if 0 < last < buckets - 1:
            k = _tighten(noisy_parts[last][::-1], sigma, total)
            high = high - k * (padded[last + 1] - padded[last]) / parts
        for b in range(max(first, 1), min(last, buckets - 2) + 1):
            width = (padded[b + 1] - padded[b]) / parts
            for j in range(parts):
                a = padded[b] + j * width
                if a + width > low and a < high:
                    pieces += ((float(max(a, low)), float(min(a + width, high)),
                                float(max(consistent[b, j], 0.0))),)
    else:  # the buckets' own noisy counts: a coarser density, still one per bucket
        for b in range(max(first, 1), min(last, buckets - 2) + 1):
            a, z = max(padded[b], low), min(padded[b + 1], high)
            if z > a:
                pieces += ((float(a), float(z), float(max(noisy[b], 0.0))),)
    return finished_bounds(spec, low, high), pieces


def finished_bounds(spec: ColumnSpec, low: float, high: float) -> tuple[float, float]:
    """The released [low, high) as the encoding's bounds (post-processing): integer bounds are
    integer, `high` the last integer inside; cut to the values of the declared SQL type; never
    empty."""
    if integer_valued(spec):
        low = float(math.floor(low))
        high = float(math.ceil(high))
        high = high - 1 if high > low + 1 else high  # [low, high) holds integers up to high - 1
    span = sql_type_range(spec.sql_type)
    if span is not None:  # post-processing: values the declared type cannot hold are clamped
        low, high = min(max(low, span[0]), span[1]), max(min(high, span[1]), span[0])
        if high <= low:
            low, high = (span[1] - 1.0, float(span[1])) if low >= span[1] else (low, low + 1.0)
    if high <= low:
        high = low + 1.0
    return float(low), float(high)


Z_TIGHTEN = 2.0
CLAMP_SHARE = 0.01
NEIGHBOUR_Z = 2.0  # a bucket next to the occupied span joins it above NEIGHBOUR_Z sigma


def can_tighten(total: float, sigma: float) -> bool:
    """Whether a part histogram of noise `sigma` can move a bound at all for a column of about
    `total` rows: `_tighten` skips the first part only if its noisy count + Z_TIGHTEN sigma stays
    within CLAMP_SHARE * total, which an empty part's noise passes with probability below 1/2
    when CLAMP_SHARE * total < Z_TIGHTEN sigma."""
    return CLAMP_SHARE * total >= Z_TIGHTEN * sigma


def _tighten(noisy_parts: np.ndarray, sigma: float, total: float) -> int:
    """How many parts, from the outside, the bound may skip: the largest k such that for every
    j <= k the noisy count of the first j parts plus Z_TIGHTEN sigma sqrt(j) (an upper
    confidence bound on the rows a bound at part j clamps) stays within CLAMP_SHARE * total."""
    j = np.arange(1, noisy_parts.size + 1)
    fits_ = np.cumsum(noisy_parts) + Z_TIGHTEN * sigma * np.sqrt(j) <= CLAMP_SHARE * total
    return int(np.argmin(fits_)) if not fits_.all() else int(noisy_parts.size)


# ------------------------------------------------------------------------------ calendar bounds

CALENDAR_START = np.datetime64("1900-01-01T00", "h")  # the calendar of the descent: 1900-2101
CALENDAR_STOP = np.datetime64("2102-01-01T00", "h")
CALENDAR_FIRST_HOUR = int(CALENDAR_START.astype(np.int64))  # hours since 1970 (negative)
CALENDAR_CELLS = int((CALENDAR_STOP - CALENDAR_START).astype(np.int64)) + 2  # + before, after
CALENDAR_UNITS = ("Y", "M", "D", "h")  # the descent's levels (numpy units); a DATE stops at D
CALENDAR_NAMES = {"Y": "years", "M": "months", "D": "days", "h": "hours"}
CALENDAR_MAX_BUCKETS = 2 ** 16  # a level of more buckets is not run (the descent stops)
CALENDAR_NEIGHBOUR_Z = 3.0  # a bucket next to a level's occupied span joins it above this
CALENDAR_DENSITY_Z = 2.0  # a level whose buckets hold this many sigma on average is run


def calendar_edges(unit: str, first: int, stop: int) -> np.ndarray:
    """The hour cells where each `unit` (a key of CALENDAR_NAMES) starts, from cell `first` to
    cell `stop` (both such starts, inside 1 .. CALENDAR_CELLS - 1: the calendar): the edges of a
    level's buckets (public)."""
    start = (CALENDAR_START + np.timedelta64(first - 1, "h")).astype(f"datetime64[{unit}]")
    end = (CALENDAR_START + np.timedelta64(stop - 1, "h")).astype(f"datetime64[{unit}]")
    points = np.arange(start, end + np.timedelta64(1, unit)).astype("datetime64[h]")
    return (points - CALENDAR_START).astype(np.int64) + 1


def calendar_days(cell) -> np.ndarray:
    """The start of an hour cell in days since 1970 (the numeric space of datetimes)."""
    return (np.asarray(cell, dtype=np.float64) - 1 + CALENDAR_FIRST_HOUR) / 24.0


def level_counts(cumulative: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The counts of a level's buckets [edges[i], edges[i + 1]) from the cumulative exact hour
    histogram (`cumulative[c]`: the rows in cells before c); rows before edges[0] count in the
    first bucket, rows from edges[-1] on in the last: each row in exactly one bucket, so the
    vector moves by one in one bucket when a row is added or removed (L2 sensitivity 1)."""
    counts = np.diff(cumulative[edges])
    counts[0] += cumulative[edges[0]]
    counts[-1] += cumulative[-1] - cumulative[edges[-1]]
    return counts


def calendar_bounds(hist: np.ndarray, name: str, spec: ColumnSpec, rho: float, charge
                    ) -> tuple[tuple[float, float], tuple[tuple[float, float, float], ...]]:
    """DP bounds of a datetime at the resolution its rows allow: a descent through years,
    months, days and hours (a DATE stops at days: it bins whole days).

    `hist` is the exact histogram of the CALENDAR_CELLS hour cells (`exact_aggregates`: cell 0
    before 1900, the last from 2102 on). Level 1 is a Gaussian histogram (sensitivity 1) over
    the years 1900-2101 and the two outer buckets; its span is the outermost buckets that clear
    `bounds_threshold` (`occupied_span`). Each next level is a Gaussian histogram over the next
    unit's buckets inside the span (rows outside it count in its first or last bucket), run
    while an end of the span is informative (its bucket's noisy count, spread over its
    children, clears the next level's threshold) or its buckets hold CALENDAR_DENSITY_Z sigma on
    average, and the level has at most CALENDAR_MAX_BUCKETS buckets. An end that is not
    informative stays where it is (the rows near it are too few to place it finer) unless its
    noisy count is at most CLAMP_SHARE of the span's (a neighbour of noise, or a few rows the
    bound may clamp). Each level is charged its own OpenDP map answer;
    each gets rho / levels (4 levels, 3 for a DATE), and when the descent stops early the rest
    measures the last level again, averaged with its first draw by inverse variance, so the
    task spends exactly `rho`; a TIMESTAMP that stops at days (at most DENSITY_CELLS of them)
    first spends half that rest on the hour of day over all its rows (`hour_of_day_counts`, 24
    counts, sensitivity 1), which shapes each day's density (`within_days`): events keep their
    daily cycle where single hours are too thin to measure. The bounds are the span's outer
    edges; the density is the last level's counts made consistent with the levels above
    (`consistent_counts`: a day's count is known to one sigma, the sum of its 24 hours to about
    five), clipped at 0, inside them, as (low, high, count) pieces in days, at most
    DENSITY_CELLS of them (neighbouring buckets summed). All but the draws is post-processing."""
    units = CALENDAR_UNITS[:3] if integer_valued(spec) else CALENDAR_UNITS
    each = rho / len(units)
    cumulative = np.concatenate([[0], np.cumsum(np.asarray(hist, dtype=np.int64))])
    inside = (1, CALENDAR_CELLS - 1)  # the calendar's cells: the outer ones are not descended
    edges = np.concatenate([[0], calendar_edges("Y", *inside), [CALENDAR_CELLS]])
    fixed = (False, False)  # ends the descent may not move
    spent = 0.0
    profile = None  # the noisy hour-of-day counts, when the descent stops at days
    levels = []  # (edges, noisy counts, sigma) of every level, for `consistent_counts`
    for depth, unit in enumerate(units):
        counts = level_counts(cumulative, edges)
        noisy, spend = gaussian_counts(counts, each)
        levels.append((edges, noisy, spend.scale))
        spent += spend.rho
        charge(spend, column=name, purpose=f"DP bounds (calendar {CALENDAR_NAMES[unit]})",
               buckets=int(counts.size))
        sigma = spend.scale
        first, last = _calendar_span(noisy, sigma, fixed)
        low, high = max(edges[first], inside[0]), min(edges[last + 1], inside[1])
        finer = units[depth + 1] if depth + 1 < len(units) else None
        children = calendar_edges(finer, low, high) if finer and high > low else None
        if children is not None and children.size - 1 <= CALENDAR_MAX_BUCKETS:
            threshold = bounds_threshold(sigma, children.size - 1)
            informative = []
            for end in (first, last):
                a, b = edges[end], edges[end + 1]
                kids = int(np.count_nonzero((children >= a) & (children < b)))
                informative.append(inside[0] <= a and b <= inside[1]
                                   and noisy[end] / max(kids, 1) >= threshold)
            total = max(float(noisy[first:last + 1].sum()), 0.0)
            if any(informative) or total / (children.size - 1) >= CALENDAR_DENSITY_Z * sigma:
                # an end too thin to place finer stays, unless it holds at most CLAMP_SHARE of
                # the rows (a neighbour of noise): the next level may then drop it
                edges, fixed = children, tuple(
                    not ok and noisy[end] > CLAMP_SHARE * total
                    for ok, end in zip(informative, (first, last)))
                continue
        rest = rho - spent
        days = last - first + 1  # a day each piece (`_calendar_pieces` sums more than these)
        if unit == "D" and "h" in units and rest > rho * 1e-9 and days <= DENSITY_CELLS:
            # hours too thin to measure: half the rest measures the hour of day over every day,
            # the shape inside a day
            profile, third = gaussian_counts(hour_of_day_counts(hist), rest / 2)
            charge(third, column=name, purpose="DP bounds (calendar hour of day)", buckets=24)
            spent += third.rho
            rest = rho - spent
        if rest > rho * 1e-9:  # the descent stops early: the rest measures this level again
            again, second = gaussian_counts(counts, rest)
            charge(second, column=name,
                   purpose=f"DP bounds (calendar {CALENDAR_NAMES[unit]}, again)",
                   buckets=int(counts.size))
            w1, w2 = 1 / sigma ** 2, 1 / second.scale ** 2
            noisy = (w1 * noisy + w2 * again) / (w1 + w2)
            levels[-1] = (edges, noisy, 1 / math.sqrt(w1 + w2))
            first, last = _calendar_span(noisy, 1 / math.sqrt(w1 + w2), fixed)
            low, high = max(edges[first], inside[0]), min(edges[last + 1], inside[1])
        break
    pieces = _calendar_pieces(consistent_counts(levels), edges, first, last, low, high)
    if profile is not None:
        pieces = within_days(pieces, profile)
    return finished_bounds(spec, float(calendar_days(low)), float(calendar_days(high))), pieces


def hour_of_day_counts(hist: np.ndarray) -> np.ndarray:
    """The rows in each hour of the day (0-23), from the exact hour-cell histogram of
    `calendar_bounds` (1900-01-01 00:00 starts cell 1; the two outer cells are left out): every
    row in at most one count, so the vector moves by at most one in one count when a row is
    added or removed (L2 sensitivity 1)."""
    cells = np.asarray(hist, dtype=np.int64)[1:CALENDAR_CELLS - 1]
    return np.bincount(np.arange(cells.size) % 24, weights=cells, minlength=24).astype(np.int64)


def within_days(pieces: tuple, profile: np.ndarray) -> tuple:
    """Day pieces ((low, high, count) in days, each one whole day: `_calendar_pieces` of the
    days level) cut into parts of the day in proportion to the noisy hour-of-day `profile`
    (clipped at 0; flat when nothing is left), as many parts as keep the pieces at most
    DENSITY_CELLS (24, 12, 8, 6, 4, 3, 2 or 1 a day). Pieces that are not one whole day (grouped
    or cut by a bound inside a day) stay whole. Post-processing."""
    if not pieces:
        return pieces
    shares = np.clip(np.asarray(profile, dtype=np.float64), 0.0, None)
    shares = shares / shares.sum() if shares.sum() > 0 else np.full(24, 1 / 24)
    parts = next(k for k in (24, 12, 8, 6, 4, 3, 2, 1) if len(pieces) * k <= DENSITY_CELLS)
    part_shares = shares.reshape(parts, 24 // parts).sum(axis=1)
    out = []
    for low, high, count in pieces:
        whole = abs(high - low - 1.0) < 1e-9 and abs(low - round(low)) < 1e-9
        if not whole or parts == 1:
            out.append((low, high, count))
            continue
        out.extend((low + k / parts, low + (k + 1) / parts, count * float(part_shares[k]))
                   for k in range(parts))
    return tuple(out)


def consistent_counts(levels: list[tuple[np.ndarray, np.ndarray, float]]) -> np.ndarray:
    """The last level's counts re-estimated from every level's (Hay et al. 2010, "Boosting the
    accuracy of differentially private histograms through consistency", generalized to a
    sigma per level): the least-squares counts given all the noisy counts. Post-processing.

    `levels`: (edges, noisy counts, sigma) from the top; bucket i of a level holds the rows in
    [edges[i], edges[i + 1]), its first bucket also those before, its last those after
    (`level_counts`). The last level's buckets are the leaves. A level above observes a sum of
    leaves wherever a run of its buckets starts and ends on leaf edges (the calendar's units
    nest: a day is 24 hours; at the span's ends its buckets merge into one, so the years above a
    month observe only the total); its noisy sum over the run has variance (run length)
    sigma^2. The observations nest, so the two passes of a tree give the least-squares answer:
    upward, a node's estimate of its own count combines its observation y (variance v) with its
    children's estimates (sum S, variance V) by inverse variance; downward, each child gets its
    share of its parent's final count less S in proportion to its own variance."""
    edges, estimate, sigma = levels[-1]
    ends = np.r_[np.asarray(edges[1:-1], dtype=np.float64), np.inf]  # each leaf's end
    count = ends.size
    z = np.asarray(estimate, dtype=np.float64).copy()
    var = np.full(count, float(sigma) ** 2)
    last = np.arange(count)  # the last leaf of each node of the current frontier
    steps = []
    for up_edges, up_noisy, up_sigma in reversed(levels[:-1]):
        up_ends = np.r_[np.asarray(up_edges[1:-1], dtype=np.float64), np.inf]
        at = np.searchsorted(ends, up_ends)
        closes = (at < count) & (ends[np.minimum(at, count - 1)] == up_ends)
        runs = np.cumsum(np.r_[0, closes[:-1]])  # the run each of its buckets belongs to
        run_sum = np.bincount(runs, weights=up_noisy)
        run_len = np.bincount(runs).astype(np.float64)
        run_last = at[closes]  # the last leaf of each run (every run closes: +inf is an end)
        node_run = np.searchsorted(run_last, last)  # the run holding each frontier node
        node_first = np.r_[0, last[:-1] + 1]
        run_first = np.r_[0, run_last[:-1] + 1]
        if run_last.size != run_sum.size or (run_first[node_run] > node_first).any():
            continue  # runs that do not hold whole nodes (no nesting): this level is left out
        precision = 1.0 / (run_len * float(up_sigma) ** 2)
        total = np.bincount(node_run, weights=z, minlength=run_sum.size)
        spread = np.bincount(node_run, weights=var, minlength=run_sum.size)
        spread = np.where(spread > 0, spread, np.inf)
        merged_var = 1.0 / (precision + 1.0 / spread)
        merged = merged_var * (precision * run_sum + total / spread)
        steps.append((node_run, z, var, total, spread))
        z, var, last = merged, merged_var, run_last
    for node_run, z_below, var_below, total, spread in reversed(steps):
        z = z_below + (z - total)[node_run] * var_below / spread[node_run]
    return z


def _calendar_span(noisy: np.ndarray, sigma: float, fixed: tuple[bool, bool]) -> tuple[int, int]:
    """`occupied_span` of a level, a neighbour joining above CALENDAR_NEIGHBOUR_Z sigma (why not
    NEIGHBOUR_Z: docs/decisions/0009-dp-preprocessing.md); a fixed end stays."""
    first, last = occupied_span(noisy, bounds_threshold(sigma, noisy.size),
                                CALENDAR_NEIGHBOUR_Z * sigma)
    return (0 if fixed[0] else first), (noisy.size - 1 if fixed[1] else last)


def _calendar_pieces(noisy: np.ndarray, edges: np.ndarray, first: int, last: int, low: int,
                     high: int) -> tuple:
    """The buckets first..last cut to [low, high) as (low, high, clipped noisy count) pieces in
    days, neighbours summed into at most DENSITY_CELLS pieces (post-processing)."""
    a = np.clip(edges[first:last + 1], low, high)
    b = np.clip(edges[first + 1:last + 2], low, high)
    c = np.clip(noisy[first:last + 1], 0.0, None)
    keep = b > a
    a, b, c = a[keep], b[keep], c[keep]
    group = max(1, math.ceil(a.size / DENSITY_CELLS))
    starts = np.arange(0, a.size, group)
    a, b = a[starts], b[np.minimum(starts + group, a.size) - 1]
    c = np.add.reduceat(c, starts) if c.size else c
    return tuple((float(x), float(y), float(n))
                 for x, y, n in zip(calendar_days(a), calendar_days(b), c))


# ------------------------------------------------------------------------------ density

def density_grid(low: float, high: float, integer: bool) -> tuple[float, float, int]:
    """The public grid of a `density` histogram over [low, high] (integers: [low, high + 1)):
    (start, width, cells), width the smallest of 1, 2, 5 times a power of ten (at least 1 for
    integers) giving at most DENSITY_CELLS cells, start the largest multiple of width <= low."""
    top = high + 1 if integer else high
    span = max(top - low, 1e-12)
    width = None
    exponent = math.floor(math.log10(span / DENSITY_CELLS))
    while width is None:
        for mantissa in (1, 2, 5):
            w = mantissa * 10.0 ** exponent
            fits = math.ceil(top / w) - math.floor(low / w) <= DENSITY_CELLS
            if (not integer or w >= 1) and fits:
                width = w
                break
        exponent += 1
    start = float(grid_points(math.floor(low / width) * width, width))
    cells = max(int(math.ceil((top - start) / width)), 1)
    return float(start), float(width), cells


def uniform_bin_edges(spec: ColumnSpec, low: float, high: float) -> np.ndarray:
    """The edges of the uniform bins the encoding cuts [low, high] into (`domain.uniform_bins`,
    `domain.uniform_edges`)."""
    low, high, bins = uniform_bins(spec, low, high)
    return uniform_edges(low, high, bins, integer_valued(spec))


def quantile_edges(spec: ColumnSpec, bounds: tuple[float, float], pieces: tuple) -> tuple:
    """The bin edges of a `binning: quantile` column: equal-mass bins cut at the cumulative mass
    of the bounds' noisy part counts (`domain.equal_mass_edges`; post-processing), or, for an
    integer column with no more values than bins, None: uniform bins, one per integer."""
    low, high = bounds
    bins = bin_count(spec)
    if integer_valued(spec) and math.floor(high) - math.ceil(low) + 1 <= bins:
        return None
    integer = integer_valued(spec)
    grid = None if integer else density_grid(low, high, False)[:2]
    return equal_mass_edges(pieces, low, high, bins, integer, grid)


def merge_density(fine: tuple, coarse: tuple, edges: np.ndarray) -> tuple:
    """The grid density's pieces in the bins it shapes, the bounds' coarser density (cut at the
    bin edges) in the bins it leaves flat (post-processing of two released densities)."""
    def bin_of(a: float, b: float) -> int:
        return int(np.clip(np.searchsorted(edges, (a + b) / 2, side="right") - 1, 0,
                           edges.size - 2))

    shaped = {bin_of(a, b) for a, b, _ in fine}
    kept = []
    for a, b, count in coarse:
        for j in range(edges.size - 1):
            lo, hi = max(a, edges[j]), min(b, edges[j + 1])
            if hi > lo and j not in shaped:
                kept.append((float(lo), float(hi), float(count) * (hi - lo) / (b - a)))
    return tuple(sorted(tuple(fine) + tuple(kept)))


def grid_density(hist: np.ndarray, name: str, spec: ColumnSpec, low: float, high: float,
                 rho: float, charge, edges=None) -> tuple[tuple[float, float, float], ...]:
    """The column's density inside [low, high] from the exact histogram over
    `density_grid(low, high)` (`exact_aggregates`), with Gaussian noise (rho); the rest is
    post-processing of the noisy counts. Per bin of the encoding (`edges`, else
    `uniform_bin_edges`),
    the noisy counts of the cells whose middle falls in it are compared with a flat bin: when
    sum (c - mean)^2 / sigma^2 stays below the chi-square bound (m - 1) + DENSITY_FLAT_Z
    sqrt(2 (m - 1)) for m cells, the bin gets no piece (decoded uniformly: noise alone would
    make a flat bin lumpy); otherwise its cells below DENSITY_Z sigma are zeroed and the others
    kept, cut at the bin's edges. A heap, a kept cell of more than one value inside one bin
    whose neighbours' noisy counts (zeroed or not) are each below HEAP_RATIO of its own, is a
    point piece (g, g, count) at its grid point g: such a heap is most often one repeated value
    on a round number (a table width of 54.0, a carat of 0.30), and drawn uniformly over the
    cell it spread into values the source never holds, across any cut near it
    (docs/decisions/0009-dp-preprocessing.md). The noisy counts, not the kept ones: at a
    small budget a dense range keeps few cells, and one kept among zeroed neighbours of about
    its own count is no heap; the ratio, not "no neighbour above noise", so that an empty
    neighbour kept by noise (2% of empty cells pass DENSITY_Z) does not spread a heap.
    Returns (low, high, count) pieces, zero cells left out."""
    integer = integer_valued(spec)
    start, width, cells = density_grid(low, high, integer)
    noisy, spend = gaussian_counts(np.asarray(hist, dtype=np.int64), rho)
    charge(spend, column=name, purpose="density inside bins (grid histogram)", cells=cells)
    sigma = spend.scale
    edges = uniform_bin_edges(spec, low, high) if edges is None else np.asarray(edges, float)
    a0 = grid_points(start + np.arange(cells) * width, width)
    b0 = grid_points(start + (np.arange(cells) + 1) * width, width)
    a, b = np.clip(a0, edges[0], edges[-1]), np.clip(b0, edges[0], edges[-1])
    inside = b > a
    bins = edges.size - 1
    of = np.clip(np.searchsorted(edges, (a + b) / 2, side="right") - 1, 0, bins - 1)
    m = np.bincount(of[inside], minlength=bins).astype(float)
    total = np.bincount(of[inside], weights=noisy[inside], minlength=bins)
    square = np.bincount(of[inside], weights=noisy[inside] ** 2, minlength=bins)
    mean = total / np.maximum(m, 1)
    spread = (square - m * mean ** 2) / sigma ** 2  # sum (c - mean)^2 / sigma^2
    dof = np.maximum(m - 1, 0)
    shaped = (m >= 2) & (spread > dof + DENSITY_FLAT_Z * np.sqrt(2 * dof))
    kept = inside & (noisy >= DENSITY_Z * sigma)
    near = np.where(inside, noisy, 0.0)
    neighbour = np.maximum(np.r_[0.0, near[:-1]], np.r_[near[1:], 0.0])
    alone = kept & (neighbour < HEAP_RATIO * noisy)  # a heap (0009-dp-preprocessing.md)
    alone &= (a == a0) & (b == b0)  # a whole cell: its start is a grid point
    alone &= not (integer and width == 1)  # a cell of one integer is a point already
    pieces = []
    for k in np.flatnonzero(kept):
        first = max(int(np.searchsorted(edges, a[k], side="right")) - 1, 0)
        for j in range(first, bins):
            lo, hi = max(a[k], edges[j]), min(b[k], edges[j + 1])
            if lo >= b[k]:
                break
            if hi > lo and shaped[j]:
                whole = alone[k] and lo == a[k] and hi == b[k]
                pieces.append((float(lo), float(lo if whole else hi),
                               float(noisy[k] * (hi - lo) / (b[k] - a[k]))))
    return tuple(pieces)


def gap_density(hist: np.ndarray, name: str, rho: float, charge
                ) -> tuple[tuple[float, float, float], ...]:
    """How far a later timestamp falls after its earlier one (`gap_pairs`): the exact histogram
    of later - earlier over the public GAP_EDGES buckets (`exact_aggregates`; bucket 0 below 0,
    the last from GAP_EDGES[-1] on), with Gaussian noise (rho; one row moves one count by one).
    Post-processing: the buckets of gaps from 0 to GAP_EDGES[-1] whose noisy count clears GAP_Z
    sigma, as (low, high, count) pieces in days; empty when none does. Decoding draws the later
    column inside its bin from this density shifted to the earlier value
    (`constraints.draw_gaps`): the pair keeps how far apart its values were, which bins a day or
    more wide lose (docs/decisions/0023-declared-constraints.md)."""
    noisy, spend = gaussian_counts(np.asarray(hist, dtype=np.int64), rho)
    charge(spend, column=name, purpose="gap after an earlier column (histogram)",
           cells=int(np.asarray(hist).size))
    kept = np.flatnonzero(noisy[1:-1] >= GAP_Z * spend.scale) + 1
    return tuple((float(GAP_EDGES[b - 1]), float(GAP_EDGES[b]), float(noisy[b])) for b in kept)


# ------------------------------------------------------------------------------ PrivTree

def privtree_lambda(epsilon: float, fanout: int = PRIVTREE_FANOUT) -> float:
    """Zhang et al. 2016, Theorem 1: lambda = (2 beta - 1) / ((beta - 1) epsilon)."""
    return (2 * fanout - 1) / ((fanout - 1) * epsilon)


def privtree_epsilon(scale: float, fanout: int = PRIVTREE_FANOUT) -> float:
    """The privacy map of PrivTree: the epsilon (pure DP) of a tree built with Laplace(scale)."""
    return (2 * fanout - 1) / ((fanout - 1) * scale)


@dataclass(frozen=True)
class TreeNode:
    """A PrivTree node: the cells [first, stop) of the exact histogram, at `depth`."""

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


def privtree_cell_width(low: float, high: float, integer: bool) -> float:
    """The width of PrivTree's cells: PRIVTREE_CELLS of them span [low, high] (integers: the
    root is [low, high + 1)); values outside are clamped into the outer cells."""
    top = high + 1 if integer else high
    return (top - low) / PRIVTREE_CELLS


def privtree_edges(counts: np.ndarray, name: str, spec: ColumnSpec, low: float, high: float,
                   rho: float, charge) -> tuple[float, ...]:
    """Adaptive bin edges [low, ..., high] from PrivTree (0009-dp-preprocessing.md) over the
    exact cell histogram `counts` (`exact_aggregates`)."""
    integer = integer_valued(spec)
    width = privtree_cell_width(low, high, integer)
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


def noisy_row_count(con, relation: str, rho: float, charge) -> float:
    """The relation's row count with Gaussian noise (a histogram of one cell: sensitivity 1),
    charged with OpenDP's map; clipped at 0 (post-processing)."""
    exact = as_engine(con).fetchnumpy(sql("count_rows", source=relation))
    noisy, spend = gaussian_counts(np.array([int(next(iter(exact.values()))[0])]), rho)
    charge(spend, purpose="noisy row count (sets the preprocessing share)")
    return max(float(noisy[0]), 0.0)


def prepare_encoded_view(con: duckdb.DuckDBPyConnection, spec: DatasetSpec, dataset: str,
                         base_dir: Path, view: str, rho=0.0, delta_extra: float = 0.0,
                         charge=None, count_rho: float = 0.0,
                         note: Callable[[Fallbacks], None] | None = None,
                         log=None) -> EncodingPlan:
    """Check the source's schema against the spec, count what its values map to (`note` gets
    the private `Fallbacks`, for the owner's log: no value is refused), learn the undeclared
    parts of the domain with DP (`preprocess`, spending `rho` and `delta_extra` through
    `charge`), and create the encoded view (a view, not a copy). The schema check runs before
    any budget is spent. With `count_rho`,
    a noisy row count (`noisy_row_count`) is drawn first, `rho` is then a function of it (the
    rho the domains get: `budget.DatasetBudget.domains_rho`), and the plan records it
    (`EncodingPlan.noisy_rows`, for the later stages' split). With a report
    holdout, all of it reads the training rows only (`training_relation`) and a second view,
    `<view>_holdout`, encodes the held-out rows for the owner-only utility report. `log` gets
    the progress lines of `preprocess`."""
    relation = training_relation(spec, base_dir, dataset)
    types = describe_source(con, relation, dataset, spec.entry)
    try:
        check_columns(spec.columns, types)
    except SchemaError as e:
        # the declared names are the spec's; the source's names stay private (a CSV read with
        # `header: true` that has none would make them a row of data)
        missing = [c for c in spec.columns if c not in types]
        raise SourceError(f"dataset {dataset!r}: declared column(s) {missing} are not in the "
                          f"source; fix the column names of {spec.entry} (for a CSV, also "
                          "`header` and `columns`)", detail=str(e)) from None
    fallbacks = count_fallbacks(con, relation, spec.columns, dataset)
    if note is not None:
        note(fallbacks)
    rows = noisy_row_count(con, relation, count_rho, charge) if count_rho > 0 else None
    derived = preprocess(con, relation, spec.columns, rho(rows) if callable(rho) else rho,
                         delta_extra, charge, log, spec.declared_constraints)
    try:
        plan = build_plan(spec.columns, types, derived)
    except SchemaError as e:
        raise SchemaError(f"dataset {dataset!r}: {e}") from None
    if rows is not None:
        plan = replace(plan, noisy_rows=rows)
    schema = view.rsplit(".", 1)[0]
    engine = as_engine(con)
    if engine.copies:
        con.execute(sql("create_schema", schema=qualified(schema)))
    engine.create_view(view, sql("encode_view", view=engine.relation(view),
                                 expressions=encoded_columns(plan), source=relation))
    holdout = holdout_relation(spec, base_dir, dataset)
    if holdout is not None:
        con.execute(encode_view_sql(plan, view + "_holdout", holdout))
    return plan
