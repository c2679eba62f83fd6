"""The Spark scan engine (infra/engines/spark.py): the private scans run as Spark SQL in one local
session (its JVM started once for the module), the translated constructs give DuckDB's values,
the exact aggregates equal DuckDB's on the same rows, the example synthesizes end to end with
`engine: spark` (notebook API and Dagster pipeline, change detection included: the change
signal computed in Spark) while no query returns more rows than an aggregate's cells, and a
Spark error that quotes a value stays out of the public failure and of the process's output."""

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dp_synth_assets.core import scans
from dp_synth_assets.infra.engines import spark as spark_engine
from dp_synth_assets.core.config import ColumnSpec, DatasetSpec
from dp_synth_assets.core.domain import boolean_value, is_null_condition, value_expression
from dp_synth_assets.core.marginals import MarginalStore, compute_marginals
from dp_synth_assets.core.preprocess import Task, exact_aggregates, prepare_encoded_view
from dp_synth_assets.core.sql import sql
from dp_synth_assets.example import generate_example
from tests.helpers import counted_cells, example_entry, record_fetches, registry_project

pytest.importorskip("pyspark", reason="pyspark is not installed (pyproject extra: spark)")

ROWS = 3000
TABLE = "lake.example"


def test_installing_the_spark_extra_leaves_great_expectations_importable_everywhere():
    """Great Expectations imports pyspark's Spark Connect module when pyspark is installed, and
    pyspark 4 exits the process (status 0) from that import when Spark Connect's own
    dependencies are missing and `__main__` has no file, as in `python -c` (how Dagster starts
    some step processes): the checks' step then died with SystemExit. The `spark` extra is
    `pyspark[connect]`, whose dependencies keep the import whole."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import great_expectations; print('imported')"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-2000:]


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """One local Spark session for the module (one core, one shuffle partition, no UI), the
    example's rows as a Parquet file and as the catalog table `lake.example` over it."""
    from pyspark.sql import SparkSession

    base = tmp_path_factory.mktemp("spark")
    session = (SparkSession.builder.master("local[1]").appName("dp-synth-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               # small one-shot queries: no adaptive re-planning, no whole-stage compilation,
               # the JVM's quick compiler only
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.sql.codegen.wholeStage", "false")
               .config("spark.driver.extraJavaOptions",
                       "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.warehouse.dir", str(base / "warehouse"))
               .getOrCreate())
    parquet = base / "example.parquet"
    pq.write_table(generate_example(ROWS), parquet)
    session.sql("CREATE DATABASE IF NOT EXISTS lake")
    session.sql(f"CREATE TABLE {TABLE} USING parquet LOCATION '{parquet}'")
    session.parquet_path = parquet
    try:
        yield session
    finally:
        session.stop()


def _duckdb_source() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.register("arrow_example", generate_example(ROWS))
    con.execute("CREATE TABLE main.example AS SELECT * FROM arrow_example")
    return con


def _spec(**overrides) -> DatasetSpec:
    return DatasetSpec.model_validate(example_entry(
        **{"source": {"table": TABLE}, "report": None, "engine": "spark", **overrides}))


def test_config_takes_spark_sessions_and_refuses_what_spark_cannot_read():
    """`engine: spark` takes a table or a Parquet path, a master with conf or a Spark Connect
    remote; not both, not a dsn, not the owner report (its holdout split is DuckDB's hash)."""
    spec = _spec(engine={"type": "spark", "master": "local[2]",
                         "conf": {"spark.sql.shuffle.partitions": "8"}})
    assert spec.engine.master == "local[2]" and spec.engine.conf
    assert _spec(source={"parquet": "data/*.parquet"}).engine.type == "spark"
    assert _spec(engine={"type": "spark", "remote": "sc://spark:15002"}).engine.remote
    for bad in ({"type": "spark", "master": "local", "remote": "sc://h:15002"},
                {"type": "spark", "dsn": "host=x"}, {"type": "postgres", "dsn": "host=x",
                                                      "master": "local"}):
        with pytest.raises(ValueError):
            _spec(engine=bad)
    with pytest.raises(ValueError, match="parquet"):
        _spec(source={"csv": "data.csv"})
    with pytest.raises(ValueError, match="report"):
        _spec(report={"holdout": 0.2})


def test_every_template_the_scans_run_translates_to_spark():
    """Each sql/ template of the private scans, filled as the code fills it, comes out in Spark
    SQL's spelling: no DuckDB-only function is left, lists are 1-based through element_at, the
    encoded view is a session's temporary view, and hash is refused."""
    cases = {
        "count_uncastable": sql("count_uncastable", column='"a"', is_null='"a" IS NULL',
                                sql_type="DOUBLE", alias="x"),
        "count_outside": sql("count_outside", column='"a"', is_null="false",
                             categories="['u', 'v']", alias="x"),
        "preprocess_counts": sql("preprocess_counts", keys_table="t",
                                 groupings="GROUPING(k0), GROUPING(k1)", sets="(k0), (k1)",
                                 label="k0", code="k1"),
        "fine_bucket": "SELECT " + sql("preprocess_fine_bucket", v="v", bucket="b", sub=4,
                                       outer=3, edges="[1.0, 2.0]"),
        "encode_categorical": "SELECT " + sql(
            "encode_categorical", column='"a"', is_null='"a" IS NULL', null_code=3,
            categories="['u']", rare="[]", rare_code="NULL", other_code=2),
        "encode_integer_bins": "SELECT " + sql(
            "encode_integer_bins", is_null="false", null_code="NULL",
            value=value_expression("a", "integer", "BIGINT"), low=0, high=9, bins=5, span=10,
            wide="HUGEINT"),
        "encode_days": "SELECT " + value_expression("a", "datetime", "DATE"),
        "encode_view": sql("encode_view", view='"w__encoded"', expressions="1 AS a",
                           source="read_parquet('/data/x/*.parquet')"),
        "count_marginals": sql("count_marginals", columns="c0, ", key="concat_ws(',', '0')",
                               renames='"a" AS c0', source="t", grouping_sets="(c0)"),
        "boolean_value": "SELECT " + boolean_value("a"),
    }
    out = {name: scans.translate(text, "spark") for name, text in cases.items()}
    assert "ARRAY_POSITION(" in out["preprocess_counts"]
    assert "TRY_ELEMENT_AT(" in out["fine_bucket"] and "]" not in out["fine_bucket"]
    assert "DECIMAL(38, 0)" in out["encode_integer_bins"] and " DIV " in out["encode_integer_bins"]
    assert "BROUND(" in out["encode_integer_bins"]
    assert "UNIX_DATE(" in out["encode_days"] and "ISFINITE" not in out["encode_days"]
    assert out["encode_view"].startswith("CREATE OR REPLACE TEMPORARY VIEW")
    assert "parquet.`/data/x/*.parquet`" in out["encode_view"]
    assert "TYPEOF(" in out["boolean_value"] and "'string%'" in out["boolean_value"]
    for text in out.values():
        assert "LIST_" not in text and "ROUND_EVEN" not in text and "INT128" not in text
        assert '"' not in text  # identifiers in backticks
    with pytest.raises(scans.Untranslatable):
        scans.translate("SELECT hash(a) FROM t", "spark")


def test_translated_constructs_give_duckdbs_values(spark):
    """The expressions whose spelling differs (rounding half to even, typeof on text, booleans
    from text and numbers, 1-based list indexing, days since 1970 of dates and timestamps,
    NaN as missing, exact integer bins) give the same values in Spark as in DuckDB."""
    rows = ("VALUES ('2.5', 1, 1.5, '2024-03-01', '2024-03-01 12:00:00', 'yes'), "
            "('3.5', 0, CAST('NaN' AS DOUBLE), '1969-12-31', '1960-01-01 06:00:00', 'F'), "
            "('x', 7, -2.0, 'bad', 'bad', ' 1 '), (NULL, NULL, NULL, NULL, NULL, NULL)")
    edges = "[0.0, 1.0, 3.0]"
    bucket = sql("preprocess_bucket", v="f", comparisons=" + ".join(
        f"CAST({e} <= f AS INTEGER)" for e in (0.0, 1.0, 3.0)))
    expressions = [
        value_expression("s", "integer", "BIGINT"),
        value_expression("d", "datetime", "DATE"),
        value_expression("t", "datetime", "TIMESTAMP"),
        boolean_value("b"), boolean_value("i"),
        is_null_condition("f", [], "float"),
        sql("preprocess_fine_bucket", v="f", bucket=bucket, sub=4, outer=3, edges=edges),
        sql("encode_integer_bins", is_null="false", null_code="NULL",
            value=value_expression("i", "integer", "BIGINT"), low=0, high=9, bins=5, span=10,
            wide="HUGEINT"),
        sql("encode_categorical", column='"b"', is_null='"b" IS NULL', null_code=9,
            categories="['yes', 'F']", rare="[]", rare_code="NULL", other_code=8),
    ]
    query = ("SELECT " + ", ".join(f"{e} AS e{i}" for i, e in enumerate(expressions))
             + f" FROM ({rows}) AS v(s, i, f, d, t, b)")
    duck = duckdb.connect(":memory:").execute(query).fetchall()
    engine = spark_engine.SparkEngine(duckdb.connect(":memory:"), spark)
    result = engine.fetchnumpy(query)
    got = list(zip(*(result[f"e{i}"] for i in range(len(expressions)))))
    assert len(got) == len(duck) == 4
    for ours, theirs in zip(got, duck):
        for a, b in zip(ours, theirs):
            if isinstance(b, float) and np.isnan(b):
                assert a is not None and np.isnan(a)
            elif isinstance(b, float):
                assert a == pytest.approx(b, rel=1e-12), (list(ours), list(theirs))
            else:
                assert a == b, repr((ours, theirs))


def test_exact_aggregates_equal_duckdbs(spark):
    """The preprocessing counts, the stored marginals and the on-demand cliques counted by
    Spark equal DuckDB's on the same rows, read from the catalog table or the Parquet path."""
    duck = _duckdb_source()
    spec = _spec()
    columns = {**spec.columns, "country": ColumnSpec(kind="categorical", nullable=True),
               "income": ColumnSpec(kind="float", nullable=True),
               "age": ColumnSpec(kind="integer")}
    tasks = [Task("country", "discover"), Task("race", "rare"), Task("income", "bounds"),
             Task("age", "bounds")]
    engine = spark_engine.SparkEngine(duckdb.connect(":memory:"), spark)
    ours = exact_aggregates(engine, TABLE, columns, tasks, {})
    local = exact_aggregates(duck, "main.example", columns, tasks, {})
    for t in tasks:
        if isinstance(local[t], dict):
            assert ours[t] == local[t], t
        else:
            np.testing.assert_array_equal(ours[t], local[t])
    assert sum(ours[Task("age", "bounds")]) == ROWS

    parquet = _spec(source={"parquet": str(spark.parquet_path)})
    duck_spec = DatasetSpec.model_validate(example_entry(source={"table": "main.example"},
                                                         report=None))
    plan = prepare_encoded_view(engine, parquet, "example", Path.cwd(), "work.encoded")
    plan_duck = prepare_encoded_view(duck, duck_spec, "example", Path.cwd(), "work.encoded")
    assert plan == plan_duck
    cliques = [("age",), ("sex", "race"), ("country", "income"),
               ("signup_date", "newsletter", "household_size"), ("occupation", "hours_per_week")]
    compute_marginals(engine, "work.encoded", "work.marginals", plan.columns, cliques[:2],
                      plan.domain)
    compute_marginals(duck, "work.encoded", "work.marginals", plan_duck.columns, cliques[:2],
                      plan_duck.domain)
    # another engine over the same store (a later pipeline stage's process) recreates the view
    later = spark_engine.SparkEngine(engine.store, spark)
    spark.sql("DROP VIEW IF EXISTS work__encoded")
    from_spark = MarginalStore(later, "work.encoded", "work.marginals", plan.columns,
                               plan.domain)(cliques)  # three of them counted on demand
    from_duck = MarginalStore(duck, "work.encoded", "work.marginals", plan_duck.columns,
                              plan_duck.domain)(cliques)
    for clique in cliques:
        np.testing.assert_array_equal(from_spark[clique], from_duck[clique])
        assert from_spark[clique].sum() == ROWS
    assert max(engine.fetched, later.fetched) <= max(from_spark[c].size for c in cliques)


def test_the_example_synthesizes_end_to_end_with_the_rows_left_in_spark(spark, monkeypatch):
    """`engine: spark` through the notebook API: every private scan runs in Spark and no query
    returns more rows than the cells of the marginals the method counts, a number set by the
    domain, not by the rows; the run's temporary view is dropped when it ends."""
    from dp_synth_assets.api import Synthesizer

    fetched = record_fetches(monkeypatch, spark_engine.SparkEngine, ("fetchnumpy",))
    synth = Synthesizer.from_spec(_spec())
    synth.fit(TABLE)
    rows = synth.sample(500, seed=1)
    assert rows.num_rows == 500 and rows.column_names == list(synth.spec.columns)
    assert 0.5 * ROWS < synth.noisy_total < 1.5 * ROWS
    domain = synth.plan.domain
    cells = counted_cells(synth.spec, domain)
    assert fetched and max(fetched) <= cells
    assert not [t for t in spark.catalog.listTables() if t.isTemporary
                and t.name.startswith("dp_synth_")]


def test_a_spark_error_quoting_a_value_stays_in_the_private_log(spark, tmp_path, capfd):
    """A source whose view casts strictly makes Spark's error quote the value: the stage's
    public failure is generic, the value is only in private/<dataset>/private.log, and neither
    pyspark nor the local JVM prints it on the process's output."""
    import dagster as dg

    from dp_synth_assets.core import stages
    from dp_synth_assets.core.budget import DatasetBudget
    from dp_synth_assets.source_access import source_connection
    from dp_synth_assets.private_log import private_errors, private_log_path
    from dp_synth_assets.resources.warehouse import WarehouseResource

    secret = "SECRET-AGE-9931"
    spark.sql("CREATE OR REPLACE VIEW lake.bad AS SELECT CAST(age_text AS INT) AS age_int, * "
              "FROM (SELECT CASE WHEN age = 40 THEN '" + secret + "' ELSE CAST(age AS STRING) "
              "END AS age_text, * FROM lake.example)")
    entry = example_entry(source={"table": "lake.bad"}, report=None, engine="spark")
    entry["columns"] = {**entry["columns"], "age_int": {"kind": "integer", "bounds": [17, 90]}}
    spec = DatasetSpec.model_validate(entry)
    warehouse = WarehouseResource(database=str(tmp_path / "warehouse.duckdb"),
                                  public_dir=str(tmp_path / "public"), base_dir=str(tmp_path))
    capfd.readouterr()
    with pytest.raises(dg.Failure) as failure:
        with private_errors(warehouse, "bad", "preprocessed", "run-1"):
            with source_connection(warehouse, spec, "bad") as engine:
                assert isinstance(engine, spark_engine.SparkEngine)
                stages.preprocess(engine, spec, "bad", tmp_path, "private.bad_encoded",
                                  DatasetBudget.of(spec), lambda *a, **k: None)
    public = failure.value.description
    assert secret not in public and "could not be scanned" in public
    log = private_log_path(warehouse, "bad").read_text()
    assert secret in log and "Spark" in log
    out, err = capfd.readouterr()
    assert secret not in out + err


def test_the_spark_content_summary_changes_with_any_value_and_not_with_the_order(spark):
    """The change signal computed in Spark is the same for the same rows in any order and
    differs when one value changes: a value moved to a NULL column of the same row (where a
    hash that skips NULLs would not see it), '' or 'null' for NULL, a double by one ulp, a
    timestamp by one microsecond."""
    engine = spark_engine.SparkEngine(duckdb.connect(":memory:"), spark)

    def summary(*rows):
        values = ", ".join(f"({i}, {a}, {b}, {x}, TIMESTAMP '2020-01-01 00:00:00.{t:06d}')"
                           for i, a, b, x, t in rows)
        return engine.content_summary(f"(SELECT * FROM (VALUES {values}) AS v(i, a, b, x, t))")

    rows = [(1, "'u'", "NULL", "0.1", 1), (2, "NULL", "'u'", "2.5", 2),
            (3, "'v'", "'w'", "1e300", 3)]
    first = summary(*rows)
    assert first.startswith("3:") and summary(*reversed(rows)) == first
    changed = [[(1, "NULL", "'u'", "0.1", 1)], [(1, "''", "NULL", "0.1", 1)],
               [(1, "'null'", "NULL", "0.1", 1)], [(1, "'u'", "NULL", "0.10000000000000002", 1)],
               [(1, "'u'", "NULL", "0.1", 2)]]
    for one in changed:
        assert summary(*one, *rows[1:]) != first, one


# ------------------------------------------------------------------------- the Dagster pipeline

BIG_ROWS = 20_000  # more rows than the pipeline's marginals have cells


def _pipeline_project(tmp_path, source: dict):
    """A datasets.yaml whose `example` reads `source` through `engine: spark` (no session
    settings: under dagster.materialize's in-process executor the stages run in this process,
    so the builder returns the module's active session), six columns (each kind, a quick fit),
    1000 rows out; and its Definitions."""
    kept = ("age", "sex", "race", "income", "signup_date", "newsletter")
    columns = {k: v for k, v in example_entry()["columns"].items() if k in kept}
    entry = example_entry(source=source, report=None, engine="spark", rows=1000, columns=columns)
    tmp_path.mkdir()
    project = registry_project(tmp_path, entry)
    project.defs = project.defs_fn()
    return project


def _observer(project, instance):
    """A function observing the project's `source` asset, returning its data version."""
    import dagster as dg
    from dagster._core.definitions.observe import observe

    defs = project.defs
    source = next(a for a in defs.assets
                  if getattr(a, "key", None) == dg.AssetKey(["example", "source"]))

    def version():
        result = observe([source], resources=defs.resources, instance=instance)
        assert result.success
        [event] = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
        return event.event_specific_data.asset_observation.data_version
    return version


def _materialize_all(project, instance):
    import dagster as dg

    from dp_synth_assets.checks.suites import CHECKS

    defs = project.defs
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=instance, raise_on_error=False)
    assert result.success
    assert sorted(e.check_name for e in result.get_asset_check_evaluations()) == sorted(CHECKS)
    assert (project.public / "example" / "synthetic.parquet").exists()
    materialized = {tuple(e.asset_key.path) for e in result.get_asset_materialization_events()}
    assert {("example", s) for s in ("preprocessed", "marginals", "selection", "measurements",
                                     "model", "synthetic")} <= materialized
    return result


