"""The privacy unit of a relation is a parent with all its children: brute force on neighbouring
databases that remove or add one whole family checks that the counts the relation answers move
by no more than the sensitivity the mechanisms are charged at (`core.relational`), adversarial
families included (more than max_children children, all in one cell), and that which children
are kept never depends on their values."""

import duckdb
import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.core import relational
from dp_synth_assets.core.privacy import gaussian_scale

MAX_CHILDREN = 4
MODEL_CHILDREN = 2  # the children per family the child's stages read (family.model_children)
SEED = 11


def database(parents: list[tuple], children: list[tuple]):
    """A real DuckDB with `parents(id, segment)` and `children(customer_id, amount, tag)` and the
    relation's two views over them."""
    con = duckdb.connect()
    con.execute("CREATE TABLE parents (id BIGINT, segment VARCHAR)")
    con.execute("CREATE TABLE children (customer_id BIGINT, amount BIGINT, tag BIGINT)")
    # one INSERT per table from a DataFrame: executemany's statement per row was most of the
    # brute force's time (a database per neighbour)
    for table, rows, names in (("parents", parents, ["id", "segment"]),
                               ("children", children, ["customer_id", "amount", "tag"])):
        if rows:
            frame = pd.DataFrame(rows, columns=names)  # noqa: F841 - read by DuckDB below
            con.execute(f"INSERT INTO {table} SELECT * FROM frame")
    con.execute(relational.bounded_children_sql(
        "children", "parents", "customer_id", "id", MAX_CHILDREN, SEED, "bounded", ["segment"]))
    con.execute(relational.parents_sql("parents", "customer_id", "id", "family", "bounded"))
    con.execute(relational.bounded_children_sql(
        "children", "parents", "customer_id", "id", MODEL_CHILDREN, SEED, "modeled", ["segment"]))
    return con


def modeled(parents, children) -> dict:
    """The child rows the child's stages read (at most MODEL_CHILDREN a family), counted by
    (amount, parent segment)."""
    con = database(parents, children)
    found = dict(((a, s), n) for a, s, n in con.execute(
        "SELECT amount, parent_segment, count(*) FROM modeled GROUP BY ALL").fetchall())
    con.close()
    return found


def answers(parents, children) -> tuple[dict, dict]:
    """The two count arrays a relation measures, as cell -> count: child rows by (amount, parent
    segment), parent rows by (segment, children)."""
    con = database(parents, children)
    child = dict(((a, s), n) for a, s, n in con.execute(
        "SELECT amount, parent_segment, count(*) FROM bounded GROUP BY ALL").fetchall())
    parent = dict(((s, c), n) for s, c, n in con.execute(
        "SELECT segment, children, count(*) FROM family GROUP BY ALL").fetchall())
    con.close()
    return child, parent


def distance(a: dict, b: dict) -> tuple[int, float]:
    """L1 and L2 distance of two count arrays given as cell -> count."""
    diff = np.array([a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b)], dtype=float)
    return int(np.abs(diff).sum()), float(np.sqrt((diff ** 2).sum()))


def families(seed: int = 0):
    """30 parents with 0..max_children+5 children each (some all in one cell), and orphans."""
    rng = np.random.default_rng(seed)
    parents = [(i, "ab"[i % 2]) for i in range(30)]
    children, tag = [], 0
    for i in range(30):
        for _ in range(int(rng.integers(0, MAX_CHILDREN + 6))):
            amount = 3 if i % 3 == 0 else int(rng.integers(0, 5))
            children.append((i, amount, tag))
            tag += 1
    children += [(999, 1, tag), (998, 2, tag + 1)]  # orphans: no parent has these keys
    rng.shuffle(children)
    return parents, [tuple(int(x) for x in c) for c in children]


def test_the_sensitivity_is_opendps_map_at_max_children():
    assert relational.family_sensitivity(1) == 1  # the parent side: one row per family
    assert relational.family_sensitivity(MAX_CHILDREN) == MAX_CHILDREN
    assert relational.family_sensitivity(20) == 20
    with pytest.raises(ValueError):
        relational.family_sensitivity(0)


