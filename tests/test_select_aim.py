"""AIM selection (dp_synth_assets.core.select.aim): accounting, noise scales, the model-size cap,
the first round's choice, annealing and the budget rules in closed form, the numpy estimator
(dp_synth_assets.core.select.aim_fit) against brute force, rounds beyond the former cap of 8, and
one end-to-end Dagster run.

Noise comes from OpenDP and takes no seed; the statistical assertions below hold except with a
probability far below 1e-6 (each says why).
"""

import itertools
import math

import numpy as np
import pytest

from dp_synth_assets.core import extras
from dp_synth_assets.core.config import SelectionSettings
from dp_synth_assets.core.measure import Measurement
from dp_synth_assets.core.select import METHODS, Budget
from dp_synth_assets.core.select import aim
from tests.helpers import ChargeRecorder, counting_oracle, needs_extra

SEED = 20261122


def table(domain: dict[str, int], rows: int, pairs: dict[tuple[str, str], float], seed: int = SEED):
    """Codes per attribute: independent uniform, except that for each (a, b) in `pairs`, b copies
    a (mod b's size) with the given probability."""
    rng = np.random.default_rng(seed)
    data = {a: rng.integers(0, k, rows) for a, k in domain.items()}
    for (a, b), p in pairs.items():
        data[b] = np.where(rng.random(rows) < p, data[a] % domain[b], data[b])
    return data


def split(rho: float) -> Budget:
    info = METHODS["aim"]
    return Budget(info.one_way_share * rho, info.score_share * rho,
                  (1 - info.one_way_share - info.score_share) * rho)


STRONG_DOMAIN = {"a": 4, "b": 4, "c": 3, "d": 5, "e": 2}


@pytest.fixture(scope="module")
def strong():
    """A tiny table where b copies a 90% of the time, everything else independent; a large
    budget (rho 1), 4 rounds."""
    data = table(STRONG_DOMAIN, 3000, {("a", "b"): 0.9})
    charge = ChargeRecorder()
    budget = split(1.0)
    selection = aim.run(STRONG_DOMAIN, counting_oracle(data, STRONG_DOMAIN), budget, charge,
                        max_model_mb=4.0, max_rounds=4)
    return budget, charge, selection


def test_the_whole_budget_is_charged_in_selection(strong):
    budget, charge, selection = strong
    assert METHODS["aim"].measures_in_selection
    assert charge.rho == pytest.approx(budget.total, rel=1e-9)
    assert charge.rho <= budget.total * (1 + 1e-12)  # never beyond the reservation
    # one charge per 1-way marginal, then (exponential mechanism, measurement) per round
    d = len(STRONG_DOMAIN)
    rounds = selection.details["rounds"]
    assert len(charge.calls) == d + 2 * len(rounds)
    assert 1 <= len(rounds) <= min(aim.ROUNDS_PER_ATTRIBUTE * d, 4)
    mechanisms = [s.mechanism for s, _ in charge.calls[d:]]
    assert mechanisms == ["exponential_mechanism", "gaussian_counts"] * len(rounds)
    # each round's trace matches its two charges; selection and measurement split 0.1 / 0.9
    for r, (em, meas) in zip(rounds, zip(charge.calls[d::2], charge.calls[d + 1::2])):
        assert r["rho"] == pytest.approx(em[0].rho + meas[0].rho, rel=1e-12)
        assert r["epsilon_em"] == pytest.approx(math.sqrt(8 * em[0].rho), rel=1e-12)
        assert meas[1]["clique"] == r["clique"] and em[1]["round"] == r["round"]
        assert em[0].rho / r["rho"] == pytest.approx(1 - aim.MEASURE_SHARE, rel=1e-6)
    # annealing: the next round's budget is 4x after an annealed round, equal otherwise (the
    # last round takes whatever remains)
    for prev, nxt in zip(rounds[:-2], rounds[1:-1]):
        factor = 4.0 if prev.get("annealed") else 1.0
        assert nxt["rho"] == pytest.approx(factor * prev["rho"], rel=1e-9)
    assert selection.method == "aim" and selection.cliques == () and selection.budgets == {}


def test_every_sigma_is_the_one_its_charge_pays_for(strong):
    _, charge, selection = strong
    gaussian = [(s, p) for s, p in charge.calls if s.mechanism == "gaussian_counts"]
    measurements = list(selection.one_way) + list(selection.measured)
    assert len(gaussian) == len(measurements)
    for m, (spend, params) in zip(measurements, gaussian):
        assert tuple(params["clique"]) == m.clique
        assert m.rho == spend.rho
        assert m.sigma == pytest.approx(math.sqrt(1 / (2 * spend.rho)), rel=1e-9)
        assert m.noisy.shape == tuple(STRONG_DOMAIN[a] for a in m.clique)
    for r, m in zip(selection.details["rounds"], selection.measured):
        assert r["sigma"] == m.sigma and tuple(r["clique"]) == m.clique


