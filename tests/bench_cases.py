"""The smoke runs of the benchmark scripts (tests/test_bench*.py): each script of bench/ on a
tiny input, as its own process (forked from a server that has the common imports done, which a
fresh interpreter spends seconds on), with its results, working files and tables in a
temporary folder (`BENCH_RESULTS`, `BENCH_WORK`, `BENCH_DATASETS`: bench/paths.py), so a
refactor that breaks a benchmark fails the tests and nothing is written into bench/results/.

A case is (script, arguments, the file it promises, the keys every record of it holds, with a
value that is not None; `expect`: values some keys must have). `{work}` in an argument is the
temporary working folder. Each test file runs one `group` (`make test` gives each file whole
to one worker, so the groups spread the runs over files).
"""

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


@dataclass(frozen=True)
class Case:
    group: str
    script: str
    args: tuple[str, ...]
    output: str | None          # a file under BENCH_RESULTS (or `{work}/...`), None: prints
    keys: tuple[str, ...] = ()  # in every record (a list's items, or the object itself)
    printed: str | None = None  # text the script prints (the ones that write no file)
    expect: tuple[tuple[str, object], ...] = ()
    only: tuple[tuple[str, object], ...] = ()  # check the records with these values only

    @property
    def id(self) -> str:
        return f"{self.script}{' ' if self.args else ''}{' '.join(self.args)}"[:60]


def folders(base: Path) -> tuple[dict, Path, Path]:
    """The environment of a smoke run under `base`: tiny tables written once."""
    results, work, datasets = base / "results", base / "work", base / "datasets"
    for folder in (results, work):
        folder.mkdir(parents=True, exist_ok=True)
    home = base / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "BENCH_RESULTS": str(results), "BENCH_WORK": str(work),
           "BENCH_DATASETS": str(datasets), "DAGSTER_HOME": str(home),
           "JAX_ENABLE_COMPILATION_CACHE": "false", "PYTHONPATH": str(ROOT)}
    if not datasets.exists():
        run_script(env, "tiny_datasets.py", "--out", str(datasets), "--rows", "400")
    return env, results, work


# what every script imports first, imported once by the fork server each smoke run is forked
# from (a script started as `python bench/x.py` spends seconds importing them)
PRELOAD = ["numpy", "pandas", "duckdb", "pyarrow", "dagster", "great_expectations",
           "dp_synth_assets.definitions", "dp_synth_assets.api", "dp_synth_assets.pipeline"]


