"""MST selection (dp_synth_assets.core.select.mst): a private maximum spanning tree.

Unit tests use a generated integer table whose exact marginals are computed in numpy and served by
a fake oracle, and a fake `charge` that records every spend. Statistical assertions state their
false-failure rate below.
"""

import itertools
import math

import networkx as nx
import numpy as np
import opendp.prelude as dp
import pytest

from dp_synth_assets.core.config import SelectionSettings
from dp_synth_assets.core.measure import Measurement
from dp_synth_assets.core.select import Budget, Selection, mst, select
from tests.helpers import ChargeRecorder, method_budget

dp.enable_features("contrib")


# -- a generated table with a known dependency tree

def generate(rows: int, k: int, edges: list[tuple[str, str]], attrs: list[str], copy: float,
             seed: int) -> np.ndarray:
    """Integer columns with codes 0..k-1: a root drawn from a skewed distribution, then each child
    copies its parent with probability `copy`, else is uniform. `edges` are (parent, child) in
    an order where every parent comes first."""
    rng = np.random.default_rng(seed)
    cols = {}
    parents = {child: parent for parent, child in edges}
    root_p = np.arange(1, k + 1, dtype=np.float64)
    root_p /= root_p.sum()
    for a in attrs:
        if a not in parents:
            cols[a] = rng.choice(k, size=rows, p=root_p)
        else:
            keep = rng.random(rows) < copy
            cols[a] = np.where(keep, cols[parents[a]], rng.integers(0, k, size=rows))
    return np.column_stack([cols[a] for a in attrs])


def make_oracle(table: np.ndarray, domain: dict[str, int]):
    attrs = list(domain)
    asked = []

    def oracle(cliques):
        asked.extend(cliques)
        out = {}
        for clique in cliques:
            counts = np.zeros(tuple(domain[a] for a in clique), dtype=np.int64)
            np.add.at(counts, tuple(table[:, attrs.index(a)] for a in clique), 1)
            out[tuple(clique)] = counts
        return out

    oracle.asked = asked
    return oracle


def run_mst(table, domain, budget):
    charge = ChargeRecorder()
    oracle = make_oracle(table, domain)
    result = select("mst", domain, oracle, budget, SelectionSettings(), charge)
    return result, charge, oracle


CHAIN = ["A", "B", "C", "D"]
CHAIN_EDGES = [("A", "B"), ("B", "C"), ("C", "D")]
BRANCHING = ["A", "B", "C", "D", "E", "F"]
BRANCHING_EDGES = [("A", "B"), ("A", "C"), ("C", "D"), ("C", "E"), ("B", "F")]


# -- the selection is a spanning tree and spends exactly its share

@pytest.mark.parametrize("rho", [1e-4, 0.05, 2.0])
def test_spanning_tree_and_spend(rho):
    attrs = list("abcdefg")
    domain = {a: k for a, k in zip(attrs, [2, 3, 4, 5, 3, 2, 6])}
    table = np.column_stack([np.random.default_rng(7 + i).integers(0, domain[a], 500)
                             for i, a in enumerate(attrs)])
    budget = method_budget("mst", rho)
    result, charge, oracle = run_mst(table, domain, budget)

    assert isinstance(result, Selection) and result.method == "mst"
    graph = nx.Graph()
    graph.add_nodes_from(attrs)
    graph.add_edges_from(result.cliques)
    assert len(result.cliques) == len(attrs) - 1
    assert nx.is_tree(graph) and graph.number_of_nodes() == len(attrs)
    assert all(c in itertools.combinations(attrs, 2) for c in result.cliques)  # domain order

    # selection charges the 1-way marginals and the d-1 rounds; measurement is charged later
    assert math.isclose(charge.rho, budget.one_way + budget.score, rel_tol=1e-9)
    assert math.isclose(sum(result.budgets.values()), budget.measure, rel_tol=1e-12)
    assert set(result.budgets) == set(result.cliques)
    assert len({round(r, 15) for r in result.budgets.values()}) == 1  # an even split
    kinds = [s.mechanism for s, _ in charge.calls]
    assert kinds == ["gaussian_counts"] * len(attrs) + ["exponential_mechanism"] * (len(attrs) - 1)
    # the rounds never exceed their share: rho_score / (d - 1) each
    per_round = budget.score / (len(attrs) - 1)
    assert all(s.rho <= per_round for s, _ in charge.calls if s.mechanism == "exponential_mechanism")

    # the published part: no exact scores, the rounds' picks match the cliques
    assert result.scores == {}
    assert [tuple(r["pair"]) for r in result.details["rounds"]] == list(result.cliques)
    candidates = [r["candidates"] for r in result.details["rounds"]]
    assert candidates[0] == len(attrs) * (len(attrs) - 1) // 2
    assert all(later < earlier for earlier, later in itertools.pairwise(candidates))
    assert Selection.from_dict(result.to_dict()).cliques == result.cliques
    # the oracle was asked for the 1-way marginals and the pairs, nothing more
    assert set(oracle.asked) == {(a,) for a in attrs} | set(itertools.combinations(attrs, 2))


