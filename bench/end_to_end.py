"""How long one Dagster run of the whole pipeline takes, per selection method, on the bundled
example (`--rows`, default 2,000; `--iterations`, default 200): the timings the tests do not assert.

    .venv/bin/python bench/end_to_end.py                  # aim and ppsyn
    .venv/bin/python bench/end_to_end.py --method auto absyn

Each method runs in a fresh project under bench/work/end_to_end/<method>/ (the example's table,
its datasets.yaml entry with `method:` set, a new ledger), materialized once, in process, on an
ephemeral instance, every asset and check. Recorded per method: `seconds` (wall time of the
run), `cpu_seconds` (this process's CPU time for it, which the load average inflates less),
`load1` (the machine's 1-minute load average at the start; the times scale with it), and
whether the run succeeded. Results go to bench/results/end_to_end.json.
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
WORK = WORK / "end_to_end"
RESULTS = RESULTS / "end_to_end.json"
sys.path.insert(0, str(ROOT))


def run(method: str, rows: int = 2000, iterations: int = 200) -> dict:
    import dagster as dg

    from tests.helpers import EXAMPLE_REPORT, make_project

    folder = WORK / method
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    project = make_project(folder, rows=rows, method=method, model={"iterations": iterations},
                           report=EXAMPLE_REPORT)
    defs = project.defs_fn()
    load1 = os.getloadavg()[0]
    started, cpu = time.perf_counter(), time.process_time()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    return {"method": method, "rows": rows, "iterations": iterations, "success": result.success,
            "seconds": round(time.perf_counter() - started, 1),
            "cpu_seconds": round(time.process_time() - cpu, 1), "load1": round(load1, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", nargs="+", default=["aim", "ppsyn"])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
    records = []
    for method in args.method:
        records.append(run(method, args.rows, args.iterations))
        print(json.dumps(records[-1]), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(records, indent=2) + "\n")


if __name__ == "__main__":
    main()
