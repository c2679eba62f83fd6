"""`make run` without make: the dagster CLI materializes the example's whole pipeline into a
persistent Dagster instance, then the report reads the public artifacts and the ledger.

Two CLI processes started together race for a budget that fits one run (`raced`, one race read
by two tests): the winner's run is the CLI's whole pipeline, the loser is refused."""

import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from tests.helpers import EXAMPLE_REPORT, REPO, dagster_env, make_project

BIN = Path(sys.executable).parent


def run(args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def columns(con, table: str) -> list[str]:
    return [row[0] for row in con.execute(f"DESCRIBE {table}").fetchall()]


def cli_env(tmp_path: Path, project) -> dict:
    return dagster_env(project, tmp_path / "dagster_home")


MATERIALIZE = [str(BIN / "dagster"), "asset", "materialize", "-f", str(REPO / "definitions.py"),
               "--select", "*example/synthetic"]


@pytest.fixture(scope="module")
def raced(tmp_path_factory):
    """Two real `dagster asset materialize` processes started together on a budget that fits
    one run: (project, env, [(returncode, output)] of each)."""
    tmp_path = tmp_path_factory.mktemp("cli")
    project = make_project(tmp_path / "project", rows=1500, report=EXAMPLE_REPORT, privacy={
        "epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 1.1, "delta": 1e-9}})
    env = cli_env(tmp_path, project)
    # the instance exists before the race, as in any deployment (two processes creating its
    # SQLite schema at once is Dagster's race, not the ledger's)
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        instance.get_runs()                 # run storage
        instance.get_asset_keys()           # event log index
        instance.all_instigator_state()     # schedule storage
    # '*example/synthetic' includes the observable source asset upstream
    procs = [subprocess.Popen(MATERIALIZE, cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    return project, env, [(p.returncode, o) for p, o in zip(procs, outputs)]


def test_cli_materializes_the_pipeline_and_the_report_shows_it(raced):
    project, env, outcomes = raced
    home = Path(env["DAGSTER_HOME"])
    [winner] = [output for code, output in outcomes if code == 0]
    assert "RUN_SUCCESS" in winner

    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        assert columns(con, "synthetic.example") == columns(con, "main.example")
        assert con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0] > 0
    finally:
        con.close()

    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        # the winner's run succeeded; the loser's failed (its reservation was refused)
        assert sorted(r.status.value for r in runs) == ["FAILURE", "SUCCESS"]
        [record] = [r for r in runs if r.status == dg.DagsterRunStatus.SUCCESS]
        materialized = {k for k in instance.get_asset_keys()
                        if instance.get_latest_materialization_event(k) is not None}
        assert {tuple(k.path) for k in materialized} >= {
            ("example", s) for s in ("preprocessed", "marginals", "selection", "measurements",
                                     "model", "synthetic")}

    from dp_synth_assets.resources.ledger import PrivacyLedger

    # the example's declared numeric bins get DP densities in `preprocessed`
    assert set(PrivacyLedger(project.ledger).spent_by_run("example", record.run_id)) == {
        "preprocessed", "selection", "measurements"}

    report = run([sys.executable, "-m", "dp_synth_assets.report", "example"], env, timeout=120)
    assert report.returncode == 0, report.stdout + report.stderr[-3000:]
    assert "synthetic.example" in report.stdout
    assert "remaining epsilon" in report.stdout
    assert "FAILED" not in report.stdout and "not run" not in report.stdout


def test_two_runs_started_together_cannot_exceed_the_limit(raced):
    """Two real `dagster asset materialize` processes race for a budget that fits one run."""
    from dp_synth_assets.resources.ledger import PrivacyLedger
    from dp_synth_assets.budget import DatasetBudget
    from dp_synth_assets.core.config import load_registry

    project, _, outcomes = raced
    codes = sorted(code for code, _ in outcomes)
    assert codes[0] == 0 and codes[1] != 0, [o[-3000:] for _, o in outcomes]
    loser = next(o for code, o in outcomes if code != 0)
    assert "cannot cover this run" in loser and "privacy.limit.epsilon" in loser
    budget = DatasetBudget.of(load_registry(project.datasets)["example"])
    summary = PrivacyLedger(project.ledger).summary("example")
    assert summary.spent_rho <= budget.limit_rho
    assert abs(summary.spent_rho - budget.run_rho) < 1e-9 * budget.run_rho
    assert summary.reserved_rho == 0


# `generator: parallel_pgm` on Dagster's multiprocess executor, its units in processes of their
# own: tests/test_objectstore.py (test_a_multiprocess_run_passes_its_units_through_the_bucket)