def test_the_strong_pair_is_chosen_first(strong):
    # A candidate holding a and b scores about 4000 (l1 distance of the joint from independence on
    # 3000 rows) times a weight of at least 1/3 against at most a few hundred for any other
    # candidate; with rho_t = 0.9 / 80 the Gumbel noise has scale 33 at most, so any other choice
    # has probability below exp(-15) per candidate (25 candidates).
    _, _, selection = strong
    assert {"a", "b"} <= set(selection.details["rounds"][0]["clique"])
    assert {"a", "b"} <= set(selection.measured[0].clique)


@needs_extra("jax")
def test_the_model_never_exceeds_max_model_mb():
    from mbi import Domain
    from mbi.junction_tree import hypothetical_model_size

    # a cycle of dependent 8-value attributes: every pair on it is worth measuring, but a limit of
    # 0.0025 MB (327 cells) admits, beside the 40 cells of the 1-way marginals, at most four
    # 64-cell pairs and no triangle (one 512-cell clique once triangulated)
    domain = {a: 8 for a in "abcde"}
    data = table(domain, 4000, {("a", "b"): 0.8, ("b", "c"): 0.8, ("c", "d"): 0.8,
                                ("d", "e"): 0.8, ("e", "a"): 0.5})
    limit = 0.0025
    charge = ChargeRecorder()
    selection = aim.run(domain, counting_oracle(data, domain), split(2.0), charge,
                        max_model_mb=limit, max_rounds=8)
    mbi_domain = Domain(list(domain), list(domain.values()))
    cliques = [m.clique for m in selection.one_way]
    total_candidates = len(aim.candidate_weights(aim.workload(domain)))
    filtered = False
    for r, m in zip(selection.details["rounds"], selection.measured):
        before = hypothetical_model_size(mbi_domain, cliques)
        cliques.append(m.clique)
        # at each round, within AIM's growing limit, which never exceeds max_model_mb, or the
        # model unchanged (a candidate inside it is always allowed)
        after = hypothetical_model_size(mbi_domain, cliques)
        assert after <= r["model_mb_limit"] or after == before
        assert r["model_mb_limit"] <= limit
        filtered |= r["candidates"] < total_candidates
    assert hypothetical_model_size(mbi_domain, cliques) <= limit
    assert selection.details["model_mb"] <= limit
    assert filtered  # the cap did bind
    assert charge.rho == pytest.approx(2.0, rel=1e-9)


@needs_extra("jax")
def test_model_marginals_match_mbi_on_a_model_with_a_cycle():
    """`pgm.model_marginals` (numpy) equals mbi's own `project` on every pair, a reversed pair
    and a single attribute of an mbi model whose cliques hold a cycle (a-b, b-c, a-c) and a
    chain: queries inside a clique (mbi reads its marginals) and across cliques (mbi's variable
    elimination). The model is mbi's MarkovRandomField of seeded random potentials and the
    marginals mbi's own oracle computes from them, as a fit returns them: what is compared does
    not depend on how the potentials were found, and a fit would add half a minute of JAX
    compilation."""
    from mbi import CliqueVector, Domain, Factor, MarkovRandomField, marginal_oracles

    from dp_synth_assets.core.generate import pgm

    domain = {"a": 4, "b": 3, "c": 5, "d": 2, "e": 6}
    rng = np.random.default_rng(SEED)
    cliques = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("d", "e")]
    mbi_domain = Domain(list(domain), list(domain.values()))
    potentials = CliqueVector(mbi_domain, cliques, {
        c: Factor(mbi_domain.project(c),
                  rng.normal(0.0, 1.5, [domain[a] for a in c]).astype(np.float32))
        for c in cliques})
    marginals = marginal_oracles.default_oracle(cliques, mbi_domain)(potentials, 2000.0)
    model = MarkovRandomField(potentials=potentials, marginals=marginals, total=2000.0)
    queries = list(itertools.combinations(domain, 2)) + [("e", "a"), ("c",)]
    assert any(not model.marginals.supports(q) for q in queries)  # variable elimination
    ours = pgm.model_marginals(model, queries)
    for q in queries:
        reference = np.asarray(model.project(q).datavector(flatten=False), dtype=np.float64)
        assert ours[q].shape == tuple(domain[a] for a in q)
        # mbi works in float32: agree to a few thousandths of a count out of 2000
        np.testing.assert_allclose(ours[q], reference, atol=0.05)


