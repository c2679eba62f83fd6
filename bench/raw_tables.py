"""Raw tables with only column kinds declared: the default against independent columns.

For each raw table of `../shared/datasets` (titanic_raw, penguins_raw, diamonds_raw, adult_raw),
epsilon and seed: fit the notebook API (`Synthesizer`, the project's default method) on the raw
CSV with only each column's `kind` declared, sample the noisy row count, and score it owner-side
against the source on ONE public evaluation discretization (numbers and datetimes in 16 quantile
bins of the source column, categories as they are, any value
below 1% of the source's rows (or absent from it) pooled into one `<rare>` value, NULL its own value):
- tvd1 / tvd2: mean total variation distance over all 1-way / 2-way marginals;
- reference `independent`: every column sampled independently from its exact 1-way marginal (as
  many rows as the source; owner-side, no privacy), scored the same way;
- domain_loss1: the 1-way TVD of the source itself encoded with the DP plan and decoded back
  (what preprocessing alone loses).

    python -m bench.raw_tables [--epsilon 1 0.2] [--seeds 1 2] [--label after]

Appends to bench/results/raw_tables.json (records keyed by label, dataset, epsilon, seed) and
rewrites bench/results/raw_tables.md from all records.
"""

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import DATASETS, RESULTS  # noqa: E402
sys.path.insert(0, str(ROOT))
SHARED = DATASETS
OUT = RESULTS / "raw_tables"

from dp_synth_assets.api import Synthesizer  # noqa: E402
from dp_synth_assets.core.domain import decode, encoded_columns  # noqa: E402

KINDS = {
    "titanic_raw": {"survived": "integer", "pclass": "integer", "name": "categorical",
                    "sex": "categorical", "age": "float", "sibsp": "integer", "parch": "integer",
                    "ticket": "categorical", "fare": "float", "cabin": "categorical",
                    "embarked": "categorical"},
    "penguins_raw": {"species": "categorical", "island": "categorical",
                     "bill_length_mm": "float", "bill_depth_mm": "float",
                     "flipper_length_mm": "integer", "body_mass_g": "integer",
                     "sex": "categorical"},
    "diamonds_raw": {"carat": "float", "cut": "categorical", "color": "categorical",
                     "clarity": "categorical", "depth": "float", "table": "float",
                     "price": "integer", "x": "float", "y": "float", "z": "float"},
    "adult_raw": {"age": "integer", "workclass": "categorical", "fnlwgt": "integer",
                  "education": "categorical", "educational-num": "integer",
                  "marital-status": "categorical", "occupation": "categorical",
                  "relationship": "categorical", "race": "categorical", "gender": "categorical",
                  "capital-gain": "integer", "capital-loss": "integer",
                  "hours-per-week": "integer", "native-country": "categorical",
                  "income": "categorical"},
}
MISSING = {"adult_raw": ["?"]}


def load(name: str) -> pd.DataFrame:
    return duckdb.sql(f"SELECT * FROM read_csv_auto('{SHARED / name / (name + '.csv')}')").df()


def discretize(frame: pd.DataFrame, real: pd.DataFrame) -> pd.DataFrame:
    """The evaluation discretization (owner-side): 16 quantile bins of the source for numbers,
    categories as text with those under 1% of the source's rows pooled, NULL its own value."""
    out = {}
    for c in real.columns:
        r = real[c]
        if pd.api.types.is_numeric_dtype(r) and not pd.api.types.is_bool_dtype(r) and r.nunique() > 16:
            edges = np.unique(np.quantile(r.dropna().astype(float), np.linspace(0, 1, 17)))
            v = pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=float)
            codes = np.searchsorted(edges[1:-1], v, side="right").astype(object)
            codes[np.isnan(v)] = "<NULL>"
            out[c] = codes.astype(str)
        else:
            s = frame[c]
            if pd.api.types.is_numeric_dtype(r) and not pd.api.types.is_bool_dtype(r):
                s = pd.to_numeric(s, errors="coerce").round().astype("Int64")
            s = s.astype("string").str.lower()
            counts = r.astype("string").str.lower().value_counts()
            frequent = set(counts[counts >= 0.01 * len(real)].index)
            out[c] = s.where(s.isin(frequent) | s.isna(), "<rare>").fillna("<NULL>").to_numpy()
    return pd.DataFrame(out)


