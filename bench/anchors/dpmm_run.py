"""One anchor run: dpmm's MST or AIM pipeline (PyPI `dpmm` 0.1.9), in its own process.

Runs in its own venv (/work/venv-dpmm or `--python` of bench/suite.py; dpmm pins numpy<2, pandas
2.1 and opendp 0.12, which cannot share our environment):

    python3.11 -m venv /work/venv-dpmm && /work/venv-dpmm/bin/pip install dpmm

Two inputs:
- `--data codes.csv --domain domain.json` (a discretized table): every column is given to dpmm
  as a categorical with the public categories 0..k-1 (`domain={col: {"categories": ...}}`), so
  its preprocessing reads nothing from the data and spends nothing; the whole (epsilon, delta)
  goes to the model.
- `--raw table.csv` (a raw table): dpmm's full pipeline with its own preprocessing: numeric
  columns binned by PrivTree at `proc_epsilon` = 0.1 epsilon (split over those columns), the
  model at 0.9 epsilon (basic composition of the two, each at delta). dpmm reads a categorical
  column's categories, NULL indicators and constant columns from the data without noise (it
  logs "PrivacyLeakage ... will be imputed"): that part is not private and favours dpmm.
  On small tables dpmm's DP bounds fail (titanic_raw's 891 rows: its `approx_bounds` returns
  None and `get_bounds` raises TypeError; penguins_raw's 344: the bins it makes of them are
  refused by pandas, ValueError "Bin labels must be one fewer than the number of bin
  edges"). The run is then retried with every numeric column's exact minimum and maximum
  given to dpmm as its domain (`{"lower", "upper"}`: not private, favouring it again;
  PrivTree still bins inside them), and the record's note says so.

    python bench/anchors/dpmm_run.py --model aim --data codes.csv --domain domain.json \
        --epsilon 1 --delta 1e-9 --seed 0 --out synth.csv.gz

Rows: as many as the source has (dpmm's `generate` needs a count). Prints `RESULT {json}` last.
"""

import argparse
import json
import resource
import time
from pathlib import Path

import pandas as pd

PROC_SHARE = 0.1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("aim", "mst"), required=True)
    parser.add_argument("--data", type=Path, help="CSV of codes 0..k-1 (with --domain)")
    parser.add_argument("--domain", type=Path, help="JSON {column: size}")
    parser.add_argument("--raw", type=Path, help="raw CSV: dpmm's own preprocessing")
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--delta", type=float, default=1e-9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    from dpmm.pipelines.aim import AIMPipeline
    from dpmm.pipelines.mst import MSTPipeline

    pipeline_class = AIMPipeline if args.model == "aim" else MSTPipeline
    if args.raw:
        frame = pd.read_csv(args.raw)
        pipeline = pipeline_class(epsilon=(1 - PROC_SHARE) * args.epsilon, delta=args.delta,
                                  proc_epsilon=PROC_SHARE * args.epsilon, n_jobs=1)
        domain = None
        mode = f"raw: dpmm's preprocessing at epsilon {PROC_SHARE * args.epsilon:g}"
    else:
        sizes = {c: int(k) for c, k in json.loads(args.domain.read_text()).items()}
        frame = pd.read_csv(args.data)[list(sizes)].astype(str)
        domain = {c: {"categories": [str(v) for v in range(k)]} for c, k in sizes.items()}
        pipeline = pipeline_class(epsilon=args.epsilon, delta=args.delta, proc_epsilon=None,
                                  n_jobs=1)
        mode = "public domain: categories 0..k-1"
    started = time.perf_counter()
    note = ""
    try:
        pipeline.fit(frame, domain=domain, random_state=args.seed)
    except (TypeError, ValueError) as failure:  # dpmm's DP bounds failed (docstring)
        if not args.raw:
            raise
        numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
        domain = {c: {"lower": frame[c].min(), "upper": frame[c].max()} for c in numeric}
        note = (f"dpmm's DP bounds failed ({str(failure)[:80]}); rerun given each numeric "
                "column's exact min and max (not private, favours dpmm)")
        pipeline = pipeline_class(epsilon=(1 - PROC_SHARE) * args.epsilon, delta=args.delta,
                                  proc_epsilon=PROC_SHARE * args.epsilon, n_jobs=1)
        started = time.perf_counter()
        pipeline.fit(frame, domain=domain, random_state=args.seed)
    synth = pipeline.generate(n_records=len(frame), random_state=args.seed)
    seconds = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    synth[list(frame.columns)].to_csv(args.out, index=False)
    print("RESULT " + json.dumps({
        "status": "ok", "seconds": seconds, "rows": len(synth), "mode": mode, "note": note,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}), flush=True)


if __name__ == "__main__":
    main()
