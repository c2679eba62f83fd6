"""Generation engines: the clique-tree sampler, pgm, parallel_pgm, the `auto` choice, the facade's
pre-fit check and model bytes, and each engine end to end in Dagster (GUM's own tests are in
test_generate_gum.py, an engine registered from tests/ in test_engine_plugins.py)."""

import io
import itertools

import dagster as dg
import numpy as np
import pytest

from dp_synth_assets.core import extras, generate
from dp_synth_assets.core.config import ModelSettings
from dp_synth_assets.core.generate import gum, parallel_pgm, pgm, tree
from dp_synth_assets.core.generate.tree import CliqueTree, conditional_draw
from dp_synth_assets.core.measure import Measurement, make_consistent, noisy_total
from tests.helpers import make_project, needs_extra, without_extra


def table(n: int = 20_000, seed: int = 3) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """A chain a - b - c - d with strong dependencies, plus an independent e."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, n)
    b = (a + rng.integers(0, 2, n)) % 5
    c = (2 * b + rng.integers(0, 2, n)) % 6
    d = np.where(rng.random(n) < 0.8, c % 3, rng.integers(0, 3, n))
    e = rng.integers(0, 2, n)
    return {"a": a, "b": b, "c": c, "d": d, "e": e}, {"a": 4, "b": 5, "c": 6, "d": 3, "e": 2}


def marginal(data, domain, clique) -> np.ndarray:
    shape = [domain[x] for x in clique]
    keys = np.ravel_multi_index([np.asarray(data[x], dtype=np.int64) for x in clique], shape)
    return np.bincount(keys, minlength=int(np.prod(shape))).reshape(shape).astype(float)


def exact_measurements(data, domain, cliques) -> list[Measurement]:
    """Noise-free measurements (sigma 1 so the estimators weigh them evenly)."""
    ones = [(a,) for a in domain]
    return [Measurement(tuple(c), marginal(data, domain, c), 1.0, 1.0) for c in ones + cliques]


def tvd(data, synth, domain, clique) -> float:
    p = marginal(data, domain, clique)
    q = marginal(synth, domain, clique)
    return 0.5 * float(np.abs(p / p.sum() - q / q.sum()).sum())


# ---- the clique-tree sampler -----------------------------------------------------------------


def test_conditional_draw_gives_rounded_expected_counts_in_every_group():
    rng = np.random.default_rng(0)
    weights = np.array([[0.5, 0.3, 0.2], [0.0, 0.0, 0.0], [0.1, 0.0, 0.9]])
    group = np.repeat([0, 1, 2], [1000, 10, 333])
    rng.shuffle(group)
    drawn = conditional_draw(weights, group, rng)
    fallback = weights.sum(0) / weights.sum()
    for g, size in ((0, 1000), (1, 10), (2, 333)):
        counts = np.bincount(drawn[group == g], minlength=3)
        expected = size * (weights[g] / weights[g].sum() if weights[g].sum() else fallback)
        # systematic sampling: each count is the expected count rounded up or down
        assert np.all(np.abs(counts - expected) < 1.0 + 1e-9), (g, counts, expected)
    assert np.all(drawn[group == 2] != 1)  # a zero-probability choice is never drawn


def test_strata_keep_each_groups_rounded_counts_and_get_their_proportional_share():
    """Stratified by an earlier attribute s (5 codes), the group's counts are still the rounded
    expected ones, and each stratum's counts are within 3 of m_s p (measured: at most 3 in 300
    seeds, mean 1.7), where the unstratified draw deviates by 16 on average (at least 7.8)."""
    p = np.array([[0.1, 0.2, 0.3, 0.4]])
    for seed in range(20):
        rng = np.random.default_rng(seed)
        stratum = rng.integers(0, 5, 2000)
        group = np.zeros(2000, dtype=np.int64)
        drawn = conditional_draw(p, group, rng, [stratum])
        assert np.all(np.abs(np.bincount(drawn, minlength=4) - 2000 * p[0]) < 1.0 + 1e-9)
        counts = np.bincount(stratum * 4 + drawn, minlength=20).reshape(5, 4)
        expected = np.bincount(stratum, minlength=5)[:, None] * p
        assert np.abs(counts - expected).max() <= 3.0 + 1e-9, (seed, counts - expected)
        plain = conditional_draw(p, group, rng)
        spread = np.bincount(stratum * 4 + plain, minlength=20).reshape(5, 4) - expected
        assert np.abs(spread).max() > 3.0  # what the strata remove


def test_a_stratified_row_draws_from_its_own_distribution():
    """The row with the smallest stratum code comes first in its group's order; the random cyclic
    shift gives it any of the group's points, so over 4,000 draws its value follows p (each
    frequency within 4.5 standard errors)."""
    p = np.array([0.1, 0.2, 0.3, 0.4])
    freq = np.zeros(4)
    draws = 4000
    for seed in range(draws):
        rng = np.random.default_rng(seed)
        stratum = np.r_[0, rng.integers(1, 5, 99)]
        freq[conditional_draw(p[None, :], np.zeros(100, dtype=np.int64), rng, [stratum])[0]] += 1
    assert np.all(np.abs(freq / draws - p) < 4.5 * np.sqrt(p * (1 - p) / draws)), freq / draws


def test_tree_sampling_stratifies_pairs_across_cliques():
    """x - y - z: z is drawn given y only, so the (x, z) counts of the rows are random around the
    model's n P(x, y) P(z | y) summed over y. Unstratified, the (x, z) counts of a y-group are
    multivariate hypergeometric (x's and z's counts in the group fixed): the expected L1 over the
    cells is about sum sqrt(2 / pi) sd, with sd^2 = m_x k_z (m - m_x)(m - k_z) / (m^2 (m - 1)).
    Stratified by x, they are within a few rows of m_x k_z / m: below a third of that L1."""
    domain = {"x": 3, "y": 4, "z": 3}
    rng = np.random.default_rng(5)
    pxy = rng.random((3, 4)); pxy /= pxy.sum()
    p_z_given_y = rng.random((4, 3)); p_z_given_y /= p_z_given_y.sum(1, keepdims=True)
    t = CliqueTree(domain, (("x", "y"), ("y", "z")), ((), ("y",)),
                   (pxy, pxy.sum(0)[:, None] * p_z_given_y))
    n = 20_000
    for seed in range(3):
        codes = {a: v.astype(np.int64) for a, v in tree.sample(t, n, np.random.default_rng(seed)).items()}
        l1, hyper = 0.0, 0.0
        for y in range(4):
            rows = codes["y"] == y
            m = rows.sum()
            mx = np.bincount(codes["x"][rows], minlength=3)
            kz = np.bincount(codes["z"][rows], minlength=3)
            counts = np.bincount(codes["x"][rows] * 3 + codes["z"][rows], minlength=9).reshape(3, 3)
            l1 += np.abs(counts - np.outer(mx, kz) / m).sum()
            var = np.outer(mx * (m - mx), kz * (m - kz)) / (m ** 2 * (m - 1))
            hyper += np.sqrt(2 / np.pi) * np.sqrt(var).sum()
        assert l1 < hyper / 3, (seed, l1, hyper)


def test_tree_sampling_reproduces_the_joint_and_the_conditional_independence():
    domain = {"x": 3, "y": 4, "z": 2}
    rng = np.random.default_rng(1)
    pxy = rng.random((3, 4)); pxy /= pxy.sum()
    p_z_given_y = rng.random((4, 2)); p_z_given_y /= p_z_given_y.sum(1, keepdims=True)
    pyz = pxy.sum(0)[:, None] * p_z_given_y
    t = CliqueTree(domain, (("x", "y"), ("y", "z")), ((), ("y",)), (pxy, pyz))
    codes = tree.sample(t, 200_000, np.random.default_rng(2))
    joint = marginal(codes, domain, ("x", "y", "z")) / 200_000
    truth = pxy[:, :, None] * p_z_given_y[None, :, :]
    # 200k rows, 24 cells: the sampling error of the TVD is about 0.005 (3 sd well below 0.01)
    assert 0.5 * np.abs(joint - truth).sum() < 0.01
    assert all(codes[a].dtype == np.uint8 for a in domain)  # memory proportional to the output


@needs_extra("jax")
def test_pgm_clique_tree_matches_the_fitted_model_and_keeps_the_measured_marginals():
    data, domain = table()
    found = make_consistent(exact_measurements(data, domain, [("a", "b"), ("b", "c"), ("c", "d")]))
    model = pgm.fit(domain, found, noisy_total(found), 1000)
    t = pgm.clique_tree(model, domain)
    assert set(t.cliques) >= {("a", "b"), ("b", "c"), ("c", "d")}
    for clique, table_ in zip(t.cliques, t.tables):
        mbi_marginal = np.asarray(model.project(clique).datavector(flatten=False))
        assert np.allclose(table_, mbi_marginal / mbi_marginal.sum(), atol=1e-4)
    synth = tree.sample(t, len(data["a"]), np.random.default_rng(0))
    for clique in [("a", "b"), ("b", "c"), ("c", "d"), ("e",)]:
        assert tvd(data, synth, domain, clique) < 0.02, clique


@needs_extra("jax")
def test_clique_tree_belief_propagation_agrees_with_mbi_on_triangulated_cliques():
    # maximal cliques (a, b, c) and (b, c, d) share a two-attribute separator; e is alone
    data, domain = table(5000)
    found = make_consistent(exact_measurements(
        data, domain, [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("b", "d")]))
    model = pgm.fit(domain, found, noisy_total(found), 300)
    t = pgm.clique_tree(model, domain)
    assert {frozenset(c) for c in t.cliques} >= {frozenset("abc"), frozenset("bcd")}
    for clique, table_ in zip(t.cliques, t.tables):
        mbi_marginal = np.asarray(model.project(clique).datavector(flatten=False), dtype=float)
        assert np.allclose(table_, mbi_marginal / mbi_marginal.sum(), atol=1e-5), clique
        assert table_.sum() == pytest.approx(1.0)


# ---- parallel_pgm ------------------------------------------------------------------------------


def test_cliques_are_assigned_greedily_largest_first_to_the_least_loaded_worker():
    domain = {"a": 10, "b": 10, "c": 5, "d": 4, "e": 3, "f": 2}
    cliques = [("a", "b"), ("c", "d"), ("b", "c"), ("e", "f"), ("d", "e")]  # 100, 20, 50, 6, 12
    plan = parallel_pgm.assign(cliques, domain, 2)
    loads = sorted(sum(int(np.prod([domain[x] for x in cliques[i]])) for i in p) for p in plan)
    assert plan[0] == [0]  # the 100-cell clique alone
    assert sorted(plan[1]) == [1, 2, 3, 4] and loads == [88, 100]


def test_separators_measured_holds_for_a_tree_and_fails_for_an_unmeasured_fill_in():
    data, domain = table()
    chain = exact_measurements(data, domain, [("a", "b"), ("b", "c"), ("c", "d")])
    assert parallel_pgm.separators_measured(domain, chain)
    # a 4-cycle a-b-c-d-a: triangulation adds a chord whose pair nobody measured
    cycle = exact_measurements(data, domain, [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")])
    assert not parallel_pgm.separators_measured(domain, cycle)
    closed = cycle + exact_measurements(data, domain, [("a", "c")])[len(domain):]
    closed += exact_measurements(data, domain, [("b", "d")])[len(domain):]
    assert parallel_pgm.separators_measured(domain, closed)


def sampled_errors(data, domain, t_par, t_pgm):
    """The mean 2-way TVD from `data` of a sample of each fitted tree, and parallel_pgm's sample."""
    rng = np.random.default_rng(5)
    synth_par = tree.sample(t_par, len(data["a"]), rng)
    synth_pgm = tree.sample(t_pgm, len(data["a"]), rng)
    pairs = list(itertools.combinations(domain, 2))
    return (np.mean([tvd(data, synth_par, domain, p) for p in pairs]),
            np.mean([tvd(data, synth_pgm, domain, p) for p in pairs]), synth_par)