def tvds(a: pd.DataFrame, b: pd.DataFrame, k: int) -> float:
    scores = []
    for cols in itertools.combinations(a.columns, k):
        pa_ = a.groupby(list(cols)).size() / len(a)
        pb = b.groupby(list(cols)).size() / len(b)
        scores.append(0.5 * pa_.sub(pb, fill_value=0).abs().sum())
    return float(np.mean(scores))


def independent(real: pd.DataFrame, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({c: real[c].to_numpy()[rng.integers(0, len(real), len(real))]
                         for c in real.columns})


def run(name: str, epsilon: float, seed: int, label: str) -> list[dict]:
    real = load(name)
    kinds = KINDS[name]
    columns = {c: {"kind": k, **({"missing": MISSING[name]} if name in MISSING else {})}
               for c, k in kinds.items()}
    real = real[list(kinds)]
    if name in MISSING:
        real = real.replace({m: None for m in MISSING[name]})
    evaluation = discretize(real, real)
    start = time.time()
    synth = Synthesizer(columns, epsilon=epsilon, delta=1e-9, seed=seed)
    synth.fit(real)
    table = synth.sample().to_pandas()
    seconds = time.time() - start
    # what preprocessing alone loses: the source encoded with the DP plan and decoded back
    con = duckdb.connect()
    con.register("src", real)
    plan = synth.plan
    codes = con.sql(f"SELECT {encoded_columns(plan)} FROM src").df()
    back = decode(plan, {c: codes[c].to_numpy() for c in codes.columns},
                  np.random.default_rng(seed)).to_pandas()
    synthetic = discretize(table, real)
    base = {"label": label, "dataset": name, "epsilon": epsilon, "seed": seed,
            "rows": len(real)}
    records = [{**base, "method": "default", "tvd1": tvds(evaluation, synthetic, 1),
                "tvd2": tvds(evaluation, synthetic, 2), "seconds": round(seconds, 1),
                "domain_loss1": tvds(evaluation, discretize(back, real), 1),
                "domain": plan.domain}]
    ind = discretize(independent(real, seed), real)
    records.append({**base, "method": "independent", "tvd1": tvds(evaluation, ind, 1),
                    "tvd2": tvds(evaluation, ind, 2)})
    return records


def markdown(records: list[dict]) -> str:
    frame = pd.DataFrame(records)
    table = frame.groupby(["dataset", "epsilon", "method", "label"])[
        ["tvd1", "tvd2"]].mean().round(3).reset_index()
    lines = ["| dataset | epsilon | method | build | tvd1 | tvd2 |", "|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.dataset} | {r.epsilon} | {r.method} | {r.label} | {r.tvd1} | {r.tvd2} |")
    return ("# Raw tables, only kinds declared (bench/raw_tables.py)\n\nMean over seeds; "
            "`independent`: exact 1-way marginals sampled independently (owner-side, no "
            "privacy). `main`: before issue 16's preprocessing changes, `after`: with them.\n\n"
            + "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--datasets", nargs="+", default=list(KINDS))
    parser.add_argument("--label", default="after")
    args = parser.parse_args()
    path = OUT.with_suffix(".json")
    records = json.loads(path.read_text()) if path.exists() else []
    for name, eps, seed in itertools.product(args.datasets, args.epsilon, args.seeds):
        new = run(name, eps, seed, args.label)
        records = [r for r in records if (r["label"], r["dataset"], r["epsilon"], r["seed"])
                   != (args.label, name, eps, seed)] + new
        for r in new:
            print({k: v for k, v in r.items() if k != "domain"}, flush=True)
        path.write_text(json.dumps(records, indent=1))
        OUT.with_suffix(".md").write_text(markdown(records))


if __name__ == "__main__":
    main()
