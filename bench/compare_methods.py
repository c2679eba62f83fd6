"""Every selection method side by side on adult, against smartnoise's MST and AIM (issue 4).

For each epsilon, seed and method this runs one synthesis in a fresh subprocess, so wall time and
peak memory are that run's alone:

- ours (`--methods`, default absyn privsyn aim mst ppsyn): the real Dagster pipeline, started as
  `bench/anchors/ours_run.py` with this interpreter (our stack). A method that is not implemented
  yet (unknown to `dp_synth_assets.core.select` or its module missing) is reported and skipped.
- anchors (`--anchors`, default smartnoise-mst smartnoise-aim): smartnoise-synth 1.0.8 from PyPI,
  started as `bench/anchors/smartnoise_run.py` inside `bench/.venv-smartnoise`, which this script
  creates on first use from `bench/anchors/smartnoise-requirements.txt` (pinned; it needs mbi<2).
  Both sides get the same discretized table, the same public domain (nothing spent on
  preprocessing), the same epsilon and delta, and sample as many rows as they estimate/know.

Then, owner-side and with the same code for every table (benchmark paper section 8.3): average
2-way TVD over all column pairs and average 3-way TVD over 200 fixed random triples (seed 0, drawn
as bench/adult_pipeline.py draws them), plus the two reference points of
docs/decisions/0021-benchmarks.md measured in this session, per seed: a bootstrap resample of
the source and independent columns drawn from its exact 1-way marginals.

    /tmp/probe-venv/bin/python bench/compare_methods.py                  # the full grid
    .../python bench/compare_methods.py --epsilons 1 --seeds 1 --methods privsyn \
        --anchors smartnoise-mst                                        # a reduced grid
    .../python bench/compare_methods.py --accounting paper               # ours at the papers' rho

Records are flat (method, epsilon, delta, accounting, seed, tvd2, tvd3, seconds, peak_mb, rows,
note, and a few extras) and are merged into bench/results/methods.json by (method, epsilon, seed,
accounting), so partial reruns accumulate; a run whose record exists is not run again (a timed-out
one neither, unless --retry-timeouts; failures are retried), `--redo` reruns the grid. The table of
per (method, epsilon) means with our ratios to each anchor is printed and written to
bench/results/methods.md from all records in methods.json.

Time: `--timeout-minutes` per run (default 30); a run that hits it is killed (its process group)
and recorded with tvd2 = tvd3 = null and the timeout in `note`. smartnoise's AIM runs first at its
defaults (max_model_size 80 MB, max_cells 10000, rounds 16 d); if that times out, the same cell is
run again with a smaller model and fewer rounds (`--aim-max-model-mb 10 --aim-rounds 50`), the
record says so in `note`, and the other seeds at that epsilon go straight to the reduced settings
(`--aim-start reduced` skips the defaults everywhere). smartnoise's `rounds` is not a plain cap:
it sets the per-round budget (rho / rounds) and the 1-way marginals' share (0.9 d / rounds: 25% at
50 rounds instead of 5.6% at 16 d); the loop stops when the budget is spent, with annealing, so
it runs at most about `rounds` rounds (34 and 38 of 224 in two runs at epsilon 1 here).

Accounting: ours converts (epsilon, delta) to rho with the tight conversion (OpenDP's zCDP ->
approxDP profile) unless `--accounting paper`; smartnoise 1.0.8 uses `snsynth.utils.cdp_rho`, a
binary search over the same OpenDP profile: the same rho (0.0149731 at epsilon 1, delta 1e-9).
"""

import argparse
import hashlib
import itertools
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from bounded import log_tail, run_bounded

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import DATASETS, RESULTS, WORK  # noqa: E402
BENCH = ROOT / "bench"
ADULT = DATASETS / "adult"
VENV = BENCH / ".venv-smartnoise"
REQUIREMENTS = BENCH / "anchors" / "smartnoise-requirements.txt"
WORK = WORK / "compare"

OURS = ("absyn", "privsyn", "aim", "mst", "ppsyn")
ANCHORS = {"smartnoise-mst": "mst", "smartnoise-aim": "aim"}
REFERENCES = ("bootstrap", "independent")
DELTA = 1e-9
NOT_IMPLEMENTED = 3  # ours_run.py's exit code for a method that does not exist yet
FIELDS = ("method", "epsilon", "delta", "accounting", "seed", "tvd2", "tvd3", "seconds", "peak_mb",
          "rows", "note")