def test_exponential_mechanism_charges_its_rho_and_follows_a_clear_winner():
    scores = np.zeros(30)
    scores[17] = 1000.0
    index, spend = aim.exponential_mechanism(scores, 0.05)
    # Gumbel scale sqrt(0.5 / 0.05) = 3.2: another index wins with probability < 30 exp(-300)
    assert index == 17
    assert spend.rho == pytest.approx(0.05, rel=1e-12)
    assert spend.mechanism == "exponential_mechanism" and spend.sensitivity == 1.0
    with pytest.raises(ValueError):
        aim.exponential_mechanism(scores, 0.0)


def test_candidate_weights_are_the_overlap_with_the_3_way_workload():
    domain = {a: 2 for a in "abcd"}
    work = aim.workload(domain)
    assert sorted(work) == [("a", "b", "c"), ("a", "b", "d"), ("a", "c", "d"), ("b", "c", "d")]
    weights = aim.candidate_weights(work)
    # w_r = sum over the four triples of |r & s|: 9 for a triple, 2+2+1+1 = 6 for a pair,
    # 1+1+1 = 3 for a single attribute; divided by 9
    assert weights[("a", "b", "c")] == 1.0 and len(weights) == 4 + 6 + 4
    assert weights[("a", "b")] == pytest.approx(6 / 9) and weights[("d",)] == pytest.approx(3 / 9)
    # a triple above max_cells leaves the workload; its pairs stay in through the others or as
    # pairs of their own
    big = {"a": 100, "b": 100, "c": 2}
    assert aim.workload(big, max_cells=10_000) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert aim.workload(big, max_cells=9_999) == [("a", "c"), ("b", "c")]
    assert aim.workload({"a": 3}) == [("a",)]


def test_the_pairs_workload_weighs_pairs_1_and_single_attributes_one_half():
    domain = {a: 2 for a in "abcd"}
    work = aim.workload(domain, declared="all_pairs")
    assert work == list(itertools.combinations("abcd", 2))
    weights = aim.candidate_weights(work, domain)
    # a pair meets itself (2) and the 4 pairs sharing one of its attributes (1 each): 6; a single
    # attribute is in 3 pairs: 3; divided by 6
    assert len(weights) == 6 + 4 and all(len(r) <= 2 for r in weights)
    assert weights[("a", "b")] == 1.0 and weights[("c",)] == pytest.approx(0.5)
    assert all(len(c) == 2 for c in aim.needed_cliques(domain, SelectionSettings(
        workload="all_pairs")))
    # unset and all_triples are the same (the paper's default)
    assert aim.workload(domain, declared="all_triples") == aim.workload(domain)


def test_a_declared_workload_is_served_through_its_subsets_within_the_cell_cap():
    domain = {"a": 100, "b": 100, "c": 3, "d": 2}
    work = aim.workload(domain, declared=[["c", "a"], ["b", "a", "c"], ["a", "c"], ["d"]])
    assert work == [("a", "c"), ("a", "b", "c"), ("d",)]  # domain order, repeats dropped
    weights = aim.candidate_weights(work, domain, max_cells=10_000)
    # (a, b, c) has 30,000 cells: not a candidate, its subsets within 10^4 cells are
    assert ("a", "b", "c") not in weights and ("a", "b") in weights and ("b", "c") in weights
    # w = sum over the three workload marginals of the overlap: (a, c) 2 + 2 + 0 = 4, the
    # largest; (a, b) 1 + 2 = 3; (d,) 1
    assert weights[("a", "c")] == 1.0
    assert weights[("a", "b")] == pytest.approx(3 / 4) and weights[("d",)] == pytest.approx(1 / 4)
    assert ("c", "d") not in weights and ("a", "d") not in weights
    needed = aim.needed_cliques(domain, SelectionSettings(workload=[["a", "b", "c"]]))
    assert sorted(needed) == [("a", "b"), ("a", "c"), ("b", "c")]
    with pytest.raises(ValueError, match=r"names \['zz'\].*fix the names"):
        aim.workload(domain, declared=[["a", "zz"]])


