"""`auto`: the rule picks from public facts only, and its pick runs on the 1-ways it measured."""

import math

import networkx as nx
import numpy as np
import pytest

from dp_synth_assets.core.config import SelectionSettings
from dp_synth_assets.core.measure import optimal_split
from dp_synth_assets.core.select import Budget, select
from dp_synth_assets.core.select.auto import (MST_NOISE_MAX, SCORE_NOISE_MAX, Settings,
                                              mst_edge_noise, pick)
from tests.helpers import counting_oracle


def test_rule_is_the_score_noise_share_of_the_noisy_row_count():
    """sigma_s = sqrt(16 m / (2 rho_s)) counts; 10 columns: m = 45. At rho_s = 0.01 sigma_s =
    sqrt(36000) = 189.7: absyn for n_hat = 10,000 (share 0.019), MST for n_hat = 1,000 (0.19)
    when MST's edges are cheap (rho_m = 0.2: nu = 9 sqrt(9 / 0.4) sqrt(2 / pi) / 1000 = 0.034)."""
    domain = {f"c{i}": 3 for i in range(10)}
    method, share, _ = pick(domain, 10_000.0, 0.01, 0.2)
    assert method == "absyn" and share == pytest.approx(math.sqrt(16 * 45 / 0.02) / 10_000)
    method, share, nu = pick(domain, 1_000.0, 0.01, 0.2)
    assert method == "mst" and share > SCORE_NOISE_MAX
    assert nu == pytest.approx(9 * math.sqrt(9 / 0.4) * math.sqrt(2 / math.pi) / 1000)


def test_noisy_scores_pick_absyn_when_msts_edges_would_be_noise():
    """The same noisy scores (share 0.19), but rho_m = 0.01: one edge's expected L1 noise is
    9 sqrt(9 / 0.02) sqrt(2 / pi) / 1000 = 0.152 of the rows, above MST_NOISE_MAX: absyn (which
    measures nothing it cannot detect). The median pair decides: one large column among small
    ones does not move it."""
    domain = {f"c{i}": 3 for i in range(10)}
    method, share, nu = pick(domain, 1_000.0, 0.01, 0.01)
    assert method == "absyn" and share > SCORE_NOISE_MAX and nu > MST_NOISE_MAX
    assert nu == pytest.approx(9 * math.sqrt(9 / 0.02) * math.sqrt(2 / math.pi) / 1000)
    wide = {**domain, "big": 500}
    assert mst_edge_noise(wide, 1_000.0, 0.2) == pytest.approx(
        9 * math.sqrt(10 / 0.4) * math.sqrt(2 / math.pi) / 1000)
    assert pick(wide, 1_000.0, 0.01, 0.2)[0] == "mst"


def test_auto_spends_its_split_once_and_says_what_it_picked():
    rng = np.random.default_rng(0)
    n = 3000
    a = rng.integers(0, 2, n)
    data = {"a": a, "b": np.where(rng.random(n) < 0.1, 1 - a, a), "c": rng.integers(0, 3, n)}
    domain = {"a": 2, "b": 2, "c": 3}
    spends = []
    budget = Budget(0.05, 0.05, 0.4)
    chosen = select("auto", domain, counting_oracle(data, domain), budget, SelectionSettings(),
                    lambda spend, **_: spends.append(spend))
    assert chosen.details["picked"] in ("absyn", "mst") and chosen.method == "auto"
    assert math.isclose(sum(s.rho for s in spends), budget.one_way + budget.score, rel_tol=1e-9)
    assert len(chosen.one_way) == 3 and ("a", "b") in chosen.cliques



def _ten_columns(n: int, seed: int) -> tuple[dict, dict]:
    """Ten 3-code columns, each a noisy copy of the one before (a chain)."""
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, 3, n)]
    for _ in range(9):
        cols.append(np.where(rng.random(n) < 0.2, rng.integers(0, 3, n), cols[-1]))
    return {f"c{i}": c for i, c in enumerate(cols)}, {f"c{i}": 3 for i in range(10)}


def _auto(data: dict, domain: dict, budget: Budget, pick: str | None = None):
    """auto's selection (its branch fixed by `pick`, else the rule's) and its charges, in
    order; it spends exactly rho_1 + rho_s."""
    spends = []
    chosen = select("auto", domain, counting_oracle(data, domain), budget, Settings(pick=pick),
                    lambda spend, **_: spends.append(spend))
    assert math.isclose(sum(s.rho for s in spends), budget.one_way + budget.score, rel_tol=1e-9)
    return chosen, spends


