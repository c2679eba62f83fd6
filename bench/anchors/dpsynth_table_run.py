"""One anchor run of bench/suite.py: Google dpsynth's single-table synthesizer
(`TabularConfig` with its MST or AIM) on one table, in its own process and its own venv.

dpsynth needs Python >= 3.12 and pins jax 0.11: it runs in the venv bench/relational_dpsynth.py
installs (`install`, BENCH_WORK/dpsynth-venv, from a local source checkout of google/dpsynth), and
this script imports nothing of the project.

Two inputs, as the suite gives every anchor:
- a discretized table (`--data` codes CSV, `--domain` JSON of cells per column): every column is a
  `CategoricalAttribute` over its public codes 0..k-1; the output is codes, scored as codes;
- a raw table (`--raw` CSV, `--columns` JSON: the datasets.yaml `columns:` block): what a user of
  dpsynth declares. A categorical or boolean column is an `OpenSetCategoricalAttribute` (dpsynth
  discovers its values with DP partition selection, from the `delta` it is given; a missing value
  is the string `<NA>`, a value of its own), with the declared `categories`, if any, as its public
  values. An integer, float or datetime column is a `NumericalAttribute` over its declared
  `bounds`, or, where none are declared, the source's exact minimum and maximum, which dpsynth
  requires and which are not private (the result's note says so); a missing value is dpsynth's
  out-of-domain value (`clip_to_range=False`), decoded as NaN. A datetime travels as seconds
  since the epoch. dpsynth bins numbers itself (`numerical_bins`, default 32).

The budget: `TabularConfig(...).configure(zcdp_rho=RHO, delta=DELTA)` with `--rho` the zCDP
budget the project's synthesizer gets for the same (epsilon, delta) (the suite's tight
conversion), as bench/anchors/dpsynth_run.py does: dpsynth's `calibrate` searches from rho = 0,
which its configure refuses. Everything else is dpsynth's default (`init_budget_fraction` 0.1).

    python bench/anchors/dpsynth_table_run.py --algorithm mst --raw t.csv --columns c.json \
        --rho 0.015 --delta 1e-9 --seed 0 --out synthetic.csv

Prints `RESULT {json}` last (status, seconds of the fit and sample, peak resident MB, rows,
note), as the suite's other anchors do.
"""

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd

MISSING = "<NA>"
NUMERIC = ("integer", "float", "datetime")


def discretized_domains(domain: dict[str, int]) -> dict:
    from dpsynth import domain as d

    return {c: d.CategoricalAttribute(possible_values=list(range(int(k))))
            for c, k in domain.items()}


def as_numbers(values: pd.Series, kind: str) -> pd.Series:
    """A numeric column's values as floats (a datetime's as seconds since the epoch); NaN where
    a value is missing or not a number."""
    if kind != "datetime":
        return pd.to_numeric(values, errors="coerce").astype(float)
    stamps = pd.to_datetime(values, errors="coerce")
    return (stamps - pd.Timestamp(0)).dt.total_seconds()


def raw_domains(frame: pd.DataFrame, columns: dict) -> tuple[dict, pd.DataFrame, list[str]]:
    """dpsynth's attributes of the declared columns, the frame in the form they read (strings,
    numbers), and the columns whose bounds are the source's exact ones."""
    from dpsynth import domain as d

    attributes, data, exact = {}, {}, []
    for name, spec in columns.items():
        kind, values = spec.get("kind", "categorical"), frame[name]
        if kind in NUMERIC:
            numbers = as_numbers(values, kind)
            bounds = spec.get("bounds")
            if bounds is None:
                low, high = float(numbers.min()), float(numbers.max())
                exact.append(name)
            else:
                low, high = (float(as_numbers(pd.Series([b]), kind).iloc[0]) for b in bounds)
            attributes[name] = d.NumericalAttribute(
                min_value=low, max_value=high, clip_to_range=False,
                dtype="int" if kind in ("integer", "datetime") else "float")
            data[name] = numbers.clip(low, high).astype(float)
        else:
            public = [str(c) for c in spec.get("categories") or []]
            attributes[name] = d.OpenSetCategoricalAttribute(public_possible_values=public)
            data[name] = values.astype(object).where(values.notna(), MISSING).astype(str)
    return attributes, pd.DataFrame(data), exact


def decoded(synthetic: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """The synthetic rows in the source's form: `<NA>` back to a missing value, datetimes from
    seconds, booleans from their text, integers as dpsynth makes them."""
    out = {}
    for name, spec in columns.items():
        values = synthetic[name]
        if spec.get("kind") == "datetime":
            out[name] = pd.to_datetime(pd.to_numeric(values, errors="coerce"), unit="s")
        elif spec.get("kind") == "integer":
            # dpsynth's own rule for an int column's value (the ceiling of its bin's midpoint),
            # which it applies only where no value is out of domain (`clip_to_range`)
            out[name] = np.ceil(pd.to_numeric(values, errors="coerce"))
        elif spec.get("kind") in NUMERIC:
            out[name] = pd.to_numeric(values, errors="coerce")
        elif spec.get("kind") == "boolean":
            out[name] = values.astype(str).map({"True": True, "False": False})
        else:
            out[name] = values.astype(object).where(values.astype(str) != MISSING, None)
    return pd.DataFrame(out)


# the command line: a discretized table (--data, --domain) or a raw one (--raw, --columns)
OPTIONS = {
    "--algorithm": {"choices": ("mst", "aim"), "required": True},
    "--data": {"type": Path, "help": "codes CSV (discretized table)"},
    "--domain": {"type": Path, "help": "cells per column (discretized table)"},
    "--raw": {"type": Path, "help": "raw CSV"},
    "--columns": {"type": Path, "help": "the raw table's `columns:` (JSON)"},
    "--rho": {"type": float, "required": True, "help": "zCDP budget"},
    "--delta": {"type": float, "required": True, "help": "for the partition selection"},
    "--seed": {"type": int, "default": 0},
    "--out": {"type": Path, "required": True, "help": "the synthetic rows (CSV)"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, settings in OPTIONS.items():
        parser.add_argument(flag, **settings)
    args = parser.parse_args()

    from dpsynth import data_generation_v3 as tabular
    from dpsynth import discrete_mechanisms

    note = ""
    if args.raw is not None:
        columns = json.loads(args.columns.read_text())
        frame = pd.read_csv(args.raw)
        domains, data, exact = raw_domains(frame, columns)
        if exact:
            note = f"exact bounds (not private) for {', '.join(exact)}"
    else:
        domain = json.loads(args.domain.read_text())
        data = pd.read_csv(args.data)[list(domain)]
        domains = discretized_domains(domain)
    mechanism = (discrete_mechanisms.MSTConfig() if args.algorithm == "mst"
                 else discrete_mechanisms.AIMConfig())
    print("STAGE configure", flush=True)
    started = time.perf_counter()
    calibrated = tabular.TabularConfig(domains=domains, discrete_mechanism=mechanism).configure(
        zcdp_rho=args.rho, delta=args.delta)
    print("STAGE fit and sample", flush=True)
    result = calibrated(np.random.default_rng(args.seed), data)
    synthetic = result.synthetic_data
    seconds = time.perf_counter() - started
    if args.raw is not None:
        synthetic = decoded(synthetic, columns)
    synthetic.to_csv(args.out, index=False)
    print("RESULT " + json.dumps({
        "status": "ok", "seconds": round(seconds, 2), "rows": int(len(synthetic)),
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rho": args.rho, "algorithm": args.algorithm, "note": note}), flush=True)


if __name__ == "__main__":
    main()
