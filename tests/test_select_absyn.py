"""ABSyn's selection: Eq. 6, Algorithm 1's CR-score, and the greedy on a conditional independence."""

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from dp_synth_assets.core.config import SelectionSettings
from dp_synth_assets.core.select import Budget, select
from dp_synth_assets.core.select.absyn import cr_scores, normalize_scores, triangulate
from tests.helpers import counting_oracle


def test_cr_score_of_figure_1():
    index = {"A1": 0, "A2": 1, "A3": 2}
    pairs = [("A1", "A2"), ("A1", "A3"), ("A2", "A3")]
    r_bar = np.array([0.56, 0.96, 0.56])
    cr = cr_scores(index, pairs, r_bar, {("A1", "A2"), ("A1", "A3")})
    assert cr[2] == pytest.approx(0.56 - 0.56 * 0.96)  # 0.022, not 0 (docs/decisions/0013-absyn.md)
    assert cr[0] == pytest.approx(0.0) and cr[1] == pytest.approx(0.0)
    assert cr_scores(index, pairs, r_bar, set())[2] == pytest.approx(0.56)  # no path: CR = R_bar


def test_cr_score_is_the_best_path_product_found_by_enumerating_every_path():
    """Algorithm 1's max-product path weight on random graphs of 7 columns, against every
    simple path between the pair (networkx); a score above 1 weighs as 1 on a path."""
    rng = np.random.default_rng(5)
    names = [f"c{i}" for i in range(7)]
    index = {a: i for i, a in enumerate(names)}
    pairs = list(itertools.combinations(names, 2))
    for _ in range(20):
        r_bar = rng.uniform(0.0, 1.2, len(pairs)) * (rng.random(len(pairs)) > 0.2)
        edges = {p for p in pairs if rng.random() < 0.4}
        graph = nx.Graph([p for p in edges if r_bar[pairs.index(p)] > 0])
        cr = cr_scores(index, pairs, r_bar, edges)
        for k, (a, b) in enumerate(pairs):
            best = 0.0
            if a in graph and b in graph:
                for path in nx.all_simple_paths(graph, a, b):
                    weights = [r_bar[pairs.index(tuple(sorted(e, key=index.get)))]
                               for e in zip(path, path[1:])]
                    best = max(best, math.prod(min(w, 1.0) for w in weights))
            assert cr[k] == pytest.approx(r_bar[k] - best, abs=1e-12), (a, b)


def test_normalized_r_score_is_equation_6():
    pairs = [("a", "b"), ("a", "c")]
    domain = {"a": 4, "b": 2, "c": 10}
    r_bar = normalize_scores(np.array([300.0, 5000.0]), pairs, domain, noisy_total=1000.0)
    assert r_bar[0] == pytest.approx(0.3 * 2 / (2 * 1))
    assert r_bar[1] == 1.0  # 5.0 * 4 / 6 clipped to 1


def test_triangulation_fills_in_a_chordless_cycle():
    edges = {("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")}
    filled, cliques = triangulate(["a", "b", "c", "d"], edges)
    assert len(filled) == 5 and edges < filled
    assert nx.is_chordal(nx.Graph(list(filled)))
    assert all(len(c) == 3 for c in cliques)


