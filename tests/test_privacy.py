"""The privacy math against closed forms: noise scale from rho, the optimal split, conversions."""

import itertools
import math

import numpy as np
import pytest
from scipy import optimize, stats

from dp_synth_assets.core.measure import (Measurement, expected_noise_error, make_consistent,
                                          optimal_split)
from dp_synth_assets.core.privacy import (epsilon_from_rho, exponential_mechanism,
                                          gaussian_counts, gaussian_scores,
                                          rho_from_epsilon_delta)


def test_gaussian_counts_noise_has_standard_deviation_sqrt_of_one_over_two_rho():
    rho = 0.02
    counts = np.full(200_000, 1000, dtype=np.int64)
    noisy, spend = gaussian_counts(counts, rho)
    sigma = math.sqrt(1 / (2 * rho))
    assert spend.rho == pytest.approx(rho, rel=1e-12)
    assert spend.scale == pytest.approx(sigma, rel=1e-12)
    sample_sd = float(np.std(noisy - counts))
    # the sample sd of N normals has relative sd 1/sqrt(2N) = 0.0016: 6 of them (false failure
    # rate ~2e-9); the discrete Gaussian's variance is within 1e-9 of sigma^2 at this scale
    assert abs(sample_sd / sigma - 1) < 6 / math.sqrt(2 * counts.size)
    assert abs(float(np.mean(noisy - counts))) < 6 * sigma / math.sqrt(counts.size)
    assert np.all(noisy == np.round(noisy)), "discrete Gaussian noise keeps counts integral"


def test_score_noise_variance_is_sensitivity_squared_m_over_two_rho():
    m, rho = 50_000, 0.5
    noisy, spend = gaussian_scores(np.zeros(m), rho, sensitivity=4.0)
    expected = math.sqrt(16 * m / (2 * rho))  # PrivSyn Thm 5: variance 8m / rho
    assert spend.scale == pytest.approx(expected, rel=1e-12)
    assert spend.rho == pytest.approx(rho, rel=1e-9)
    assert abs(float(np.std(noisy)) / expected - 1) < 6 / math.sqrt(2 * m)


def _neighbour_histograms(rows: list[int], cells: int):
    """The histogram of `rows` (cell indices) and of every neighbour: each removal, and the
    addition of a row in every cell (the empty ones and a duplicate of the most common)."""
    base = np.bincount(rows, minlength=cells)
    for i in range(len(rows)):
        yield base, np.bincount(rows[:i] + rows[i + 1:], minlength=cells)
    for cell in range(cells):
        yield base, np.bincount(rows + [cell], minlength=cells)


@pytest.mark.parametrize("rho", [0.123, 0.5, 2.0])
def test_the_count_charge_is_the_gaussian_closed_form_at_the_brute_force_sensitivity(rho):
    """A count vector's L2 sensitivity, by brute force over the neighbours of adversarial tables
    (empty, one row, all rows equal, skewed), is 1; the Gaussian mechanism with sigma
    1 / sqrt(2 rho) at that sensitivity is rho-zCDP (rho = Delta^2 / (2 sigma^2), Bun & Steinke
    2016, Prop. 1.6): the scale drawn and the rho charged must be these numbers."""
    tables = [[], [0], [3] * 25, [0] * 20 + [1, 2, 4], list(range(5)) * 3]
    sensitivity = max(float(np.linalg.norm(b - a)) for rows in tables
                      for a, b in _neighbour_histograms(rows, 6))
    assert sensitivity == 1.0
    _, spend = gaussian_counts(np.zeros(6, dtype=np.int64), rho)
    assert spend.scale == pytest.approx(1 / math.sqrt(2 * rho), rel=1e-12)
    assert spend.sensitivity == sensitivity
    assert spend.rho == pytest.approx(sensitivity ** 2 / (2 * (1 / math.sqrt(2 * rho)) ** 2),
                                      rel=1e-9)


def test_the_score_charge_is_the_gaussian_closed_form_for_m_scores_moving_together():
    """m scores each moving by s between neighbours move by s sqrt(m) in L2 (every score at
    once, the worst case): sigma = s sqrt(m) / sqrt(2 rho)."""
    m, s, rho = 7, 4.0, 0.3
    _, spend = gaussian_scores(np.zeros(m), rho, sensitivity=s)
    worst = float(np.linalg.norm(np.full(m, s)))  # every score at its largest move
    assert spend.scale == pytest.approx(worst / math.sqrt(2 * rho), rel=1e-12)
    assert spend.rho == pytest.approx(rho, rel=1e-9)


