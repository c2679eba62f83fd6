"""Sources beyond a table of the warehouse file: a Parquet glob and an attached database.

Both run the whole pipeline for real. The attached database is another DuckDB file (DuckDB's
built-in ATTACH type); postgres, mysql and sqlite use the same code path with DuckDB's
extensions, which this machine cannot download (see docs/where-data-lives.md).
"""

import dagster as dg
import duckdb
import pytest
import yaml

from dp_synth_assets.core.config import RegistryError, load_registry
from dp_synth_assets.example import write_example
from dp_synth_assets.source_access import fingerprint
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import example_entry, make_project

ROWS = 2500


def run_all(defs, checks: bool = True):
    """Every asset, with the checks of `synthetic` or without them (`checks`: the checks read
    the synthetic table, never the source)."""
    selection = dg.AssetSelection.all()
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
                          selection=selection if checks else selection.without_checks())


def use_source(project, source: dict) -> None:
    entry = example_entry(source=source, report=None)
    project.datasets.write_text(yaml.safe_dump({"datasets": {"example": entry}}, sort_keys=False))


def synthetic_rows(project) -> int:
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        return con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0]


@pytest.mark.e2e
def test_a_parquet_glob_is_one_source(tmp_path):
    project = make_project(tmp_path, rows=ROWS)
    parts = tmp_path / "lake" / "example"
    parts.mkdir(parents=True)
    with duckdb.connect(str(project.warehouse)) as con:
        for k in range(3):  # three files, rows split by a hash of the row
            con.execute(f"COPY (SELECT * FROM main.example AS e WHERE hash(e) % 3 = {k}) "
                        f"TO '{parts}/part-{k}.parquet' (FORMAT parquet)")
        con.execute("DROP TABLE main.example")
    use_source(project, {"parquet": "lake/example/part-*.parquet"})
    result = run_all(project.defs_fn(), checks=False)
    assert result.success
    assert abs(synthetic_rows(project) - ROWS) < 200  # rows: same is the noisy count


@pytest.mark.e2e
def test_an_attached_database_is_read_where_it_lives(tmp_path):
    project = make_project(tmp_path, rows=ROWS)
    crm = tmp_path / "crm.duckdb"
    write_example(crm, rows=ROWS)  # the source lives in its own database, not the warehouse
    with duckdb.connect(str(project.warehouse)) as con:
        con.execute("DROP TABLE main.example")
    before = crm.stat().st_mtime_ns
    use_source(project, {"attach": "crm.duckdb", "type": "duckdb", "table": "main.example"})
    defs = project.defs_fn()
    result = run_all(defs, checks=False)
    assert result.success
    assert abs(synthetic_rows(project) - ROWS) < 200
    assert crm.stat().st_mtime_ns == before  # attached READ_ONLY: never written
    # the encoded view in the warehouse reads the attached table; a later run attaches again
    assert run_all(project.defs_fn(), checks=False).success
    # the source's data version (the sensor's cursor) is a digest of the attached table's rows
    spec = load_registry(project.datasets)["example"]
    warehouse = defs.resources["warehouse"]
    before = fingerprint(warehouse, spec, dataset="example")
    assert fingerprint(warehouse, spec, dataset="example") == before
    with duckdb.connect(str(crm)) as con:
        con.execute("UPDATE main.example SET age = age + 1 WHERE age < 30")
    assert fingerprint(warehouse, spec, dataset="example") != before


@pytest.mark.e2e
def test_an_unreachable_attached_database_fails_clearly_and_spends_nothing(tmp_path):
    project = make_project(tmp_path, rows=ROWS)
    use_source(project, {"attach": "missing/crm.duckdb", "type": "duckdb",
                         "table": "main.example"})
    result = run_all(project.defs_fn())
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = str(failure.event_specific_data.error)
    assert "cannot attach its source database" in message and "source.attach" in message
    ledger = PrivacyLedger(project.ledger).summary("example")
    assert ledger.spent_rho == 0 and ledger.reserved_rho == 0


def test_an_attach_source_is_validated_when_the_registry_loads(tmp_path):
    entry = example_entry(source={"attach": "x.duckdb", "type": "oracle", "table": "main.t"})
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": {"example": entry}}))
    with pytest.raises(RegistryError, match="source"):
        load_registry(path)