def test_the_dagster_pipeline_runs_end_to_end_with_the_rows_left_in_spark(
        spark, tmp_path, monkeypatch):
    """`engine: spark` under dagster.materialize, the source a table of the session's catalog:
    the source observation (its change signal computed in Spark), every asset of the chain and
    every check succeed; no query returns more rows than the cells of the marginals the method
    counts, fewer than the source's rows (the Dagster process never holds the rows) and the
    warehouse holds no copy of the source; one changed value (same row count) gives the source
    a new version, an unchanged source keeps it. The same pipeline reads a Parquet path."""
    import dagster as dg

    from dp_synth_assets.artifacts import artifacts
    from dp_synth_assets.core.config import load_registry

    fetched = record_fetches(monkeypatch, spark_engine.SparkEngine)
    folder = tmp_path / "lake_big"
    folder.mkdir()
    rows = generate_example(BIG_ROWS)
    pq.write_table(rows, folder / "part-0.parquet")
    spark.sql(f"CREATE TABLE lake.big USING parquet LOCATION '{folder}'")

    project = _pipeline_project(tmp_path / "table", {"table": "lake.big"})
    instance = dg.DagsterInstance.ephemeral()
    version = _observer(project, instance)
    first = version()
    _materialize_all(project, instance)
    spec = load_registry(project.datasets)["example"]
    domain = artifacts(project.defs.resources["warehouse"], "example").plan().domain
    cells = counted_cells(spec, domain)
    assert fetched and max(fetched) <= cells < BIG_ROWS
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        tables = {t for t in con.execute("SELECT table_schema, table_name "
                                         "FROM information_schema.tables").fetchall()
                  if not t[1].startswith("dp_synth:")}  # the engine view statements
    assert tables == {("synthetic", "example"), ("private", "example_marginals")}

    assert version() == first  # nothing changed in Spark
    hours = rows.column("hours_per_week").to_pylist()
    hours[0] = (hours[0] or 0) + 1  # one value of one row: the row count stays
    pq.write_table(rows.set_column(rows.schema.get_field_index("hours_per_week"),
                                   "hours_per_week", pa.array(hours, rows.schema.field(
                                       "hours_per_week").type)), folder / "part-0.parquet")
    spark.sql("REFRESH TABLE lake.big")
    changed = version()
    assert changed != first
    assert version() == changed

    # a Parquet path read by Spark (its change signal: the files' stats): the stages that read
    # through the engine (the model and the synthetic table only read public measurements)
    parquet = _pipeline_project(tmp_path / "parquet", {"parquet": str(folder / "*.parquet")})
    instance = dg.DagsterInstance.ephemeral()
    assert _observer(parquet, instance)()
    private = [dg.AssetKey(["example", s]) for s in ("preprocessed", "marginals", "selection",
                                                     "measurements")]
    result = dg.materialize(parquet.defs.assets, selection=private,
                            resources=parquet.defs.resources, instance=instance,
                            raise_on_error=False)
    assert result.success and len(result.get_asset_materialization_events()) == 4