def test_parallel_pgm_in_two_units_is_as_accurate_as_pgm_on_a_triangulated_selection():
    data, domain = table()
    cliques = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("b", "d")]
    found = make_consistent(exact_measurements(data, domain, cliques))
    n = noisy_total(found)
    assert parallel_pgm.separators_measured(domain, found)
    t_par = parallel_pgm.fit(domain, found, n, 1000, workers=2)
    t_pgm = generate.fit("pgm", domain, found, n, ModelSettings(iterations=1000))
    err_par, err_pgm, synth_par = sampled_errors(data, domain, t_par, t_pgm)
    # ABSyn section VIII.C: the two differ by at most 0.01 average TVD
    assert abs(err_par - err_pgm) <= 0.01, (err_par, err_pgm)
    for clique in cliques:
        assert tvd(data, synth_par, domain, clique) < 0.02


def test_without_the_jax_extra_every_fit_is_numpy_s(monkeypatch):
    """parallel_pgm's clique fits and pgm's fit run without mbi (the fault injected: its import
    raises), as accurately as the test above asks of them."""
    data, domain = table()
    cliques = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("b", "d")]
    found = make_consistent(exact_measurements(data, domain, cliques))
    n = noisy_total(found)
    many = fake({f"x{i}": 3 for i in range(20)}, [(f"x{i}", f"x{i + 1}") for i in range(19)])
    many_domain = {f"x{i}": 3 for i in range(20)}
    if extras.available("jax"):  # where mbi's fit is estimated faster, it is chosen
        assert pgm.estimator(many_domain, many, 100_000) == "mbi"
    without_extra(monkeypatch, "jax")
    assert pgm.estimator(many_domain, many, 100_000) == "numpy"
    assert parallel_pgm.estimator() == "numpy"
    t_par = parallel_pgm.fit(domain, found, n, pgm.iterations(None, "numpy"), workers=2)
    t_pgm = generate.fit("pgm", domain, found, n, ModelSettings())
    err_par, err_pgm, synth_par = sampled_errors(data, domain, t_par, t_pgm)
    assert abs(err_par - err_pgm) <= 0.01, (err_par, err_pgm)
    for clique in cliques:
        assert tvd(data, synth_par, domain, clique) < 0.02
    estimate = parallel_pgm.estimate(domain, found, len(data["a"]), ModelSettings())
    assert estimate.seconds < pgm.FIT_OVERHEAD_SECONDS  # numpy compiles nothing


