"""One step of bench/compare_generators.py in its own process: measure once, or generate once.

    python bench/anchors/generator_run.py measure --method absyn --data adult.csv \
        --domain adult-domain.json --epsilon 1 --delta 1e-9 --seed 0 --workdir W
    python bench/anchors/generator_run.py generate --generator gum --workdir W --out synth.csv.gz
    python bench/anchors/generator_run.py sample --workdir W --rows 1000000

`measure` sets up --workdir with bench/anchors/ours_run.py's `prepare_workdir` (the CSV in a
fresh DuckDB file, every column categorical with the public categories 0..k-1) and materializes the pipeline up to
`measurements` with our Dagster definitions. `--method manual` measures every pair (`selection.
marginals: all_pairs`): the dense selection of issue 5. `generate` rewrites the entry's
`generator` (and `model.max_clique_cells` if given) and materializes `model` and `synthetic` only,
so every engine gets the very same noisy measurements; it prints the fit and sample seconds (the
two stages' seconds from the run's public progress, bench/progress.py), this process's peak RSS and its worker processes' largest peak RSS
(parallel_pgm fits in children), and the engine `auto` chose.

`sample` loads the fitted model.npz and draws --rows rows in memory (no Dagster), for the
sampling-speed claim: seconds, peak RSS and its growth against the output's size.

Prints `RESULT {json}` last; exit code 1 when the Dagster run failed (the note says why).
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/


def result(payload: dict, code: int = 0) -> None:
    sys.stdout.flush()
    print("RESULT " + json.dumps(payload), flush=True)
    sys.exit(code)


def failure_note(run) -> str:
    for event in run.all_events:
        if event.event_type_value == "STEP_FAILURE":
            data = event.event_specific_data
            user = getattr(data, "user_failure_data", None)
            if user is not None and user.description:
                return user.description
            return str(data.error.message if data.error else event.message)[:500]
    return "dagster run failed"


def stage_seconds(instance, run, expect=None) -> dict[str, float]:
    """Each stage's seconds from the run's public progress (bench/progress.py)."""
    from progress import run_stage_times

    return {k: v["seconds"] for k, v in run_stage_times(instance, run.run_id, expect).items()}


def entry_path(workdir: Path) -> Path:
    return workdir / "datasets.yaml"


def definitions(workdir: Path):
    from dp_synth_assets.definitions import build_definitions

    return build_definitions(entry_path(workdir), workdir / "w.duckdb", workdir / "ledger.sqlite",
                             workdir / "public")


def measure(args) -> None:
    import dagster as dg
    import pandas as pd

    from ours_run import prepare_workdir

    domain = json.loads(args.domain.read_text())
    real = pd.read_csv(args.data)[list(domain)]
    prepare_workdir(args.workdir, real, domain, args.method, args.epsilon, args.delta, args.seed,
                    {"marginals": "all_pairs"} if args.method == "manual" else None)
    defs = definitions(args.workdir)
    stages = ["preprocessed", "marginals", "selection", "measurements"]
    started = time.perf_counter()
    run = dg.materialize(list(defs.assets), resources=defs.resources,
                         instance=dg.DagsterInstance.ephemeral(),
                         selection=[dg.AssetKey(["adult", s]) for s in stages], raise_on_error=False)
    seconds = time.perf_counter() - started
    if not run.success:
        result({"status": "failed", "note": failure_note(run), "seconds": seconds}, 1)
    found = json.loads((args.workdir / "public" / "adult" / "measurements.json").read_text())
    result({"status": "ok", "seconds": seconds,
            "measurements": len(found["measurements"]),
            "cliques": [m["clique"] for m in found["measurements"] if len(m["clique"]) > 1]})


def generate(args) -> None:
    import dagster as dg
    import pandas as pd
    import yaml

    doc = yaml.safe_load(entry_path(args.workdir).read_text())
    entry = doc["datasets"]["adult"]
    entry["generator"] = args.generator
    if args.max_clique_cells:
        entry.setdefault("model", {})["max_clique_cells"] = args.max_clique_cells
    entry_path(args.workdir).write_text(yaml.safe_dump(doc))
    defs = definitions(args.workdir)
    started, instance = time.perf_counter(), dg.DagsterInstance.ephemeral()
    run = dg.materialize(list(defs.assets), resources=defs.resources, instance=instance,
                         selection=[dg.AssetKey(["adult", s]) for s in ("model", "synthetic")],
                         raise_on_error=False)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    if not run.success:
        result({"status": "failed", "note": failure_note(run), "seconds": seconds,
                "peak_mb": peak}, 1)
    steps = stage_seconds(instance, run, expect=("model", "synthetic"))
    model_meta = {}
    for e in run.get_asset_materialization_events():
        if e.asset_key == dg.AssetKey(["adult", "model"]):
            model_meta = {k: v.value for k, v in e.materialization.metadata.items()}
    synth = pd.read_parquet(args.workdir / "public" / "adult" / "synthetic.parquet")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    synth.to_csv(args.out, index=False)
    result({"status": "ok", "seconds": seconds,
            "fit_seconds": steps.get("model"), "sample_seconds": steps.get("synthetic"),
            "peak_mb": peak, "workers_peak_mb": workers, "rows": len(synth),
            "engine": model_meta.get("generator"), "reason": model_meta.get("choice_reason")})


def current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def sample_only(args) -> None:
    """Draw --rows rows from the fitted model.npz (no Dagster, no writing): seconds and memory."""
    import numpy as np

    from dp_synth_assets.core import generate as engines

    model = engines.load(str(args.workdir / "public" / "adult" / "model.npz"))
    before = current_rss_mb()
    started = time.perf_counter()
    codes = engines.sample(model, args.rows, 0)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result({"status": "ok", "rows": args.rows, "seconds": seconds, "peak_mb": peak,
            "peak_growth_mb": peak - before,  # peak during sampling above the RSS before it
            "output_mb": sum(np.asarray(v).nbytes for v in codes.values()) / 2**20,
            "model": type(model).__name__})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--method", default="absyn")
    m.add_argument("--data", type=Path, required=True)
    m.add_argument("--domain", type=Path, required=True)
    m.add_argument("--epsilon", type=float, required=True)
    m.add_argument("--delta", type=float, default=1e-9)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--workdir", type=Path, required=True)
    g = sub.add_parser("generate")
    g.add_argument("--generator", required=True)
    g.add_argument("--workdir", type=Path, required=True)
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--max-clique-cells", type=int, default=None)
    s = sub.add_parser("sample")
    s.add_argument("--workdir", type=Path, required=True)
    s.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    {"measure": measure, "generate": generate, "sample": sample_only}[args.step](args)


if __name__ == "__main__":
    main()
