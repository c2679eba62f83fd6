"""Generation engines side by side on adult, fed the very same measurements (issue 5).

For each epsilon and seed: one `measure` subprocess materializes our pipeline up to
`measurements` (method `--method`, default absyn, the product's default), then one `generate`
subprocess per engine (pgm, parallel_pgm, gum; `--generators`) materializes `model` and
`synthetic` from those measurements (bench/anchors/generator_run.py). Each record: 2-way TVD
over all pairs and 3-way TVD over the 200 fixed triples (the same `Fidelity` as
bench/compare_methods.py), wall seconds of the two steps (fit, sample) and of the whole
subprocess, peak RSS of the process and of its worker processes. The table adds, per epsilon,
parallel_pgm's speed-up over pgm (fit seconds) and its TVD difference, against ABSyn's claim
(section VIII.C: at most 0.01 apart, much faster).

Two more measurements, once per session:
- dense: `--method manual` with every pair measured (all 91 of adult) at epsilon 1, seed 0; pgm
  with its default guard (refuses, and the record keeps its message), then `auto`.
- sampling: 1,000,000 rows drawn from the pgm model of epsilon 1, seed 0, in memory: seconds,
  peak RSS growth and the output's own size.

    /tmp/probe-venv/bin/python bench/compare_generators.py                 # the full grid
    .../python bench/compare_generators.py --epsilons 1 --seeds 1            # a reduced grid

Records (flat: generator, epsilon, seed, selection, tvd2, tvd3, seconds, fit_seconds,
sample_seconds, peak_mb, workers_peak_mb, rows, note) go to bench/results/generators.json,
merged by (generator, epsilon, seed, selection) so partial reruns accumulate; `--redo` reruns.
The table is printed and written to bench/results/generators.md.
"""

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_methods import (ADULT, DELTA, ROOT, Fidelity, fmt,  # noqa: E402
                             run_bounded, slug)

BENCH = ROOT / "bench"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
WORK = WORK / "generators"
RUNNER = BENCH / "anchors" / "generator_run.py"
ENGINES = ("pgm", "parallel_pgm", "gum")


def key(r: dict) -> tuple:
    return (r["generator"], r["epsilon"], r["seed"], r["selection"])


def load(path: Path) -> dict:
    return {key(r): r for r in json.loads(path.read_text())} if path.exists() else {}


def save(path: Path, records: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(records.values(), key=lambda r: (
        r["selection"], r["epsilon"] or 0, r["seed"] or 0, r["generator"])), indent=1))
    tmp.replace(path)


def measure(method: str, epsilon: float, seed: int, timeout_s: float) -> tuple[Path, dict]:
    workdir = WORK / "runs" / slug(method, f"eps{epsilon}", f"seed{seed}")
    cmd = [sys.executable, str(RUNNER), "measure", "--method", method,
           "--data", str(ADULT / "adult.csv"), "--domain", str(ADULT / "adult-domain.json"),
           "--epsilon", repr(epsilon), "--delta", repr(DELTA), "--seed", str(seed),
           "--workdir", str(workdir)]
    run = run_bounded(cmd, WORK / "logs" / f"{workdir.name}-measure.log", timeout_s)
    return workdir, run


def generate(workdir: Path, engine: str, timeout_s: float, extra: list[str] = ()) -> tuple[Path, dict]:
    out = WORK / "synthetic" / f"{workdir.name}-{engine}.csv.gz"
    if out.exists():
        out.unlink()
    cmd = [sys.executable, str(RUNNER), "generate", "--generator", engine,
           "--workdir", str(workdir), "--out", str(out), *extra]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = run_bounded(cmd, WORK / "logs" / f"{workdir.name}-{engine}.log", timeout_s, env)
    return out, run


