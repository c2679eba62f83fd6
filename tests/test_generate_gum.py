"""The GUM engine (PrivSyn section 5.2-5.3) on a small seeded table with known dependencies.

The table: a (5 values) drives b; b drives c; a and c drive d; d drives e; f is independent.
Measurements are its exact marginals (sigma 1, noise-free) unless a test adds noise, so a good
fit is measurable against the table itself. Every statistical bound below is for the fixed seeds
used here (the runs are deterministic given the seed).
"""

import itertools

import numpy as np
import pytest

from dp_synth_assets.core.generate.gum import GumSettings, generate
from dp_synth_assets.core.measure import Measurement, make_consistent

DOMAIN = {"a": 5, "b": 4, "c": 3, "d": 6, "e": 3, "f": 4}
CYCLE = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")]  # every attribute of degree 2


def noisy_copy(rng, p, flip, values, n):
    return np.where(rng.random(n) < flip, rng.integers(0, values, n), p)


@pytest.fixture(scope="module")
def table() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    n = 12_000
    a = rng.choice(5, n, p=[0.4, 0.25, 0.15, 0.12, 0.08])
    b = noisy_copy(rng, a % 4, 0.3, 4, n)
    c = noisy_copy(rng, (b + 1) % 3, 0.4, 3, n)
    d = noisy_copy(rng, (a + 2 * c) % 6, 0.3, 6, n)
    e = noisy_copy(rng, d // 2, 0.2, 3, n)
    f = rng.choice(4, n, p=[0.1, 0.2, 0.3, 0.4])
    return {"a": a, "b": b, "c": c, "d": d, "e": e, "f": f}


def counts(data: dict[str, np.ndarray], clique: tuple[str, ...]) -> np.ndarray:
    shape = tuple(DOMAIN[x] for x in clique)
    key = np.ravel_multi_index(tuple(np.asarray(data[x], dtype=np.int64) for x in clique), shape)
    return np.bincount(key, minlength=int(np.prod(shape))).reshape(shape).astype(np.float64)


def tvd(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p / p.sum() - q / q.sum()).sum())


def exact(data, cliques) -> list[Measurement]:
    """Noise-free measurements: every 1-way marginal plus `cliques`."""
    cliques = [(x,) for x in DOMAIN] + list(cliques)
    return [Measurement(c, counts(data, c), 1.0, 0.0) for c in cliques]


def independent_tvd(data, clique) -> float:
    """What independent columns would score on this pair: the product of its 1-way marginals."""
    joint = counts(data, clique)
    return tvd(joint, np.outer(joint.sum(axis=1), joint.sum(axis=0)))


@pytest.fixture(scope="module")
def fitted(table):
    """The cycle a-b-c-d updated by GUM, e appended to d, f in no marginal."""
    return generate(DOMAIN, exact(table, CYCLE + [("d", "e")]), 10_000, seed=3)


def test_returns_exactly_rows_records_with_codes_in_range(fitted):
    assert list(fitted) == list(DOMAIN)
    for a, codes in fitted.items():
        assert codes.shape == (10_000,)
        assert np.issubdtype(codes.dtype, np.integer) and codes.dtype.itemsize <= 8
        assert codes.min() >= 0 and codes.max() < DOMAIN[a]


def test_one_way_marginals_match_their_targets(table, fitted):
    """f (in no marginal) is drawn from rounded counts: within one record per value. The
    attributes GUM updates, and e filled from them, drift by less than 0.2% TVD (seen: <= 0.06%)."""
    for a in ("f",):
        target = counts(table, (a,)) * 10_000 / len(table[a])
        assert np.abs(counts(fitted, (a,)) - target).max() < 1.0
    for a in ("a", "b", "c", "d", "e"):
        assert tvd(counts(fitted, (a,)), counts(table, (a,))) < 0.002


def test_two_way_marginals_are_much_closer_than_independent_columns(table, fitted):
    """Independent columns are 0.21-0.47 TVD away on these pairs; GUM within 0.5% TVD and under
    2% of the independent error (seen: <= 0.14% TVD, ratio <= 0.7%)."""
    for pair in CYCLE:
        fit = tvd(counts(fitted, pair), counts(table, pair))
        assert fit < 0.005
        assert fit < 0.02 * independent_tvd(table, pair)


def test_is_deterministic_given_the_seed(table):
    ms = exact(table, CYCLE)
    first = generate(DOMAIN, ms, 3_000, seed=11)
    again = generate(DOMAIN, ms, 3_000, seed=11)
    other = generate(DOMAIN, ms, 3_000, seed=12)
    assert all(np.array_equal(first[a], again[a]) for a in DOMAIN)
    assert not all(np.array_equal(first[a], other[a]) for a in DOMAIN)


def test_appended_attribute_keeps_its_pairs_joint_distribution(table, fitted):
    """e is in one marginal, (d, e): it is filled after GUM from d's generated values with counts
    m_d * p(e | d) rounded per value of d, so every cell is within one record of that."""
    joint = counts(table, ("d", "e"))
    m_d = counts(fitted, ("d",))
    expected = m_d[:, None] * joint / joint.sum(axis=1, keepdims=True)
    assert np.abs(counts(fitted, ("d", "e")) - expected).max() < 1.0
    assert tvd(counts(fitted, ("d", "e")), joint) < 0.003