# ---- metrics (owner side, the same for every table) --------------------------------------------


def encode(frame: pd.DataFrame, domain: dict[str, int]) -> np.ndarray:
    """Integer codes 0..k-1 per column; anything else (NaN, "-1", out of range) becomes k.

    The extra code k is a cell the real table never fills, so a synthesizer's out-of-domain rows
    count fully against it in every TVD.
    """
    codes = np.empty((len(frame), len(domain)), dtype=np.int64)
    for j, (col, k) in enumerate(domain.items()):
        v = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64)
        ok = np.isfinite(v) & (v == np.round(v)) & (v >= 0) & (v < k)
        codes[:, j] = np.where(ok, v, k).astype(np.int64)
    return codes


def tvd(real: np.ndarray, synth: np.ndarray, idx: tuple[int, ...], sizes: np.ndarray) -> float:
    """Total variation distance (half the L1 distance) of the two tables' marginals on `idx`."""
    dims = tuple(int(sizes[i]) + 1 for i in idx)
    cells = int(np.prod(dims))
    p = np.bincount(np.ravel_multi_index(real[:, idx].T, dims), minlength=cells) / len(real)
    q = np.bincount(np.ravel_multi_index(synth[:, idx].T, dims), minlength=cells) / len(synth)
    return 0.5 * float(np.abs(p - q).sum())


class Fidelity:
    """Average 2-way TVD over all pairs and 3-way TVD over 200 fixed triples against the source."""

    def __init__(self, real: pd.DataFrame, domain: dict[str, int]):
        self.domain = domain
        self.sizes = np.array(list(domain.values()))
        self.real = encode(real, domain)
        d = len(domain)
        self.pairs = list(itertools.combinations(range(d), 2))
        rng = np.random.default_rng(0)  # as bench/adult_pipeline.py draws them (repeats possible)
        self.triples = [tuple(sorted(int(i) for i in rng.choice(d, 3, replace=False)))
                        for _ in range(200)]

    def __call__(self, synth: pd.DataFrame) -> tuple[float, float]:
        codes = encode(synth, self.domain)
        return (float(np.mean([tvd(self.real, codes, p, self.sizes) for p in self.pairs])),
                float(np.mean([tvd(self.real, codes, t, self.sizes) for t in self.triples])))


def reference_records(real: pd.DataFrame, fidelity: Fidelity, seed: int) -> list[dict]:
    """The sampling-noise floor (bootstrap) and the no-correlation baseline (independent columns)."""
    rng = np.random.default_rng(1000 + seed)
    boot = real.sample(len(real), replace=True, random_state=1 + seed)
    indep = pd.DataFrame({c: rng.choice(real[c].to_numpy(), len(real)) for c in real.columns})
    records = []
    for name, frame in (("bootstrap", boot), ("independent", indep)):
        t2, t3 = fidelity(frame)
        records.append(record(name, None, None, None, seed, t2, t3, 0.0, None, len(frame),
                              "reference: exact data, not private"))
    return records


def record(method, epsilon, delta, accounting, seed, tvd2, tvd3, seconds, peak_mb, rows, note,
           **extra) -> dict:
    """One flat record: the fields every row has, then the run's extras."""
    values = (method, epsilon, delta, accounting, seed, tvd2, tvd3, seconds, peak_mb, rows, note)
    return {**dict(zip(FIELDS, values)), **extra}


# ---- the anchors' environment -----------------------------------------------------------------


def ensure_smartnoise_venv() -> tuple[Path | None, str]:
    """bench/.venv-smartnoise with the pinned requirements; (python, message) or (None, why)."""
    python = VENV / "bin" / "python"
    marker = VENV / ".ready.json"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and marker.exists():
        ready = json.loads(marker.read_text())
        if ready.get("requirements_sha256") == digest:
            return python, (f"{VENV.relative_to(ROOT)} ready (created {ready['created']} "
                            f"in {ready['seconds']:.0f} s)")
    print(f"creating {VENV.relative_to(ROOT)} from {REQUIREMENTS.relative_to(ROOT)} ...", flush=True)
    started = time.perf_counter()
    log = WORK / "logs" / "venv-smartnoise.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        steps = [[sys.executable, "-m", "venv", "--clear", str(VENV)],
                 [str(python), "-m", "pip", "install", "--no-input", "-r", str(REQUIREMENTS)]]
        for step in steps:
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                              check=False).returncode:
                return None, f"venv setup failed at {' '.join(step[:4])}: see {log} ({log_tail(log, 2)})"
    seconds = time.perf_counter() - started
    marker.write_text(json.dumps({"requirements_sha256": digest, "seconds": seconds,
                                  "created": datetime.now(UTC).isoformat(timespec="seconds")}))
    return python, f"{VENV.relative_to(ROOT)} created in {seconds:.0f} s"


