"""PPSyn made DP (dp_synth_assets.core.select.ppsyn): partitions, accounting, end to end.

The partition tests call Algorithms 3 and 4 directly with a given p_hat and a given 'true'
marginal. The selection tests run `select` on a generated table whose exact marginals a fake
oracle computes in numpy, with a fake `charge` that records every spend. One Dagster run goes
through the whole pipeline. Statistical assertions state their false-failure rate.
"""

import math

import numpy as np
import pytest

from dp_synth_assets.core.config import SelectionSettings
from dp_synth_assets.core.generate import mirror, pgm
from dp_synth_assets.core.select import METHODS, Budget, Selection, ppsyn, select
from tests.helpers import (ChargeRecorder, counting_oracle, method_budget,
                           needs_extra, without_extra)

ETA = ppsyn.ETA


def noise_error(size: int, rho: float) -> float:
    return size / math.sqrt(math.pi * rho)


def perturbed(p_hat: np.ndarray, rng, scale: float) -> np.ndarray:
    """A 'true' marginal near p_hat: Poisson counts around a reshuffled, rescaled p_hat."""
    mix = 0.7 * p_hat + 0.3 * rng.permutation(p_hat.ravel()).reshape(p_hat.shape)
    return rng.poisson(mix * scale).astype(np.float64)


# -- partitions (Algorithms 3 and 4), Theorems 4-5 as docs/decisions/0015-ppsyn-made-dp.md reads them