# ---- auto ------------------------------------------------------------------------------------


def fake(domain, cliques) -> list[Measurement]:
    return [Measurement(tuple(c), np.ones([domain[a] for a in c]), 1.0, 1.0)
            for c in [(a,) for a in domain] + list(cliques)]


def test_auto_picks_pgm_for_a_small_tree():
    domain = {"a": 10, "b": 10, "c": 10}
    choice = generate.choose("auto", domain, fake(domain, [("a", "b"), ("b", "c")]), 1000,
                             ModelSettings())
    assert choice.engine == "pgm" and "auto: pgm" in choice.reason


def test_auto_picks_parallel_pgm_when_only_the_parallel_fit_meets_the_time_budget():
    # two 1e6-cell cliques sharing a measured 1000-cell separator: pgm's one fit covers 2e6 cells,
    # the parallel fit 1e6 per unit, two units at a time (model.workers: 2, so the job runs on
    # Dagster's multiprocess executor)
    domain = {"a": 1000, "s": 1000, "b": 1000}
    found = fake(domain, [("a", "s"), ("s", "b")])
    settings = ModelSettings(iterations=1500, max_seconds=120, workers=2)
    pgm_est = generate.estimate("pgm", domain, found, 1000, settings, cores=2)
    par_est = generate.estimate("parallel_pgm", domain, found, 1000, settings, cores=2)
    assert pgm_est.seconds > 120 > par_est.seconds
    choice = generate.choose("auto", domain, found, 1000, settings, cores=2)
    assert choice.engine == "parallel_pgm" and "pgm refused" in choice.reason
    # in one process (no model.workers) the units run one after the other: no faster than pgm
    one = ModelSettings(iterations=1500, max_seconds=120)
    assert generate.concurrency("auto", one, cores=2) == 1
    assert generate.estimate("parallel_pgm", domain, found, 1000, one, cores=2).seconds > 120


