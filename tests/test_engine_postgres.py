"""The PostgreSQL scan engine (infra/engines/postgres.py): the private scans run inside a throwaway
PostgreSQL server (Debian's binaries, loopback, a temporary data directory), their exact
aggregates equal DuckDB's on the same rows, TRY_CAST reads what DuckDB reads or NULL, the
example synthesizes end to end with `engine: postgres` (notebook API and Dagster pipeline,
change detection included) while no query returns more rows than an aggregate's cells, and an
error of PostgreSQL that quotes a value stays out of everything public."""

from pathlib import Path

import duckdb
import numpy as np
import pytest

from dp_synth_assets.core import scans
from dp_synth_assets.infra.engines import open_engine, postgres as postgres_engine
from dp_synth_assets.core.config import DatasetSpec
from dp_synth_assets.core.preprocess import Task, exact_aggregates, prepare_encoded_view
from dp_synth_assets.core.marginals import MarginalStore, compute_marginals
from dp_synth_assets.example import generate_example
from tests.helpers import (counted_cells, example_entry, ledger_rows, postgres_server,
                           record_fetches, registry_project)

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pyproject: psycopg)")

ROWS = 3000
BIG_ROWS = 20_000
TABLE = "public.example"
_TYPES = {"int64": "BIGINT", "int32": "INTEGER", "double": "DOUBLE PRECISION", "string": "TEXT",
          "large_string": "TEXT", "bool": "BOOLEAN", "date32[day]": "DATE"}


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of its own (`helpers.postgres_server`) holding the example's rows: the
    DSN. Not a database on the session's server: there, in one full run, the first aggregate
    scan of the freshly loaded table ran for over 17 minutes (cause not yet established)."""
    with postgres_server() as server:
        _load_example(server.dsn)
        yield server.dsn


def _load_example(dsn: str, name: str = TABLE, rows: int = ROWS) -> None:
    """The bundled example's rows as a PostgreSQL table of the matching column types."""
    table = generate_example(rows)
    columns = ", ".join(f'"{f.name}" {_TYPES[str(f.type)]}' for f in table.schema)
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute(f"CREATE TABLE {name} ({columns})")
        with con.cursor().copy(f"COPY {name} FROM STDIN") as copy:
            for row in zip(*(table.column(i).to_pylist() for i in range(table.num_columns))):
                copy.write_row(row)


def _duckdb_source() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.register("arrow_example", generate_example(ROWS))
    con.execute(f"CREATE TABLE {TABLE.replace('public.', 'main.')} AS SELECT * FROM arrow_example")
    return con


def _spec(dsn: str, **overrides) -> DatasetSpec:
    return DatasetSpec.model_validate(example_entry(
        source={"table": TABLE}, report=None, engine={"type": "postgres", "dsn": dsn},
        **overrides))


def test_every_template_the_scans_run_translates_to_postgres():
    """Each sql/ template of the private scans, filled as the code fills it, parses as DuckDB
    and comes out in PostgreSQL's spelling (no DuckDB-only function left)."""
    from dp_synth_assets.core.sql import sql

    cases = {
        "count_uncastable": sql("count_uncastable", column='"a"', is_null='"a" IS NULL',
                                sql_type="DOUBLE", alias="x"),
        "count_outside": sql("count_outside", column='"a"', is_null="false",
                             categories="['u', 'v']", alias="x"),
        "preprocess_counts": sql("preprocess_counts", keys_table="t",
                                 groupings="GROUPING(k0), GROUPING(k1)", sets="(k0), (k1)",
                                 label="k0", code="k1"),
        "encode_categorical": "SELECT " + sql(
            "encode_categorical", column='"a"', is_null='"a" IS NULL', null_code=3,
            categories="['u']", rare="[]", rare_code="NULL", other_code=2),
        "encode_integer_bins": "SELECT " + sql(
            "encode_integer_bins", is_null="false", null_code="NULL",
            value='round_even(TRY_CAST("a" AS DOUBLE), 0)', low=0, high=9, bins=5, span=10,
            wide="HUGEINT"),
        "count_marginals": sql("count_marginals", columns="c0, ", key="concat_ws(',', '0')",
                               renames='"a" AS c0', source="t", grouping_sets="(c0)"),
        "boolean_value": "SELECT " + sql("boolean_value", column='"a"'),
    }
    out = {name: scans.translate(text, "postgres") for name, text in cases.items()}
    assert "ARRAY_POSITION(" in out["preprocess_counts"]
    assert "ARRAY[]" in out["encode_categorical"] and "TEXT[]" in out["encode_categorical"]
    assert "DIV(" in out["encode_integer_bins"] and "INT128" not in out["encode_integer_bins"]
    assert "ROUND_EVEN" not in out["encode_integer_bins"]
    assert "PG_TYPEOF" in out["boolean_value"] and "TYPEOF(" not in out["boolean_value"].replace(
        "PG_TYPEOF(", "")
    assert " AS _q" in out["count_marginals"]  # the subquery in FROM has an alias
    # TRY_CAST is guarded, nested ones too (rewrites run on a node's children first)
    assert "~*" in out["count_uncastable"] and "~*" in out["encode_integer_bins"]
    for text in out.values():
        assert "TRY_CAST" not in text and "LIST_" not in text
    with pytest.raises(scans.Untranslatable):
        scans.translate("SELECT hash(a) FROM t", "postgres")


