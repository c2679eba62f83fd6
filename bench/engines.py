"""Issue 18's engine benchmark: the same scale tables through DuckDB, Spark (local) and PostgreSQL.

    nice -n 10 .venv/bin/python bench/engines.py                      # 1M rows, all three
    nice -n 10 .venv/bin/python bench/engines.py --rows 1000000 10000000 --engines spark

The tables are bench/scale_data.py's (the example's distribution, `--columns` wide, default 15),
written once into bench/work/engines/scale.duckdb, copied to Parquet for Spark (a folder Spark
reads as a table of its catalog) and loaded into a throwaway PostgreSQL 15 server started for
the benchmark (Debian's binaries in /usr/lib/postgresql/15/bin or $DP_SYNTH_PG_BIN; initdb into
a temporary directory as the `postgres` user, loopback, a free port; the rows loaded with COPY;
stopped at the end).

Each run is one process of its own (`bounded.run_bounded`, killed at `--timeout`) that fits the
dataset through the notebook API with `engine:` set, stage by stage (`Synthesizer.reading`),
then fits the model and samples `--sample` rows (a fixed number, so the synthetic table's size
does not grow with the source). Recorded per engine and row count:

- `scan_seconds`: the private scans: preprocessing (source check, preprocessing counts, the
  encoded view), the marginals' one scan, and the exact counts the selection and measurement
  ask of the oracle (cliques counted on demand); `preprocess_seconds`, `marginal_seconds`,
  `oracle_seconds` are its parts;
- `total_seconds`: from opening the source to the sampled table (scans, selection, measurement,
  model fit, sampling); `startup_seconds` (before it): starting the Spark session's JVM;
- `peak_mb`: the peak resident memory of the Python process (getrusage in the child, the
  process a Dagster step would be): it holds aggregates only, so it must not grow with the rows;
  `scan_peak_mb`: the same peak when the private scans end (before the model fit and sampling,
  whose memory is set by the domain and the sampled rows).
  DuckDB runs inside that process, so its figure includes DuckDB's own buffers; Spark's JVM
  and PostgreSQL's server are other processes, not counted;
- `max_rows_fetched`: the largest number of rows one query of the engine returned (Spark and
  PostgreSQL: an aggregate's cells, set by the domain);
- `aggregates_equal`: the sha256 of the encoding plan and of the exact counts of every marginal
  the method counts in the marginals stage is the same for all engines of a row count (the
  exact aggregates are equal, so the measurements agree up to noise);
- `load1`: the highest 1-minute load average during the run (2 shared cores: above ~2, other
  work competed and the seconds are inflated).

Results are merged into bench/results/engines.json (flat records keyed by engine, rows and
columns) and the table is written as the last section of bench/results/engines.md (below a
marker line; the hand-written notes on the generation engines above it are kept).
"""

import argparse
import hashlib
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bounded import log_tail, run_bounded  # noqa: E402

WORK = WORK / "engines"
TABLE_MD = RESULTS / "engines.md"
RESULTS = RESULTS / "engines.json"
DATABASE = WORK / "scale.duckdb"
PG_BIN = Path(os.environ.get("DP_SYNTH_PG_BIN", "/usr/lib/postgresql/15/bin"))
ENGINES = ("duckdb", "spark", "postgres")
PG_TYPES = {"BIGINT": "BIGINT", "INTEGER": "INTEGER", "DOUBLE": "DOUBLE PRECISION",
            "VARCHAR": "TEXT", "BOOLEAN": "BOOLEAN", "DATE": "DATE"}
SPARK_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
              "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g",
              "spark.sql.session.timeZone": "UTC"}
PG_SETTINGS = ("-c shared_buffers=1GB -c work_mem=256MB -c max_parallel_workers_per_gather=2 "
               "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")


def table_name(rows: int, columns: int) -> str:
    return f"scale_{rows}_{columns}"


# ----------------------------------------------------------------------------------- the data


