"""Timestamp columns whose bounds are learned: do synthetic values stay inside the source's range,
and at the resolution the data has?

Generated tables (no private data), only `kind` declared for every column (bounds discovered):
- `month`: pick-up and drop-off TIMESTAMPs of one calendar month (March 2024; rush hours, quieter
  weekends), drop-off a lognormal trip length after pick-up, plus a passenger count and a payment
  type; scored at daily granularity;
- `days`: event TIMESTAMPs over four days (2024-03-04 to 2024-03-07) with a strong daily cycle;
  scored at hourly granularity;
- `years`: a DATE column over ten years (2015-2024) beside a categorical: whole days, scored
  at monthly granularity (the wide case the year buckets already served).

For each table, epsilon and seed: fit the notebook API (`Synthesizer`, the default method) and
sample as many rows as the source, then owner-side:
- outside: the share of the synthetic (non-NULL) values of each timestamp column outside the
  source column's [min, max] (the mean over the table's timestamp columns, and per column);
- tvd1: the 1-way TVD of each timestamp column with values floored to the table's granularity
  (day, hour, month), values outside the source's range counted as their own floored value;
- bounds: the learned bounds of each column, as ISO text (public: the DP plan).

    python bench/time_columns.py [--tables month days years] [--epsilons 1] [--seeds 0 1 2]
        [--rows 10000] [--label after]

Appends to bench/results/time_columns.json (records keyed by label, table, epsilon, seed) and
rewrites bench/results/time_columns.md from all records, with the load average of the run.
"""

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS  # noqa: E402
sys.path.insert(0, str(ROOT))
OUT = RESULTS / "time_columns"

from dp_synth_assets.api import Synthesizer  # noqa: E402
from dp_synth_assets.core.domain import value_bounds  # noqa: E402
from suite_tables import hour_weights, instants  # noqa: E402  (the suite's daily cycle)

GRANULARITY = {"month": "D", "days": "h", "years": "M"}


def month_table(rows: int, rng: np.random.Generator) -> pd.DataFrame:
    pickup = instants(rng, "2024-03-01", 31, rows)
    trip = np.clip(rng.lognormal(np.log(12 * 60), 0.6, size=rows), 60, 3 * 3600).astype(int)
    dropoff = pickup + trip.astype("timedelta64[s]")
    return pd.DataFrame({
        "pickup": pd.to_datetime(pickup), "dropoff": pd.to_datetime(dropoff),
        "passengers": rng.choice([1, 2, 3, 4, 5], size=rows, p=[0.7, 0.15, 0.07, 0.05, 0.03]),
        "payment": rng.choice(["card", "cash", "other"], size=rows, p=[0.7, 0.27, 0.03])})


def days_table(rows: int, rng: np.random.Generator) -> pd.DataFrame:
    hw = hour_weights() ** 2
    day = rng.integers(0, 4, size=rows)
    hour = rng.choice(24, size=rows, p=hw / hw.sum())
    seconds = rng.integers(0, 3600, size=rows)
    t = (np.datetime64("2024-03-04") + day.astype("timedelta64[D]")
         + hour.astype("timedelta64[h]") + seconds.astype("timedelta64[s]"))
    return pd.DataFrame({"event_time": pd.to_datetime(t),
                         "kind": rng.choice(["a", "b", "c"], size=rows, p=[0.5, 0.3, 0.2])})


def years_table(rows: int, rng: np.random.Generator) -> pd.DataFrame:
    start = np.datetime64("2015-01-01")
    span = (np.datetime64("2024-12-31") - start).astype(int) + 1
    day = np.clip(rng.beta(2.0, 1.5, size=rows) * span, 0, span - 1).astype(int)
    return pd.DataFrame({"signup": (start + day.astype("timedelta64[D]")).astype("datetime64[s]"),
                         "plan": rng.choice(["free", "pro"], size=rows, p=[0.8, 0.2])})


TABLES = {
    "month": (month_table, {"pickup": "datetime", "dropoff": "datetime",
                            "passengers": "integer", "payment": "categorical"}, {}),
    "days": (days_table, {"event_time": "datetime", "kind": "categorical"}, {}),
    "years": (years_table, {"signup": "datetime", "plan": "categorical"},
              {"signup": {"type": "DATE"}}),
}