def test_exact_aggregates_equal_duckdbs(postgres):
    """The preprocessing counts and the marginals counted inside PostgreSQL equal DuckDB's on
    the same rows."""
    duck = _duckdb_source()
    spec = _spec(postgres)
    columns = {**spec.columns}
    tasks = [Task("country", "discover"), Task("race", "rare"), Task("income", "bounds"),
             Task("age", "bounds")]
    from dp_synth_assets.core.config import ColumnSpec
    columns["country"] = ColumnSpec(kind="categorical", nullable=True)
    columns["income"] = ColumnSpec(kind="float", nullable=True)
    columns["age"] = ColumnSpec(kind="integer")
    store = duckdb.connect(":memory:")
    with open_engine(spec.engine, store, drop_views=True) as engine:
        pg = exact_aggregates(engine, TABLE, columns, tasks, {})
        assert engine.fetched <= max(len(v) for v in pg.values()) + 1
        local = exact_aggregates(duck, "main.example", columns, tasks, {})
        for t in tasks:
            if isinstance(local[t], dict):
                assert pg[t] == local[t], t
            else:
                np.testing.assert_array_equal(pg[t], local[t])
        assert sum(pg[Task("age", "bounds")]) == ROWS

        duck_spec = DatasetSpec.model_validate(example_entry(source={"table": "main.example"},
                                                             report=None))
        plan_pg = prepare_encoded_view(engine, spec, "example", Path.cwd(), "work.encoded")
        plan_duck = prepare_encoded_view(duck, duck_spec, "example", Path.cwd(), "work.encoded")
        assert plan_pg == plan_duck
        cliques = [("age",), ("sex", "race"), ("country", "income"),
                   ("signup_date", "newsletter", "household_size"), ("occupation", "hours_per_week")]
        compute_marginals(engine, "work.encoded", "work.marginals", plan_pg.columns,
                          cliques[:2], plan_pg.domain)
        compute_marginals(duck, "work.encoded", "work.marginals", plan_duck.columns,
                          cliques[:2], plan_duck.domain)
        from_pg = MarginalStore(engine, "work.encoded", "work.marginals", plan_pg.columns,
                                plan_pg.domain)(cliques)  # three of them counted on demand
        from_duck = MarginalStore(duck, "work.encoded", "work.marginals", plan_duck.columns,
                                  plan_duck.domain)(cliques)
        for clique in cliques:
            np.testing.assert_array_equal(from_pg[clique], from_duck[clique])
            assert from_pg[clique].sum() == ROWS
        # structural: no query returned more rows than the largest counted marginal has cells
        assert engine.fetched <= max(from_pg[c].size for c in cliques)



def test_the_example_synthesizes_end_to_end_with_the_rows_left_in_postgres(postgres, monkeypatch):
    """`engine: postgres` through the notebook API: every private scan runs in PostgreSQL and
    no query returns more rows than the cells of the marginals the method counts, a number set
    by the domain, not by the rows: the Python process never holds the source's rows."""
    from dp_synth_assets.api import Synthesizer

    fetched = record_fetches(monkeypatch, postgres_engine.PostgresEngine, ("fetchnumpy",))
    synth = Synthesizer.from_spec(_spec(postgres))
    synth.fit(TABLE)
    rows = synth.sample(500, seed=1)
    assert rows.num_rows == 500 and rows.column_names == list(synth.spec.columns)
    assert 0.5 * ROWS < synth.noisy_total < 1.5 * ROWS
    # a bound set by the domain alone: the cells of every marginal the method counts (one
    # batch of them a query), at least one row per value of the preprocessing counts
    domain = synth.plan.domain
    cells = counted_cells(synth.spec, domain)
    assert fetched and max(fetched) <= cells
    with psycopg.connect(postgres, autocommit=True) as con:  # the run's view is gone
        assert con.execute("SELECT count(*) FROM pg_views WHERE schemaname = 'dp_synth' "
                           "AND viewname LIKE 'dp_synth_%'").fetchone()[0] == 0


