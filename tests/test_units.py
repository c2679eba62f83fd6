"""Privacy units (dp_synth_assets.core.units): one budget per source, whatever the spelling."""

import os

import pytest

from dp_synth_assets.core.config import RegistryError, parse_registry
from dp_synth_assets.core.units import (alias_digest, aliases, checked_warehouse_name,
                                        path_identity,
                                        privacy_unit, privacy_units, source_identity)

COLUMNS = {"a": {"kind": "boolean"}, "b": {"kind": "boolean"}}
LIMIT = {"epsilon": 2.0, "delta": 1e-8}


def entry(source: dict, group: str | None = None, limit: dict = LIMIT) -> dict:
    privacy = {"epsilon": 1.0, "delta": 1e-9, "limit": limit}
    if group is not None:
        privacy["budget_group"] = group
    return {"source": source, "columns": COLUMNS, "privacy": privacy}


def registry(**entries) -> dict:
    return parse_registry({"datasets": entries})


@pytest.mark.parametrize("spelling", ["main.t", "T", "t", "MAIN.T", "warehouse.main.t"])
def test_table_spellings_are_one_unit(tmp_path, spelling):
    warehouse = tmp_path / "warehouse.duckdb"
    spec = registry(x=entry({"table": spelling}))["x"]
    assert privacy_unit(spec, tmp_path, warehouse) == "table:default:main.t"
    assert privacy_unit(spec, tmp_path, warehouse, "prod") == "table:prod:main.t"


def test_other_schema_or_other_warehouse_name_is_another_unit(tmp_path):
    specs = registry(a=entry({"table": "t"}), b=entry({"table": "other.t"}))
    assert source_identity(specs["a"], tmp_path, tmp_path / "w.duckdb") != source_identity(
        specs["b"], tmp_path, tmp_path / "w.duckdb")
    assert source_identity(specs["a"], tmp_path, tmp_path / "w.duckdb", "x") != source_identity(
        specs["a"], tmp_path, tmp_path / "w.duckdb", "y")


def test_no_unit_depends_on_where_the_project_or_the_warehouse_file_lies(tmp_path):
    """The issue's attacks: the project copied to another folder, the warehouse file copied and
    pointed at, a new warehouse path with the PostgreSQL engine. Every unit stays the same."""
    specs = registry(
        table=entry({"table": "main.t"}),
        parquet=entry({"parquet": "data/x.parquet"}),
        attached=entry({"attach": "other.duckdb", "type": "duckdb", "table": "main.u"}),
        server=entry({"attach": "host=db1 port=5432 user=me password=s3cret dbname=sales",
                      "type": "postgres", "table": "t"}),
        pg_engine={**entry({"table": "public.v"}),
                   "engine": {"type": "postgres", "dsn_env": "SALES_DSN"}})
    one, two = tmp_path / "a" / "project", tmp_path / "b" / "copy"
    first = privacy_units(specs, one, one / "data" / "warehouse.duckdb", "sales")
    second = privacy_units(specs, two, tmp_path / "elsewhere" / "w2.duckdb", "sales")
    assert first == second
    assert first["table"] == "table:sales:main.t"
    assert first["parquet"] == "file:data/x.parquet"
    assert first["attached"] == "duckdb:other.duckdb:main.u"
    assert first["server"] == "postgres:dbname=sales:public.t"  # no host, user or password
    assert first["pg_engine"] == "postgres:SALES_DSN:public.v"
    for unit in first.values():
        assert str(tmp_path) not in unit and "s3cret" not in unit
    # their earlier, path-keyed names are aliases (rows recorded under them still count)
    old = {name: path_identity(spec, one, one / "data" / "warehouse.duckdb")
           for name, spec in specs.items()}
    assert old["table"] == f"duckdb:{(one / 'data' / 'warehouse.duckdb').resolve()}:main.t"
    assert old["parquet"] == f"file:{(one / 'data' / 'x.parquet').resolve()}"
    assert old["attached"] == f"duckdb:{(one / 'other.duckdb').resolve()}:main.u"
    assert old["server"] == \
        "postgres:dbname=sales host=db1 password=s3cret port=5432 user=me:public.t"
    assert old["pg_engine"] == f"duckdb:{(one / 'data' / 'warehouse.duckdb').resolve()}:public.v"
    # kept in configuration (the UI shows a resource's) as digests: no password
    kept = aliases(specs, one, one / "data" / "warehouse.duckdb", "sales")
    assert kept == {name: (alias_digest(identity),) for name, identity in old.items()}
    assert "s3cret" not in str(kept)