@pytest.mark.parametrize("sensitivity", [1.0, 2.5])
def test_the_exponential_mechanism_charge_covers_its_brute_force_privacy_loss(sensitivity):
    """Report-noisy-max with Gumbel noise of scale b picks index i with probability
    softmax(u / b)_i (closed form). Over neighbouring score vectors (every score moved by -Delta,
    0 or +Delta, all 3^m combinations, adversarial base vectors), the largest log ratio of a
    pick's probabilities is the mechanism's pure epsilon: it must be at most 2 Delta / b, and the
    charge must cover it as zCDP, rho >= epsilon^2 / 8 (Cesar & Rogers 2021, bounded range)."""
    rho = 0.2
    _, spend = exponential_mechanism(np.zeros(3), rho, sensitivity)
    b = spend.scale
    worst = 0.0
    for base in ([0.0, 0.0, 0.0], [10.0, 0.0, -10.0], [3.0, 3.0, -50.0]):
        u = np.array(base)
        p = np.exp(u / b - np.logaddexp.reduce(u / b))
        for moves in itertools.product((-sensitivity, 0.0, sensitivity), repeat=u.size):
            v = u + np.array(moves)
            q = np.exp(v / b - np.logaddexp.reduce(v / b))
            worst = max(worst, float(np.max(np.abs(np.log(p) - np.log(q)))))
    assert worst <= 2 * sensitivity / b + 1e-9
    assert worst == pytest.approx(2 * sensitivity / b, rel=1e-6)  # attained: the bound is exact
    assert spend.rho >= worst ** 2 / 8 * (1 - 1e-9)
    assert spend.rho <= rho * (1 + 1e-12)


def test_optimal_split_is_proportional_to_size_to_the_two_thirds():
    sizes = [4, 100, 1024, 37]
    rhos = optimal_split(0.7, sizes)
    assert sum(rhos) == pytest.approx(0.7, rel=1e-12)
    weights = [c ** (2 / 3) for c in sizes]
    for r, w in zip(rhos, weights):
        assert r == pytest.approx(0.7 * w / sum(weights), rel=1e-12)


def test_optimal_split_minimizes_the_expected_l1_noise_error():
    sizes = np.array([4, 100, 1024, 37])
    best = sum(c * math.sqrt(1 / (math.pi * r)) for c, r in zip(sizes, optimal_split(1.0, sizes)))
    assert best == pytest.approx(expected_noise_error(1.0, list(sizes)), rel=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(200):
        other = rng.dirichlet(np.ones(len(sizes)))
        assert sum(c * math.sqrt(1 / (math.pi * r)) for c, r in zip(sizes, other)) >= best


def cks_delta(rho: float, epsilon: float) -> float:
    """The delta at which rho-zCDP gives (epsilon, delta)-DP, in the closed form of Canonne,
    Kamath & Steinke 2020 (Prop. 12 / Cor. 13), minimized numerically over alpha > 1:
    inf_alpha exp((alpha - 1)(alpha rho - epsilon)) / (alpha - 1) * (1 - 1 / alpha)^alpha."""
    def log_delta(log_a):
        a = 1 + math.exp(log_a)
        return (a - 1) * (a * rho - epsilon) + a * math.log1p(-1 / a) - math.log(a - 1)

    best = optimize.minimize_scalar(log_delta, bounds=(-20, 12), method="bounded",
                                    options={"xatol": 1e-12})
    return min(math.exp(best.fun), 1.0)


def gaussian_epsilon(rho: float, delta: float) -> float:
    """The exact epsilon at `delta` of the Gaussian mechanism whose sigma makes it rho-zCDP
    (Balle & Wang 2018, Thm. 8, mu = Delta / sigma = sqrt(2 rho)): a rho-zCDP guarantee cannot
    promise less than this mechanism achieves."""
    mu = math.sqrt(2 * rho)
    return optimize.brentq(lambda e: stats.norm.cdf(-e / mu + mu / 2)
                           - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2) - delta, 0, 100)


