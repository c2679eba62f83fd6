"""The `parent:` declaration of a child dataset: the rules across entries refuse with the file,
the entry and the fix (docs/relational.md)."""

import pytest
import yaml

from dp_synth_assets.core.config import RegistryError, load_registry


def entry(table: str, columns: dict, parent: dict | None = None) -> dict:
    spec = {"source": {"table": f"main.{table}"}, "columns": columns,
            "privacy": {"epsilon": 1.0, "delta": 1e-6, "limit": {"epsilon": 4.0, "delta": 1e-5}}}
    if parent is not None:
        spec["parent"] = parent
    return spec


CUSTOMERS = {"segment": {"kind": "categorical", "categories": ["a", "b"]},
             "region": {"kind": "categorical", "categories": ["n", "s"]}}
ORDERS = {"amount": {"kind": "integer", "bounds": [0, 100], "bins": 10},
          "paid": {"kind": "boolean"}}
RELATION = {"dataset": "customers", "foreign_key": "customer_id", "key": "id", "max_children": 20}


def load(tmp_path, datasets: dict):
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": datasets}))
    return path, load_registry(path)


def refused(tmp_path, datasets: dict) -> str:
    with pytest.raises(RegistryError) as e:
        load(tmp_path, datasets)
    return str(e.value)


def test_a_child_names_its_parent(tmp_path):
    _, specs = load(tmp_path, {"customers": entry("customers", CUSTOMERS),
                               "orders": entry("orders", ORDERS, RELATION)})
    rel = specs["orders"].parent
    assert (rel.dataset, rel.foreign_key, rel.key, rel.max_children) == (
        "customers", "customer_id", "id", 20)
    assert specs["customers"].parent is None


def test_the_parent_must_be_declared_in_the_same_file(tmp_path):
    msg = refused(tmp_path, {"orders": entry("orders", ORDERS, {**RELATION, "dataset": "clients"})})
    assert "datasets.yaml" in msg and "'clients'" in msg and "same file" in msg


def test_key_columns_are_never_under_columns(tmp_path):
    msg = refused(tmp_path, {
        "customers": entry("customers", {**CUSTOMERS, "id": {"kind": "integer", "bounds": [0, 9],
                                                              "bins": 2}}),
        "orders": entry("orders", {**ORDERS, "customer_id": {"kind": "integer", "bounds": [0, 9],
                                                             "bins": 2}}, RELATION)})
    assert "datasets.yaml" in msg
    assert "remove 'customer_id' from `columns:`" in msg
    assert "remove 'id' from `columns:`" in msg


@pytest.mark.parametrize("bound", [0, -3, 2.5, "20"])
def test_max_children_is_a_positive_integer(tmp_path, bound):
    msg = refused(tmp_path, {"customers": entry("customers", CUSTOMERS),
                             "orders": entry("orders", ORDERS, {**RELATION, "max_children": bound})})
    assert "datasets.yaml" in msg and "max_children" in msg


def test_grandchildren_and_cycles_are_refused(tmp_path):
    items = {"visits": {"kind": "integer", "bounds": [0, 9], "bins": 3}, "paid": {"kind": "boolean"}}
    msg = refused(tmp_path, {
        "customers": entry("customers", CUSTOMERS),
        "orders": entry("orders", ORDERS, RELATION),
        "lines": entry("lines", items, {**RELATION, "dataset": "orders", "key": "order_id",
                                        "foreign_key": "order_ref"})})
    assert "one level" in msg and "supported yet" in msg and "'lines'" in msg
    msg = refused(tmp_path, {
        "a": entry("a", CUSTOMERS, {**RELATION, "dataset": "b"}),
        "b": entry("b", ORDERS, {**RELATION, "dataset": "a"})})
    assert "one level" in msg
    msg = refused(tmp_path, {"a": entry("a", CUSTOMERS, {**RELATION, "dataset": "a"})})
    assert "its own parent" in msg


