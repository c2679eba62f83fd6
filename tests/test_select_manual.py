"""The `manual` method: measure exactly the declared marginals, no selection mechanism."""

import math

import numpy as np
import pytest

from dp_synth_assets.core.config import RegistryError, SelectionSettings, parse_registry
from dp_synth_assets.core.measure import optimal_split
from dp_synth_assets.core.select import required_cliques, select
from tests.helpers import ChargeRecorder, counting_oracle, example_entry, method_budget

DOMAIN = {"a": 3, "b": 4, "c": 5, "d": 2}


def data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    return {a: rng.integers(0, k, n) for a, k in DOMAIN.items()}


def test_declared_marginals_get_the_c_two_thirds_split_and_the_spend_is_the_budget():
    settings = SelectionSettings(marginals=[["b", "a"], ["a", "c", "d"], ["a", "b"], ["c"]])
    budget = method_budget("manual", 0.5)
    charge = ChargeRecorder()
    chosen = select("manual", DOMAIN, counting_oracle(data(), DOMAIN), budget, settings, charge)
    # repeats and the 1-way declaration dropped; columns in domain order
    assert chosen.cliques == (("a", "b"), ("a", "c", "d"))
    expected = optimal_split(budget.measure, [12, 30])
    assert [chosen.budgets[c] for c in chosen.cliques] == pytest.approx(expected, rel=1e-12)
    assert expected[1] / expected[0] == pytest.approx((30 / 12) ** (2 / 3))
    # selection spends the 1-way share only; the measurement stage spends the rest
    assert charge.rho == pytest.approx(budget.one_way, rel=1e-9)
    assert math.isclose(budget.one_way + sum(chosen.budgets.values()), 0.5, rel_tol=1e-9)
    assert ("a", "c", "d") in required_cliques("manual", DOMAIN, settings)


def test_all_pairs_measures_every_pair():
    chosen = select("manual", DOMAIN, counting_oracle(data(), DOMAIN), method_budget("manual", 1.0),
                    SelectionSettings(marginals="all_pairs"), ChargeRecorder())
    assert len(chosen.cliques) == 6


@pytest.mark.parametrize("selection, message", [
    ({}, "set selection.marginals"),
    ({"marginals": [["age", "nope"]]}, "not declared columns"),
    ({"marginals": "all_pairs", "score_share": 0.1}, "no selection scores"),
])
def test_bad_manual_settings_are_refused_at_load_with_the_fix(selection, message):
    entry = example_entry(method="manual", selection=selection)
    with pytest.raises(RegistryError, match=message):
        parse_registry({"datasets": {"example": entry}})


def test_marginals_with_another_method_are_refused():
    entry = example_entry(method="absyn", selection={"marginals": "all_pairs"})
    with pytest.raises(RegistryError, match="for method manual"):
        parse_registry({"datasets": {"example": entry}})