@pytest.mark.parametrize("name", ["", "a b", "x" * 101, "a/b", "a:b"])
def test_a_warehouse_name_is_validated(name):
    with pytest.raises(RegistryError, match="warehouse name"):
        checked_warehouse_name(name)


def test_a_relative_file_and_its_absolute_path_are_one_unit(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    specs = registry(rel=entry({"parquet": "./x.parquet"}),
                     up=entry({"parquet": "sub/../x.parquet"}),
                     absolute=entry({"parquet": str(tmp_path / "x.parquet")}),
                     glob=entry({"parquet": "parts/*.parquet"}))
    units = {n: privacy_unit(s, tmp_path, tmp_path / "w.duckdb") for n, s in specs.items()}
    assert units["rel"] == units["up"] == units["absolute"] == "file:x.parquet"
    assert units["glob"] == "file:parts/*.parquet"
    outside = registry(o=entry({"parquet": str(tmp_path.parent / "y.parquet")}))["o"]
    assert privacy_unit(outside, tmp_path, tmp_path / "w.duckdb") == \
        f"file:{(tmp_path.parent / 'y.parquet').resolve()}"
    monkeypatch.chdir(os.sep)  # the base folder, not the working directory, anchors a path
    assert privacy_unit(specs["rel"], tmp_path, tmp_path / "w.duckdb") == units["rel"]


def test_attaching_the_warehouse_names_the_same_unit_as_its_table(tmp_path):
    specs = registry(direct=entry({"table": "main.t"}),
                     attached=entry({"attach": "warehouse.duckdb", "type": "duckdb", "table": "T"}),
                     pg1=entry({"attach": "host=h dbname=d", "type": "postgres", "table": "t"}),
                     pg2=entry({"attach": "dbname=d  host=h", "type": "postgres", "table": "public.T"}))
    warehouse = tmp_path / "warehouse.duckdb"
    units = {n: privacy_unit(s, tmp_path, warehouse) for n, s in specs.items()}
    assert units["direct"] == units["attached"]
    assert units["direct"] == "table:default:main.t"
    assert units["pg1"] == units["pg2"] == "postgres:dbname=d:public.t"


def test_two_entries_on_one_source_without_a_shared_group_are_refused(tmp_path):
    for second in (entry({"table": "T"}), entry({"table": "T"}, group="g")):
        specs = registry(first=entry({"table": "main.t"}), second=second)
        with pytest.raises(RegistryError) as error:
            privacy_units(specs, tmp_path, tmp_path / "w.duckdb")
        message = str(error.value)
        assert "'first'" in message and "'second'" in message and "budget_group" in message


def test_entries_sharing_a_group_share_one_unit_and_must_agree_on_the_limit(tmp_path):
    specs = registry(first=entry({"table": "main.t"}, group="census"),
                     second=entry({"table": "T"}, group="census"),
                     other=entry({"table": "u"}))
    units = privacy_units(specs, tmp_path, tmp_path / "w.duckdb")
    assert units["first"] == units["second"] == "group:census" != units["other"]

    specs = registry(first=entry({"table": "main.t"}, group="census"),
                     second=entry({"table": "T"}, group="census",
                                  limit={"epsilon": 3.0, "delta": 1e-8}))
    with pytest.raises(RegistryError, match="same `privacy.limit`") as error:
        privacy_units(specs, tmp_path, tmp_path / "w.duckdb")
    assert "'first'" in str(error.value) and "'second'" in str(error.value)


def test_a_budget_group_name_is_validated():
    with pytest.raises(RegistryError, match="budget_group"):
        registry(x=entry({"table": "t"}, group="no spaces"))


def test_a_parquet_uri_is_its_own_unit_as_written_and_a_csv_uri_is_refused(tmp_path):
    """Object storage is named by its URI, not resolved against the registry's folder (where
    `s3a://b/x` would have become a local path `<folder>/s3a:/b/x`); a CSV source is read
    locally (its header is read here), so a CSV URI is refused at load, naming the fix."""
    from dp_synth_assets.core.source import source_path, source_relation

    specs = registry(a=entry({"parquet": "s3a://lake/events/*.parquet"}))
    spec = specs["a"]
    assert source_identity(spec, tmp_path, tmp_path / "w.duckdb") == \
        "file:s3a://lake/events/*.parquet"
    assert source_path(spec, tmp_path) is None
    assert source_relation(spec, tmp_path) == "read_parquet('s3a://lake/events/*.parquet')"
    with pytest.raises(RegistryError, match="local file"):
        registry(b=entry({"csv": "s3a://lake/events.csv"}))
