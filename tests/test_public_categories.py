"""`categories: {from: ...}`: a categorical column's complete list read from a public table of
the warehouse (core.config.CategoriesFrom, infra.public_lists), recorded in the plan, charged
nothing, refused with a message naming the problem and the fix when it cannot be used."""

import math

import dagster as dg
import duckdb
import numpy as np
import pytest
import yaml

from dp_synth_assets.budget import DatasetBudget
from dp_synth_assets.core import stages
from dp_synth_assets.core.config import (MAX_PUBLIC_CATEGORIES, DatasetSpec, PublicListError,
                                         RegistryError, load_registry, parse_registry,
                                         with_public_categories)
from dp_synth_assets.core.preprocess import all_tasks
from dp_synth_assets.factory import dp_synth_definitions
from dp_synth_assets.infra.public_lists import read_public_lists
from dp_synth_assets.resources.ledger import PrivacyLedger

PRIVACY = {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 10.0, "delta": 1e-8}}
ZONES = [f"zone_{i:03d}" for i in range(200)]
ZONES_KEY = dg.AssetKey(["analytics", "zones"])


def entry(zone: dict, **extra) -> dict:
    return {"source": {"table": "main.trips"}, "privacy": PRIVACY,
            "columns": {"zone": {"kind": "categorical", **zone},
                        "fare": {"kind": "integer", "bounds": [0, 30]}}, **extra}


def spec(zone: dict, **extra) -> DatasetSpec:
    return parse_registry({"datasets": {"trips": entry(zone, **extra)}})["trips"]


def write_tables(con, rows: int = 3000, seed: int = 0) -> None:
    """main.zones (the public dimension, one row per zone) and main.trips (the private fact
    table: each trip's zone, skewed, and a fare)."""
    rng = np.random.default_rng(seed)
    con.execute("CREATE OR REPLACE TABLE main.zones AS SELECT unnest(?) AS zone", [ZONES])
    weights = 1.0 / np.arange(1, len(ZONES) + 1)
    zone = rng.choice(ZONES, rows, p=weights / weights.sum())
    fare = rng.integers(0, 31, rows)
    con.execute("CREATE OR REPLACE TABLE main.trips AS SELECT unnest(?) AS zone, "
                "unnest(?) AS fare", [zone.tolist(), fare.tolist()])


# ------------------------------------------------------------------ the declaration


def test_both_forms_read_as_a_public_column_and_plan_no_mechanism():
    short = spec({"categories": {"from": "main.zones.zone"}})
    long = spec({"categories": {"from": {"table": "main.zones", "column": "zone name",
                                         "asset": "analytics/zones"}}})
    assert short.columns["zone"].categories_from.name == "main.zones.zone"
    assert long.columns["zone"].categories_from.asset == ("analytics", "zones")
    assert long.columns["zone"].categories_from.column == "zone name"
    for s in (short, long):
        column = s.columns["zone"]
        assert column.category_list is None and not column.discovered
        assert column.rare_rule == "none" and not column.is_nullable
        assert all_tasks(s.columns) == []  # nothing to learn: nothing charged
        assert DatasetBudget.of(s).preprocess == 0.0
    # a written list still plans a discovery where none is given
    assert [t.mechanism for t in all_tasks(spec({}).columns)] == ["discover"]


@pytest.mark.parametrize("zone, extra, message", [
    ({"categories": {"from": "zones"}}, {}, "is not a column like schema.table.column"),
    ({"categories": {"from": "main.trips.zone"}}, {}, "reads this dataset's source"),
    ({"categories": {"from": "TRIPS.zone"}}, {}, "reads this dataset's source"),
    ({"categories": {"from": "private.zones.zone"}}, {}, "which holds dp-synth's private"),
    ({"categories": {"from": {"table": "main.zones"}}}, {}, "column"),
    ({"categories": {"from": "main.zones.zone", "rows": 3}}, {}, "rows"),
])
def test_a_bad_from_is_refused_when_the_registry_loads(zone, extra, message):
    with pytest.raises(RegistryError) as e:
        spec(zone, **extra)
    assert message in str(e.value) and "dataset 'trips'" in str(e.value)
    assert "key 'columns.zone.categories" in str(e.value) or "column 'zone'" in str(e.value)


def test_a_from_on_another_kind_is_refused():
    data = entry({})
    data["columns"]["fare"] = {"kind": "integer", "categories": {"from": "main.zones.zone"}}
    with pytest.raises(RegistryError, match="do not apply to a integer column"):
        parse_registry({"datasets": {"trips": data}})


def test_a_from_naming_another_datasets_source_is_refused(tmp_path):
    other = entry({"categories": ["a", "b"]})
    other["source"] = {"table": "main.payments"}
    mine = entry({"categories": {"from": "payments.zone"}})
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": {"payments": other, "trips": mine}}))
    with pytest.raises(RegistryError) as e:
        load_registry(path)
    assert "dataset 'trips': column 'zone'" in str(e.value)
    assert "reads the source of dataset 'payments' (payments), whose values are private" in str(e.value)


