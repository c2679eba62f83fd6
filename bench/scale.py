"""Issue 7's scale benchmark: the whole pipeline at 100k, 1M and 10M rows, memory and time.

    .venv/bin/python bench/scale.py                      # 100k, 1M, 10M rows x 15 columns
    .venv/bin/python bench/scale.py --rows 1000000 --columns 40
    .venv/bin/python bench/scale.py --adult-baseline a71ea01   # adult: this tree vs a revision

For each size, `bench/scale_data.py` writes the example's distribution into its own DuckDB file
under bench/work/scale/ (kept between runs; rewritten when its row count differs). Then
`dagster job execute` runs the dataset's job (every asset and check) the way a deployment does,
with the product's defaults (method and generator as in datasets.yaml's example, epsilon 1,
`rows: same`, so the synthetic table is as large as the source) and `model.executor`
(`--executor`, default multiprocess: every step in its own process, so the fit's JAX memory is
returned before sampling). Recorded per run:

- `seconds`: from the run's start to its success in Dagster's event log (all stages and
  checks), and `process_seconds`: the CLI process from start to exit;
- `stages`: each stage's seconds from the run's public progress in Dagster's event log (its
  `stage <name> started` line to its materialization, `stage_times`; the checks from the
  synthetic table's materialization to the last check result, each check's from its `check
  <name>: started` line to its result), and the peak memory within that window; the stages publish no timing of their private work (issue 13);
- `peak_mb`: the largest resident memory of the whole process tree (the run and its step
  processes, summed), sampled every 50 ms;
- `marginal_seconds`: the `marginals` stage's seconds, as above;
- `memory_limit`: DuckDB's memory limit of the run's connections (`--memory-limit`, passed as
  DP_SYNTH_DUCKDB_MEMORY_LIMIT; None: DuckDB's default), and `loadavg`: /proc/loadavg before
  and after the run;
- `success`: False when the run failed (`--keep-going`): then `stages` holds the stages it
  finished, `failed_after_seconds` when it stopped and `error` the last lines of its output.

With `--tree PATH`, the code of another checkout runs (a git worktree of an earlier revision,
say), recorded with its revision and `tree`, for a before/after comparison in one session.

The floor (`floor_seconds`) is then measured in a fresh process on the same DuckDB file: a bare
`GROUP BY GROUPING SETS` with the same grouping sets as the marginals stage, over the same
encoded columns copied into a plain temporary table first (see `child_floor`), best of two.
`marginal_ratio` = marginal_seconds / floor_seconds (issue 7 asks for at most 2).

With `--adult-baseline REV`, the adult pipeline (`../shared/datasets/adult`, discretized) runs
alternately on this tree and on a git worktree of REV under bench/work/, `--repeats` times each,
so "not slower than before" is measured in one session.

With `--engine postgres`, the same table is copied into a PostgreSQL server of its own (started
from the Debian binaries as the tests start one, `tests/helpers.postgres_server`; `.ci/install-postgres`
installs them; needs psycopg, the `postgres` extra) and the dataset reads it with `engine: {type:
postgres}`: the private scans run in PostgreSQL, the synthetic side is unchanged (the warehouse is
the DuckDB file). `load_seconds` records the copy; the floor stays DuckDB's.

Results are merged into bench/results/scale.json (flat records keyed by kind, rows, columns,
engine and revision) and the table is printed and written to bench/results/scale.md.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import DATASETS, RESULTS, WORK  # noqa: E402
from progress import stage_times  # noqa: E402
WORK = WORK / "scale"
RESULTS = RESULTS / "scale.json"
ADULT = DATASETS / "adult"
DEFAULT_ROWS = (100_000, 1_000_000, 10_000_000)


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants (from /proc; no psutil here)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        tree += frontier
    return tree


def tree_rss_mb(root: int) -> float:
    """Resident memory of a process and all its descendants, summed (MB)."""
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


class RssSampler(threading.Thread):
    """(wall time, RSS MB of the process tree under `root`) every `interval` seconds."""

    def __init__(self, root: int, interval: float = 0.05):
        super().__init__(daemon=True)
        self.root, self.interval, self.samples = root, interval, []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.samples.append((time.time(), tree_rss_mb(self.root)))
            self._done.wait(self.interval)

    def stop(self) -> list[tuple[float, float]]:
        self._done.set()
        self.join()
        return self.samples


# ----------------------------------------------------------------------------- one run

def write_registry(workdir: Path, dataset: str, source: dict, columns: dict, epsilon: float,
                   extra: dict | None = None) -> Path:
    import yaml

    entry = {"source": source, "columns": columns,
             "privacy": {"epsilon": epsilon, "delta": 1e-9,
                         "limit": {"epsilon": 1000.0, "delta": 1e-6}},
             "rows": "same", "seed": 7, **(extra or {})}
    path = workdir / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": {dataset: entry}}, sort_keys=False))
    return path


def run_job(workdir: Path, database: Path, dataset: str, tree: Path = ROOT,
            executor: str = "multiprocess", memory_limit: str | None = None,
            keep_going: bool = False) -> dict:
    """`dagster job execute` of the dataset's job (every asset and check), the way a deployment
    runs it, with the code of `tree` and DuckDB's `memory_limit` (None: its default); memory is
    sampled over the whole process tree (the run and, under the multiprocess executor, its step
    processes). A failed run stops the script, or with `keep_going` is recorded as far as it
    got (`success` False)."""
    import shutil

    import dagster as dg

    home = workdir / "dagster_home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    for suffix in ("", "-wal", "-shm", ".head", ".lock"):  # a throwaway ledger, whole
        (workdir / f"ledger.sqlite{suffix}").unlink(missing_ok=True)
    env = {**os.environ, "DAGSTER_HOME": str(home),
           "DP_SYNTH_DATASETS": str(workdir / "datasets.yaml"),
           "DP_SYNTH_WAREHOUSE": str(database), "DP_SYNTH_LEDGER": str(workdir / "ledger.sqlite"),
           "DP_SYNTH_PUBLIC": str(workdir / "public"), "PYTHONPATH": str(tree)}
    env.pop("DP_SYNTH_DUCKDB_MEMORY_LIMIT", None)
    if memory_limit:
        env["DP_SYNTH_DUCKDB_MEMORY_LIMIT"] = memory_limit
    # a dataset whose fit runs on the multiprocess executor has a job of its own; any other runs
    # in the code location's implicit asset job (dp_synth_assets.factory.needs_job)
    job = f"{dataset}_synthesis" if executor == "multiprocess" else "__ASSET_JOB"
    cmd = [str(Path(sys.executable).parent / "dagster"), "job", "execute", "-f",
           str(tree / "definitions.py"), "-j", job]
    import resource

    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    sampler = RssSampler(proc.pid)
    sampler.start()
    output = proc.communicate()[0]
    process_seconds = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    samples = sampler.stop()
    (workdir / "run.log").write_text(output)
    failed = proc.returncode != 0
    if failed and not keep_going:
        sys.exit(f"{' '.join(cmd)} failed (see {workdir / 'run.log'}):\n{output[-4000:]}")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        [record] = instance.get_run_records()
        run_seconds = record.end_time - record.start_time
        logs = instance.all_logs(record.dagster_run.run_id)
    stages = stage_times(logs, record.start_time, expect=() if failed else None)
    for stage in stages.values():
        start, end = stage.pop("start"), stage.pop("end")
        inside = [mb for t, mb in samples if start <= t <= end]
        stage["peak_mb"] = round(max(inside or [0.0]), 1)
    return {"seconds": run_seconds, "process_seconds": process_seconds,
            # user + system CPU of the CLI and every step process it waited for
            "cpu_seconds": round(cpu_after.ru_utime + cpu_after.ru_stime
                                 - cpu_before.ru_utime - cpu_before.ru_stime, 1),
            "peak_mb": max(mb for _, mb in samples), "sample_interval_s": sampler.interval,
            # from the stage's public progress: the stage publishes no timing of its private work
            "marginal_seconds": stages.get("marginals", {}).get("seconds"), "stages": stages,
            "success": not failed,
            **({"failed_after_seconds": run_seconds, "error": output[-1500:]} if failed else {})}


def child_floor(args) -> None:
    """The floor of the marginals stage: a bare GROUPING SETS scan with the same grouping sets
    over the same (encoded) columns, already materialized as a plain integer table, so the
    query does nothing but group and count (best of two; the copy is not timed). Over the raw
    source columns instead, the float `income` alone has millions of distinct values and the
    query needed more than 20 GB."""
    import duckdb

    sys.path.insert(0, str(ROOT))
    from dp_synth_assets.core.sql import ident

    cliques = json.loads(args.cliques)
    columns = sorted({c for cl in cliques for c in cl})
    cols = ", ".join(ident(c) for c in columns)
    sets = ", ".join("(" + ", ".join(ident(c) for c in cl) + ")" for cl in cliques)
    con = duckdb.connect(args.database, read_only=True)
    con.execute(f"CREATE TEMP TABLE encoded AS SELECT {cols} FROM private.scale_encoded")
    times = []
    for _ in range(2):
        started = time.perf_counter()
        con.execute(f"CREATE OR REPLACE TEMP TABLE floor AS SELECT {cols}, GROUPING_ID({cols}) "
                    f"AS gid, count(*) AS n FROM encoded GROUP BY GROUPING SETS ({sets})")
        times.append(time.perf_counter() - started)
    print("RESULT " + json.dumps({"floor_seconds": min(times), "floor_runs": times}))


# ----------------------------------------------------------------------------- the parent

def child(mode: str, *options: str, python: str = sys.executable) -> dict:
    cmd = [python, __file__, "--child", mode, *options]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def ensure_data(rows: int, columns: int) -> Path:
    import duckdb

    sys.path.insert(0, str(ROOT / "bench"))
    from scale_data import write_scaled

    database = WORK / f"scale_{rows}_{columns}.duckdb"
    if database.exists():
        con = duckdb.connect(str(database), read_only=True)
        try:
            have = con.execute("SELECT count(*) FROM main.scale").fetchone()[0]
        except duckdb.Error:
            have = None
        con.close()
        if have == rows:
            return database
        database.unlink()
    seconds = write_scaled(database, "main.scale", rows, columns)
    print(f"  wrote {rows:,} x {columns} rows to {database.name} in {seconds:.1f} s", flush=True)
    return database


def load1() -> float:
    return os.getloadavg()[0]


def revision(tree: Path = ROOT) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=tree).stdout.strip()


def loadavg() -> str:
    """/proc/loadavg as it reads (1-, 5-, 15-minute load, running/all tasks, last pid)."""
    return Path("/proc/loadavg").read_text().strip()


def save(records: list[dict]) -> None:
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    key = lambda r: (r["kind"], r.get("rows"), r.get("columns"), r.get("executor"),  # noqa: E731
                     r.get("engine", "duckdb"), r.get("revision"), r.get("tree"), r.get("repeat"),
                     r.get("memory_limit"))
    merged = {key(r): r for r in old}
    merged.update({key(r): r for r in records})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(list(merged.values()), indent=1))
    write_table(list(merged.values()))


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_table(records: list[dict]) -> None:
    lines = ["| rows | columns | engine | revision | DuckDB limit | seconds | peak MB | "
             "marginals s | floor s | ratio | slowest stages | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted((r for r in records if r["kind"] == "scale"),
                    key=lambda r: (r["columns"], r["rows"], r.get("engine", "duckdb"))):
        slow = sorted(r["stages"].items(), key=lambda kv: -kv[1]["seconds"])[:3]
        stages = ", ".join(f"{k} {v['seconds']:.0f} s" for k, v in slow)
        seconds = (f"{r['seconds']:.0f}" if r.get("success", True)
                   else f"failed after {r['seconds']:.0f}")
        lines.append(f"| {r['rows']:,} | {r['columns']} | {r.get('engine', 'duckdb')} | "
                     f"{r.get('revision', '-')} | {r.get('memory_limit') or '-'} | {seconds} | "
                     f"{fmt(r['peak_mb'], 0)} | {fmt(r['marginal_seconds'])} | "
                     f"{fmt(r['floor_seconds'])} | {fmt(r['marginal_ratio'])} | {stages} | "
                     f"{fmt(r['max_load1'], 1)} |")
    adult = [r for r in records if r["kind"] == "adult"]
    if adult:
        lines += ["", "| adult pipeline | revision | runs | mean seconds | peak MB | load |",
                  "|---|---|---|---|---|---|"]
        # one row per (tree, revision): sessions that compared other revisions keep their rows
        for tree, rev in sorted({(r["tree"], r["revision"]) for r in adult}):
            rs = [r for r in adult if (r["tree"], r["revision"]) == (tree, rev)]
            lines.append(f"| {tree} | {rev} | {len(rs)} | "
                         f"{sum(r['seconds'] for r in rs) / len(rs):.1f} | "
                         f"{max(r['peak_mb'] for r in rs):.0f} | "
                         f"{max(r.get('max_load1', 0.0) for r in rs):.1f} |")
    (RESULTS.parent / "scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def postgres_copy(database: Path, dsn: str, table: str = "public.scale") -> float:
    """The DuckDB file's `main.scale` copied into PostgreSQL as `table` (matching column types,
    streamed through CSV: memory bounded by the copy buffer); returns the seconds it took."""
    import tempfile

    import duckdb
    import psycopg

    types = {"BIGINT": "BIGINT", "INTEGER": "INTEGER", "DOUBLE": "DOUBLE PRECISION",
             "VARCHAR": "TEXT", "BOOLEAN": "BOOLEAN", "DATE": "DATE", "TIMESTAMP": "TIMESTAMP"}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        csv = Path(tmp) / "scale.csv"
        con = duckdb.connect(str(database), read_only=True)
        described = con.execute("DESCRIBE main.scale").fetchall()
        con.execute(f"COPY main.scale TO '{csv}' (FORMAT csv, HEADER false)")
        con.close()
        columns = ", ".join(f'"{name}" {types[kind]}' for name, kind, *_ in described)
        with psycopg.connect(dsn, autocommit=True) as pg:
            pg.execute(f"DROP TABLE IF EXISTS {table}")
            pg.execute(f"CREATE TABLE {table} ({columns})")
            with pg.cursor().copy(f"COPY {table} FROM STDIN (FORMAT csv)") as copy, \
                    open(csv, "rb") as f:
                while block := f.read(1 << 20):
                    copy.write(block)
            pg.execute(f"ANALYZE {table}")
    return time.perf_counter() - started


@contextmanager
def postgres_server():
    """A throwaway PostgreSQL server (`tests/helpers.postgres_server`), or a clear stop."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers import NoPostgres, postgres_server as server

    try:
        started = server(skip=False)
        instance = started.__enter__()
    except NoPostgres as e:
        sys.exit(f"--engine postgres: {e}")
    try:
        yield instance
    finally:
        started.__exit__(None, None, None)


