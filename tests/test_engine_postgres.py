"""The PostgreSQL scan engine (core/scans.py): the private scans run inside a throwaway
PostgreSQL server (Debian's binaries, loopback, a temporary data directory), their exact
aggregates equal DuckDB's on the same rows, the example synthesizes end to end with
`engine: postgres` while no query returns more rows than an aggregate's cells, and an error of
PostgreSQL that quotes a value stays out of the public failure."""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest

from dp_synth_assets.core import scans
from dp_synth_assets.core.config import DatasetSpec
from dp_synth_assets.core.preprocess import Task, exact_aggregates, prepare_encoded_view
from dp_synth_assets.core.marginals import MarginalStore, compute_marginals
from dp_synth_assets.example import generate_example
from tests.helpers import example_entry

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pyproject: psycopg)")

PG_BIN = Path(os.environ.get("DP_SYNTH_PG_BIN", "/usr/lib/postgresql/15/bin"))
ROWS = 3000
TABLE = "public.example"
_TYPES = {"int64": "BIGINT", "int32": "INTEGER", "double": "DOUBLE PRECISION", "string": "TEXT",
          "large_string": "TEXT", "bool": "BOOLEAN", "date32[day]": "DATE"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    """A PostgreSQL server of its own: initdb into a temporary directory, started by pg_ctl on
    a free loopback port (as the `postgres` user when the tests run as root), stopped after."""
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN} (set DP_SYNTH_PG_BIN)")
    as_user = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL")
        as_user = ["runuser", "-u", "postgres", "--"]
    base = Path(f"/tmp/dp_synth_pg_{os.getpid()}_{_free_port()}")
    base.mkdir(mode=0o700)
    if as_user:
        shutil.chown(base, "postgres", "postgres")
    data, port = base / "data", _free_port()
    subprocess.run(as_user + [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres",
                              "--auth=trust", "--no-sync", "-E", "UTF8"],
                   check=True, capture_output=True)
    subprocess.run(as_user + [str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(base / "log"),
                              "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1 "
                                    "-c fsync=off", "-w", "start"],
                   check=True, capture_output=True)
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    try:
        _load_example(dsn)
        yield dsn
    finally:
        subprocess.run(as_user + [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate",
                                  "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _load_example(dsn: str) -> None:
    """The bundled example's rows as a PostgreSQL table of the matching column types."""
    table = generate_example(ROWS)
    columns = ", ".join(f'"{f.name}" {_TYPES[str(f.type)]}' for f in table.schema)
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute(f"CREATE TABLE {TABLE} ({columns})")
        with con.cursor().copy(f"COPY {TABLE} FROM STDIN") as copy:
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
        "check_cast": sql("check_cast", column='"a"', is_null='"a" IS NULL', sql_type="DOUBLE",
                          alias="x"),
        "check_outside": sql("check_outside", column='"a"', is_null="false",
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
    with scans.open_engine(spec.engine, store, drop_views=True) as engine:
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
    from dp_synth_assets.core.measure import clique_size
    from dp_synth_assets.core.select import required_cliques

    fetched = []
    original = scans.PostgresEngine.fetchnumpy

    def recording(self, statement, params=None):
        out = original(self, statement, params)
        fetched.append(max((len(v) for v in out.values()), default=0))
        return out

    monkeypatch.setattr(scans.PostgresEngine, "fetchnumpy", recording)
    synth = Synthesizer.from_spec(_spec(postgres))
    synth.fit(TABLE)
    rows = synth.sample(500, seed=1)
    assert rows.num_rows == 500 and rows.column_names == list(synth.spec.columns)
    assert 0.5 * ROWS < synth.noisy_total < 1.5 * ROWS
    # a bound set by the domain alone: the cells of every marginal the method counts (one
    # batch of them a query), at least one row per value of the preprocessing counts
    domain = synth.plan.domain
    cells = sum(clique_size(c, domain) for c in required_cliques(
        synth.spec.method, domain, synth.spec.selection))
    assert fetched and max(fetched) <= cells
    with psycopg.connect(postgres, autocommit=True) as con:  # the run's view is gone
        assert con.execute("SELECT count(*) FROM pg_views WHERE schemaname = 'dp_synth' "
                           "AND viewname LIKE 'dp_synth_%'").fetchone()[0] == 0


def test_a_postgres_error_quoting_a_value_stays_in_the_private_log(postgres, tmp_path):
    """A source value PostgreSQL cannot cast makes its error quote the value: the stage's public
    failure is generic and the value is only in private/<dataset>/private.log."""
    import dagster as dg

    from dp_synth_assets.core import stages
    from dp_synth_assets.core.budget import DatasetBudget
    from dp_synth_assets.pipeline import source_connection
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
    with pytest.raises(dg.Failure) as failure:
        with private_errors(warehouse, "bad", "preprocessed", "run-1"):
            with source_connection(warehouse, spec, "bad") as engine:
                assert isinstance(engine, scans.PostgresEngine)
                stages.preprocess(engine, spec, "bad", tmp_path, "private.bad_encoded",
                                  DatasetBudget.of(spec), lambda *a, **k: None)
    public = failure.value.description
    assert secret not in public and "does not match its declared spec" in public
    log = private_log_path(warehouse, "bad").read_text()
    assert secret in log and "PostgreSQL" in log
