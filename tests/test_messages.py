"""Messages that name their cause and their fix (issue 32, item 6): each case below once failed
with a message that blamed something else, or with another library's own error. Each is now
refused when the definitions load (or handled), naming the entry, the key or column, the bad
value when it is public (the spec, the schema) and what to write instead, spending nothing and
quoting no value of the data."""

import dagster as dg
import duckdb
import pytest
import yaml

from dp_synth_assets.core.config import RegistryError
from dp_synth_assets.definitions import build_definitions
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import example_entry, make_project


def load_failure(tmp_path, text: str) -> str:
    """The RegistryError of loading the definitions of a datasets.yaml holding `text`."""
    path = tmp_path / "datasets.yaml"
    path.write_text(text)
    with pytest.raises(RegistryError) as caught:
        build_definitions(path, tmp_path / "w.duckdb", tmp_path / "l.sqlite", tmp_path / "p")
    assert not (tmp_path / "l.sqlite").exists()  # refused before the ledger was opened
    return str(caught.value)


def registry(entry: dict) -> str:
    return yaml.safe_dump({"datasets": {"example": entry}}, sort_keys=False)


# ---------------------------------------------------------------- bounds whose span is no float


def test_bounds_whose_span_overflows_a_float_are_refused_at_load_naming_the_column():
    """±1e308 are finite, but high - low is not: the density grid's arithmetic overflowed
    after the run had reserved its budget, and the failure blamed the source's values."""
    import tempfile
    from pathlib import Path

    columns = dict(example_entry()["columns"])
    columns["income"] = {"kind": "float", "bounds": [-1e308, 1e308], "nullable": True}
    with tempfile.TemporaryDirectory() as folder:
        message = load_failure(Path(folder), registry(example_entry(columns=columns)))
    assert "dataset 'example', key 'columns.income'" in message, message
    assert "[-1e+308, 1e+308]" in message and "high - low" in message, message
    assert "at most 1e+300" in message, message  # the limit, said


def test_bounds_at_the_limit_load_and_their_grid_and_bins_are_finite(tmp_path):
    """The limit the message states is one the bins' arithmetic meets: bounds whose span is
    the limit load, and their density grid and uniform bins are finite (a span near the
    largest float, 1.8e308, overflowed the grid's cell count)."""
    import math

    import numpy as np

    from dp_synth_assets.core.config import MAX_BOUNDS_SPAN, load_registry
    from dp_synth_assets.core.preprocess import density_grid, uniform_bin_edges

    half = MAX_BOUNDS_SPAN / 2
    columns = dict(example_entry()["columns"])
    columns["income"] = {"kind": "float", "bounds": [-half, half], "bins": 4096,
                         "nullable": True}
    (tmp_path / "datasets.yaml").write_text(registry(example_entry(columns=columns)))
    spec = load_registry(tmp_path / "datasets.yaml")["example"].columns["income"]
    low, high = spec.numeric_bounds()
    start, width, cells = density_grid(low, high, False)
    assert all(map(math.isfinite, (start, width))) and 1 <= cells <= 1024
    assert np.isfinite(uniform_bin_edges(spec, low, high)).all()


# ------------------------------------------------------------------ keys YAML reads as non-text


def entry_with_column_key(key: str) -> str:
    """A datasets.yaml whose second column's key is written `key` (unquoted)."""
    return f"""datasets:
  example:
    source: {{table: main.example}}
    columns:
      age: {{kind: integer, bounds: [17, 90]}}
      {key}: {{kind: boolean}}
    privacy: {{epsilon: 1.0, delta: 1.0e-9, limit: {{epsilon: 10.0, delta: 1.0e-8}}}}
"""


@pytest.mark.parametrize("key,read_as", [
    ("true", "a boolean"), ("yes", "a boolean"), ("off", "a boolean"), ("No", "a boolean"),
    ("1", "a number"), ("2.5", "a number"), ("null", "null"), ("~", "null"),
])
def test_a_column_key_yaml_reads_as_no_name_is_refused_saying_to_quote_it(tmp_path, key, read_as):
    """`true:` was refused with pydantic's "Input should be a valid string"; the message now
    names the line, the key as written, what YAML read it as and the quoted spelling."""
    message = load_failure(tmp_path, entry_with_column_key(key))
    assert f"the key `{key}` on line 6 is read as {read_as}" in message, message
    assert f'quote it, `"{key}":`' in message, message


