"""A relational pair in Dagster (docs/relational.md, "In Dagster"): the bundled example
(customers and their orders) materialized in-process, its keys, checks and family ledger; a
run over the family's limit; the atomic publication of both tables."""

import math

import dagster as dg
import duckdb
import pytest
import yaml

from dp_synth_assets.core.config import load_registry
from dp_synth_assets.dataset_context import family_contexts
from dp_synth_assets.definitions import build_definitions
from dp_synth_assets.infra.ledger import PrivacyLedger
from dp_synth_assets.naming import Names
from dp_synth_assets.relational_example import RELATIONAL_DATASETS, write_relational_example

CUSTOMERS = 600


def project(folder, limit_epsilon: float | None = None):
    """The bundled example's two tables (small) and its datasets.yaml, seeded."""
    write_relational_example(folder / "w.duckdb", customers=CUSTOMERS, seed=1)
    datasets = {}
    for name, entry in RELATIONAL_DATASETS.items():
        entry = {**entry, "seed": 3}
        if limit_epsilon is not None:
            entry["privacy"] = {**entry["privacy"],
                                "limit": {"epsilon": limit_epsilon, "delta": 1e-9}}
        datasets[name] = entry
    path = folder / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": datasets}))
    return path, build_definitions(path, folder / "w.duckdb", folder / "ledger.sqlite",
                                   folder / "public")


def materialize(defs, instance, selection=None):
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=instance, selection=selection, raise_on_error=False)


def model_children_of(result) -> int:
    """The children per family the child's stages read, as its preprocessed stage published."""
    found = [e.materialization.metadata["model_children"].value
             for e in result.get_asset_materialization_events()
             if e.materialization.asset_key == dg.AssetKey(["orders", "preprocessed"])]
    assert len(found) == 1
    return found[0]


def ledger_rows(folder):
    return PrivacyLedger(folder / "ledger.sqlite").events()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("relational_dagster")
    path, defs = project(folder)
    result = materialize(defs, dg.DagsterInstance.ephemeral())
    return folder, path, result


def test_the_example_runs_in_dagster_with_keys_that_resolve(run):
    folder, _, result = run
    assert result.success
    con = duckdb.connect(str(folder / "w.duckdb"), read_only=True)
    try:
        parents = con.execute("SELECT count(*), count(DISTINCT id), min(id), max(id) "
                              "FROM synthetic.customers").fetchone()
        orphans = con.execute("SELECT count(*) FROM synthetic.orders AS o WHERE NOT EXISTS "
                              "(SELECT 1 FROM synthetic.customers AS c "
                              "WHERE c.id = o.customer_id)").fetchone()[0]
        columns = [r[0] for r in con.execute("DESCRIBE synthetic.orders").fetchall()]
        per_parent = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM "
                                 "synthetic.orders GROUP BY customer_id)").fetchone()[0]
        stamps = [r[0] for r in con.execute(
            "SELECT comment FROM duckdb_tables() WHERE schema_name = 'synthetic'").fetchall()]
    finally:
        con.close()
    n = parents[0]
    assert n > 0 and parents[1:] == (n, 1, n)  # new keys 1..n, one per parent
    assert orphans == 0
    assert columns == ["customer_id", "amount", "channel"]
    assert per_parent <= RELATIONAL_DATASETS["orders"]["parent"]["max_children"]
    # both tables published by one transaction of this run (family_assets.publish_family)
    assert len(stamps) == 2 and all(result.run_id in s for s in stamps)


def test_the_family_checks_pass(run):
    _, _, result = run
    found = {e.check_name: (e.passed, e.severity) for e in result.get_asset_check_evaluations()}
    assert found == {"referential_integrity": (True, dg.AssetCheckSeverity.ERROR),
                     "children_per_parent": (True, dg.AssetCheckSeverity.WARN)}


