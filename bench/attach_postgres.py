"""The whole pipeline on a table that lives in PostgreSQL, read through DuckDB's postgres
extension (`source: {attach: <libpq string>, type: postgres, table: public.example}`).

    .venv/bin/python bench/attach_postgres.py "host=127.0.0.1 port=5432 user=postgres dbname=postgres"

Needs a reachable PostgreSQL server (the table `public.dp_synth_example` is created there, and
dropped at the end) and DuckDB's postgres extension loadable by the running DuckDB (`LOAD
postgres`; DuckDB installs it from extensions.duckdb.org on first use, or put it in DuckDB's
extension directory). Writes the example's rows into PostgreSQL with the same extension,
materializes every asset and check with the source attached READ_ONLY, and checks that the
synthetic table has the source's columns, that the source's fingerprint follows its rows, and
that nothing was written to PostgreSQL besides the loaded table. Prints a JSON record and
appends it to bench/results/attach_postgres.json.
"""

import json
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import duckdb
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS  # noqa: E402
sys.path.insert(0, str(ROOT))

from dp_synth_assets.example import write_example  # noqa: E402
from dp_synth_assets.definitions import build_definitions  # noqa: E402
from dp_synth_assets.core.config import load_registry  # noqa: E402
from dp_synth_assets.source_access import fingerprint  # noqa: E402
from tests.helpers import example_entry  # noqa: E402

TABLE = "public.dp_synth_example"


def main() -> None:
    dsn = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    work = Path(tempfile.mkdtemp(prefix="dp_synth_pg_"))
    local = work / "load.duckdb"
    write_example(local, rows=rows)
    con = duckdb.connect(str(local))
    con.execute("LOAD postgres")
    con.execute(f"ATTACH '{dsn}' AS pg (TYPE postgres)")
    con.execute(f"DROP TABLE IF EXISTS pg.{TABLE}")
    con.execute(f"CREATE TABLE pg.{TABLE} AS SELECT * FROM main.example")
    tables_before = sorted(con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = 'pg'").fetchall())
    con.close()

    entry = example_entry(source={"attach": dsn, "type": "postgres", "table": TABLE}, report=None,
                          model=None)  # the product's defaults, not the tests' short fits
    (work / "datasets.yaml").write_text(yaml.safe_dump({"datasets": {"example": entry}}))
    defs = build_definitions(work / "datasets.yaml", work / "warehouse.duckdb",
                             work / "ledger.sqlite", work / "public")
    started = time.perf_counter()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    seconds = time.perf_counter() - started
    failures = [str(e.event_specific_data.error.message) for e in result.all_events
                if e.event_type_value == "STEP_FAILURE"]
    checks = {e.event_specific_data.check_name: e.event_specific_data.passed
              for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}

    spec = load_registry(work / "datasets.yaml")["example"]
    warehouse = defs.resources["warehouse"]
    before = fingerprint(warehouse, spec, dataset="example")
    con = duckdb.connect(str(work / "warehouse.duckdb"))
    synthetic_columns = [r[0] for r in con.execute("DESCRIBE synthetic.example").fetchall()] \
        if result.success else []
    synthetic_rows = con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0] \
        if result.success else 0
    con.execute("LOAD postgres")
    con.execute(f"ATTACH '{dsn}' AS pg (TYPE postgres)")
    source_columns = [r[0] for r in con.execute(f"DESCRIBE pg.{TABLE}").fetchall()]
    tables_after = sorted(con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = 'pg'").fetchall())
    con.execute(f"UPDATE pg.{TABLE} SET age = age + 1 WHERE age < 30")
    con.close()
    after = fingerprint(warehouse, spec, dataset="example")
    con = duckdb.connect()
    con.execute("LOAD postgres")
    con.execute(f"ATTACH '{dsn}' AS pg (TYPE postgres)")
    con.execute(f"DROP TABLE pg.{TABLE}")
    con.close()

    record = {"duckdb": duckdb.__version__, "rows": rows, "success": result.success,
              "seconds": round(seconds, 1), "failures": failures, "checks": checks,
              "synthetic_rows": synthetic_rows,
              "same_columns": synthetic_columns == source_columns,
              "fingerprint_follows_rows": before != after,
              "postgres_tables_unchanged": tables_before == tables_after}
    print(json.dumps(record, indent=1))
    out = RESULTS / "attach_postgres.json"
    old = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps(old + [record], indent=1))
    ok = (result.success and record["same_columns"] and record["fingerprint_follows_rows"]
          and record["postgres_tables_unchanged"] and all(checks.values()))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
