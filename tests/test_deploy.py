"""A deployment that behaves like a container run launcher (Kubernetes, ECS, Docker): every run is
a new process of the real `dagster` CLI in a working directory of its own that starts empty (no
`.dp_synth/`, no zone folder, no warehouse file carried over), with every piece of dp-synth's
state outside it: the ledger and the run lock in PostgreSQL, the public and private zones on an
S3-compatible server, the change-detection secret in an environment variable, the source's rows
in PostgreSQL (`engine: postgres`). The Dagster instance (DAGSTER_HOME) stands for the platform's
own database, which every run shares.

- three runs started together under a limit of two runs: exactly two are charged, one is refused
  with the budget's message, and nothing any run wrote stays on its local disk but the scratch
  warehouse file;
- a run killed (kill -9) after its reservation: the next run succeeds, and the ledger balances
  (no reservation left open, the killed run's charges kept, the total within the limit).
"""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dp_synth_assets.core.budget import DatasetBudget
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.infra.ledger import PrivacyLedger
from tests.helpers import REPO, example_entry, needs_extra
from tests.test_objectstore import s3  # noqa: F401 - the moto S3 server fixture

pytestmark = [
    needs_extra("objectstore"),
    pytest.mark.skipif(importlib.util.find_spec("moto") is None,
                       reason="needs moto[server] (the `test` extra)"),
]
psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (the `postgres` extra)")

SCHEMA = "deploy_ledger"
KEPT = ("age", "sex", "race", "newsletter")
ROWS = 1500


@pytest.fixture(scope="module")
def platform(pg_server, s3, tmp_path_factory):  # noqa: F811 - s3 is the imported fixture
    """The image (definitions.py and datasets.yaml, nothing else), the platform's instance, the
    source tables in PostgreSQL, and the environment every run gets."""
    from tests.test_engine_postgres import _load_example

    for table in ("public.deploy_a", "public.deploy_kill"):
        _load_example(pg_server.dsn, table, ROWS)
    image = tmp_path_factory.mktemp("image")
    shutil.copy(REPO / "definitions.py", image / "definitions.py")
    columns = {k: v for k, v in example_entry()["columns"].items() if k in KEPT}
    budget = {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 1.6, "delta": 1e-9}}
    entries = {name: example_entry(
        source={"table": table}, columns=columns, report=None, rows=400, privacy=budget,
        model={"iterations": 50},
        engine={"type": "postgres", "dsn_env": "DEPLOY_PG_DSN"})
        for name, table in (("a", "public.deploy_a"), ("kill", "public.deploy_kill"))}
    (image / "datasets.yaml").write_text(yaml.safe_dump({"datasets": entries}, sort_keys=False))
    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:  # its storage, created once
        instance.get_runs(limit=1)
    env = {**os.environ,
           "DAGSTER_HOME": str(home),
           "DP_SYNTH_DATASETS": str(image / "datasets.yaml"),
           "DP_SYNTH_LEDGER": pg_server.url, "DP_SYNTH_LEDGER_SCHEMA": SCHEMA,
           "DP_SYNTH_PUBLIC": "s3://dp-public/deploy", "DP_SYNTH_PRIVATE": "s3://dp-private/deploy",
           "DP_SYNTH_CHANGE_SECRET": "5e" * 32, "DEPLOY_PG_DSN": pg_server.dsn,
           "JAX_ENABLE_COMPILATION_CACHE": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return image, env, tmp_path_factory.mktemp("containers")


def start(platform, dataset: str, name: str) -> tuple[subprocess.Popen, Path]:
    """One run as a run launcher starts it: a new process in an empty working directory, its
    scratch warehouse there."""
    image, env, containers = platform
    workdir = containers / name
    workdir.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "dagster", "asset", "materialize", "-f",
         str(image / "definitions.py"), "--select", f"*{dataset}/synthetic"],
        cwd=workdir, env={**env, "DP_SYNTH_WAREHOUSE": str(workdir / "warehouse.duckdb")},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return process, workdir


def ledger(platform) -> PrivacyLedger:
    _, env, _ = platform
    return PrivacyLedger(env["DP_SYNTH_LEDGER"], schema=SCHEMA)


def left_on_disk(workdir: Path) -> set[str]:
    """What a run left in its working directory, but its scratch warehouse file."""
    return {str(p.relative_to(workdir)) for p in workdir.rglob("*")
            if not p.name.startswith("warehouse.duckdb")}


def test_three_runs_together_under_a_limit_of_two_charge_exactly_two(platform):
    image, _, _ = platform
    budget = DatasetBudget.of(load_registry(image / "datasets.yaml")["a"])
    assert 2 * budget.run_rho <= budget.limit_rho < 3 * budget.run_rho
    runs = [start(platform, "a", f"run{i}") for i in range(3)]
    outputs = []
    for process, workdir in runs:
        output, _ = process.communicate(timeout=900)
        outputs.append((process.returncode, output, workdir))
    succeeded = [o for o in outputs if o[0] == 0]
    refused = [o for o in outputs if o[0] != 0]
    assert len(succeeded) == 2, [o[1][-3000:] for o in outputs]
    for _, output, _ in refused:
        assert "cannot cover this run" in output, output[-3000:]
    summary = ledger(platform).summary("a")
    assert summary.reserved_rho == 0
    assert len(summary.runs) == 2
    assert summary.spent_rho == pytest.approx(2 * budget.run_rho, rel=1e-6)
    for _, _, workdir in outputs:
        assert left_on_disk(workdir) == set(), workdir


def test_a_run_killed_after_its_reservation_does_not_block_the_next_and_the_ledger_balances(
        platform):
    image, _, _ = platform
    budget = DatasetBudget.of(load_registry(image / "datasets.yaml")["kill"])
    process, _ = start(platform, "kill", "killed")
    deadline = time.monotonic() + 600
    while not any(e["kind"] == "reserve" for e in ledger(platform).events("kill")):
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the run never reserved"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    charged_by_killed = ledger(platform).summary("kill").spent_rho
    assert charged_by_killed <= budget.run_rho * (1 + 1e-9)

    following, workdir = start(platform, "kill", "after")
    output, _ = following.communicate(timeout=900)
    assert following.returncode == 0, output[-3000:]
    assert left_on_disk(workdir) == set()
    events = ledger(platform).events("kill")
    summary = ledger(platform).summary("kill")
    assert summary.reserved_rho == 0  # the killed run's reservation was released
    charges = sum(e["rho"] for e in events if e["kind"] == "charge")
    assert summary.spent_rho == pytest.approx(charges)
    assert summary.spent_rho == pytest.approx(charged_by_killed + budget.run_rho, rel=1e-6)
    assert summary.spent_rho <= budget.limit_rho * (1 + 1e-9)
    released = [e for e in events if e["kind"] == "release"]
    assert any("stale" in e["parameters"].get("reason", "") for e in released), released
