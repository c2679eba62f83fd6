"""Selection methods, `auto` and independent columns side by side, in process (issue 16).

For each table, epsilon (delta 1e-9, tight accounting) and seed: the method's selection on the
exact marginals of the table's integer codes, the measurement stage as `stages.measure` runs it
(measurement plan, guard, consistency), a `pgm` fit (`--iterations`) and as many sampled rows as
the source has; then the average 2-way TVD over all column pairs against the source. No
preprocessing (the tables are already codes over a public domain). References: `independent`
(noisy 1-way marginals only, the whole budget split by c^(2/3), their product) and
`noguard-<method>` (the same run without the guard) when `--noguard`.

    python bench/select_auto.py --tables wide small --epsilons 0.2 1 --seeds 1
Writes bench/results/auto_rule.json (records) and prints a markdown table.
"""

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from dp_synth_assets.core import generate
from dp_synth_assets.core.budget import measurement_plan
from dp_synth_assets.core.config import ModelSettings, SelectionSettings
from dp_synth_assets.core.measure import make_consistent, measure, measure_marginal, noisy_total, optimal_split
from dp_synth_assets.core.privacy import rho_from_epsilon_delta
from dp_synth_assets.core.select import METHODS, Budget, select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import DATASETS, RESULTS  # noqa: E402
sys.path.insert(0, str(ROOT))
from tests.helpers import counting_oracle  # noqa: E402  (the in-memory marginal oracle)



def chain_table(n: int, d: int, flip: float, seed: int) -> dict[str, np.ndarray]:
    """A known Bayesian network: a Markov chain of d binary columns (each copies the previous
    one except with probability `flip`); every fourth column is ternary (its parent's value plus
    noise), so true edges are (x_{i-1}, x_i)."""
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, 2, n)]
    for i in range(1, d):
        prev = cols[-1] % 2
        nxt = np.where(rng.random(n) < flip, 1 - prev, prev)
        if i % 4 == 0:
            nxt = nxt + (rng.random(n) < 0.3)
        cols.append(nxt)
    return {f"x{i:02d}": c for i, c in enumerate(cols)}


def load(name: str) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    if name == "wide":
        data = chain_table(10_000, 24, 0.15, seed=0)
    elif name in ("adult", "small"):
        import pandas as pd
        frame = pd.read_csv(DATASETS / "adult" / "adult.csv")
        domain = json.loads((DATASETS / "adult" / "adult-domain.json").read_text())
        if name == "small":  # 1,304 rows x 9 columns, as the small table
            frame = frame.sample(min(1304, len(frame)), random_state=0)[list(domain)[:9]]
            domain = {k: domain[k] for k in frame.columns}
        return {c: frame[c].to_numpy() for c in frame.columns}, domain
    elif name == "example":
        from dp_synth_assets.example import generate_example
        frame = generate_example(5000, seed=0)
        data = {}
        for c in frame.columns:
            col = frame[c]
            if col.dtype.kind in "fi" and col.nunique() > 16:
                codes = np.asarray(pd_qcut(col, 16))
            else:
                codes = col.astype("category").cat.codes.to_numpy()
            data[c] = np.asarray(codes) - np.asarray(codes).min()
    else:
        raise SystemExit(f"unknown table {name}")
    return data, {k: int(v.max()) + 1 for k, v in data.items()}


def pd_qcut(col, q):
    import pandas as pd
    return pd.qcut(col.rank(method="first"), q, labels=False).fillna(0).astype(int)


def pair_tvd(data, domain, estimate) -> float:
    """Average 2-way TVD; `estimate(a, b)` is a probability table of the pair."""
    n = len(next(iter(data.values())))
    out = []
    for a, b in itertools.combinations(domain, 2):
        real = np.zeros((domain[a], domain[b]))
        np.add.at(real, (data[a], data[b]), 1)
        out.append(0.5 * np.abs(real / n - estimate(a, b)).sum())
    return float(np.mean(out))


def run_independent(data, domain, rho):
    oracle = counting_oracle(data, domain)
    rhos = optimal_split(rho, [domain[a] for a in domain])
    probs = {}
    for a, r in zip(domain, rhos):
        m = measure_marginal(oracle([(a,)])[(a,)], (a,), r, lambda *x, **k: None)
        p = np.clip(m.noisy, 0, None)
        probs[a] = p / p.sum() if p.sum() > 0 else np.full(domain[a], 1 / domain[a])
    return pair_tvd(data, domain, lambda a, b: np.outer(probs[a], probs[b])), {}


def run_method(data, domain, method, rho, iterations, use_guard=True):
    info = METHODS[method]
    one_way, score = info.one_way_share * rho, info.score_share * rho
    budget = Budget(one_way, score, rho - one_way - score)
    oracle = counting_oracle(data, domain)
    noop = lambda *a, **k: None  # noqa: E731
    chosen = select(method, domain, oracle, budget, SelectionSettings(), noop)
    from dp_synth_assets.core.stages import cover_columns
    plan = cover_columns(chosen, domain) if use_guard else chosen
    rhos = measurement_plan(plan, domain, 0.0 if info.measures_in_selection else budget.measure)
    noisy = measure(oracle(list(rhos)), rhos, noop) if rhos else []
    found = list(chosen.one_way) + list(chosen.measured) + noisy
    report = {}
    if use_guard:
        from dp_synth_assets.core.select.guard import guard
        found, report = guard(found, domain)
    consistent = make_consistent(found)
    total = noisy_total(consistent)
    settings = ModelSettings(iterations=iterations)
    model = generate.fit("pgm", domain, consistent, total, settings)
    n = len(next(iter(data.values())))
    synth = generate.sample(model, max(n, 200_000), 0)  # sampling error well below the TVD
    m = len(synth[next(iter(domain))])

    def estimate(a, b):
        t = np.zeros((domain[a], domain[b]))
        np.add.at(t, (synth[a], synth[b]), 1)
        return t / m
    picked = chosen.details.get("picked", method)
    return pair_tvd(data, domain, estimate), {
        "cliques": len([x for x in consistent if len(x.clique) > 1]),
        "selected": len(chosen.cliques) + len(chosen.measured), "picked": picked,
        "dropped": len(report.get("dropped", []))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", nargs="+", default=["wide", "small", "example", "adult"])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[0.2, 1.0])
    ap.add_argument("--methods", nargs="+", default=["auto", "absyn", "privsyn", "mst"])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--noguard", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "auto_rule.json"))
    args = ap.parse_args()
    out = Path(args.out)
    records = json.loads(out.read_text()) if out.exists() else []
    for table in args.tables:
        data, domain = load(table)
        for eps in args.epsilons:
            rho = rho_from_epsilon_delta(eps, 1e-9)
            for seed in range(args.seeds):
                runs = [("independent", None, True)] + [(m, m, True) for m in args.methods]
                if args.noguard:
                    runs += [(f"noguard-{m}", m, False) for m in args.methods if m != "auto"]
                for name, method, use_guard in runs:
                    t0 = time.time()
                    if method is None:
                        tvd2, extra = run_independent(data, domain, rho)
                    else:
                        tvd2, extra = run_method(data, domain, method, rho, args.iterations,
                                                 use_guard)
                    rec = {"dataset": table, "method": name, "epsilon": eps, "seed": seed,
                           "tvd2": round(tvd2, 4), "seconds": round(time.time() - t0, 1), **extra}
                    print(json.dumps(rec), flush=True)
                    records = [r for r in records if (r["dataset"], r["method"], r["epsilon"],
                               r["seed"]) != (table, name, eps, seed)] + [rec]
                    out.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