def run_script(env: dict, script: str, *args: str, timeout: float = 300) -> str:
    """Run bench/`script` with `args` as `python bench/script args` would, in `env` and the
    repository's folder, in a child forked from a server that has PRELOAD imported; fails the
    test, with the script's output, unless it exits 0. Returns what it printed."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        child = context.Process(target=_script_main,
                                args=(str(BENCH / script), list(args), env, str(out), str(err)))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
        stdout, stderr = out.read_text(), err.read_text()
    assert child.exitcode == 0, (f"bench/{script} {' '.join(args)} exited {child.exitcode}:\n"
                                 f"{stdout[-3000:]}\n{stderr[-5000:]}")
    return stdout


def _script_main(path: str, args: list[str], env: dict, out: str, err: str) -> None:
    """The forked child: the script as `__main__`, with its argv, environment, working folder,
    import path (its own folder first) and standard streams."""
    import runpy

    os.environ.clear()
    os.environ.update(env)
    os.chdir(ROOT)
    sys.argv = [path, *args]
    sys.path[:0] = [str(Path(path).parent), *env.get("PYTHONPATH", "").split(os.pathsep)]
    with open(out, "w") as stdout, open(err, "w") as stderr:
        os.dup2(stdout.fileno(), 1)
        os.dup2(stderr.fileno(), 2)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as stop:
            code = stop.code
            if code not in (None, 0):
                print(code, file=sys.stderr)
                sys.stderr.flush()
                os._exit(code if isinstance(code, int) else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        sys.stdout.flush()
        sys.stderr.flush()


def check(case: Case, base: Path) -> None:
    env, results, work = folders(base)
    args = [a.format(work=work) for a in case.args]
    stdout = run_script(env, case.script, *args)
    if case.printed is not None:
        assert case.printed in stdout, stdout[-3000:]
    if case.output is None:
        return
    path = Path(case.output.format(work=work))
    path = path if path.is_absolute() else results / path
    assert path.exists(), f"bench/{case.script} wrote no {path.name}:\n{stdout[-3000:]}"
    if path.suffix != ".json":
        assert path.stat().st_size > 0, f"{path.name} is empty"
        return
    data = json.loads(path.read_text())
    records = data if isinstance(data, list) else [data]
    records = [r for r in records if all(r.get(k) == v for k, v in case.only)]
    assert records, f"{path.name} holds no record with {dict(case.only)}"
    for record in records:
        missing = [k for k in case.keys if record.get(k) is None]
        assert not missing, f"{path.name}: a record lacks {missing}: {record}"
        wrong = {k: record.get(k) for k, v in case.expect if record.get(k) != v}
        assert not wrong, f"{path.name}: {wrong}, expected {dict(case.expect)}"


# the scripts that are libraries of the others (run through them), and the ones no smoke test
# can run in seconds, each with the reason
LIBRARIES = {"bounded.py": "suite.py, compare_methods.py", "paths.py": "every script",
             "progress.py": "scale.py, preprocessing.py, the anchors' runs",
             "tiny_datasets.py": "these tests", "suite_tables.py": "suite.py",
             "anchors": "suite.py, compare_methods.py, relational_dpsynth.py"}
OWN_TEST = {"attach_postgres.py": "tests/test_bench_tables.py::test_attach_postgres"}
NOT_RUN = {"resolution.py": "times pip resolving from the package index with no cache, in a "
           "fresh venv: minutes and the network"}

CASES = [
    # ---- light: no Dagster run (tests/test_bench.py)
    Case("light", "wide_table.py", ("--rows", "200", "--out", "{work}/wide.csv"),
         "{work}/wide.csv"),
    Case("light", "scale_data.py", ("--rows", "1000", "--columns", "15", "--database",
                                    "{work}/scale_data.duckdb", "--table", "main.s"),
         "{work}/scale_data.duckdb"),
    Case("light", "repeated_rows.py", ("--rows", "20000", "--limits", "100MB"),
         "repeated_rows.json", ("rows", "memory_limit", "method", "repeated", "count_seconds",
                                "peak_rss_mb", "loadavg")),
    Case("light", "checks.py", ("--rows", "2000", "--source-rows", "2000", "--iterations", "20"),
         "checks.json", ("label", "rows", "checks", "total_seconds", "peak_rss_mb",
                         "load_before")),
    Case("light", "synthetic_speed.py", ("--rows", "2500", "--fit-rows", "2000", "--iterations",
                                         "20", "--chunk-rows", "1000", "--parts"),
         "synthetic_speed.json", ("total_seconds", "total_cpu_seconds", "sample_seconds",
                                  "count_seconds", "decode_seconds", "peak_mb", "load1")),
    Case("light", "junction_tree.py", ("--sizes", "15:30", "--repeats", "1"), None,
         printed='"same_tree_as_mbi": true'),
    Case("light", "audit.py", ("--trials", "100", "--calibration-trials", "100"), "audit.json",
         ("audits", "cpus")),
    Case("light", "audit.py", ("--gaussian", "--gaussian-trials", "2000"), "audit_gaussian.json",
         ("audits", "cpus")),
    Case("light", "footprint.py", ("--markdown-only",), "footprint.md"),
    Case("light", "absyn_paired.py", ("--eps", "1", "--seeds", "0", "--iters", "20"), None,
         printed='"tvd2"'),
    Case("light", "aim_adult.py", ("--epsilons", "1", "--seeds", "0", "--methods", "absyn"),
         "aim.json", ("method", "tvd2", "tvd3", "seconds")),
    Case("light", "select_auto.py", ("--tables", "small", "--epsilons", "1", "--methods", "auto",
                                     "--iterations", "20"),
         "auto_rule.json", ("dataset", "method", "tvd2")),
    Case("light", "time_columns.py", ("--rows", "400", "--seeds", "0", "--tables", "month",
                                      "days"),
         "time_columns.json", ("table", "outside", "tvd1", "granularity", "seconds")),
    Case("light", "declared_constraints.py", ("--rows", "600", "--seeds", "0", "--epsilons",
                                              "1", "--decode-rows", "2000"),
         "declared_constraints.json", ("sampler", "max_violation_share", "tvd2"),
         expect=(("max_violation_share", 0.0),), only=(("sampler", "honoured"),)),
    Case("light", "public_categories.py", ("--zones", "30", "--rows", "600", "--seeds", "0",
                                           "--shapes", "flat"),
         "public_categories.json", ("load", "records")),
    Case("light", "relational.py", ("--customers", "300", "--epsilons", "5", "--seeds", "0"),
         "relational.json", ("method", "tvd2_join", "tvd_children_count", "seconds", "load"),
         expect=(("resolves", True),)),
    # a tiny random nycflights-shaped pair (string keys, NULL and unmatched foreign keys, NAs):
    # the real data is fetched by the script itself, which a smoke run must not do
    Case("light", "relational_public.py", ("--tiny", "60", "--epsilons", "5", "--seeds", "0"),
         "relational_public.json", ("method", "tvd2_join", "tvd_children_count", "seconds",
                                    "peak_mb", "orphans", "load"),
         expect=(("resolves", True),)),
    # dpsynth itself is an anchor (its own venv, minutes a run): the dry run's stand-in writes
    # tables in the anchor's output layout, read back and scored as dpsynth's are
    Case("light", "relational_dpsynth.py", ("--dry-run", "--datasets", "example", "--customers",
                                            "300", "--epsilons", "5", "--seeds", "0"),
         "relational_dpsynth_dry_run.json", ("method", "tvd2_join", "tvd_children_count",
                                             "seconds", "load"),
         expect=(("resolves", True),)),
    Case("light", "raw_tables.py", ("--datasets", "titanic_raw", "--seeds", "1"),
         "raw_tables.json", ("dataset", "tvd1", "tvd2")),
    # ---- Dagster runs of the bundled example (tests/test_bench_runs.py)
    Case("runs", "scale.py", ("--rows", "2000", "--executor", "in_process", "--iterations", "20"),
         "scale.json", ("seconds", "peak_mb", "marginal_seconds", "stages", "floor_seconds",
                        "marginal_ratio")),
    Case("runs", "end_to_end.py", ("--method", "auto", "--rows", "400", "--iterations", "20"),
         "end_to_end.json", ("seconds", "cpu_seconds"), expect=(("success", True),)),
    Case("runs", "load_definitions.py", ("--n", "1",), "load_definitions.json",
         ("import_seconds", "build_seconds", "seconds", "assets")),
    Case("runs", "budget_sensor.py", ("--n", "2", "--runs", "1"), "budget_sensor.json",
         ("first_tick_seconds", "quiet_tick_seconds", "ledger_rows")),
    Case("runs", "write_check.py", ("--repeat", "1"), "write_check.json",
         ("probe_files_median_ms", "probe_warehouse_median_ms", "free_space_median_ms")),
    Case("runs", "relational_public.py", ("--tiny", "60", "--dagster", "--epsilons", "5"),
         "relational_public_dagster.json", ("seconds", "checks", "parents", "children"),
         expect=(("success", True), ("resolves", True))),
    Case("runs", "engines.py", ("--rows", "2000", "--engines", "duckdb", "--iterations", "20",
                                "--sample", "500"),
         "engines.json", ("engine", "rows", "scan_seconds")),
    # ---- adult and the raw tables, generated tiny (tests/test_bench_tables.py)
    Case("tables", "adult_pipeline.py", ("--repeats", "1", "--iterations", "20"),
         "adult_pipeline_privsyn.json", ("method", "tvd2", "tvd3", "seconds")),
    Case("tables", "preprocessing.py", ("--repeats", "1", "--binnings", "privtree"),
         "preprocessing.json", ("binning", "tvd2", "seconds", "preprocess_seconds")),
    Case("tables", "compare_methods.py", ("--epsilons", "1", "--seeds", "1", "--methods", "absyn",
                                          "--anchors"),
         "methods.json", ("method", "tvd2", "check_seconds"), only=(("method", "absyn"),)),
    Case("tables", "compare_generators.py", ("--epsilons", "1", "--seeds", "1", "--generators",
                                             "gum", "--no-dense"),
         "generators.json", ("generator", "tvd2", "fit_seconds")),
    Case("tables", "suite.py", ("--datasets", "adult", "--methods", "default", "--epsilons", "1",
                                "--seeds", "0"),
         "suite.json", ("dataset", "method", "tvd2", "seconds")),
    Case("light", "auto_rule_loto.py", ("--records", "bench/results/suite.json"),
         "auto_rule_loto.json", ("shipped", "fitted_on_all", "goal", "rows")),
    Case("tables", "tvd1_columns.py", ("--datasets", "adult",), None, printed="mean"),
    # ---- the example under concurrency and kills, and on S3 (tests/test_bench_ops.py)
    # one run per round (the concurrent runs themselves: tests/test_runs.py), one kill
    Case("ops", "reliability.py", ("--n", "1", "--repeats", "1", "--kills", "1", "--rows", "300",
                                   "--ledgers", "sqlite", "--no-report"),
         "reliability.json", ("rows", "ledgers")),
    Case("ops", "objectstore.py", ("--rows", "300", "--repeats", "1"), "objectstore.json"),
]


def smoke_test(group: str):
    """The test of one group's cases, for a test file to bind as `test_script_runs`: each case
    runs in the module's `bench_base` folder (tests/conftest.py)."""
    import pytest

    @pytest.mark.parametrize("case", [c for c in CASES if c.group == group], ids=lambda c: c.id)
    def test_script_runs(case, bench_base):
        check(case, bench_base)

    return test_script_runs
