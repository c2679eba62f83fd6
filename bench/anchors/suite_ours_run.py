"""One run of ours for bench/suite.py, in its own process: a datasets.yaml entry, fitted and sampled.

    python bench/anchors/suite_ours_run.py --registry run/datasets.yaml --dataset t \
        --source table.csv --out synth.parquet

The entry is read with `core.config.load_registry` (so every datasets.yaml rule applies, and an
entry without `method:` gets the project's default) and run through the notebook API
(`Synthesizer.from_spec(spec).fit(source).sample()`): the same stage functions, budget split and
generator choice the Dagster pipeline's assets call, without Dagster's own overhead (event log,
asset checks). `sample()` draws the entry's `rows` (`same`: the noisy row count), decoded and cast
to the declared SQL types; the rows are written to --out (Parquet), the run's encoding plan
(public) beside it as plan.json, to read which bins and density a score came from, and the
selection's marginals (those measured on groups under `coarse`) as selected.json.

Prints `RESULT {json}` last: `seconds` (fit + sample), `peak_mb` (this process's maximum RSS),
`rows`, `method`, `rho` (the run's budget), `rho_spent`, `selected` (multi-column marginals
measured), `generator`, `picked` (`auto`'s choice, else None) and the
two public figures it was picked by, `score_noise_share` and `mst_edge_noise`, and
`dropped_rounds`: the rounds of absyn's greedy that its step 6 did not keep (0013-absyn.md).
"""

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", type=Path, required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--source", type=Path, required=True, help="CSV or Parquet file")
    parser.add_argument("--out", type=Path, required=True, help="Parquet path for the rows")
    args = parser.parse_args()

    import pyarrow.parquet as pq

    from dp_synth_assets.api import Synthesizer
    from dp_synth_assets.core.config import load_registry

    spec = load_registry(args.registry)[args.dataset]
    started = time.perf_counter()
    synth = Synthesizer.from_spec(spec).fit(str(args.source))
    table = synth.sample()
    seconds = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, args.out)
    (args.out.parent / "plan.json").write_text(synth.plan.to_json())  # public: for diagnosis
    report = synth.report
    chosen = synth.selection
    (args.out.parent / "selected.json").write_text(json.dumps({  # public: which marginals, how
        "cliques": [list(c) for c in chosen.cliques] if chosen else [],
        "coarse": [list(c) for c in (chosen.coarse or {})] if chosen else []}))
    print("RESULT " + json.dumps({
        "status": "ok", "seconds": seconds, "rows": table.num_rows, "method": report.method,
        "rho": report.rho, "rho_spent": report.rho_spent,
        "selected": sum(1 for m in report.measurements if len(m["clique"]) > 1),
        "generator": report.generator,
        **{k: (synth.selection.details or {}).get(k) if synth.selection else None
           for k in ("picked", "score_noise_share", "mst_edge_noise")},
        "dropped_rounds": sum(1 for r in ((synth.selection.details or {}).get("rounds") or [])
                              if r.get("kept") is False) if synth.selection else None,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}), flush=True)


if __name__ == "__main__":
    main()