# ---- one run of each kind ---------------------------------------------------------------------


def slug(*parts) -> str:
    return "_".join(str(p).replace(".", "p") for p in parts)


def run_ours(method: str, epsilon: float, seed: int, accounting: str, timeout_s: float,
             fidelity: Fidelity) -> dict:
    """One pipeline run in a subprocess; a record, or {"skip": why} when not implemented."""
    name = slug(method, accounting, f"eps{epsilon}", f"seed{seed}")
    out = WORK / "synthetic" / f"{name}.csv.gz"
    log = WORK / "logs" / f"{name}.log"
    cmd = [sys.executable, str(BENCH / "anchors" / "ours_run.py"), "--method", method,
           "--data", str(ADULT / "adult.csv"), "--domain", str(ADULT / "adult-domain.json"),
           "--epsilon", repr(epsilon), "--delta", repr(DELTA), "--accounting", accounting,
           "--seed", str(seed), "--workdir", str(WORK / "runs" / name), "--out", str(out)]
    if out.exists():
        out.unlink()
    run = run_bounded(cmd, log, timeout_s)
    res = run["result"] or {}
    if run["code"] == NOT_IMPLEMENTED and res.get("status") == "not_implemented":
        return {"skip": res.get("note", "not implemented")}
    base = {"method": method, "epsilon": epsilon, "delta": DELTA, "accounting": accounting,
            "seed": seed}
    if run["timed_out"]:
        return record(**base, tvd2=None, tvd3=None, seconds=run["wall"], peak_mb=run["maxrss_mb"],
                      rows=None, note=f"timeout: killed after {timeout_s / 60:g} min",
                      process_seconds=run["wall"], max_load1=run["max_load1"])
    if run["code"] != 0 or res.get("status") != "ok":
        return record(**base, tvd2=None, tvd3=None, seconds=run["wall"], peak_mb=run["maxrss_mb"],
                      rows=None, note=f"failed (exit {run['code']}): {log_tail(log)}",
                      process_seconds=run["wall"], max_load1=run["max_load1"])
    t2, t3 = fidelity(pd.read_csv(out))
    return record(**base, tvd2=t2, tvd3=t3, seconds=res["seconds"], peak_mb=res["peak_mb"],
                  rows=res["rows"], note="", rho=res["rho"], rho_spent=res["rho_spent"],
                  configured_epsilon=res["configured_epsilon"], check_seconds=res["check_seconds"],
                  selected=res["selected"], process_seconds=run["wall"],
                  max_load1=run["max_load1"])


