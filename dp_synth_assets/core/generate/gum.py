"""The `gum` engine: PrivSyn's Gradually Update Method.

Implements Zhang et al., "PrivSyn: Differentially Private Data Synthesis", USENIX Security 2021,
sections 5.2-5.3. `generate(domain, measurements, rows, seed, settings, log)` returns `rows`
records as integer code arrays (one per attribute, in domain order). It is pure numpy and reads
only the measurements (post-processing: no privacy cost); every random choice comes from one
`np.random.Generator(seed)`, so a seed fixes the output. The steps, the choices where the paper
leaves room and the cost estimate: docs/decisions/0019-generators.md, "As implemented: gum"."""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..domain import Clique
from ..measure import Measurement, make_consistent
from .base import Estimate, budget_text, within_budget

EXACT_SIGMA = 1e-6  # stands for sigma = 0 (an exact count) in the consistency weights
SECONDS_PER_ROW_MARGINAL_ITERATION = 2e-8  # one row, one marginal, one iteration, under load


@dataclass(frozen=True)
class GumSettings:
    """The schedule of `generate`: iterations, the step decay of the update rate alpha and the
    Duplicate share's linear rise."""

    iterations: int = 50          # update iterations (benchmark paper Table 6)
    alpha0: float = 0.3           # initial update rate alpha (PrivSyn footnote 1: alpha < 1)
    decay: float = 0.8            # k of the step decay alpha0 * k^floor(t/s)
    step: int = 10                # s of the step decay
    duplicate_start: float = 0.0  # share of additions made by Duplicate at the first iteration ...
    duplicate_end: float = 0.6    # ... rising linearly to this share at the last one
    order: str = "error"          # per iteration: "error" (largest first), "random", "fixed"
    nonnegative: str = "project"  # "project" (simplex projection) or "clip" negative cells
    consistency_rounds: int = 10  # rounds of make_consistent + non-negativity on the targets
    append: bool = True           # attribute appending (PrivSyn section 5.3)
    separate: bool = True         # separate and join (PrivSyn section 5.3)
    log_every: int = 5            # iterations between progress lines

    def __post_init__(self) -> None:
        checks = {
            "iterations >= 0": self.iterations >= 0,
            "0 < alpha0 <= 1": 0 < self.alpha0 <= 1,
            "0 < decay <= 1": 0 < self.decay <= 1,
            "step >= 1": self.step >= 1,
            "0 <= duplicate_start <= 1": 0 <= self.duplicate_start <= 1,
            "0 <= duplicate_end <= 1": 0 <= self.duplicate_end <= 1,
            "order in ('error', 'random', 'fixed')": self.order in ("error", "random", "fixed"),
            "nonnegative in ('project', 'clip')": self.nonnegative in ("project", "clip"),
            "consistency_rounds >= 0": self.consistency_rounds >= 0,
            "log_every >= 1": self.log_every >= 1,
        }
        broken = [rule for rule, ok in checks.items() if not ok]
        if broken:
            raise ValueError(f"GumSettings: {', '.join(broken)} does not hold ({self})")


@dataclass
class _Marginal:
    """One update target inside a component block: the block columns (attributes) it reads, its
    shape, and its target counts per cell (float, C order, summing to `rows`)."""
    clique: Clique
    positions: tuple[int, ...]
    shape: tuple[int, ...]
    target: np.ndarray

    @property
    def cells(self) -> int:
        return int(self.target.size)


def _code_dtype(domain: dict[str, int]) -> np.dtype:
    top = max(domain.values(), default=1) - 1
    for dtype in (np.int8, np.int16, np.int32):
        if top <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


# ---------------------------------------------------------------------------------------- targets

def _canonical(domain: dict[str, int], m: Measurement) -> tuple[Clique, np.ndarray]:
    """The measurement with its clique in domain order (axes transposed to match)."""
    unknown = [a for a in m.clique if a not in domain]
    if unknown:
        raise ValueError(f"measurement on {list(m.clique)}: attributes {unknown} are not in "
                         "the domain")
    if len(set(m.clique)) != len(m.clique):
        raise ValueError(f"measurement on {list(m.clique)} repeats an attribute")
    expected = tuple(domain[a] for a in m.clique)
    noisy = np.asarray(m.noisy, dtype=np.float64)
    if noisy.shape != expected:
        raise ValueError(f"measurement on {list(m.clique)} has shape {noisy.shape}, the domain "
                         f"says {expected}")
    rank = {a: i for i, a in enumerate(domain)}
    clique = tuple(sorted(m.clique, key=rank.__getitem__))
    return clique, np.transpose(noisy, [m.clique.index(a) for a in clique])