def test_the_definitions_put_a_family_in_one_lineage(tmp_path):
    """A child's first stage reads both sources (the family's views join them), its synthetic
    stage reads the parent's synthetic rows, and the family's checks are on the child's
    synthetic asset; the parent's stages see its `children` attribute."""
    import dagster as dg

    from dp_synth_assets.definitions import build_definitions
    path, _ = load(tmp_path, {"customers": entry("customers", CUSTOMERS),
                              "orders": entry("orders", ORDERS, RELATION)})
    defs = build_definitions(path, tmp_path / "w.duckdb", tmp_path / "ledger.sqlite",
                             tmp_path / "public")
    graph = defs.resolve_asset_graph()
    key = dg.AssetKey
    assert graph.get(key(["orders", "preprocessed"])).parent_keys >= {
        key(["orders", "source"]), key(["customers", "source"])}
    assert graph.get(key(["customers", "preprocessed"])).parent_keys >= {
        key(["orders", "source"]), key(["customers", "source"])}
    assert key(["customers", "synthetic"]) in graph.get(key(["orders", "synthetic"])).parent_keys
    # the child's private stages run after the parent's: one reservation, released by the last
    assert key(["customers", "measurements"]) in graph.get(
        key(["orders", "preprocessed"])).parent_keys
    assert not any(k.path[0] == "orders" and k.path[-1] != "source"
                   for k in graph.get(key(["customers", "preprocessed"])).parent_keys)
    checks = {(c.asset_key.path[0], c.name) for c in graph.asset_check_keys}
    assert {("orders", "referential_integrity"), ("orders", "children_per_parent")} <= checks
    assert not any(d == "customers" for d, _ in checks)
    assert not (tmp_path / "ledger.sqlite").exists()


@pytest.mark.parametrize("change, said", [
    ({"privacy": {"epsilon": 2.0, "delta": 1e-6, "limit": {"epsilon": 4.0, "delta": 1e-5}}},
     "copy the `privacy:` block of 'customers'"),
    ({"source": {"parquet": "orders.parquet"}}, "reads a `table:` source"),
    ({"columns": {**ORDERS, "channel": {"kind": "categorical"}}}, "declare `categories:`"),
    ({"report": {}}, "remove `report:`"),
    ({"rows": 100}, "remove `rows:` (set it on the parent 'customers')"),
])
def test_the_pipeline_refuses_a_family_it_cannot_run(tmp_path, change, said):
    """A child with a budget of its own, or a source the family's views cannot join in the
    warehouse: refused when the definitions load, naming the entry and the fix."""
    from dp_synth_assets.definitions import build_definitions
    path, _ = load(tmp_path, {"customers": entry("customers", CUSTOMERS),
                              "orders": {**entry("orders", ORDERS, RELATION), **change}})
    with pytest.raises(RegistryError) as e:
        build_definitions(path, tmp_path / "w.duckdb", tmp_path / "ledger.sqlite",
                          tmp_path / "public")
    assert "dataset 'orders' in" in str(e.value) and "datasets.yaml" in str(e.value)
    assert said in str(e.value)
    assert not (tmp_path / "ledger.sqlite").exists()


def test_a_component_builds_a_family_and_refuses_naming_its_defs_yaml(tmp_path):
    """The Component takes the same `parent:` entries: its definitions hold the family's
    lineage, and a family it cannot run is refused naming the component's defs.yaml."""
    import dagster as dg

    from tests.test_component import dg_project, load_failure, write_instance

    sandbox = dg_project(tmp_path / "ok")
    write_instance(sandbox, {"warehouse": "w.duckdb", "ledger": "l.sqlite",
                             "public_dir": "public",
                             "datasets": {"customers": entry("customers", CUSTOMERS),
                                          "orders": entry("orders", ORDERS, RELATION)}})
    with sandbox.build_component_tree() as tree:
        graph = tree.build_defs().resolve_asset_graph()
    assert dg.AssetKey(["customers", "synthetic"]) in graph.get(
        dg.AssetKey(["orders", "synthetic"])).parent_keys
    sandbox = dg_project(tmp_path / "bad")
    folder = write_instance(sandbox, {
        "warehouse": "w.duckdb", "ledger": "l.sqlite", "public_dir": "public",
        "datasets": {"customers": entry("customers", CUSTOMERS),
                     "orders": {**entry("orders", ORDERS, RELATION),
                                "source": {"parquet": "orders.parquet"}}}})
    text = load_failure(sandbox)
    assert "reads a `table:` source" in text and str(folder / "defs.yaml") in text


def test_the_relational_example_project_loads_as_one_family(tmp_path):
    """`python -m dp_synth_assets.relational_example <folder>` (what `make run-relational`
    runs) writes both tables and a datasets.yaml that the repository's definitions load as a
    parent and a child in one lineage."""
    import dagster as dg
    import duckdb

    from dp_synth_assets.definitions import build_definitions
    from dp_synth_assets.relational_example import write_relational_project

    datasets = write_relational_project(tmp_path, customers=50)
    con = duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM main.customers").fetchone()[0] == 50
        assert con.execute("SELECT count(*) FROM main.orders").fetchone()[0] > 0
    finally:
        con.close()
    defs = build_definitions(datasets, tmp_path / "warehouse.duckdb", tmp_path / "ledger.sqlite",
                             tmp_path / "public")
    graph = defs.resolve_asset_graph()
    child = dg.AssetKey(["orders", "synthetic"])
    assert dg.AssetKey(["customers", "synthetic"]) in graph.get(child).parent_keys