@pytest.mark.parametrize("rho", [0.001, 0.02, 0.5, 3.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-5, 1e-3])
def test_epsilon_from_rho_is_the_closed_form_conversion(rho, delta):
    """epsilon_from_rho against closed forms, not against its inverse: it solves the CKS20
    conversion (delta at that epsilon equals the requested delta), it is no smaller than the
    exact epsilon of a Gaussian mechanism at that rho, and no larger than the papers'
    rho + 2 sqrt(rho log(1 / delta))."""
    epsilon = epsilon_from_rho(rho, delta)
    assert cks_delta(rho, epsilon) == pytest.approx(delta, rel=1e-6)
    assert gaussian_epsilon(rho, delta) < epsilon
    assert epsilon < rho + 2 * math.sqrt(rho * math.log(1 / delta))


@pytest.mark.parametrize("epsilon,delta", [(1.0, 1e-9), (0.3, 1e-6), (8.0, 1e-5)])
def test_rho_from_epsilon_delta_is_the_largest_rho_the_closed_form_allows(epsilon, delta):
    """The rho returned gives at most delta at epsilon by the CKS20 closed form, and a rho
    1e-6 larger gives more (the conversion is tight); the papers' rho is the closed-form root of
    rho + 2 sqrt(rho log(1 / delta)) = epsilon, smaller (1.27x at epsilon 1)."""
    rho = rho_from_epsilon_delta(epsilon, delta)
    assert cks_delta(rho, epsilon) <= delta * (1 + 1e-6)
    assert cks_delta(rho * (1 + 1e-6), epsilon) > delta
    paper = rho_from_epsilon_delta(epsilon, delta, accounting="paper")
    assert paper + 2 * math.sqrt(paper * math.log(1 / delta)) == pytest.approx(epsilon, rel=1e-12)
    assert paper < rho
    if epsilon == 1.0:
        assert rho / paper == pytest.approx(1.27, abs=0.01)


@pytest.mark.parametrize("epsilon,delta", [(0, 1e-9), (-1, 1e-9), (float("nan"), 1e-9),
                                           (1.0, 0.0), (1.0, 1.0)])
def test_conversion_refuses_impossible_privacy_parameters(epsilon, delta):
    with pytest.raises(ValueError):
        rho_from_epsilon_delta(epsilon, delta)


def test_consistency_makes_shared_attributes_agree_and_weights_by_inverse_variance():
    rng = np.random.default_rng(1)
    a = Measurement(("a",), rng.normal(100, 5, 3), sigma=5.0, rho=0.02)
    ab = Measurement(("a", "b"), rng.normal(30, 1, (3, 4)), sigma=1.0, rho=0.5)
    ac = Measurement(("a", "c"), rng.normal(40, 2, (3, 2)), sigma=2.0, rho=0.1)
    out = {m.clique: m.noisy for m in make_consistent([a, ab, ac])}
    assert np.allclose(out[("a", "b")].sum(axis=1), out[("a",)])
    assert np.allclose(out[("a", "c")].sum(axis=1), out[("a",)])
    totals = {k: v.sum() for k, v in out.items()}
    assert max(totals.values()) - min(totals.values()) < 1e-9
    # ABSyn VI.A.2.b weights: 1 / (sigma^2 * cells summed per value of a)
    t_var = {("a",): 3 * 25.0, ("a", "b"): 12 * 1.0, ("a", "c"): 6 * 4.0}
    arrays = {("a",): a.noisy, ("a", "b"): ab.noisy, ("a", "c"): ac.noisy}
    w = {k: 1 / v for k, v in t_var.items()}
    total = sum(w[k] * arrays[k].sum() for k in w) / sum(w.values())
    shifted = {k: arrays[k] + (total - arrays[k].sum()) / arrays[k].size for k in arrays}
    proj = {("a",): shifted[("a",)], ("a", "b"): shifted[("a", "b")].sum(axis=1),
            ("a", "c"): shifted[("a", "c")].sum(axis=1)}
    pw = {("a",): 1 / 25.0, ("a", "b"): 1 / (1.0 * 4), ("a", "c"): 1 / (4.0 * 2)}
    expected = sum(pw[k] * proj[k] for k in pw) / sum(pw.values())
    assert np.allclose(out[("a",)], expected)