def test_aim_measures_only_marginals_of_a_declared_workload():
    data = table(STRONG_DOMAIN, 3000, {("a", "b"): 0.9, ("c", "d"): 0.9})
    charge = ChargeRecorder()
    budget = split(1.0)
    selection = aim.run(STRONG_DOMAIN, counting_oracle(data, STRONG_DOMAIN), budget, charge,
                        max_rounds=6, declared=[["c", "d", "e"]])
    # the strong pair (a, b) is outside the workload: never measured, however wrong the model is
    assert selection.measured and all(set(m.clique) <= {"c", "d", "e"}
                                      for m in selection.measured)
    assert {"c", "d"} <= set(selection.measured[0].clique)
    assert charge.rho == pytest.approx(budget.total, rel=1e-9)
    assert "declared" in selection.details["workload"]


@pytest.mark.parametrize("method, selection, message", [
    ("absyn", {"workload": "all_pairs"}, "for method aim"),
    ("aim", {"workload": [["age", "nope"]]}, r"names \['nope'\], which are not declared"),
    ("aim", {"workload": []}, "at least one"),
    ("aim", {"workload": [["age"], []]}, "at least one"),
])
def test_bad_workload_settings_are_refused_at_load_with_the_fix(method, selection, message):
    from dp_synth_assets.core.config import RegistryError, parse_registry
    from tests.helpers import example_entry

    entry = example_entry(method=method, selection=selection)
    with pytest.raises(RegistryError, match=message):
        parse_registry({"datasets": {"example": entry}})


# ------------------------------------------------------------------------------ issue 16

def test_annealing_halves_sigma_and_doubles_epsilon_below_the_expected_noise():
    sigma, epsilon, cells = 10.0, 0.2, 12
    expected = math.sqrt(2 / math.pi) * sigma * cells  # E||N(0, sigma^2 I_cells)||_1
    assert aim.anneal(sigma, epsilon, expected * (1 - 1e-9), cells) == (5.0, 0.4, True)
    assert aim.anneal(sigma, epsilon, expected, cells) == (5.0, 0.4, True)
    assert aim.anneal(sigma, epsilon, expected * (1 + 1e-9), cells) == (sigma, epsilon, False)
    # an annealed round costs four times as much: 1/(2 sigma^2) + epsilon^2/8
    assert aim.round_rho(5.0, 0.4) == pytest.approx(4 * aim.round_rho(10.0, 0.2), rel=1e-12)
    assert aim.round_rho(10.0, 0.2) == pytest.approx(1 / 200 + 0.04 / 8, rel=1e-12)


def test_a_round_splits_its_rho_by_alpha_and_the_last_one_takes_the_rest():
    sigma, epsilon = aim.round_parameters(0.01)
    # alpha = 0.9 on the measurement, 0.1 on the exponential mechanism
    assert 1 / (2 * sigma ** 2) == pytest.approx(0.009, rel=1e-12)
    assert epsilon ** 2 / 8 == pytest.approx(0.001, rel=1e-12)
    # more than two rounds' worth left: the next round is an ordinary one
    assert aim.next_round(0.0201, sigma, epsilon) == (sigma, epsilon, False)
    # at most two rounds' worth: the next round is the last and costs exactly what is left
    for rest in (0.02, 0.015, 0.004):
        s, e, last = aim.next_round(rest, sigma, epsilon)
        assert last and aim.round_rho(s, e) == pytest.approx(rest, rel=1e-12)
        assert 1 / (2 * s ** 2) == pytest.approx(0.9 * rest, rel=1e-12)


def test_rounds_follow_the_budget_rules_and_the_ledger_holds_exactly_their_charges(tmp_path):
    from dp_synth_assets import Synthesizer
    from dp_synth_assets.infra.ledger import PrivacyLedger

    domain = {"a": 4, "b": 4, "c": 3, "d": 5}
    data = table(domain, 2000, {("a", "b"): 0.8, ("b", "c"): 0.6})
    columns = {c: {"kind": "categorical", "categories": list(range(k)), "other": False}
               for c, k in domain.items()}
    ledger = tmp_path / "ledger.sqlite"
    synth = Synthesizer(columns, epsilon=3.0, method="aim", ledger=ledger, dataset="t")
    with synth.reading(pd_frame(data)) as run:
        plan = run.preprocess()
        chosen = run.select(plan, run.marginals(plan))
    rho = synth.budget.run_rho
    accepted = PrivacyLedger(ledger).summary("t").spent_rho
    one_way = math.fsum(m.rho for m in chosen.one_way)
    rounds = chosen.details["rounds"]
    assert one_way == pytest.approx(0.3 * rho, rel=1e-9)  # METHODS["aim"]: 0.3 of rho
    weights = np.array([domain[m.clique[0]] for m in chosen.one_way], dtype=float) ** (2 / 3)
    assert [m.rho for m in chosen.one_way] == pytest.approx(
        list(0.3 * rho * weights / weights.sum()), rel=1e-9)  # split by k^(2/3)
    # the ledger accepted exactly the 1-way marginals and every round's two charges: all of rho
    assert accepted == pytest.approx(one_way + math.fsum(r["rho"] for r in rounds), rel=1e-12)
    assert accepted <= rho * (1 + 1e-12)
    assert accepted == pytest.approx(rho, rel=1e-9)
    # round 1 spends (rho - 1-way) / T with T = 16 d; then 4x after an annealed round, else
    # the same, until the last, which takes what is left (more than one round's worth, at most
    # three: two left before the previous round's spend)
    assert rounds[0]["rho"] == pytest.approx((rho - one_way) / (16 * len(domain)), rel=1e-9)
    for prev, nxt in zip(rounds[:-2], rounds[1:-1]):
        assert nxt["rho"] == pytest.approx((4.0 if prev.get("annealed") else 1.0) * prev["rho"],
                                           rel=1e-9)
    if len(rounds) > 1:
        assert rounds[-2]["rho"] < rounds[-1]["rho"] * (1 + 1e-9)
        assert rounds[-1]["rho"] <= 3 * (4 if rounds[-2].get("annealed") else 1) * \
            rounds[-2]["rho"] * (1 + 1e-9)


