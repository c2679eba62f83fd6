"""Bad input gets a clear error naming the dataset and the problem, spends nothing, and leaves
earlier outputs untouched. What may refuse a source is its schema (public); what its rows hold
never fails a run: values a column cannot represent take its fallback code, an empty source runs
on noise, and what the rows did is told only in the owner-only private log."""

import duckdb
import dagster as dg
import pytest
import yaml

from dp_synth_assets.core.config import RegistryError, load_registry
from dp_synth_assets.definitions import build_definitions
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import example_entry, make_project


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project with one successful run: the earlier outputs bad runs must not touch."""
    project = make_project(tmp_path_factory.mktemp("bad_input"), rows=1500)
    defs = project.defs_fn()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    con = duckdb.connect(str(project.warehouse))
    con.execute("CREATE TABLE main.empty_example AS SELECT * FROM main.example LIMIT 0")
    con.execute("CREATE TABLE main.text_example AS SELECT * REPLACE "
                "(CASE WHEN age = 30 THEN 'thirty' ELSE CAST(age AS VARCHAR) END AS age) "
                "FROM main.example")
    con.execute("CREATE TABLE main.renamed_example AS SELECT * RENAME (sex AS gender) FROM main.example")
    con.close()
    return project


def run_with(project, **overrides):
    """Materialize the pipeline with a modified example entry; return the public failure
    message."""
    project.datasets.write_text(yaml.safe_dump({"datasets": {"example": example_entry(**overrides)}}))
    defs = build_definitions(project.datasets, project.warehouse, project.ledger, project.public)
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    return failure.event_specific_data.error.message


def outputs(project) -> dict:
    return {p: p.read_bytes() for p in (project.public / "example").rglob("*") if p.is_file()}


def charged(ledger: PrivacyLedger) -> float:
    """The rho of every charge the ledger holds (all datasets and privacy units)."""
    return sum(e["rho"] for e in ledger.events() if e["kind"] == "charge")


@pytest.mark.parametrize("overrides,public,private", [
    # schema problems (spec and schema only) are public, in the package's words, not DuckDB's
    ({"source": {"table": "main.no_such_table"}}, "no_such_table", "Catalog Error"),
    ({"source": {"table": "main.renamed_example"}}, "'sex'", "'sex'"),
    ({"source": {"parquet": "missing/file.parquet"}}, "missing/file.parquet", "IO Error"),
])
def test_bad_source_fails_naming_dataset_and_problem_and_spends_nothing(project, overrides,
                                                                        public, private):
    before_outputs = outputs(project)
    ledger = PrivacyLedger(project.ledger)
    spent = charged(ledger)
    log = project.warehouse.parent / "private" / "example" / "private.log"
    logged = log.read_text() if log.exists() else ""
    message = run_with(project, **overrides)
    assert "'example'" in message and public in message, message
    assert str(log) in message and "'preprocessed'" in message, message
    entry = log.read_text()[len(logged):]
    assert private in entry and "stage 'preprocessed'" in entry, entry
    if private != public:
        assert private not in message, message
    assert "Error:" not in message, message
    assert log.stat().st_mode & 0o777 == 0o600
    # every charge of the ledger, whatever unit the changed source maps to
    assert charged(ledger) == spent
    assert ledger.summary("example").reserved_rho == 0
    assert outputs(project) == before_outputs


def write_registry(tmp_path, entry) -> str:
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": {"example": entry}}))
    return str(path)


@pytest.mark.parametrize("change,expected", [
    ({"privacy": {"epsilon": 0, "delta": 1e-9, "limit": {"epsilon": 4, "delta": 1e-8}}}, "privacy.epsilon"),
    ({"privacy": {"epsilon": -1, "delta": 1e-9, "limit": {"epsilon": 4, "delta": 1e-8}}}, "privacy.epsilon"),
    ({"privacy": {"epsilon": float("nan"), "delta": 1e-9, "limit": {"epsilon": 4, "delta": 1e-8}}}, "privacy.epsilon"),
    ({"privacy": {"epsilon": 5, "delta": 1e-9, "limit": {"epsilon": 4, "delta": 1e-8}}}, "above the dataset's limit"),
    ({"privacy": {"epsilon": 1, "delta": 0, "limit": {"epsilon": 4, "delta": 1e-8}}}, "privacy.delta"),
    ({"privacy": {"epsilon": 1, "delta": 1.5, "limit": {"epsilon": 4, "delta": 1e-8}}}, "privacy.delta"),
    ({"privacy": {"epsilon": 1, "delta": 1e-9, "limit": {"epsilon": 4, "delta": 1}}}, "privacy.limit.delta"),
    ({"epsilon": 1.0}, "'epsilon'"),                          # unknown key
    ({"rows": "many"}, "'rows'"),                              # wrong kind
    ({"method": "magic"}, "'method'"),
    ({"columns": {"age": {"kind": "integer", "binning": "privtree", "bins": 10},
                  "sex": {"kind": "categorical", "categories": ["F"]}}}, "columns.age"),
    ({"columns": {"age": {"kind": "integer", "categories": [1, 2]},
                  "sex": {"kind": "categorical", "rare": "sometimes"}}}, "columns.sex.rare"),
    ({"columns": {"age": {"kind": "number", "bounds": [0, 1]}, "sex": {"kind": "boolean"}}},
     "columns.age.kind"),
    ({"schedule": "every monday"}, "'schedule'"),
    ({"method": "mst", "selection": {"one_way_share": 0.7}}, "one_way_share"),  # + mst's 1/3
])
def test_malformed_registry_fails_at_load_naming_dataset_and_key(tmp_path, change, expected):
    path = write_registry(tmp_path, {**example_entry(), **change})
    with pytest.raises(RegistryError) as err:
        build_definitions(path, tmp_path / "w.duckdb", tmp_path / "l.sqlite", tmp_path / "p")
    assert "dataset 'example'" in str(err.value) and expected in str(err.value), str(err.value)
    assert not (tmp_path / "l.sqlite").exists()


def test_registry_that_is_not_yaml_or_has_no_datasets_is_refused(tmp_path):
    path = tmp_path / "datasets.yaml"
    path.write_text("datasets: [unclosed")
    with pytest.raises(RegistryError, match="not valid YAML"):
        load_registry(path)
    path.write_text("tables: {}")
    with pytest.raises(RegistryError, match="datasets"):
        load_registry(path)


@pytest.mark.parametrize("first_line", [
    "Zyzzogeton-Republic,123456.78,7",      # read as names, none of them declared
    "Zyzzogeton-Republic,Zyzzogeton-Republic,123456.78",  # not even usable as names
])
def test_a_csv_read_with_a_header_it_lacks_publishes_no_row(project, tmp_path, first_line):
    """`header: true` (the default) on a file whose first line is data: the line is a row, so
    neither the source's "column names" nor the line may reach the public failure; the private
    log has them."""
    path = tmp_path / "rows.csv"
    path.write_text(first_line + "\nOther,1.5,8\n")
    log = project.warehouse.parent / "private" / "example" / "private.log"
    logged = log.read_text() if log.exists() else ""
    message = run_with(project, source={"csv": str(path)})
    assert "'example'" in message and str(log) in message, message
    assert "Zyzzogeton" not in message and "123456" not in message, message
    assert "Zyzzogeton-Republic" in log.read_text()[len(logged):]


@pytest.mark.parametrize("what, table, column_overrides, logged", [
    ("text in an integer column that is not nullable", "main.text_example", {},
     "'age': 1 values that do not cast to DOUBLE took the fallback code"),
    ("N/A in a nullable float column", "main.na_example", {},
     "'income': 1 values that do not cast to DOUBLE took NULL"),
    ("a NULL in a column that is not nullable", "main.null_example", {},
     "'sex': 1 NULLs (or `missing` markers, NaN) took the fallback code"),
    ("a value outside categories declared exhaustive", "main.outside_example",
     {"race": {"kind": "categorical", "other": False, "fallback": "Other",
               "categories": ["White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo",
                              "Other"]}},
     "'race': 1 values outside the exhaustive `categories` took the fallback code"),
    ("an empty source", "main.empty_example", {}, "the source has 0 rows"),
])
def test_no_row_decides_whether_a_run_succeeds(project, what, table, column_overrides, logged):
    """One row a column cannot represent (or no row at all) does not fail the run: the value
    takes the column's fallback code (or NULL), the run spends its budget and publishes as any
    run, and only the owner's private log says what the rows did. Before, each case failed the
    run, a certain one-row distinguisher."""
    con = duckdb.connect(str(project.warehouse))
    for name, change in (("na_example", "CAST(income AS VARCHAR)"), ):
        con.execute(f"CREATE OR REPLACE TABLE main.{name} AS SELECT * REPLACE "
                    f"(CASE WHEN rowid = 3 THEN 'N/A' ELSE {change} END AS income) "
                    "FROM main.example")
    con.execute("CREATE OR REPLACE TABLE main.null_example AS SELECT * REPLACE "
                "(CASE WHEN rowid = 3 THEN NULL ELSE sex END AS sex) FROM main.example")
    con.execute("CREATE OR REPLACE TABLE main.outside_example AS SELECT * REPLACE "
                "(CASE WHEN rowid = 3 THEN 'Martian' ELSE race END AS race) FROM main.example")
    ages = con.execute("SELECT count(*) FROM main.text_example WHERE age = 'thirty'").fetchone()[0]
    con.close()
    if table == "main.text_example":
        logged = logged.replace(": 1 values", f": {ages} values")
    columns = {**example_entry()["columns"], **column_overrides}
    project.datasets.write_text(yaml.safe_dump({"datasets": {"example": example_entry(
        source={"table": table}, columns=columns, report=None)}}))  # every row is trained on
    ledger = PrivacyLedger(project.ledger)
    spent = charged(ledger)
    log = project.warehouse.parent / "private" / "example" / "private.log"
    before = log.read_text() if log.exists() else ""
    defs = build_definitions(project.datasets, project.warehouse, project.ledger, project.public)
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success, what
    assert charged(ledger) > spent, what
    entry = log.read_text()[len(before):]
    assert logged in entry and "stage 'preprocessed'" in entry, entry
    assert (project.public / "example" / "synthetic.parquet").is_file()
