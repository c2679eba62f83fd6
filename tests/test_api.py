"""The notebook API (dp_synth_assets.api): three lines from a table to a synthetic one, the same
spend and the same synthetic table as the pipeline, the ledger's rules, no Dagster imported."""

import math
import re
import subprocess
import sys

import dagster as dg
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dp_synth_assets.api import BudgetError, SpecError, Synthesizer
from dp_synth_assets.core import generate
from dp_synth_assets.core.budget import DatasetBudget
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example
from dp_synth_assets.core.privacy import epsilon_from_rho
from dp_synth_assets.infra.store import FolderStore
from dp_synth_assets.resources.ledger import BudgetExceeded, PrivacyLedger
from tests.helpers import REPO, make_project

FAST = {"iterations": 200}
# the Arrow type of each declared SQL type, as DuckDB returns the synthetic table
ARROW = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(),
         "VARCHAR": pa.string(), "DATE": pa.date32(), "BOOLEAN": pa.bool_(),
         "TIMESTAMP": pa.timestamp("us")}


@pytest.fixture(scope="module")
def fitted():
    synth = Synthesizer(columns=EXAMPLE_COLUMNS, epsilon=1.0, delta=1e-9, method="absyn",
                        generator="auto", model=FAST, seed=3)
    synth.fit(generate_example(3000, seed=11))
    return synth


def test_three_lines_on_the_bundled_example_give_the_declared_names_order_and_types(fitted):
    table = fitted.sample(2000)
    assert isinstance(table, pa.Table) and table.num_rows == 2000
    assert table.column_names == list(EXAMPLE_COLUMNS)
    for name, column in fitted.spec.columns.items():
        assert table.schema.field(name).type == ARROW[column.sql_type], name
    frame = table.to_pandas()
    declared = set(EXAMPLE_COLUMNS["education"]["categories"])
    assert set(frame["education"]) <= declared | {"other"}
    assert frame["age"].between(17, 90).all() and frame["hours_per_week"].between(1, 99).all()
    assert frame["sex"].notna().all() and frame["country"].isna().any()  # nullable only there


def test_sample_without_n_draws_the_noisy_row_count_and_a_seed_repeats_it(fitted):
    table = fitted.sample()
    assert table.num_rows == round(fitted.report.noisy_total)
    assert fitted.sample(500, seed=9).equals(fitted.sample(500, seed=9))
    assert not fitted.sample(500, seed=9).equals(fitted.sample(500, seed=10))


def test_the_report_spends_the_pipelines_run_budget(fitted):
    report = fitted.report
    budget = DatasetBudget.of(fitted.spec)
    assert math.isclose(report.rho_spent, budget.run_rho, rel_tol=1e-9)
    # the run's budget is the declared (epsilon 1, delta 1e-9), converted to rho independently
    assert math.isclose(epsilon_from_rho(report.rho, 1e-9), 1.0, rel_tol=1e-6)
    # every column declares its domain: preprocessing measures only the density inside wide
    # numeric bins (no delta_extra)
    assert report.rho_by_stage.keys() == {"preprocessed", "selection", "measurements"}
    for stage, rho in report.rho_by_stage.items():
        assert math.isclose(rho, budget.stage_rho(stage), rel_tol=1e-9), stage
    assert report.delta_extra_spent == 0
    assert math.isclose(report.epsilon_spent, 1.0, rel_tol=1e-6)
    assert math.isclose(report.epsilon_spent, epsilon_from_rho(report.rho_spent, 1e-9))
    for m in report.measurements:  # each noise scale is the one its rho calls for
        assert math.isclose(m["sigma"], math.sqrt(1 / (2 * m["rho"])), rel_tol=1e-12)
    assert {m["clique"] for m in report.measurements if len(m["clique"]) > 1} <= set(report.selected)
    assert report.generator in generate.ENGINES and report.generator_reason
    assert report.to_dict()["rho_spent"] == report.rho_spent and "spent rho" in str(report)