# ------------------------------------------------------------------------------ CSV from the spec

def csv_spec(**source):
    from dp_synth_assets.core.config import DatasetSpec

    entry = example_entry(source=source)
    return DatasetSpec.model_validate(entry)


def test_a_csv_header_of_numbers_is_the_header_and_every_column_reads_as_text(tmp_path):
    from dp_synth_assets.core.source import source_relation

    path = tmp_path / "numbers.csv"
    names = [str(i) for i in range(14)]
    # one row would make a sniffer call the header data (all numbers) and flip types
    path.write_text(",".join(names) + "\n" + ",".join(str(i * 10) for i in range(14)) + "\n"
                    + ",".join(["1.5"] + [""] * 13) + "\n")
    relation = source_relation(csv_spec(csv=str(path)), tmp_path)
    with duckdb.connect() as con:
        described = con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()
        rows = con.execute(f"SELECT * FROM {relation}").fetchall()
    assert [(r[0], r[1]) for r in described] == [(n, "VARCHAR") for n in names]
    assert rows[0] == tuple(str(i * 10) for i in range(14))
    assert rows[1] == ("1.5",) + (None,) * 13  # the empty field is NULL by default


def test_csv_dialect_nulls_and_names_are_read_as_declared(tmp_path):
    from dp_synth_assets.core.source import source_relation

    path = tmp_path / "semi.csv"
    path.write_text("7;'a;b';NA\n8;'it\\'s';\n")  # no header, ; delimiter, ' quote, \ escape
    spec = csv_spec(csv="semi.csv", header=False, delimiter=";", quote="'", escape="\\",
                    null=["NA"], columns=["n", "label", "note"])
    with duckdb.connect() as con:
        rows = con.execute(f"SELECT * FROM {source_relation(spec, tmp_path)}").fetchall()
    assert rows == [("7", "a;b", None), ("8", "it's", "")]  # "" is a value: only NA is NULL
    # `columns` also overrides a header line, which is then skipped
    path.write_text("x,y,z\n1,2,3\n")
    spec = csv_spec(csv="semi.csv", columns=["a", "b", "c"])
    with duckdb.connect() as con:
        relation = source_relation(spec, tmp_path)
        assert con.execute(f"SELECT * FROM {relation}").fetchall() == [("1", "2", "3")]
        assert [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()] \
            == ["a", "b", "c"]


@pytest.mark.parametrize("source, problem", [
    ({"csv": "x.csv", "sniff": True}, "source"),
    ({"csv": "x.csv", "header": False}, "needs `columns:`"),
    ({"csv": "x.csv", "delimiter": ";;"}, "source.delimiter"),
    ({"csv": "x.csv", "delimiter": '"'}, "two different characters"),
    ({"csv": "x.csv", "null": []}, "source.null"),
    ({"csv": "x.csv", "columns": ["a", "a"]}, "duplicates"),
])
def test_csv_options_are_validated_when_the_registry_loads(tmp_path, source, problem):
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": {"example": example_entry(source=source)}}))
    with pytest.raises(RegistryError, match=problem):
        load_registry(path)


@pytest.mark.e2e
def test_a_headerless_semicolon_csv_synthesizes_with_the_declared_types(tmp_path):
    project = make_project(tmp_path, rows=ROWS, report=None)
    with duckdb.connect(str(project.warehouse)) as con:
        names = [r[0] for r in con.execute("DESCRIBE main.example").fetchall()]
        con.execute(f"COPY main.example TO '{tmp_path / 'example.csv'}' "
                    "(FORMAT csv, HEADER false, DELIMITER ';', NULLSTR 'NULL')")
        con.execute("DROP TABLE main.example")
    use_source(project, {"csv": "example.csv", "header": False, "delimiter": ";",
                         "null": ["NULL"], "columns": names})
    result = run_all(project.defs_fn())
    assert result.success
    spec = load_registry(project.datasets)["example"]
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        synthetic = con.execute("DESCRIBE synthetic.example").fetchall()
    assert [(r[0], r[1]) for r in synthetic] == [(c, s.sql_type) for c, s in spec.columns.items()]
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["schema"] and checks["domain"]
