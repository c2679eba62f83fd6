"""What the write check a run makes before it reserves budget costs (dp_synth_assets/writes.py).

    .venv/bin/python bench/write_check.py            # 30 repetitions
    .venv/bin/python bench/write_check.py --repeat 100

The bundled example's warehouse (3,000 rows) is written under bench/work/write_check/, with its
public and private zones beside it on the local disk. Each repetition times the parts of
`check_writes` on it: the three probe files (`store.probe_write`), the warehouse's probe table
(`writes.probe_warehouse`: a writable DuckDB connection, a table created and dropped) and the
free space of the three volumes (`store.volume_of`). Medians and maxima go to
bench/results/write_check.json.
"""

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
sys.path.insert(0, str(ROOT))
WORK = WORK / "write_check"
RESULTS = RESULTS / "write_check.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    from dp_synth_assets.infra.store import probe_write, volume_of
    from dp_synth_assets.resources.warehouse import WarehouseResource
    from dp_synth_assets.writes import folders, probe_warehouse
    from tests.helpers import EXAMPLE_REPORT, make_project

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    project = make_project(WORK, rows=3000, report=EXAMPLE_REPORT)
    warehouse = WarehouseResource(database=str(project.warehouse), public_dir=str(project.public),
                                  base_dir=str(WORK))
    timings = {"probe_files": [], "probe_warehouse": [], "free_space": []}
    for _ in range(args.repeat):
        started = time.perf_counter()
        for folder in folders(warehouse, "example").values():
            probe_write(folder)
        timings["probe_files"].append(time.perf_counter() - started)
        started = time.perf_counter()
        probe_warehouse(warehouse)
        timings["probe_warehouse"].append(time.perf_counter() - started)
        started = time.perf_counter()
        for folder in folders(warehouse, "example").values():
            volume_of(folder)
        timings["free_space"].append(time.perf_counter() - started)
    result = {"repeat": args.repeat,
              **{f"{k}_median_ms": round(1000 * statistics.median(v), 2)
                 for k, v in timings.items()},
              **{f"{k}_max_ms": round(1000 * max(v), 2) for k, v in timings.items()}}
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