def test_a_column_to_discover_spends_the_preprocessing_share_and_the_extra_delta():
    columns = {"sex": {"kind": "categorical"}, "age": {"kind": "integer", "bounds": [17, 90]}}
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, generator="gum", seed=1)
    report = synth.fit(generate_example(1500, seed=3)).report
    budget = DatasetBudget.of(synth.spec)
    assert budget.preprocess > 0 and budget.run_delta_extra > 0
    assert math.isclose(report.rho_spent, budget.run_rho, rel_tol=1e-9)
    # the share follows the noisy row count preprocessing draws first (`preprocess_share`)
    split = budget.with_rows(synth.plan.noisy_rows)
    assert math.isclose(report.rho_by_stage["preprocessed"], split.preprocess, rel_tol=1e-9)
    assert 0 < report.delta_extra_spent <= budget.run_delta_extra
    # (epsilon, delta) with rho computed at the delta left after the thresholding's share
    assert math.isclose(report.epsilon_spent, 1.0, rel_tol=1e-6)
    assert set(synth.plan["sex"].categories) == {"Female", "Male"}


def test_three_lines_on_a_pandas_frame_read_only_the_declared_columns():
    frame = generate_example(2000, seed=5).to_pandas()
    columns = {name: EXAMPLE_COLUMNS[name] for name in ("age", "sex", "education", "income")}
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, model=FAST, seed=1)
    table = synth.fit(frame).sample(1000)
    out = table.to_pandas()
    assert list(out.columns) == list(columns) and len(out) == 1000
    assert out["income"].dtype == np.float64 and out["income"].isna().any()


def test_a_duckdb_relation_a_table_and_files_are_sources_too(tmp_path):
    table = generate_example(1500, seed=2)
    columns = {name: EXAMPLE_COLUMNS[name] for name in ("sex", "race", "newsletter")}
    con = duckdb.connect()
    con.register("rows", table)
    con.execute("CREATE TABLE people AS SELECT * FROM rows")
    pq.write_table(table, tmp_path / "people.parquet")
    con.execute(f"COPY people TO '{tmp_path / 'people.csv'}' (HEADER)")
    sources = [(con.sql("SELECT * FROM people"), {}),
               ("people", {"connection": con}), (str(tmp_path / "people.parquet"), {}),
               (tmp_path / "people.csv", {})]
    try:
        import polars
        sources.append((polars.from_arrow(table), {}))
    except ImportError:  # polars is optional
        pass
    for source, options in sources:
        synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, generator="gum", seed=1)
        out = synth.fit(source, **options).sample(100)
        assert out.column_names == list(columns) and out.num_rows == 100, source
    # the working objects lived in a database of their own, detached after the fit
    assert con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name LIKE "
                       "'dp_synth%'").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchone()[0] == 1  # people


def test_the_stages_run_one_by_one_and_a_stage_cannot_spend_twice():
    columns = {name: EXAMPLE_COLUMNS[name] for name in ("age", "sex", "education")}
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, generator="gum", seed=1)
    with synth.reading(generate_example(1500, seed=4)) as run:
        plan = run.preprocess()
        oracle = run.marginals(plan)
        chosen = run.select(plan, oracle)
        found = run.measure(plan, chosen, oracle)
        assert plan.columns == list(columns) and found.noisy_total > 0
        with pytest.raises(BudgetError, match="above the run's rho"):
            run.measure(plan, chosen, oracle)
    synth.fit_model(plan, found)
    assert synth.sample(50).num_rows == 50