def test_try_cast_reads_text_postgres_cannot_cast_as_null_as_duckdb_does(postgres):
    """TRY_CAST on PostgreSQL 15 never fails on a value: a text value reads as DuckDB's
    TRY_CAST reads it, or as NULL where docs/engines.md says PostgreSQL's pattern is narrower
    (never a different value, never an error); a BIGINT 0/1 column reads as booleans."""
    duck = duckdb.connect(":memory:")
    cases = {
        "DOUBLE": (["1.5", " 2 ", "-3e5", ".5", "5.", "+7", "nan", "-Infinity", "inf", "1e99",
                    "9.99e299", "1.5e-299", "abc", "", "1,5", "0x10", "1e", "- 5"],
                   ["1e400", "1e-400", "1_000", "1e+300"]),
        "DATE": (["2020-01-05", " 2020-1-5 ", "2020-02-29", "2000-02-29", "2020-01-05 10:00:00",
                  "2020-02-30", "2019-02-29", "1900-02-29", "2020-04-31", "20200105",
                  "Jan 5 2020", "2020-01-05 25:00:00"],
                 ["2020/01/05", "infinity", "0000-01-01", "12020-01-05"]),
        "TIMESTAMP": (["2020-01-05", "2020-01-05T10:00:00", "2020-01-05 10:00:00.123456",
                       "2020-01-05 10:00+05", "2020-02-30 10:00", "2020-01-05 25:00:00",
                       "2020-01-05 "], ["-infinity", "2020-01-05 24:00:00", " 2020-01-05"]),
        "BOOLEAN": (["t", "TRUE", "yes", "n", "1", "0", "on", "2", " f"], []),
    }
    with psycopg.connect(postgres, autocommit=True) as con:
        con.execute("CREATE TEMP TABLE casts (k int, target text, v text)")
        rows = [(k, t, v) for t, (same, narrower) in cases.items()
                for k, v in enumerate(same + narrower)]
        with con.cursor().copy("COPY casts FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        for target, (same, narrower) in cases.items():
            got = dict(con.execute(scans.translate(
                f"SELECT k, TRY_CAST(v AS {target}) FROM casts WHERE target = '{target}'",
                "postgres")).fetchall())
            for k, value in enumerate(same + narrower):
                local = duck.execute(f"SELECT TRY_CAST(? AS {target})", [value]).fetchone()[0]
                expected = local if value in same else None
                assert got[k] == expected or (got[k] != got[k] and local != local), \
                    (target, value, got[k], local)
        assert [v for v in cases["DOUBLE"][1]] and all(
            duck.execute("SELECT TRY_CAST(? AS DOUBLE)", [v]).fetchone()[0] is not None
            for v in cases["DOUBLE"][1])  # the narrower cases are real differences
        flags = con.execute(scans.translate(
            "SELECT TRY_CAST(b AS BOOLEAN) FROM (SELECT CAST(1 AS BIGINT) AS b UNION ALL "
            "SELECT CAST(0 AS BIGINT) UNION ALL SELECT CAST(2 AS BIGINT)) AS t",
            "postgres")).fetchall()
        assert [f for (f,) in flags] == [True, False, None]


def test_an_uncastable_text_value_is_refused_by_its_column_as_in_duckdb(postgres, tmp_path):
    """A text column declared integer holding a value that is no number: the source check
    refuses the source as DuckDB's does, naming the column in the private log (the value itself
    never leaves PostgreSQL); the public failure is generic. Listed under `missing:`, the same
    value reads as NULL and the source is accepted."""
    import dagster as dg

    from dp_synth_assets.core import stages
    from dp_synth_assets.core.budget import DatasetBudget
    from dp_synth_assets.source_access import source_connection
    from dp_synth_assets.private_log import private_errors, private_log_path
    from dp_synth_assets.resources.warehouse import WarehouseResource

    secret = "SECRET-AGE-9931"
    with psycopg.connect(postgres, autocommit=True) as con:
        con.execute("CREATE TABLE public.bad AS SELECT CAST(age AS TEXT) AS age_text, * "
                    "FROM public.example")
        con.execute(f"UPDATE public.bad SET age_text = '{secret}' WHERE ctid IN "
                    "(SELECT ctid FROM public.bad LIMIT 1)")
    entry = example_entry(source={"table": "public.bad"}, report=None,
                          engine={"type": "postgres", "dsn": postgres})
    entry["columns"] = {**entry["columns"], "age_text": {"kind": "integer", "bounds": [17, 90]}}
    spec = DatasetSpec.model_validate(entry)
    warehouse = WarehouseResource(database=str(tmp_path / "warehouse.duckdb"),
                                  public_dir=str(tmp_path / "public"), base_dir=str(tmp_path))

    def preprocess(spec, note=None):
        with source_connection(warehouse, spec, "bad") as engine:
            assert isinstance(engine, postgres_engine.PostgresEngine)
            return stages.preprocess(engine, spec, "bad", tmp_path, "private.bad_encoded",
                                     DatasetBudget.of(spec), lambda *a, **k: None, note)

    noted = []
    with private_errors(warehouse, "bad", "preprocessed", "run-1"):
        plan = preprocess(spec, noted.append)  # the text takes the fallback: nothing fails
    assert noted[0].counts == (("age_text", "values that do not cast to DOUBLE took the "
                                "fallback code", 1),)
    assert secret not in noted[0].report()
    assert not private_log_path(warehouse, "bad").exists()  # no failure to log
    entry["columns"]["age_text"] = {**entry["columns"]["age_text"], "missing": [secret],
                                    "nullable": True}
    plan = preprocess(DatasetSpec.model_validate(entry))
    assert "age_text" in plan.columns


# ------------------------------------------------------------------------- the Dagster pipeline


def _pipeline_project(tmp_path, postgres, monkeypatch, table: str = TABLE, **overrides):
    """A datasets.yaml whose `example` reads `table` through `engine: postgres` (the DSN in an
    environment variable, as a user configures it), and its Definitions."""
    monkeypatch.setenv("DP_SYNTH_TEST_PG_DSN", postgres)
    entry = example_entry(source={"table": table}, report=None,
                          engine={"type": "postgres", "dsn_env": "DP_SYNTH_TEST_PG_DSN"},
                          **overrides)
    project = registry_project(tmp_path, entry)
    project.defs = project.defs_fn()
    return project


def _source_asset(defs):
    import dagster as dg

    return next(a for a in defs.assets if getattr(a, "key", None) == dg.AssetKey(["example",
                                                                                 "source"]))


def test_the_dagster_pipeline_runs_end_to_end_with_the_rows_left_in_postgres(
        postgres, tmp_path, monkeypatch):
    """`engine: postgres` under dagster.materialize: the source observation (its change signal
    computed in PostgreSQL), every asset of the chain and every check succeed; no query returns
    more rows than the cells of the marginals the method counts, fewer than the source's rows
    (the Dagster process never holds the rows, so its memory does not grow with them) and the
    warehouse holds no copy of the source; a changed row gives the source a new version, an unchanged source
    keeps it."""
    import dagster as dg
    from dagster._core.definitions.observe import observe

    from dp_synth_assets.checks.suites import CHECKS
    from dp_synth_assets.core.config import load_registry
    from dp_synth_assets.artifacts import artifacts

    fetched = record_fetches(monkeypatch, postgres_engine.PostgresEngine)
    big = "public.example_big"  # more rows than the marginals have cells
    _load_example(postgres, big, BIG_ROWS)
    kept = ("age", "sex", "race", "income", "signup_date", "newsletter")  # each kind, a quick fit
    columns = {k: v for k, v in example_entry()["columns"].items() if k in kept}
    project = _pipeline_project(tmp_path, postgres, monkeypatch, table=big, rows=1000,
                                columns=columns)
    defs, instance = project.defs, dg.DagsterInstance.ephemeral()
    source = _source_asset(defs)

    def version():
        result = observe([source], resources=defs.resources, instance=instance)
        assert result.success
        [event] = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
        return event.event_specific_data.asset_observation.data_version

    first = version()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=instance, raise_on_error=False)
    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert sorted(e.check_name for e in evaluations) == sorted(CHECKS)
    assert (project.public / "example" / "synthetic.parquet").exists()
    materialized = {tuple(e.asset_key.path) for e in result.get_asset_materialization_events()}
    assert {("example", s) for s in ("preprocessed", "marginals", "selection", "measurements",
                                     "model", "synthetic")} <= materialized

    spec = load_registry(project.datasets)["example"]
    warehouse = defs.resources["warehouse"]
    domain = artifacts(warehouse, "example").plan().domain
    cells = counted_cells(spec, domain)
    assert fetched and max(fetched) <= cells < BIG_ROWS
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        tables = set(con.execute("SELECT table_schema, table_name "
                                 "FROM information_schema.tables").fetchall())
    assert tables == {("synthetic", "example"), ("private", "example_marginals")}

    assert version() == first  # nothing changed in PostgreSQL
    with psycopg.connect(postgres, autocommit=True) as con:
        con.execute(f"UPDATE {big} SET hours_per_week = hours_per_week + 1 "
                    f"WHERE ctid IN (SELECT ctid FROM {big} LIMIT 1)")
    changed = version()
    assert changed != first
    assert version() == changed