def pd_frame(data):
    import pandas as pd

    return pd.DataFrame({a: v.astype(np.int64) for a, v in data.items()})


def test_aim_runs_past_8_rounds_until_the_budget_is_spent(monkeypatch):
    # With annealing switched off every round costs rho_R / T (T = 16 d = 48), and the round that
    # finds at most two rounds' worth left takes it all: exactly T - 1 = 47 rounds under the
    # default settings (no max_rounds), where the former cap stopped at 8.
    from dp_synth_assets.core.config import SelectionSettings

    domain = {"a": 3, "b": 3, "c": 2}
    data = table(domain, 2000, {("a", "b"): 0.7})
    monkeypatch.setattr(aim, "anneal", lambda sigma, epsilon, moved, cells: (sigma, epsilon, False))
    charge = ChargeRecorder()
    budget = split(0.5)
    selection = aim.select(domain, counting_oracle(data, domain), budget, SelectionSettings(),
                           charge)
    rounds = selection.details["rounds"]
    assert len(rounds) == 16 * 3 - 1
    assert rounds[-1]["rho"] == pytest.approx(2 * rounds[0]["rho"], rel=1e-9)
    assert charge.rho == pytest.approx(budget.total, rel=1e-9)
    # a user's max_rounds still ends the run early, the last round taking the rest
    capped = aim.select(domain, counting_oracle(data, domain), budget,
                        SelectionSettings(max_rounds=5), ChargeRecorder())
    assert len(capped.details["rounds"]) == 5


def test_a_large_candidate_is_offered_on_public_groups_beside_its_codes():
    # versions(): every candidate on its codes; one of 1,000 cells or more also on each distinct
    # grouping of AIM's coarse levels (16 and 40 runs of adjacent codes of about equal noisy
    # mass, a column of fewer than 2g codes left whole at level g), from the 1-way measurements
    from dp_synth_assets.core.measure import adjacent_groups

    domain = {"a": 90, "b": 40, "c": 3, "d": 20}
    rng = np.random.default_rng(SEED)
    one_way = [Measurement((x,), rng.uniform(50, 150, k), 3.0, 0.05) for x, k in domain.items()]
    noisy = {m.clique[0]: m.noisy for m in one_way}
    got = aim.versions([("a",), ("a", "b"), ("a", "c"), ("c", "d"), ("a", "d"), ("b", "d")],
                       domain, one_way)
    assert aim.COARSE_LEVELS == (16, 40)
    a16, a40, b16 = (adjacent_groups(noisy["a"], 16), adjacent_groups(noisy["a"], 40),
                     adjacent_groups(noisy["b"], 16))
    assert got == [
        (("a",), None),
        (("a", "b"), None),
        (("a", "b"), (a16, b16)),
        (("a", "b"), (a40, None)),   # b has 40 codes, fewer than 2 x 40
        (("a", "c"), None),          # 270 cells: too small for groups
        (("c", "d"), None),
        (("a", "d"), None),
        (("a", "d"), (a16, None)),   # d has 20 codes, fewer than 2 x 16
        (("a", "d"), (a40, None)),
        (("b", "d"), None),          # 800 cells
    ]
    assert max(a16) + 1 < max(a40) + 1 < 90 and max(b16) + 1 < 40


