"""One run of our Dagster pipeline on a discretized table, in its own process.

`bench/compare_methods.py` starts this script once per (method, epsilon, seed) with our stack's
python, so the peak RSS it prints is that run's alone. The setup is bench/adult_pipeline.py's: the
CSV is loaded into a fresh DuckDB file in --workdir, every column is declared categorical with the
public categories 0..k-1 from the domain file (exhaustive: `other: false`), and all assets and asset checks
are materialized with `dg.materialize` (the in-process executor of our Definitions).

    python bench/anchors/ours_run.py --method privsyn --data adult.csv --domain adult-domain.json \
        --epsilon 1 --delta 1e-9 --seed 0 --workdir bench/work/compare/x --out synth.csv.gz

Accounting: the product converts (epsilon, delta) to rho with the tight conversion only
(`dp_synth_assets.core.privacy.rho_from_epsilon_delta`). With `--accounting paper` this script
computes the paper's rho (rho + 2 sqrt(rho log 1/delta) = epsilon, ABSyn Thm 4) and gives the
pipeline the epsilon at which the tight conversion yields that same rho, so the run spends exactly
the paper's rho without touching the product's code; the record shows both epsilons and the rho.

Prints one line `RESULT {json}` last: `seconds` (the whole materialization, checks included, as
bench/adult_pipeline.py measures it), `check_seconds` (the checks, from the run's public
progress: bench/progress.py),
`peak_mb` (this process's maximum RSS), `rows`, `rho` (the run's budget), `rho_spent` (the ledger's
total for the run) and `selected` (distinct multi-column cliques selected, or measured during
selection by adaptive methods). A method whose selection module does not exist yet prints
`RESULT {"status": "not_implemented", ...}` and exits with code 3.
"""

import argparse
import importlib
import json
import resource
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

NOT_IMPLEMENTED = 3


def result(payload: dict, code: int = 0) -> None:
    """Print the RESULT line and exit."""
    sys.stdout.flush()
    print("RESULT " + json.dumps(payload), flush=True)
    sys.exit(code)


def check_implemented(method: str) -> str | None:
    """None when `method` can run; otherwise why not (unknown method or missing module)."""
    try:
        from dp_synth_assets.core.select import METHODS
    except ImportError as e:
        return f"ImportError from dp_synth_assets.core.select: {e}"
    if method not in METHODS:
        return f"ValueError: unknown selection method {method!r}; choose one of {sorted(METHODS)}"
    try:
        importlib.import_module(f"dp_synth_assets.core.select.{METHODS[method].module}")
    except ImportError as e:
        return f"ImportError from dp_synth_assets.core.select: {e}"
    return None


def pipeline_epsilon(epsilon: float, delta: float, accounting: str) -> tuple[float, float]:
    """(epsilon to configure, rho it yields) so that the pipeline spends `accounting`'s rho."""
    from dp_synth_assets.core.privacy import epsilon_from_rho, rho_from_epsilon_delta

    if accounting == "tight":
        return epsilon, rho_from_epsilon_delta(epsilon, delta)
    rho = rho_from_epsilon_delta(epsilon, delta, accounting="paper")
    # the tight epsilon of the paper's rho; the pipeline's bisection rounds rho down, so it
    # spends at most the paper's rho (equal to ~1e-12 relative)
    configured = epsilon_from_rho(rho, delta)
    return configured, rho_from_epsilon_delta(configured, delta)


def prepare_workdir(run_dir: Path, real, domain: dict, method: str, epsilon: float, delta: float,
                    seed: int, selection: dict | None = None) -> None:
    """An emptied `run_dir` with the table in a fresh DuckDB file (`main.adult`) and a
    datasets.yaml entry `adult`: every column categorical with the public categories 0..k-1
    (exhaustive: `other: false`). bench/anchors/generator_run.py uses the same set-up."""
    import duckdb
    import yaml

    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    con = duckdb.connect(str(run_dir / "w.duckdb"))
    try:
        con.register("source_frame", real)
        con.execute("CREATE TABLE main.adult AS SELECT * FROM source_frame")
    finally:
        con.close()
    entry = {
        "source": {"table": "main.adult"},
        "columns": {c: {"kind": "categorical", "categories": list(range(k)), "other": False}
                    for c, k in domain.items()},
        "privacy": {"epsilon": epsilon, "delta": delta,
                    "limit": {"epsilon": max(100.0, 2 * epsilon), "delta": 1e-6}},
        "method": method, "rows": "same", "seed": seed,
    }
    if selection:
        entry["selection"] = selection
    (run_dir / "datasets.yaml").write_text(yaml.safe_dump({"datasets": {"adult": entry}}))


def check_seconds(instance, run) -> float:
    """The checks' seconds, from the run's public progress (bench/progress.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
    from progress import run_stage_times

    return run_stage_times(instance, run.run_id).get("checks", {}).get("seconds", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", required=True)
    parser.add_argument("--data", type=Path, required=True, help="discretized CSV (ints 0..k-1)")
    parser.add_argument("--domain", type=Path, required=True, help="JSON {column: size}")
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--delta", type=float, default=1e-9)
    parser.add_argument("--accounting", choices=("tight", "paper"), default="tight")
    parser.add_argument("--seed", type=int, default=0, help="datasets.yaml `seed` (not the noise)")
    parser.add_argument("--workdir", type=Path, required=True, help="emptied, then used for the run")
    parser.add_argument("--out", type=Path, required=True, help="CSV path for the synthetic rows")
    args = parser.parse_args()

    base = {"method": args.method, "epsilon": args.epsilon, "seed": args.seed}
    missing = check_implemented(args.method)
    if missing:
        result({**base, "status": "not_implemented", "note": missing}, NOT_IMPLEMENTED)

    import dagster as dg
    import pandas as pd

    from dp_synth_assets.definitions import build_definitions
    from dp_synth_assets.resources.ledger import PrivacyLedger

    domain = json.loads(args.domain.read_text())
    cols = list(domain)
    real = pd.read_csv(args.data)[cols]
    configured, rho = pipeline_epsilon(args.epsilon, args.delta, args.accounting)

    run_dir = args.workdir
    prepare_workdir(run_dir, real, domain, args.method, configured, args.delta, args.seed)
    defs = build_definitions(run_dir / "datasets.yaml", run_dir / "w.duckdb",
                             run_dir / "ledger.sqlite", run_dir / "public")

    started = time.perf_counter()
    instance = dg.DagsterInstance.ephemeral()
    run = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                         instance=instance)
    seconds = time.perf_counter() - started
    if not run.success:
        result({**base, "status": "failed", "note": "dagster run failed", "seconds": seconds}, 1)

    synth = pd.read_parquet(run_dir / "public" / "adult" / "synthetic.parquet")[cols]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    synth.to_csv(args.out, index=False)
    selected = json.loads((run_dir / "public" / "adult" / "selection.json").read_text())
    rho_spent = PrivacyLedger(run_dir / "ledger.sqlite").summary("adult").spent_rho
    result({
        **base,
        "status": "ok",
        "delta": args.delta,
        "accounting": args.accounting,
        "configured_epsilon": configured,
        "rho": rho,
        "rho_spent": rho_spent,
        "seconds": seconds,
        "check_seconds": check_seconds(instance, run),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "rows": len(synth),
        "selected": len(set(map(tuple, selected["cliques"]))
                        | {tuple(m["clique"]) for m in selected.get("measured", [])
                           if len(m["clique"]) > 1}),
    })


if __name__ == "__main__":
    main()