def test_the_tree_branch_runs_absyns_greedy_over_msts_private_tree():
    """`selection.pick: tree` (score share sqrt(16 * 45 / 0.004) / 2000 = 0.21). Half of rho_s
    picks MST's tree (9 exponential-mechanism rounds at rho_s / 18 each), the other half
    releases absyn's R-scores; the 1-way marginals get the whole rho_1 (a third, then two thirds,
    merged). The tree is a spanning tree of the chain's columns and every edge of it is kept and
    measured; on this chain (a strong dependence per link) at least 8 of its 9 edges are true."""
    data, domain = _ten_columns(2000, 1)
    chosen, spends = _auto(data, domain, Budget(0.3, 0.002, 1.0), pick="tree")
    assert chosen.details["picked"] == "tree"
    tree = [tuple(e) for e in chosen.details["tree"]]
    assert len(tree) == 9 and nx.is_tree(nx.Graph(tree))
    assert set(tree) <= set(chosen.cliques) and not chosen.measured
    assert len({(f"c{i}", f"c{i + 1}") for i in range(9)} & set(tree)) >= 8
    rounds = [s.rho for s in spends if s.mechanism == "exponential_mechanism"]
    assert rounds == pytest.approx([0.001 / 9] * 9, rel=1e-9)
    scores = [s.rho for s in spends if s.mechanism == "gaussian_scores"]
    assert scores == pytest.approx([0.001], rel=1e-9)
    assert math.fsum(m.rho for m in chosen.one_way) == pytest.approx(0.3, rel=1e-9)


def test_the_mst_branch_measures_its_edges_with_the_one_way_budget_it_does_not_use():
    """Score share sqrt(16 * 45 / 0.004) / 2000 = 0.21 and nu 0.007: MST. Its 1-way marginals
    take a third of rho_1; the other two thirds measure its d - 1 edges at once, split as the
    selection's budgets split rho_m."""
    chosen, _ = _auto(*_ten_columns(2000, 1), Budget(0.3, 0.002, 1.0))
    assert chosen.details["picked"] == "mst"
    assert math.fsum(m.rho for m in chosen.one_way) == pytest.approx(0.1, rel=1e-9)
    assert [m.clique for m in chosen.measured] == list(chosen.cliques) and len(chosen.cliques) == 9
    weights = np.array([chosen.budgets[c] for c in chosen.cliques])
    assert [m.rho for m in chosen.measured] == pytest.approx(list(0.2 * weights / weights.sum()),
                                                             rel=1e-9)


def test_the_absyn_branch_measures_the_one_way_marginals_at_the_whole_rho_1_by_cells():
    """n = 20,000 at rho_s = 0.05 (share 0.004): absyn. The 1-way marginals are drawn twice
    (a third, then two thirds of rho_1, each split by codes^(2/3)) and merged: one measurement
    per column at its share of rho_1, sigma = sqrt(1 / (2 rho)). One column of 12 codes makes
    the split uneven."""
    data, domain = _ten_columns(20_000, 2)
    data["c9"], domain["c9"] = np.random.default_rng(3).integers(0, 12, 20_000), 12
    chosen, spends = _auto(data, domain, Budget(0.3, 0.05, 0.6))
    assert chosen.details["picked"] == "absyn"
    sizes = list(domain.values())
    draws = [s.rho for s in spends if s.mechanism == "gaussian_counts"]
    assert draws == pytest.approx(optimal_split(0.1, sizes) + optimal_split(0.2, sizes), rel=1e-9)
    assert [m.rho for m in chosen.one_way] == pytest.approx(optimal_split(0.3, sizes), rel=1e-9)
    assert all(math.isclose(m.sigma, math.sqrt(1 / (2 * m.rho)), rel_tol=1e-9)
               for m in chosen.one_way)
    assert chosen.cliques and not chosen.measured


def test_one_column_selects_nothing_whatever_pick_says():
    """With one column there is no pair: `pick: mst` or `tree` still runs no selection mechanism;
    only the 1-way marginal is drawn (rho_1, in two draws) and `picked` says absyn."""
    data = {"a": np.random.default_rng(0).integers(0, 3, 500)}
    for branch in ("mst", "tree"):
        chosen, spends = _auto(data, {"a": 3}, Budget(0.3, 0.05, 0.6), pick=branch)
        assert chosen.details["picked"] == "absyn" and not chosen.cliques
        assert all(s.mechanism == "gaussian_counts" for s in spends)