def test_one_family_unit_holds_both_sides_charges(run):
    """Both tables charge the parent's ledger entry (one unit, one reservation); the charges of
    each side sum to its share, and together to the family's run rho."""
    folder, path, result = run
    rows = ledger_rows(folder)
    assert {r["dataset"] for r in rows} == {"customers"}
    assert len({r["unit"] for r in rows}) == 1
    assert [r["kind"] for r in rows if r["kind"] != "charge"] == ["reserve", "release"]
    registry = load_registry(path)
    parent, child = family_contexts("customers", registry["customers"], "orders",
                                    registry["orders"], Names())
    side = {t: math.fsum(r["rho"] for r in rows if r["kind"] == "charge"
                         and r["parameters"].get("table") == t) for t in ("customers", "orders")}
    budgets = parent.relation.ledger_budgets
    assert side["customers"] == pytest.approx(budgets["customers"].run_rho, rel=1e-9)
    assert side["orders"] == pytest.approx(budgets["orders"].run_rho, rel=1e-9)
    assert sum(side.values()) == pytest.approx(parent.relation.family_budget.run_rho, rel=1e-9)
    # every child-side charge is its map at d_in = k, the children per family the child's
    # stages read (published by its preprocessed stage): its sensitivity scaled by k, which the
    # rule took below max_children at this budget (family.model_children)
    k = model_children_of(result)
    assert 1 <= k < RELATIONAL_DATASETS["orders"]["parent"]["max_children"]
    child_charges = [r for r in rows if r["parameters"].get("table") == "orders"]
    counts = [r for r in child_charges if r["mechanism"] == "gaussian_counts"]
    assert counts and all(r["parameters"]["sensitivity"] == k for r in counts)


def test_a_family_run_over_the_limit_is_refused_before_anything_is_drawn(tmp_path):
    """The limit fits one family run and not two: the second is refused at the parent's first
    private stage, for both sides, with nothing charged or materialized."""
    path, defs = project(tmp_path, limit_epsilon=1.2)
    registry = load_registry(path)
    family = family_contexts("customers", registry["customers"], "orders", registry["orders"],
                             Names())[0].relation.family_budget
    assert family.run_rho <= family.limit_rho < 2 * family.run_rho  # the premise
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(defs, instance).success
    before = ledger_rows(tmp_path)
    second = materialize(defs, instance)
    assert not second.success
    after = ledger_rows(tmp_path)
    assert [r for r in after if r["kind"] in ("charge", "reserve")] == [
        r for r in before if r["kind"] in ("charge", "reserve")]
    assert second.get_asset_materialization_events() == []
    failure = next(e for e in second.all_events if e.is_step_failure)
    assert "customers" in failure.step_failure_data.error.message