def engine_record(engine, epsilon, seed, selection, out, run, fidelity, note="") -> dict:
    res = run["result"] or {}
    base = {"generator": engine, "epsilon": epsilon, "seed": seed, "selection": selection,
            "delta": DELTA, "process_seconds": run["wall"], "max_load1": run["max_load1"]}
    if run["timed_out"] or res.get("status") != "ok":
        why = (f"timeout after {run['wall']:.0f} s" if run["timed_out"]
               else res.get("note") or f"failed (exit {run['code']}): see bench/work/generators/logs")
        return {**base, "tvd2": None, "tvd3": None, "seconds": res.get("seconds"),
                "fit_seconds": None, "sample_seconds": None,
                "peak_mb": res.get("peak_mb", run["maxrss_mb"]), "workers_peak_mb": None,
                "rows": None, "note": "; ".join(x for x in (why, note) if x)}
    t2, t3 = fidelity(pd.read_csv(out))
    return {**base, "tvd2": t2, "tvd3": t3,
            "seconds": (res["fit_seconds"] or 0) + (res["sample_seconds"] or 0),
            "fit_seconds": res["fit_seconds"], "sample_seconds": res["sample_seconds"],
            "peak_mb": res["peak_mb"], "workers_peak_mb": res["workers_peak_mb"],
            "rows": res["rows"], "engine_chosen": res.get("engine"),
            "note": "; ".join(x for x in (note, res.get("reason") if engine == "auto" else "")
                              if x)}


