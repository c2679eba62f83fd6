"""Where the 1-way error comes from, column by column (issue 16): per-column tvd1 on the suite's
evaluation discretization (bench/suite.py) of

- `roundtrip`: the source encoded with our plan (learned with DP at noisy-independent's budget)
  and decoded back, without any measurement noise: the loss of preprocessing + decoding alone;
- `noisy-ind.` / `default`: the synthetic tables of the suite's last runs of those methods at
  --epsilon, seed 0 (bench/work/suite/runs/, written by bench/suite.py), when present;
- `independent`: each column drawn from its exact 1-way marginal (the sampling floor).

    .venv/bin/python bench/tvd1_columns.py --datasets example diamonds_raw titanic_raw

Also prints each column's encoding (bins, bounds, kept categories): the plan is public.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import suite  # noqa: E402


def roundtrip(table: suite.Table, epsilon: float, seed: int):
    """The source through our preprocessing (noisy-independent's budget), encode and decode."""
    from dp_synth_assets.api import Synthesizer
    from dp_synth_assets.core.config import load_registry
    from dp_synth_assets.core.domain import decode

    work = suite.WORK / "tvd1_columns"
    work.mkdir(parents=True, exist_ok=True)
    registry = work / "datasets.yaml"
    registry.write_text(yaml.safe_dump({"datasets": {table.name: suite.our_entry(
        table, suite.NOISY_INDEPENDENT, epsilon, seed, table.source)}}, sort_keys=False))
    spec = load_registry(registry)[table.name]
    synth = Synthesizer.from_spec(spec)
    with synth.reading(str(table.source)) as run:
        plan = run.preprocess()
        frame = run.con.execute(f"SELECT * FROM {run.view}").fetchnumpy()
    codes = {c: np.asarray(frame[c]) for c in plan.columns}
    for c, e in zip(plan.columns, plan.encodings):
        if not e.nullable:
            codes[c] = np.nan_to_num(codes[c].astype(float), nan=0).astype(np.int64)
    decoded = decode(plan, codes, np.random.default_rng(seed)).to_pandas()
    return plan, decoded


def per_column(ev: suite.Evaluation, synth: np.ndarray) -> np.ndarray:
    return np.array([suite.tvd(ev.real, synth, (j,), ev.sizes) for j in range(len(ev.columns))])


def describe(e) -> str:
    if e.kind == "categorical":
        return f"{len(e.categories)} kept, {len(e.rare or ())} rare, size {e.size}"
    if e.kind == "boolean":
        return f"boolean, size {e.size}"
    shape = f"{e.bins} bins over [{e.low:g}, {e.high:g}]"
    return shape + (" edges" if e.edges else "") + (" +density" if e.density else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["example", "diamonds_raw", "titanic_raw"])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in args.datasets:
        table = suite.load_table(name)
        ev = table.evaluation
        rng, n = np.random.default_rng([args.seed, 7]), len(ev.real)
        rows = {"independent": per_column(ev, np.column_stack(
            [ev.real[rng.integers(0, n, n), j] for j in range(len(ev.columns))]))}
        plan, decoded = roundtrip(table, args.epsilon, args.seed)
        rows["roundtrip"] = per_column(ev, ev.encode(decoded[ev.columns]))
        for method in (suite.NOISY_INDEPENDENT, "default"):
            run = f"{name}_{method}_eps{args.epsilon:g}_seed{args.seed}".replace(".", "p")
            path = suite.WORK / "runs" / run / "synthetic.parquet"
            if path.exists():
                rows[method] = per_column(ev, ev.encode(pd.read_parquet(path)[ev.columns]))
        print(f"\n{name} (eps {args.epsilon:g}, seed {args.seed}): per-column tvd1")
        print(f"{'column':20s} " + " ".join(f"{m[:11]:>11s}" for m in rows) + "  encoding")
        for j, c in enumerate(ev.columns):
            print(f"{c:20s} " + " ".join(f"{rows[m][j]:11.4f}" for m in rows)
                  + f"  {ev.sizes[j]} cells; {describe(plan[c])}")
        print(f"{'mean':20s} " + " ".join(f"{rows[m].mean():11.4f}" for m in rows))


if __name__ == "__main__":
    main()