def test_two_disconnected_components_each_fit(table):
    """Two triangles {a, b, d} and {c, e, f}: no attribute of degree 1, two separate components,
    each within 0.5% TVD on its pairs (seen: <= 0.16%); the strongly dependent first triangle
    also under 2% of the independent error."""
    first = [("a", "b"), ("b", "d"), ("a", "d")]
    second = [("c", "e"), ("e", "f"), ("c", "f")]
    out = generate(DOMAIN, exact(table, first + second), 8_000, seed=5)
    for pair in first + second:
        assert tvd(counts(out, pair), counts(table, pair)) < 0.005
    for pair in first:
        assert tvd(counts(out, pair), counts(table, pair)) < 0.02 * independent_tvd(table, pair)


def test_handles_negative_noisy_cells(table):
    """Noisy consistent measurements with negative cells (and one value measured far below zero)
    give valid codes, that value never appears, and the pairs stay under 15% of the independent
    error (seen: <= 7%; sigma 30 on 12,000 rows)."""
    rng = np.random.default_rng(1)
    ms = []
    for m in exact(table, CYCLE):
        noisy = m.noisy + rng.normal(0.0, 30.0, m.noisy.shape)
        if m.clique == ("f",):
            noisy[0] = -500.0
        ms.append(Measurement(m.clique, noisy, 30.0, 0.0))
    ms = make_consistent(ms)
    assert min(m.noisy.min() for m in ms) < 0
    out = generate(DOMAIN, ms, 6_000, seed=2)
    for a, codes in out.items():
        assert codes.shape == (6_000,) and codes.min() >= 0 and codes.max() < DOMAIN[a]
    assert not np.any(out["f"] == 0)
    for pair in CYCLE:
        assert tvd(counts(out, pair), counts(table, pair)) < 0.5 * independent_tvd(table, pair)


def test_only_one_way_measurements_give_independent_columns_with_exact_counts(table):
    """Each column within one record of rows * p per value; every pair within 3% TVD of the
    product of its own 1-way marginals (sampling noise at 9,000 rows; seen: <= 1.8%)."""
    out = generate(DOMAIN, exact(table, []), 9_000, seed=4)
    for a in DOMAIN:
        target = counts(table, (a,)) * 9_000 / len(table[a])
        assert np.abs(counts(out, (a,)) - target).max() < 1.0
    for pair in itertools.combinations(DOMAIN, 2):
        joint = counts(out, pair)
        assert tvd(joint, np.outer(joint.sum(axis=1), joint.sum(axis=0))) < 0.03


def test_fits_a_three_way_marginal(table):
    clique = ("a", "c", "d")
    out = generate(DOMAIN, exact(table, [clique, ("b", "c"), ("a", "b")]), 8_000, seed=6)
    target = counts(table, clique)
    independent = np.einsum("i,j,k->ijk", target.sum((1, 2)), target.sum((0, 2)),
                            target.sum((0, 1))) / target.sum() ** 2
    assert tvd(counts(out, clique), target) < 0.01  # seen: 0.4%
    assert tvd(counts(out, clique), target) < 0.02 * tvd(independent, target)


def test_several_measurements_of_one_clique_are_weighted_by_inverse_variance(table):
    """Two measurements of f disagree completely; the one with 100x smaller sigma wins."""
    n = float(len(table["f"]))
    precise = np.array([0.0, 0.0, n, 0.0])
    vague = np.array([n, 0.0, 0.0, 0.0])
    ms = [m for m in exact(table, []) if m.clique != ("f",)]
    ms += [Measurement(("f",), precise, 1.0, 0.0), Measurement(("f",), vague, 100.0, 0.0)]
    out = generate(DOMAIN, ms, 5_000, seed=8)
    assert np.mean(out["f"] == 2) > 0.99


def test_cliques_in_any_attribute_order_are_read_correctly(table):
    """A pair measured as (d, a) is the same marginal as (a, d), transposed."""
    ms = exact(table, CYCLE[:3]) + [Measurement(("d", "a"), counts(table, ("a", "d")).T, 1.0, 0.0)]
    out = generate(DOMAIN, ms, 8_000, seed=9)
    assert tvd(counts(out, ("a", "d")), counts(table, ("a", "d"))) < 0.005


def test_reports_progress_through_log(table):
    lines = []
    generate(DOMAIN, exact(table, CYCLE), 2_000, seed=1, settings=GumSettings(iterations=10),
             log=lines.append)
    progress = [line for line in lines if line.startswith("gum iteration")]
    assert progress and progress[-1].startswith("gum iteration 10/10: mean L1 error")


@pytest.mark.parametrize("bad", [{"alpha0": 1.5}, {"decay": 0.0}, {"step": 0},
                                 {"duplicate_end": 2.0}, {"order": "sideways"},
                                 {"nonnegative": "abs"}])
def test_refuses_settings_outside_their_range(bad):
    with pytest.raises(ValueError, match="GumSettings"):
        GumSettings(**bad)
