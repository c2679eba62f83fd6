"""`measure.measure_marginal` is the one mechanism site of a noisy marginal: it charges what its
OpenDP measurement's privacy map reports, before it returns, and nothing outside the
measurement and preprocessing modules draws `gaussian_counts` itself."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from dp_synth_assets.core import measure
from dp_synth_assets.core.opendp_api import dp
from dp_synth_assets.core.select import privsyn

from helpers import ChargeRecorder, counting_oracle

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {"dp_synth_assets/core/measure.py", "dp_synth_assets/core/preprocess.py",
           "dp_synth_assets/core/privacy.py"}  # privacy.py defines it


def opendp_map(rho: float) -> float:
    """The privacy map, at L2 distance 1, of OpenDP's vector discrete Gaussian at the scale
    sqrt(1 / (2 rho)), built here independently of the package."""
    dp.enable_features("contrib")
    meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64"),
                              scale=math.sqrt(1.0 / (2.0 * rho)))
    return float(meas.map(1))


@pytest.mark.parametrize("rho", [0.003, 0.25, 7.0])
def test_measure_marginal_charges_the_opendp_map_with_the_clique_and_params(rho):
    exact = np.arange(12, dtype=np.int64).reshape(3, 4)
    charge = ChargeRecorder()
    m = measure.measure_marginal(exact, ("a", "b"), rho, charge, purpose="test", round=3)
    [(spend, params)] = charge.calls
    assert spend.mechanism == "gaussian_counts"
    assert spend.rho == pytest.approx(opendp_map(rho), rel=1e-12)
    assert params == {"clique": ["a", "b"], "purpose": "test", "round": 3}
    assert (m.clique, m.rho, m.sigma) == (("a", "b"), spend.rho, spend.scale)
    assert m.sigma == pytest.approx(1.0 / math.sqrt(2.0 * rho))
    assert m.noisy.shape == exact.shape


def test_measure_marginal_charges_before_it_returns_anything():
    class Refused(Exception):
        pass

    def refuse(spend, **params):
        raise Refused

    with pytest.raises(Refused):
        measure.measure_marginal(np.ones(5, dtype=np.int64), ("a",), 1.0, refuse)


def test_measure_charges_each_clique_of_the_plan_in_order_at_its_rho():
    rng = np.random.default_rng(0)
    exact = {("a",): rng.integers(0, 9, 3), ("a", "b"): rng.integers(0, 9, (3, 2)),
             ("b",): rng.integers(0, 9, 2)}
    plan = {("a", "b"): 0.5, ("b",): 0.125, ("a",): 2.0}
    charge = ChargeRecorder()
    out = measure.measure(exact, plan, charge)
    assert [tuple(p["clique"]) for _, p in charge.calls] == list(plan)
    assert [m.clique for m in out] == list(plan)
    for (clique, rho), (spend, _), m in zip(plan.items(), charge.calls, out):
        assert spend.rho == pytest.approx(opendp_map(rho), rel=1e-12) and m.rho == spend.rho


def test_one_way_measurements_of_a_selection_are_exactly_what_was_charged():
    domain = {"a": 3, "b": 2, "c": 4}
    rng = np.random.default_rng(1)
    table = {a: rng.integers(0, k, 200) for a, k in domain.items()}
    charge = ChargeRecorder()
    one_way = privsyn.measure_one_way(domain, counting_oracle(table, domain), 0.3, charge)
    assert [(tuple(p["clique"]), p["purpose"], s.rho) for s, p in charge.calls] == [
        (m.clique, "one-way marginal", m.rho) for m in one_way]
    assert all(s.rho == pytest.approx(opendp_map(0.1), rel=1e-12) for s, _ in charge.calls)


def gaussian_counts_uses(path: Path) -> list[int]:
    """Lines of `path` that import or call `gaussian_counts` (by name or as an attribute)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "gaussian_counts" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "gaussian_counts") or (
                    isinstance(f, ast.Attribute) and f.attr == "gaussian_counts"):
                lines.append(node.lineno)
    return lines


def test_only_measure_and_preprocess_draw_gaussian_counts():
    files = sorted((ROOT / "dp_synth_assets").rglob("*.py")) + sorted((ROOT / "resources").rglob("*.py"))
    assert any(f.name == "aim.py" for f in files)
    offending = [f"{f.relative_to(ROOT)}:{line}" for f in files
                 if str(f.relative_to(ROOT)) not in ALLOWED for line in gaussian_counts_uses(f)]
    assert offending == [], "draw a marginal with measure.measure_marginal instead"
    assert gaussian_counts_uses(ROOT / "dp_synth_assets/core/measure.py")  # the check can see one


def test_the_check_finds_a_direct_call(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from x import privacy\nnoisy, s = privacy.gaussian_counts(c, 1.0)\n")
    assert gaussian_counts_uses(bad) == [2]


def test_merge_repeats_is_the_inverse_variance_mean_of_each_cliques_measurements():
    """Two measurements of (a, b) at rho 1 and 3 become one at rho 4: sigma^-2 add, the mean
    weighted 1 : 3; a coarse one on other groups and a 1-way one stay apart, order kept."""
    from dp_synth_assets.core.measure import Measurement, merge_repeats

    first = Measurement(("a", "b"), np.array([[10.0, 20.0]]), math.sqrt(1 / 2), 1.0)
    second = Measurement(("a", "b"), np.array([[14.0, 16.0]]), math.sqrt(1 / 6), 3.0)
    coarse = Measurement(("a", "b"), np.array([[30.0]]), 1.0, 0.5, (None, (0, 0)))
    single = Measurement(("a",), np.array([30.0]), 1.0, 0.5)
    out = merge_repeats([first, coarse, single, second])
    assert [(m.clique, m.groups) for m in out] == [(("a", "b"), None), (("a", "b"), (None, (0, 0))),
                                                   (("a",), None)]
    assert out[0].noisy.ravel().tolist() == pytest.approx([13.0, 17.0])
    assert out[0].rho == pytest.approx(4.0) and out[0].sigma == pytest.approx(math.sqrt(1 / 8))
    assert out[1] is coarse and out[2] is single
