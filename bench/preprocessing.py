"""Uniform vs PrivTree binning on adult_raw (only column kinds declared), the whole pipeline.

For each binning and repetition (PrivTree on the numeric columns with more than 100 distinct
values, as in the paper's App. D.2; the others stay uniform): run the real Dagster assets on `../shared/datasets/adult_raw`,
then measure (benchmark paper Figure 5 / Table 19):
- total_marginal_size: the sum over all 2-way marginals of their cell counts after preprocessing
  (average_marginal_size: the mean; raw_*: the same for the raw distinct values);
- tvd2: average 2-way TVD between the real table and the real table after preprocessing (every
  real row encoded with the DP plan and decoded back): the information preprocessing loses;
- tvd2_synthetic: average 2-way TVD between the real table and the synthetic table;
- seconds: the whole pipeline's wall time (preprocess_seconds: the `preprocessed` stage alone,
  from its public progress in the event log, bench/progress.py).
TVDs are computed owner-side on a fixed evaluation discretization (numbers in 16 quantile bins of
the real column, categories as they are), the same for every run.

    .venv/bin/python bench/preprocessing.py [--epsilon 1.0] [--repeats 2] [--binnings privtree]

Writes bench/results/preprocessing.json (a list of flat records).
"""

import argparse
import itertools
import json
import shutil
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
from progress import run_stage_times  # noqa: E402
sys.path.insert(0, str(ROOT))
CSV = DATASETS / "adult_raw" / "adult_raw.csv"

from dp_synth_assets.core.domain import EncodingPlan, decode  # noqa: E402
from dp_synth_assets.definitions import build_definitions  # noqa: E402


def evaluation_frame(frame: pd.DataFrame, real: pd.DataFrame) -> pd.DataFrame:
    out = {}
    for c in real.columns:
        if pd.api.types.is_numeric_dtype(real[c]):
            edges = np.unique(np.quantile(real[c].dropna(), np.linspace(0, 1, 17)))
            out[c] = np.searchsorted(edges[1:-1], pd.to_numeric(frame[c]).to_numpy(), side="right")
            out[c] = np.where(frame[c].isna(), -1, out[c])
        else:
            out[c] = frame[c].astype("string").fillna("<NULL>").to_numpy()
    return pd.DataFrame(out)


def tvd2(a: pd.DataFrame, b: pd.DataFrame) -> float:
    values = []
    for pair in itertools.combinations(a.columns, 2):
        pa = a.groupby(list(pair)).size() / len(a)
        pb = b.groupby(list(pair)).size() / len(b)
        joined = pd.concat([pa, pb], axis=1).fillna(0.0)
        values.append(0.5 * float((joined.iloc[:, 0] - joined.iloc[:, 1]).abs().sum()))
    return float(np.mean(values))


def marginal_sizes(sizes: list[int]) -> tuple[int, float]:
    cells = [a * b for a, b in itertools.combinations(sizes, 2)]
    return int(sum(cells)), float(np.mean(cells))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--binnings", nargs="+", choices=("uniform", "privtree"),
                        default=["uniform", "privtree"])
    args = parser.parse_args()
    if not CSV.exists():
        sys.exit(f"needs {CSV} (the shared datasets); not found")
    registry = yaml.safe_load((ROOT / "datasets.yaml").read_text())["datasets"]
    base = registry["adult_raw"]
    real = duckdb.connect().execute(f"SELECT * FROM read_csv('{CSV}')").df()
    real_eval = evaluation_frame(real, real)
    raw_total, raw_mean = marginal_sizes([real[c].nunique(dropna=False) for c in real.columns])
    print(f"raw: total 2-way marginal size {raw_total:.3g}, average {raw_mean:.3g}")
    records = []
    for binning in args.binnings:
        for rep in range(args.repeats):
            work = WORK / f"pre_{binning}_{rep}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            entry = json.loads(json.dumps(base))
            entry["source"] = {"csv": str(CSV)}
            entry["privacy"]["epsilon"] = args.epsilon
            entry["privacy"]["limit"]["epsilon"] = max(args.epsilon, 20.0)
            entry["seed"] = rep
            for name, spec in entry["columns"].items():
                # PrivTree where the raw domain exceeds 100 values (benchmark paper App. D.2);
                # smaller integer columns keep exact uniform bins in both settings
                if spec["kind"] != "categorical" and real[name].nunique() > 100:
                    spec["binning"] = binning
            (work / "datasets.yaml").write_text(yaml.safe_dump({"datasets": {"adult_raw": entry}},
                                                                sort_keys=False))
            defs = build_definitions(work / "datasets.yaml", work / "w.duckdb", work / "l.sqlite",
                                     work / "public")
            started, instance = time.perf_counter(), dg.DagsterInstance.ephemeral()
            result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                                    instance=instance)
            seconds = time.perf_counter() - started
            assert result.success
            # the stage's public progress in the event log (bench/progress.py)
            pre_seconds = run_stage_times(instance, result.run_id)["preprocessed"]["seconds"]
            plan = EncodingPlan.from_json((work / "public" / "adult_raw" / "plan.json").read_text())
            con = duckdb.connect(str(work / "w.duckdb"), read_only=True)
            codes = con.execute("SELECT * FROM private.adult_raw_encoded").fetchnumpy()
            synthetic = con.execute("SELECT * FROM synthetic.adult_raw").df()
            con.close()
            preprocessed = decode(plan, codes, np.random.default_rng(rep)).to_pandas()
            total, mean = marginal_sizes(list(plan.domain.values()))
            record = {
                "binning": binning, "epsilon": args.epsilon, "delta": entry["privacy"]["delta"],
                "accounting": "tight", "seed": rep,
                "total_marginal_size": total, "average_marginal_size": mean,
                "raw_total_marginal_size": raw_total, "raw_average_marginal_size": raw_mean,
                "tvd2": tvd2(real_eval, evaluation_frame(preprocessed, real)),
                "tvd2_synthetic": tvd2(real_eval, evaluation_frame(synthetic, real)),
                "seconds": seconds, "preprocess_seconds": pre_seconds,
                "numeric_codes": {c: plan.domain[c] for c, s in entry["columns"].items()
                                  if s["kind"] != "categorical"},
            }
            records.append(record)
            print(f"{binning:8s} rep {rep}: marginal size total {total:,} (avg {mean:.0f}), "
                  f"tvd2 preprocessed {record['tvd2']:.4f}, synthetic {record['tvd2_synthetic']:.4f}, "
                  f"{seconds:.1f}s (preprocessing {pre_seconds:.1f}s)")
    out = RESULTS / "preprocessing.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
