"""AIM against absyn on adult (discretized), through the notebook API, one process per run.

Each (method, epsilon, seed) is one `Synthesizer(...).fit(adult)` + `sample()` in this process,
timed with `time.perf_counter` (fit = select + measure + the final model; sample = the rows);
every column is declared categorical with its public categories 0..k-1 (nothing is spent on
preprocessing). The 2-way TVD is the average over all 91 pairs and the 3-way TVD over 200 fixed
random triples, owner-side, with `bench/compare_methods.py`'s `Fidelity`. `load1` is the 1-minute
load average when the run ended (2 cores shared with other work here: above about 2, the time
is inflated). Records go to bench/results/aim.json (merged by method, epsilon, seed) and a table
of them to bench/results/aim.md.

    python bench/aim_adult.py --epsilons 1 0.2 --seeds 0 1 --methods aim absyn
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import DATASETS, RESULTS  # noqa: E402
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
ADULT = DATASETS / "adult"
DELTA = 1e-9


def run_one(real: pd.DataFrame, domain: dict, method: str, epsilon: float, seed: int,
            fidelity) -> dict:
    from dp_synth_assets import Synthesizer

    columns = {c: {"kind": "categorical", "categories": list(range(k)), "other": False}
               for c, k in domain.items()}
    synth = Synthesizer(columns, epsilon=epsilon, delta=DELTA, method=method, seed=seed)
    started = time.perf_counter()
    synth.fit(real)
    fitted = time.perf_counter()
    table = synth.sample(len(real), seed=seed).to_pandas()
    ended = time.perf_counter()
    tvd2, tvd3 = fidelity(table)
    selection = synth.selection
    rounds = selection.details.get("rounds", []) if selection else []
    report = synth.report
    return {"method": method, "epsilon": epsilon, "delta": DELTA, "seed": seed,
            "tvd2": round(tvd2, 5), "tvd3": round(tvd3, 5),
            "seconds": round(ended - started, 1), "fit_seconds": round(fitted - started, 1),
            "rounds": len(rounds),
            "annealed": sum(1 for r in rounds if r.get("annealed")),
            "measured": len(report.measurements) - len(domain),
            "rho": report.rho, "rho_spent": report.rho_spent,
            "load1": round(os.getloadavg()[0], 2)}


def table_md(records: list[dict]) -> str:
    lines = ["| method | epsilon | seed | tvd2 | tvd3 | seconds (fit) | rounds (annealed) | "
             "measured marginals | load1 |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(records, key=lambda r: (-r["epsilon"], r["seed"], r["method"])):
        lines.append(f"| {r['method']} | {r['epsilon']:g} | {r['seed']} | {r['tvd2']:.4f} | "
                     f"{r['tvd3']:.4f} | {r['seconds']:.0f} ({r['fit_seconds']:.0f}) | "
                     f"{r['rounds']} ({r['annealed']}) | {r['measured']} | {r['load1']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--methods", nargs="+", default=["aim", "absyn"])
    args = parser.parse_args()

    from compare_methods import Fidelity

    domain = json.loads((ADULT / "adult-domain.json").read_text())
    real = pd.read_csv(ADULT / "adult.csv")[list(domain)]
    fidelity = Fidelity(real, domain)
    path = RESULTS / "aim.json"
    records = json.loads(path.read_text()) if path.exists() else []
    for epsilon in args.epsilons:
        for seed in args.seeds:
            for method in args.methods:
                record = run_one(real, domain, method, epsilon, seed, fidelity)
                print(json.dumps(record), flush=True)
                records = [r for r in records if (r["method"], r["epsilon"], r["seed"]) !=
                           (method, epsilon, seed)] + [record]
                path.write_text(json.dumps(records, indent=1) + "\n")
    print(table_md(records))


if __name__ == "__main__":
    main()