SHAPES = [(99,), (7,), (12, 9), (6, 5, 8), (16, 3, 20)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", range(4))
def test_partition_never_breaks_the_eta_bound(shape, seed):
    """RE + |P| / sqrt(pi rho) <= eta Contr, with RE and the partition computed from p_hat (the
    DP version) and Contr = ||true - p_hat||_1; and the paper's exact version (the partition
    built from the true marginal) bounds the true marginal's RE the same way."""
    rng = np.random.default_rng(seed)
    p_hat = rng.gamma(0.4, 30.0, size=shape)
    true = perturbed(p_hat, rng, 1.0)
    contr = float(np.abs(true - p_hat).sum())
    algorithm = "merge" if len(shape) == 1 else "split"
    for reference in (p_hat, true):
        part = ppsyn.partition(reference, contr, ETA)
        assert part.algorithm == algorithm
        assert part.labels.shape == shape
        assert sorted(np.unique(part.labels)) == list(range(part.size))
        assert part.re == pytest.approx(ppsyn.reconstruction_error(reference, part.labels),
                                        rel=1e-9, abs=1e-6)
        assert math.isfinite(part.rho) and part.rho > 0
        assert part.re + noise_error(part.size, part.rho) <= ETA * contr * (1 + 1e-9)
        # a larger budget (a floored round) keeps the bound with the partition re-chosen for it
        for factor in (1.0, 3.0, 50.0):
            bigger = ppsyn.partition(reference, contr, ETA, rho=part.rho * factor)
            assert (bigger.re + noise_error(bigger.size, part.rho * factor)
                    <= ETA * contr * (1 + 1e-9))


@pytest.mark.parametrize("shape", [(40,), (9, 11), (5, 6, 7)])
def test_merge_on_flattened_cells_also_keeps_the_bound(shape):
    rng = np.random.default_rng(11)
    p_hat = rng.gamma(0.5, 20.0, size=shape)
    true = perturbed(p_hat, rng, 1.0)
    contr = float(np.abs(true - p_hat).sum())
    part = ppsyn.partition(p_hat, contr, ETA, multi_dim="merge")
    assert part.algorithm == "merge" and part.labels.shape == shape
    assert part.re + noise_error(part.size, part.rho) <= ETA * contr * (1 + 1e-9)


def test_merge_finds_the_groups_of_a_piecewise_constant_marginal():
    """Algorithm 3 sorts by count and merges neighbours: three levels give three groups, RE 0."""
    rng = np.random.default_rng(0)
    values = rng.permutation(np.array([5.0] * 10 + [50.0] * 10 + [1.0] * 5))
    part = ppsyn.merge_partition(values, contr=100.0)
    assert part.size == 3 and part.re == pytest.approx(0.0, abs=1e-9)
    for level in (1.0, 5.0, 50.0):
        assert len(np.unique(part.labels[values == level])) == 1
    assert part.rho == pytest.approx(9 / (math.pi * (ETA * 100.0) ** 2))  # 2 groups: RE 26.7, rho larger


def test_split_finds_the_boxes_of_a_block_constant_marginal():
    """Algorithm 4: split 0 is in dimension 0 (rows 0-2 against 3-7), split 1 in dimension 1 of
    the box of largest RE (columns 0-5 against 6-9 of the lower rows); then RE is 0 and it stops.
    At eta Contr = 560: rho = 9 / (pi 560^2) with three boxes beats 4 / (pi (560 - 240)^2) with
    two (RE 240) and the single box (RE 1238 > 560: infinite)."""
    values = np.empty((8, 10))
    values[:3, :], values[3:, :6], values[3:, 6:] = 1.0, 30.0, 40.0
    part = ppsyn.split_partition(values, contr=800.0)
    assert part.size == 3 and part.re == pytest.approx(0.0, abs=1e-9)
    assert sorted(part.boxes) == [((0, 3), (0, 10)), ((3, 8), (0, 6)), ((3, 8), (6, 10))]
    assert part.rho == pytest.approx(9 / (math.pi * 560.0 ** 2))
    rounded = ppsyn.split_partition(values, contr=800.0, rho=1e-9)  # tiny rho: one box is best
    assert rounded.size == 1


def test_no_contribution_means_no_finite_rho():
    part = ppsyn.partition(np.ones((4, 4)) * 3.0 + np.eye(4), contr=0.0)
    assert part.rho == math.inf
    assert ppsyn.required_rho(10, 5.0, 5.0 / ETA) == math.inf


def test_uniform_reconstruction_keeps_interval_sums():
    rng = np.random.default_rng(3)
    marginal = rng.integers(0, 30, size=(6, 7)).astype(float)
    part = ppsyn.split_partition(rng.gamma(1.0, 5.0, size=(6, 7)), contr=100.0)
    sums = ppsyn.interval_counts(marginal, part.labels, part.size)
    assert sums.sum() == pytest.approx(marginal.sum())
    dense = ppsyn.uniform_reconstruction(sums, part.labels)
    assert ppsyn.interval_counts(dense, part.labels, part.size) == pytest.approx(sums)
    for label in range(part.size):
        cells = dense[part.labels == label]
        assert np.allclose(cells, cells[0])


# -- the selection loop on a generated table

DOMAIN = {"a": 4, "b": 5, "c": 3, "d": 6, "e": 2, "f": 4}
ROWS = 4000


def generate(rows: int, seed: int) -> dict[str, np.ndarray]:
    """c = (a + b) mod 3 for 90% of rows (a 3-way interaction), d copies a half the time, f
    depends on d, b and e are roots."""
    rng = np.random.default_rng(seed)
    a = rng.choice(4, rows, p=[0.4, 0.3, 0.2, 0.1])
    b = rng.integers(0, 5, rows)
    c = np.where(rng.random(rows) < 0.9, (a + b) % 3, rng.integers(0, 3, rows))
    d = np.where(rng.random(rows) < 0.5, a, rng.integers(0, 6, rows))
    e = rng.integers(0, 2, rows)
    f = np.where(rng.random(rows) < 0.4, d % 4, rng.integers(0, 4, rows))
    return {"a": a, "b": b, "c": c, "d": d, "e": e, "f": f}


@pytest.fixture(scope="module")
def run():
    data = generate(ROWS, 0)
    budget = method_budget("ppsyn", 0.5)
    charges = ChargeRecorder()
    selection = ppsyn.select(DOMAIN, counting_oracle(data, DOMAIN, max_order=3), budget, SelectionSettings(),
                             charges)
    return data, budget, charges, selection


def test_spends_exactly_the_budget(run):
    _, budget, charges, selection = run
    assert charges.rho == pytest.approx(budget.total, rel=1e-9)
    rounds = selection.details["rounds"]
    T = selection.details["T"]
    assert T == 2 * len(DOMAIN) and 1 <= len(rounds) <= T
    # per round: one exponential mechanism, one noisy contribution, one partition measurement
    assert len(charges.calls) == len(DOMAIN) + 3 * len(rounds)
    mechanisms = [s.mechanism for s, _ in charges.calls[len(DOMAIN):]]
    assert mechanisms == ["exponential_mechanism", "gaussian_scores", "gaussian_counts"] * len(rounds)
    rho_sel = budget.score / T
    for r in rounds:
        assert r["rho_selection"] == pytest.approx(rho_sel, rel=1e-9)
        if r["rho_rule"] != "last round":
            assert r["rho_measure"] >= budget.measure / T * (1 - 1e-9)
    one_way = sum(s.rho for s, _ in charges.calls[:len(DOMAIN)])
    assert one_way == pytest.approx(budget.one_way, rel=1e-9)


def test_without_the_jax_extra_the_refits_are_numpy_s_and_spend_the_same(monkeypatch):
    without_extra(monkeypatch, "jax")
    data = generate(ROWS, 0)
    budget = method_budget("ppsyn", 0.5)
    charges = ChargeRecorder()
    selection = ppsyn.select(DOMAIN, counting_oracle(data, DOMAIN, max_order=3), budget,
                             SelectionSettings(), charges)
    assert charges.rho == pytest.approx(budget.total, rel=1e-9)
    rounds = selection.details["rounds"]
    assert 1 <= len(rounds) <= 2 * len(DOMAIN)
    assert len(selection.measured) == len(rounds)
    # each round chose from the numpy model's marginals a workload marginal it measured
    assert all(tuple(r["clique"]) in {tuple(w) for w in selection.details["workload"]}
               for r in rounds)


def test_one_way_split_is_c_to_the_two_thirds(run):
    _, budget, _, selection = run
    weights = np.array([DOMAIN[m.clique[0]] ** (2 / 3) for m in selection.one_way])
    rhos = np.array([m.rho for m in selection.one_way])
    assert rhos == pytest.approx(budget.one_way * weights / weights.sum(), rel=1e-9)


def test_each_sigma_matches_its_rho(run):
    """1-way: sigma = 1/sqrt(2 rho). Partition measurements: the mechanism's sigma is
    1/sqrt(2 rho) and the dense measurement's sigma is that over sqrt(smallest interval)."""
    _, _, charges, selection = run
    for m in selection.one_way:
        assert m.sigma == pytest.approx(1 / math.sqrt(2 * m.rho), rel=1e-9)
    measure_spends = [s for s, _ in charges.calls if s.mechanism == "gaussian_counts"]
    measure_spends = measure_spends[len(DOMAIN):]
    assert len(measure_spends) == len(selection.measured) == len(selection.details["partitions"])
    for m, spend, r, desc in zip(selection.measured, measure_spends, selection.details["rounds"],
                                 selection.details["partitions"]):
        assert m.rho == spend.rho and spend.scale == pytest.approx(1 / math.sqrt(2 * m.rho), rel=1e-9)
        boxes = desc["boxes"]
        smallest = min(math.prod(hi - lo for lo, hi in box) for box in boxes)
        assert r["min_interval"] == smallest and r["partition_cells"] == len(boxes)
        assert m.sigma == pytest.approx(spend.scale / math.sqrt(smallest), rel=1e-9)
        assert r["sigma"] == spend.scale and r["sigma_dense"] == m.sigma


def test_measurements_are_uniform_inside_each_partition_cell(run):
    _, _, _, selection = run
    for m, desc in zip(selection.measured, selection.details["partitions"]):
        assert m.noisy.shape == tuple(DOMAIN[a] for a in m.clique)
        assert tuple(desc["clique"]) == m.clique
        for box in desc["boxes"]:
            cells = m.noisy[tuple(slice(lo, hi) for lo, hi in box)]
            assert np.allclose(cells, cells.ravel()[0])


def test_partitions_keep_the_bound_against_the_published_contribution(run):
    """The rounds at the paper's rho: RE(p_hat) + |P|/sqrt(pi rho) <= eta * C_hat, where C_hat
    is the published one-sigma lower bound of the noisy contribution."""
    _, _, _, selection = run
    for r in selection.details["rounds"]:
        if r["rho_rule"] in ("paper", "floor"):
            bound = ETA * r["contribution_lower"]
            assert r["re_model"] + noise_error(r["partition_cells"], r["rho_measure"]) <= bound + 1e-3


def test_three_way_workload_and_selection_output(run):
    _, _, _, selection = run
    assert selection.method == "ppsyn"
    assert selection.details["workload_order"] == 3 and selection.details["workload_fallback"] == ""
    workload = [tuple(c) for c in selection.details["workload"]]
    assert workload == ppsyn.workload(DOMAIN)  # a function of the public domain only
    assert all(m.clique in workload for m in selection.measured)
    assert selection.cliques == () and selection.budgets == {}
    # the selection round-trips through JSON (selection.json)
    again = Selection.from_dict(selection.to_dict())
    assert [m.clique for m in again.measured] == [m.clique for m in selection.measured]
    assert set(selection.scores) == {m.clique for m in selection.measured}


def test_first_round_picks_the_three_way_interaction(run):
    """c = (a + b) mod 3 for 90% of rows: against the 1-way model, (a, b, c) misfits by about
    4,800 counts, the next clique (a, d, f) by about 3,300 (computed on this table). The
    exponential mechanism's scale is 1/sqrt(2 rho_exp) = 15.5 (rho_exp = 0.5 * 0.05 / 12), so
    another pick has probability below 20 exp(-1000 / 15.5) < 1e-20."""
    _, _, _, selection = run
    first = selection.details["rounds"][0]["clique"]
    assert {"a", "b", "c"} <= set(first)


def test_workload_is_fixed_and_capped():
    domain = {f"x{i}": 10 + i for i in range(9)}
    w = ppsyn.workload(domain)
    assert w == ppsyn.workload(dict(domain))
    assert len(w) == ppsyn.WORKLOAD_SIZE and len(set(w)) == len(w)
    assert all(len(c) == 3 and math.prod(domain[a] for a in c) <= ppsyn.WORKLOAD_MAX_CELLS for c in w)
    big = {"a": 1000, "b": 1000, "c": 2, "d": 3}
    assert all(math.prod(big[x] for x in c) <= ppsyn.WORKLOAD_MAX_CELLS for c in ppsyn.workload(big))
    assert ("a", "b", "c") not in ppsyn.workload(big)


def test_falls_back_to_pairs_when_the_oracle_has_no_three_way_marginals():
    data = generate(1500, 1)
    budget = method_budget("ppsyn", 0.2)
    charges = ChargeRecorder()
    selection = ppsyn.select(DOMAIN, counting_oracle(data, DOMAIN, max_order=2), budget,
                             SelectionSettings(), charges, rounds=3)
    assert selection.details["workload_order"] == 2
    assert "2-way" in selection.details["workload_fallback"]
    assert all(len(m.clique) == 2 for m in selection.measured)
    assert 1 <= len(selection.measured) <= 3
    assert charges.rho == pytest.approx(budget.total, rel=1e-9)


def test_one_way_candidates_when_no_workload_marginal_fits_the_model_size():
    """A model-size limit below any 3-way junction tree leaves the 1-way marginals as the
    candidates; they are partitioned with Algorithm 3. A single attribute has no workload."""
    data = generate(1500, 4)
    budget = method_budget("ppsyn", 0.2)
    charges = ChargeRecorder()
    selection = ppsyn.select(DOMAIN, counting_oracle(data, DOMAIN, max_order=3), budget,
                             SelectionSettings(max_model_mb=0.0002), charges, rounds=2)
    assert selection.measured and all(len(m.clique) == 1 for m in selection.measured)
    assert all(p["algorithm"] == "merge" for p in selection.details["partitions"])
    assert charges.rho == pytest.approx(budget.total, rel=1e-9)
    single = {"a": 4}
    charges = ChargeRecorder()
    selection = ppsyn.select(single, counting_oracle(data, single, max_order=3), budget, SelectionSettings(),
                             charges, rounds=2)
    assert selection.details["workload"] == [] and selection.details["workload_order"] == 0
    assert [m.clique for m in selection.measured] in ([("a",)], [("a",), ("a",)])
    assert charges.rho == pytest.approx(budget.total, rel=1e-9)


def test_refits_take_the_pgm_engine_s_estimator_and_warm_start_only_from_its_own_model(run):
    """A 6-column selection makes a junction tree of a few hundred cells: the pgm engine's
    choice (`pgm.estimator`) is the numpy fit whether or not the `jax` extra is installed, so no
    round compiles a JAX program; each refit's state warm-starts the next numpy one."""
    _, _, _, selection = run
    measurements = list(selection.one_way) + list(selection.measured)
    assert pgm.estimator(DOMAIN, measurements, None) == "numpy"
    state, marginals = ppsyn.refit(DOMAIN, measurements, 4000.0)
    assert isinstance(state, mirror.FitState)
    again, _ = ppsyn.refit(DOMAIN, measurements, 4000.0, warm=state)
    assert isinstance(again, mirror.FitState) and set(again.theta) == set(state.theta)
    ab = marginals([("a", "b")])[("a", "b")]
    assert ab.shape == (4, 5) and ab.sum() == pytest.approx(4000.0, rel=1e-6)


@needs_extra("jax")
def test_model_marginals_match_mbi_projection(run):
    """The mbi refit (`estimator="mbi"`, started cold from a numpy model it cannot use): its
    marginals computed in numpy are mbi's own projections."""
    _, _, _, selection = run
    measurements = list(selection.one_way) + list(selection.measured)
    numpy_state, _ = ppsyn.refit(DOMAIN, measurements, 4000.0)
    model, marginals = ppsyn.refit(DOMAIN, measurements, 4000.0, warm=numpy_state,
                                   estimator="mbi")
    cliques = [("a", "b", "c"), ("a", "f"), ("b", "d", "e"), ("e",)]
    ours = marginals(cliques)
    for c in cliques:
        theirs = np.asarray(model.project(c).datavector(flatten=False), dtype=np.float64)
        assert ours[c].shape == theirs.shape
        assert np.allclose(ours[c], theirs, rtol=1e-3, atol=1e-3 * theirs.sum() / theirs.size)


def test_refuses_a_budget_without_selection_or_measurement():
    with pytest.raises(ValueError, match="ppsyn needs rho"):
        ppsyn.select(DOMAIN, counting_oracle(generate(100, 2), DOMAIN, max_order=3), Budget(0.1, 0.1, 0.0),
                     SelectionSettings(), ChargeRecorder())


def test_registered_and_dispatched():
    info = METHODS["ppsyn"]
    assert (info.module, info.one_way_share, info.score_share, info.measures_in_selection) == (
        "ppsyn", 0.1, 0.1, True)
    data = generate(800, 3)
    small = {"a": 4, "b": 5}
    charges = ChargeRecorder()
    selection = select("ppsyn", small, counting_oracle(data, small, max_order=3), method_budget("ppsyn", 0.3),
                       SelectionSettings(), charges)
    assert selection.details["workload_order"] == 2  # two attributes: the one pair
    assert charges.rho == pytest.approx(method_budget("ppsyn", 0.3).total, rel=1e-9)
