"""A discovery's share of the preprocessing budget grows with the categories it is expected to
reveal (`expected_categories`, preprocess.discovery_weight), and the charges still sum to the
preprocessing budget, each the OpenDP map's answer for its release."""

import math

import duckdb
import numpy as np
import pytest

from dp_synth_assets.budget import DatasetBudget
from dp_synth_assets.core import stages
from dp_synth_assets.core.config import RegistryError, parse_registry
from dp_synth_assets.core.preprocess import (MAX_DISCOVERY_SCALE, REFERENCE_CATEGORIES, Task,
                                             _threshold_measurement, all_tasks, discovery_weight,
                                             task_weight)

PRIVACY = {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 10.0, "delta": 1e-8}}


def spec(**columns):
    return parse_registry({"datasets": {"t": {"source": {"table": "main.t"}, "columns": columns,
                                              "privacy": PRIVACY}}})["t"]


def test_the_weight_is_the_base_up_to_the_reference_then_grows_linearly_to_a_cap():
    def weight(expected):
        return discovery_weight(spec(c={"kind": "categorical", "expected_categories": expected},
                                     x={"kind": "integer", "bounds": [0, 9]}).columns["c"])
    base = discovery_weight(spec(c={"kind": "categorical"},
                                 x={"kind": "integer", "bounds": [0, 9]}).columns["c"])
    assert base == 2.0  # the column without a hint: as before
    assert weight(1) == weight(REFERENCE_CATEGORIES) == base
    assert weight(10 * REFERENCE_CATEGORIES) == pytest.approx(10 * base)
    assert weight(10 ** 6) == weight(MAX_DISCOVERY_SCALE * REFERENCE_CATEGORIES) == \
        MAX_DISCOVERY_SCALE * base


@pytest.mark.parametrize("column, message", [
    ({"kind": "categorical", "categories": ["a"], "expected_categories": 5},
     "applies to a column without `categories`"),
    ({"kind": "categorical", "categories": {"from": "main.z.c"}, "expected_categories": 5},
     "applies to a column without `categories`"),
    ({"kind": "integer", "expected_categories": 5}, "does not apply to a integer column"),
    ({"kind": "boolean", "expected_categories": 5}, "expected_categories"),
    ({"kind": "categorical", "expected_categories": 0}, "greater than or equal to 1"),
])
def test_a_misplaced_hint_is_refused(column, message):
    with pytest.raises(RegistryError, match=message):
        spec(c=column, x={"kind": "integer", "bounds": [0, 9]})


def test_the_charges_follow_the_weights_and_sum_to_the_preprocessing_budget(tmp_path):
    rng = np.random.default_rng(0)
    n = 6000
    weights = 1.0 / np.arange(1, 201)  # Zipf-like: a few large zones, a long tail
    zone = rng.choice([f"z{i}" for i in range(200)], n, p=weights / weights.sum())
    pay = rng.choice(["card", "cash"], n)
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT unnest(?) AS zone, unnest(?) AS pay, unnest(?) AS x",
                [zone.tolist(), pay.tolist(), rng.integers(0, 500, n).tolist()])
    s = spec(zone={"kind": "categorical", "expected_categories": 200},
             pay={"kind": "categorical", "expected_categories": 2}, x={"kind": "integer"})
    tasks = all_tasks(s.columns)
    weights = {t: task_weight(t, s.columns[t.column]) for t in tasks}
    assert weights[Task("zone", "discover")] == pytest.approx(2.0 * 200 / REFERENCE_CATEGORIES)
    assert weights[Task("pay", "discover")] == 2.0
    budget = DatasetBudget.of(s)
    charges = []
    plan = stages.preprocess(con, s, "t", tmp_path, "main.enc", budget,
                             lambda spend, **p: charges.append((spend, p)))
    total = budget.with_rows(plan.noisy_rows).preprocess
    assert math.fsum(c.rho for c, _ in charges) == pytest.approx(total, rel=1e-9)
    discovered = {p["column"]: c for c, p in charges if p.get("purpose") == "category discovery"}
    # each release is charged its measurement's own map, the column's weight's share of the rest
    rest = total - budget.count
    for column in ("zone", "pay"):
        spend, params = discovered[column], next(p for c, p in charges
                                                  if p.get("column") == column)
        mapped = _threshold_measurement(spend.scale, params["threshold"]).map((1, 1, 1))[0]
        assert spend.rho == pytest.approx(float(mapped), rel=1e-12)
        share = weights[Task(column, "discover")] / sum(weights.values())
        assert spend.rho == pytest.approx(rest * share, rel=1e-6)
    assert discovered["zone"].rho / discovered["pay"].rho == pytest.approx(200 / 16 , rel=1e-6)
    # the larger share keeps more of the 200 zones than equal shares would
    equal = spec(zone={"kind": "categorical"}, pay={"kind": "categorical"}, x={"kind": "integer"})
    plan_equal = stages.preprocess(con, equal, "t", tmp_path, "main.enc2", DatasetBudget.of(equal),
                                   lambda spend, **p: None)
    assert len(plan["zone"].categories) > len(plan_equal["zone"].categories)