def scale_runs(rows_list: list[int], columns: int, method: str | None, executor: str,
               iterations: int | None = None, engine: str = "duckdb",
               memory_limit: str | None = None, tree: Path = ROOT,
               keep_going: bool = False) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from scale_data import spec_columns

    WORK.mkdir(parents=True, exist_ok=True)
    records = []
    for rows in rows_list:
        database = ensure_data(rows, columns)
        load, loads = load1(), [loadavg()]
        workdir = WORK / (f"run_{rows}_{columns}" + ("" if engine == "duckdb" else f"_{engine}"))
        workdir.mkdir(parents=True, exist_ok=True)
        model = {"executor": executor, **({"iterations": iterations} if iterations else {})}
        extra = {"model": model, **({"method": method} if method else {})}
        with (postgres_server() if engine == "postgres" else nullcontext()) as server:
            source, loaded = {"table": "main.scale"}, {}
            if server is not None:
                loaded = {"load_seconds": postgres_copy(database, server.dsn)}
                source = {"table": "public.scale"}
                extra["engine"] = {"type": "postgres", "dsn": server.dsn}
            write_registry(workdir, "scale", source, spec_columns(columns), 1.0, extra)
            out = run_job(workdir, database, "scale", tree=tree, executor=executor,
                          memory_limit=memory_limit, keep_going=keep_going)
            # kept beside the run, so a failure below does not lose what the run measured
            (workdir / "run_out.json").write_text(json.dumps(out, indent=1))
        loads.append(loadavg())
        cliques = marginal_cliques(workdir) if out["marginal_seconds"] is not None else []
        # the floor reads the encoded table the run left in the DuckDB file (under postgres it
        # was a view in PostgreSQL, dropped with the run): DuckDB's floor only
        floor = (child("floor", "--database", str(database), "--cliques", json.dumps(cliques))
                 if engine == "duckdb" and cliques
                 else {"floor_seconds": None, "floor_runs": []})
        record = {"kind": "scale", "rows": rows, "columns": columns, "method": method or "default",
                  "executor": executor, "engine": engine, "iterations": iterations,
                  "epsilon": 1.0, "revision": revision(tree), "memory_limit": memory_limit,
                  **({} if tree == ROOT else {"tree": str(tree)}), **out, **floor, **loaded,
                  "marginal_ratio": (out["marginal_seconds"] / floor["floor_seconds"]
                                     if floor["floor_seconds"] else None),
                  "grouping_sets": len(cliques), "max_load1": max(load, load1()),
                  "loadavg": loads}
        records.append(record)
        print(f"{rows:>11,} x {columns} ({engine}, limit {memory_limit}): "
              f"{'' if out['success'] else 'FAILED after '}{out['seconds']:.1f} s "
              f"(process {out['process_seconds']:.1f} s), "
              f"peak {out['peak_mb']:.0f} MB, marginals {fmt(out['marginal_seconds'])} s"
              + (f" vs floor {floor['floor_seconds']:.2f} s ({record['marginal_ratio']:.2f}x)"
                 if floor["floor_seconds"] else ""), flush=True)
        save(records)
    flat = [r for r in records if r["columns"] == columns]
    if len(flat) > 1:
        low, high = min(flat, key=lambda r: r["rows"]), max(flat, key=lambda r: r["rows"])
        print(f"peak memory {high['rows']:,} / {low['rows']:,} rows: "
              f"{high['peak_mb'] / low['peak_mb']:.2f}x")


