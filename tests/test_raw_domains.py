"""Learned domains of raw tables (only kinds declared) on small tables with known distributions:
tight DP bounds, discovered categories that survive a small table, boolean spellings, and the
preprocessing spend against OpenDP's own maps."""

import math

import duckdb
import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.api import Synthesizer
from dp_synth_assets.core.budget import DatasetBudget
from dp_synth_assets.core.config import ColumnSpec
from dp_synth_assets.core.opendp_api import dp
from dp_synth_assets.core.preprocess import preprocess, threshold_delta

EPSILON = 1.0
FIT = {"epsilon": EPSILON, "delta": 1e-9, "model": {"iterations": 200}}


def small_table(n: int, seed: int) -> pd.DataFrame:
    """Titanic-like: a two-valued and a three-valued category, an age in 18..79, a fare."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "sex": rng.choice(["male", "female"], n, p=[0.64, 0.36]),
        "cls": rng.choice(["1", "2", "3"], n, p=[0.25, 0.21, 0.54]),
        "age": rng.integers(18, 80, n),
        "fare": rng.gamma(2.0, 15.0, n),
    })


KINDS = {"sex": {"kind": "categorical"}, "cls": {"kind": "categorical"},
         "age": {"kind": "integer"}, "fare": {"kind": "float"}}


class Recorder:
    def __init__(self):
        self.spends = []

    def __call__(self, spend, **params):
        self.spends.append((spend, params))


def test_learned_integer_bounds_hold_the_rows_and_are_tighter_than_the_power_of_two_buckets():
    # 20,000 ages uniform in 18..79 (range 61), one bounds task at the rho epsilon 1 gives a raw
    # table's preprocessing: the power-of-two buckets alone give [16, 127], 1.8x the range; the
    # parts of [16, 32) and [64, 128) may be skipped while an upper confidence bound on the rows
    # they hold (2 sigma sqrt(parts), sigma ~ 26) stays within 1% of the rows (~200): at most
    # (200 / 52)^2 ~ 14 parts of 2 (fewer as the noisy counts add up), so ~[18, 100 .. 112].
    # OpenDP's noise is not seedable, and a bucket next to the span joins it above NEIGHBOUR_Z = 2
    # sigma, so one run in about 18 is wider than 1.7x (11 of 200 runs measured): every run must
    # hold the rows, and the median of 9 runs must be tight (wrong by chance about once in 10^4)
    two = {"age": {"kind": "integer"}, "flag": {"kind": "boolean"}}  # one task: bounds
    rho = DatasetBudget.of(Synthesizer(two, epsilon=EPSILON).spec).preprocess
    spans = []
    for run in range(9):
        frame = pd.DataFrame({"age": np.random.default_rng(run % 3).integers(18, 80, 20000)})
        con = duckdb.connect()
        con.register("t", frame)
        columns = {"age": ColumnSpec(kind="integer")}
        (bounds,) = [d.bounds for d in preprocess(con, "t", columns, rho, 0.0, Recorder()).values()]
        low, high = bounds
        inside = ((frame.age >= low) & (frame.age <= high)).mean()
        assert inside >= 0.99, bounds
        spans.append(high - low)
    assert np.median(spans) <= 1.7 * (79 - 18), spans


def test_a_yes_no_column_on_a_small_table_comes_back_with_both_values():
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"flag": np.where(rng.random(300) < 0.3, "yes", "no"),
                          "x": rng.integers(0, 5, 300)})
    synth = Synthesizer({"flag": {"kind": "categorical"}, "x": {"kind": "integer"}}, seed=1, **FIT)
    synth.fit(frame)
    assert {"yes", "no"} <= set(synth.plan["flag"].categories)
    values = set(synth.sample(2000).column("flag").to_pylist())
    assert {"yes", "no"} <= values


def test_every_category_of_a_small_table_is_kept_or_merged_never_dropped_into_other():
    # 900 rows: the smallest category has ~190 rows, below main's discovery threshold (~311)
    frame = small_table(900, 4)
    synth = Synthesizer(KINDS, seed=1, **FIT)
    synth.fit(frame)
    for column in ("sex", "cls"):
        e = synth.plan[column]
        released = set(e.categories) | {m for m, _ in (e.rare or ())}
        assert released == set(frame[column]), (column, released)


def test_preprocessing_charges_exactly_what_the_opendp_maps_say_and_sums_to_its_share():
    frame = small_table(900, 5)
    synth = Synthesizer(KINDS, seed=1, **FIT)
    synth.fit(frame)
    # the share follows the noisy row count drawn first (`budget.preprocess_share`)
    budget = DatasetBudget.of(synth.spec).with_rows(synth.plan.noisy_rows)
    charges = [c for c in synth.report.to_dict()["charges"] if c["stage"] == "preprocessed"]
    assert math.isclose(sum(c["rho"] for c in charges), budget.preprocess, rel_tol=1e-9)
    # the integer threshold's delta (the discrete Gaussian's tail) is at most the share set aside
    assert 0 < sum(c["delta_extra"] for c in charges) <= budget.run_delta_extra
    for c in charges:
        if c["mechanism"] == "gaussian_threshold":
            meas = dp.m.make_gaussian_threshold(
                dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T="i64")),
                dp.l02inf_distance(dp.absolute_distance(T="i64")), scale=c["scale"],
                threshold=c["threshold"])
            rho, delta = meas.map((1, 1, 1))
            assert c["rho"] == pytest.approx(rho, rel=1e-12)
            # delta: P[Z >= threshold - 1] of the discrete Gaussian, more than the map's
            # continuous tail (tests/test_sensitivity.py checks it against the closed form)
            assert c["delta_extra"] == pytest.approx(
                threshold_delta(c["scale"], c["threshold"]), rel=1e-12)
            assert c["delta_extra"] >= delta
        else:  # DP bounds: the bucket and the part histograms, each a Gaussian at this scale;
            # a density or the row count: one Gaussian histogram
            meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                                      dp.l2_distance(T="i64"), scale=c["scale"])
            histograms = 1 if c["purpose"].startswith(("density", "noisy row count")) else 2
            assert c["rho"] == pytest.approx(histograms * meas.map(1), rel=1e-12)
