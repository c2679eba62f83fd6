"""What one tick of the budget sensor (`<prefix>_budget`, dp_synth_assets/current_budget.py) costs.

    .venv/bin/python bench/budget_sensor.py                 # N = 10, 100, 500 datasets
    .venv/bin/python bench/budget_sensor.py --n 50 --runs 20

For each N, a registry of N copies of the bundled example's entry, each on its own source table
`main.example_<i>` (as bench/load_definitions.py), is written under bench/work/budget_sensor/,
and the ledger its definitions configure gets `--runs` finished runs per dataset (reserve,
charge, release: three rows each). The sensor is evaluated twice in this process on a throwaway
instance: `first_tick_seconds` observes every dataset (empty cursor), `quiet_tick_seconds` finds
nothing changed. `ledger_rows` is the ledger's size, `cursor_bytes` the sensor's cursor. Results
go to bench/results/budget_sensor.json (a new measurement of an (N, runs) replaces the old one).
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import dagster as dg
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
sys.path.insert(0, str(ROOT))
WORK = WORK / "budget_sensor"
RESULTS = RESULTS / "budget_sensor.json"


def measure(n: int, runs: int) -> dict:
    from dp_synth_assets.budget import DatasetBudget
    from dp_synth_assets.core.config import load_registry
    from dp_synth_assets.core.privacy import Spend
    from dp_synth_assets.definitions import build_definitions
    from tests.helpers import EXAMPLE_REPORT, example_entry

    folder = WORK / f"n{n}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    registry = {f"example_{i}": example_entry(source={"table": f"main.example_{i}"},
                                              report=EXAMPLE_REPORT)
                for i in range(n)}
    (folder / "datasets.yaml").write_text(yaml.safe_dump({"datasets": registry}, sort_keys=False))
    defs = build_definitions(folder / "datasets.yaml", folder / "warehouse.duckdb",
                             folder / "ledger.sqlite", folder / "public")
    ledger = defs.resources["ledger"].ledger()
    specs = load_registry(folder / "datasets.yaml")
    for name in registry:
        budget = DatasetBudget.of(specs[name])
        for r in range(runs):
            ledger.reserve(name, f"run-{r}", budget.run_rho, budget.limit_rho, delta=budget.delta)
            ledger.charge(name, f"run-{r}", "measurements", Spend("gaussian", budget.run_rho))
            ledger.release(name, f"run-{r}")
    sensor = defs.get_sensor_def("dp_synth_budget")
    with dg.instance_for_test() as instance:
        def tick(cursor=None):
            with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                         resources=defs.resources) as context:
                started = time.perf_counter()
                result = sensor.evaluate_tick(context)
                return result, time.perf_counter() - started
        first, first_seconds = tick()
        quiet, quiet_seconds = tick(first.cursor)
    assert len(first.asset_events) == n and not quiet.asset_events
    return {"n": n, "runs_per_dataset": runs, "ledger_rows": ledger.head()[0],
            "first_tick_seconds": round(first_seconds, 3),
            "quiet_tick_seconds": round(quiet_seconds, 3),
            "cursor_bytes": len(first.cursor), "load1": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[10, 100, 500])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    results = [measure(n, args.runs) for n in args.n]
    for r in results:
        print(json.dumps(r))
    measured = {(r["n"], r["runs_per_dataset"]) for r in results}
    kept = [r for r in (json.loads(RESULTS.read_text()) if RESULTS.exists() else [])
            if (r["n"], r["runs_per_dataset"]) not in measured]
    RESULTS.write_text(json.dumps(sorted(kept + results, key=lambda r: (
        r["n"], r["runs_per_dataset"])), indent=1) + "\n")


if __name__ == "__main__":
    main()