def test_auto_picks_gum_for_all_pairs_where_the_pgm_guard_refuses():
    domain = {f"x{i}": 20 for i in range(8)}
    found = fake(domain, list(itertools.combinations(domain, 2)))
    with pytest.raises(generate.ModelTooLarge, match="max_clique_cells"):
        generate.check("pgm", domain, found, ModelSettings(), "dense")
    choice = generate.choose("auto", domain, found, 50_000, ModelSettings())
    assert choice.engine == "gum"
    assert "pgm refused" in choice.reason and "parallel_pgm refused" in choice.reason
    assert [e.engine for e in choice.estimates] == ["pgm", "parallel_pgm", "gum"]


def test_models_round_trip_through_their_bytes_which_name_the_engine():
    data, domain = table(2000)
    found = make_consistent(exact_measurements(data, domain, [("a", "b")]))
    t = generate.fit("pgm", domain, found, noisy_total(found), ModelSettings(iterations=50))
    back = generate.loads(generate.dumps(t))
    assert back.cliques == t.cliques and back.separators == t.separators
    assert all(np.array_equal(x, y) for x, y in zip(back.tables, t.tables))
    g = generate.fit("gum", domain, found, noisy_total(found), ModelSettings(gum_iterations=7))
    data_g = generate.dumps(g)
    with np.load(io.BytesIO(data_g)) as arrays:
        assert str(arrays["engine"]) == "gum"
    back = generate.loads(data_g)
    assert back.iterations == 7 and back.domain == domain
    assert [m.clique for m in back.measurements] == [m.clique for m in found]
    assert all(np.array_equal(x.noisy, y.noisy) for x, y in zip(back.measurements, found))
    # a bare engine file, without the engine's name, is read by the engine its header names
    assert generate.loads(gum.dumps(g)).measurements[0].clique == found[0].clique
    assert generate.loads(tree.dumps(t)).cliques == t.cliques