def markdown(records: list[dict]) -> str:
    lines = [
        "# Generation engines on adult (bench/compare_generators.py)",
        "",
        (f"Written {datetime.now(UTC).isoformat(timespec='seconds')}. Each engine is fed the same "
         f"noisy measurements (selection `absyn` unless stated; delta {DELTA:g}, tight "
         f"accounting). seconds = fit (`model` step) + sample and write (`synthetic` step); peak "
         f"MB = the run process's maximum RSS (workers: the largest worker process's). Means "
         f"over the seeds that finished. {os.cpu_count()} cores; max load = the highest "
         f"1-minute load average seen (above {os.cpu_count()}: other work competed)."),
        "",
        "| selection | epsilon | generator | runs | tvd2 | tvd3 | fit s | sample s | peak MB | "
        "workers MB | max load | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    groups: dict = {}
    for r in records:
        if r["generator"] == "sampling":
            continue
        groups.setdefault((r["selection"], r["epsilon"], r["generator"]), []).append(r)
    order = {g: i for i, g in enumerate((*ENGINES, "auto"))}
    summary = {}
    for (sel, eps, gen), rs in sorted(groups.items(), key=lambda kv: (
            kv[0][0] != "absyn", kv[0][1], order.get(kv[0][2], 9))):
        done = [r for r in rs if r["tvd2"] is not None]
        mean = lambda f: float(np.mean([r[f] for r in done if r.get(f) is not None])) \
            if any(r.get(f) is not None for r in done) else None  # noqa: E731
        summary[(sel, eps, gen)] = {f: mean(f) for f in ("tvd2", "tvd3", "fit_seconds")}
        notes = sorted({r["note"] for r in rs if r.get("note")})
        lines.append(
            f"| {sel} | {eps:g} | {gen} | {len(done)}/{len(rs)} | {fmt(mean('tvd2'))} | "
            f"{fmt(mean('tvd3'))} | {fmt(mean('fit_seconds'), 1)} | "
            f"{fmt(mean('sample_seconds'), 1)} | {fmt(mean('peak_mb'), 0)} | "
            f"{fmt(mean('workers_peak_mb'), 0)} | "
            f"{max((r['max_load1'] or 0) for r in rs):.1f} | {' / '.join(notes)[:400]} |")
    lines += ["", "parallel_pgm against pgm (ABSyn section VIII.C: TVD within 0.01, much faster):",
              "", "| epsilon | fit speed-up (pgm s / parallel s) | tvd2 parallel - pgm | "
              "tvd3 parallel - pgm |", "| --- | --- | --- | --- |"]
    for (sel, eps, gen), s in sorted(summary.items(), key=lambda kv: kv[0][1]):
        if gen != "parallel_pgm" or (sel, eps, "pgm") not in summary:
            continue
        p = summary[(sel, eps, "pgm")]
        if None in (s["fit_seconds"], p["fit_seconds"], s["tvd2"], p["tvd2"]):
            continue
        lines.append(f"| {eps:g} | {p['fit_seconds'] / s['fit_seconds']:.2f}x | "
                     f"{s['tvd2'] - p['tvd2']:+.4f} | {s['tvd3'] - p['tvd3']:+.4f} |")
    sampling = [r for r in records if r["generator"] == "sampling"]
    if sampling:
        r = sampling[-1]
        lines += ["", (f"Sampling: {r['rows']:,} rows from the pgm model (epsilon {r['epsilon']:g}) "
                       f"in {r['seconds']:.1f} s; peak RSS grew by {r['peak_growth_mb']:.0f} MB "
                       f"for an output of {r['output_mb']:.0f} MB ({r['note']}).")]
    return "\n".join(lines) + "\n"


def sample_million(workdir: Path, args, records: dict, timeout: float) -> None:
    """1,000,000 rows from the pgm model just fitted in `workdir` (in memory, no Dagster)."""
    run = run_bounded([sys.executable, str(RUNNER), "sample", "--workdir", str(workdir),
                       "--rows", "1000000"], WORK / "logs" / "sampling.log", timeout)
    res = run["result"] or {}
    if res.get("status") != "ok":
        print(f"  sampling failed: {run}", flush=True)
        return
    records[("sampling", 1.0, 0, args.method)] = {
        "generator": "sampling", "epsilon": 1.0, "seed": 0, "selection": args.method,
        "tvd2": None, "tvd3": None, "seconds": res["seconds"], "peak_mb": res["peak_mb"],
        "peak_growth_mb": res["peak_growth_mb"], "output_mb": res["output_mb"],
        "rows": res["rows"], "note": f"model {res['model']}, in memory"}
    save(args.results, records)
    print(f"  sampling 1M rows: {res['seconds']:.1f} s, +{res['peak_growth_mb']:.0f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.2, 1.0, 5.0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--method", default="absyn")
    parser.add_argument("--generators", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--no-dense", action="store_true", help="skip the all-pairs run")
    parser.add_argument("--timeout-minutes", type=float, default=30.0)
    parser.add_argument("--redo", action="store_true")
    parser.add_argument("--results", type=Path, default=RESULTS / "generators.json")
    args = parser.parse_args()
    if not (ADULT / "adult.csv").exists():
        sys.exit(f"{ADULT} is missing: this benchmark needs ../shared/datasets/adult beside the "
                 "checkout")
    timeout = args.timeout_minutes * 60
    records = load(args.results)
    domain = json.loads((ADULT / "adult-domain.json").read_text())
    fidelity = Fidelity(pd.read_csv(ADULT / "adult.csv")[list(domain)], domain)

    def todo(*k) -> bool:
        return args.redo or k not in records or records[k].get("tvd2") is None

    for epsilon in args.epsilons:
        for seed in range(args.seeds):
            if not any(todo(g, epsilon, seed, args.method) for g in args.generators):
                continue
            workdir, run = measure(args.method, epsilon, seed, timeout)
            if (run["result"] or {}).get("status") != "ok":
                print(f"measure eps {epsilon} seed {seed} failed: {run['result']}", flush=True)
                continue
            for engine in args.generators:
                out, run = generate(workdir, engine, timeout)
                rec = engine_record(engine, epsilon, seed, args.method, out, run, fidelity)
                records[key(rec)] = rec
                save(args.results, records)
                print(f"  {engine:13s} eps {epsilon:<4g} seed {seed}: tvd2 {fmt(rec['tvd2'])} "
                      f"tvd3 {fmt(rec['tvd3'])} fit {fmt(rec['fit_seconds'], 1)} s "
                      f"sample {fmt(rec['sample_seconds'], 1)} s {fmt(rec['peak_mb'], 0)} MB "
                      f"{rec['note'][:120]}", flush=True)
                if engine == "pgm" and epsilon == 1.0 and seed == 0:
                    sample_million(workdir, args, records, timeout)
    if not args.no_dense and (args.redo or todo("auto", 1.0, 0, "manual-all-pairs")):
        workdir, run = measure("manual", 1.0, 0, timeout)
        if (run["result"] or {}).get("status") == "ok":
            for engine in ("pgm", "auto"):
                out, run = generate(workdir, engine, timeout)
                rec = engine_record(engine, 1.0, 0, "manual-all-pairs", out, run, fidelity,
                                    note="all 91 pairs measured")
                records[key(rec)] = rec
                save(args.results, records)
                print(f"  dense {engine}: tvd2 {fmt(rec['tvd2'])} fit "
                      f"{fmt(rec['fit_seconds'], 1)} s {fmt(rec['peak_mb'], 0)} MB "
                      f"{rec['note'][:200]}", flush=True)
    table = markdown(list(records.values()))
    (RESULTS / "generators.md").write_text(table)
    print(table)


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