def test_every_charge_is_the_opendp_map():
    """Each recorded rho is what the OpenDP measurement with the recorded scale reports."""
    domain = {a: 3 for a in "pqrst"}
    table = np.random.default_rng(3).integers(0, 3, size=(400, 5))
    result, charge, _ = run_mst(table, domain, method_budget("mst", 0.3))
    assert len(charge.calls) == 5 + 4
    for spend, params in charge.calls:
        if spend.mechanism == "gaussian_counts":
            meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                                      dp.l2_distance(T="i64"), scale=spend.scale)
            assert spend.rho == meas.map(1)
            assert params["purpose"] == "one-way marginal"
        else:
            assert spend.mechanism == "exponential_mechanism"
            meas = dp.m.make_noisy_max(dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                                       dp.linf_distance(T=float, monotonic=False),
                                       dp.zero_concentrated_divergence(), scale=spend.scale)
            assert spend.rho == meas.map(1.0)
            assert spend.sensitivity == 1.0 and spend.delta_extra == 0.0
            assert params["purpose"] == "MST spanning-tree round"
    # the measurements the selection hands over carry the same scale and rho as charged
    for m, (spend, _) in zip(result.one_way, charge.calls):
        assert (m.sigma, m.rho) == (spend.scale, spend.rho)


def test_exponential_mechanism_scale_matches_rho():
    from dp_synth_assets.core.privacy import exponential_mechanism

    for rho in [1e-6, 0.0123456, 1 / 3, 7.0]:
        _, spend = exponential_mechanism([1.0, 2.0], rho)
        assert spend.rho <= rho
        assert math.isclose(spend.rho, rho, rel_tol=1e-12)
        assert math.isclose(spend.scale, 1 / math.sqrt(2 * rho), rel_tol=1e-12)
    with pytest.raises(ValueError):
        exponential_mechanism([1.0], 0.0)


def test_independence_errors_use_the_noisy_total():
    """With (almost) exact 1-way marginals the score is InDif; noisy_total, not the row count, scales it."""
    domain = {"x": 2, "y": 3}
    table = generate(5000, 2, [], ["x"], 0.0, seed=1)
    noise = np.random.default_rng(2).integers(0, 2, 5000)
    table = np.column_stack([table[:, 0], (table[:, 0] + noise) % 3])
    exact = make_oracle(table, domain)([("x",), ("y",), ("x", "y")])
    one_way = (Measurement(("x",), exact[("x",)].astype(float), 1.0, 0.5),
               Measurement(("y",), exact[("y",)].astype(float), 1.0, 0.5))
    got = mst.independence_errors([("x", "y")], exact, one_way)[0]
    m = exact[("x", "y")]
    assert math.isclose(got, np.abs(m - np.outer(m.sum(1), m.sum(0)) / m.sum()).sum(), rel_tol=1e-9)

    # a noisy total 10% high scales the estimate, and negative noisy cells are clipped
    high = (Measurement(("x",), exact[("x",)] * 1.1, 1.0, 0.5),
               Measurement(("y",), np.append(exact[("y",)][:2] * 1.1, -3.0), 1.0, 0.5))
    p_x = exact[("x",)] / exact[("x",)].sum()
    p_y = np.append(exact[("y",)][:2], 0.0) / exact[("y",)][:2].sum()
    noisy_total = (high[0].noisy.sum() / 2 + high[1].noisy.sum() / 3) / (1 / 2 + 1 / 3)
    got = mst.independence_errors([("x", "y")], exact, high)[0]
    assert math.isclose(got, np.abs(m - noisy_total * np.outer(p_x, p_y)).sum(), rel_tol=1e-9)


# -- edge cases

def test_single_attribute_selects_nothing():
    domain = {"only": 4}
    table = np.random.default_rng(0).integers(0, 4, size=(100, 1))
    budget = method_budget("mst", 1.0)
    result, charge, _ = run_mst(table, domain, budget)
    assert result.cliques == () and result.budgets == {} and result.details["rounds"] == []
    assert math.isclose(charge.rho, budget.one_way, rel_tol=1e-12)  # score and measure unspent
    assert len(result.one_way) == 1


def test_two_attributes_one_round():
    domain = {"a": 2, "b": 3}
    table = np.random.default_rng(0).integers(0, 2, size=(100, 2))
    budget = method_budget("mst", 0.5)
    result, charge, _ = run_mst(table, domain, budget)
    assert result.cliques == (("a", "b"),)
    assert result.budgets == {("a", "b"): budget.measure}
    assert math.isclose(charge.rho, budget.one_way + budget.score, rel_tol=1e-12)


def test_negative_measurement_budget_is_refused():
    domain = {"a": 2, "b": 2}
    table = np.zeros((10, 2), dtype=np.int64)
    with pytest.raises(ValueError, match="measurement budget"):
        run_mst(table, domain, Budget(0.5, 0.6, -0.1))