def test_a_numeric_beyond_a_double_reads_as_null_and_the_run_publishes_no_value(
        postgres, tmp_path, monkeypatch):
    """A NUMERIC value beyond a double's range, whose plain cast PostgreSQL refuses with a
    message quoting the value, reads as NULL (a nullable column): the run succeeds as it would
    without that row (no row decides a run), the value is nowhere in the run's event log, its
    tags or the public files, and the private log counts it."""
    import dagster as dg

    from dp_synth_assets.private_log import private_log_path
    from dp_synth_assets.resources.warehouse import WarehouseResource
    from tests.test_leak_scan import published_texts

    secret = "99318877"
    with psycopg.connect(postgres, autocommit=True) as con:
        con.execute("CREATE TABLE public.huge AS SELECT * FROM public.example")
        con.execute("ALTER TABLE public.huge ALTER income TYPE NUMERIC")
        con.execute(f"UPDATE public.huge SET income = {secret} * 10::numeric ^ 400 WHERE ctid "
                    "IN (SELECT ctid FROM public.huge LIMIT 1)")
    project = _pipeline_project(tmp_path, postgres, monkeypatch, table="public.huge")
    defs, instance = project.defs, dg.DagsterInstance.ephemeral()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=instance, raise_on_error=False)
    assert result.success
    assert secret not in "\n".join(published_texts(instance, project, [result.run_id]))
    warehouse = WarehouseResource(database=str(project.warehouse),
                                  public_dir=str(project.public), base_dir=str(tmp_path))
    log = private_log_path(warehouse, "example").read_text()
    assert "column 'income': 1 values that do not cast to DOUBLE took NULL" in log, log