def combine(domain: dict[str, int], measurements: list[Measurement]) -> list[Measurement]:
    """One measurement per clique, in domain order: several measurements of one clique averaged
    with inverse-variance weights 1/sigma^2, with sigma = (sum 1/sigma^2)^(-1/2). A sigma of 0
    (an exact count) wins alone and keeps a tiny positive sigma for the consistency weights.
    Cliques with no attribute (a bare total) carry nothing for GUM and are dropped."""
    grouped: dict[Clique, list[tuple[float, np.ndarray]]] = {}
    for m in measurements:
        if not m.clique:
            continue
        clique, noisy = _canonical(domain, m)
        grouped.setdefault(clique, []).append((float(m.sigma), noisy))
    out = []
    for clique, items in grouped.items():
        exact = [x for s, x in items if not s > 0]
        if exact:
            out.append(Measurement(clique, np.mean(exact, axis=0), EXACT_SIGMA, 0.0))
            continue
        w = np.array([1.0 / s ** 2 for s, _ in items])
        values = np.tensordot(w, np.stack([x for _, x in items]), axes=1) / w.sum()
        out.append(Measurement(clique, values, float(w.sum() ** -0.5), 0.0))
    return out


def _nonnegative(m: Measurement, rule: str) -> Measurement:
    if rule == "clip":
        fixed = np.clip(m.noisy, 0.0, None)
    elif rule == "project":
        fixed = _project_simplex(m.noisy.ravel(), float(m.noisy.sum())).reshape(m.noisy.shape)
    else:
        raise ValueError(f"unknown nonnegative rule {rule!r}: 'project' or 'clip'")
    return Measurement(m.clique, fixed, m.sigma, m.rho)


def targets(domain: dict[str, int], measurements: list[Measurement], nonnegative: str = "project",
            rounds: int = 10) -> dict[Clique, np.ndarray]:
    """One probability array per measured clique (domain order): `combine`, make non-negative,
    then `rounds` times make consistent again (measure.make_consistent) and non-negative (PrivSyn's
    iterated consistency), and normalize; an all-zero result becomes uniform."""
    fixed = [_nonnegative(m, nonnegative) for m in combine(domain, measurements)]
    for _ in range(rounds if len(fixed) > 1 else 0):
        fixed = [_nonnegative(m, nonnegative) for m in make_consistent(fixed)]
    out = {}
    for m in fixed:
        mass = m.noisy.sum()
        out[m.clique] = m.noisy / mass if mass > 0 else np.full(m.noisy.shape, 1.0 / m.noisy.size)
    return out


