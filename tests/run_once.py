"""One materialization of dataset `example` in a process of its own, as a CLI run is (used by
tests/test_runs.py and bench/reliability.py):

    python tests/run_once.py <datasets.yaml> <warehouse> <ledger> <public_dir> [stage ...]

materializes the stages (default: preprocessed to synthetic, with the checks; no utility
report) and prints one JSON line: the run's id and success, the noisy count and row count its
metadata shows, its Parquet, its check results, and `own`: what its own run folder holds, read
as soon as the run ends (a later run prunes old folders when it publishes): the exact noisy
count, the Parquet's rows and the stored check outcomes.

With KILL_AT=<dataset folder> the process kills itself (SIGKILL) at the first rename onto that
folder's synthetic.parquet or `current`: once the synthetic table is committed and before its
Parquet is published.
"""

import json
import os
import signal
import sys
from pathlib import Path

kill_at = os.environ.get("KILL_AT")
if kill_at:
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        dst = Path(dst)
        if dst.parent == Path(kill_at) and dst.name in ("synthetic.parquet", "current"):
            os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst, *args, **kwargs)
    os.replace = replace

import dagster as dg  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from dp_synth_assets.definitions import build_definitions  # noqa: E402

STAGES = ["preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]

datasets, warehouse, ledger, public = sys.argv[1:5]
defs = build_definitions(datasets, warehouse, ledger, public)
selection = [dg.AssetKey(["example", s]) for s in sys.argv[5:] or STAGES]
result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                        selection=selection, raise_on_error=False)
metadata = {}
for event in result.get_asset_materialization_events():
    m = event.step_materialization_data.materialization
    metadata[m.asset_key.path[-1]] = {k: getattr(v, "value", v) for k, v in m.metadata.items()}
parquet = str(metadata.get("synthetic", {}).get("parquet"))
folder, own = Path(parquet).parent, {}
if (folder / "measurements.json").exists():
    own = {"folder": folder.name,
           "exact_total": json.loads((folder / "measurements.json").read_text())["noisy_total"],
           "parquet_rows": pq.read_metadata(parquet).num_rows,
           "stored_checks": [json.loads(p.read_text()).get("success")
                             for p in (folder / "checks").glob("*.json")]}
# a failed step's message (what a test reports when a run it expected to succeed did not)
failures = [e.step_failure_data.error.to_string()[-2000:] for e in result.all_events
            if e.is_step_failure and e.step_failure_data.error is not None]
print(json.dumps({
    "run_id": result.run_id, "success": result.success, "failures": failures,
    "noisy_total": metadata.get("measurements", {}).get("noisy_total"),
    "rows": metadata.get("synthetic", {}).get("dagster/row_count"),
    "parquet": parquet, "own": own,
    "checks": {e.check_name: e.passed for e in result.get_asset_check_evaluations()},
}, default=str))
