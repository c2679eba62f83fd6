"""Adding a selection method is one module plus one line in `core.methods.METHODS`: a method
defined in tests/plugin_method.py, registered by the test alone, validates in a dataset spec,
gets its budget split, tells `marginals` what to count, and synthesizes end to end."""

import math

import pytest

from dp_synth_assets.api import SpecError, Synthesizer
from dp_synth_assets.core import methods
from dp_synth_assets.core.budget import DatasetBudget
from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example
from dp_synth_assets.core.select import required_cliques


@pytest.fixture
def registered(monkeypatch):
    """The registry line: name, module, default shares (1-way, scores), measures in selection."""
    monkeypatch.setitem(methods.METHODS, "independent",
                        methods.MethodInfo("tests.plugin_method", 0.5, 0.0, False))


def test_an_unregistered_method_is_refused_naming_the_choices():
    with pytest.raises(SpecError, match="unknown selection method 'independent'.*absyn"):
        Synthesizer(columns=EXAMPLE_COLUMNS, epsilon=1.0, method="independent")


def test_a_registered_method_runs_end_to_end_and_spends_the_run_budget(registered):
    synth = Synthesizer(columns=EXAMPLE_COLUMNS, epsilon=1.0, delta=1e-9, method="independent",
                        generator="gum", seed=3)
    domain = {c: 4 for c in EXAMPLE_COLUMNS}
    assert required_cliques("independent", domain) == [(c,) for c in domain]
    table = synth.fit(generate_example(1500, seed=2)).sample(500)
    assert table.num_rows == 500 and table.column_names == list(EXAMPLE_COLUMNS)
    report = synth.report.to_dict()
    budget = DatasetBudget.of(synth.spec)
    assert budget.shares == (0.5, 0.0) and budget.split.score == 0  # the registered shares
    assert math.isclose(budget.split.one_way, budget.split.measure, rel_tol=1e-12)  # its shares
    assert math.isclose(report["rho_spent"], budget.run_rho, rel_tol=1e-9)
    assert report["selected"] == [] or all(len(c) == 1 for c in report["selected"])