# ------------------------------------------------------------------ the list


@pytest.mark.parametrize("values, zone, message", [
    ([], {}, "the column has no values"),
    (["a", None, "b"], {}, "1 value(s) are NULL"),
    (["a", "b", "a", "a"], {}, "2 value(s) are repeated"),
    ([str(i) for i in range(MAX_PUBLIC_CATEGORIES + 1)], {},
     f"more than {MAX_PUBLIC_CATEGORIES:,} values"),
    (["a", "other"], {}, "is also the label of the other code"),
    (["1", "x"], {"type": "INTEGER", "nullable": True}, "must be integers"),
    (["a", "b"], {"fallback": "c", "nullable": False}, "`fallback` 'c' is not one of"),
])
def test_a_list_that_cannot_be_used_is_refused_naming_the_fix(values, zone, message):
    s = spec({"categories": {"from": "main.zones.zone"}, **zone})
    with pytest.raises(PublicListError) as e:
        with_public_categories(s, {"zone": values})
    text = str(e.value)
    assert message in text
    assert "dataset 'trips' in datasets.yaml, column 'zone'" in text
    assert "read from main.zones.zone" in text and "nothing was charged" in text
    assert "Fix the table, or point `from` at the column" in text


def test_a_valid_list_makes_the_column_a_declared_one():
    s = spec({"categories": {"from": "main.zones.zone"}, "other": False})
    resolved = with_public_categories(s, {"zone": ["b", "a"]})
    column = resolved.columns["zone"]
    assert column.categories == ["b", "a"] and column.category_list == ["b", "a"]
    assert column == spec({"categories": ["b", "a"], "other": False}).columns["zone"]
    assert resolved.entry == s.entry and s.columns["zone"].categories_from is not None
    with pytest.raises(PublicListError, match="were not read"):
        with_public_categories(s, {})


def test_the_list_is_read_from_the_table_and_missing_tables_or_columns_are_named():
    con = duckdb.connect()
    write_tables(con, rows=50)
    s = spec({"categories": {"from": "main.zones.zone"}})
    assert read_public_lists(con, s) == {"zone": ZONES}
    assert read_public_lists(con, spec({"categories": {"from": "ZONES.Zone"}})) == {"zone": ZONES}
    with pytest.raises(PublicListError) as e:
        read_public_lists(con, spec({"categories": {"from": "main.countries.zone"}}))
    assert "the table main.countries is not in the warehouse" in str(e.value)
    assert "Load the public dimension table there first" in str(e.value)
    with pytest.raises(PublicListError) as e:
        read_public_lists(con, spec({"categories": {"from": "main.zones.name"}}))
    assert "has no column 'name'. Fix `from`" in str(e.value)


def test_preprocessing_charges_nothing_for_the_column_and_the_plan_names_its_origin(tmp_path):
    con = duckdb.connect()
    write_tables(con)
    s = spec({"categories": {"from": "main.zones.zone"}},)
    s = s.model_copy(update={"columns": {**s.columns, "fare": spec(
        {}).columns["fare"].model_copy(update={"bounds": None})}})
    budget = DatasetBudget.of(s)
    charges = []
    plan = stages.preprocess(con, s, "trips", tmp_path, "main.enc", budget,
                             lambda spend, **p: charges.append((spend, p)),
                             public_lists=read_public_lists(con, s))
    assert charges and all(p.get("column") != "zone" for _, p in charges)
    assert math.fsum(c.rho for c, _ in charges) == pytest.approx(
        budget.with_rows(plan.noisy_rows).preprocess)
    zone = plan["zone"]
    assert list(zone.categories) == ZONES and zone.categories_from == "main.zones.zone"
    assert plan["fare"].categories_from is None
    assert plan.spec_digest is not None
    # the same plan as the list written out, but for its origin
    written = spec({"categories": ZONES})
    written = written.model_copy(update={"columns": {**written.columns, "fare": s.columns["fare"]}})
    other = stages.preprocess(con, written, "trips", tmp_path, "main.enc2", budget,
                              lambda spend, **p: None)
    assert other["zone"].categories == zone.categories and other["zone"].size == zone.size


# ------------------------------------------------------------------ a Dagster run