def test_does_not_select_a_pair_independent_given_a_third_where_privsyn_does():
    """ABSyn Fig. 1: A2 and A3 depend on each other only through A1 (binary channels:
    A2 flips A1 20% of the time, A3 flips it 5%; R_bar = correlation: 0.6, 0.9, 0.54 = 0.6 * 0.9).
    Once (A1, A3) and (A1, A2) are selected, CR(A2, A3) = 0.54 - 0.6 * 0.9 = 0 up to sampling
    noise (sd about 80 counts at n = 20,000), far below the cost of measuring a third pair at
    this rho_2 (about 530 counts; 6.6 sd). InDif (PrivSyn) sees a dependency of ~10,000 counts."""
    rng = np.random.default_rng(0)
    n = 20_000
    a1 = rng.integers(0, 2, n)
    data = {"A1": a1, "A2": np.where(rng.random(n) < 0.2, 1 - a1, a1),
            "A3": np.where(rng.random(n) < 0.05, 1 - a1, a1)}
    domain = {"A1": 2, "A2": 2, "A3": 2}
    budget = Budget(one_way=10.0, score=1000.0, measure=1e-4)
    spends = []
    chosen = select("absyn", domain, counting_oracle(data, domain), budget, SelectionSettings(),
                    lambda spend, **_: spends.append(spend))
    assert set(chosen.cliques) == {("A1", "A2"), ("A1", "A3")}
    assert math.isclose(sum(s.rho for s in spends), budget.one_way + budget.score, rel_tol=1e-9)
    assert math.isclose(sum(chosen.budgets.values()), budget.measure, rel_tol=1e-12)
    privsyn = select("privsyn", domain, counting_oracle(data, domain), budget, SelectionSettings(),
                     lambda *a, **k: None)
    assert ("A2", "A3") in privsyn.cliques


def test_selection_is_triangulated_and_respects_tau():
    rng = np.random.default_rng(1)
    n, d = 5000, 6
    base = rng.integers(0, 3, n)
    data = {f"x{i}": (base + (rng.random(n) < 0.3) * rng.integers(0, 3, n)) % 3 for i in range(d)}
    domain = {k: 3 for k in data}
    chosen = select("absyn", domain, counting_oracle(data, domain), Budget(1.0, 1.0, 5.0),
                    SelectionSettings(), lambda *a, **k: None)
    graph = nx.Graph(list(chosen.cliques))
    assert chosen.cliques and nx.is_chordal(graph)
    assert max(3 ** len(c) for c in nx.chordal_graph_cliques(graph)) < 100_000
    assert set(chosen.cliques) <= set(itertools.combinations(list(domain), 2))


def chain_table(n: int, d: int, flip: float, seed: int) -> dict[str, np.ndarray]:
    """A Bayesian network of d binary columns, a Markov chain: x0 is a fair coin and x_i copies
    x_{i-1} except with probability `flip`. True edges: (x_{i-1}, x_i); every other pair is
    dependent only through the chain (correlation (1 - 2 flip)^|i - j|, weak when far apart)."""
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, 2, n)]
    for _ in range(1, d):
        cols.append(np.where(rng.random(n) < flip, 1 - cols[-1], cols[-1]))
    return {f"x{i:02d}": c for i, c in enumerate(cols)}


def test_greedy_error_is_closed_form_and_e0_on_the_candidates_scale():
    """Three binary columns, n = 10,000: one strong pair (R = 5000 counts) and two noise draws
    below 0. The raw sum E_0 = -1000 beats every candidate and nothing would be selected; on the
    candidates' scale (clipped) E_0 = 5000 and selecting (a, b) leaves E = E_eta of one 4-cell
    marginal = FIT_NOISE_SHARE 4 / sqrt(pi rho) (E_cor = 0: the other pairs' scores clip to 0)."""
    from dp_synth_assets.core.select.absyn import FIT_NOISE_SHARE, greedy

    pairs = [("a", "b"), ("a", "c"), ("b", "c")]
    domain = {"a": 2, "b": 2, "c": 2}
    n, rho = 10_000.0, 1.0
    r_bar = normalize_scores(np.array([5000.0, -3000.0, -3000.0]), pairs, domain, n)
    selected, trace, _ = greedy(pairs, r_bar, domain, n, rho, tau=100_000)
    assert selected == [("a", "b")]
    assert FIT_NOISE_SHARE == 0.5
    assert trace[0]["total_error"] == pytest.approx(0.5 * 4 / math.sqrt(math.pi * rho), abs=1e-3)
    # a second pair would only add noise error: the greedy stops after one round
    assert len(trace) == 1


