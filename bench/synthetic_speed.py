"""Issue 35's synthetic side alone: sampling, decoding and writing at 1M and 10M rows.

    .venv/bin/python bench/synthetic_speed.py                 # 1M and 10M rows x 15 columns
    .venv/bin/python bench/synthetic_speed.py --rows 1000000 --parts

A model of the scale benchmark's table (`bench/scale_data.py`, `--fit-rows` rows, the
product's defaults at epsilon 1, seed 7) is fitted once with the notebook API and kept under
bench/work/synthetic_speed/ (plan, measurements and model; rewritten with `--refit`). Then, per
row count, the `synthetic` stage's path is timed the way the stage calls it: `stages.sample`,
the fidelity counter over the chunks and `synthesize.write_synthetic` into a DuckDB file with
its Parquet copy (`total_seconds`, and `seconds_per_million`; `total_cpu_seconds` is the CPU
time of this process's threads, less sensitive to the machine's load than the wall time). With
`--parts`, the parts are also timed apart on the same chunks: drawing the codes alone
(`sample_seconds`), counting (`count_seconds`) and decoding (`decode_seconds`, Arrow only,
nothing written).

Each record carries the load average before and after (`load1`), DuckDB's `memory_limit` of
the writing connection (`--memory-limit`; None: DuckDB's default) and the peak resident memory
of this process (`peak_mb`); they are merged into bench/results/synthetic_speed.json.
"""

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
sys.path.insert(0, str(ROOT))

WORK = WORK / "synthetic_speed"
RESULTS = RESULTS / "synthetic_speed.json"


def fitted(fit_rows: int, columns: int, refit: bool, iterations: int | None = None,
           chunk_rows: int = 1_000_000):
    """(plan, measurements, model, spec) of the scale table, fitted once and kept in WORK."""
    from dp_synth_assets.api import Synthesizer
    from dp_synth_assets.infra.store import FolderStore
    from scale_data import chunk, spec_columns

    folder = WORK / f"model_{fit_rows}_{columns}_{iterations or 'default'}"
    model = {"chunk_rows": chunk_rows, **({"iterations": iterations} if iterations else {})}
    synth = Synthesizer(columns=spec_columns(columns), epsilon=1.0, delta=1e-9, seed=7,
                        limit={"epsilon": 1000.0, "delta": 1e-6}, model=model)
    store = FolderStore(folder, "scale")
    if refit or not store.has("model"):
        from dp_synth_assets.example import DEFAULT_SEED

        synth.fit(chunk(fit_rows, columns, DEFAULT_SEED, 0))
        store.write_plan(synth.plan)
        store.write_measurements(synth.measurements)
        store.write_model(synth.model)
    return store.plan(), store.measurements(), store.model(), synth.spec


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(rows: int, plan, found, model, spec, parts: bool, memory_limit: str | None = None) -> dict:
    import duckdb
    import numpy as np

    from dp_synth_assets.core import stages
    from dp_synth_assets.core.domain import decode
    from dp_synth_assets.core.synthesize import write_synthetic
    from dp_synth_assets.evaluation.fidelity import MarginalCounter

    load = os.getloadavg()[0]
    record = {"kind": "synthetic_speed", "rows": rows, "columns": len(plan.columns),
              "chunk_rows": spec.model.chunk_rows, "cores": os.cpu_count()}
    database = WORK / "warehouse.duckdb"
    for suffix in ("", ".wal"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    started, cpu = time.perf_counter(), time.process_time()
    draw = stages.sample(model, found.noisy_total, spec.rows, spec.model.chunk_rows, n=rows,
                         seed=spec.seed)
    counter = MarginalCounter.of(found.measurements, plan.domain)
    con = duckdb.connect(str(database),
                         config={"memory_limit": memory_limit} if memory_limit else {})
    record["memory_limit"] = memory_limit
    try:
        written = write_synthetic(con, plan, counter.counting(draw.chunks), draw.decode_rng,
                                  "synthetic.scale", WORK / "synthetic.parquet", stamp="bench")
    finally:
        con.close()
    record["total_seconds"] = time.perf_counter() - started
    record["total_cpu_seconds"] = time.process_time() - cpu  # this process's threads, all cores
    assert written == rows
    record["seconds_per_million"] = record["total_seconds"] / (rows / 1e6)
    if parts:
        timing = {"sample_seconds": 0.0, "count_seconds": 0.0, "decode_seconds": 0.0}
        draw = stages.sample(model, found.noisy_total, spec.rows, spec.model.chunk_rows, n=rows,
                             seed=spec.seed)
        counter = MarginalCounter.of(found.measurements, plan.domain)
        chunks = iter(draw.chunks)
        while True:
            t0 = time.perf_counter()
            codes = next(chunks, None)
            t1 = time.perf_counter()
            timing["sample_seconds"] += t1 - t0
            if codes is None:
                break
            counter.add(codes)
            t2 = time.perf_counter()
            timing["count_seconds"] += t2 - t1
            decode(plan, codes, np.random.default_rng(1))
            timing["decode_seconds"] += time.perf_counter() - t2
        record.update(timing)
    record["peak_mb"] = peak_mb()
    record["load1"] = [load, os.getloadavg()[0]]
    return record


def save(records: list[dict]) -> None:
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    key = lambda r: (r["rows"], r["columns"], r.get("label"))  # noqa: E731
    merged = {key(r): r for r in old}
    merged.update({key(r): r for r in records})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(sorted(merged.values(), key=lambda r: (str(r.get("label")),
                                                                          r["rows"])), indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--columns", type=int, default=15)
    parser.add_argument("--fit-rows", type=int, default=200_000)
    parser.add_argument("--refit", action="store_true")
    parser.add_argument("--iterations", type=int, default=None,
                        help="model.iterations of the fit (default: the product's)")
    parser.add_argument("--chunk-rows", type=int, default=1_000_000, help="model.chunk_rows")
    parser.add_argument("--parts", action="store_true", help="also time the parts apart")
    parser.add_argument("--label", default="current", help="the record's label (e.g. before)")
    parser.add_argument("--memory-limit", default=None,
                        help="DuckDB's memory_limit of the writing connection (e.g. 1GB)")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    plan, found, model, spec = fitted(args.fit_rows, args.columns, args.refit,
                                      args.iterations, args.chunk_rows)
    records = []
    for rows in args.rows:
        record = {"label": args.label, **run(rows, plan, found, model, spec, args.parts,
                                             args.memory_limit)}
        records.append(record)
        print(json.dumps(record), flush=True)
    save(records)


if __name__ == "__main__":
    main()
