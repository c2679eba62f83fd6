"""Print where a dataset's synthetic table is, its checks' results and its privacy budget.

`python -m dp_synth_assets.report <dataset>` (the last step of `make run`), with the paths
Dagster gets (the DP_SYNTH_* environment variables, dp_synth_assets.definitions). Reads public
artifacts and the ledger, never the source; with a `report:` block, also the owner-only utility
report's `report.json` from the private zone, whose headline figures it prints labelled as exact
and private (this runs in the owner's terminal, never in the Dagster event log).
"""

import json
import sys

from dp_synth_assets.budget import DatasetBudget
from dp_synth_assets.checks import CHECKS
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.definitions import build_definitions, environment_paths
from dp_synth_assets.artifacts import dataset_dir
from dp_synth_assets.infra.store import is_remote, published_folder
from dp_synth_assets.artifacts import synthetic_table


def main(dataset: str) -> int:
    """Print where `dataset`'s synthetic table is, its checks and its budget; 0 when every check
    ran and passed, else 1."""
    defs = build_definitions(**environment_paths())
    warehouse = defs.resources["warehouse"]
    ledger = defs.resources["ledger"].ledger()
    spec = load_registry(warehouse.base_dir + "/datasets.yaml")[dataset]
    budget = DatasetBudget.of(spec)
    print(f"\nSynthetic table of {dataset!r}:")
    print(f"  warehouse: {warehouse.database}  table {synthetic_table(dataset)}")
    # the stable links of a local zone; on an object store, the set `current` names
    folder = dataset_dir(warehouse, dataset)
    published = published_folder(folder) if is_remote(folder) else folder
    print(f"  parquet:   {published / 'synthetic.parquet'}")
    print("Checks (Great Expectations):")
    ok = True
    for name in CHECKS:
        path = published / "checks" / f"{name}.json"
        if not path.exists():
            print(f"  {name:14s} not run")
            ok = False
            continue
        passed = json.loads(path.read_text()).get("success")
        ok = ok and bool(passed)
        print(f"  {name:14s} {'passed' if passed else 'FAILED'}")
    docs = warehouse.public_path(dataset, "data_docs/index.html")
    if docs.exists():
        print(f"  GX Data Docs: {docs}")
    if spec.report is not None:
        print_utility_report(warehouse, dataset)
    s = ledger.summary(dataset)
    left = max(budget.limit_rho - s.spent_rho - s.reserved_rho, 0.0)
    print(f"Privacy budget (limit epsilon {spec.privacy.limit.epsilon} at delta {budget.delta:g}; "
          "every epsilon below is at that delta, rho adds up across runs):")
    print(f"  spent     epsilon {budget.epsilon(s.spent_rho):.4f}  (rho {s.spent_rho:.6g})")
    print(f"  remaining epsilon {budget.epsilon(left):.4f}  (rho {left:.6g})")
    print(f"  one more run costs epsilon {budget.epsilon(budget.run_rho):.4f} (rho {budget.run_rho:.6g};"
          f" epsilon {spec.privacy.epsilon} at its own delta {spec.privacy.delta:g})")
    return 0 if ok else 1


def print_utility_report(warehouse, dataset: str) -> None:
    """Where the owner-only report is and its headline figures, read from the private zone."""
    from dp_synth_assets.evaluation.report import REPORT_FILES

    path = warehouse.private_path(dataset, REPORT_FILES["json"])
    if not path.exists():
        print("Utility report: not materialized")
        return
    print("Utility report (PRIVATE: exact figures against the source, not DP; do not share):")
    print(f"  open {path.with_name(REPORT_FILES['html'])}")
    summary = json.loads(path.read_text()).get("summary", {})
    shown = {"fidelity": "mean 2-way TVD", "query_error": "3-way query error",
             "ml_f1_synthetic": "ML F1 synthetic", "ml_f1_real": "ML F1 source"}
    print(f"  compared with {summary.get('reference')}")
    for key, label in shown.items():
        if summary.get(key) is not None:
            print(f"  {label:18s} {summary[key]:.4f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "example"))