def test_greedy_begins_with_its_start_and_scores_the_rest_against_its_paths():
    """`start` (auto's private tree) is selected before round 1 and kept. A chain a - b - c of
    perfect dependencies given as the start explains (a, c) fully (CR = 1 - 1 x 1 = 0): nothing
    is added. A start pair of score 0 next to one scored pair: the greedy adds the scored pair and
    its error is then the noise of both 4-cell marginals, FIT_NOISE_SHARE (2 4^(2/3))^(3/2) /
    sqrt(pi rho) (ABSyn Eq. 10 at the optimal split), every correlation error gone."""
    from dp_synth_assets.core.select.absyn import FIT_NOISE_SHARE, greedy

    pairs = [("a", "b"), ("a", "c"), ("b", "c")]
    domain = {"a": 2, "b": 2, "c": 2}
    n, rho = 10_000.0, 1.0
    perfect = np.ones(3)
    chain = (("a", "b"), ("b", "c"))
    selected, trace, _ = greedy(pairs, perfect, domain, n, rho, tau=100_000, start=chain)
    assert selected == list(chain) and trace == []
    unscored = normalize_scores(np.array([0.0, 5000.0, 0.0]), pairs, domain, n)
    selected, trace, _ = greedy(pairs, unscored, domain, n, rho, tau=100_000,
                                start=(("a", "b"),))
    assert selected == [("a", "b"), ("a", "c")] and len(trace) == 1
    assert trace[0]["total_error"] == pytest.approx(
        FIT_NOISE_SHARE * (2 * 4 ** (2 / 3)) ** 1.5 / math.sqrt(math.pi * rho), abs=1e-3)
    # without a start the chain's scores pick two pairs in rounds, not before them
    assert len(greedy(pairs, perfect, domain, n, rho, tau=100_000)[1]) >= 2


def test_selects_true_edges_on_a_wide_table_of_weak_far_pairs():
    """24 binary columns in a chain (276 pairs, most of them weak), 10,000 rows, epsilon 1: the
    noisy scores of the weak far pairs sum below zero, so a raw-sum E_0 selects nothing. On one
    scale the greedy selects marginals that cover most true chain edges."""
    from dp_synth_assets.core.privacy import rho_from_epsilon_delta
    from tests.helpers import method_budget

    data = chain_table(10_000, 24, 0.15, seed=0)
    domain = {k: 2 for k in data}
    edges = {(f"x{i - 1:02d}", f"x{i:02d}") for i in range(1, 24)}
    chosen = select("absyn", domain, counting_oracle(data, domain),
                    method_budget("absyn", rho_from_epsilon_delta(1.0, 1e-9)),
                    SelectionSettings(), lambda *a, **k: None)
    assert chosen.details["rounds"], "absyn stopped before its first round"
    assert len(set(chosen.cliques) & edges) >= 18


def test_small_table_releases_no_score_and_spends_the_selection_on_one_way_marginals():
    """400 rows of six binary columns in a strong chain, epsilon 1: the R-score noise floor (2 sd
    of sqrt(8 m / rho_s)) is above the largest score a binary pair can have (n), so no pair is
    detectable: absyn releases no score, selects nothing, and measures the 1-way marginals again
    with the score budget (the run is the independent model at its whole budget). Before, it
    released the scores and bought pairs whose scores passed the floor by noise alone, leaving
    the 1-way marginals a tenth of the budget."""
    from dp_synth_assets.core.privacy import rho_from_epsilon_delta
    from tests.helpers import method_budget

    data = chain_table(400, 6, 0.05, seed=1)
    domain = {k: 2 for k in data}
    budget = method_budget("absyn", rho_from_epsilon_delta(1.0, 1e-9))
    charges = []
    chosen = select("absyn", domain, counting_oracle(data, domain), budget, SelectionSettings(),
                    lambda spend, **params: charges.append((spend, params)))
    assert chosen.cliques == () and chosen.details["detectable_pairs"] == 0
    assert not any(p.get("purpose") == "R-scores" for _, p in charges)
    assert sorted(m.clique for m in chosen.measured) == sorted((a,) for a in domain)
    assert sum(m.rho for m in chosen.measured) == pytest.approx(budget.score)
    assert sum(s.rho for s, _ in charges) == pytest.approx(budget.one_way + budget.score)


