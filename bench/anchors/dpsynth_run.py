"""One anchor run: Google dpsynth's relational mode (`MultiTableConfig` -> `MultiTableMechanism`)
on a parent table and its children, in its own process and its own venv.

dpsynth needs Python >= 3.12 and pins jax 0.11; bench/relational_dpsynth.py creates the venv
under BENCH_WORK and installs it from a local source checkout (`--dpsynth-source`), so this
script never runs in the project's environment and imports nothing of the project.

Input: a folder with `parents.csv`, `children.csv` and `spec.json` (written by
bench/relational_dpsynth.py): both tables' `columns:` declarations in the project's
datasets.yaml form, the key names and `max_children`. Each declared column becomes a dpsynth
attribute from the same public facts and no others:
- categorical: `CategoricalAttribute(possible_values = categories + ["other"])` with the
  out-of-domain index on "other" (a value outside the list reads as `other`, as the project's
  `other` code does);
- integer / float: `NumericalAttribute(min_value, max_value)` from `bounds` (dtype int for an
  integer); a nullable one with `clip_to_range=False`, dpsynth's single out-of-domain value,
  which it decodes to NaN, so a NULL stays a value of its own; its non-null values are clipped
  to the bounds beforehand, row by row, as the project's own declaration clips them. dpsynth
  chooses its bins itself (its default `numerical_bins` = 32 over the bounds); the declared
  `bins` are only the evaluation's.
- the relation: `ForeignKeyRelation(max_children_per_parent = max_children)`.
Everything else is `MultiTableConfig`'s default (AIM, init_budget_fraction 0.1, 2 permutation
slots, the `empty_token` strategy), run with `numpy.random.default_rng(seed)`.

The budget: `config.calibrate(epsilon, delta)` is tried first. In dpsynth 0.3.0 (its newest
commit, with dp-accounting 0.6.0) it raises for every MultiTableConfig: calibrate's search starts
at rho = 0 and `MultiTableConfig.configure` refuses a rho that is not positive (dpsynth's own
California census integration test fails the same way). The run then uses the documented
alternative, `config.configure(zcdp_rho=RHO, delta=delta)`, with `--rho` the zCDP budget the
project's synthesizer gets for the same (epsilon, delta): both sides spend the same rho. The
calibrate error is in the result (`calibrate_error`).

    python bench/anchors/dpsynth_run.py --input DIR --epsilon 1 --delta 1e-9 --rho 0.015 \
        --seed 0 --out DIR

Writes `parents.csv` and `children.csv` (the synthetic tables, keys included) into `--out`;
prints `STAGE ...` lines as it goes (how far a failed run got) and `RESULT {json}` last: seconds,
peak resident MB, the zCDP rho in force, the rows of each synthetic table.
"""

import argparse
import json
import math
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd


def attribute(spec: dict):
    """The dpsynth attribute of one declared column."""
    from dpsynth import domain

    if spec["kind"] == "categorical":
        if spec.get("nullable"):
            raise ValueError("a nullable categorical has no dpsynth counterpart here")
        values = [str(c) for c in spec["categories"]] + [spec.get("other_label", "other")]
        return domain.CategoricalAttribute(possible_values=values,
                                           out_of_domain_index=len(values) - 1)
    low, high = (float(b) for b in spec["bounds"])
    return domain.NumericalAttribute(min_value=low, max_value=high,
                                     clip_to_range=not spec.get("nullable", False),
                                     dtype="int" if spec["kind"] == "integer" else "float")


def prepared(frame: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """`frame` as dpsynth reads it: categoricals as text, a nullable number's non-null values
    clipped to its bounds (row by row; a NULL stays NULL)."""
    out = frame.copy()
    for name, spec in columns.items():
        if spec["kind"] == "categorical":
            out[name] = out[name].astype(object).where(out[name].notna(), None).map(
                lambda v: v if v is None else str(v))
        elif spec.get("nullable"):
            low, high = (float(b) for b in spec["bounds"])
            out[name] = pd.to_numeric(out[name], errors="coerce").clip(low, high)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--delta", type=float, default=1e-9)
    parser.add_argument("--rho", type=float, default=None,
                        help="zCDP budget for configure() when calibrate() fails")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import dpsynth
    from absl import logging

    logging.set_verbosity(logging.INFO)   # dpsynth's own progress: how far a failed run got

    spec = json.loads((args.input / "spec.json").read_text())
    key, foreign_key = spec["key"], spec["foreign_key"]
    parents = pd.read_csv(args.input / "parents.csv", dtype={key: str}, keep_default_na=True)
    children = pd.read_csv(args.input / "children.csv", dtype={foreign_key: str})
    domains = {"parents": {c: attribute(s) for c, s in spec["parent_columns"].items()},
               "children": {c: attribute(s) for c, s in spec["child_columns"].items()}}
    relation = dpsynth.ForeignKeyRelation(
        parent_table="parents", parent_primary_key=key, child_table="children",
        child_foreign_key=foreign_key, max_children_per_parent=int(spec["max_children"]))
    print(f"STAGE read {len(parents)} parents, {len(children)} children", flush=True)
    started = time.perf_counter()
    config = dpsynth.MultiTableConfig(domains=domains, foreign_keys=[relation])
    calibrate_error = None
    try:
        mechanism = config.calibrate(epsilon=args.epsilon, delta=args.delta)
    except Exception as error:  # noqa: BLE001 - recorded, then the documented alternative
        calibrate_error = f"{type(error).__name__}: {error}"
        if args.rho is None:
            raise
        mechanism = config.configure(zcdp_rho=args.rho, delta=args.delta)
    calibrated = time.perf_counter()
    print("STAGE configured", flush=True)
    # the rho in force, from the root count's noise: configure gives the count
    # init_budget_fraction * rho / (columns + 1), at sigma = sqrt(0.5 / that)
    columns = sum(len(d) for d in domains.values())
    rho = (0.5 / mechanism.total_count_sigma ** 2) * (columns + 1) / config.init_budget_fraction
    result = mechanism(np.random.default_rng(args.seed),
                       {"parents": prepared(parents, spec["parent_columns"]),
                        "children": prepared(children, spec["child_columns"])})
    seconds = time.perf_counter() - started
    print("STAGE synthesized", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    tables = result.synthetic_tables
    tables["parents"].to_csv(args.out / "parents.csv", index=False)
    tables["children"].to_csv(args.out / "children.csv", index=False)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({
        "seconds": round(seconds, 2), "calibrate_seconds": round(calibrated - started, 2),
        "peak_mb": round(peak_mb, 1), "rho": rho if math.isfinite(rho) else None,
        "calibrate_error": calibrate_error,
        "parents": len(tables["parents"]), "children": len(tables["children"]),
        "dpsynth": dpsynth.__version__}), flush=True)


if __name__ == "__main__":
    main()