def run_anchor(anchor: str, python: Path, epsilon: float, seed: int, timeout_s: float,
               fidelity: Fidelity, aim_mb: float | None = None,
               aim_rounds: int | None = None) -> dict:
    """One smartnoise run in the anchors' venv; a record. AIM's settings: None = its default."""
    synth = ANCHORS[anchor]
    settings = []
    if synth == "aim":
        settings = [f"mb{aim_mb or 'default'}", f"rounds{aim_rounds or 'default'}"]
    name = slug(anchor, f"eps{epsilon}", f"seed{seed}", *settings)
    out = WORK / "synthetic" / f"{name}.csv.gz"
    log = WORK / "logs" / f"{name}.log"
    cmd = [str(python), str(BENCH / "anchors" / "smartnoise_run.py"), "--synth", synth,
           "--data", str(ADULT / "adult.csv"), "--domain", str(ADULT / "adult-domain.json"),
           "--epsilon", repr(epsilon), "--delta", repr(DELTA), "--seed", str(seed), "--out", str(out)]
    note = ""
    if synth == "aim":
        default_rounds = 16 * len(fidelity.domain)
        if aim_mb:
            cmd += ["--max-model-mb", repr(aim_mb)]
        if aim_rounds:
            cmd += ["--rounds", str(aim_rounds)]
        if aim_mb or aim_rounds:
            note = (f"as shipped (mbi 1.1 'round' sampler); reduced AIM: max_model_size "
                    f"{aim_mb or 80:g} MB (default 80), rounds {aim_rounds or default_rounds} "
                    f"(default 16d = {default_rounds}; rounds sets the per-round budget "
                    f"rho/rounds, so fewer rounds also gives the 1-way marginals a larger share, "
                    f"0.9 d/rounds)")
        else:
            note = (f"as shipped (mbi 1.1 'round' sampler); smartnoise's defaults: max_model_size "
                    f"80 MB, max_cells 10000, rounds 16d = {default_rounds}")
    if synth == "mst":
        note = "as shipped: mbi 1.1 'round' sampler, exact row count as known_total"
    if out.exists():
        out.unlink()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = run_bounded(cmd, log, timeout_s, env)
    res = run["result"] or {}
    base = {"method": anchor, "epsilon": epsilon, "delta": DELTA, "accounting": "tight",
            "seed": seed}
    if run["timed_out"] or run["code"] != 0 or not res:
        why = (f"timeout: killed after {timeout_s / 60:g} min" if run["timed_out"]
               else f"failed (exit {run['code']}): {log_tail(log)}")
        return record(**base, tvd2=None, tvd3=None, seconds=run["wall"], peak_mb=run["maxrss_mb"],
                      rows=None, note="; ".join(n for n in (why, note) if n),
                      process_seconds=run["wall"], max_load1=run["max_load1"])
    t2, t3 = fidelity(pd.read_csv(out))
    return record(**base, tvd2=t2, tvd3=t3, seconds=res["seconds"], peak_mb=res["peak_mb"],
                  rows=res["rows"], note=note, rho=res["rho"], fit_seconds=res["fit_seconds"],
                  max_model_mb=res["max_model_mb"], rounds=res["rounds"],
                  process_seconds=run["wall"], max_load1=run["max_load1"])


# ---- records and the table --------------------------------------------------------------------


def key(r: dict) -> tuple:
    return (r["method"], r["epsilon"], r["seed"], r.get("accounting"))


def load_records(path: Path) -> dict[tuple, dict]:
    if not path.exists():
        return {}
    return {key(r): r for r in json.loads(path.read_text())}


def save_records(path: Path, records: dict[tuple, dict]) -> None:
    def order(r):
        return (r["method"] not in REFERENCES, r["method"], r["epsilon"] or 0, r.get("accounting") or "",
                r["seed"])

    # merge into what is on disk, so two runs of this script (say, the anchors' grid and an
    # `--accounting paper` rerun) never drop each other's records
    merged = {**load_records(path), **records}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(sorted(merged.values(), key=order), indent=1))
    tmp.replace(path)


def fmt(x, digits=4) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def mean_of(records: list[dict], field: str) -> float | None:
    vals = [r[field] for r in records if r.get(field) is not None]
    return float(np.mean(vals)) if vals else None