@pytest.mark.parametrize("arguments, named", [
    ({"columns": {"age": {"kind": "integr"}, "sex": {"kind": "boolean"}}}, "'columns', key 'age"),
    ({"columns": {"age": {"kind": "integer", "bounds": [1, 9], "colour": 1},
                  "sex": {"kind": "boolean"}}}, "'columns', key 'age.colour'"),
    ({"columns": {"age": {"kind": "integer"}}}, "'columns'"),  # at least two columns
    ({"epsilon": -1.0}, "'epsilon'"),
    ({"delta": 2.0}, "'delta'"),
    ({"method": "best"}, "'method'"),
    ({"model": {"iterations": 0}}, "'model', key 'iterations'"),
])
def test_a_bad_argument_is_refused_with_its_name(arguments, named):
    kwargs = {"columns": {"age": EXAMPLE_COLUMNS["age"], "sex": EXAMPLE_COLUMNS["sex"]},
              "epsilon": 1.0, **arguments}
    with pytest.raises(SpecError, match=re.escape("argument " + named)):
        Synthesizer(**kwargs)


def test_a_source_without_a_declared_column_is_refused_and_spends_nothing():
    synth = Synthesizer(columns={"age": EXAMPLE_COLUMNS["age"], "salary": {"kind": "float"}},
                        epsilon=1.0)
    with pytest.raises(ValueError, match="salary"):
        synth.fit(generate_example(200, seed=1))


def test_with_a_ledger_a_fit_beyond_the_limit_is_refused_before_reading(tmp_path):
    path = tmp_path / "ledger.sqlite"
    columns = {name: EXAMPLE_COLUMNS[name] for name in ("sex", "race", "newsletter")}
    # limit epsilon 1.2: one epsilon-1 run fits, a second cannot (two compose to about 1.5)
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, limit=1.2, generator="gum",
                        ledger=path, dataset="people")
    synth.fit(generate_example(1500, seed=2))
    ledger = PrivacyLedger(path)
    events = ledger.events("people")
    assert math.isclose(ledger.summary("people").spent_rho, synth.report.rho_spent, rel_tol=1e-12)
    assert [e["kind"] for e in events][0] == "reserve" and events[-1]["kind"] == "release"
    assert {e["stage"] for e in events if e["kind"] == "charge"} == {"selection", "measurements"}
    # the source of the refused fit does not exist: reading it would raise another error
    with pytest.raises(BudgetExceeded, match="people") as refused:
        synth.fit(tmp_path / "missing.parquet")
    # the notebook user has no datasets.yaml: the refusal names what they can change
    assert "the Synthesizer's arguments (its `limit`)" in str(refused.value)
    assert "datasets.yaml" not in str(refused.value)
    assert ledger.events("people") == events
    assert ledger.summary("people").reserved_rho == 0


def test_importing_the_api_loads_no_dagster_great_expectations_or_jax():
    code = ("import sys, dp_synth_assets; dp_synth_assets.Synthesizer; "
            "print(sorted(({m.split('.')[0] for m in sys.modules} & "
            "{'dagster', 'great_expectations', 'jax', 'mbi'}) | "
            "{m for m in sys.modules if m.startswith('dp_synth_assets.resources')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("api_pipeline"), rows=2500, report=None)
    defs = project.defs_fn()
    stages = ["preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]
    result = dg.materialize(defs.assets, resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(),
                            selection=dg.AssetSelection.assets(
                                *(dg.AssetKey(["example", s]) for s in stages)).without_checks())
    assert result.success
    return project, defs


@pytest.mark.e2e
def test_fed_the_pipelines_measurements_and_seed_the_api_writes_its_synthetic_table(pipeline_run):
    project, defs = pipeline_run
    store = FolderStore(project.public / "example", "example")
    spec = load_registry(project.datasets)["example"]
    synth = Synthesizer.from_spec(spec)
    model = synth.fit_model(store.plan(), store.measurements())
    # the fit is deterministic: the same tables as the pipeline's model.npz
    saved = store.model()
    assert type(model) is type(saved)
    if isinstance(saved, generate.CliqueTree):
        assert all(np.array_equal(a, b) for a, b in zip(model.tables, saved.tables))
    table = synth.sample()  # rows: same and seed 7, as the pipeline
    written = pq.read_table(project.public / "example" / "synthetic.parquet")
    assert table.column_names == written.column_names
    assert written.cast(table.schema).equals(table)  # row for row