def test_detectable_pairs_shrink_until_the_floor_is_stable():
    """Pairs whose largest possible score 2 n (k - 1) / k is below the floor are left out; fewer
    pairs lower the floor (2 sqrt(8 m / rho_s)), so a wide pair can stay while binary ones go."""
    from dp_synth_assets.core.select.absyn import detectable

    domain = {"a": 2, "b": 2, "c": 2, "w": 50, "v": 50}
    pairs = list(itertools.combinations(domain, 2))
    rho_s, n = 0.001, 300.0
    floor = 2 * math.sqrt(8 * len(pairs) / rho_s)  # 566 counts with all 10 pairs released
    assert 2 * n / 2 < floor <= 2 * n * 49 / 50
    assert detectable(pairs, domain, n, rho_s) == [("w", "v")]
    assert detectable(pairs, domain, 1e6, rho_s) == pairs
    assert detectable(pairs, domain, n, 0.0) == []



def test_absyn_splits_the_one_way_rho_evenly_and_by_cells_only_when_asked():
    """ABSyn section VI.B (docs/decisions/0013-absyn.md): rho_1 = 0.1 rho split evenly (absyn's own
    run); `by_cells` (auto's and aim's choice) splits it by codes^(2/3), `optimal_split`."""
    from dp_synth_assets.core.measure import optimal_split
    from dp_synth_assets.core.select.privsyn import measure_one_way
    from tests.helpers import ChargeRecorder, method_budget

    domain = {"a": 2, "b": 9, "c": 100}
    rng = np.random.default_rng(0)
    oracle = counting_oracle({a: rng.integers(0, k, 500) for a, k in domain.items()}, domain)
    for by_cells, expected in ((False, [0.1] * 3), (True, optimal_split(0.3, [2, 9, 100]))):
        charges = ChargeRecorder()
        measure_one_way(domain, oracle, 0.3, charges, by_cells=by_cells)
        assert [s.rho for s, _ in charges.calls] == pytest.approx(expected, rel=1e-9)
    charges = ChargeRecorder()
    select("absyn", domain, oracle, method_budget("absyn", 1.0), SelectionSettings(), charges)
    assert [s.rho for s, _ in charges.calls[:3]] == pytest.approx([0.1 / 3] * 3, rel=1e-9)


def test_the_plans_noise_error_is_its_pairs_noise_and_the_one_way_noise_of_the_rest():
    """E_eta + E_1 of step 6 (docs/decisions/0013-absyn.md) in closed form, three binary columns,
    rho_1 = rho_2 = 1. Nothing chosen: rho_2 goes to the 1-way marginals, each column has 2/3,
    and each of the 3 pairs takes two 1-way errors L1 = 2 / sqrt(pi 2/3). (a, b) chosen: the
    measurement stage draws it and c's 1-way marginal (`stages.cover_columns`), splitting rho_2
    by c^(2/3) (4^(2/3) : 2^(2/3)); summed over the other column, (a, b) adds r 2 / 4 to the rho
    of a and of b; (a, c) and (b, c) remain. A coarse (a, b) grouping b covers only a."""
    from dp_synth_assets.core.select.absyn import FIT_NOISE_SHARE, plan_noise_error

    domain = {"a": 2, "b": 2, "c": 2}

    def l1(rho):
        return 2 / math.sqrt(math.pi * rho)

    assert plan_noise_error(domain, 1.0, 1.0, [], [], {}) == pytest.approx(
        FIT_NOISE_SHARE * 3 * 2 * l1(2 / 3), rel=1e-12)
    w_pair, w_one = 4 ** (2 / 3), 2 ** (2 / 3)
    r_ab, r_c = w_pair / (w_pair + w_one), w_one / (w_pair + w_one)
    eta = 4 / math.sqrt(math.pi * r_ab)
    one = 2 * (l1(1 / 3 + r_ab * 2 / 4) + l1(1 / 3 + r_c))
    assert plan_noise_error(domain, 1.0, 1.0, [("a", "b")], [4], {("a", "b"): (None, None)}) \
        == pytest.approx(FIT_NOISE_SHARE * (eta + one), rel=1e-12)
    # b measured only on groups: b is drawn on its own codes too, a is not
    r2, rb2 = w_pair / (w_pair + 2 * w_one), w_one / (w_pair + 2 * w_one)
    eta = 4 / math.sqrt(math.pi * r2)
    one = (l1(1 / 3 + r2 * 2 / 4) + l1(1 / 3 + rb2)) + 2 * l1(1 / 3 + rb2)
    assert plan_noise_error(domain, 1.0, 1.0, [("a", "b")], [4],
                            {("a", "b"): (None, ((0, 1),))}) \
        == pytest.approx(FIT_NOISE_SHARE * (eta + one), rel=1e-12)


