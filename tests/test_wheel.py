"""The built wheel is a package a platform can install: it carries the SQL templates and the
resources inside `dp_synth_assets`, installs no top-level `resources`, declares ranges and no
test tool as its requirements, and a host Dagster project (tests/host_project/, run from a copy
outside the repository) materializes dp-synth's synthetic table from the installed package,
under the host's own executor, IO manager and `warehouse` resource, and dp-synth's automation,
evaluated on the host's real instance, resynthesizes when the host's asset changes, holds a
change inside min_interval and skips a run the ledger cannot cover.

How the wheel is built and installed (and the DP_SYNTH_WHEEL_* settings): tests/wheel_env.py.
The second host project (a `dg` project with a Parquet asset and the Component):
tests/test_wheel_component.py.
"""

import json
import re
import shutil
import zipfile
from email.parser import Parser
from importlib.metadata import version
from pathlib import Path

import duckdb
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from tests.wheel_env import DAGSTER, DEPS, REPO, host_env, run, shared_install, shared_wheel

HOST = Path(__file__).resolve().parent / "host_project"
STAGES = ["preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]
SOURCE, BUDGET = "source has a new materialization", "privacy budget covers one more run"
INTERVAL = "min_interval 1h passed since the last synthesis"

DAGSTER_RANGE = """
from importlib.metadata import requires
print(next(r.split(";")[0] for r in requires("dagster-dp-synth") if r.startswith("dagster")
           and not r.startswith(("dagster-", "dagster_"))))
"""


def dagster_range(python: Path) -> str:
    """The Dagster versions the installed distribution declares (its requirement's specifier)."""
    return str(Requirement(run([python, "-c", DAGSTER_RANGE], REPO).stdout.strip()).specifier)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return shared_wheel(tmp_path_factory)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    return shared_install(tmp_path_factory)


def test_the_source_tree_links_resources_and_sql_into_the_package():
    assert (REPO / "dp_synth_assets" / "resources").resolve() == (REPO / "resources").resolve()
    assert (REPO / "dp_synth_assets" / "sql").resolve() == (REPO / "sql").resolve()


def test_the_wheel_carries_sql_and_resources_inside_the_package_and_declares_ranges(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    assert {n for n in names if n.startswith("dp_synth_assets/sql/")} == {
        f"dp_synth_assets/sql/{p.name}" for p in (REPO / "sql").glob("*.sql")}
    assert {n for n in names if n.startswith("dp_synth_assets/resources/")} == {
        f"dp_synth_assets/resources/{p.name}" for p in (REPO / "resources").glob("*.py")}
    # what the Data Docs load instead of GX's CDNs (dp_synth_assets/checks/data_docs_offline.py)
    static = REPO / "dp_synth_assets" / "checks" / "data-docs-static"
    assert {n for n in names if n.startswith("dp_synth_assets/checks/data-docs-static/")} == {
        f"dp_synth_assets/checks/data-docs-static/{p.relative_to(static).as_posix()}"
        for p in static.rglob("*") if p.is_file()}
    assert "dp_synth_assets/checks/data-docs-static/jquery-3.7.1/jquery.min.js" in names
    assert {n.split("/")[0] for n in names} == {"dp_synth_assets", metadata_name.split("/")[0]}
    assert metadata["Name"] == "dagster-dp-synth"
    requirements = metadata.get_all("Requires-Dist")
    runtime = [r for r in requirements if "extra ==" not in r]
    assert not any(r.startswith("pytest") for r in runtime), runtime
    assert any(r.startswith("pytest") and 'extra == "test"' in r for r in requirements)
    assert not any("==" in r for r in runtime), runtime
    assert not any(r.startswith("dagster-duckdb") for r in requirements)
    # a slim default: the webserver, the owner-only report's and JAX's libraries are extras
    names = {r.split(";")[0].split("[")[0].split("<")[0].split(">")[0].strip() for r in runtime}
    assert {"dagster", "duckdb", "pandas", "numpy", "opendp"} <= names, runtime
    assert not names & {"dagster-webserver", "jax", "jaxlib", "mbi", "scikit-learn",
                        "matplotlib", "psycopg", "sqlglot", "pyspark"}, runtime


def test_a_host_project_synthesizes_and_automation_resynthesizes_from_the_installed_wheel(
        installed, tmp_path):
    host = tmp_path / "host"
    shutil.copytree(HOST, host, ignore=shutil.ignore_patterns("__pycache__"))
    env = host_env(tmp_path / "dagster_home")
    venv_dir = installed.parents[1]

    # one command: the host's asset and every dp-synth stage downstream of it
    dagster = [installed, "-m", "dagster", "asset", "materialize", "-f", "definitions.py"]
    done = run([*dagster, "--select", "raw_customers*"], host, env)
    assert "RUN_SUCCESS" in done.stdout + done.stderr

    # the synthetic table that run wrote: the declared columns and kinds, some rows
    declared = yaml.safe_load((HOST / "datasets.yaml").read_text())["datasets"]["customers"]
    con = duckdb.connect(str(host / "warehouse.duckdb"), read_only=True)
    try:
        described = con.execute("DESCRIBE synthetic.customers").fetchall()
        rows = con.execute("SELECT count(*) FROM synthetic.customers").fetchone()[0]
    finally:
        con.close()
    assert [(name, kind) for name, kind, *_ in described] == [
        ("age", "BIGINT"), ("plan", "VARCHAR"), ("active", "BOOLEAN")]
    assert [name for name, *_ in described] == list(declared["columns"])
    assert rows > 0

    run([installed, "-m", "dp_synth_assets.resources.ledger", "--help"], host, env)
    # one process of the venv's python reads the definitions, the first synthesis on the
    # instance, then drives the automation's ticks (tests/host_project/probe.py)
    probed = json.loads(run([installed, "probe.py"], host, env).stdout)

    # the package comes from the venv, with its templates and resources, and nothing else; the
    # host's asset feeds dp-synth's first stage (no `source` asset of dp-synth's), and the host's
    # executor and resources are the ones it set, beside dp-synth's namespaced ones
    seen = probed["definitions"]
    assert Path(seen["package"]).is_relative_to(venv_dir)
    assert Path(seen["ledger"]).is_relative_to(venv_dir)
    assert seen["templates"] == len(list((REPO / "sql").glob("*.sql")))
    assert not seen["top_level_resources"]
    # the Dagster asked for, else the test environment's (layered) or one the wheel allows
    if DAGSTER or DEPS == "layered":
        assert seen["dagster"] == (DAGSTER or version("dagster"))
    assert SpecifierSet(dagster_range(installed)).contains(seen["dagster"]), seen["dagster"]
    assert seen["parents"] == ["raw_customers"] and not seen["source_asset"]
    assert seen["executor"] == "in_process"
    assert seen["resources"] == {"warehouse": "HostWarehouse", "io_manager": "FramesOnlyIOManager",
                                 "dp_synth_warehouse": "WarehouseResource",
                                 "dp_synth_ledger": "LedgerResource",
                                 "dp_synth_io_manager": "FilesystemIOManager"}

    # the synthetic table's standard metadata and budget figures, and numbers on each check
    recorded = probed["first_synthesis"]
    metadata = recorded["metadata"]
    assert int(metadata["dagster/row_count"]) == rows
    assert metadata["dagster/table_name"].endswith("synthetic.customers")
    for name in ("age", "plan", "active"):
        assert f"'{name}'" in metadata["dagster/column_schema"]
    for key in ("privacy/run_epsilon", "privacy/budget_used_share", "privacy/runs_left"):
        assert key in metadata
    assert float(metadata["privacy/runs_left"]) == 1  # the limit covers two runs
    numbers = recorded["checks"]  # check -> its numeric metadata (null_fraction has none here:
    assert {"rows", "requested_rows"} <= set(numbers["row_count"])  # no column is nullable)
    tvd = [check for check, names in numbers.items() if "max_tvd" in names]
    assert len(tvd) == 2 and all({"max_tvd_tolerance", "max_tvd_ratio"} <= set(numbers[c])
                                 for c in tvd), numbers
    assert any({"duplicate_share", "allowed"} <= set(names) for names in numbers.values())

    # automation on the host's instance: the host's change requests the chain, which runs; a
    # second change inside min_interval is held for the interval; after it, for the budget
    ticks = probed["ticks"]
    chain = sorted(f"privacy/customers/{stage}" for stage in STAGES)
    assert ticks["baseline"]["requested"] == []
    assert ticks["changed"]["requested"] == chain and ticks["changed"]["run_success"]
    assert ticks["changed"]["gates"] == {SOURCE: True, INTERVAL: True, BUDGET: True}
    assert ticks["synthesized"]["requested"] == []
    assert ticks["inside_interval"]["requested"] == []
    assert ticks["inside_interval"]["gates"] == {SOURCE: True, INTERVAL: False, BUDGET: False}
    assert ticks["out_of_budget"]["requested"] == []
    assert ticks["out_of_budget"]["gates"] == {SOURCE: True, INTERVAL: True, BUDGET: False}
    assert ticks["out_of_budget"]["runs"] == ticks["inside_interval"]["runs"]  # none launched

    # the installed package's Data Docs load their scripts and styles from the site, not a CDN
    docs = host / "public" / "customers" / "data_docs"
    assert (docs / "static" / "vendor" / "jquery-3.7.1" / "jquery.min.js").is_file()
    index = (docs / "index.html").read_text()
    assert "static/vendor/bootstrap-4.3.1/css/bootstrap.min.css" in index
    assert not re.search(r'(?:src|href)="https?://[^"]*\.(?:js|css)"', index)

    # the host's IO manager was never handed a dp-synth output
    calls = host / "io_calls.txt"
    assert not calls.exists() or "privacy/" not in calls.read_text()
