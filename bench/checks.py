"""What the 7 checks of the synthetic table cost, alone, at a given row count.

    .venv/bin/python bench/checks.py                 # 100k, 1M, 10M rows
    .venv/bin/python bench/checks.py --rows 3000 --repeat 6 --label small   # per-run overhead
    .venv/bin/python bench/checks.py --rows 2000 --source-rows 2000 --iterations 20   # smoke

A Synthesizer is fitted on `--source-rows` rows of the scale table's distribution (15 columns,
`scale_data.py`, epsilon 1); the "synthetic" table is then that distribution drawn at `--rows`
rows (chunk by chunk, `scale_data.chunk`), cast to the types the synthesizer's own sample has,
written to a DuckDB file and its Parquet copy under bench/work/checks/. A fresh process then runs
`checks.suites.run_all` on it and publishes each result as the pipeline does (`suites.publish`:
its JSON and Data Docs page), `--repeat` rounds, and reports each check's
seconds (the first one's include `SyntheticTable.read`), its verdict and metadata, GX's import
and context set-up (timed before, apart), the aggregates' seconds alone (`SyntheticTable.read`
once more, afterwards) and the process's peak resident memory. Records (with the
1-minute load average) go to bench/results/checks.json, one per `--label` and row count.
"""

import argparse
import json
import os
import pickle
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
sys.path.insert(0, str(ROOT))
WORK = WORK / "checks"
RESULTS = RESULTS / "checks.json"
COLUMNS = 15


def build(rows: int, source_rows: int, iterations: int, folder: Path) -> Path:
    """Fit, write the table of `rows` rows, and pickle the check inputs; returns the pickle."""
    import duckdb
    import pyarrow as pa
    from scale_data import chunk, spec_columns

    from dp_synth_assets.api import Synthesizer
    from dp_synth_assets.checks.frames import CheckInputs

    folder.mkdir(parents=True, exist_ok=True)
    synth = Synthesizer(columns=spec_columns(COLUMNS), epsilon=1.0, delta=1e-9,
                        model={"iterations": iterations}, seed=3)
    synth.fit(chunk(source_rows, COLUMNS, 7, 0))
    schema = synth.sample(n=min(rows, 1000), seed=1).schema
    database, parquet = folder / "warehouse.duckdb", folder / "synthetic.parquet"
    database.unlink(missing_ok=True)
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE SCHEMA synthetic")
        done, k = 0, 0
        while done < rows:
            n = min(1_000_000, rows - done)
            drawn = chunk(n, COLUMNS, 11, k)
            con.register("part", pa.table({f.name: drawn.column(f.name).cast(f.type)
                                           for f in schema}))
            verb = "CREATE TABLE synthetic.example AS" if k == 0 else \
                "INSERT INTO synthetic.example"
            con.execute(f"{verb} SELECT * FROM part")
            con.unregister("part")
            done, k = done + n, k + 1
        con.execute(f"COPY synthetic.example TO '{parquet}' (FORMAT parquet)")
    found = synth.measurements
    inputs = CheckInputs("example", dict(synth.spec.columns), synth.plan,
                         list(found.measurements), found.noisy_total, rows,
                         "synthetic.example", str(parquet), folder / "data_docs", synth.model)
    path = folder / "inputs.pickle"
    path.write_bytes(pickle.dumps(inputs))
    return path


def measure(inputs_path: Path, repeat: int = 1) -> dict:
    """Run every check on the table the pickled inputs name, `repeat` times in this process, each
    result published as the pipeline does (`suites.publish`: its JSON and Data Docs page): the
    first round's seconds, verdicts and figures, every round's total (the later ones: a warm
    process, what a run pays per dataset), the aggregates alone, peak memory."""
    import duckdb

    from dp_synth_assets.checks.frames import SyntheticTable
    from dp_synth_assets.checks.gx_context import context
    from dp_synth_assets.checks.outcomes import json_safe
    from dp_synth_assets.checks.suites import publish, run_all

    inputs = pickle.loads(inputs_path.read_bytes())
    folder = Path(inputs.parquet).parent
    database = folder / "warehouse.duckdb"
    started = time.perf_counter()
    context()  # GX's import and context, once per process: apart from the first check's time
    gx_setup = time.perf_counter() - started
    rounds = []
    for _ in range(repeat):
        checks, started = {}, time.perf_counter()
        last = started
        for result in run_all(lambda: duckdb.connect(str(database), read_only=True), inputs):
            publish(result, folder / "checks", inputs.docs_dir)
            now = time.perf_counter()
            checks[result.name] = {"seconds": round(now - last, 2), "passed": result.passed,
                                   "metadata": json_safe({k: v for k, v in result.metadata.items()
                                                          if k != "suites"})}
            last = now
        rounds.append((checks, round(time.perf_counter() - started, 2)))
    started = time.perf_counter()
    with duckdb.connect(str(database), read_only=True) as con:  # the aggregates alone, again
        SyntheticTable.read(con, inputs)
    return {"checks": rounds[0][0], "total_seconds": rounds[0][1],
            "round_seconds": [total for _, total in rounds],
            "gx_setup_seconds": round(gx_setup, 2),
            "read_seconds": round(time.perf_counter() - started, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--source-rows", type=int, default=20_000)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--label", default="current")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of all the checks in the one process (the later: warm)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:  # the fresh process
        print(json.dumps(measure(args.measure, args.repeat)))
        return
    records = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    for rows in args.rows:
        folder = WORK / str(rows)
        inputs = folder / "inputs.pickle"
        if not inputs.exists():
            started = time.perf_counter()
            inputs = build(rows, args.source_rows, args.iterations, folder)
            print(f"{rows:,} rows written in {time.perf_counter() - started:.1f} s")
        load = os.getloadavg()[0]
        out = subprocess.run([sys.executable, __file__, "--measure", str(inputs),
                              "--repeat", str(args.repeat)], check=True,
                             capture_output=True, text=True, cwd=ROOT).stdout
        record = {"label": args.label, "rows": rows, "columns": COLUMNS,
                  **json.loads(out.strip().splitlines()[-1]),
                  "published": True,  # each result's JSON and Data Docs page in the timing
                  "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}
        records = [r for r in records if (r["label"], r["rows"]) != (args.label, rows)]
        records.append(record)
        print(f"{args.label} {rows:,} rows: " + ", ".join(
            f"{n} {c['seconds']} s{'' if c['passed'] else ' (failed)'}"
            for n, c in record["checks"].items())
            + f"; total {record['total_seconds']} s (rounds {record['round_seconds']}; "
              f"GX set-up before it {record['gx_setup_seconds']} s, the table's aggregates "
              f"{record['read_seconds']} s), peak {record['peak_rss_mb']} MB, "
              f"load {record['load_before']}-{record['load_after']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n")  # a line each


if __name__ == "__main__":
    main()