def test_the_pre_fit_check_publishes_the_pgm_size_and_refuses_a_large_clique():
    domain = {"a": 10, "b": 10, "c": 10}
    found = fake(domain, [("a", "b"), ("b", "c")])
    facts = generate.check("pgm", domain, found, ModelSettings(), "small")
    assert facts["largest_clique_cells"] == 100 and len(facts["largest_clique"]) == 2
    assert facts["model_mb"] == round(200 * 8 / 2**20, 4)
    assert generate.check("parallel_pgm", domain, found, ModelSettings(), "small") == facts
    assert generate.check("gum", domain, found, ModelSettings(max_clique_cells=1), "small") is None
    with pytest.raises(generate.ModelTooLarge, match="dataset 'small'.*max_clique_cells = 99"):
        generate.check("pgm", domain, found, ModelSettings(max_clique_cells=99), "small")


def test_a_generator_that_is_not_registered_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"unknown generator 'nope'.*'gum'.*or auto"):
        generate.fit_units("nope", {"a": 2}, [], ModelSettings())


# ---- each engine in Dagster --------------------------------------------------------------------


def run_example(tmp_path, **overrides):
    """The example's assets in one run, without the checks of `synthetic` (what the engines
    fit is read from the model's metadata)."""
    project = make_project(tmp_path, rows=3000, **overrides)
    defs = project.defs_fn()
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=instance, raise_on_error=False,
                            selection=dg.AssetSelection.all().without_checks())
    return project, result


def model_metadata(result) -> dict:
    events = [e for e in result.get_asset_materialization_events()
              if e.asset_key == dg.AssetKey(["example", "model"])]
    return {k: v.value for k, v in events[0].materialization.metadata.items()}


@pytest.mark.e2e
def test_a_dense_manual_selection_runs_under_auto_where_pgm_refuses(tmp_path):
    # at epsilon 8 the independence guard keeps the pairs that carry a dependency (about 30 of
    # the example's 66, a number that varies with the noise): their junction tree exceeds a
    # cap of 2,000 cells in every draw, so pgm refuses
    dense = {"method": "manual", "selection": {"marginals": "all_pairs"},
             "privacy": {"epsilon": 8.0, "delta": 1e-9, "limit": {"epsilon": 40.0, "delta": 1e-8}},
             "model": {"iterations": 200, "max_clique_cells": 2_000}}
    _, refused = run_example(tmp_path / "pgm", generator="pgm", **dense)
    assert not refused.success
    failure = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "max_clique_cells" in str(failure.event_specific_data.error.message) or \
        "max_clique_cells" in str(failure.event_specific_data.user_failure_data.description)
    _, ok = run_example(tmp_path / "auto", generator="auto", **dense)
    assert ok.success
    meta = model_metadata(ok)
    assert meta["generator"] == "gum" and "pgm refused" in meta["choice_reason"]


def test_collision_probability_equals_the_sum_of_squares_of_the_full_joint():
    domain = {"x": 3, "y": 4, "z": 2, "w": 3}
    rng = np.random.default_rng(4)
    pxy = rng.random((3, 4)); pxy /= pxy.sum()
    p_z = rng.random((4, 2)); p_z /= p_z.sum(1, keepdims=True)
    pw = rng.random(3); pw /= pw.sum()
    t = CliqueTree(domain, (("x", "y"), ("y", "z"), ("w",)), ((), ("y",), ()),
                   (pxy, pxy.sum(0)[:, None] * p_z, pw))
    joint = pxy[:, :, None, None] * p_z[None, :, :, None] * pw[None, None, None, :]
    assert tree.collision_probability(t) == pytest.approx(float((joint ** 2).sum()), rel=1e-12)


