"""Measurements: noisy marginals, the optimal budget split, and the consistency step.

A `Measurement` is one noisy marginal: the clique, the noisy count array (shaped by the clique's
domain) and the Gaussian noise scale sigma that produced it (and its rho). Measurements are
public: everything downstream of them is post-processing. `measure_marginal` is the one
mechanism site of a noisy marginal (every selection method and the `measurements` stage draw
through it). `optimal_split` is ABSyn Eq. 10-11 (PrivSyn section 4.2); `make_consistent` is
ABSyn section VI.A.2.b."""

import math
from dataclasses import dataclass, field

import numpy as np

from .domain import Clique
from .privacy import gaussian_counts


Groups = tuple  # per clique attribute: None (its codes) or a tuple mapping each code to a group


@dataclass(frozen=True)
class Measurement:
    """`groups`, when set, makes this a coarse measurement: the noisy marginal of the clique
    after each attribute's codes are mapped to groups (`groups[i]` for the i-th attribute: a
    tuple giving each code's group 0..g-1, or None to keep the codes), i.e. of a linear map of the
    fine marginal (`coarsen`). `noisy` is shaped by the group counts."""

    clique: Clique
    noisy: np.ndarray = field(repr=False)
    sigma: float
    rho: float
    groups: Groups | None = None

    @property
    def cells(self) -> int:
        return int(self.noisy.size)

    def to_dict(self) -> dict:
        out = {"clique": list(self.clique), "shape": list(self.noisy.shape), "sigma": self.sigma,
               "rho": self.rho, "noisy": self.noisy.ravel().round(6).tolist()}
        if self.groups is not None:
            out["groups"] = [None if g is None else list(g) for g in self.groups]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Measurement":
        noisy = np.asarray(d["noisy"], dtype=np.float64).reshape(d["shape"])
        groups = d.get("groups")
        if groups is not None:
            groups = tuple(None if g is None else tuple(int(x) for x in g) for g in groups)
        return cls(tuple(d["clique"]), noisy, float(d["sigma"]), float(d["rho"]), groups)


def coarsen(fine: np.ndarray, groups: Groups | None) -> np.ndarray:
    """The fine array (one axis per clique attribute) summed within each attribute's groups: the
    linear map a coarse measurement observes. One row moves one fine cell, hence one coarse cell,
    by 1: the L2 sensitivity stays 1.

        >>> coarsen(np.array([[1, 2, 3], [4, 5, 6]]), (None, (0, 0, 1))).tolist()
        [[3, 3], [9, 6]]
    """
    out = np.asarray(fine)
    for axis, g in enumerate(groups or ()):
        if g is None:
            continue
        index = np.asarray(g, dtype=np.int64)
        moved = np.moveaxis(out, axis, 0)
        summed = np.zeros((int(index.max()) + 1, *moved.shape[1:]), dtype=moved.dtype)
        np.add.at(summed, index, moved)
        out = np.moveaxis(summed, 0, axis)
    return out


def expand(coarse: np.ndarray, groups: Groups | None) -> np.ndarray:
    """The adjoint of `coarsen`: each fine cell takes the value of its coarse cell."""
    out = np.asarray(coarse)
    for axis, g in enumerate(groups or ()):
        if g is not None:
            out = np.take(out, np.asarray(g, dtype=np.int64), axis=axis)
    return out


