"""The privacy math against closed forms: noise scale from rho, the optimal split, conversions."""

import math

import numpy as np
import pytest

from dp_synth_assets.core.measure import (Measurement, expected_noise_error, make_consistent,
                                          optimal_split)
from dp_synth_assets.core.privacy import (epsilon_from_rho, gaussian_counts, gaussian_scores,
                                          gaussian_scale, rho_from_epsilon_delta)


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


def test_spend_is_the_privacy_map_answer_for_the_scale_drawn():
    _, spend = gaussian_counts(np.zeros(3, dtype=np.int64), 0.123)
    assert spend.rho == pytest.approx(1 / (2 * spend.scale ** 2), rel=1e-12)
    assert gaussian_scale(0.123) == pytest.approx(spend.scale)


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


def test_rho_conversion_is_tight_and_round_trips():
    rho = rho_from_epsilon_delta(1.0, 1e-9)
    assert epsilon_from_rho(rho, 1e-9) == pytest.approx(1.0, abs=1e-9)
    assert epsilon_from_rho(rho, 1e-9) <= 1.0
    paper = rho_from_epsilon_delta(1.0, 1e-9, accounting="paper")
    assert paper + 2 * math.sqrt(paper * math.log(1e9)) == pytest.approx(1.0, rel=1e-12)
    assert rho / paper == pytest.approx(1.27, abs=0.01)  # SEED-NOTES: 1.27x at epsilon 1


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
