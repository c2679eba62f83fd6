"""Preprocessing's noisy category counts are merged into the 1-way measurements
(`domain.category_prior`, `measure.with_prior`): closed forms, the plan's record, and the error
of the published 1-way marginals of a real run."""

import math

import numpy as np
import pandas as pd
import pytest

from dp_synth_assets import Synthesizer
from dp_synth_assets.core.domain import Derived, EncodingPlan, category_prior
from dp_synth_assets.core.measure import Measurement, with_prior


def test_the_prior_gives_each_category_with_a_passed_count_its_code():
    derived = Derived(categories=("a", "c"), rare=(("b", 4.0),),
                      counts=(("a", 100.0), ("c", 50.0)), count_sd=2.0)
    # codes: a 0, c 1; the rare code 2, `other` and NULL get nothing
    assert category_prior(("a", "c"), derived) == ((0, 100.0, 2.0), (1, 50.0, 2.0))
    assert category_prior(("a",), Derived(categories=("a",))) is None
    # declared categories are matched by their SQL text (an integer category 3 is '3')
    assert category_prior((3, 7), Derived(counts=(("3", 9.0),), count_sd=1.0)) == \
        ((0, 9.0, 1.0),)


def test_with_prior_is_the_inverse_variance_mean_on_the_covered_cells_only():
    m = Measurement(("x",), np.array([10.0, 20.0, 30.0, 5.0]), 2.0, 0.125)
    merged = with_prior(m, ((0, 16.0, 1.0), (2, 0.0, 2.0)))
    # cell 0: (10 / 4 + 16 / 1) / (1 / 4 + 1) = 14.8; cell 2: the plain mean of 30 and 0
    np.testing.assert_allclose(merged.noisy, [14.8, 20.0, 15.0, 5.0])
    assert (merged.sigma, merged.rho, merged.clique) == (2.0, 0.125, ("x",))
    pair = Measurement(("x", "y"), np.ones((2, 2)), 1.0, 0.5)
    assert with_prior(pair, ((0, 9.0, 1.0),)) is pair
    assert with_prior(m, None) is m


def test_the_plan_records_the_prior_and_reads_it_back():
    frame = table(3000, seed=1)
    synth = Synthesizer(columns=COLUMNS, epsilon=1.0, delta=1e-9, method="manual",
                        selection={"marginals": []}, generator="gum")
    with synth.reading(frame) as run:
        plan = run.preprocess()
    colour = plan["colour"]
    assert colour.prior and len(colour.prior) == len(colour.categories)  # every kept one
    exact = frame["colour"].value_counts()
    for code, count, sd in colour.prior:
        assert abs(count - exact[colour.categories[code]]) < 6 * sd
    assert EncodingPlan.from_json(plan.to_json()) == plan
    assert plan["size0"].prior is None  # a numeric column has no category counts


COLUMNS = {"colour": {"kind": "categorical"}, "shape": {"kind": "categorical"},
           **{f"size{i}": {"kind": "integer", "bounds": [0, 9]} for i in range(6)}}


def table(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "colour": rng.choice(["red", "green", "blue"], rows, p=[0.5, 0.3, 0.2]),
        "shape": rng.choice(["round", "square"], rows, p=[0.6, 0.4]),
        **{f"size{i}": rng.integers(0, 10, rows) for i in range(6)}})


def test_the_published_one_way_marginals_carry_the_precision_of_both_releases():
    """Over several runs, the error of a discovered column's published 1-way cells against the
    exact counts has the merged variance 1 / (sigma^-2 + sd^-2), well below the measurement's
    own sigma^2 (without the merge the mean squared z-score below would be 1 + sigma^2 / sd^2)."""
    frame = table(3000, seed=2)
    exact = frame["colour"].value_counts()
    z2, ratios = [], []
    for _ in range(20):
        synth = Synthesizer(columns=COLUMNS, epsilon=1.0, delta=1e-9, method="manual",
                            selection={"marginals": []}, generator="gum")
        with synth.reading(frame) as run:
            plan = run.preprocess()
            oracle = run.marginals(plan)
            found = run.measure(plan, run.select(plan, oracle), oracle)
        colour = plan["colour"]
        [m] = [m for m in found.measurements if m.clique == ("colour",)]
        for code, _, sd in colour.prior:
            merged_sd = math.sqrt(1 / (m.sigma ** -2 + sd ** -2))
            z2.append(((m.noisy[code] - exact[colour.categories[code]]) / merged_sd) ** 2)
            ratios.append((m.sigma / sd) ** 2)
    assert min(ratios) > 2  # the discovery counts are the more precise release here
    # mean of 60 squared z-scores: about 1 (sd 0.18, above 1.9 with probability 2e-5); without
    # the merge about 3.3
    assert np.mean(z2) < 1.9, (np.mean(z2), np.mean(ratios))


def test_counts_near_the_cut_that_selected_them_are_not_merged():
    """A count within PRIOR_MARGIN sds above the cut that decided its code (discovery's
    threshold, the rare rule's cut) was selected for its noise: it stays out of the prior, and so
    does every rare member; declared categories with no rare rule keep every count."""
    from dp_synth_assets.core.config import ColumnSpec
    from dp_synth_assets.core.preprocess import (PRIOR_MARGIN, discovery_threshold, rare_cut,
                                                 unbiased_counts)

    sigma, delta = 10.0, 1e-10
    cut = discovery_threshold(sigma, delta) + PRIOR_MARGIN * sigma
    counts = {"near": cut - 0.5, "far": cut + 0.5, "huge": 10 * cut}
    assert unbiased_counts(counts, sigma, delta, ColumnSpec(kind="categorical")) == \
        (("far", cut + 0.5), ("huge", 10 * cut))
    plain = ColumnSpec(kind="categorical", categories=["near", "far", "huge"])
    assert unbiased_counts(counts, sigma, delta, plain) == tuple(counts.items())
    # the merge rule's cut: max(theta * total, 3 sigma) = 30 here; 29 is a rare member
    merged = ColumnSpec(kind="categorical", categories=["rare", "near", "far"], rare="merge",
                        theta=0.001)
    counts = {"rare": 29.0, "near": 49.0, "far": 51.0}
    assert rare_cut(counts, sigma, merged) == 30.0
    assert unbiased_counts(counts, sigma, delta, merged) == (("far", 51.0),)