def adjacent_groups(one_way: np.ndarray, groups: int) -> tuple[int, ...]:
    """A public grouping of one attribute's codes (each code's group, 0, 1, ...) from `one_way`,
    a noisy 1-way marginal (negatives read as 0): a code holding at least 1/`groups` of the mass
    is a group of its own; the codes between two such codes are cut into runs of adjacent codes,
    each closed once it holds 1/`groups` of the mass, a last run of under half that joining the
    run before it in the same stretch. A function of the public noisy marginal only."""
    p = np.clip(np.asarray(one_way, dtype=np.float64), 0.0, None)
    p = p / p.sum() if p.sum() > 0 else np.full(p.size, 1.0 / max(p.size, 1))
    target = 1.0 / groups
    labels = np.empty(p.size, dtype=np.int64)
    current, mass, run_start = -1, 0.0, True  # run_start: the next light code opens a run
    last_run_mass, last_run_label = None, None
    for i, share in enumerate(p):
        if share >= target:
            current, run_start = current + 1, True
            labels[i] = current
            last_run_mass = None
            continue
        if run_start:
            current, mass, run_start = current + 1, 0.0, False
        labels[i] = current
        mass += share
        nxt_heavy = i + 1 >= p.size or p[i + 1] >= target
        if mass >= target or nxt_heavy:
            if mass < target / 2 and last_run_mass is not None and last_run_label == current - 1:
                labels[labels == current] = current - 1  # too light: join the run before
                current -= 1
            last_run_mass, last_run_label = mass, current
            run_start = True
    return tuple(int(x) for x in labels)


def clique_size(clique: Clique, domain: dict[str, int]) -> int:
    """The number of cells of `clique`'s marginal: the product of its attributes' code counts."""
    return math.prod(domain[a] for a in clique)


def coarsened_size(clique: Clique, domain: dict[str, int], groups: Groups | None) -> int:
    """Cells of the clique's marginal measured on `groups` (`clique_size` when None)."""
    if groups is None:
        return clique_size(clique, domain)
    return math.prod(domain[a] if g is None else max(g) + 1 for a, g in zip(clique, groups))


def fine_columns(cliques, coarse: dict) -> set[str]:
    """The columns some clique of `cliques` measures on their own codes: a clique that `coarse`
    maps to groups (one per column, None for a column kept whole) holds its grouped columns
    only through their groups."""
    return {a for c in cliques for a, g in zip(c, coarse.get(c, (None,) * len(c))) if g is None}


def optimal_split(rho: float, sizes: list[int]) -> list[float]:
    """ABSyn Eq. 11: rho_i = rho c_i^(2/3) / sum_j c_j^(2/3), the split of `rho` over marginals
    of `sizes` cells that minimizes the expected l1 noise sum_i c_i sqrt(1 / (pi rho_i)).

        >>> optimal_split(1.0, [8, 64])  # 8^(2/3) = 4, 64^(2/3) = 16
        [0.2, 0.8]
    """
    weights = np.asarray(sizes, dtype=np.float64) ** (2.0 / 3.0)
    return (rho * weights / weights.sum()).tolist()


def expected_noise_error(rho: float, sizes: list[int]) -> float:
    """ABSyn Eq. 10 at the optimum: sum_i c_i sqrt(1/(pi rho_i)) = (sum c^(2/3))^(3/2) / sqrt(pi
    rho)."""
    if not sizes:
        return 0.0
    s = float(np.sum(np.asarray(sizes, dtype=np.float64) ** (2.0 / 3.0)))
    return s ** 1.5 / math.sqrt(math.pi * rho)