def host_project(tmp_path, zone: dict):
    """A host asset writing the public main.zones, a fact table main.trips in the warehouse,
    and the dataset `trips` with `zone` declared by `zone`."""
    database = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(database)) as con:
        write_tables(con)
        con.execute("DROP TABLE main.zones")

    @dg.asset(key=ZONES_KEY, kinds={"duckdb"})
    def zones() -> None:
        with duckdb.connect(str(database)) as con:
            con.execute("CREATE OR REPLACE TABLE main.zones AS SELECT unnest(?) AS zone", [ZONES])

    datasets = tmp_path / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": {"trips": entry(
        zone, model={"iterations": 100})}}))
    ours = dp_synth_definitions(datasets=datasets, warehouse=database,
                                ledger=tmp_path / "ledger.sqlite", public_dir=tmp_path / "public")
    return dg.Definitions.merge(dg.Definitions(assets=[zones]), ours)


@pytest.mark.e2e
def test_a_dagster_run_reads_the_host_dimension_asset_and_charges_nothing_for_it(tmp_path):
    defs = host_project(tmp_path, {"categories": {"from": {
        "table": "main.zones", "column": "zone", "asset": list(ZONES_KEY.path)}}})
    graph = defs.resolve_asset_graph()
    assert ZONES_KEY in graph.get(dg.AssetKey(["trips", "preprocessed"])).parent_keys
    result = dg.materialize(list(defs.assets), resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    metadata = {e.asset_key: e.materialization.metadata
                for e in result.get_asset_materialization_events()}
    pre = metadata[dg.AssetKey(["trips", "preprocessed"])]
    assert pre["categories_from"].value == {"zone": "main.zones.zone"}
    zone = next(e for e in pre["encoding_plan"].value["encodings"] if e["column"] == "zone")
    assert zone["categories"] == ZONES and zone["categories_from"] == "main.zones.zone"
    events = PrivacyLedger(tmp_path / "ledger.sqlite").events("trips")
    assert events and not any(e["parameters"].get("column") == "zone" for e in events)
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        outside = con.execute("SELECT avg(CAST(zone NOT IN (SELECT zone FROM main.zones) "
                              "AS DOUBLE)) FROM synthetic.trips").fetchone()[0]
    assert outside < 0.05  # discovered, 200 zones in 3,000 rows would be mostly `other`


@pytest.mark.e2e
def test_a_missing_dimension_table_fails_the_run_naming_it_and_spends_nothing(tmp_path):
    defs = host_project(tmp_path, {"categories": {"from": "main.countries.zone"}})
    result = dg.materialize([a for a in defs.assets if ZONES_KEY not in getattr(a, "keys", ())],
                            resources=defs.resources, instance=dg.DagsterInstance.ephemeral(),
                            raise_on_error=False)
    assert not result.success
    failures = " ".join(str(e.message) + str(getattr(e.event_specific_data, "error", ""))
                        for e in result.all_events if e.is_failure)
    assert "the table main.countries is not in the warehouse" in failures
    assert "nothing was charged" in failures
    assert PrivacyLedger(tmp_path / "ledger.sqlite").summary("trips").spent_rho == 0.0


def test_the_notebook_api_refuses_a_from_that_names_its_source_table_before_any_charge(
        tmp_path):
    from dp_synth_assets.api import Synthesizer

    con = duckdb.connect()
    write_tables(con, rows=200)
    s = spec({"categories": {"from": "main.zones.zone"}})
    ledger = tmp_path / "ledger.sqlite"
    with pytest.raises(PublicListError, match="reads the source"):
        # the API names its source late (`api.open_source`)
        Synthesizer.from_spec(s, ledger=ledger).fit("main.zones", connection=con)
    assert PrivacyLedger(ledger).summary("notebook").spent_rho == 0.0
    exhaustive = spec({"categories": {"from": "main.zones.zone"}, "other": False})
    fitted = Synthesizer.from_spec(exhaustive).fit("main.trips", connection=con)
    assert set(fitted.sample(300).column("zone").to_pylist()) <= set(ZONES)


@pytest.mark.e2e
def test_a_components_defs_yaml_takes_the_host_asset_form(tmp_path):
    from tests.test_component import HOST_KEY, customers_entry, dg_project, write_instance

    sandbox = dg_project(tmp_path)
    (sandbox.defs_folder_path / "zones.py").write_text(
        "import dagster as dg\n\n\n@dg.asset(key=['analytics', 'zones'])\n"
        "def zones() -> None:\n    \"\"\"The host's public dimension table.\"\"\"\n")
    entry = customers_entry()
    entry["columns"]["country"] = {"kind": "categorical", "categories": {"from": {
        "table": "main.zones", "column": "zone", "asset": "analytics/zones"}}}
    write_instance(sandbox, {"warehouse": "warehouse.duckdb", "ledger": "ledger.sqlite",
                             "public_dir": "public", "datasets": {"customers": entry}})
    with sandbox.build_component_tree() as tree:
        defs = tree.build_defs()
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey(["customers", "preprocessed"])).parent_keys == {
        HOST_KEY, ZONES_KEY}
    assert graph.get(ZONES_KEY).is_materializable  # the host's, not a placeholder
