"""Issue 17's reliability series: concurrent runs of one dataset, and kills at random moments,
on each privacy ledger: the SQLite file and PostgreSQL (issue 31).

    .venv/bin/python bench/reliability.py                        # N = 8 twice, 30 kills, both
    .venv/bin/python bench/reliability.py --n 4 --repeats 1 --kills 5 --rows 2000   # reduced
    .venv/bin/python bench/reliability.py --ledgers sqlite       # one ledger only

With `postgres` among `--ledgers`, the series starts a throwaway PostgreSQL server of its own
(`tests/helpers.postgres_server`: DP_SYNTH_PG_BIN's initdb and pg_ctl, a temporary directory, a
loopback port) and points the project's ledger at it (a postgresql:// URL, schema dp_synth), so
the run lock is held there too; the public zone and the warehouse stay files.

One project (the bundled example with its owner-only report, or without it under
`--no-report`; `--rows` rows, `model: {iterations: 200}`, a lifetime limit wide enough for every
run) under bench/work/reliability/. Every run is `dagster.materialize` of the whole dataset
(every asset and check) in its own Python process, as a CLI run is.

- Concurrency series: `--n` runs started at once, `--repeats` times. A run is *held* when it
  succeeded; its outputs are *consistent* when the rows it wrote are those its own noisy count
  asks for (`rows: same`), its Parquet (under its own run folder) holds them, its check results
  (beside that Parquet) passed and its measurements file is its own. After each round the
  synthetic table must equal the published Parquet.
- Kill series: `--kills` full runs, each killed with SIGKILL at a uniformly random moment of a
  typical run's duration; after each, a probe run of the dataset (`marginals` only: it takes the
  dataset, repairs what the killed run left, spends nothing) must succeed, and then the table
  must equal the published Parquet, no temporary file may be left, and the ledger's stale
  reservations are released, leaving nothing reserved. A kill is *survived* when all of that
  holds.
- Budget spent on failed runs: the rho the ledger charged to runs that did not succeed (killed
  ones: what their mechanisms had already drawn; the goal is nothing else), beside the total.

Results: bench/results/reliability.json.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
sys.path.insert(0, str(ROOT))

RUN_ONCE = ROOT / "tests" / "run_once.py"  # one materialization in its own process


def start(project, script: Path, *stages: str) -> subprocess.Popen:
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(
        [sys.executable, str(script), str(project.datasets), str(project.warehouse),
         str(project.ledger), str(project.public), *stages],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)


def finish(process: subprocess.Popen) -> dict:
    out, err = process.communicate()
    if process.returncode != 0:
        return {"success": False, "returncode": process.returncode, "error": err[-2000:]}
    return json.loads(out.strip().splitlines()[-1])


def requested(noisy_total) -> int | None:
    return None if noisy_total is None else max(int(round(float(noisy_total))), 1)


def consistent(project, run: dict) -> bool:
    """The run's rows, Parquet, measurements and check results are its own (module docstring),
    as its process read them from its own run folder when it ended (`own`: later runs prune old
    folders). The metadata shows the noisy count rounded to 0.1; the folder holds it exactly."""
    own = run.get("own") or {}
    if not run.get("success") or not own or own["folder"] != run["run_id"]:
        return False
    return (run.get("rows") == requested(own["exact_total"]) == own["parquet_rows"]
            and abs(own["exact_total"] - float(run["noisy_total"])) <= 0.051
            and bool(own["stored_checks"]) and all(own["stored_checks"])
            and all(run["checks"].values()))


def table_is_published(project) -> bool:
    """The synthetic table equals the published Parquet (both ways, with multiplicity)."""
    import duckdb

    from dp_synth_assets.core.sql import literal

    parquet = project.public / "example" / "synthetic.parquet"
    if not parquet.exists():
        return False
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        source = f"read_parquet({literal(str(parquet))})"
        return con.execute(
            f"SELECT (SELECT count(*) FROM (SELECT * FROM synthetic.example EXCEPT ALL "
            f"SELECT * FROM {source})) + (SELECT count(*) FROM (SELECT * FROM {source} "
            f"EXCEPT ALL SELECT * FROM synthetic.example))").fetchone()[0] == 0
    finally:
        con.close()


def leftovers(project) -> list[str]:
    return [str(p) for p in (project.public / "example").rglob("*") if p.name.endswith(".tmp")]


def charged_by_run(project) -> dict[str, float]:
    """rho charged per run, from the verified ledger (either store)."""
    from dp_synth_assets.infra.ledger import PrivacyLedger

    charged: dict[str, float] = {}
    for event in PrivacyLedger(project.ledger).events():
        if event["kind"] == "charge":
            charged[event["run_id"]] = charged.get(event["run_id"], 0.0) + event["rho"]
    return charged


def concurrency(project, script: Path, n: int, repeats: int) -> dict:
    rounds = []
    for _ in range(repeats):
        started = time.perf_counter()
        runs = [finish(p) for p in [start(project, script) for _ in range(n)]]
        rounds.append({
            "n": n, "seconds": round(time.perf_counter() - started, 1),
            "held": sum(bool(r.get("success")) for r in runs),
            "consistent": sum(consistent(project, r) for r in runs),
            "table_is_published": table_is_published(project),
            "failures": [r.get("error", "")[-300:] for r in runs if not r.get("success")],
        })
        print(json.dumps(rounds[-1]), flush=True)
    return {"n": n, "repeats": repeats, "rounds": rounds,
            "runs": n * repeats, "runs_held": sum(r["held"] for r in rounds),
            "outputs_consistent": sum(r["consistent"] for r in rounds),
            "tables_published": sum(r["table_is_published"] for r in rounds)}


def kills(project, script: Path, count: int, run_seconds: float, seed: int) -> dict:
    from dp_synth_assets.infra.ledger import PrivacyLedger

    rng = random.Random(seed)
    records, killed_runs = [], set()
    for k in range(count):
        before = set(charged_by_run(project))
        process = start(project, script)
        moment = rng.uniform(0.0, run_seconds * 1.1)
        time.sleep(moment)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        result = finish(process)
        killed = result.get("returncode") == -signal.SIGKILL
        new_runs = set(charged_by_run(project)) - before
        if killed:
            killed_runs |= new_runs
        probe = finish(start(project, script, "marginals"))
        ledger = PrivacyLedger(project.ledger)
        stale = ledger.release_stale()
        record = {
            "kill": k, "at_seconds": round(moment, 2), "killed": killed,
            "probe_succeeded": bool(probe.get("success")),
            "table_is_published": table_is_published(project),
            "temporaries_left": leftovers(project),
            "stale_reservations_released": len(stale),
            # nothing may stay reserved once the probe ran and stale reservations are released
            "reserved_rho_after": ledger.summary("example").reserved_rho,
        }
        record["survived"] = (record["probe_succeeded"] and record["table_is_published"]
                              and not record["temporaries_left"]
                              and record["reserved_rho_after"] == 0)
        records.append(record)
        print(json.dumps(record), flush=True)
    final = finish(start(project, script))
    charged = charged_by_run(project)
    return {
        "kills": sum(r["killed"] for r in records), "attempts": count,
        "survived": sum(r["survived"] for r in records if r["killed"]),
        "next_full_run_succeeded": bool(final.get("success")),
        "next_full_run_consistent": consistent(project, final),
        "rho_charged_to_killed_runs": sum(charged.get(r, 0.0) for r in killed_runs),
        "rho_charged_in_all": sum(charged.values()),
        "records": records,
    }


def series(project, args) -> dict:
    """Both series on one project (its ledger in one store)."""
    script = RUN_ONCE
    started = time.perf_counter()
    first = finish(start(project, script))
    run_seconds = time.perf_counter() - started
    assert first.get("success"), first
    return {
        "one_run_seconds": round(run_seconds, 1),
        "concurrency": concurrency(project, script, args.n, args.repeats),
        "kill": kills(project, script, args.kills, run_seconds, args.seed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--ledgers", default="sqlite,postgres",
                        help="comma-separated: sqlite, postgres (default: both)")
    parser.add_argument("--no-report", action="store_true",
                        help="drop the example's owner-only utility report (the smoke test's runs)")
    parser.add_argument("--workdir", type=Path, default=WORK / "reliability")
    parser.add_argument("--out", type=Path, default=RESULTS / "reliability.json")
    args = parser.parse_args()

    from tests.helpers import EXAMPLE_REPORT, make_project, postgres_server

    privacy = {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 1e4, "delta": 1e-6}}
    results = {"rows": args.rows, "model_iterations": 200,
               "settings": {"n": args.n, "repeats": args.repeats, "kills": args.kills,
                            "seed": args.seed, "report": not args.no_report}, "ledgers": {}}
    for store in args.ledgers.split(","):
        args.workdir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=args.workdir))
        project = make_project(work, rows=args.rows, privacy=privacy,
                               report=None if args.no_report else EXAMPLE_REPORT)
        print(f"== ledger: {store}", flush=True)
        if store == "sqlite":
            results["ledgers"][store] = series(project, args)
        elif store == "postgres":
            with postgres_server(skip=False) as server:
                project.ledger = server.url  # schema dp_synth; the run lock is held there too
                results["ledgers"][store] = series(project, args)
        else:
            parser.error(f"unknown ledger {store!r}: sqlite or postgres")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({store: {k: v for k, v in r.items() if k != "kill"} | {
        "kill": {k: v for k, v in r["kill"].items() if k != "records"}}
        for store, r in results["ledgers"].items()}, indent=2))


if __name__ == "__main__":
    main()
