"""Issue 17's load benchmark: how long a code location with N registered datasets takes to load.

    .venv/bin/python bench/load_definitions.py                 # N = 1, 25, 100, 500
    .venv/bin/python bench/load_definitions.py --n 1 500 --distinct-epsilon

For each N, a registry of N copies of the bundled example's entry (tests/helpers.py
`example_entry`), each on its own source table `main.example_<i>`, is written under
bench/work/load/; with `--distinct-epsilon` every entry also gets its own run epsilon (so no two
entries share an (epsilon, delta) conversion). Each N is loaded in a fresh process, the way a
code server does, and timed in phases:

- `import_seconds`: `import dp_synth_assets.definitions` (Dagster included);
- `build_seconds`: `build_definitions(...)` (registry parsed and validated, every definition
  built);
- `repository_seconds`: `Definitions.get_repository_def()` (the asset graph resolved, resources
  bound, jobs and the implicit asset job built: what `Definitions.validate_loadable` does);
- `snapshot_seconds`: `RepositorySnap.from_def(..., defer_snapshots=True)`, the repository
  description a code server hands the webserver and daemon at start (`dagster dev`; each job's
  snapshot id is computed, its full snapshot deferred);
- `seconds`: the sum; `cpu_seconds`: the process's CPU time for all of it (what the load
  average inflates less); `load1`: the machine's 1-minute load average at the start (the times
  scale with it); `peak_mb`: the process's peak resident memory;
- `heavy_modules`: which of great_expectations, jax, mbi, sklearn, matplotlib were imported
  (none should be: they belong to the steps).

The warehouse, ledger and public folder are paths that do not exist; `touched` lists any of
them that loading created (none should be). Results go to bench/results/load_definitions.json.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
WORK = WORK / "load"
RESULTS = RESULTS / "load_definitions.json"
HEAVY = ("great_expectations", "jax", "mbi", "sklearn", "matplotlib")

CHILD = r"""
import json, os, resource, sys, time, warnings
warnings.simplefilter("ignore")
load1 = os.getloadavg()[0]
c0 = time.process_time()
t0 = time.perf_counter()
from dp_synth_assets.definitions import build_definitions
t1 = time.perf_counter()
folder = sys.argv[1]
paths = {k: os.path.join(folder, "absent", v) for k, v in
         {"warehouse": "warehouse.duckdb", "ledger": "ledger.sqlite", "public": "public"}.items()}
defs = build_definitions(os.path.join(folder, "datasets.yaml"), paths["warehouse"],
                         paths["ledger"], paths["public"])
t2 = time.perf_counter()
repo = defs.get_repository_def()
t3 = time.perf_counter()
from dagster._core.remote_representation.external_data import RepositorySnap
RepositorySnap.from_def(repo, defer_snapshots=True)
t4 = time.perf_counter()
print(json.dumps({
    "import_seconds": t1 - t0, "build_seconds": t2 - t1, "repository_seconds": t3 - t2,
    "snapshot_seconds": t4 - t3, "seconds": t4 - t0, "cpu_seconds": time.process_time() - c0,
    "load1": load1,
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "assets": len(list(repo.asset_graph.get_all_asset_keys())),
    "heavy_modules": [m for m in HEAVY_NAMES if m in sys.modules],
    "touched": sorted(k for k, p in paths.items() if os.path.exists(p)),
}))
""".replace("HEAVY_NAMES", repr(HEAVY))


AUTOMATION = {
    # the example's entry as it is: an external table resynthesized by its source-change sensor
    # (a sensor per dataset, targeting its assets; no job)
    "sensor": lambda i: {"source": {"table": f"main.example_{i}"}},
    # a host asset's table, resynthesized by declarative automation (one sensor in all, no job)
    "asset": lambda i: {"source": {"asset": ["host", f"example_{i}"],
                                   "table": f"main.example_{i}"}},
    # an external table materialized on demand (no sensor, no job)
    "none": lambda i: {"source": {"table": f"main.example_{i}"}, "on_source_change": "ignore"},
}


def write_registry(n: int, distinct_epsilon: bool, automation: str = "sensor") -> Path:
    """N copies of the example's entry, each on its own table (module docstring), automated as
    `automation` says (AUTOMATION)."""
    sys.path.insert(0, str(ROOT))
    import yaml

    from tests.helpers import EXAMPLE_REPORT, example_entry

    folder = WORK / f"n{n}{'_eps' if distinct_epsilon else ''}_{automation}"
    folder.mkdir(parents=True, exist_ok=True)
    datasets = {}
    for i in range(n):
        entry = example_entry(report=EXAMPLE_REPORT, **AUTOMATION[automation](i))
        if distinct_epsilon:
            entry["privacy"] = {**entry["privacy"], "epsilon": round(1.0 + i / 1000, 6)}
        datasets[f"example_{i}"] = entry
    (folder / "datasets.yaml").write_text(yaml.safe_dump({"datasets": datasets}, sort_keys=False))
    return folder


def measure(n: int, distinct_epsilon: bool, automation: str = "sensor") -> dict:
    folder = write_registry(n, distinct_epsilon, automation)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_ENABLE_COMPILATION_CACHE": "false"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    record = json.loads(out.stdout.strip().splitlines()[-1])
    return {"n": n, "distinct_epsilon": distinct_epsilon, "automation": automation,
            **{k: round(v, 3) if isinstance(v, float) else v for k, v in record.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 25, 100, 500])
    parser.add_argument("--distinct-epsilon", action="store_true")
    parser.add_argument("--automation", choices=sorted(AUTOMATION), default="sensor",
                        help="how each entry is automated (sensor: a sensor each)")
    parser.add_argument("--label", default="", help="stored with each record (e.g. a revision)")
    args = parser.parse_args()
    records = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    for n in args.n:
        record = {**measure(n, args.distinct_epsilon, args.automation), "label": args.label}
        print(json.dumps(record))
        key = (n, args.distinct_epsilon, args.automation, args.label)
        records = [r for r in records if (r["n"], r["distinct_epsilon"],
                                          r.get("automation", "sensor"), r.get("label", "")) != key]
        records.append(record)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(sorted(records, key=lambda r: (
        r.get("label", ""), r.get("automation", "sensor"), r["distinct_epsilon"], r["n"])),
                                  indent=1) + "\n")


if __name__ == "__main__":
    main()