def ensure_data(rows: int, columns: int) -> Path:
    """The DuckDB table main.<table_name> (rewritten when its row count differs) and its Parquet
    copy, a folder (Spark reads it as a table); returns the folder."""
    import duckdb

    from scale_data import write_scaled

    name = table_name(rows, columns)
    folder = WORK / f"{name}.parquet"
    have = None
    if DATABASE.exists():
        with duckdb.connect(str(DATABASE), read_only=True) as con:
            if con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                           [name]).fetchone()[0]:
                have = con.execute(f"SELECT count(*) FROM main.{name}").fetchone()[0]
    if have != rows:
        seconds = write_scaled(DATABASE, f"main.{name}", rows, columns)
        print(f"wrote main.{name} in {seconds:.0f} s", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    if not folder.exists():
        folder.mkdir(parents=True)
        with duckdb.connect(str(DATABASE), read_only=True) as con:
            con.execute("SET preserve_insertion_order = false")
            con.execute(f"COPY main.{name} TO '{folder / 'part-0.parquet'}' (FORMAT parquet)")
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A throwaway PostgreSQL server (as tests/test_engine_postgres.py's fixture starts one)."""

    def __init__(self):
        if not (PG_BIN / "initdb").exists():
            raise SystemExit(f"PostgreSQL binaries not found in {PG_BIN} (set DP_SYNTH_PG_BIN)")
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.base = Path(f"/tmp/dp_synth_bench_pg_{os.getpid()}_{_free_port()}")
        self.base.mkdir(mode=0o700)
        if self.as_user:
            shutil.chown(self.base, "postgres", "postgres")
        self.data, port = self.base / "data", _free_port()
        subprocess.run(self.as_user + [str(PG_BIN / "initdb"), "-D", str(self.data), "-U",
                                       "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"],
                       check=True, capture_output=True)
        subprocess.run(self.as_user + [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l",
                                       str(self.base / "log"), "-o",
                                       f"-p {port} -k {self.base} -c listen_addresses=127.0.0.1 "
                                       + PG_SETTINGS, "-w", "start"],
                       check=True, capture_output=True)
        self.dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"

    def load(self, rows: int, columns: int) -> float:
        """Copy main.<table> from the DuckDB file into public.<table> (CSV through COPY)."""
        import duckdb
        import psycopg

        name = table_name(rows, columns)
        started = time.perf_counter()
        csv = WORK / f"{name}.csv"
        with duckdb.connect(str(DATABASE), read_only=True) as con:
            described = con.execute(f"DESCRIBE main.{name}").fetchall()
            con.execute(f"COPY main.{name} TO '{csv}' (FORMAT csv, HEADER false)")
        declared = ", ".join(f'"{c}" {PG_TYPES[t]}' for c, t, *_ in described)
        try:
            with psycopg.connect(self.dsn, autocommit=True) as con:
                con.execute(f"DROP TABLE IF EXISTS public.{name}")
                con.execute(f"CREATE TABLE public.{name} ({declared})")
                with con.cursor().copy(f"COPY public.{name} FROM STDIN (FORMAT csv)") as copy, \
                        csv.open("rb") as f:
                    while block := f.read(1 << 20):
                        copy.write(block)
                con.execute(f"VACUUM ANALYZE public.{name}")
        finally:
            csv.unlink(missing_ok=True)
        return time.perf_counter() - started

    def stop(self) -> None:
        subprocess.run(self.as_user + [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m",
                                       "fast", "stop"], capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)


# ---------------------------------------------------------------------------------- one run


class TimedOracle:
    """The marginal oracle, its calls timed (the exact counts the selection and measurement
    read: stored marginals and cliques counted on demand)."""

    def __init__(self, oracle):
        self.oracle, self.seconds = oracle, 0.0

    def __call__(self, cliques):
        started = time.perf_counter()
        try:
            return self.oracle(cliques)
        finally:
            self.seconds += time.perf_counter() - started

    def __getattr__(self, name):
        return getattr(self.oracle, name)


def child(engine: str, rows: int, columns: int, iterations: int, sample: int) -> None:
    """One fit through the notebook API with `engine:`, timed by stage; prints RESULT {json}."""
    import duckdb
    import numpy as np

    from scale_data import spec_columns

    from dp_synth_assets.api import Synthesizer
    from dp_synth_assets.core.config import DatasetSpec
    from dp_synth_assets.infra.engines.spark import spark_session
    from dp_synth_assets.core.select import required_cliques

    name = table_name(rows, columns)
    entry = {"source": {"table": "main.x"}, "columns": spec_columns(columns),
             "privacy": {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 10.0,
                                                                   "delta": 1e-8}},
             "method": "absyn", "generator": "auto", "rows": sample, "seed": 7,
             "model": {"iterations": iterations}}
    connection, source, startup = None, None, 0.0
    if engine == "duckdb":
        connection, source = duckdb.connect(str(DATABASE)), f"main.{name}"
    elif engine == "spark":
        entry["engine"] = {"type": "spark", "master": "local[2]", "conf": SPARK_CONF}
        started = time.perf_counter()
        session = spark_session(DatasetSpec.model_validate(entry).engine)
        session.sql("CREATE DATABASE IF NOT EXISTS bench")
        session.sql(f"CREATE TABLE IF NOT EXISTS bench.{name} USING parquet "
                    f"LOCATION '{WORK / (name + '.parquet')}'")
        startup = time.perf_counter() - started
        source = f"bench.{name}"
    else:
        entry["engine"] = {"type": "postgres", "dsn_env": "DP_SYNTH_BENCH_PG_DSN"}
        source = f"public.{name}"
    spec = DatasetSpec.model_validate(entry)
    synth = Synthesizer.from_spec(spec)

    started = time.perf_counter()
    with synth.reading(source, connection=connection) as run:
        t = time.perf_counter()
        plan = run.preprocess()
        preprocess = time.perf_counter() - t
        t = time.perf_counter()
        oracle = TimedOracle(run.marginals(plan))
        marginal = time.perf_counter() - t
        chosen = run.select(plan, oracle)
        found = run.measure(plan, chosen, oracle)
        # the exact aggregates (not timed): the plan and every marginal the marginals stage counted
        digest = hashlib.sha256(plan.to_json().encode())
        cliques = sorted(required_cliques(spec.method, plan.domain, spec.selection))
        counts = oracle.oracle(cliques)
        for clique in cliques:
            digest.update(repr(clique).encode())
            digest.update(np.ascontiguousarray(counts[clique], dtype=np.int64).tobytes())
        fetched = getattr(run.con, "fetched", None)
    scan_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    synth.store.write_plan(plan)
    synth.store.write_selection(chosen)
    synth.store.write_measurements(found)
    synth.fit_model(plan, found)
    table = synth.sample()
    total = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("RESULT " + json.dumps({
        "scan_seconds": round(preprocess + marginal + oracle.seconds, 2),
        "preprocess_seconds": round(preprocess, 2), "marginal_seconds": round(marginal, 2),
        "oracle_seconds": round(oracle.seconds, 2), "total_seconds": round(total, 2),
        "startup_seconds": round(startup, 2), "peak_mb": round(peak, 1),
        "scan_peak_mb": round(scan_peak, 1),
        "aggregates_sha256": digest.hexdigest(), "marginals": len(cliques),
        "max_rows_fetched": fetched, "sampled": table.num_rows,
        "generator": synth.choice.engine if synth.choice is not None else None}), flush=True)


# ------------------------------------------------------------------------------------- main


def merge(records: list[dict]) -> list[dict]:
    """`records` merged into engines.json (replacing the same engine, rows and columns), with
    `aggregates_equal` set per row count over every engine recorded."""
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    key = lambda r: (r["engine"], r["rows"], r["columns"])  # noqa: E731
    fresh = {key(r) for r in records}
    merged = [r for r in old if key(r) not in fresh] + records
    merged.sort(key=lambda r: (r["rows"], r["columns"], ENGINES.index(r["engine"])))
    for r in merged:
        digests = {o.get("aggregates_sha256") for o in merged
                   if (o["rows"], o["columns"]) == (r["rows"], r["columns"])}
        engines = {o["engine"] for o in merged
                   if (o["rows"], o["columns"]) == (r["rows"], r["columns"])}
        r["aggregates_equal"] = (None if len(engines) < 2 else
                                 None not in digests and len(digests) == 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(merged, indent=1) + "\n")
    return merged


MARK = "<!-- bench/engines.py writes below this line -->"


def write_markdown(records: list[dict]) -> None:
    """The table as the last section of engines.md, below MARK (the hand-written notes on the
    generation engines above it are kept)."""
    lines = [MARK, "", "## Scan engines: the same table through DuckDB, Spark local and PostgreSQL",
             "", "Written by `bench/engines.py` (its docstring says what each column measures): "
             "the notebook API with `engine:` set, absyn, epsilon 1, "
             f"{records[0].get('iterations', '?') if records else '?'} fit iterations, "
             f"{max((r.get('sampled') or 0 for r in records), default=0):,} rows sampled; "
             "2 shared cores (`load1` above ~2: other work competed); "
             "PostgreSQL 15 with `" + PG_SETTINGS.replace("-c ", "") + "`; Spark `local[2]`.",
             "",
             "| rows | columns | engine | scan s | total s | startup s | peak MB (Python) "
             "| after scans MB | max rows fetched | aggregates equal | load1 |",
             "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in records:
        fetched = r.get("max_rows_fetched")
        lines.append(f"| {r['rows']:,} | {r['columns']} | {r['engine']} | "
                     f"{_f(r.get('scan_seconds'))} | {_f(r.get('total_seconds'))} | "
                     f"{_f(r.get('startup_seconds'))} | {_f(r.get('peak_mb'), 0)} | "
                     f"{_f(r.get('scan_peak_mb'), 0)} | "
                     f"{'-' if fetched is None else fetched} | {r.get('aggregates_equal')} | "
                     f"{r.get('load1')} |")
    text = TABLE_MD.read_text() if TABLE_MD.exists() else ""
    kept = text.split(MARK)[0].rstrip()
    TABLE_MD.write_text((kept + "\n\n" if kept else "") + "\n".join(lines) + "\n")


def _f(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--columns", type=int, default=15)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--iterations", type=int, default=300, help="the model fit's iterations")
    parser.add_argument("--sample", type=int, default=100_000, help="synthetic rows sampled")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "ROWS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.columns, args.iterations, args.sample)
        return

    WORK.mkdir(parents=True, exist_ok=True)
    server = Postgres() if "postgres" in args.engines else None
    records = []
    try:
        for rows in args.rows:
            ensure_data(rows, args.columns)
            env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
            if server is not None:
                seconds = server.load(rows, args.columns)
                print(f"loaded {rows:,} rows into PostgreSQL in {seconds:.0f} s", flush=True)
                env["DP_SYNTH_BENCH_PG_DSN"] = server.dsn
            for engine in args.engines:
                log = WORK / "logs" / f"{engine}_{rows}_{args.columns}.log"
                run = run_bounded([sys.executable, str(Path(__file__)), "--child", engine,
                                   str(rows), "--columns", str(args.columns), "--iterations",
                                   str(args.iterations), "--sample", str(args.sample)],
                                  log, args.timeout, env=env)
                result = run["result"] or {}
                record = {"engine": engine, "rows": rows, "columns": args.columns,
                          **{k: v for k, v in result.items()},
                          "wall_seconds": round(run["wall"], 1), "code": run["code"],
                          "timed_out": run["timed_out"], "load1": run["max_load1"],
                          "iterations": args.iterations}
                if not result:
                    record["error"] = log_tail(log)
                print(json.dumps(record), flush=True)
                records.append(record)
            write_markdown(merge([r for r in records if r["rows"] == rows]))
    finally:
        if server is not None:
            server.stop()
    print(TABLE_MD.read_text().split(MARK)[-1])


if __name__ == "__main__":
    main()