def test_a_path_that_never_repays_the_one_way_marginals_it_starves_is_not_kept():
    """Step 6 (docs/decisions/0013-absyn.md): 1,000 rows of 24 columns of 12 codes, each a noisy
    copy of one hidden column (kept with probability 0.2), at epsilon 5. The greedy buys pairs
    round after round, each worth its own noise, but every pair measured takes rho_2 from the
    1-way marginals, and a column a pair holds (144 cells) then gets its counts at a twelfth of
    that pair's rho: along the whole path the plan's error stays above the empty selection's,
    so nothing is kept, rho_2 goes back to the 1-way marginals (`budget.measurement_plan`), and
    the trace says why (each round's `plan_error`, `kept`)."""
    from dp_synth_assets.core.budget import measurement_plan
    from dp_synth_assets.core.privacy import rho_from_epsilon_delta
    from tests.helpers import method_budget

    rng = np.random.default_rng(0)
    n, k = 1000, 12
    hidden = rng.integers(0, k, n)
    data = {f"x{i:02d}": np.where(rng.random(n) < 0.2, hidden, rng.integers(0, k, n))
            for i in range(24)}
    domain = {c: k for c in data}
    budget = method_budget("absyn", rho_from_epsilon_delta(5.0, 1e-9))
    chosen = select("absyn", domain, counting_oracle(data, domain), budget, SelectionSettings(),
                    lambda *a, **kw: None)
    rounds = chosen.details["rounds"]
    # the greedy alone would have measured these (9 rounds at the posterior scores, 10 or more
    # at the released ones): step 6 is what keeps none of them
    assert len(rounds) >= 5
    assert chosen.cliques == () and chosen.budgets == {}
    assert all(r["plan_error"] > 0 and r["kept"] is False for r in rounds)
    plan = measurement_plan(chosen, domain, budget.measure)
    assert sorted(plan) == sorted((a,) for a in domain)
    assert sum(plan.values()) == pytest.approx(budget.measure, rel=1e-12)


def test_a_strong_pair_is_kept_though_it_starves_the_other_one_way_marginals():
    """Step 6 keeps what pays: a 4,000-row chain of six binary columns at epsilon 5 beside ten
    independent columns of 8 codes. The chain's pairs each remove far more dependency error
    than the 1-way noise they add to the pairs of the columns left uncovered."""
    from dp_synth_assets.core.privacy import rho_from_epsilon_delta
    from tests.helpers import method_budget

    data = chain_table(4000, 6, 0.05, seed=1)
    rng = np.random.default_rng(2)
    data.update({f"z{i}": rng.integers(0, 8, 4000) for i in range(10)})
    domain = {c: (2 if c.startswith("x") else 8) for c in data}
    chosen = select("absyn", domain, counting_oracle(data, domain),
                    method_budget("absyn", rho_from_epsilon_delta(5.0, 1e-9)),
                    SelectionSettings(), lambda *a, **kw: None)
    edges = {(f"x{i - 1:02d}", f"x{i:02d}") for i in range(1, 6)}
    assert len(set(chosen.cliques) & edges) >= 4
    kept = [r for r in chosen.details["rounds"] if r["kept"]]
    assert kept and min(r["plan_error"] for r in kept) == min(
        r["plan_error"] for r in chosen.details["rounds"])


