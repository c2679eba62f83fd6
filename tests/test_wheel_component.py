"""A second host project installs the built wheel: tests/host_project_dg/, a `dg` project whose
own asset writes a Parquet file, with dp-synth added as a Component instance from YAML
(src/host_lake/defs/synth/defs.yaml). From the installed package, `dg` lists the component and
the definitions the YAML builds (dp-synth's stages downstream of the host's asset), and one
`dagster asset materialize` of the host's asset and everything downstream runs them under the
host's default executor (a process per step), reading the Parquet file.

How the wheel is built and installed (once per session, the venv shared with
tests/test_wheel.py): tests/wheel_env.py.
"""

import json
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest

from tests.wheel_env import host_env, run, shared_install

HOST = Path(__file__).resolve().parent / "host_project_dg"
TYPE = "dp_synth_assets.DpSynthComponent"
STAGES = ["preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    pytest.importorskip("dagster_dg_cli", reason="dagster-dg-cli is in the test extra")
    return shared_install(tmp_path_factory)


def host_copy(installed: Path, tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the dg host project under `tmp_path` and the environment its commands run in
    (the installed venv first on PATH, its own DAGSTER_HOME)."""
    project = tmp_path / "host_lake"
    shutil.copytree(HOST, project, ignore=shutil.ignore_patterns("__pycache__"))
    venv_dir = installed.parents[1]
    env = host_env(tmp_path / "dagster_home", VIRTUAL_ENV=str(venv_dir),
                   PYTHONPATH=str(project / "src"))
    env["PATH"] = f"{venv_dir / 'bin'}:{env['PATH']}"
    return project, env


def dg(installed: Path, project: Path, env: dict, *args: str) -> str:
    """`dg` run by the venv's python (its console script belongs to the test environment)."""
    return run([installed, "-c", "import sys; from dagster_dg_cli.cli import main; "
                "sys.argv[0] = 'dg'; main()", *args], project, env).stdout


def test_a_dg_project_adds_dp_synth_as_a_component_on_its_parquet_asset(installed, tmp_path):
    project, env = host_copy(installed, tmp_path)

    listed = json.loads(dg(installed, project, env, "list", "components", "--json"))
    items = listed["items"] if isinstance(listed, dict) else listed
    assert TYPE in {item["key"] for item in items}

    # the YAML's dataset: every stage, downstream of the host's asset, from the installed package
    assets = {a["asset_key"]: a for a in
              json.loads(dg(installed, project, env, "list", "defs", "--json"))["assets"]}
    ours = {f"dp_synth/orders/{stage}" for stage in STAGES}
    assert ours <= set(assets) and "dp_synth/orders/source" not in assets
    assert assets["dp_synth/orders/preprocessed"]["dependency_keys"] == ["analytics/orders"]
    assert {assets[k]["group_name"] for k in ours} == {"synthetic_data"}
    assert all(assets[k]["source"].startswith("src/host_lake/defs/synth/defs.yaml") for k in ours)

    done = run([installed, "-m", "dagster", "asset", "materialize", "-m", "host_lake.definitions",
                "--select", "analytics/orders*"], project, env)
    assert "RUN_SUCCESS" in done.stdout + done.stderr
    assert "Multiprocess executor" in done.stdout + done.stderr  # the host's default executor

    con = duckdb.connect(str(project / "warehouse.duckdb"), read_only=True)
    try:
        described = con.execute("DESCRIBE synthetic.orders").fetchall()
        rows = con.execute("SELECT count(*) FROM synthetic.orders").fetchone()[0]
    finally:
        con.close()
    assert [(name, kind) for name, kind, *_ in described] == [
        ("channel", "VARCHAR"), ("items", "BIGINT"), ("returned", "BOOLEAN")]
    assert rows > 0
    published = project / "public" / "orders" / "synthetic.parquet"  # the published run's
    reader = duckdb.connect()
    try:
        assert reader.execute("SELECT count(*) FROM read_parquet(?)",
                              [str(published)]).fetchone()[0] == rows
    finally:
        reader.close()


def test_the_installed_component_refuses_a_mistyped_source_asset_in_dg_check_defs(installed,
                                                                                    tmp_path):
    """From the installed package, `dg check defs` passes the project as written and refuses it,
    with dp-synth's message naming the component's defs.yaml, once the source key is mistyped."""
    project, env = host_copy(installed, tmp_path)
    assert "All definitions loaded successfully" in dg(installed, project, env, "check", "defs")
    defs_yaml = project / "src" / "host_lake" / "defs" / "synth" / "defs.yaml"
    defs_yaml.write_text(defs_yaml.read_text().replace("asset: [analytics, orders]",
                                                       "asset: [analytics, order]"))
    done = subprocess.run([installed, "-c", "import sys; from dagster_dg_cli.cli import main; "
                           "sys.argv[0] = 'dg'; main()", "check", "defs"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "SourceAssetError: dp-synth source assets not found" in out, out
    assert (f"`attributes.datasets.orders` in {defs_yaml.resolve()}: `source.asset` "
            "analytics/order is not an asset of these definitions; nearest asset keys: "
            "analytics/orders") in out