def test_a_child_run_charges_the_parent_entry(run, tmp_path):
    """A run of the child's stages alone reserves and charges under the parent's entry (a child
    never starts a budget of its own), its share only; its synthetic stage draws children for
    the parents the parent's last run drew, and publishes the pair again, each table stamped
    with the run whose Parquet it holds."""
    folder, path, first = run
    defs = build_definitions(path, folder / "w.duckdb", folder / "ledger.sqlite",
                             folder / "public")
    before = len(ledger_rows(folder))
    stages = ["preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]
    result = materialize(defs, dg.DagsterInstance.ephemeral(),
                         [dg.AssetKey(["orders", s]) for s in stages])
    assert result.success
    new = ledger_rows(folder)[before:]
    assert new and {r["dataset"] for r in new} == {"customers"}
    assert {r["parameters"].get("table") for r in new if r["kind"] == "charge"} == {"orders"}
    registry = load_registry(path)
    budgets = family_contexts("customers", registry["customers"], "orders", registry["orders"],
                              Names())[0].relation.ledger_budgets
    reserved = [r["rho"] for r in new if r["kind"] == "reserve"]
    assert reserved == [pytest.approx(budgets["orders"].run_rho, rel=1e-9)]
    con = duckdb.connect(str(folder / "w.duckdb"), read_only=True)
    try:
        stamps = dict(con.execute("SELECT table_name, comment FROM duckdb_tables() "
                                  "WHERE schema_name = 'synthetic'").fetchall())
        orphans = con.execute("SELECT count(*) FROM synthetic.orders AS o WHERE NOT EXISTS "
                              "(SELECT 1 FROM synthetic.customers AS c "
                              "WHERE c.id = o.customer_id)").fetchone()[0]
    finally:
        con.close()
    assert first.run_id in stamps["customers"] and result.run_id in stamps["orders"]
    assert orphans == 0


def test_a_child_selection_at_another_k_than_its_marginals_is_refused(tmp_path, monkeypatch):
    """The child's marginals are counted on a view of k children a family; when the parent's
    newer measurements give another k, a later run of the child's selection alone must not read
    those counts at the new k (they would be charged below their sensitivity): it is refused
    before any charge, naming the rerun. At the k they were counted at, it runs."""
    path, defs = project(tmp_path)
    first = materialize(defs, dg.DagsterInstance.ephemeral())
    assert first.success
    k = model_children_of(first)
    selection = [dg.AssetKey(["orders", "selection"])]
    charges = len([r for r in ledger_rows(tmp_path) if r["kind"] == "charge"])

    from dp_synth_assets.core import family
    monkeypatch.setattr(family, "children_to_read", lambda *args, **kwargs: k + 1)
    refused = materialize(defs, dg.DagsterInstance.ephemeral(), selection)
    assert not refused.success
    [failure] = [e for e in refused.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert f"not counted at {k + 1} children per family" in message, message
    assert "from 'preprocessed' on in one run" in message
    assert len([r for r in ledger_rows(tmp_path) if r["kind"] == "charge"]) == charges

    monkeypatch.setattr(family, "children_to_read", lambda *args, **kwargs: k)
    assert materialize(defs, dg.DagsterInstance.ephemeral(), selection).success
    assert len([r for r in ledger_rows(tmp_path) if r["kind"] == "charge"]) > charges


def test_both_tables_are_published_together_or_not_at_all(tmp_path):
    """`publish_family` replaces the parent's and the child's tables in one transaction: a failure
    while the second table is written (its rows' reader breaks: an injected fault) leaves both
    old tables, stamps included."""
    import pyarrow as pa

    from dp_synth_assets.family_assets import publish_family

    def rows(value):
        return pa.table({"v": [value]})

    def broken():
        yield pa.record_batch({"v": [9]})
        raise OSError("injected: the rows cannot be read")

    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    try:
        tables = {"customers": "synthetic.customers", "orders": "synthetic.orders"}

        def state():
            return [con.execute(f"SELECT max(v) FROM {t}").fetchone()[0]
                    for t in tables.values()] + [
                con.execute("SELECT comment FROM duckdb_tables() WHERE table_name = ?",
                            [t.split(".")[1]]).fetchone()[0] for t in tables.values()]

        publish_family(con, {"customers": rows(1), "orders": rows(2)}, tables,
                       {"customers": "run-1", "orders": "run-1"})
        old = state()
        assert old[:2] == [1, 2] and all("run-1" in c for c in old[2:])
        reader = pa.RecordBatchReader.from_batches(pa.schema({"v": pa.int64()}), broken())
        with pytest.raises(Exception, match="injected"):
            publish_family(con, {"customers": rows(3), "orders": reader}, tables,
                           {"customers": "run-2", "orders": "run-2"})
        assert state() == old
        publish_family(con, {"customers": rows(3), "orders": rows(4)}, tables,
                       {"customers": "run-3", "orders": "run-3"})
        assert state()[:2] == [3, 4] and all("run-3" in c for c in state()[2:])
    finally:
        con.close()


def test_the_family_checks_fail_on_orphans_and_on_a_distribution_far_from_its_measurement():
    """The checks can fail: an orphan foreign key, a NULL one and a repeated parent key are
    counted; a children-count distribution far from the noisy measurement fails its tolerance,
    one near it passes."""
    import numpy as np

    from dp_synth_assets.checks import relational
    from dp_synth_assets.core.measure import Measurement

    con = duckdb.connect(":memory:")
    try:
        con.execute("CREATE SCHEMA synthetic")
        con.execute("CREATE TABLE synthetic.p AS SELECT * FROM (VALUES (1), (2), (2)) t(id)")
        con.execute("CREATE TABLE synthetic.c AS SELECT * FROM (VALUES (1), (1), (3), (NULL)) "
                    "t(pid)")
        found = relational.referential_integrity(con, "synthetic.p", "synthetic.c", "id", "pid")
        assert not found.passed
        assert found.metadata == {"orphan_children": 2, "repeated_parent_keys": 1}
        histogram = relational.children_histogram(con, "synthetic.p", "synthetic.c", "id", "pid",
                                                  max_children=3)
        assert histogram.tolist() == [2, 0, 1, 0]  # each parent row: key 1 has two children
    finally:
        con.close()
    measured = Measurement(("children",), np.array([5000.0, 3000.0, 1500.0, 500.0]), 1.0, 0.1)
    near = np.array([500, 300, 150, 50])
    far = np.array([50, 50, 150, 750])
    identity = np.arange(4)
    assert relational.children_per_parent(near, identity, measured, 10_000.0).passed
    result = relational.children_per_parent(far, identity, measured, 10_000.0)
    assert not result.passed and result.metadata["tvd"] > result.metadata["tolerance"]


def test_a_child_side_charge_is_its_map_at_max_children():
    """`family.side_charge`: the parent side's spend is charged as it is, the child side's at
    d_in = the children a family has in its view (rho times its square, the sensitivity times
    it); a child side refuses an extra delta even when it reads one child a family."""
    from dp_synth_assets.core import family
    from dp_synth_assets.core.privacy import Spend

    charged = []
    spend = Spend(mechanism="gaussian", rho=0.01, sensitivity=1.0, scale=3.0)
    family.side_charge(lambda s, **p: charged.append((s, p)))(spend, stage="x")
    family.side_charge(lambda s, **p: charged.append((s, p)), 20, child=True)(spend, stage="x")
    family.side_charge(lambda s, **p: charged.append((s, p)), 1, child=True)(spend, stage="x")
    assert charged[0] == (spend, {"stage": "x"})
    assert charged[1][0].rho == pytest.approx(0.01 * 400)
    assert charged[1][0].sensitivity == 20 and charged[1][1] == {"stage": "x"}
    assert charged[2][0].rho == pytest.approx(0.01) and charged[2][0].sensitivity == 1
    thresholded = Spend(mechanism="gaussian_threshold", rho=0.01, delta_extra=1e-9, scale=3.0)
    with pytest.raises(ValueError, match="extra delta"):
        family.side_charge(lambda s, **p: None, 1, child=True)(thresholded, stage="x")


def parquet_pair(folder, child: str = "orders"):
    """The family's Parquet pair as a reader takes it: the child's `current` resolved once, then
    both files read from that one run folder."""
    import os

    import pyarrow.parquet as pq

    root = folder / "public" / child
    run_folder = root / os.readlink(root / "current")
    manifest = __import__("json").loads((run_folder / "manifest.json").read_text())
    return (pq.read_table(run_folder / "parent.parquet"),
            pq.read_table(run_folder / "synthetic.parquet"), manifest)


def assert_pair_resolves(parents, children):
    keys = set(parents.column("id").to_pylist())
    assert len(keys) == parents.num_rows > 0
    assert set(children.column("customer_id").to_pylist()) <= keys


def test_the_childs_set_publishes_the_parquet_pair_with_one_pointer(run):
    """A reader of the child's published set finds both tables of the pair: the parent rows the
    children were drawn for (the warehouse's synthetic.customers) beside the children."""
    folder, _, result = run
    parents, children, manifest = parquet_pair(folder)
    assert_pair_resolves(parents, children)
    con = duckdb.connect(str(folder / "w.duckdb"), read_only=True)
    try:
        warehouse = con.sql("SELECT * FROM synthetic.customers ORDER BY id").to_arrow_table()
    finally:
        con.close()
    assert parents.sort_by("id").equals(warehouse.select(parents.column_names))
    assert manifest["family"] == {"parent": "customers", "parent_run": result.run_id}


def test_a_failed_family_publish_leaves_the_last_parquet_pair(tmp_path, monkeypatch):
    """The second run draws new parents and publishes the parent's own set, then its child's
    publication fails (an injected fault): the child's set still holds the first run's pair,
    whose keys resolve, while a reader of the parent's own Parquet already sees the new rows."""
    import pyarrow.parquet as pq

    from dp_synth_assets import family_assets

    path, defs = project(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    first = materialize(defs, instance)
    assert first.success
    before = parquet_pair(tmp_path)

    def broken(*args, **kwargs):
        raise OSError("injected: the warehouse is gone")

    monkeypatch.setattr(family_assets, "publish_family", broken)
    second = materialize(defs, instance)
    assert not second.success
    parents, children, manifest = parquet_pair(tmp_path)
    assert manifest["family"]["parent_run"] == first.run_id
    assert parents.equals(before[0]) and children.equals(before[1])
    assert_pair_resolves(parents, children)
    newest = pq.read_table(tmp_path / "public" / "customers" / "current" / "synthetic.parquet")
    assert not newest.equals(parents)  # the parent's own set moved on alone
