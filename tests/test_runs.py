"""One run per dataset at a time, per-run artifacts published by one pointer (issue 17).

- Four processes materialize one dataset at once: every run's table, Parquet, measurements and
  check results are that run's own (the rows its own noisy count asks for, its checks pass),
  and the final table is the published run's.
- A run that fails after `preprocessed` leaves the published set whole, and a later
  synthetic-only materialization uses it; a set whose plan no longer matches its measurements
  is refused with a message naming the stage to re-materialize.
- A kill between the synthetic table's commit and the publish of its Parquet is repaired by the
  next run of the dataset: the table and the published Parquet are one run's, no temporary file
  is left.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml

from dp_synth_assets.core.sql import literal
from tests.helpers import REPO, example_entry, make_project

DATASET = "example"

RUN_ONCE = REPO / "tests" / "run_once.py"  # one materialization in its own process


def start_run(project, tmp_path: Path, *stages: str, kill: bool = False) -> subprocess.Popen:
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("KILL_AT", None)
    if kill:
        env["KILL_AT"] = str(project.public / DATASET)
    return subprocess.Popen(
        [sys.executable, str(RUN_ONCE), str(project.datasets), str(project.warehouse),
         str(project.ledger), str(project.public), *stages],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


def report(process: subprocess.Popen, timeout: float = 600) -> dict:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


STAGES = ("preprocessed", "marginals", "selection", "measurements", "model", "synthetic")


def materialize(project, instance, *stages: str, checks: bool = True):
    """Materialize `stages` (default: every stage; no utility report), with the checks of
    `synthetic` when it is selected, or without them (`checks`)."""
    defs = project.defs_fn()
    selection = dg.AssetSelection.assets(*(dg.AssetKey([DATASET, s]) for s in stages or STAGES))
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=instance, raise_on_error=False,
                          selection=selection if checks else selection.without_checks())


def failure_messages(result) -> str:
    return "\n".join(e.step_failure_data.error.message for e in result.all_events
                     if e.event_type_value == "STEP_FAILURE" and e.step_failure_data.error)


def table_matches_parquet(project, parquet: Path) -> tuple[int, int, int]:
    """(rows of the table, rows of the Parquet, rows in one and not the other)."""
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        source = f"read_parquet({literal(str(parquet))})"
        table_rows = con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0]
        file_rows = con.execute(f"SELECT count(*) FROM {source}").fetchone()[0]
        differ = con.execute(
            f"SELECT (SELECT count(*) FROM (SELECT * FROM synthetic.example EXCEPT ALL "
            f"SELECT * FROM {source})) + (SELECT count(*) FROM (SELECT * FROM {source} "
            f"EXCEPT ALL SELECT * FROM synthetic.example))").fetchone()[0]
    finally:
        con.close()
    return table_rows, file_rows, differ


def requested(noisy_total: float) -> int:
    return max(int(round(noisy_total)), 1)


def test_concurrent_runs_of_one_dataset_each_keep_their_own_table_parquet_measurements_and_checks(
        tmp_path):
    # four columns of the example (one of each kind): the runs are serialized by the dataset's
    # lock, so each run's own length is what this test waits for three times
    columns = example_entry()["columns"]
    project = make_project(tmp_path, rows=2000, report=None, columns={
        c: columns[c] for c in ("age", "sex", "signup_date", "newsletter")})
    runs = [report(p) for p in [start_run(project, tmp_path) for _ in range(3)]]

    assert all(r["success"] for r in runs), [r["failures"] for r in runs]
    assert len({r["run_id"] for r in runs}) == 3
    for r in runs:
        # the run's set: measurements, Parquet and check results side by side
        folder = Path(r["parquet"]).parent
        assert folder == project.public / DATASET / "runs" / r["run_id"]
        own = r["own"]  # what the run's folder held when the run ended
        assert own["folder"] == r["run_id"]
        # (the metadata shows the noisy count rounded to 0.1; the file holds it exactly)
        assert own["exact_total"] == pytest.approx(r["noisy_total"], abs=0.051)
        # the rows this run wrote are the rows its own noisy count asks for ...
        assert r["rows"] == requested(own["exact_total"]), r
        # ... its Parquet holds them, and its checks judged them and passed
        assert own["parquet_rows"] == r["rows"], r
        assert all(r["checks"].values()) and "row_count" in r["checks"], r
        assert own["stored_checks"] and all(own["stored_checks"]), r
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["stamps"]["synthetic"]["run"] == r["run_id"]
        assert manifest["stamps"]["model"]["run"] == r["run_id"]

    # the ledger: three runs, each charged its stages, no reservation left open
    import sqlite3

    con = sqlite3.connect(project.ledger)
    try:
        charged = {row[0] for row in con.execute(
            "SELECT run_id FROM privacy_ledger WHERE kind = 'charge'")}
    finally:
        con.close()
    assert charged == {r["run_id"] for r in runs}
    from dp_synth_assets.infra.ledger import PrivacyLedger

    assert PrivacyLedger(project.ledger).summary(DATASET).reserved_rho == pytest.approx(0.0)

    # the final table is the published run's, beside its Parquet
    published = project.public / DATASET / "synthetic.parquet"
    table_rows, file_rows, differ = table_matches_parquet(project, published)
    assert table_rows == file_rows and differ == 0
    last = json.loads((project.public / DATASET / "measurements.json").read_text())
    assert table_rows == requested(last["noisy_total"])


def test_a_run_failing_after_preprocessed_leaves_the_published_set_whole(tmp_path, monkeypatch):
    project = make_project(tmp_path, rows=2000)
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(project, instance, checks=False).success  # the published set
    folder = project.public / DATASET
    before = {name: (folder / name).read_bytes()
              for name in ("plan.json", "measurements.json", "model.npz", "synthetic.parquet")}

    # a new encoding plan (age in 12 bins instead of 24), and a failure in the next stage
    original = project.datasets.read_text()
    spec = yaml.safe_load(original)
    spec["datasets"][DATASET]["columns"]["age"]["bins"] = 12
    edited = yaml.safe_dump(spec, sort_keys=False)
    project.datasets.write_text(edited)
    from dp_synth_assets.core import stages

    def broken(*args, **kwargs):
        raise RuntimeError("injected failure after preprocessed")
    with monkeypatch.context() as patch:
        patch.setattr(stages, "select", broken)
        failed = materialize(project, instance)
    assert not failed.success
    assert {name: (folder / name).read_bytes() for name in before} == before

    # synthetic alone under the edited entry: the published plan was made from the entry before
    # the edit, so it is refused and nothing is replaced
    stale = materialize(project, instance, "synthetic")
    assert not stale.success
    assert "Materialize the whole dataset" in failure_messages(stale)
    assert {name: (folder / name).read_bytes() for name in before} == before

    # a "free" re-materialization of synthetic alone, under the entry the published set was made
    # from, uses the whole published set
    project.datasets.write_text(original)
    again = materialize(project, instance, "synthetic")
    assert again.success, failure_messages(again)
    checks = list(again.get_asset_check_evaluations())
    assert checks and all(e.passed for e in checks), [
        (e.check_name, e.metadata) for e in checks if not e.passed]
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        low, high = con.execute("SELECT min(age), max(age) FROM synthetic.example").fetchone()
    finally:
        con.close()
    assert 17 <= low <= high <= 90
    noisy = json.loads(before["measurements.json"])["noisy_total"]
    assert table_matches_parquet(project, folder / "synthetic.parquet")[:2] == (requested(noisy),) * 2

    # a new plan published alone: synthetic refuses the measurements and model made for the old
    # one, naming the stage to re-materialize, and replaces nothing
    project.datasets.write_text(edited)
    assert materialize(project, instance, "preprocessed").success
    table = table_matches_parquet(project, folder / "synthetic.parquet")
    refused = materialize(project, instance, "synthetic")
    assert not refused.success
    message = failure_messages(refused)
    assert "re-materialize the 'marginals' stage" in message, message
    assert table_matches_parquet(project, folder / "synthetic.parquet") == table


def test_a_kill_between_table_commit_and_parquet_publish_is_repaired_by_the_next_run(tmp_path):
    project = make_project(tmp_path, rows=2000)
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(project, instance, checks=False).success  # the published set
    folder = project.public / DATASET

    killed = start_run(project, tmp_path, kill=True)
    killed.communicate(timeout=600)
    assert killed.returncode == -9  # killed at the injected moment, after the table commit

    # the next run of the dataset (here one that writes no public artifact) repairs it
    assert materialize(project, instance, "marginals").success
    table_rows, file_rows, differ = table_matches_parquet(project, folder / "synthetic.parquet")
    assert table_rows == file_rows and differ == 0
    noisy = json.loads((folder / "measurements.json").read_text())["noisy_total"]
    assert table_rows == requested(noisy)
    leftovers = [p for p in folder.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_a_notebook_fit_holds_the_datasets_run_lock_and_waits_for_a_pipeline_run(
        tmp_path, caplog):
    """`Synthesizer(public_dir=...)` takes the lock a Dagster run of the dataset takes
    (`<public_dir>/<dataset>/run.lock`) before it reserves anything: held by a run, the fit
    waits, says whom for, and gives up naming it, with nothing reserved; free, the fit holds it
    from its reservation to its release, and frees it."""
    from dp_synth_assets import Synthesizer
    from dp_synth_assets.infra.ledger import PrivacyLedger
    from dp_synth_assets.infra.runs import DatasetLock, RunWaitTimeout
    from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example

    public, path = tmp_path / "public", tmp_path / "ledger.sqlite"
    columns = {name: EXAMPLE_COLUMNS[name] for name in ("sex", "race", "newsletter")}
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, generator="gum", seed=1,
                        ledger=path, dataset=DATASET, public_dir=public, run_wait_seconds=1.0)
    pipeline = DatasetLock(public / DATASET, DATASET)
    assert pipeline.acquire("dagster-run-1")  # a live process (this one) holds it
    with caplog.at_level("WARNING", logger="dp_synth"), \
            pytest.raises(RunWaitTimeout, match="dagster-run-1") as refused:
        synth.fit(generate_example(500, seed=2))
    assert "run_wait_seconds" in str(refused.value)
    assert "waiting for run dagster-run-1" in caplog.text
    assert PrivacyLedger(path).events(DATASET) == []  # nothing reserved, nothing read

    pipeline.release("dagster-run-1")
    ledger = PrivacyLedger(path)
    held = []
    reserve = ledger.reserve

    def reserving(dataset, run_id, *args, **kwargs):
        held.append((run_id, pipeline.holder()["run_id"]))
        return reserve(dataset, run_id, *args, **kwargs)

    ledger.reserve = reserving
    synth.ledger = ledger
    synth.fit(generate_example(500, seed=2))
    [(run_id, holder)] = held
    assert holder == run_id and run_id.startswith("api-")
    assert pipeline.holder() is None  # freed after the release
    assert ledger.summary(DATASET).reserved_rho == 0


def test_four_cli_runs_at_once_on_a_fresh_dagster_home_work_or_fail_before_spending(tmp_path):
    """Four `dagster asset materialize` processes started at once on a DAGSTER_HOME that no
    process has opened: Dagster's CLI creates the instance's storages (SQLite + alembic
    migrations) before it loads any code location, and processes that do it at once can fail
    there (`alembic_version` races), or when the run's first event initializes the event log.
    Each process either runs, or fails in that storage initialization, before its run starts:
    the ledger holds exactly the
    successful runs, each reserved and released, none left open. (`make run` / `make dev`
    initialize a fresh DAGSTER_HOME first; so does `dagster instance migrate`.)"""
    import re

    from dp_synth_assets.infra.ledger import PrivacyLedger
    from tests.helpers import dagster_env

    project = make_project(tmp_path / "project", rows=500)
    env = dagster_env(project, tmp_path / "home")
    dagster = Path(sys.executable).parent / "dagster"
    select = ",".join(f"{DATASET}/{s}" for s in ("preprocessed", "marginals", "selection"))
    processes = [subprocess.Popen(
        [str(dagster), "asset", "materialize", "-f", str(REPO / "definitions.py"), "--select",
         select], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True) for _ in range(4)]
    succeeded = []
    for process in processes:
        out, _ = process.communicate(timeout=300)
        if process.returncode == 0:
            [run_id] = re.findall(r" - ([0-9a-f-]{36}) - \d+ - RUN_SUCCESS", out)
            succeeded.append(run_id)
            continue
        # failed while Dagster created the instance's storages (when the CLI opened the
        # instance, or when the run's first event initialized the event log), before the run
        # started: no dp-synth stage ran
        assert "alembic" in out or "sqlite3" in out, out[-3000:]
        assert "RUN_START" not in out and "STEP_START" not in out, out[-3000:]
    ledger = PrivacyLedger(project.ledger)
    summary = ledger.summary(DATASET)
    assert set(summary.runs) == set(succeeded)
    assert summary.reserved_rho == 0
    for run_id in succeeded:
        kinds = [e["kind"] for e in ledger.events(DATASET) if e["run_id"] == run_id]
        assert kinds[0] == "reserve" and kinds[-1] == "release" and "charge" in kinds
