"""An empirical privacy audit of the mechanism every marginal is published through
(`measure.measure_marginal`), gray-box (bench/audit.py, `gaussian_audit`): its lower bound on
epsilon stays below the claimed epsilon, and the same audit of the mechanism drawing with sigma
0.7 of the correct value exceeds the claim.

Settings: rho 0.5 (sigma 1), delta 0.03, claimed epsilon epsilon_from_rho(0.5, 0.03) = 2.29 (a
rho-zCDP mechanism is (epsilon(delta), delta)-DP for every delta; this delta is where the audit
separates the two mechanisms best), 100,000 runs per table (D: the cell's count 40; D': 41),
confidence 1 - 1e-6 over the best of 9 threshold events (the optimal tests for a shifted discrete
Gaussian).

What the audit can reach: the exact (epsilon, delta) profile of the discrete Gaussian at sigma 1
gives epsilon 1.83 at delta 0.03 (no audit of a correct mechanism can show more; the claim's 2.29
is the zCDP conversion, which holds for every rho-zCDP mechanism); the audit's bound for the
correct mechanism is about 1.45 (median of 300 audits simulated from the exact distribution,
largest 1.60). At sigma 0.7 the profile gives 2.95 and the audit's bound has median 2.74 and
standard deviation 0.03 (2,000 simulated audits: smallest 2.65), 15 standard deviations above the
claim: power against sigma 0.7 x correct is 1 - (far below 1e-9). False failures: the first test
fails wrongly with probability <= 1e-6 (the bound's confidence). Each audit draws 200,000
discrete Gaussians through OpenDP, about 10 s.
"""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import audit  # noqa: E402

RHO, DELTA, ALPHA = 0.5, 0.03, 1e-6
TRIALS = 100_000


def test_the_audit_of_the_gaussian_mechanism_stays_below_the_claimed_epsilon():
    result = audit.gaussian_audit(TRIALS, RHO, DELTA, ALPHA)
    claimed = result["claimed_epsilon"]
    assert result["charged_rho_max"] <= RHO * (1 + 1e-9)  # the claim covers what was charged
    assert claimed == pytest.approx(2.29, abs=0.01)
    assert result["epsilon_lower_bound"] < claimed, result
    # the audit has reach: most of the mechanism's exact epsilon at this delta (1.83) is shown
    # (below 1.1 with probability far below 1e-9 for a correct mechanism)
    assert result["epsilon_lower_bound"] > 1.1, result


def test_the_same_audit_rejects_the_mechanism_drawing_with_sigma_0_7_of_the_correct_value():
    """The demonstration of power: the broken mechanism charges rho 0.5 but draws with sigma
    0.7 (`audit.broken_noise`); the audit's bound exceeds the claim."""
    result = audit.gaussian_audit(TRIALS, RHO, DELTA, ALPHA, sigma_factor=0.7)
    assert result["charged_rho_max"] <= RHO * (1 + 1e-9)
    assert result["epsilon_lower_bound"] > result["claimed_epsilon"], result


def test_clopper_pearson_bounds_are_exact_beta_quantiles():
    lower, upper = audit.clopper_pearson(0, 1000, 1e-6)
    assert lower == 0.0 and math.isclose(upper, 1 - 1e-6 ** (1 / 1000), rel_tol=1e-9)
    lower, upper = audit.clopper_pearson(1000, 1000, 1e-6)
    assert upper == 1.0 and math.isclose(lower, 1e-6 ** (1 / 1000), rel_tol=1e-9)
    # ln((p_hi_lower - delta) / p_lo_upper)
    bound = audit.epsilon_lower_bound(1000, 0, 1000, 0.0, 2e-6)
    edge = 1e-6 ** (1 / 1000)
    assert math.isclose(bound, math.log(edge / (1 - edge)), rel_tol=1e-9)
