"""Tiny stand-ins of the public benchmark tables, in their layout, for smoke runs of the scripts.

    .venv/bin/python bench/tiny_datasets.py --out /tmp/tiny --rows 300
    BENCH_DATASETS=/tmp/tiny .venv/bin/python bench/adult_pipeline.py --repeats 1

Writes `adult/adult.csv` with `adult/adult-domain.json` (adult's 14 columns as integer codes, a
smaller domain) and `<name>/<name>.csv` for each raw table of bench/raw_tables.py (the same
column names and kinds: integers, floats, a few categories, some NULLs). The values are random
draws with a little dependence between neighbouring columns (seeded): they exercise the scripts,
they do not stand for the real tables' figures.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

ADULT_DOMAIN = {"age": 8, "workclass": 4, "fnlwgt": 6, "education-num": 5, "marital-status": 3,
                "occupation": 5, "relationship": 4, "race": 3, "sex": 2, "capital-gain": 3,
                "capital-loss": 3, "hours-per-week": 6, "native-country": 4, "income>50K": 2}


def codes(rng: np.random.Generator, rows: int, domain: dict[str, int]) -> pd.DataFrame:
    """Integer codes, each column a noisy copy of the previous one (so pairs are dependent)."""
    out, previous = {}, rng.random(rows)
    for name, size in domain.items():
        previous = np.where(rng.random(rows) < 0.6, previous, rng.random(rows))
        out[name] = np.minimum((previous * size).astype(int), size - 1)
    return pd.DataFrame(out)


def raw(rng: np.random.Generator, rows: int, kinds: dict[str, str]) -> pd.DataFrame:
    base = codes(rng, rows, {c: 5 for c in kinds})
    out = {}
    for name, kind in kinds.items():
        k = base[name].to_numpy()
        if kind == "categorical":
            values = pd.Series(np.array(["a", "b", "c", "d", "e"])[k], dtype=object)
        elif kind == "integer":
            values = pd.Series(k * 10 + rng.integers(0, 10, rows), dtype="Int64")
        else:
            values = pd.Series(np.round(k + rng.random(rows), 3))
        values[rng.random(rows) < 0.03] = None
        out[name] = values
    return pd.DataFrame(out)


def write(out: Path, rows: int, seed: int = 0) -> Path:
    from raw_tables import KINDS

    rng = np.random.default_rng(seed)
    (out / "adult").mkdir(parents=True, exist_ok=True)
    codes(rng, rows, ADULT_DOMAIN).to_csv(out / "adult" / "adult.csv", index=False)
    (out / "adult" / "adult-domain.json").write_text(json.dumps(ADULT_DOMAIN))
    for name, kinds in KINDS.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        raw(rng, rows, kinds).to_csv(out / name / f"{name}.csv", index=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(write(args.out, args.rows, args.seed))


if __name__ == "__main__":
    main()
