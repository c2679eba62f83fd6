"""The guard: a measured marginal is fitted only if it beats the independent model on its own
noisy values; otherwise its budget goes to the 1-way marginals."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from dp_synth_assets.core.measure import Measurement
from dp_synth_assets.core.select import Selection
from dp_synth_assets.core.select.guard import guard, justified, statistic
from dp_synth_assets.core.stages import measure
from tests.helpers import counting_oracle


def test_statistic_of_a_two_by_two_table_is_closed_form():
    """For a 2x2 table every residual from the product of its margins is +-(ad - bc) / n, so
    T = 4 (ad - bc)^2 / (n^2 sigma^2), with one degree of freedom."""
    a, b, c, d, sigma = 30.0, 10.0, 20.0, 40.0, 2.0
    m = Measurement(("x", "y"), np.array([[a, b], [c, d]]), sigma, 1 / (2 * sigma ** 2))
    t, dof = statistic(m)
    n = a + b + c + d
    assert dof == 1
    assert t == pytest.approx(4 * (a * d - b * c) ** 2 / (n ** 2 * sigma ** 2))


def test_independent_pairs_are_dropped_and_dependent_ones_kept():
    """Exactly independent 5x4 counts plus noise: kept at most as often as the 3-sd test allows
    (under 2.5%: at most 3 of 60 draws); a pair that copies one column into the other is kept."""
    rng = np.random.default_rng(0)
    pa, pb = np.array([.1, .2, .3, .25, .15]), np.array([.4, .3, .2, .1])
    exact = np.outer(pa, pb) * 5000
    sigma = 20.0
    kept = sum(justified(Measurement(("a", "b"), exact + rng.normal(0, sigma, exact.shape),
                                     sigma, 1 / (2 * sigma ** 2))) for _ in range(60))
    assert kept <= 3
    dependent = np.diag([1000.0, 1000, 1000, 1000, 1000])[:, :4]
    assert justified(Measurement(("a", "b"), dependent + rng.normal(0, sigma, (5, 4)),
                                 sigma, 1 / (2 * sigma ** 2)))


def test_a_dropped_pair_sharpens_the_one_way_marginals_by_inverse_variance():
    domain = {"a": 5, "b": 4}
    rng = np.random.default_rng(1)
    one_a = Measurement(("a",), np.full(5, 1000.0), 10.0, 1 / 200)
    one_b = Measurement(("b",), np.full(4, 1250.0), 10.0, 1 / 200)
    pair = Measurement(("a", "b"), np.full((5, 4), 250.0) + rng.normal(0, 5, (5, 4)), 5.0, 1 / 50)
    kept, report = guard([one_a, one_b, pair], domain)
    assert report == {"kept": [], "dropped": [["a", "b"]]}
    assert [m.clique for m in kept] == [("a",), ("b",)]
    # projection onto a sums 4 cells: variance 4 * 25 per cell, merged with 100
    assert kept[0].sigma == pytest.approx(math.sqrt(1 / (1 / 100 + 1 / 100)))
    assert kept[0].noisy == pytest.approx(
        (one_a.noisy / 100 + pair.noisy.sum(axis=1) / 100) / (2 / 100))
    assert kept[1].sigma == pytest.approx(math.sqrt(1 / (1 / 100 + 1 / 125)))
    assert all(m.sigma == pytest.approx(math.sqrt(1 / (2 * m.rho))) for m in kept)


def test_measure_stage_drops_the_marginals_of_independent_columns():
    """Every method goes through `stages.measure`: pairs of independent columns that a selection
    asked for are measured (and charged) but not handed to the model, which then fits the
    independent model of the sharpened 1-way marginals. The columns are exactly pairwise
    independent (a = i, b = j, c = i + j, d = i + 2j mod 11, each (i, j) 40 times), so each
    pair's statistic is the noise alone: chi-square with 100 degrees of freedom, kept only above
    200, which happens with probability about 1e-9."""
    i, j = np.meshgrid(np.arange(11), np.arange(11), indexing="ij")
    i, j = np.tile(i.ravel(), 40), np.tile(j.ravel(), 40)
    data = {"a": i, "b": j, "c": (i + j) % 11, "d": (i + 2 * j) % 11}
    domain = {c: 11 for c in data}

    oracle = counting_oracle(data, domain)

    from dp_synth_assets.core.measure import measure_marginal
    one_way = tuple(measure_marginal(oracle([(a,)])[(a,)], (a,), 0.0005, lambda *a, **k: None)
                    for a in domain)
    pairs = (("a", "b"), ("b", "c"), ("c", "d"))
    chosen = Selection("manual", one_way, pairs, {p: 1.0 for p in pairs})
    budget = SimpleNamespace(stage_rho=lambda stage: 0.0005)
    budget.with_rows = lambda rows: budget  # no noisy row count: the split stays
    charges = []
    plan = SimpleNamespace(domain=domain, noisy_rows=None, encodings=())  # nothing discovered
    found = measure(plan, chosen, oracle, budget, lambda spend, **k: charges.append(k["clique"]))
    assert charges == [list(p) for p in pairs]  # measured and charged as planned
    fitted = {m.clique for m in found.measurements}
    assert fitted == {(a,) for a in domain}


def test_columns_outside_every_selected_marginal_get_their_one_way_remeasured():
    """Selected (a, b) over domain a: 2, b: 2, c: 8. Column c would keep only its selection-stage
    1-way; it joins the plan with the weight Eq. 11 gives a clique of 8 cells, on the
    selection's scale: 8^(2/3) / 4^(2/3) times (a, b)'s."""
    from dp_synth_assets.core.budget import measurement_plan
    from dp_synth_assets.core.stages import cover_columns

    domain = {"a": 2, "b": 2, "c": 8}
    chosen = Selection("absyn", (), (("a", "b"),), {("a", "b"): 1.0})
    covered = cover_columns(chosen, domain)
    assert covered.cliques == (("a", "b"), ("c",))
    plan = measurement_plan(covered, domain, 1.0)
    assert plan[("c",)] / plan[("a", "b")] == pytest.approx(8 ** (2 / 3) / 4 ** (2 / 3))
    assert sum(plan.values()) == pytest.approx(1.0)
    full = Selection("absyn", (), (("a", "b"), ("b", "c")), {("a", "b"): 1.0, ("b", "c"): 2.0})
    assert cover_columns(full, domain) is full
