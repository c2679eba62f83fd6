"""zCDP arithmetic and the mechanisms that touch private data
(docs/decisions/0002-zcdp-accounting.md).

Every mechanism is one function that takes a rho (or a noise scale) and returns `(answer, spend)`,
where the noise is drawn by an OpenDP measurement and `spend` is that measurement's privacy map
evaluated at the query's sensitivity: the charge is computed by the same object that adds the noise.

Conversions between (epsilon, delta) and rho use OpenDP's `make_zCDP_to_approxDP` profile, the tight
conversion private-pgm's `cdp_rho` also computes (Canonne, Kamath, Steinke 2020, Prop. 12); the
papers' rho + 2 sqrt(rho log 1/delta) bound is available as `accounting="paper"` for comparisons.
"""

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from .opendp_api import dp

dp.enable_features("contrib")

ACCOUNTING = ("tight", "paper")


@dataclass(frozen=True)
class Spend:
    """The privacy cost of one mechanism invocation, as its privacy map reports it."""

    mechanism: str
    rho: float
    delta_extra: float = 0.0
    sensitivity: float = 1.0
    scale: float = 0.0


def _check_epsilon_delta(epsilon: float, delta: float) -> None:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


@lru_cache(maxsize=None)
def _profile_at(rho: float):
    """The (epsilon, delta) privacy profile of a rho-zCDP mechanism, from OpenDP."""
    # A discrete Gaussian with scale 1/sqrt(2 rho) is exactly rho-zCDP at sensitivity 1; only its
    # privacy map is used here, no noise is drawn.
    scale = 1.0 / math.sqrt(2.0 * rho)
    meas = dp.c.make_zCDP_to_approxDP(
        dp.m.make_gaussian(dp.atom_domain(T="i64"), dp.absolute_distance(T="i64"), scale=scale)
    )
    return meas.map(1)


@lru_cache(maxsize=4096)
def epsilon_from_rho(rho: float, delta: float, accounting: str = "tight") -> float:
    """The epsilon at which rho-zCDP satisfies (epsilon, delta)-DP. Memoized: OpenDP's profile
    takes milliseconds, and the budget sensor converts the same spent and limit rho on every
    tick until a run spends."""
    if rho <= 0:
        return 0.0
    if accounting == "paper":
        return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))
    if accounting != "tight":
        raise ValueError(f"accounting must be one of {ACCOUNTING}, got {accounting!r}")
    return float(_profile_at(float(rho)).epsilon(delta))


@lru_cache(maxsize=4096)
def rho_from_epsilon_delta(epsilon: float, delta: float, accounting: str = "tight") -> float:
    """The largest rho whose zCDP guarantee implies (epsilon, delta)-DP.

    "paper": solve rho + 2 sqrt(rho log(1/delta)) = epsilon in closed form (ABSyn Thm 4).
    "tight": the largest float rho with epsilon_from_rho(rho) <= epsilon on OpenDP's profile
    (monotone in rho), so epsilon_from_rho(result) <= epsilon always holds: a bracket
    [low, high] with epsilon_from_rho(low) <= epsilon < epsilon_from_rho(high), narrowed by
    false position (Illinois) and then halved until low and high are adjacent floats. The
    bracket starts at the papers' rho (a looser conversion, so a lower bound) and at epsilon
    (epsilon(rho) >= rho). Memoized: a pure function of its arguments, asked once per dataset,
    stage split and check, often with one (epsilon, delta).

        >>> rho = rho_from_epsilon_delta(1.0, 1e-9)
        >>> round(epsilon_from_rho(rho, 1e-9), 6), epsilon_from_rho(rho, 1e-9) <= 1.0
        (1.0, True)
        >>> gaussian_scale(0.5)  # the noise sd of a count released at rho = 1/2
        1.0
    """
    _check_epsilon_delta(epsilon, delta)
    if accounting == "paper":
        log_term = math.log(1.0 / delta)
        root = -math.sqrt(log_term) + math.sqrt(log_term + epsilon)
        return root * root
    if accounting != "tight":
        raise ValueError(f"accounting must be one of {ACCOUNTING}, got {accounting!r}")

    def excess(rho: float) -> float:
        return epsilon_from_rho(rho, delta) - epsilon

    low, high = 0.0, float(epsilon)
    low_excess, high_excess = -float(epsilon), excess(high)
    if high_excess <= 0:  # not expected (epsilon(rho) > rho): nothing above epsilon to search
        return high
    paper = rho_from_epsilon_delta(epsilon, delta, accounting="paper")
    if 0 < paper < high and (paper_excess := excess(paper)) <= 0:
        low, low_excess = paper, paper_excess
    side = 0
    for _ in range(40):  # false position while it narrows the bracket fast
        if high - low <= 1e-12 * high:
            break
        guess = high - high_excess * (high - low) / (high_excess - low_excess)
        if not low < guess < high:
            break
        value = excess(guess)
        if value <= 0:
            low, low_excess = guess, value
            if side == -1:  # Illinois: halve the stale end's weight
                high_excess /= 2
            side = -1
        else:
            high, high_excess = guess, value
            if side == 1:
                low_excess /= 2
            side = 1
    for _ in range(200):  # then halves, to adjacent floats
        mid = (low + high) / 2
        if mid <= low or mid >= high:
            break
        if excess(mid) <= 0:
            low = mid
        else:
            high = mid
    return low