def test_a_quoted_key_names_the_column(tmp_path):
    (tmp_path / "datasets.yaml").write_text(entry_with_column_key('"true"'))
    from dp_synth_assets.core.config import load_registry

    assert list(load_registry(tmp_path / "datasets.yaml")["example"].columns) == ["age", "true"]


def test_a_boolean_column_key_in_a_components_defs_yaml_says_to_quote_it(tmp_path):
    """Dagster reads the component's defs.yaml and validates each entry with the registry's
    model: the same rule names the entry's key there."""
    from tests.test_component import customers_entry, dg_project, load_failure as failure, \
        write_instance

    entry = customers_entry()
    entry["columns"] = {**entry["columns"], True: {"kind": "boolean"}}
    sandbox = dg_project(tmp_path)
    folder = write_instance(sandbox, {"warehouse": "w.duckdb", "ledger": "l.sqlite",
                                      "public_dir": "public", "datasets": {"customers": entry}})
    assert "\n        true:" in (folder / "defs.yaml").read_text()  # unquoted, as users write it
    text = failure(sandbox)
    assert "attributes.datasets.customers.columns" in text, text
    assert "column key True is read as a boolean" in text and '`"true":`' in text, text


def test_a_dataset_name_yaml_reads_as_a_boolean_is_refused_in_a_components_defs_yaml(tmp_path):
    from tests.test_component import customers_entry, dg_project, load_failure as failure, \
        write_instance

    sandbox = dg_project(tmp_path)
    write_instance(sandbox, {"warehouse": "w.duckdb", "ledger": "l.sqlite",
                             "public_dir": "public", "datasets": {False: customers_entry()}})
    text = failure(sandbox)
    assert "dataset key False is read as a boolean" in text and '`"no":`' in text, text


# ------------------------------------------------------------- names that differ only in case


def test_declared_columns_that_differ_only_in_case_are_refused_at_load(tmp_path):
    columns = {"A": {"kind": "integer", "bounds": [0, 4]}, "a": {"kind": "boolean"}}
    message = load_failure(tmp_path, registry(example_entry(columns=columns, report=None)))
    assert "dataset 'example', key 'columns'" in message, message
    assert "'A' and 'a' differ only in case" in message and "rename one" in message, message
    # the CSV's own names, when declared, too
    source = {"csv": "people.csv", "columns": ["A", "a", "age"]}
    entry = example_entry(source=source, columns={"age": {"kind": "integer", "bounds": [0, 9]},
                                                  "a": {"kind": "boolean"}}, report=None)
    message = load_failure(tmp_path, registry(entry))
    assert "source.columns" in message and "'A' and 'a'" in message, message
    # non-ASCII letters are distinct identifiers to DuckDB: both load
    columns = {"Ä": {"kind": "integer", "bounds": [0, 4]}, "ä": {"kind": "boolean"}}
    path = tmp_path / "datasets.yaml"
    path.write_text(registry(example_entry(columns=columns, report=None)))
    build_definitions(path, tmp_path / "w.duckdb", tmp_path / "l.sqlite", tmp_path / "p")


CASE_COLUMNS = {"a": {"kind": "integer", "bounds": [0, 2]},
                "b": {"kind": "categorical", "categories": ["x0", "x1"]}}


def materialize_preprocessed(project):
    defs = project.defs_fn()
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
                          selection=[dg.AssetKey(["example", "preprocessed"])])