def _project_simplex(v: np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection of v onto {x >= 0, sum x = total}: max(v - theta, 0) with the one
    theta that keeps the total (PrivSyn's norm_sub non-negativity); zeros if total <= 0."""
    if total <= 0:
        return np.zeros_like(v)
    u = np.sort(v)[::-1]
    excess = np.cumsum(u) - total
    k = np.arange(1, v.size + 1)
    last = int(np.flatnonzero(u - excess / k > 0)[-1])
    return np.maximum(v - excess[last] / (last + 1), 0.0)


# --------------------------------------------------------------------------------------- rounding

def _largest_remainder(expected: np.ndarray, totals: np.ndarray,
                       rng: np.random.Generator) -> np.ndarray:
    """Integer counts per row of `expected` (groups x values, each row summing to its total):
    floors plus one for the largest remainders (ties broken at random), so each row sums to its
    total exactly and every count is within 1 of its expectation."""
    floors = np.floor(expected)
    short = np.rint(totals - floors.sum(axis=1)).astype(np.int64)
    remainder = expected - floors + rng.random(expected.shape) * 1e-9
    order = np.argsort(-remainder, axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(expected.shape[1]), order.shape),
                      axis=1)
    return floors.astype(np.int64) + (ranks < short[:, None])


def _systematic(values: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """Unbiased integer rounding with an exact sum: systematic sampling along the cumulative sum
    (one uniform offset). Each count is the floor or the ceiling of its value rescaled to `total`,
    with the value as its expectation, and the counts sum to `total`."""
    if values.size == 0 or total <= 0:
        return np.zeros(values.size, dtype=np.int64)
    cumulative = np.cumsum(values)
    cumulative *= total / cumulative[-1]
    edges = np.floor(cumulative + rng.random()).astype(np.int64)
    edges[-1] = total
    return np.diff(edges, prepend=0)


def _draw_column(p: np.ndarray, rows: int, rng: np.random.Generator, dtype: np.dtype) -> np.ndarray:
    """`rows` codes with counts as close to rows * p as integers allow, in random order."""
    counts = _largest_remainder(rows * p[None, :], np.array([rows]), rng)[0]
    return rng.permutation(np.repeat(np.arange(p.size, dtype=dtype), counts))


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """concatenate(arange(k) for k in lengths), without a Python loop."""
    ends = np.cumsum(lengths)
    return np.arange(ends[-1] if ends.size else 0) - np.repeat(ends - lengths, lengths)


# -------------------------------------------------------------------------------------- the update

def _keys(block: np.ndarray, m: _Marginal) -> np.ndarray:
    """The packed cell index (C order over the clique's shape) of every row; block is rows x
    attributes."""
    key = block[:, m.positions[0]].astype(np.int64)
    for pos, size in zip(m.positions[1:], m.shape[1:]):
        key *= size
        key += block[:, pos]
    return key


def _error(block: np.ndarray, m: _Marginal) -> float:
    counts = np.bincount(_keys(block, m), minlength=m.cells)
    return float(np.abs(counts - m.target).sum() / block.shape[0])


def _beta(over_excess: np.ndarray, over_counts: np.ndarray, total: float) -> float:
    """The beta with sum_j min(d_j, beta * ns_j) = total over the over-counted cells (d_j their
    excess ns_j - nt_j): the piecewise linear sum evaluated at each breakpoint d_j / ns_j."""
    ratio = over_excess / over_counts
    order = np.argsort(ratio)
    ratio, excess, counts = ratio[order], over_excess[order], over_counts[order]
    removed_below = np.concatenate(([0.0], np.cumsum(excess)))    # cells already fully removed
    counts_above = counts.sum() - np.concatenate(([0.0], np.cumsum(counts)))
    at_break = removed_below[1:] + ratio * counts_above[1:]  # f(ratio_k)
    k = int(np.searchsorted(at_break, total))
    if k >= ratio.size:
        return float(ratio[-1])
    return float((total - removed_below[k]) / counts_above[k])


def _pick(key: np.ndarray, need: np.ndarray, ns: np.ndarray,
          rng: np.random.Generator) -> np.ndarray:
    """need[c] distinct rows drawn uniformly from each cell c (need <= ns), grouped by cell in
    ascending order. Without a full shuffle: a Bernoulli pre-selection keeps each row of cell c
    with probability (k + 4 sqrt(k) + 8) / ns_c (k = need[c]), a cell that gets fewer than k is
    taken whole, and k rows are then drawn from what was kept by a shuffle and a stable sort.
    Given its size, the pre-selection is a uniform subset of the cell, so the k rows are too."""
    cells = np.flatnonzero(need)
    if cells.size == 0:
        return np.zeros(0, dtype=np.int64)
    k = need[cells]
    keep = np.zeros(need.size, dtype=np.float32)
    keep[cells] = np.minimum(1.0, (k + 4.0 * np.sqrt(k) + 8.0) / ns[cells])
    chosen = np.flatnonzero(rng.random(key.size, dtype=np.float32) < keep[key])
    short = np.bincount(key[chosen], minlength=need.size) < need
    if short.any():
        chosen = np.concatenate([chosen[~short[key[chosen]]], np.flatnonzero(short[key])])
    chosen = rng.permutation(chosen)
    ck = key[chosen]
    chosen = chosen[np.argsort(ck.astype(np.uint16) if need.size <= 65536 else ck, kind="stable")]
    got = np.bincount(ck, minlength=need.size)
    return chosen[np.repeat((np.cumsum(got) - got)[cells], k) + _ranges(k)]


def _update(block: np.ndarray, m: _Marginal, alpha: float, duplicate: float,
            rng: np.random.Generator) -> None:
    """One GUM step for one marginal (PrivSyn section 5.2), in place on the component block."""
    key = _keys(block, m)
    ns = np.bincount(key, minlength=m.cells)
    nt = m.target
    gap = nt - ns
    under = np.flatnonzero(gap > 0)
    over = np.flatnonzero(gap < 0)
    if under.size == 0 or over.size == 0:
        return
    ns_under = ns[under]
    # under-counted cells gain min(nt - ns, alpha ns); an empty cell gains alpha nt
    gain = np.where(ns_under > 0, np.minimum(gap[under], alpha * ns_under), alpha * nt[under])
    excess = -gap[over]
    total = min(int(round(gain.sum())), int(math.floor(excess.sum())))
    if total <= 0:
        return
    # over-counted cells lose min(ns - nt, beta ns), beta solved so that the losses match
    beta = _beta(excess, ns[over].astype(np.float64), float(total))
    removed = np.minimum(_systematic(np.minimum(excess, beta * ns[over]), total, rng), ns[over])
    total = int(removed.sum())
    added = _systematic(gain, total, rng)
    # of each cell's additions, a Binomial(added, share) number are Duplicates of its own rows
    # (never more than the cell holds); an empty cell can only be filled by Replace
    copies = np.zeros_like(added)
    occupied = ns_under > 0
    if duplicate > 0:
        copies[occupied] = np.minimum(rng.binomial(added[occupied], duplicate), ns_under[occupied])
    need = np.zeros(m.cells, dtype=np.int64)
    need[over] = removed
    need[under] = copies
    picked = _pick(key, need, ns, rng)
    in_over = gap[key[picked]] < 0
    slots = rng.permutation(picked[in_over])   # the removed rows' places, in random order
    sources = picked[~in_over]                 # rows to copy, copies[i] from under cell i
    # Duplicate: the whole component row is copied; Replace: the removed row keeps its other
    # attributes and takes the target cell's values on the marginal's attributes
    block[slots[:sources.size]] = block[sources]
    values = np.unravel_index(np.repeat(under, added - copies), m.shape)
    rest = slots[sources.size:]
    for pos, v in zip(m.positions, values):
        block[rest, pos] = v


# ------------------------------------------------------------------------------------- the graph

def _plan(domain: dict[str, int], multi: list[Clique], append: bool, separate: bool
          ) -> tuple[list[list[Clique]], dict[str, Clique], list[str]]:
    """Attribute appending and separate-and-join (PrivSyn section 5.3). Returns the components
    (lists of marginals to update together), the appended attributes with their one 2-way
    marginal, and the attributes in no updated marginal that are drawn from their 1-way target."""
    degree = {a: 0 for a in domain}
    for c in multi:
        for a in c:
            degree[a] += 1
    appended: dict[str, Clique] = {}
    if append:
        for c in multi:
            if len(c) != 2:
                continue
            a, b = c
            if degree[b] == 1 and b not in appended:
                appended[b] = c  # b is filled from a; if a is also degree 1, a is drawn first
            elif degree[a] == 1 and a not in appended:
                appended[a] = c
    kept = [c for c in multi if not any(appended.get(a) == c for a in c)]
    updated = {a for c in kept for a in c}
    free = [a for a in domain if a not in updated and a not in appended]
    if not kept:
        return [], appended, free
    if not separate:
        return [kept], appended, free
    parent = {a: a for a in updated}

    def root(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for c in kept:
        for a in c[1:]:
            ra, rb = root(c[0]), root(a)
            if ra != rb:
                parent[rb] = ra
    components: dict[str, list[Clique]] = {}
    for c in kept:
        components.setdefault(root(c[0]), []).append(c)
    return list(components.values()), appended, free


def _fill_conditionally(partner: np.ndarray, joint: np.ndarray, fallback: np.ndarray,
                        rng: np.random.Generator, dtype: np.dtype) -> np.ndarray:
    """Codes of an appended attribute given its partner's codes: for each partner value y with
    m_y rows, counts m_y * p(x | y) from the 2-way target `joint` (partner x child), rounded per
    y by largest remainder, spread over those rows in random order."""
    kp, kc = joint.shape
    m = np.bincount(partner, minlength=kp)
    mass = joint.sum(axis=1, keepdims=True)
    conditional = np.where(mass > 0, joint / np.where(mass > 0, mass, 1.0), fallback[None, :])
    counts = _largest_remainder(m[:, None] * conditional, m, rng)
    values = np.repeat(np.tile(np.arange(kc, dtype=dtype), kp), counts.ravel())
    perm = rng.permutation(partner.size)
    grouped = perm[np.argsort(partner[perm], kind="stable")]
    out = np.empty(partner.size, dtype=dtype)
    out[grouped] = values
    return out


# -------------------------------------------------------------------------------------- generate

def update_rate(settings: GumSettings, t: int) -> float:
    """Step decay (PrivSyn section 5.3): alpha = alpha0 * k^floor(t / s), t counted from 0."""
    return settings.alpha0 * settings.decay ** (t // settings.step)


def duplicate_share(settings: GumSettings, t: int) -> float:
    """The share of additions made by Duplicate at iteration t: a linear ramp from
    duplicate_start (first iteration) to duplicate_end (last)."""
    frac = t / max(settings.iterations - 1, 1)
    return settings.duplicate_start + (settings.duplicate_end - settings.duplicate_start) * frac


def generate(domain: dict[str, int], measurements: list[Measurement], rows: int,
             seed: int | None, settings: GumSettings = GumSettings(),
             log: Callable[[str], None] | None = None) -> dict[str, np.ndarray]:
    """rows synthetic records as integer code arrays (one per attribute in `domain`, in domain
    order, values 0..domain[a]-1, dtype int64 or smaller), fitted to the measurements."""
    rows = int(rows)
    if rows < 0:
        raise ValueError(f"rows must be non-negative, got {rows}")
    rng = np.random.default_rng(seed)
    dtype = _code_dtype(domain)
    probs = targets(domain, measurements, settings.nonnegative, settings.consistency_rounds)
    one_way = {}
    for a in domain:
        if (a,) in probs:
            one_way[a] = probs[(a,)]
        else:  # no 1-way measurement: the projection of a measured clique, else uniform
            holder = next((c for c in probs if a in c), None)
            if holder is None:
                one_way[a] = np.full(domain[a], 1.0 / domain[a])
            else:
                axes = tuple(i for i, b in enumerate(holder) if b != a)
                one_way[a] = probs[holder].sum(axis=axes)
    if rows == 0:
        return {a: np.zeros(0, dtype=dtype) for a in domain}

    multi = [c for c in probs if len(c) > 1]
    components, appended, free = _plan(domain, multi, settings.append, settings.separate)
    out: dict[str, np.ndarray] = {}
    for a in free:
        out[a] = _draw_column(one_way[a], rows, rng, dtype)

    blocks, marginals = [], []
    for comp in components:
        attrs = [a for a in domain if any(a in c for c in comp)]
        index = {a: i for i, a in enumerate(attrs)}
        block = np.empty((rows, len(attrs)), dtype=dtype)  # row-major: Duplicate copies rows
        for a in attrs:
            block[:, index[a]] = _draw_column(one_way[a], rows, rng, dtype)
        ms = []
        for c in comp:
            shape = tuple(domain[a] for a in c)
            ms.append(_Marginal(c, tuple(index[a] for a in c), shape,
                                probs[c].ravel() * rows))
        blocks.append((attrs, block))
        marginals.append(ms)

    total_marginals = sum(len(ms) for ms in marginals)
    if log is not None:
        log(f"gum: {rows:,} rows, {len(domain)} attributes, {total_marginals} marginals updated in "
            f"{len(components)} component(s), {len(appended)} appended, {len(free)} drawn alone")
    iterations = settings.iterations if total_marginals else 0
    for t in range(iterations):
        alpha = update_rate(settings, t)
        share = duplicate_share(settings, t)
        for (_, block), ms in zip(blocks, marginals):
            if settings.order == "error":
                errors = [_error(block, m) for m in ms]
                ordered = [ms[i] for i in np.argsort(errors, kind="stable")[::-1]]
            elif settings.order == "random":
                ordered = [ms[i] for i in rng.permutation(len(ms))]
            else:
                ordered = ms
            for m in ordered:
                _update(block, m, alpha, share, rng)
        if log is not None and ((t + 1) % settings.log_every == 0 or t + 1 == iterations):
            errors = [_error(block, m) for (_, block), ms in zip(blocks, marginals) for m in ms]
            log(f"gum iteration {t + 1}/{iterations}: mean L1 error {np.mean(errors):.4f} "
                f"(alpha {alpha:.3f}, duplicate share {share:.2f})")

    while blocks:
        attrs, block = blocks.pop()
        for i, a in enumerate(attrs):
            out[a] = np.ascontiguousarray(block[:, i])
        del block
    # appended attributes last: a partner is never itself appended (of an isolated pair only one
    # end is; the other was drawn in `free`), so every partner is already in `out`
    for a, c in appended.items():
        partner = c[0] if c[1] == a else c[1]
        joint = probs[c] if c[0] == partner else probs[c].T
        out[a] = _fill_conditionally(out[partner], joint, one_way[a], rng, dtype)
    return {a: out[a] for a in domain}


# ---- the engine contract (see `generate`)


@dataclass(frozen=True)
class GumModel:
    """What `sample` needs: the domain, the consistent noisy measurements and the iterations."""
    domain: dict[str, int]
    measurements: tuple[Measurement, ...]
    iterations: int


MODEL = GumModel


def estimate(domain: dict[str, int], measurements: list[Measurement], rows: int, settings,
             cores: int | None = None) -> Estimate:
    """See the 0019-generators.md: rows x marginals x iterations, never the joint domain."""
    multi = [m for m in measurements if len(m.clique) > 1]
    seconds = (SECONDS_PER_ROW_MARGINAL_ITERATION * rows * max(len(multi), 1)
               * settings.gum_iterations)
    # a byte per row and attribute plus temporaries (bench/results/engines.md)
    memory = (rows * (len(domain) + 64) + sum(m.cells for m in measurements) * 8 * 3) / 2**20
    return Estimate("gum", within_budget(seconds, memory, settings), seconds, memory,
                    f"{rows:,} rows x {len(multi)} marginals x {settings.gum_iterations} "
                    f"iterations {budget_text(settings)}")


def fit_unit(unit: list[int], domain: dict[str, int], measurements: list[Measurement],
             noisy_total: float, settings, log=None) -> GumModel:
    """The engine contract's `fit_unit`: fitting is storing the measurements (the updates run
    in `sample`), so the model is the measurements and `model.gum_iterations`."""
    return GumModel(dict(domain), tuple(measurements), settings.gum_iterations)


def sample(model: GumModel, rows: int, seed: int | None, log=None) -> dict[str, np.ndarray]:
    """The engine contract's `sample`: `rows` records from `generate`; one `seed` gives the
    same rows."""
    return generate(model.domain, list(model.measurements), rows, seed,
                    GumSettings(iterations=model.iterations), log=log)


def dumps(model: GumModel) -> bytes:
    """One .npz: a JSON header (engine, domain, iterations, each measurement's clique, sigma and
    rho) and each measurement's noisy counts."""
    import io
    import json

    meta = {"engine": "gum", "domain": model.domain, "iterations": model.iterations,
            "measurements": [{k: v for k, v in m.to_dict().items() if k != "noisy"}
                             for m in model.measurements]}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, meta=np.array(json.dumps(meta)),
                        **{f"noisy_{i}": m.noisy for i, m in enumerate(model.measurements)})
    return buffer.getvalue()


def loads(data: bytes) -> GumModel:
    """The model `dumps` wrote (the engine contract's `loads`)."""
    import io
    import json

    with np.load(io.BytesIO(data)) as arrays:
        meta = json.loads(str(arrays["meta"]))
        measurements = tuple(Measurement(tuple(m["clique"]), arrays[f"noisy_{i}"], m["sigma"],
                                         m["rho"]) for i, m in enumerate(meta["measurements"]))
    return GumModel({a: int(k) for a, k in meta["domain"].items()}, measurements,
                    int(meta["iterations"]))
