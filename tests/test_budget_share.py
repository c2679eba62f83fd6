"""The preprocessing share follows a noisy row count (issue 16, small tables): with category
discovery, preprocessing draws a charged noisy count first and spends `preprocess_share` of the
run's rho, more on small tables and at small budgets; the later stages split the rest with the count the plan
records, and every subset of stages spends within what a run reserves for it."""

import itertools
import math

import duckdb
import numpy as np
import pytest

from dp_synth_assets.core import budget as b
from dp_synth_assets.core import stages
from dp_synth_assets.core.config import DatasetSpec
from dp_synth_assets.core.domain import EncodingPlan


def spec(**columns) -> DatasetSpec:
    return DatasetSpec.model_validate({
        "source": {"table": "main.t"}, "columns": columns,
        "privacy": {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 10.0, "delta": 1e-8}}})


DISCOVERS = spec(c={"kind": "categorical"}, x={"kind": "integer"})
BOUNDS_ONLY = spec(x={"kind": "integer"}, y={"kind": "integer"})


def rows_at(z: float, budget: b.DatasetBudget) -> float:
    return z / math.sqrt(budget.run_rho)


def test_the_share_falls_with_the_budget_and_rises_as_the_table_shrinks():
    budget = b.DatasetBudget.of(DISCOVERS)  # epsilon 1: rho ~0.0144, above HIGH_RHO
    rho = budget.run_rho
    assert rho > b.HIGH_RHO
    assert b.preprocess_share(None, rho) == b.MIN_PREPROCESS_SHARE
    assert b.preprocess_share(rows_at(b.LARGE_Z, budget), rho) == pytest.approx(
        b.MIN_PREPROCESS_SHARE)
    assert b.preprocess_share(rows_at(50 * b.LARGE_Z, budget), rho) == b.MIN_PREPROCESS_SHARE
    assert b.preprocess_share(rows_at(b.SMALL_Z, budget), rho) == pytest.approx(
        b.SMALL_PREPROCESS_SHARE)
    assert b.preprocess_share(0.0, rho) == b.SMALL_PREPROCESS_SHARE
    middle = math.sqrt(b.SMALL_Z * b.LARGE_Z)  # log-linear: half way at the geometric mean
    assert b.preprocess_share(rows_at(middle, budget), rho) == pytest.approx(
        (b.MIN_PREPROCESS_SHARE + b.SMALL_PREPROCESS_SHARE) / 2)
    # a large table's share follows the run's rho: PREPROCESS_SHARE at a small budget
    many = 1e9
    assert b.preprocess_share(many, b.LOW_RHO / 10) == b.PREPROCESS_SHARE
    assert b.preprocess_share(many, b.LOW_RHO) == pytest.approx(b.PREPROCESS_SHARE)
    assert b.preprocess_share(many, b.HIGH_RHO) == pytest.approx(b.MIN_PREPROCESS_SHARE)
    assert b.preprocess_share(many, math.sqrt(b.LOW_RHO * b.HIGH_RHO)) == pytest.approx(
        (b.PREPROCESS_SHARE + b.MIN_PREPROCESS_SHARE) / 2)
    # never rises with more rows or more budget, and stays in the range reservations cover
    for r in np.geomspace(1e-5, 10, 25):
        shares = [b.preprocess_share(n, r) for n in np.geomspace(10, 1e8, 40)]
        assert all(x >= y for x, y in zip(shares, shares[1:]))
        assert all(b.MIN_PREPROCESS_SHARE <= x <= b.SMALL_PREPROCESS_SHARE for x in shares)
    for n in np.geomspace(10, 1e8, 25):
        shares = [b.preprocess_share(n, r) for r in np.geomspace(1e-5, 10, 40)]
        assert all(x >= y for x, y in zip(shares, shares[1:]))


def test_only_a_run_that_discovers_categories_draws_a_count_and_moves_its_split():
    assert b.DatasetBudget.of(BOUNDS_ONLY).count == 0
    assert b.DatasetBudget.of(BOUNDS_ONLY).with_rows(50) == b.DatasetBudget.of(BOUNDS_ONLY)
    budget = b.DatasetBudget.of(DISCOVERS)
    assert budget.count == pytest.approx(b.COUNT_SHARE * budget.run_rho)
    small = budget.with_rows(100)
    assert small.preprocess == pytest.approx(b.SMALL_PREPROCESS_SHARE * budget.run_rho)
    assert small.domains_rho() == pytest.approx(small.preprocess - budget.count)
    assert budget.domains_rho(100) == pytest.approx(small.preprocess - budget.count)
    rest = budget.run_rho - small.preprocess  # the method's shares of what is left
    assert small.split.one_way + small.split.score + small.split.measure == pytest.approx(rest)
    assert small.split.one_way / rest == pytest.approx(budget.split.one_way /
                                                       (budget.run_rho - budget.preprocess))


@pytest.mark.parametrize("method", ["absyn", "aim", "mst"])
def test_every_subset_of_stages_spends_within_its_reservation_at_any_count(method):
    budget = b.DatasetBudget.of(DISCOVERS.model_copy(update={"method": method}))
    for k in range(1, len(b.PRIVATE_STAGES) + 1):
        for subset in itertools.combinations(b.PRIVATE_STAGES, k):
            reserved = budget.reservation(subset)
            for n in [0, 1, 30, 300, 3000, 3e4, 3e6]:
                spent = sum(budget.with_rows(n).stage_rho(s) for s in subset)
                assert b.fits(spent, reserved), (subset, n)
    assert budget.reservation(b.PRIVATE_STAGES) == pytest.approx(budget.run_rho)
    assert budget.reservation(("preprocessed",)) == pytest.approx(
        b.SMALL_PREPROCESS_SHARE * budget.run_rho)


def test_a_small_table_spends_its_larger_share_with_the_count_charged_first(tmp_path):
    rng = np.random.default_rng(0)
    con = duckdb.connect()
    n = 300
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES " + ", ".join(
        f"('{c}', {x})" for c, x in zip(rng.choice(["a", "b"], n), rng.integers(0, 9, n)))
        + ") v(c, x)")
    budget = b.DatasetBudget.of(DISCOVERS)
    charges = []

    def charge(spend, **params):
        charges.append((spend, params))

    plan = stages.preprocess(con, DISCOVERS, "t", tmp_path, "main.enc", budget, charge)
    first, params = charges[0]
    assert "row count" in params["purpose"] and first.rho == pytest.approx(budget.count)
    assert plan.noisy_rows == pytest.approx(n, abs=6 * first.scale)
    spent = math.fsum(s.rho for s, _ in charges)
    assert spent == pytest.approx(budget.with_rows(plan.noisy_rows).preprocess)
    # 300 rows at epsilon 1: z ~ 36 (at most ~80 with a 6-sigma count), the small tables' share,
    # not the 0.3 a table with enough rows gets at this rho
    assert spent == pytest.approx(b.SMALL_PREPROCESS_SHARE * budget.run_rho)
    assert EncodingPlan.from_json(plan.to_json()) == plan
    assert EncodingPlan.from_json(EncodingPlan(plan.encodings).to_json()).noisy_rows is None
