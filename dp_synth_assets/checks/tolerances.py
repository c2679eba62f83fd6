"""How far the synthetic table may be from the noisy measurements before a check warns.

Every bound is a function of public inputs only (a measurement's noisy counts and noise scale, the
noisy total, the requested rows, the fitted model). Each allows Z standard deviations of sampling
(a false alarm below about 1e-4 per cell under a normal approximation) plus FIT_SLACK for what the
estimator cannot reproduce exactly (clipped negative counts, a least-squares compromise between
overlapping measurements).
"""

import numpy as np

from ..core.measure import Measurement
from ..evaluation.fidelity import noisy_distribution

Z = 4.0           # sampling allowance in standard deviations (false alarm < 1e-4 per cell)
FIT_SLACK = 0.01  # allowance for the estimator not matching a measurement exactly


def tolerances(m: Measurement, noisy_total: float, rows: int) -> tuple[float, np.ndarray]:
    """TVD tolerance of a 1-way marginal and per-cell tolerances of its shares.

    A synthetic share differs from the noisy measured share by (a) sampling `rows` rows, standard
    deviation sqrt(p(1-p)/rows) per cell, allowed Z of them; (b) the estimator fitting a
    non-negative distribution to noisy counts: at most about the noise per cell, sigma / noisy_total
    (clipped negatives, least-squares compromise between overlapping measurements); (c) FIT_SLACK.
    """
    p = noisy_distribution(m)
    n = max(noisy_total, 1.0)
    per_cell = Z * np.sqrt(p * (1 - p) / rows) + m.sigma / n
    return float(0.5 * per_cell.sum() + FIT_SLACK), per_cell + FIT_SLACK / 2


def marginal_tolerance(m: Measurement, noisy_total: float, rows: int) -> float:
    """TVD tolerance of a measured marginal (`marginal_tvd`): a bound on the expected TVD plus Z
    standard deviations. Per cell, the synthetic share differs from the noisy share by sampling (sd
    s_i = sqrt(p_i (1 - p_i) / rows)) plus the measurement's noise (sd sigma / noisy_total; the
    model sits between the truth and the noisy counts); each |difference| has expectation at most
    sqrt(2/pi) (s_i + sigma / noisy_total) and variance at most s_i^2 + (sigma / noisy_total)^2, and
    the TVD is half their sum over the cells, a sum of many small terms that concentrates around its
    mean. FIT_SLACK covers what the estimator cannot reproduce (conflicting measurements)."""
    p = noisy_distribution(m).ravel()
    n = max(noisy_total, 1.0)
    s = np.sqrt(p * (1 - p) / max(rows, 1))
    noise = m.sigma / n
    mean = 0.5 * np.sqrt(2 / np.pi) * float((s + noise).sum())
    sd = 0.5 * float(np.sqrt((s ** 2 + noise ** 2).sum()))
    return mean + Z * sd + FIT_SLACK


def duplicate_bound(model, measurements: list[Measurement], rows: int) -> tuple[float, float, str]:
    """(allowed share of repeated rows, collision probability q, where q comes from).

    Two independent rows from a distribution P are equal with probability q = sum_x P(x)^2, so a
    sample of `rows` rows has C(rows, 2) q colliding pairs in expectation, and at most that many
    rows repeat an earlier one. For a clique-tree model (pgm, parallel_pgm) q is the model's own
    (`tree.collision_probability`); for gum, whose rows come from the updates rather than a
    distribution, q is bounded by the smallest sum_v p_C(v)^2 over the noisy measured marginals
    (merging cells only raises the collision probability, so every marginal's q bounds the joint
    one). Allowed: the expected pairs plus Z standard deviations (Poisson), plus Z rows."""
    from ..core.generate import GumModel
    from ..core.generate.tree import CliqueTree, collision_probability

    if isinstance(model, CliqueTree):
        q, source = collision_probability(model), "the fitted model"
    else:
        q = min(float((noisy_distribution(m) ** 2).sum()) for m in measurements)
        source = "the measured marginals (upper bound)" if isinstance(model, GumModel) else "marginals"
    pairs = rows * (rows - 1) / 2 * q
    allowed = (pairs + Z * np.sqrt(pairs) + Z) / max(rows, 1)
    return float(min(allowed, 1.0)), float(q), source