def simplex_projection(y: np.ndarray, total: float) -> np.ndarray:
    """The nearest (l2) nonnegative array of sum `total` to y: the fit step 4's price models."""
    u = np.sort(y)[::-1]
    excess = np.cumsum(u) - total
    k = np.arange(1, y.size + 1)
    r = k[u - excess / k > 0][-1]
    return np.maximum(y - excess[r - 1] / r, 0.0)


@pytest.mark.parametrize("shape", ["sparse", "small counts", "dense"])
def test_fitted_noise_error_is_the_projections_l1_error_found_by_simulation(shape):
    """measure.fitted_noise_error (step 4) against 400 draws of the projection it models: noisy
    counts projected onto the nonnegative arrays of the same total. Sparse: 40 cells of 200 and
    1,000 empty at sigma 10, which keeps an eighth of the raw noise; dense: the raw noise."""
    from dp_synth_assets.core.measure import fitted_noise_error

    rng = np.random.default_rng(7)
    mu, sigma = {"sparse": (np.r_[np.full(40, 200.0), np.zeros(1000)], 10.0),
                 "small counts": (rng.poisson(3, 500).astype(float), 5.0),
                 "dense": (rng.poisson(400, 100).astype(float), 3.0)}[shape]
    draws = [np.abs(simplex_projection(mu + sigma * rng.standard_normal(mu.size), mu.sum())
                    - mu).sum() for _ in range(400)]
    model = fitted_noise_error(mu, sigma)
    assert model == pytest.approx(np.mean(draws), rel=0.03)
    raw = mu.size * sigma * math.sqrt(2 / math.pi)
    if shape == "dense":
        assert model == pytest.approx(raw, rel=1e-3)
    if shape == "sparse":
        assert model < raw / 7
    # one error per sigma when given several
    assert fitted_noise_error(mu, np.array([sigma, 2 * sigma]))[0] == pytest.approx(model)


def test_fitted_noise_error_of_empty_cells_is_the_positive_half_of_the_noise():
    """No counts at all: lam = 0 and each cell keeps E max(N, 0) = sigma / sqrt(2 pi)."""
    from dp_synth_assets.core.measure import fitted_noise_error

    assert fitted_noise_error(np.zeros(10), 2.0) == pytest.approx(10 * 2 / math.sqrt(2 * math.pi))


def test_support_proxy_keeps_the_margins_and_reaches_the_released_score():
    """support_proxy: the independent product up to the score an independent sample of these
    margins shows (sum over cells of min(sqrt(2 mu / pi), 2 mu), here 350 of 10,000 rows), the
    north-west corner coupling (at most d_a + d_b - 1 cells) at the coupling's own distance from
    independence, and in between the mix whose weight on the coupling rises linearly from the
    one to the other; both margins kept throughout."""
    from dp_synth_assets.core.select.absyn import coupling, support_proxy

    a = np.array([5000.0, 3000.0, 1500.0, 500.0])
    b = np.array([1000.0, 6000.0, 2000.0, 500.0, 500.0])
    product = np.outer(a, b) / a.sum()
    joint = coupling(a, b)
    reach = np.abs(joint - product).sum()
    sampling = np.sum(np.minimum(np.sqrt(2 * product / math.pi), 2 * product))
    assert (joint > 0).sum() <= a.size + b.size - 1
    assert joint.sum(axis=1) == pytest.approx(a) and joint.sum(axis=0) == pytest.approx(b)
    for score, w in ((0.0, 0.0), (sampling, 0.0), ((sampling + reach) / 2, 0.5), (reach, 1.0),
                     (10 * reach, 1.0)):
        q = support_proxy(a, b, score)
        assert q.sum(axis=1) == pytest.approx(a) and q.sum(axis=0) == pytest.approx(b)
        assert np.abs(q - product).sum() == pytest.approx(w * reach)
    assert support_proxy(a, b, reach) == pytest.approx(joint)


