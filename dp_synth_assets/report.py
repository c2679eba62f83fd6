"""Print where a dataset's synthetic table is, its checks' results and its privacy budget.

`python -m dp_synth_assets.report <dataset>` (the last step of `make run`). Reads only public
artifacts and the ledger, never the source.
"""

import json
import sys

from definitions import defs
from dp_synth_assets.budget import DatasetBudget
from dp_synth_assets.checks import CHECKS
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.pipeline import synthetic_table


def main(dataset: str) -> int:
    warehouse = defs.resources["warehouse"]
    ledger = defs.resources["ledger"].ledger()
    spec = load_registry(warehouse.base_dir + "/datasets.yaml")[dataset]
    budget = DatasetBudget.of(spec)
    print(f"\nSynthetic table of {dataset!r}:")
    print(f"  warehouse: {warehouse.database}  table {synthetic_table(dataset)}")
    print(f"  parquet:   {warehouse.public_path(dataset, 'synthetic.parquet')}")
    print("Checks (Great Expectations):")
    ok = True
    for name in CHECKS:
        path = warehouse.public_path(dataset, f"checks/{name}.json")
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
    report = warehouse.private_path(dataset, "report.json")
    if spec.report is not None and report.exists():  # owner-only: where it is, not what it says
        print(f"Utility report (owner-only, private zone): {report.parent}")
    s = ledger.summary(dataset)
    left = max(budget.limit_rho - s.spent_rho - s.reserved_rho, 0.0)
    print(f"Privacy budget (limit epsilon {spec.privacy.limit.epsilon} at delta {budget.delta:g}; "
          "every epsilon below is at that delta, rho adds up across runs):")
    print(f"  spent     epsilon {budget.epsilon(s.spent_rho):.4f}  (rho {s.spent_rho:.6g})")
    print(f"  remaining epsilon {budget.epsilon(left):.4f}  (rho {left:.6g})")
    print(f"  one more run costs epsilon {budget.epsilon(budget.run_rho):.4f} (rho {budget.run_rho:.6g};"
          f" epsilon {spec.privacy.epsilon} at its own delta {spec.privacy.delta:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "example"))