def floored(values: pd.Series, unit: str) -> pd.Series:
    v = pd.to_datetime(values)
    return v.dt.to_period("M").astype(str) if unit == "M" else v.dt.floor(unit).astype(str)


def tvd1(real: pd.Series, synth: pd.Series, unit: str) -> float:
    p = floored(real.dropna(), unit).value_counts(normalize=True)
    q = floored(synth.dropna(), unit).value_counts(normalize=True)
    return float(0.5 * p.sub(q, fill_value=0).abs().sum())


def run(name: str, rows: int, epsilon: float, seed: int, label: str) -> dict:
    make, kinds, extra = TABLES[name]
    real = make(rows, np.random.default_rng(1000 + seed))
    columns = {c: {"kind": k, **extra.get(c, {})} for c, k in kinds.items()}
    start = time.time()
    synth = Synthesizer(columns, epsilon=epsilon, delta=1e-9, seed=seed).fit(real)
    table = synth.sample(len(real)).to_pandas()
    seconds = time.time() - start
    unit = GRANULARITY[name]
    record = {"label": label, "table": name, "epsilon": epsilon, "seed": seed, "rows": rows,
              "seconds": round(seconds, 1), "load": os.getloadavg()[0]}
    outside, scores = [], []
    for c, k in kinds.items():
        if k != "datetime":
            continue
        r, s = pd.to_datetime(real[c]), pd.to_datetime(table[c]).dropna()
        share = float(((s < r.min()) | (s > r.max())).mean()) if len(s) else 1.0
        score = tvd1(r, s, unit)
        low, high = value_bounds(synth.plan[c])
        record.update({f"outside_{c}": round(share, 4), f"tvd1_{c}": round(score, 4),
                       f"bins_{c}": synth.plan[c].bins,
                       f"bounds_{c}": [str(low), str(high)]})
        outside.append(share)
        scores.append(score)
    record.update({"outside": round(float(np.mean(outside)), 4),
                   "tvd1": round(float(np.mean(scores)), 4), "granularity": unit})
    return record


def markdown(records: list[dict]) -> str:
    frame = pd.DataFrame(records)
    table = frame.groupby(["table", "granularity", "epsilon", "label"]).agg(
        outside=("outside", "mean"), tvd1=("tvd1", "mean"), seeds=("seed", "nunique"),
        seconds=("seconds", "mean"), load=("load", "mean")).round(4).reset_index()
    lines = ["| table | granularity | epsilon | build | seeds | outside | tvd1 | seconds | load |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.table} | {r.granularity} | {r.epsilon} | {r.label} | {r.seeds} | "
                     f"{r.outside:.4f} | {r.tvd1:.4f} | {r.seconds:.1f} | {r.load:.1f} |")
    return ("# Timestamp columns with learned bounds (bench/time_columns.py)\n\nGenerated tables, "
            "only kinds declared; mean over seeds. `outside`: share of synthetic values outside "
            "the source column's [min, max] (mean over the table's timestamp columns); `tvd1`: "
            "1-way TVD at the table's granularity (D day, h hour, M month); `load`: the 1-minute "
            "load average when the run ended (the seconds are inflated under load). `before`: "
            "calendar-year buckets with 32 parts (main at 2ea81c0, the same script), `after`: the "
            "calendar descent (years -> months -> days -> hours), `consistent`: its last level "
            "made consistent with the levels above by least squares, and no grid density of its "
            "own.\n\n"
            + "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", nargs="+", choices=list(TABLES), default=list(TABLES))
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--label", default="after")
    args = parser.parse_args()
    path = OUT.with_suffix(".json")
    records = json.loads(path.read_text()) if path.exists() else []
    for name, eps, seed in itertools.product(args.tables, args.epsilons, args.seeds):
        new = run(name, args.rows, eps, seed, args.label)
        key = (args.label, name, eps, seed)
        records = [r for r in records
                   if (r["label"], r["table"], r["epsilon"], r["seed"]) != key] + [new]
        print(json.dumps(new), flush=True)
        path.write_text(json.dumps(records, indent=1))
        OUT.with_suffix(".md").write_text(markdown(records))


if __name__ == "__main__":
    main()