def test_a_sampling_level_score_keeps_the_raw_price_and_a_function_does_not():
    """fit_shrink moves a pair's price only by how much sparser its released dependency makes it
    than its margins' product: None (the raw price) at score 0 and at a twentieth of the
    coupling's reach (below what an independent sample of 25 rows a cell shows), and far below
    1 for a function of 60 codes onto 20 (60 cells of 500 rows, the rest empty, at sigma 2)."""
    from dp_synth_assets.core.select.absyn import coupling, fit_shrink

    a, b = np.full(60, 500.0), np.full(20, 1500.0)
    reach = np.abs(coupling(a, b) - np.outer(a, b) / a.sum()).sum()
    assert fit_shrink(a, b, 0.0, 2.0) is None
    assert fit_shrink(a, b, reach / 20, 2.0) is None
    strong = fit_shrink(a, b, reach, 2.0)
    assert strong[0] < 0.2


def test_a_function_of_many_codes_is_bought_at_its_fitted_price():
    """Step 4's price on a pair where the raw one refuses: 6,000 rows, store (60 codes, uniform)
    and its city (20, a function of the store), rho 5.6e-4 (sigma 30). The pair's score,
    2 n (1 - 1/20) = 11,400 on the count scale, is below its raw price, FIT_NOISE_SHARE 1,200
    sqrt(1 / (pi rho)) = 14,300, so without the 1-way counts the greedy keeps nothing. With
    them the pair's proxy puts its mass on 60 of the 1,200 cells (100 rows each against 5 for
    the independent product): its fit keeps under half the noise the independent shape's
    does, and the pair is bought."""
    from dp_synth_assets.core.select.absyn import FIT_NOISE_SHARE, SIGMA_GRID, fit_shrink, greedy
    from dp_synth_assets.core.select.privsyn import indif

    n, rho = 6000, 5.6e-4
    store = np.repeat(np.arange(60), n // 60)
    city = store % 20
    exact = np.zeros((60, 20))
    np.add.at(exact, (store, city), 1)
    pairs, domain = [("store", "city")], {"store": 60, "city": 20}
    r_bar = normalize_scores(np.array([indif(exact)]), pairs, domain, n)
    margins = {"store": exact.sum(axis=1), "city": exact.sum(axis=0)}
    assert indif(exact) < FIT_NOISE_SHARE * 1200 / math.sqrt(math.pi * rho)
    assert greedy(pairs, r_bar, domain, n, rho, tau=100_000)[0] == []
    assert greedy(pairs, r_bar, domain, n, rho, tau=100_000, one_way=margins)[0] == pairs
    sigma_0 = 1 / math.sqrt(2 * rho)
    shrink = fit_shrink(margins["store"], margins["city"], indif(exact), sigma_0)
    assert len(shrink) == SIGMA_GRID.size and shrink[0] < 0.5


def test_the_normal_cdf_without_scipy_matches_math_erfc():
    """measure._ndtr (Abramowitz and Stegun 7.1.26) against the standard library's erfc."""
    from dp_synth_assets.core.measure import _ndtr

    x = np.linspace(-8, 8, 2001)
    exact = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    assert np.max(np.abs(_ndtr(x) - exact)) < 2e-7


def test_a_fill_in_edge_without_a_released_score_is_measured_with_the_cycle():
    """A pair dropped as undetectable (`detectable`: no score released) can still be a fill-in of
    the triangulation: the strong 4-cycle a-b-c-d-a is chordal only with a chord, and neither
    chord was scored. The greedy returns the cycle and one chord (fine, priced at its cells),
    the chord last."""
    from dp_synth_assets.core.select.absyn import greedy

    domain = {"a": 5, "b": 5, "c": 5, "d": 5}
    cycle = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")]
    chosen, _, groups = greedy(cycle, np.full(4, 0.9), domain, 100_000.0, 10.0, tau=100_000)
    assert chosen[:4] == cycle and len(chosen) == 5
    assert set(chosen[4]) in ({"a", "c"}, {"b", "d"}) and groups == {}


def scores_of(theta: np.ndarray, sd: float, seed: int) -> tuple[np.ndarray, float]:
    """Released count-scale scores of true scores `theta` at noise sd `sd`, and the rho_s that
    gives that sd for this many scores (sd^2 = 16 m / (2 rho_s))."""
    z = theta + np.random.default_rng(seed).normal(0.0, sd, theta.size)
    return z, 16 * theta.size / (2 * sd ** 2)


def test_posterior_scores_are_the_closed_form_posterior_of_a_two_point_prior():
    """3,000 true scores, 80% at 0 and 20% at 4 sd: the estimated prior's posterior means agree
    with the closed form under the true prior, A p phi(z - A) / (p phi(z - A) + (1 - p) phi(z)),
    to a tenth of a sd on average; the estimate's likelihood is at least the true prior's (it is
    the maximum), and the means keep the scores' order."""
    from dp_synth_assets.core.select.absyn import posterior_scores, prior_on_grid

    sd, big, p = 100.0, 400.0, 0.2
    theta = np.where(np.random.default_rng(3).random(3000) < p, big, 0.0)
    z, rho = scores_of(theta, sd, seed=4)
    post = posterior_scores(z, rho)
    on, off = p * np.exp(-0.5 * ((z - big) / sd) ** 2), (1 - p) * np.exp(-0.5 * (z / sd) ** 2)
    exact = big * on / (on + off)
    assert np.mean(np.abs(post - exact)) < 0.1 * sd
    assert np.max(np.abs(post - exact)) < 0.5 * sd
    order = np.argsort(z)
    assert np.all(np.diff(post[order]) >= -1e-9)

    grid, weights = prior_on_grid(z, sd)
    def log_likelihood(points, probs):
        dens = np.exp(-0.5 * ((z[:, None] - points[None, :]) / sd) ** 2) @ probs
        return float(np.log(dens).sum())
    assert weights.sum() == pytest.approx(1.0)
    assert log_likelihood(grid, weights) >= log_likelihood(np.array([0.0, big]),
                                                           np.array([1 - p, p])) - 1e-6


def test_posterior_scores_undo_the_winners_curse_of_the_scores_above_the_floor():
    """500 pairs whose true scores are mostly small (exponential, mean half a sd): of those
    whose released score passes the floor (2 sd), the released scores overstate the true ones
    by more than a sd on average, the posterior means by under a fifth of one."""
    from dp_synth_assets.core.select.absyn import posterior_scores

    sd = 50.0
    theta = np.random.default_rng(7).exponential(0.5 * sd, 500)
    z, rho = scores_of(theta, sd, seed=8)
    passed = z >= 2 * sd
    assert passed.sum() >= 10
    post = posterior_scores(z, rho)
    assert np.mean(z[passed] - theta[passed]) > sd
    assert abs(np.mean(post[passed] - theta[passed])) < 0.2 * sd


@pytest.mark.parametrize("seed", [0, 1])
def test_independent_columns_buy_no_pair_once_their_scores_are_posterior_means(seed):
    """600 rows of 30 independent columns of 6 codes at epsilon 5: of the 435 released scores
    some pass the floor by noise alone (2.3% of them) and the rest sit at the sampling level.
    Bought at their released values, 14-20 such pairs were kept (measured, then folded back by
    the guard, their rho lost); as posterior means they are worth less than their noise, and
    step 6 keeps none."""
    from dp_synth_assets.core.privacy import rho_from_epsilon_delta
    from tests.helpers import method_budget

    rng = np.random.default_rng(seed)
    data = {f"x{i:02d}": rng.integers(0, 6, 600) for i in range(30)}
    domain = {c: 6 for c in data}
    chosen = select("absyn", domain, counting_oracle(data, domain),
                    method_budget("absyn", rho_from_epsilon_delta(5.0, 1e-9)),
                    SelectionSettings(), lambda *a, **kw: None)
    assert chosen.details["detectable_pairs"] == 435
    assert chosen.cliques == ()
