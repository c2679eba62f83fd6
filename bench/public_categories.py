"""A high-cardinality categorical with its list read from a public dimension table
(`categories: {from: ...}`) against the same column discovered with DP.

Generated data: a public dimension table of --zones zones and a --rows-row fact table (each
trip's zone, Zipf-like or flat, a payment type, an hour and a fare that depend on the zone;
payment declared by its kind only), synthesized through the notebook API (the stages a Dagster run calls) at --epsilon, seeds
--seeds. Per run: the zone column's 1-way TVD (synthetic against source), its share of
`other`, the mean 1-way TVD of the other columns, the budget preprocessing charged and the
seconds of the fit.

    .venv/bin/python bench/public_categories.py --epsilon 1 --seeds 0 1 2

Writes bench/results/public_categories.json and .md (with the load average).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import duckdb
import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from bench.paths import RESULTS  # noqa: E402
from dp_synth_assets.api import Synthesizer  # noqa: E402
from dp_synth_assets.core.config import parse_registry  # noqa: E402


# the zone column's list: discovered with equal shares (only kinds declared), discovered with
# `expected_categories` hints (zone: --zones, payment: 2), read `from` the public table
MODES = ("discovered", "hinted", "from")


def write_tables(con, zones: int, rows: int, shape: str, seed: int = 0) -> list[str]:
    """main.zones (public: one row per zone) and main.trips (the private fact table)."""
    rng = np.random.default_rng(seed)
    names = [f"zone_{i:03d}" for i in range(zones)]
    weights = (1.0 / np.arange(1, zones + 1)) if shape == "zipf" else np.ones(zones)
    zone = rng.choice(zones, rows, p=weights / weights.sum())
    payment = np.where(rng.random(rows) < 0.3 + 0.4 * (zone % 2), "card", "cash")
    hour = (zone * 7 + rng.integers(0, 6, rows)) % 24
    fare = np.clip(rng.normal(10 + zone % 40, 4, rows).round(), 0, 99).astype(int)
    con.execute("CREATE OR REPLACE TABLE main.zones AS SELECT unnest(?) AS zone", [names])
    con.execute("CREATE OR REPLACE TABLE main.trips AS SELECT unnest(?) AS zone, "
                "unnest(?) AS payment, unnest(?) AS hour, unnest(?) AS fare",
                [[names[z] for z in zone], payment.tolist(), hour.tolist(), fare.tolist()])
    return names


def spec(zone: dict, payment: dict, epsilon: float, seed: int):
    return parse_registry({"datasets": {"trips": {
        "source": {"table": "main.trips"},
        "columns": {"zone": {"kind": "categorical", **zone},
                    "payment": {"kind": "categorical", **payment},
                    "hour": {"kind": "integer", "bounds": [0, 23], "bins": 24},
                    "fare": {"kind": "integer", "bounds": [0, 99], "bins": 20}},
        "privacy": {"epsilon": epsilon, "delta": 1e-9,
                    "limit": {"epsilon": 100.0, "delta": 1e-6}},
        "seed": seed}}})["trips"]


def tvd1(source: list, synthetic: list) -> float:
    values = sorted(set(map(str, source)) | set(map(str, synthetic)))
    index = {v: i for i, v in enumerate(values)}

    def share(column):
        counts = np.bincount([index[str(v)] for v in column], minlength=len(values))
        return counts / max(counts.sum(), 1)
    return float(0.5 * np.abs(share(source) - share(synthetic)).sum())


def run(con, mode: str, shape: str, epsilon: float, seed: int, zones: int) -> dict:
    zone, payment = {
        "discovered": ({}, {}),
        "hinted": ({"expected_categories": zones}, {"expected_categories": 2}),
        "from": ({"categories": {"from": "main.zones.zone"}, "other": False}, {})}[mode]
    started = time.perf_counter()
    synth = Synthesizer.from_spec(spec(zone, payment, epsilon, seed)).fit("main.trips",
                                                                          connection=con)
    seconds = time.perf_counter() - started
    source = con.execute("SELECT * FROM main.trips").fetchnumpy()
    table = synth.sample(len(source["zone"]))
    out = {c: table.column(c).to_pylist() for c in table.column_names}
    report = synth.report.to_dict()
    zone_rho = sum(c["rho"] for c in report["charges"] if c.get("column") == "zone")
    others = [tvd1(list(source[c]), out[c]) for c in ("hour", "fare")]
    return {"mode": mode, "shape": shape, "epsilon": epsilon, "seed": seed,
            "zones": int(con.execute("SELECT count(*) FROM main.zones").fetchone()[0]),
            "rows": len(source["zone"]),
            "tvd1_zone": round(tvd1(list(source["zone"]), out["zone"]), 4),
            "other_share": round(float(np.mean([v == "other" or v is None
                                                for v in out["zone"]])), 4),
            "kept_zones": len(synth.plan["zone"].categories),
            "tvd1_payment": round(tvd1(list(source["payment"]), out["payment"]), 4),
            "tvd1_other_columns": round(float(np.mean(others)), 4),
            "zone_rho": zone_rho, "preprocess_rho": report["rho_by_stage"].get("preprocessed", 0.0),
            "run_rho": report["rho"],
            "seconds": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zones", type=int, default=200)
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--shapes", nargs="+", default=["zipf", "flat"])
    args = parser.parse_args()
    records = []
    for shape in args.shapes:
        con = duckdb.connect()
        write_tables(con, args.zones, args.rows, shape)
        for seed in args.seeds:
            for mode in MODES:
                records.append(run(con, mode, shape, args.epsilon, seed, args.zones))
                print(json.dumps(records[-1]), flush=True)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) \
        if Path("/proc/loadavg").exists() else "n/a"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "public_categories.json").write_text(json.dumps(
        {"load": load, "cpus": os.cpu_count(), "records": records}, indent=1) + "\n")
    lines = ["# A public category list (`categories: {from: ...}`) against discovery",
             "", f"bench/public_categories.py: {args.zones} zones, {args.rows} rows, epsilon "
             f"{args.epsilon:g}, seeds {args.seeds}; load average {load} ({os.cpu_count()} "
             f"cpus). Means over the seeds.", "",
             "| shape | zone list | zone 1-way TVD | `other` share | zones kept | zone rho | "
             "payment 1-way TVD | hour, fare 1-way TVD | seconds |",
             "|---|---|---|---|---|---|---|---|---|"]
    for shape in args.shapes:
        for mode in MODES:
            rs = [r for r in records if r["shape"] == shape and r["mode"] == mode]
            lines.append(f"| {shape} | {mode} | {np.mean([r['tvd1_zone'] for r in rs]):.3f} | "
                         f"{np.mean([r['other_share'] for r in rs]):.3f} | "
                         f"{np.mean([r['kept_zones'] for r in rs]):.0f} | "
                         f"{np.mean([r['zone_rho'] for r in rs]):.2g} | "
                         f"{np.mean([r['tvd1_payment'] for r in rs]):.3f} | "
                         f"{np.mean([r['tvd1_other_columns'] for r in rs]):.3f} | "
                         f"{np.mean([r['seconds'] for r in rs]):.1f} |")
    (RESULTS / "public_categories.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