def fitted_noise_error(expected: np.ndarray, sigma) -> np.ndarray | float:
    """The expected l1 error, on the count scale, of a marginal whose counts are `expected`
    (>= 0) measured with Gaussian noise sigma and then fitted, modelled as the projection onto
    the nonnegative arrays of the same total: x_i = max(y_i - lam, 0), with lam >= 0 the
    threshold at which the expected mass sum_i E max(mu_i + z_i - lam, 0) equals sum_i mu_i.
    Per cell, with t = mu - lam and X ~ N(t, sigma^2): E|max(X, 0) - mu| = E|X - mu| + t
    Phi(-t / sigma) - sigma phi(t / sigma), E|X - mu| = sigma sqrt(2 / pi) exp(-lam^2 / 2
    sigma^2) + lam (2 Phi(lam / sigma) - 1). Dense cells (mu >> sigma) keep the raw sqrt(2 / pi)
    sigma; an empty cell costs sigma / sqrt(2 pi) at lam = 0 and less as lam grows, so a sparse
    marginal costs far less than its cells times the raw noise (docs/decisions/0013-absyn.md,
    step 4). `sigma` may be an array (> 0): one error per sigma."""
    mu = np.clip(np.asarray(expected, dtype=np.float64).ravel(), 0.0, None)[None, :]
    sigmas = np.atleast_1d(np.asarray(sigma, dtype=np.float64))[:, None]
    total = float(mu.sum())
    if total <= 0:
        out = mu.size * sigmas[:, 0] / math.sqrt(2 * math.pi)
    else:
        # Newton from lam = 0: the expected mass is convex and decreasing in lam (its slope is
        # -sum_i Phi(t_i)), so each step lands at or below the root and the steps converge
        lam = np.zeros_like(sigmas)
        for _ in range(30):
            t = (mu - lam) / sigmas
            cdf = _ndtr(t)
            excess = np.sum((mu - lam) * cdf + sigmas * _phi(t), axis=1, keepdims=True) - total
            step = excess / np.maximum(np.sum(cdf, axis=1, keepdims=True), 1e-300)
            lam = lam + step
            if np.all(step <= 1e-9 * (sigmas + lam)):
                break
        t = mu - lam
        folded = (sigmas * math.sqrt(2 / math.pi) * np.exp(-lam * lam / (2 * sigmas * sigmas))
                  + lam * (2 * _ndtr(lam / sigmas) - 1))
        out = np.sum(folded + t * _ndtr(-t / sigmas) - sigmas * _phi(t / sigmas), axis=1)
    return float(out[0]) if np.ndim(sigma) == 0 else out