def test_a_dependency_too_fine_to_measure_is_measured_on_groups_and_fitted():
    # b copies a (60 codes each) on 90% of 20,000 rows; at rho 0.05 the first round's sigma is
    # 27.5, so the fine pair's expected l1 noise (0.8 x 27.5 x 3,600 = 79,000) exceeds its
    # dependency (about 2 x 0.9 x 20,000 = 36,000) and every fine candidate holding it scores
    # below zero, while on 16 x 16 groups (noise 0.8 x 27.5 x 256 = 5,600; with c, 11,300) it
    # scores about 28,000 x 2/3 (the pair) or 22,400 (the triple). The exponential mechanism
    # (epsilon_t 0.024, sensitivity 1) then prefers a coarse version by a factor of at least
    # exp(0.012 x 18,000): another choice has probability far below 1e-6.
    from dp_synth_assets.core.measure import coarsen
    from dp_synth_assets.core.select import aim_fit

    domain = {"a": 60, "b": 60, "c": 2}
    data = table(domain, 20_000, {("a", "b"): 0.9})
    charge = ChargeRecorder()
    budget = split(0.05)
    selection = aim.run(domain, counting_oracle(data, domain), budget, charge, max_rounds=3)
    first = selection.measured[0]
    assert {"a", "b"} <= set(first.clique) and first.groups is not None
    trace = selection.details["rounds"][0]
    assert trace["groups"] == [None if g is None else list(g) for g in first.groups]
    assert selection.details["coarse_measured"] >= 1
    # the coarse array is the marginal summed within groups, at the sigma its charge paid for
    spend, params = next((s, p) for s, p in charge.calls
                         if p.get("round") == 1 and s.mechanism == "gaussian_counts")
    assert first.noisy.shape == tuple(domain[x] if g is None else max(g) + 1
                                      for x, g in zip(first.clique, first.groups))
    assert first.sigma == pytest.approx(math.sqrt(1 / (2 * spend.rho)), rel=1e-9)
    assert charge.rho == pytest.approx(budget.total, rel=1e-9)
    # the fitted model carries the dependency: on a's and b's coarse groups the diagonal holds
    # about 0.9 + 0.1 / groups of the mass, less what differing group edges move off it
    # (independence: about 1 / groups); noise on the
    # diagonal's sum is below 200 of 20,000 rows
    everything = list(selection.one_way) + list(selection.measured)
    _, model = aim_fit.fit(domain, everything, 20_000.0, 200)
    ga, gb = (first.groups[first.clique.index(x)] for x in ("a", "b"))
    pair = coarsen(model.project(("a", "b")), (ga, gb))
    exact = coarsen(counting_oracle(data, domain)([("a", "b")])[("a", "b")], (ga, gb))
    share = np.trace(pair) / pair.sum()
    assert share == pytest.approx(np.trace(exact) / exact.sum(), abs=0.03)
    assert share > 0.5


@needs_extra("jax")
def test_a_candidate_whose_junction_tree_exceeds_the_limit_is_excluded():
    from mbi import Domain
    from mbi.junction_tree import hypothetical_model_size

    from dp_synth_assets.core.select import aim_fit

    domain = {a: 10 for a in "abcd"}
    measured = [("a",), ("b",), ("c",), ("d",), ("a", "b"), ("b", "c")]
    tree = [("a", "b"), ("b", "c"), ("d",)]
    mb = 8 / 2 ** 20  # one float64 cell
    # (c, d): a chain, cliques ab, bc, cd: 300 cells. (a, c): the triangle abc, 1000 cells, plus
    # d: 1010. (a, b): inside the tree.
    assert aim_fit.model_mb(domain, measured + [("c", "d")]) == pytest.approx(300 * mb)
    assert aim_fit.model_mb(domain, measured + [("a", "c")]) == pytest.approx(1010 * mb)
    candidates = [("a", "b"), ("a", "c"), ("c", "d"), ("a", "c", "d")]
    assert aim.allowed(domain, candidates, measured, tree, 1009 * mb) == [("a", "b"), ("c", "d")]
    assert aim.allowed(domain, candidates, measured, tree, 1010 * mb) == [
        ("a", "b"), ("a", "c"), ("c", "d")]
    assert aim.allowed(domain, candidates, measured, tree, 299 * mb) == [("a", "b")]
    # the same size as mbi's junction tree, on random clique sets
    rng = np.random.default_rng(SEED)
    wide = {f"x{i}": int(k) for i, k in enumerate(rng.integers(2, 9, 9))}
    mbi_domain = Domain(list(wide), list(wide.values()))
    for _ in range(20):
        cliques = [tuple(sorted(rng.choice(list(wide), int(rng.integers(2, 4)), replace=False)))
                   for _ in range(int(rng.integers(2, 7)))]
        assert aim_fit.model_mb(wide, cliques) == pytest.approx(
            hypothetical_model_size(mbi_domain, cliques), rel=1e-12)


