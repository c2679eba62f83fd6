"""The benchmark scripts of the public tables (adult, the raw CSVs), each on tiny generated
stand-ins of them (bench/tiny_datasets.py; tests/bench_cases.py), with the anchors off."""

import json

import duckdb
import pytest

from tests.bench_cases import folders, run_script, smoke_test



test_script_runs = smoke_test("tables")


def test_attach_postgres(tmp_path, pg_server):
    """bench/attach_postgres.py on a throwaway server, when DuckDB's postgres extension loads."""
    try:
        duckdb.connect().execute("LOAD postgres")
    except duckdb.Error as e:
        pytest.skip(f"DuckDB's postgres extension is not installed here (and cannot be "
                    f"downloaded): {str(e).splitlines()[0]}")
    env, results, _ = folders(tmp_path)
    run_script(env, "attach_postgres.py", pg_server.dsn, "300")
    [record] = json.loads((results / "attach_postgres.json").read_text())
    assert record["seconds"] > 0


def test_scale_through_postgres(tmp_path, pg_server):
    """bench/scale.py --engine postgres: the scale table copied into a throwaway server, the run's
    scans there, the record naming its engine (no DuckDB floor: the encoded view was in
    PostgreSQL). `pg_server` only skips, saying why, where no server can start."""
    env, results, _ = folders(tmp_path)
    run_script(env, "scale.py", "--rows", "2000", "--executor", "in_process", "--iterations",
               "20", "--engine", "postgres")
    [record] = json.loads((results / "scale.json").read_text())
    assert record["engine"] == "postgres" and record["rows"] == 2000
    assert record["floor_seconds"] is None and record["load_seconds"] > 0
    assert record["stages"]["synthetic"]["seconds"] > 0