def _phi(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _ndtr(x: np.ndarray) -> np.ndarray:
    """The standard normal CDF Phi, from Abramowitz and Stegun 7.1.26 (|error of erf| <= 1.5e-7;
    numpy has no erf, and scipy is no dependency)."""
    z = np.abs(x) / math.sqrt(2)
    k = 1.0 / (1.0 + 0.3275911 * z)
    poly = k * (0.254829592 + k * (-0.284496736 + k * (1.421413741 + k * (-1.453152027
                                                                       + k * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(x) * erf)


def measure_marginal(exact: np.ndarray, clique: Clique, rho: float, charge,
                     groups: Groups | None = None, **params) -> Measurement:
    """One noisy marginal: the discrete Gaussian mechanism at `rho` (`privacy.gaussian_counts`,
    an OpenDP measurement at L2 sensitivity 1: under add/remove-one-row neighbours a count array
    changes by 1 in one cell,
    docs/decisions/0001-privacy-unit.md), then `charge(spend, clique=[...], **params)`
    with the rho its privacy map reports, before anything is returned, then the `Measurement`.

    Guarantee: the returned measurement is rho-zCDP (sigma = 1 / sqrt(2 rho)) in `exact` and its
    `rho` is exactly what was charged. `exact` may be any integer count array over the clique's
    cells whose every row counts in one cell (ppsyn passes its partition-cell sums); its shape is
    kept. Every mechanism site that publishes a `Measurement` calls this; the preprocessing
    stage's category counts and DP-bounds histogram, which are not marginals of the encoded
    domain, call `gaussian_counts` directly (tests/test_measure_marginal.py checks both).
    With `groups`, the released array is `coarsen(exact, groups)`: still one cell per row, so the
    same mechanism at the same rho, charged the same."""
    if groups is not None:
        exact = coarsen(exact, groups)
    noisy, spend = gaussian_counts(exact, rho)
    charge(spend, clique=list(clique), **params)
    return Measurement(tuple(clique), noisy, spend.scale, spend.rho, groups)


def measure(exact: dict[Clique, np.ndarray], rhos: dict[Clique, float],
            charge, groups: dict[Clique, Groups] | None = None) -> list[Measurement]:
    """The noisy marginals of a measurement plan, each charged right after its draw.

    Args:
        exact: clique -> its exact count array (private).
        rhos: clique -> its rho; the plan's order is the order of the draws and charges.
        charge: records each draw's spend (`measure_marginal`).
        groups: clique -> the public grouping it is measured coarse on, when it is.

    Returns:
        One `Measurement` per clique of `rhos`, in its order.
    """
    groups = groups or {}
    return [measure_marginal(exact[clique], clique, rho, charge, groups.get(clique))
            for clique, rho in rhos.items()]


def refine(measurements: list[Measurement]) -> list[Measurement]:
    """Coarse measurements made fine, for estimators that take only fine marginals: each coarse
    cell's count is spread over its fine cells in proportion to the product of the attributes'
    1-way measurements in the list (clipped at 0; uniform when none or zero), the noise scale
    kept per fine cell as sigma / sqrt(fine cells in the coarse cell's smallest group product).
    Public post-processing; fine measurements pass unchanged."""
    one_way = {m.clique[0]: np.clip(m.noisy, 0.0, None) for m in measurements
               if len(m.clique) == 1 and m.groups is None}
    out = []
    for m in measurements:
        if m.groups is None:
            out.append(m)
            continue
        values = m.noisy
        shares = 1
        for axis, (attr, g) in enumerate(zip(m.clique, m.groups)):
            if g is None:
                continue
            index = np.asarray(g, dtype=np.int64)
            w = one_way.get(attr)
            w = np.ones(index.size) if w is None or w.size != index.size else w + 1e-9
            within = w / np.bincount(index, weights=w)[index]
            shape = [1] * values.ndim
            shape[axis] = -1
            values = np.take(values, index, axis=axis) * within.reshape(shape)
            shares *= int(np.bincount(index).min())
        out.append(Measurement(m.clique, values, m.sigma / math.sqrt(shares), m.rho))
    return out


def merge(a: Measurement, b: Measurement) -> Measurement:
    """Inverse-variance combination of two measurements of the same clique on the same groups:
    what one measurement at rho_a + rho_b would give (sigma^-2 add), as public post-processing."""
    wa, wb = 1 / a.sigma ** 2, 1 / b.sigma ** 2
    noisy = (wa * a.noisy + wb * b.noisy) / (wa + wb)
    sigma = math.sqrt(1 / (wa + wb))
    return Measurement(a.clique, noisy, sigma, 1 / (2 * sigma ** 2), a.groups)


def with_prior(m: Measurement, prior: tuple) -> Measurement:
    """A fine 1-way measurement with preprocessing's own noisy counts of some of its codes merged
    in, cell by cell, by inverse variance (`prior`: ((code, noisy count, sd), ...),
    `domain.category_prior`): the cell's value becomes (y / sigma^2 + c / sd^2) / (1 / sigma^2 +
    1 / sd^2), whose variance is below both. Public post-processing: both were released by
    charged mechanisms with independent noise.

    Choice: `sigma` stays the measurement's own, the largest noise sd of any cell (the cells no
    count covers, `other` and NULL, keep it), so everything that reads sigma (the estimator's
    weights, the guard, the checks' tolerances) stays conservative. A count near the cut that
    decided its code (discovery's threshold, the rare rule's) is biased by that selection:
    preprocessing passes only those PRIOR_MARGIN sds above it (`preprocess.unbiased_counts`)."""
    if not prior or len(m.clique) != 1 or m.groups is not None:
        return m
    noisy = m.noisy.astype(np.float64, copy=True)
    w = 1.0 / m.sigma ** 2
    for code, count, sd in prior:
        wp = 1.0 / float(sd) ** 2
        noisy[int(code)] = (w * noisy[int(code)] + wp * float(count)) / (w + wp)
    return Measurement(m.clique, noisy, m.sigma, m.rho, m.groups)


def merge_repeats(measurements: list[Measurement]) -> list[Measurement]:
    """One measurement per (clique, groups): repeats merged (`merge`) into the first's place, so
    a marginal measured twice (AIM's rounds, `auto`'s MST edges) is judged and fitted as one."""
    merged: dict[tuple, Measurement] = {}
    for m in measurements:
        key = (tuple(m.clique), None if m.groups is None else
               tuple(None if g is None else tuple(g) for g in m.groups))
        merged[key] = merge(merged[key], m) if key in merged else m
    return list(merged.values())


def noisy_total(measurements: list[Measurement]) -> float:
    """Inverse-variance weighted mean of the measurements' totals (each total has variance
    cells * sigma^2): the noisy row count."""
    weights = np.array([1.0 / (m.cells * m.sigma ** 2) for m in measurements])
    totals = np.array([m.noisy.sum() for m in measurements])
    return float((weights * totals).sum() / weights.sum())


def make_consistent(measurements: list[Measurement]) -> list[Measurement]:
    """ABSyn section VI.A.2.b consistency: the measurements made to agree on every shared
    attribute.

    First a common total (the inverse-variance weighted mean of every measurement's total),
    then, per attribute, the inverse-variance weighted combination of every measurement's
    projection onto it, pushed back into each measurement by spreading the difference evenly
    over the cells that project to each value. With a common total, adjusting one attribute
    leaves every other attribute's projections unchanged, so one pass suffices. A measurement
    coarse on an attribute does not vote on it; it takes the combined projection summed to its
    groups. Negative cells are kept (mbi's least-squares fit handles them; clipping would bias
    the estimate). Sigma is kept as drawn: the conservative scale for the estimator.

    Args:
        measurements: the noisy marginals, in any order.

    Returns:
        The same measurements, in the same order, consistent (post-processing: no spend).
    """
    if not measurements:
        return []
    total = noisy_total(measurements)
    arrays = [m.noisy + (total - m.noisy.sum()) / m.cells for m in measurements]
    attributes = sorted({a for m in measurements for a in m.clique})
    for attr in attributes:
        members = [i for i, m in enumerate(measurements) if attr in m.clique]
        fine = [i for i in members if _grouping(measurements[i], attr) is None]
        if len(members) < 2 or not fine:
            continue
        projections, weights = [], []
        for i in fine:
            m = measurements[i]
            axis = m.clique.index(attr)
            projections.append(_project(arrays[i], axis))
            # per-cell variance of the projection: sigma^2 times the cells summed into each value
            weights.append(1.0 / (m.sigma ** 2 * (m.cells // m.noisy.shape[axis])))
        weights = np.asarray(weights)
        combined = np.tensordot(weights, np.stack(projections), axes=1) / weights.sum()
        for i in members:
            # a measurement coarse on attr takes the combined projection summed to its groups
            m = measurements[i]
            axis = m.clique.index(attr)
            target = coarsen(combined, (_grouping(m, attr),))
            spread = m.cells // m.noisy.shape[axis]
            shape = [1] * len(m.clique)
            shape[axis] = -1
            arrays[i] = arrays[i] + ((target - _project(arrays[i], axis)) / spread).reshape(shape)
    return [Measurement(m.clique, a, m.sigma, m.rho, m.groups)
            for m, a in zip(measurements, arrays)]


def _grouping(m: Measurement, attr: str):
    return None if m.groups is None else m.groups[m.clique.index(attr)]


def _project(values: np.ndarray, axis: int) -> np.ndarray:
    others = tuple(k for k in range(values.ndim) if k != axis)
    return values.sum(axis=others) if others else values



@dataclass(frozen=True)
class Measurements:
    """The measure stage's public output and the fit's input: the consistent measurements
    (`make_consistent`) and the noisy row count they agree on (`noisy_total` of them). Stored as
    measurements.json: `{"noisy_total": ..., "measurements": [Measurement.to_dict(), ...]}`
    (noisy counts rounded to 6 decimals)."""

    measurements: tuple[Measurement, ...]
    noisy_total: float

    def to_dict(self) -> dict:
        return {"noisy_total": self.noisy_total,
                "measurements": [m.to_dict() for m in self.measurements]}

    @classmethod
    def from_dict(cls, d: dict) -> "Measurements":
        return cls(tuple(Measurement.from_dict(m) for m in d["measurements"]),
                   float(d["noisy_total"]))
