"""AIM selection (dp_synth_assets.core.select.aim): accounting, noise scales, the model-size cap,
the first round's choice, the numpy model marginals, and one end-to-end Dagster run.

Noise comes from OpenDP and takes no seed; the statistical assertions below hold except with a
probability far below 1e-6 (each says why).
"""

import itertools
import math
import time

import dagster
import numpy as np
import pytest

from dp_synth_assets.core.measure import Measurement
from dp_synth_assets.core.select import METHODS, Budget
from dp_synth_assets.core.select import aim
from tests.helpers import ChargeRecorder, counting_oracle

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
    # Its quality score is about 4000 (l1 distance of the joint from independence on 3000 rows)
    # against at most a few hundred for any other candidate; with rho_t = 0.225 the Gumbel noise
    # has scale 4.7, so any other choice has probability below exp(-500).
    _, _, selection = strong
    assert selection.details["rounds"][0]["clique"] == ["a", "b"]
    assert selection.measured[0].clique == ("a", "b")


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
    total_candidates = len(aim.candidate_weights(list(domain)))
    filtered = False
    for r, m in zip(selection.details["rounds"], selection.measured):
        cliques.append(m.clique)
        # at each round, within AIM's growing limit, which never exceeds max_model_mb
        assert hypothetical_model_size(mbi_domain, cliques) <= r["model_mb_limit"]
        assert r["model_mb_limit"] <= limit
        filtered |= r["candidates"] < total_candidates
    assert hypothetical_model_size(mbi_domain, cliques) <= limit
    assert selection.details["model_mb"] <= limit
    assert filtered  # the cap did bind
    assert charge.rho == pytest.approx(2.0, rel=1e-9)


def test_model_marginals_match_mbi_on_a_model_with_a_cycle():
    from dp_synth_assets.core.generate import pgm

    domain = {"a": 4, "b": 3, "c": 5, "d": 2, "e": 6}
    rng = np.random.default_rng(SEED)
    ms = [Measurement((a,), rng.integers(50, 500, k).astype(float), 5.0, 0.1)
          for a, k in domain.items()]
    for a, b in [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("d", "e")]:
        ms.append(Measurement((a, b), rng.integers(0, 300, (domain[a], domain[b])).astype(float),
                              5.0, 0.1))
    model = pgm.fit(domain, ms, 2000.0, 200)
    queries = list(itertools.combinations(domain, 2)) + [("e", "a"), ("c",)]
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


def test_candidate_weights_and_pooling():
    weights = aim.candidate_weights(["a", "b", "c"])
    assert weights[("a", "b")] == 1.0 and weights[("c",)] == 0.5 and len(weights) == 6
    assert aim.candidate_weights(["a"]) == {("a",): 1.0}
    first = Measurement(("a",), np.array([10.0, 20.0]), 2.0, 0.125)
    second = Measurement(("a",), np.array([16.0, 14.0]), 1.0, 0.5)
    other = Measurement(("b",), np.array([1.0]), 3.0, 0.05)
    pooled = aim.pooled([first, other, second])
    assert [m.clique for m in pooled] == [("a",), ("b",)]
    # inverse-variance weights 1/4 and 1: (10/4 + 16) / 1.25 = 14.8, (20/4 + 14) / 1.25 = 15.2
    np.testing.assert_allclose(pooled[0].noisy, [14.8, 15.2])
    assert pooled[0].sigma == pytest.approx(1.25 ** -0.5)
    assert pooled[1] is other


def test_end_to_end_dagster_run_spends_exactly_the_run_budget(tmp_path):
    from dp_synth_assets.budget import DatasetBudget
    from dp_synth_assets.core.config import load_registry
    from dp_synth_assets.artifacts import artifacts
    from dp_synth_assets.resources.ledger import PrivacyLedger
    from tests.helpers import make_project

    started = time.perf_counter()
    project = make_project(tmp_path, rows=2000, method="aim", model={"iterations": 200})
    defs = project.defs_fn()
    result = dagster.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                                 instance=dagster.DagsterInstance.ephemeral())
    seconds = time.perf_counter() - started
    assert result.success
    spec = load_registry(project.datasets)["example"]
    spent = PrivacyLedger(project.ledger).summary("example").spent_rho
    assert spent == pytest.approx(DatasetBudget.of(spec).run_rho, rel=1e-9)
    found = list(artifacts(defs.resources["warehouse"], "example").measurements().measurements)
    assert len(found) > len(spec.columns)  # the 1-way marginals and the rounds' measurements
    print(f"AIM end to end: {seconds:.1f} s")