def gaussian_scale(rho: float, sensitivity: float = 1.0) -> float:
    """sigma with sensitivity^2 / (2 sigma^2) = rho."""
    if not (rho > 0 and math.isfinite(rho)):
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    return sensitivity / math.sqrt(2.0 * rho)


def gaussian_counts(counts: np.ndarray, rho: float,
                    sensitivity: int = 1) -> tuple[np.ndarray, Spend]:
    """Noisy counts of one marginal: discrete Gaussian noise with L2 sensitivity `sensitivity`.

    Under add/remove-one-row neighbours a marginal changes by 1 in one cell
    (docs/decisions/0001-privacy-unit.md); a relation's child side passes its family bound
    (`relational.family_sensitivity`).
    Returns the noisy counts (float64, same shape) and the spend from OpenDP's privacy map.
    A marginal is drawn through `measure.measure_marginal`, which charges this spend; only the
    preprocessing stage calls this directly.
    """
    counts = np.asarray(counts)
    scale = gaussian_scale(rho, sensitivity)
    meas = dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64"), scale=scale
    )
    flat = counts.astype(np.int64).ravel().tolist()
    noisy = np.asarray(meas(flat), dtype=np.float64).reshape(counts.shape)
    return noisy, Spend("gaussian_counts", float(meas.map(sensitivity)),
                        sensitivity=float(sensitivity), scale=scale)


def gaussian_scores(scores: np.ndarray, rho: float, sensitivity: float) -> tuple[np.ndarray, Spend]:
    """Noisy real-valued scores, each with L2 sensitivity `sensitivity` (e.g. InDif: 4).

    All m scores can change together, so the vector's L2 sensitivity is sensitivity * sqrt(m) and
    each score gets variance sensitivity^2 m / (2 rho) (PrivSyn Thm 5: 8m/rho for sensitivity 4).
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if scores.size == 0:
        return scores.copy(), Spend("gaussian_scores", 0.0, sensitivity=sensitivity)
    vector_sensitivity = sensitivity * math.sqrt(scores.size)
    scale = gaussian_scale(rho, vector_sensitivity)
    meas = dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float), scale=scale
    )
    noisy = np.asarray(meas(scores.tolist()), dtype=np.float64)
    return noisy, Spend(
        "gaussian_scores", float(meas.map(vector_sensitivity)), sensitivity=sensitivity, scale=scale
    )


def _noisy_max(scale: float):
    return dp.m.make_noisy_max(dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                               dp.linf_distance(T=float, monotonic=False),
                               dp.zero_concentrated_divergence(), scale=scale)


def exponential_mechanism(scores, rho: float, sensitivity: float = 1.0) -> tuple[int, Spend]:
    """The index of a high score by OpenDP's report-noisy-max (Gumbel noise) in zCDP: the
    exponential mechanism, whose map gives epsilon^2 / 8 (docs/decisions/0002-zcdp-accounting.md).
    Scores may move either way by `sensitivity` between neighbours (non-monotonic). The scale is the
    smallest whose map at `sensitivity` stays at or below `rho` (rho = sensitivity^2 / (2 scale^2));
    the charge is the map's own answer."""
    if not (rho > 0 and math.isfinite(rho)):
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    scale = sensitivity / math.sqrt(2.0 * rho)
    meas = _noisy_max(scale)
    while meas.map(sensitivity) > rho:  # float rounding put the map an ulp above rho
        scale = math.nextafter(scale, math.inf)
        meas = _noisy_max(scale)
    index = int(meas(np.asarray(scores, dtype=np.float64).tolist()))
    return index, Spend("exponential_mechanism", float(meas.map(sensitivity)),
                        sensitivity=sensitivity, scale=scale)