def test_the_charge_is_the_measurements_map():
    rho = 0.05
    from dp_synth_assets.core.privacy import gaussian_counts

    noisy, spend = gaussian_counts(np.array([[3, 0], [7, 1]]), rho,
                                   relational.family_sensitivity(MAX_CHILDREN))
    assert noisy.shape == (2, 2)
    assert spend.sensitivity == MAX_CHILDREN
    assert spend.scale == pytest.approx(gaussian_scale(rho, MAX_CHILDREN))
    assert spend.scale == pytest.approx(MAX_CHILDREN * gaussian_scale(rho))
    assert spend.rho >= rho * (1 - 1e-9)
    assert spend.rho == pytest.approx(rho, rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_removing_a_family_moves_counts_within_the_bound(seed):
    parents, children = families(seed)
    child, parent = answers(parents, children)
    bound = relational.family_sensitivity(MAX_CHILDREN)
    worst = 0.0
    for pid, _ in parents:
        c2, p2 = answers([p for p in parents if p[0] != pid],
                         [c for c in children if c[0] != pid])
        l1, l2 = distance(child, c2)
        assert l1 <= MAX_CHILDREN and l2 <= bound
        assert distance(parent, p2) == (1, 1.0)  # one parent row, whatever its children
        worst = max(worst, l2)
    assert worst == bound  # a family over the bound, all in one cell, reaches it


def test_adding_an_adversarial_family_moves_counts_within_the_bound():
    parents, children = families(3)
    child, parent = answers(parents, children)
    crowd = [(500, 3, 10_000 + j) for j in range(MAX_CHILDREN + 5)]  # all in one cell
    c2, p2 = answers(parents + [(500, "a")], children + crowd)
    assert distance(child, c2) == (MAX_CHILDREN, float(MAX_CHILDREN))
    assert distance(parent, p2) == (1, 1.0)
    assert p2[("a", MAX_CHILDREN)] == parent.get(("a", MAX_CHILDREN), 0) + 1


def test_orphans_are_dropped():
    parents, children = families(4)
    child, parent = answers(parents, children)
    c2, p2 = answers(parents, children + [(777, 0, 50_000), (778, 4, 50_001)])
    assert (c2, p2) == (child, parent)


def test_which_children_are_kept_never_depends_on_their_values():
    parents, children = families(5)
    kept = database(parents, children).execute("SELECT tag FROM bounded").fetchall()
    changed = [(c[0], (c[1] + 2) % 5, c[2]) for c in children]
    kept2 = database(parents, changed).execute("SELECT tag FROM bounded").fetchall()
    assert sorted(kept) == sorted(kept2)
    con = database(parents, children)
    per_family = dict(con.execute("SELECT customer_id, count(*) FROM bounded GROUP BY 1").fetchall())
    sizes = dict(con.execute("SELECT customer_id, count(*) FROM children GROUP BY 1").fetchall())
    assert per_family == {k: min(n, MAX_CHILDREN) for k, n in sizes.items() if k < 30}
    counts = dict(con.execute("SELECT id, children FROM family").fetchall())
    assert counts == {i: min(sizes.get(i, 0), MAX_CHILDREN) for i in range(30)}


@pytest.mark.parametrize("seed", [0, 1])
def test_the_modeled_view_moves_counts_within_k(seed):
    """The child's stages read at most k children a family and are charged at d_in = k: removing
    any family, or adding one with all its children in one cell, moves their counts by at most
    k, and the adversarial family reaches it."""
    parents, children = families(seed)
    before = modeled(parents, children)
    for pid, _ in parents:
        l1, l2 = distance(before, modeled([p for p in parents if p[0] != pid],
                                          [c for c in children if c[0] != pid]))
        assert l1 <= MODEL_CHILDREN and l2 <= relational.family_sensitivity(MODEL_CHILDREN)
    crowd = [(500, 3, 10_000 + j) for j in range(MAX_CHILDREN + 5)]
    after = modeled(parents + [(500, "a")], children + crowd)
    assert distance(before, after) == (MODEL_CHILDREN, float(MODEL_CHILDREN))


def test_the_modeled_view_is_the_bounded_draw_cut_at_k():
    """The same value-independent draw as the bounded view, cut lower: its rows are a subset of
    the bounded view's, min(children, k) a family, and they do not move when values change."""
    parents, children = families(6)
    con = database(parents, children)
    kept = {t for (t,) in con.execute("SELECT tag FROM modeled").fetchall()}
    bounded = {t for (t,) in con.execute("SELECT tag FROM bounded").fetchall()}
    per_family = dict(con.execute("SELECT customer_id, count(*) FROM modeled GROUP BY 1").fetchall())
    sizes = dict(con.execute("SELECT customer_id, count(*) FROM children GROUP BY 1").fetchall())
    con.close()
    assert kept < bounded
    assert per_family == {k: min(n, MODEL_CHILDREN) for k, n in sizes.items() if k < 30}
    changed = [(c[0], (c[1] + 1) % 5, c[2]) for c in children]
    con = database(parents, changed)
    assert {t for (t,) in con.execute("SELECT tag FROM modeled").fetchall()} == kept
    con.close()