TINY = {"a": 3, "b": 2, "c": 4, "d": 2, "e": 3, "f": 2}


def marginal(joint: np.ndarray, query) -> np.ndarray:
    names = list(TINY)
    summed = joint.sum(axis=tuple(i for i, a in enumerate(names) if a not in query))
    present = [a for a in names if a in query]
    return np.transpose(summed, [present.index(a) for a in query])


def test_the_estimator_finds_the_maximum_entropy_fit_of_consistent_marginals():
    from dp_synth_assets.core.select import aim_fit

    rng = np.random.default_rng(SEED)
    truth = rng.dirichlet(np.full(math.prod(TINY.values()), 0.5)).reshape(list(TINY.values()))
    total = 1000.0
    # a cycle a-b-c-a, a chain c-d-e, f alone: a junction tree of a triangle, two pairs and a
    # separate component
    cliques = [(a,) for a in TINY] + [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")]
    ms = [Measurement(c, total * marginal(truth, c), 1.0, 0.5) for c in cliques]
    # brute force: iterative proportional fitting over the whole domain from the uniform
    # distribution converges to the maximum-entropy distribution with these marginals
    ipf = np.full(truth.shape, 1.0 / truth.size)
    names = list(TINY)
    for _ in range(500):
        for c in cliques:
            ratio = marginal(truth, c) / marginal(ipf, c)
            present = [a for a in names if a in c]
            ipf = ipf * np.transpose(ratio, [c.index(a) for a in present]).reshape(
                [TINY[a] if a in c else 1 for a in names])
    _, model = aim_fit.fit(TINY, ms, total, 1500)
    for k in (1, 2, 3):
        for query in itertools.combinations(TINY, k):
            np.testing.assert_allclose(model.project(query), total * marginal(ipf, query),
                                       atol=0.05, err_msg=str(query))


def test_the_estimator_solves_the_least_squares_fit_of_noisy_marginals():
    from scipy.optimize import lsq_linear

    from dp_synth_assets.core.select import aim_fit

    domain = {"a": 3, "b": 2, "c": 4}
    rng = np.random.default_rng(SEED)
    cliques = [("a",), ("b",), ("c",), ("a", "b"), ("b", "c"), ("a", "c")]
    sigmas = [2.0, 2.0, 2.0, 5.0, 3.0, 4.0]
    truth = rng.dirichlet(np.ones(24)).reshape(3, 2, 4) * 500
    names = list(domain)

    def project(joint, c):
        summed = joint.sum(axis=tuple(i for i, a in enumerate(names) if a not in c))
        return np.transpose(summed, [[a for a in names if a in c].index(a) for a in c])

    ms = [Measurement(c, project(truth, c) + rng.normal(0, s, project(truth, c).shape), s, 0.1)
          for c, s in zip(cliques, sigmas)]
    total = 500.0
    # brute force: weighted least squares over every non-negative joint table with the total
    rows, targets = [], []
    eye = np.eye(24).reshape(24, 3, 2, 4)
    for m in ms:
        block = np.stack([project(e, m.clique).ravel() for e in eye], axis=1) / m.sigma
        rows.append(block)
        targets.append(m.noisy.ravel() / m.sigma)
    rows.append(np.full((1, 24), 1e3))
    targets.append(np.array([1e3 * total]))
    best = lsq_linear(np.vstack(rows), np.concatenate(targets), bounds=(0, np.inf),
                      tol=1e-12).x.reshape(3, 2, 4)
    _, model = aim_fit.fit(domain, ms, total, 2000)
    for c in cliques:  # the measured marginals of the optimum are unique (strictly convex loss)
        np.testing.assert_allclose(model.project(c), project(best, c), atol=0.05, err_msg=str(c))


def test_the_pgm_engine_fits_a_small_tree_in_numpy_and_a_large_one_with_mbi():
    """The pgm engine's estimator choice (generate/pgm.py `estimator`): the numpy mirror descent
    where JAX's compilation would be most of the fit, mbi where hundreds of cliques make numpy's
    per-clique cost larger; the numpy fit is the engine's model (a CliqueTree whose tables are
    the fitted marginals)."""
    from dp_synth_assets.core.config import ModelSettings
    from dp_synth_assets.core.generate import pgm
    from dp_synth_assets.core.generate.tree import CliqueTree, marginalize

    domain = {"a": 3, "b": 2, "c": 4}
    truth = np.random.default_rng(SEED).dirichlet(np.ones(24)).reshape(3, 2, 4) * 500
    names = list(domain)

    def project(c):
        summed = truth.sum(axis=tuple(i for i, a in enumerate(names) if a not in c))
        return np.transpose(summed, [[a for a in names if a in c].index(a) for a in c])

    ms = [Measurement(c, project(c), 1.0, 0.5) for c in [("a", "b"), ("b", "c")]]
    assert pgm.estimator(domain, ms, 1500) == "numpy"
    model = pgm.fit_unit([0], domain, ms, 500.0, ModelSettings(iterations=1500))
    assert isinstance(model, CliqueTree)
    for m in ms:  # consistent marginals of a tree: the fit reproduces them
        host = next(i for i, c in enumerate(model.cliques) if set(m.clique) <= set(c))
        np.testing.assert_allclose(500.0 * marginalize(model.tables[host], model.cliques[host],
                                                       m.clique), m.noisy, atol=0.05)
    # hundreds of cliques: numpy's per-clique cost per iteration passes JAX's compilation
    chain = {f"x{i}": 2 for i in range(400)}
    many = [Measurement((f"x{i}", f"x{i + 1}"), np.zeros((2, 2)), 1.0, 0.5) for i in range(399)]
    assert pgm.estimator(chain, many, 1500) == ("mbi" if extras.available("jax") else "numpy")


def test_the_default_steps_reach_the_least_squares_optimum_at_scale():
    """The numpy fit's accelerated steps (generate/mirror.py): at adult's scale (tens of
    thousands of rows, noise of tens of rows on a 2-way cell) its `DEFAULT_ITERATIONS` steps
    from the uniform distribution reach the weighted least-squares optimum found by brute force.
    Plain mirror descent with mbi's line search spent its first ~150 steps growing the step
    size from 2 / (L N) and was still rows away from it after 250."""
    from scipy.optimize import lsq_linear

    from dp_synth_assets.core.generate import mirror

    domain = {"a": 6, "b": 5, "c": 8}
    names, cells = list(domain), math.prod(domain.values())
    rng = np.random.default_rng(SEED)
    total = 40_000.0
    truth = rng.dirichlet(np.full(cells, 0.3)).reshape(list(domain.values())) * total
    cliques = [("a",), ("b",), ("c",), ("a", "b"), ("b", "c"), ("a", "c")]
    sigmas = [15.0, 15.0, 15.0, 30.0, 30.0, 30.0]

    def project(joint, c):
        summed = joint.sum(axis=tuple(i for i, a in enumerate(names) if a not in c))
        return np.transpose(summed, [[a for a in names if a in c].index(a) for a in c])

    ms = [Measurement(c, project(truth, c) + rng.normal(0, s, project(truth, c).shape), s, 0.1)
          for c, s in zip(cliques, sigmas)]
    eye = np.eye(cells).reshape(cells, *domain.values())
    rows = [np.stack([project(e, m.clique).ravel() for e in eye], axis=1) / m.sigma for m in ms]
    targets = [m.noisy.ravel() / m.sigma for m in ms]
    best = lsq_linear(np.vstack(rows + [np.full((1, cells), 10.0)]),  # the known total
                      np.concatenate(targets + [np.array([10.0 * total])]), bounds=(0, np.inf),
                      method="bvls").x.reshape(list(domain.values()))
    _, model = mirror.fit(domain, ms, total, mirror.DEFAULT_ITERATIONS)
    for c in cliques:  # within half a row per cell (the noise is 15 to 30 rows); plain mirror
        # descent's 250 steps were 2.2 rows away, its 1500 steps 0.27
        np.testing.assert_allclose(model.project(c), project(best, c), atol=0.5, err_msg=str(c))


def test_a_fit_that_starts_at_its_optimum_stays_there():
    """Measurements that the uniform distribution (the cold start) fits exactly: the gradient
    is zero from the first step, the step-size search must end rather than double alpha to
    infinity (inf x 0 is NaN), and the fit returns the uniform marginals."""
    from dp_synth_assets.core.generate import mirror

    domain = {"a": 3, "b": 4}
    ms = [Measurement(("a",), np.full(3, 40.0), 1.0, 0.5),
          Measurement(("a", "b"), np.full((3, 4), 10.0), 1.0, 0.5)]
    state, model = mirror.fit(domain, ms, 120.0, 3000)
    assert np.isfinite(state.alpha)
    np.testing.assert_allclose(model.project(("a", "b")), np.full((3, 4), 10.0))
