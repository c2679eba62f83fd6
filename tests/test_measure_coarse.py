"""Coarse marginals: a pair measured on public groups of its columns' codes is charged as its fine
marginal would be, fitted as the linear map it is, and chosen by absyn when it beats both
measuring the pair fine and not measuring it."""

import itertools
import math

import numpy as np
import pytest

from dp_synth_assets.core import measure
from dp_synth_assets.core.config import SelectionSettings
from dp_synth_assets.core.generate import mirror
from dp_synth_assets.core.measure import Measurement, coarsen, make_consistent
from dp_synth_assets.core.select import Budget, Selection, select

from helpers import ChargeRecorder, counting_oracle

GROUPS = ((0, 0, 1, 1, 1, 2), None)  # column a: 6 codes in 3 groups; column b kept


def brute_coarsen(fine: np.ndarray, groups) -> np.ndarray:
    ga = groups[0]
    out = np.zeros((max(ga) + 1, fine.shape[1]))
    for i, j in itertools.product(range(fine.shape[0]), range(fine.shape[1])):
        out[ga[i], j] += fine[i, j]
    return out


def test_coarse_measurement_is_charged_as_its_fine_marginal():
    fine = np.arange(24, dtype=np.int64).reshape(6, 4)
    assert np.array_equal(coarsen(fine, GROUPS), brute_coarsen(fine, GROUPS))
    # one row added anywhere moves exactly one coarse cell by 1: L2 sensitivity 1, as fine
    for i, j in itertools.product(range(6), range(4)):
        moved = fine.copy()
        moved[i, j] += 1
        assert np.linalg.norm(coarsen(moved, GROUPS) - coarsen(fine, GROUPS)) == 1.0
    fine_charge, coarse_charge = ChargeRecorder(), ChargeRecorder()
    m_fine = measure.measure_marginal(fine, ("a", "b"), 0.05, fine_charge)
    m = measure.measure_marginal(fine, ("a", "b"), 0.05, coarse_charge, GROUPS)
    [(spend_fine, _)], [(spend, params)] = fine_charge.calls, coarse_charge.calls
    assert spend.rho == spend_fine.rho and spend.scale == spend_fine.scale
    assert params == {"clique": ["a", "b"]}
    assert m.noisy.shape == (3, 4) and m.groups == GROUPS and m.rho == m_fine.rho
    back = Measurement.from_dict(m.to_dict())
    assert back.groups == GROUPS and np.allclose(back.noisy, m.noisy)


def test_fit_matches_a_coarse_marginal_and_the_fine_one_ways():
    rng = np.random.default_rng(0)
    joint = rng.integers(1, 60, size=(6, 4)).astype(float)
    domain = {"a": 6, "b": 4}
    noisy = [Measurement(("a",), joint.sum(1) + rng.normal(0, 3, 6), 3.0, 0.05),
             Measurement(("b",), joint.sum(0) + rng.normal(0, 3, 4), 3.0, 0.05),
             Measurement(("a", "b"), coarsen(joint, GROUPS) + rng.normal(0, 3, (3, 4)), 3.0,
                         0.05, GROUPS)]
    consistent = make_consistent(noisy)
    one_a, one_b, pair = consistent
    # consistency: the coarse measurement agrees with the 1-way ones on both attributes
    assert np.allclose(pair.noisy.sum(axis=0), one_b.noisy)
    assert np.allclose(pair.noisy.sum(axis=1), brute_coarsen(one_a.noisy[:, None], GROUPS)[:, 0])
    total = measure.noisy_total(consistent)
    _, model = mirror.fit(domain, consistent, total, 500)
    fitted = model.project(("a", "b"))
    assert np.allclose(coarsen(fitted, GROUPS), pair.noisy, atol=1e-3)
    assert np.allclose(fitted.sum(axis=1), one_a.noisy, atol=1e-3)
    # within a group, the fit is the maximum-entropy split: proportional to a's 1-way
    block = fitted[2:5, 0] / fitted[2:5, 0].sum()
    assert np.allclose(block, one_a.noisy[2:5] / one_a.noisy[2:5].sum(), atol=1e-6)


def test_absyn_measures_a_large_smooth_pair_on_groups():
    """Two 48-code ordinal columns, b = a +- 2: measured fine, the pair's 2,304 cells cost more
    noise than its dependency is worth at this rho; on about 6 groups each it is cheap and keeps
    most of the dependency, so absyn selects it coarse and the plan charges it at its rho."""
    rng = np.random.default_rng(0)
    n = 4000
    a = rng.integers(0, 48, n)
    data = {"a": a, "b": np.clip(a + rng.integers(-2, 3, n), 0, 47), "c": rng.integers(0, 2, n)}
    domain = {"a": 48, "b": 48, "c": 2}
    budget = Budget(one_way=10.0, score=1000.0, measure=2e-4)
    chosen = select("absyn", domain, counting_oracle(data, domain), budget, SelectionSettings(),
                    lambda spend, **_: None)
    assert chosen.cliques == (("a", "b"),)
    groups = chosen.coarse[("a", "b")]
    assert all(g is not None and max(g) + 1 < 48 for g in groups)
    assert all(list(g) == sorted(g) for g in groups)  # runs of adjacent codes
    assert Selection.from_dict(chosen.to_dict()).coarse == chosen.coarse
    # measured, its array is the grouped marginal, at the selection's rho
    exact = counting_oracle(data, domain)([("a", "b")])
    charge = ChargeRecorder()
    [m] = measure.measure(exact, chosen.budgets, charge, chosen.coarse)
    assert m.noisy.shape == tuple(max(g) + 1 for g in groups)
    assert charge.calls[0][0].rho == pytest.approx(chosen.budgets[("a", "b")], rel=1e-9)
    assert math.isclose(sum(chosen.budgets.values()), budget.measure, rel_tol=1e-12)