def summarize(records: list[dict]) -> list[dict]:
    """Per (method, accounting, epsilon): means over the seeds that finished."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["method"], r.get("accounting"), r["epsilon"]), []).append(r)
    rows = []
    for (method, accounting, epsilon), rs in groups.items():
        done = [r for r in rs if r["tvd2"] is not None]
        mean = {f: mean_of(done, f) for f in ("tvd2", "tvd3", "seconds", "peak_mb")}
        loads = [r["max_load1"] for r in rs if r.get("max_load1") is not None]
        notes = sorted({r["note"] for r in rs if r.get("note")})
        rows.append({"method": method, "accounting": accounting, "epsilon": epsilon,
                     "runs": len(done), "failed": len(rs) - len(done),
                     **mean,
                     "tvd2_sd": float(np.std([r["tvd2"] for r in done])) if len(done) > 1 else None,
                     "max_load1": max(loads) if loads else None, "notes": notes})
    return rows


def markdown(records: list[dict], venv_message: str, source: Path) -> str:
    """The comparison table: references, then per (method, epsilon) means and ratios to anchors."""
    rows = summarize(records)
    refs = [r for r in rows if r["method"] in REFERENCES]
    anchors = {(r["method"], r["epsilon"]): r for r in rows if r["method"] in ANCHORS}
    anchor_names = [a for a in ANCHORS if any(m == a for m, _ in anchors)]
    runs = sorted((r for r in rows if r["method"] not in REFERENCES),
                  key=lambda r: (r["epsilon"], r["method"] in ANCHORS, r["method"],
                                 r["accounting"] or ""))
    lines = [
        "# Method comparison on adult (bench/compare_methods.py)",
        "",
        (f"Written {datetime.now(UTC).isoformat(timespec='seconds')} from "
        f"`{source.relative_to(ROOT) if source.is_relative_to(ROOT) else source}`. adult discretized (48,842 x 14, domain file), delta "
        f"{DELTA:g}, every method given the public domain; means over the seeds that finished "
        f"(`runs`). tvd2: average 2-way TVD over all 91 pairs; tvd3: average 3-way TVD over 200 "
        f"fixed random triples; seconds: wall time of the synthesis (ours: the whole Dagster "
        f"materialization including asset checks; smartnoise: fit + sample); peak MB: the run "
        f"process's maximum RSS; max load: the highest 1-minute load average seen during the runs "
        f"({os.cpu_count()} cores here: above about {os.cpu_count()}, other work competed and the "
        f"times are inflated). Ratios are ours / anchor at the same epsilon (below 1: ours is "
        f"better or faster). Accounting: ours `tight` = OpenDP's zCDP -> approxDP conversion, "
        f"`paper` = rho + 2 sqrt(rho log 1/delta) (ABSyn Thm 4); smartnoise 1.0.8 uses "
        f"`snsynth.utils.cdp_rho`, the same tight OpenDP conversion (identical rho). "
        f"Anchors' environment: {venv_message}."),
        "",
        ("References (exact data, same session, per seed): bootstrap resample = the "
         "sampling-noise floor; independent columns = the no-correlation baseline."),
        "",
        "| reference | seeds | tvd2 | tvd3 |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {r['method']} | {r['runs']} | {fmt(r['tvd2'])} | {fmt(r['tvd3'])} |" for r in refs]
    header = ["method", "accounting", "epsilon", "runs", "tvd2", "tvd3", "seconds", "peak MB"]
    for a in anchor_names:
        header += [f"tvd2 / {a}", f"tvd3 / {a}", f"time / {a}"]
    header += ["max load", "note"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for r in runs:
        tvd2 = fmt(r["tvd2"]) + (f" ± {r['tvd2_sd']:.4f}" if r["tvd2_sd"] is not None else "")
        cells = [r["method"], r["accounting"] or "", f"{r['epsilon']:g}",
                 f"{r['runs']}" + (f" (+{r['failed']} failed)" if r["failed"] else ""),
                 tvd2, fmt(r["tvd3"]), fmt(r["seconds"], 1), fmt(r["peak_mb"], 0)]
        for a in anchor_names:
            anchor = anchors.get((a, r["epsilon"]))
            if r["method"] in ANCHORS or anchor is None:
                cells += ["", "", ""]
                continue
            cells += [ratio(r["tvd2"], anchor["tvd2"]), ratio(r["tvd3"], anchor["tvd3"]),
                      ratio(r["seconds"], anchor["seconds"])]
        cells += [fmt(r["max_load1"], 1), "; ".join(r["notes"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def ratio(a, b) -> str:
    return "" if a is None or not b else f"{a / b:.2f}"


# ---- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.2, 1.0, 5.0])
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds: 0..N-1")
    parser.add_argument("--methods", nargs="*", default=list(OURS), help="ours")
    parser.add_argument("--anchors", nargs="*", default=list(ANCHORS), choices=list(ANCHORS))
    parser.add_argument("--accounting", choices=("tight", "paper"), default="tight",
                        help="ours' (epsilon, delta) -> rho conversion (anchors: always theirs)")
    parser.add_argument("--timeout-minutes", type=float, default=30.0, help="per run")
    parser.add_argument("--aim-start", choices=("defaults", "reduced"), default="defaults",
                        help="smartnoise AIM: try its defaults first (reduced on timeout), or "
                             "go straight to the reduced settings")
    parser.add_argument("--aim-max-model-mb", type=float, default=10.0,
                        help="reduced smartnoise AIM: max_model_size in MB (its default: 80)")
    parser.add_argument("--aim-rounds", type=int, default=50,
                        help="reduced smartnoise AIM: rounds (its default: 16 * columns)")
    parser.add_argument("--redo", action="store_true", help="rerun runs that have a record")
    parser.add_argument("--retry-timeouts", action="store_true",
                        help="rerun runs whose record is a timeout")
    parser.add_argument("--results", type=Path, default=RESULTS / "methods.json")
    args = parser.parse_args()
    if not ADULT.exists():
        sys.exit(f"needs {ADULT} (the shared datasets); not found")

    domain = json.loads((ADULT / "adult-domain.json").read_text())
    real = pd.read_csv(ADULT / "adult.csv")[list(domain)]
    fidelity = Fidelity(real, domain)
    timeout_s = args.timeout_minutes * 60
    records = load_records(args.results)

    def done(k) -> bool:
        r = records.get(k)
        if r is None or args.redo:
            return False
        if r["tvd2"] is not None:
            return True
        return "timeout: killed" in str(r.get("note", "")) and not args.retry_timeouts

    def keep(r: dict) -> None:
        records[key(r)] = r
        save_records(args.results, records)
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:g}"
        print(f"  {r['method']:15s} eps {eps:4s} seed {r['seed']}: tvd2 {fmt(r['tvd2'])} "
              f"tvd3 {fmt(r['tvd3'])} {fmt(r['seconds'], 1)} s {fmt(r['peak_mb'], 0)} MB "
              f"{r.get('note') or ''}", flush=True)

    venv_python, venv_message = None, "not used in this session"
    if args.anchors:
        venv_python, venv_message = ensure_smartnoise_venv()
        print(venv_message, flush=True)

    for seed in range(args.seeds):
        for r in reference_records(real, fidelity, seed):
            keep(r)

    skipped: dict[str, str] = {}
    aim_timeouts: set[float] = set()  # epsilons at which smartnoise AIM's defaults timed out

    def aim_defaults_timed_out(epsilon: float) -> bool:
        """Known from this session or from an earlier record at this epsilon."""
        return epsilon in aim_timeouts or any(
            r["method"] == "smartnoise-aim" and r["epsilon"] == epsilon
            and str(r.get("note", "")).startswith("AIM at its defaults timed out")
            for r in records.values())

    for epsilon in args.epsilons:
        for seed in range(args.seeds):
            for method in args.methods:
                if method in skipped or done((method, epsilon, seed, args.accounting)):
                    continue
                print(f"ours {method} eps {epsilon:g} seed {seed} ({args.accounting}) ...", flush=True)
                r = run_ours(method, epsilon, seed, args.accounting, timeout_s, fidelity)
                if "skip" in r:
                    skipped[method] = r["skip"]
                    print(f"  {method}: skipped, not implemented: {r['skip']}", flush=True)
                    continue
                keep(r)
            for anchor in args.anchors:
                if done((anchor, epsilon, seed, "tight")):
                    continue
                if venv_python is None:
                    skipped[anchor] = venv_message
                    continue
                print(f"anchor {anchor} eps {epsilon:g} seed {seed} ...", flush=True)
                if anchor != "smartnoise-aim":
                    keep(run_anchor(anchor, venv_python, epsilon, seed, timeout_s, fidelity))
                    continue
                reduced = {"aim_mb": args.aim_max_model_mb, "aim_rounds": args.aim_rounds}
                if args.aim_start == "defaults" and not aim_defaults_timed_out(epsilon):
                    r = run_anchor(anchor, venv_python, epsilon, seed, timeout_s, fidelity)
                    if not str(r["note"]).startswith("timeout"):
                        keep(r)
                        continue
                    print(f"  smartnoise-aim at its defaults: {r['note']}; rerunning reduced",
                          flush=True)
                    aim_timeouts.add(epsilon)
                r = run_anchor(anchor, venv_python, epsilon, seed, timeout_s, fidelity, **reduced)
                if aim_defaults_timed_out(epsilon):
                    r["note"] = (f"AIM at its defaults timed out after {args.timeout_minutes:g} "
                                 f"min at this epsilon; " + r["note"])
                keep(r)

    table = markdown(list(records.values()), venv_message, args.results.resolve())
    if skipped:
        table += "\nSkipped in the last session: " + "; ".join(
            f"{m} ({why})" for m, why in skipped.items()) + "\n"
    out = args.results.with_suffix(".md")
    out.write_text(table)
    print()
    print(table)
    print(f"wrote {args.results} and {out}")


if __name__ == "__main__":
    main()
