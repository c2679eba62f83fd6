"""Declared constraints: what honouring them costs and saves, on a table with an order between
two timestamp columns and between two numeric columns.

A generated taxi-like table (no private data; every domain declared, so nothing is discovered):
`pickup` and `dropoff` TIMESTAMPs of one month (drop-off a lognormal trip after pick-up),
`distance`, `fare` (a function of distance and duration) and `tip` (a share of the fare),
`passengers`, `payment`, and `pu_zone` / `do_zone` over the same eight zones (a trip rarely
stays in its zone: 5% of rows). Declared: `dropoff >= pickup`, `fare >= tip`, `fare >= 2.5`,
`do_zone != pu_zone`; the source satisfies them all.

For each epsilon and seed, one fit of the notebook API (`Synthesizer`, the default method) and
three samples of as many rows as the source from that one model (the same seed):
- `free`: no constraint (the synthetic stage before constraints were declared);
- `honoured`: the declared constraints, as the pipeline honours them (redrawn inside the bins,
  else projected; core/constraints.py);
- `rejected`: rejection sampling, the alternative: rows of `free` drawn in surplus and the
  violating ones dropped (the model's distribution conditioned on the constraints).
Owner-side scores against the source: the share of rows violating each constraint, the mean
2-way TVD over all column pairs (numbers and timestamps in 20 equal-width bins over the declared
bounds), the 2-way TVD of the two constrained pairs alone, the 1-way TVD of the trip duration
(dropoff - pickup, 20 bins over 0-2 h, negative durations their own bin) and, for `honoured`,
the share of rows whose values differ from `free` (the rows the constraints moved).

With `--decode-rows N`: the CPU seconds of sampling N rows from one model (epsilon 1) without
and with the constraints (the best of two samples each), the cost of honouring them.

    python bench/declared_constraints.py [--epsilons 0.2 1 5] [--seeds 0 1 2] [--rows 20000]
        [--decode-rows 1000000]

Writes bench/results/declared_constraints.json (one record per epsilon, seed and sampler, and
the decode cost) and bench/results/declared_constraints.md (the means over seeds, with the load
average).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS  # noqa: E402
sys.path.insert(0, str(ROOT))
OUT = RESULTS / "declared_constraints"

from dp_synth_assets.api import Synthesizer  # noqa: E402

ZONES = [f"z{i}" for i in range(8)]
COLUMNS = {
    "pickup": {"kind": "datetime", "bounds": ["2024-03-01", "2024-04-01"]},
    "dropoff": {"kind": "datetime", "bounds": ["2024-03-01", "2024-04-01"]},
    "distance": {"kind": "float", "bounds": [0, 30]},
    "fare": {"kind": "float", "bounds": [0, 150]},
    "tip": {"kind": "float", "bounds": [0, 40]},
    "passengers": {"kind": "integer", "bounds": [1, 6]},
    "payment": {"kind": "categorical", "categories": ["card", "cash"]},
    "pu_zone": {"kind": "categorical", "categories": ZONES},
    "do_zone": {"kind": "categorical", "categories": ZONES},
}
CONSTRAINTS = ["dropoff >= pickup", "fare >= tip", "fare >= 2.5", "do_zone != pu_zone"]
BINS = 20


def taxi(rows: int, rng: np.random.Generator) -> pd.DataFrame:
    """The generated table (module docstring)."""
    start = np.datetime64("2024-03-01T00:00:00")
    hour = rng.choice(24, rows, p=(w := 0.3 + np.exp(-((np.arange(24) - 17.5) ** 2) / 8)) / w.sum())
    pickup = (start + rng.integers(0, 30, rows).astype("timedelta64[D]")
              + hour.astype("timedelta64[h]") + rng.integers(0, 3600, rows).astype("timedelta64[s]"))
    minutes = np.clip(rng.lognormal(np.log(14), 0.55, rows), 1, 110)
    dropoff = pickup + (minutes * 60).astype("int64").astype("timedelta64[s]")
    distance = np.clip(minutes / 60 * rng.normal(14, 3, rows), 0.1, 29.9)
    fare = np.clip(2.5 + 1.8 * distance + 0.35 * minutes + rng.normal(0, 1.5, rows), 2.5, 149)
    card = rng.random(rows) < 0.7
    tip = np.where(card, np.clip(fare * rng.beta(2, 9, rows), 0, 39.9), 0.0)
    pu = rng.integers(0, 8, rows)
    near = (pu + rng.choice([-1, 1, 2], rows)) % 8
    do = np.where(rng.random(rows) < 0.05, (pu + rng.integers(1, 8, rows)) % 8, near)
    return pd.DataFrame({
        "pickup": pd.to_datetime(pickup), "dropoff": pd.to_datetime(dropoff),
        "distance": distance, "fare": fare, "tip": tip,
        "passengers": rng.choice(6, rows, p=[0.7, 0.14, 0.06, 0.04, 0.04, 0.02]) + 1,
        "payment": np.where(card, "card", "cash"),
        "pu_zone": np.array(ZONES)[pu], "do_zone": np.array(ZONES)[do]})


def violations(frame: pd.DataFrame) -> dict[str, float]:
    """The share of rows violating each declared constraint (NULL: no violation)."""
    f = frame
    return {"dropoff >= pickup": float((f.dropoff < f.pickup).mean()),
            "fare >= tip": float((f.fare < f.tip).mean()),
            "fare >= 2.5": float((f.fare < 2.5).mean()),
            "do_zone != pu_zone": float((f.do_zone == f.pu_zone).mean())}


def binned(frame: pd.DataFrame) -> pd.DataFrame:
    """Every column as codes: numbers and timestamps in BINS equal-width bins over their
    declared bounds, categories as they are."""
    out = {}
    for name, spec in COLUMNS.items():
        if spec["kind"] == "categorical":
            out[name] = frame[name].astype(str)
            continue
        values = frame[name]
        low, high = spec["bounds"]
        if spec["kind"] == "datetime":
            values = pd.to_datetime(values).astype("int64") / 1e9
            low, high = (pd.Timestamp(b).value / 1e9 for b in (low, high))
        out[name] = np.clip(((values - low) / (high - low) * BINS).astype(int), 0, BINS - 1)
    return pd.DataFrame(out)


def tvd(real: pd.DataFrame, synth: pd.DataFrame, cols: list[str]) -> float:
    p = real.groupby(cols).size() / len(real)
    q = synth.groupby(cols).size() / len(synth)
    return float(0.5 * p.sub(q, fill_value=0).abs().sum())


def duration_tvd(real: pd.DataFrame, synth: pd.DataFrame) -> float:
    def bins(f):
        minutes = (pd.to_datetime(f.dropoff) - pd.to_datetime(f.pickup)).dt.total_seconds() / 60
        return pd.DataFrame({"d": np.where(minutes < 0, -1, np.clip(minutes // 6, 0, BINS - 1))})
    return tvd(bins(real), bins(synth), ["d"])


def scores(real: pd.DataFrame, synth: pd.DataFrame) -> dict:
    r, s = binned(real), binned(synth)
    pairs = list(itertools.combinations(COLUMNS, 2))
    found = violations(synth)
    return {"violation_share": {k: round(v, 5) for k, v in found.items()},
            "max_violation_share": round(max(found.values()), 5),
            "tvd2": round(float(np.mean([tvd(r, s, list(p)) for p in pairs])), 5),
            "tvd2_constrained": round(float(np.mean(
                [tvd(r, s, ["pickup", "dropoff"]), tvd(r, s, ["fare", "tip"]),
                 tvd(r, s, ["pu_zone", "do_zone"])])), 5),
            "duration_tvd": round(duration_tvd(real, synth), 5)}


def run(rows: int, epsilon: float, seed: int) -> list[dict]:
    real = taxi(rows, np.random.default_rng(100 + seed))
    assert max(violations(real).values()) == 0.0  # the declared rules hold in the source
    start = time.time()
    honoured = Synthesizer(COLUMNS, epsilon=epsilon, delta=1e-9, seed=seed,
                           constraints=CONSTRAINTS).fit(real)
    fit_seconds = time.time() - start
    free = Synthesizer.from_spec(honoured.spec.model_copy(update={"constraints": []}))
    free.fit_model(honoured.plan, honoured.measurements)
    timed = {}
    for name, synth in (("free", free), ("honoured", honoured)):
        start = time.time()
        timed[name] = (synth.sample(rows).to_pandas(), time.time() - start)
    start = time.time()
    surplus = free.sample(3 * rows, seed=seed + 10_000).to_pandas()
    kept = surplus[~np.any([((surplus.dropoff < surplus.pickup) | (surplus.fare < surplus.tip)
                             | (surplus.fare < 2.5) | (surplus.do_zone == surplus.pu_zone))],
                           axis=0)]
    timed["rejected"] = (kept.head(rows).reset_index(drop=True), time.time() - start)
    base = {"epsilon": epsilon, "seed": seed, "rows": rows, "fit_seconds": round(fit_seconds, 2),
            "load": os.getloadavg()[0]}
    records = []
    for name, (frame, seconds) in timed.items():
        record = {**base, "sampler": name, "sample_seconds": round(seconds, 3),
                  "sampled_rows": len(frame), **scores(real, frame)}
        if name == "honoured":
            a, b = timed["free"][0], frame
            moved = np.zeros(rows, bool)
            for c in COLUMNS:
                moved |= ~((a[c] == b[c]) | (a[c].isna() & b[c].isna())).to_numpy()
            record["moved_share"] = round(float(moved.mean()), 5)
        if name == "rejected":
            record["acceptance"] = round(len(kept) / len(surplus), 4)
        records.append(record)
    return records


def decode_cost(rows: int, decode_rows: int) -> dict:
    """CPU seconds of `sample(decode_rows)` without and with the constraints, one model."""
    real = taxi(rows, np.random.default_rng(100))
    honoured = Synthesizer(COLUMNS, epsilon=1.0, delta=1e-9, seed=0,
                           constraints=CONSTRAINTS).fit(real)
    free = Synthesizer.from_spec(honoured.spec.model_copy(update={"constraints": []}))
    free.fit_model(honoured.plan, honoured.measurements)
    seconds = {}
    for name, synth in (("free", free), ("honoured", honoured)) * 2:
        start = time.process_time()
        synth.sample(decode_rows)
        spent = time.process_time() - start
        seconds[name] = min(seconds.get(name, spent), spent)
    return {"sampler": "decode-cost", "decode_rows": decode_rows, "load": os.getloadavg()[0],
            **{f"{k}_cpu_seconds": round(v, 3) for k, v in seconds.items()}}


def markdown(records: list[dict]) -> str:
    cost = [r for r in records if r["sampler"] == "decode-cost"]
    frame = pd.DataFrame([r for r in records if r["sampler"] != "decode-cost"])
    table = frame.groupby(["epsilon", "sampler"], sort=False).agg(
        seeds=("seed", "nunique"), max_violation=("max_violation_share", "mean"),
        tvd2=("tvd2", "mean"), tvd2_constrained=("tvd2_constrained", "mean"),
        duration_tvd=("duration_tvd", "mean"), sample_seconds=("sample_seconds", "mean"),
        load=("load", "mean")).reset_index()
    extra = {(r["epsilon"], r["sampler"]): r for r in frame.groupby(
        ["epsilon", "sampler"]).mean(numeric_only=True).reset_index().to_dict("records")}
    per = frame.groupby(["epsilon", "sampler"], sort=False)["violation_share"].apply(
        lambda s: {k: float(np.mean([v[k] for v in s])) for k in CONSTRAINTS})
    lines = ["| epsilon | sampler | seeds | violating (max) | "
             + " | ".join(f"`{c}`" for c in CONSTRAINTS)
             + " | 2-way TVD | constrained pairs | duration TVD | moved / accepted | "
               "sample s | load |",
             "|---|---|---|---|" + "---|" * len(CONSTRAINTS) + "---|---|---|---|---|---|"]
    for r in table.itertuples():
        e = extra[(r.epsilon, r.sampler)]
        share = per[(r.epsilon, r.sampler)]
        note = (f"{e['moved_share']:.3f} moved" if r.sampler == "honoured" else
                f"{e['acceptance']:.3f} accepted" if r.sampler == "rejected" else "")
        lines.append(f"| {r.epsilon:g} | {r.sampler} | {r.seeds} | {r.max_violation:.4f} | "
                     + " | ".join(f"{share[c]:.4f}" for c in CONSTRAINTS)
                     + f" | {r.tvd2:.4f} | {r.tvd2_constrained:.4f} | {r.duration_tvd:.4f} | "
                       f"{note} | {r.sample_seconds:.2f} | {r.load:.1f} |")
    rows = int(frame["rows"].iloc[0])
    return ("# Declared constraints (bench/declared_constraints.py)\n\n"
            f"A generated taxi-like table of {rows:,} rows, every domain declared, constraints "
            + ", ".join(f"`{c}`" for c in CONSTRAINTS) + " (the source satisfies them). One "
            "fit per epsilon and seed (the default method); from that model, `free` samples "
            "without constraints, `honoured` as the pipeline does (redraw inside the bins, else "
            "project), `rejected` drops the violating rows of a 3x surplus. Means over seeds. "
            "2-way TVD: mean over all 36 pairs, numbers and timestamps in 20 equal-width bins "
            "over the declared bounds; constrained pairs: (pickup, dropoff), (fare, tip), "
            "(pu_zone, do_zone); duration: dropoff - pickup in 6-minute bins, a negative "
            "duration its own bin. moved: share of rows `honoured` changed; accepted: share of "
            "the surplus `rejected` kept. `load`: the 1-minute load average.\n\n"
            + "\n".join(lines) + "\n"
            + "".join(f"\nSampling {c['decode_rows']:,} rows (epsilon 1, CPU seconds, best of "
                      f"two): {c['free_cpu_seconds']:.2f} without the constraints, "
                      f"{c['honoured_cpu_seconds']:.2f} with them (load {c['load']:.1f}).\n"
                      for c in cost))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.2, 1.0, 5.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--decode-rows", type=int, default=0)
    args = parser.parse_args()
    records = []
    if args.decode_rows:
        records.append(decode_cost(args.rows, args.decode_rows))
        print(json.dumps(records[-1]), flush=True)
    for eps, seed in itertools.product(args.epsilons, args.seeds):
        new = run(args.rows, eps, seed)
        records += new
        for r in new:
            print(json.dumps(r), flush=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.with_suffix(".json").write_text(json.dumps(records, indent=1))
        OUT.with_suffix(".md").write_text(markdown(records))


if __name__ == "__main__":
    main()