def marginal_cliques(workdir: Path) -> list[list[str]]:
    """The grouping sets the marginals stage computed (from the public plan and the method)."""
    sys.path.insert(0, str(ROOT))
    from dp_synth_assets.core.config import load_registry
    from dp_synth_assets.core.select import required_cliques

    spec = load_registry(workdir / "datasets.yaml")["scale"]
    from dp_synth_assets.core.domain import EncodingPlan

    plan = EncodingPlan.from_json((workdir / "public" / "scale" / "plan.json").read_text())
    domain = plan.domain
    return [list(c) for c in required_cliques(spec.method, domain, spec.selection)]


def load_adult(database: Path, columns: list[str]) -> None:
    import duckdb

    sys.path.insert(0, str(ROOT))
    from dp_synth_assets.core.sql import ident

    database.unlink(missing_ok=True)
    con = duckdb.connect(str(database))
    con.execute(f"CREATE TABLE main.adult AS SELECT {', '.join(ident(c) for c in columns)} FROM "
                f"read_csv('{ADULT / 'adult.csv'}', auto_detect = true)")
    con.close()


def adult_runs(baseline: str, repeats: int) -> None:
    if not ADULT.exists():
        sys.exit(f"--adult-baseline needs {ADULT} (the shared datasets); not found")
    tree = WORK / f"tree_{baseline}"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), baseline], cwd=ROOT,
                       check=True, capture_output=True)
    trees = {"current": (ROOT, revision()), "baseline": (tree, baseline)}
    domain = json.loads((ADULT / "adult-domain.json").read_text())
    columns = {c: {"kind": "categorical", "categories": list(range(k)), "other": False}
               for c, k in domain.items()}
    records = []
    for repeat in range(repeats):
        for name, (path, rev) in trees.items():
            load = load1()
            workdir = WORK / f"adult_{name}"
            workdir.mkdir(parents=True, exist_ok=True)
            database = workdir / "adult.duckdb"
            load_adult(database, list(domain))
            write_registry(workdir, "adult", {"table": "main.adult"}, columns, 1.0)
            out = run_job(workdir, database, "adult", tree=path, executor="in_process")
            records.append({"kind": "adult", "tree": name, "revision": rev, "repeat": repeat,
                            **out, "max_load1": max(load, load1())})
            print(f"adult {name} ({rev}) run {repeat}: {out['seconds']:.1f} s, "
                  f"peak {out['peak_mb']:.0f} MB", flush=True)
    save(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="*", default=list(DEFAULT_ROWS))
    parser.add_argument("--columns", type=int, default=15)
    parser.add_argument("--method", default=None, help="selection method (default: the example's)")
    parser.add_argument("--executor", default="multiprocess", choices=["multiprocess", "in_process"],
                        help="model.executor of the runs (multiprocess: each step's memory is "
                             "returned when it ends)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="model.iterations (default: the product's)")
    parser.add_argument("--engine", default="duckdb", choices=["duckdb", "postgres"],
                        help="where the source table is scanned (postgres: a throwaway server "
                             "holding a copy of it; the synthetic side is the same)")
    parser.add_argument("--memory-limit", default=None,
                        help="DuckDB's memory_limit for the runs (DP_SYNTH_DUCKDB_MEMORY_LIMIT, "
                             "e.g. 1GB; default: DuckDB's own)")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="run the code of this checkout (e.g. a worktree of an earlier "
                             "revision; default: this one)")
    parser.add_argument("--keep-going", action="store_true",
                        help="record a failed run as far as it got instead of stopping")
    parser.add_argument("--adult-baseline", default=None, metavar="REV")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    parser.add_argument("--cliques", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        {"floor": child_floor}[args.child](args)
    elif args.adult_baseline:
        adult_runs(args.adult_baseline, args.repeats)
    else:
        scale_runs(args.rows, args.columns, args.method, args.executor, args.iterations,
                   args.engine, args.memory_limit, args.tree.resolve(), args.keep_going)


if __name__ == "__main__":
    main()
