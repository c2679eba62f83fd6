"""A selection method that lives outside the package, for tests/test_plugins.py: it measures the
1-way marginals and selects nothing else (the no-correlation baseline), so `measurements` spends
the rest of the budget on the 1-way marginals too."""

from dp_synth_assets.core.select import Budget, Charge, MarginalOracle, Selection
from dp_synth_assets.core.select.privsyn import measure_one_way


def needed_cliques(domain: dict[str, int], settings=None) -> list:
    """No marginal beyond the 1-way ones."""
    return []


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget, settings,
           charge: Charge) -> Selection:
    one_way = measure_one_way(domain, oracle, budget.one_way, charge)
    return Selection("independent", one_way, (), {}, details={"plugin": True})