def test_parquet_at_a_uri_is_read_by_spark_and_its_version_follows_the_rows(spark, tmp_path):
    """A `parquet:` URI (object storage's `s3a://`, `abfss://`; here `file://`, which Spark
    reads the same way) is handed to Spark as written, never resolved or globbed here, and its
    change signal is Spark's content summary of the rows, not the files' stats: the same rows
    rewritten (new modification time) keep the version, one changed value gives a new one. The
    private stages' first one reads it through Spark."""
    import os

    import dagster as dg

    folder = tmp_path / "lake_uri"
    folder.mkdir()
    rows = generate_example(ROWS)
    path = folder / "part-0.parquet"
    pq.write_table(rows, path)
    project = _pipeline_project(tmp_path / "uri", {"parquet": f"file://{folder}/*.parquet"})
    instance = dg.DagsterInstance.ephemeral()
    version = _observer(project, instance)
    first = version()
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)  # the same rows in a new file
    os.utime(path, (1, 1))
    assert version() == first
    hours = rows.column("hours_per_week").to_pylist()
    hours[0] = (hours[0] or 0) + 1
    pq.write_table(rows.set_column(rows.schema.get_field_index("hours_per_week"),
                                   "hours_per_week", pa.array(hours, rows.schema.field(
                                       "hours_per_week").type)), path)
    assert version() != first
    result = dg.materialize(project.defs.assets, selection=[dg.AssetKey(["example", "preprocessed"])],
                            resources=project.defs.resources, instance=instance,
                            raise_on_error=False)
    assert result.success
    # the notebook API takes the URI as the source too
    from dp_synth_assets.api import Synthesizer

    with Synthesizer.from_spec(_spec()).reading(f"file://{folder}/*.parquet") as run:
        assert run.preprocess().domain
