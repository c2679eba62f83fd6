"""An empirical privacy audit of selection + measurement (bench/audit.py, run small): the
Clopper-Pearson lower bound on epsilon from a distinguishing event stays below the claimed
epsilon of the run, and the same audit of a mechanism whose noise is 4x too small exceeds it.

Settings (chosen so that the audit has power within a CI budget; see bench/audit.py for the
method): the default method absyn on a 3 x 3 domain, run rho 0.5, claimed epsilon
epsilon_from_rho(0.5, delta = 0.01) = 2.75 (a rho-zCDP run is (epsilon(delta), delta)-DP for
every delta; a large delta makes the claim small and the test strict), 200 calibration runs and
1000 audit runs per table, confidence 1 - 1e-6. False failures: the first test fails wrongly
with probability <= 1e-6 (the bound's confidence); the broken mechanism's event has
frequencies about 0.002 on D and 0.98 on D', and its bound falls below 2.75 only with 27 or more
D events in 1000 (probability < 1e-20 at 0.002).
"""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import audit  # noqa: E402

RHO, DELTA, ALPHA = 0.5, 1e-2, 1e-6
TRIALS, CALIBRATION = 1000, 200


@pytest.mark.parametrize("broken", [False, True], ids=["as-implemented", "noise-4x-too-small"])
def test_audit_lower_bound_stays_below_the_claimed_epsilon_and_catches_a_broken_mechanism(broken):
    result = audit.audit(TRIALS, RHO, DELTA, ALPHA, CALIBRATION, broken=broken)
    claimed = result["claimed_epsilon"]
    assert result["charged_rho_max"] <= RHO * (1 + 1e-9)  # the claim covers what was charged
    assert 2.5 < claimed < 3.0
    if broken:
        assert result["epsilon_lower_bound"] > claimed, result
    else:
        assert result["epsilon_lower_bound"] < claimed, result
        # the target's cell got most of rho in most runs (absyn skips the pair when its noisy
        # score is within 2 noise sd of independence: about one run in ten here)
        assert result["runs_measuring_the_pair"] > 0.8


def test_clopper_pearson_bounds_are_exact_beta_quantiles():
    lower, upper = audit.clopper_pearson(0, 1000, 1e-6)
    assert lower == 0.0 and math.isclose(upper, 1 - 1e-6 ** (1 / 1000), rel_tol=1e-9)
    lower, upper = audit.clopper_pearson(1000, 1000, 1e-6)
    assert upper == 1.0 and math.isclose(lower, 1e-6 ** (1 / 1000), rel_tol=1e-9)
    # ln((p_hi_lower - delta) / p_lo_upper)
    bound = audit.epsilon_lower_bound(1000, 0, 1000, 0.0, 2e-6)
    edge = 1e-6 ** (1 / 1000)
    assert math.isclose(bound, math.log(edge / (1 - edge)), rel_tol=1e-9)
