"""Accuracy and time of the whole pipeline on adult (discretized), with the product's defaults.

Runs the real Dagster assets on `../shared/datasets/adult` (loaded into a DuckDB file under
bench/work/), then compares the synthetic table with the source (owner-side evaluation):
average 2-way TVD over all pairs and 3-way TVD over 200 fixed random triples (benchmark paper
section 8.3), and the two reference points of docs/decisions/0021-benchmarks.md computed in the same session:
a bootstrap resample of the source and independent columns drawn from the exact 1-way marginals.

    .venv/bin/python bench/adult_pipeline.py [--epsilon 1.0] [--repeats 2]

Writes bench/results/adult_pipeline.json (a list of flat records).
"""

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import DATASETS, RESULTS, WORK  # noqa: E402
sys.path.insert(0, str(ROOT))
ADULT = DATASETS / "adult"

from dp_synth_assets.definitions import build_definitions  # noqa: E402


def tvd(a: pd.DataFrame, b: pd.DataFrame, cols: tuple[str, ...]) -> float:
    pa = a.groupby(list(cols)).size() / len(a)
    pb = b.groupby(list(cols)).size() / len(b)
    joined = pd.concat([pa, pb], axis=1).fillna(0.0)
    return 0.5 * float((joined.iloc[:, 0] - joined.iloc[:, 1]).abs().sum())


def fidelity(real: pd.DataFrame, synth: pd.DataFrame, triples) -> tuple[float, float]:
    pairs = list(itertools.combinations(real.columns, 2))
    return (float(np.mean([tvd(real, synth, p) for p in pairs])),
            float(np.mean([tvd(real, synth, t) for t in triples])))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--method", default="privsyn")
    parser.add_argument("--iterations", type=int, default=None, help="model.iterations")
    parser.add_argument("--max-model-mb", type=float, default=None, help="selection.max_model_mb")
    args = parser.parse_args()
    if not ADULT.exists():
        sys.exit(f"needs {ADULT} (the shared datasets); not found")
    domain = json.loads((ADULT / "adult-domain.json").read_text())
    work = WORK
    work.mkdir(parents=True, exist_ok=True)
    real = pd.read_csv(ADULT / "adult.csv")[list(domain)]
    rng = np.random.default_rng(0)
    cols = list(domain)
    triples = [tuple(sorted(rng.choice(len(cols), 3, replace=False))) for _ in range(200)]
    triples = [tuple(cols[i] for i in t) for t in triples]
    records = []
    boot = real.sample(len(real), replace=True, random_state=1)
    indep = pd.DataFrame({c: rng.choice(real[c].to_numpy(), len(real)) for c in cols})
    for name, frame in (("bootstrap", boot), ("independent", indep)):
        t2, t3 = fidelity(real, frame, triples)
        records.append({"method": name, "epsilon": None, "seed": 0, "tvd2": t2, "tvd3": t3,
                        "seconds": 0.0})
        print(f"{name:12s} tvd2 {t2:.4f} tvd3 {t3:.4f}")
    for rep in range(args.repeats):
        run_dir = work / f"adult_{rep}"
        if run_dir.exists():
            import shutil

            shutil.rmtree(run_dir)
        run_dir.mkdir()
        con = duckdb.connect(str(run_dir / "w.duckdb"))
        con.register("adult", real)
        con.execute("CREATE TABLE main.adult AS SELECT * FROM adult")
        con.close()
        entry = {
            "source": {"table": "main.adult"},
            # the public domain file is exhaustive: no `other` code
            "columns": {c: {"kind": "categorical", "categories": list(range(k)), "other": False}
                        for c, k in domain.items()},
            "privacy": {"epsilon": args.epsilon, "delta": 1e-9,
                        "limit": {"epsilon": 100.0, "delta": 1e-6}},
            "method": args.method, "rows": "same", "seed": rep,
        }
        if args.iterations:
            entry["model"] = {"iterations": args.iterations}
        if args.max_model_mb:
            entry["selection"] = {"max_model_mb": args.max_model_mb}
        (run_dir / "datasets.yaml").write_text(yaml.safe_dump({"datasets": {"adult": entry}}))
        defs = build_definitions(run_dir / "datasets.yaml", run_dir / "w.duckdb",
                                 run_dir / "ledger.sqlite", run_dir / "public")
        started = time.perf_counter()
        result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                                instance=dg.DagsterInstance.ephemeral())
        seconds = time.perf_counter() - started
        assert result.success
        synth = pd.read_parquet(run_dir / "public" / "adult" / "synthetic.parquet")[cols]
        t2, t3 = fidelity(real, synth, triples)
        selected = json.loads((run_dir / "public" / "adult" / "selection.json").read_text())
        records.append({"method": args.method, "epsilon": args.epsilon, "delta": 1e-9,
                        "accounting": "tight", "seed": rep, "tvd2": t2, "tvd3": t3,
                        "seconds": seconds, "selected": len(selected["cliques"]),
                        "iterations": args.iterations, "max_model_mb": args.max_model_mb})
        print(f"{args.method} eps {args.epsilon} rep {rep}: tvd2 {t2:.4f} tvd3 {t3:.4f} "
              f"{seconds:.1f}s ({len(selected['cliques'])} pairs)")
    out = RESULTS / f"adult_pipeline_{args.method}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