@pytest.mark.e2e
def test_a_csv_header_with_names_that_differ_only_in_case_says_so_spending_nothing(tmp_path):
    """A header `A,a,b`: DuckDB could not bind the file's columns, and the run said "no such
    table or file". The refusal names the cause and the fix, quotes only declared names (the
    line is a row of data when the file has no header), and spends nothing; the fix it gives
    (`source.columns`) runs."""
    from tests.helpers import registry_project

    (tmp_path / "people.csv").write_text(
        "A,a,b\n" + "".join(f"{i % 5},{i % 3},x{i % 2}\n" for i in range(300)))
    entry = example_entry(source={"csv": "people.csv"}, columns=CASE_COLUMNS, report=None)
    project = registry_project(tmp_path, entry)
    result = materialize_preprocessed(project)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert "differ only in case (among them the declared 'a')" in message, message
    assert "no such table" not in message and "'A'" not in message, message
    assert "`source.columns`" in message, message
    ledger = PrivacyLedger(project.ledger)
    assert not [e for e in ledger.events() if e["kind"] == "charge"]
    log = (tmp_path / "private" / "example" / "private.log").read_text()
    assert "[['A', 'a']]" in log  # the owner reads which names
    # the fix the message gives
    entry["source"] = {"csv": "people.csv", "columns": ["A_upper", "a", "b"]}
    project = registry_project(tmp_path, entry)
    assert materialize_preprocessed(project).success


# ------------------------------------------------------------------------------ a bad cron


@pytest.mark.parametrize("cron", ["61 * * * *", "0 0 30 2 *", "0 0 * * 8"])
@pytest.mark.parametrize("source", [{"table": "main.example"},
                                    {"asset": "up/stream", "table": "main.example",
                                     "asset_elsewhere": True}])
def test_a_cron_dagster_cannot_run_is_refused_naming_the_entry_key_and_value(tmp_path, cron,
                                                                            source):
    """Five fields, but not a schedule: Dagster's own definition error (or a check error, for a
    source asset's cron condition) named neither the file nor the fix."""
    message = load_failure(tmp_path, registry(example_entry(schedule=cron, source=source)))
    assert f"dataset 'example' in {tmp_path / 'datasets.yaml'}: `schedule` '{cron}'" in message
    assert "e.g. \"0 3 * * 1\"" in message and "remove `schedule`" in message, message


def test_a_bad_cron_in_a_components_defs_yaml_names_its_entry(tmp_path):
    from tests.test_component import customers_entry, dg_project, load_failure as failure, \
        write_instance

    sandbox = dg_project(tmp_path)
    folder = write_instance(sandbox, {
        "warehouse": "w.duckdb", "ledger": "l.sqlite", "public_dir": "public",
        "datasets": {"customers": customers_entry(schedule="61 * * * *")}})
    text = failure(sandbox)
    assert (f"`attributes.datasets.customers` in {folder / 'defs.yaml'}: `schedule` "
            "'61 * * * *' is not a cron expression") in text, text


# ------------------------------------------------------- the notebook API on a read-only file


def test_fit_on_a_read_only_connection_works_and_writes_nothing_to_it(tmp_path):
    """`fit("t", connection=duckdb.connect(path, read_only=True))` raised DuckDB's
    CatalogException (an in-memory database cannot be attached read-only) after the ledger had
    reserved. The working objects now live in an in-memory database attached read-write (and
    a temporary table), so the fit spends its run budget and the file is left as it was."""
    import hashlib
    import math

    from dp_synth_assets.api import Synthesizer
    from dp_synth_assets.core.budget import DatasetBudget
    from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example

    path = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(path)) as con:
        con.register("rows", generate_example(1500, seed=2))
        con.execute("CREATE TABLE people AS SELECT * FROM rows")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    # `race` is discovered (DP thresholding through a temporary table of keys)
    columns = {"sex": EXAMPLE_COLUMNS["sex"], "race": {"kind": "categorical"},
               "age": EXAMPLE_COLUMNS["age"], "newsletter": EXAMPLE_COLUMNS["newsletter"]}
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, generator="gum", seed=1,
                        ledger=tmp_path / "ledger.sqlite", dataset="people")
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = synth.fit("people", connection=con).sample(50)
        assert out.column_names == list(columns) and out.num_rows == 50
        assert con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name LIKE "
                           "'dp_synth%'").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM people").fetchone()[0] == 1500  # still usable
    finally:
        con.close()
    assert math.isclose(synth.report.rho_spent, DatasetBudget.of(synth.spec).run_rho,
                        rel_tol=1e-9)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
