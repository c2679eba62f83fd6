"""Where the benchmark scripts read their tables and write their files (shared by every script).

- `RESULTS`: the records (`bench/results/`, committed); `BENCH_RESULTS` overrides it;
- `WORK`: working files, databases and logs (`bench/work/`, not committed); `BENCH_WORK`;
- `DATASETS`: the public benchmark tables a clone does not include (`../shared/datasets` beside
  the checkout: adult discretized with its domain, the raw CSVs); `BENCH_DATASETS`.

tests/test_bench.py points all three at a temporary folder, with tiny generated tables, so a
smoke run writes nothing into the repository.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("BENCH_RESULTS", ROOT / "bench" / "results"))
WORK = Path(os.environ.get("BENCH_WORK", ROOT / "bench" / "work"))
DATASETS = Path(os.environ.get("BENCH_DATASETS", ROOT.parent / "shared" / "datasets"))


def need(path: Path) -> Path:
    """`path` (a table of DATASETS) if it exists; else stop, naming the folder looked in."""
    if not path.exists():
        sys.exit(f"needs ../shared/datasets: {path} not found (BENCH_DATASETS names another "
                 "folder)")
    return path