def test_a_new_warehouse_file_does_not_reset_the_budget_of_rows_left_in_postgres(
        postgres, tmp_path, monkeypatch):
    """The rows live in PostgreSQL: pointing the definitions at another warehouse file (a new
    DP_SYNTH_WAREHOUSE) is the same data, so the run after the one the limit allows is refused
    (its unit is `postgres:<dsn_env>:<table>`, not the warehouse file's path)."""
    import dagster as dg

    from dp_synth_assets.definitions import build_definitions

    kept = ("age", "sex", "newsletter")
    columns = {k: v for k, v in example_entry()["columns"].items() if k in kept}
    project = _pipeline_project(tmp_path, postgres, monkeypatch, rows=500, columns=columns,
                                privacy={"epsilon": 1.0, "delta": 1e-9,
                                         "limit": {"epsilon": 1.1, "delta": 1e-9}})
    instance = dg.DagsterInstance.ephemeral()
    first = dg.materialize(project.defs.assets, resources=project.defs.resources,
                           instance=instance, raise_on_error=False)
    assert first.success
    moved = build_definitions(project.datasets, tmp_path / "new" / "warehouse.duckdb",
                              project.ledger, tmp_path / "new" / "public")
    rows = ledger_rows(project.ledger)
    second = dg.materialize(moved.assets, resources=moved.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not second.success
    failure = next(e for e in second.all_events if e.event_type_value == "STEP_FAILURE")
    assert "cannot cover this run" in failure.event_specific_data.error.message
    assert ledger_rows(project.ledger) == rows
