"""Both ends of the supported range install beside the Dagster libraries a host already has, and a
host project runs on each (the install matrix of `make test`).

- Newest end: a fresh venv on Python 3.13 where uv (the installer of the projects Dagster's
  `create-dagster` scaffolds) installs, in one resolution, the current dagster, dagster-dg-cli,
  dagster-dbt, dagster-duckdb-pandas, dagster-snowflake-pandas, dagster-sling and the built
  wheel. The wheel moves none of the host libraries' own resolution (a dry run of them alone
  into an empty venv: every distribution it picks is installed at the version it picked) and
  every requirement is met. How long pip takes for the same, and what it backtracks on:
  bench/resolution.py.
- Lowest end: a fresh venv on Python 3.11 where uv installs with a constraints file made here
  from the wheel's own metadata (`name==floor` for each lower bound it declares, so the file
  cannot drift from pyproject.toml), plus dagster-duckdb-pandas of the floor Dagster.
- In each, tests/host_project_io/ (whose source asset is a pandas DataFrame stored by
  dagster-duckdb-pandas's DuckDBPandasIOManager) is materialized by the real `dagster` CLI, host
  asset and dp-synth's chain in one run (in the CLI's process: `IN_PROCESS`), and every check of
  dp-synth's passes.

Each venv is about 1 GB, built once per module by the test environment's uv for the venv's
interpreter (`--python`), and not byte-compiled at install (Python compiles only what the host's
run imports). pip installs the wheel in tests/wheel_env.py. DP_SYNTH_ENDS_EXTRAS (a
comma-separated list, empty by default) installs the wheel with those extras at both ends. Each
end's resolution (seconds, versions) is written to tests/artifacts/install_ends.json.
"""

import json
import os
import re
import shutil
import sys
import time
from importlib.metadata import version
from pathlib import Path

import duckdb
import pytest

from tests.wheel_env import REPO, floors, host_env, requirements, run, shared_wheel

HOST = Path(__file__).resolve().parent / "host_project_io"
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
EXTRAS = tuple(e for e in os.environ.get("DP_SYNTH_ENDS_EXTRAS", "").split(",") if e)
# the Dagster libraries a host typically has, installed beside the wheel at the newest end
HOST_LIBRARIES = ("dagster", "dagster-dg-cli", "dagster-dbt", "dagster-duckdb-pandas",
                  "dagster-snowflake-pandas", "dagster-sling")
# what uv prints for each distribution it installs (or, in a dry run, would install)
INSTALLED = re.compile(r"^\s*\+ ([A-Za-z0-9._-]+)==([^\s]+)", re.MULTILINE)
ARTIFACTS = REPO / "tests" / "artifacts"

# the host's run in the CLI's own process (Dagster's in_process executor, chosen by the run's
# config, as a host may): the multiprocess executor would start a process per step, each
# importing Dagster, pandas and Great Expectations afresh from a venv installed without
# bytecode, for 40-60 s of the module's run (the installed wheel under the multiprocess
# executor: tests/test_wheel_component.py)
IN_PROCESS = json.dumps({"execution": {"config": {"in_process": {}}}})

# the run's asset check evaluations on the instance: check name -> passed
PROBE_CHECKS = """
import json, dagster as dg
from dagster._core.events import DagsterEventType
with dg.DagsterInstance.get() as instance:
    [run] = instance.get_runs()
    events = instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    print(json.dumps({e.dagster_event.event_specific_data.asset_key.to_user_string() + ":"
                      + e.dagster_event.event_specific_data.check_name:
                      e.dagster_event.event_specific_data.passed for e in events}))
"""


def interpreter(minor: str) -> Path:
    """The python of that minor version: pyenv's, else one on PATH."""
    found = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"))
    if found:
        return found[-1]
    on_path = shutil.which(f"python{minor}")
    if on_path is None:
        pytest.skip(f"no Python {minor} (pyenv or PATH) for this end of the install matrix")
    return Path(on_path)


def fresh_venv(minor: str, env_dir: Path) -> Path:
    """An empty venv of that Python (uv installs into it: `uv pip install --python`); its
    python."""
    run([interpreter(minor), "-m", "venv", "--without-pip", env_dir], env_dir.parent)
    return env_dir / "bin" / "python"


def uv_install(python: Path, args: list, record: dict) -> dict[str, str]:
    """uv installs `args` into the venv of `python` in one resolution (nothing byte-compiled);
    name -> version of each distribution it installed, or would install with `--dry-run`.
    Notes the seconds it took."""
    from packaging.utils import canonicalize_name

    started = time.monotonic()
    done = run([sys.executable, "-m", "uv", "pip", "install", "--python", python, *args],
               python.parents[1], timeout=1800)
    record["seconds"] = round(time.monotonic() - started, 1)
    return {canonicalize_name(name): found
            for name, found in INSTALLED.findall(done.stdout + done.stderr)}


def installed_versions(python: Path, names) -> dict[str, str]:
    script = ("import json, sys; from importlib.metadata import version; "
              "print(json.dumps({n: version(n) for n in sys.argv[1:]}))")
    return json.loads(run([python, "-c", script, *names], python.parents[1]).stdout)


def uv_verdict(python: Path) -> str:
    """The last line of uv's check of the venv's installed requirements (a broken one fails
    the command, and `run` with it)."""
    done = run([sys.executable, "-m", "uv", "pip", "check", "--python", python], python.parents[1])
    return (done.stdout + done.stderr).strip().splitlines()[-1]


def write_record(end: str, record: dict) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "install_ends.json"
    records = json.loads(path.read_text()) if path.exists() else {}
    records[end] = record
    path.write_text(json.dumps(records, indent=2) + "\n")


def wheel_spec(wheel: Path) -> str:
    return f"{wheel}[{','.join(EXTRAS)}]" if EXTRAS else str(wheel)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return shared_wheel(tmp_path_factory)


@pytest.fixture(scope="module")
def newest(wheel, tmp_path_factory) -> tuple[Path, dict, dict]:
    from concurrent.futures import ThreadPoolExecutor

    workdir = tmp_path_factory.mktemp("newest")
    python = fresh_venv("3.13", workdir / "venv")
    # the host libraries alone (a dry run into an empty venv of their own): what the host has
    # without the wheel. Both resolutions wait mostly on the package index, so they run at once
    alone: dict = {}
    record: dict = {"python": "3.13", "uv": version("uv"), "extras": list(EXTRAS),
                    "host_libraries_alone": alone}
    with ThreadPoolExecutor(2) as pool:
        dry = pool.submit(uv_install, fresh_venv("3.13", workdir / "alone"),
                          ["--dry-run", *HOST_LIBRARIES], alone)
        installed = pool.submit(uv_install, python, [*HOST_LIBRARIES, wheel_spec(wheel)], record)
        alone["resolved"], record["resolved"] = dry.result(), installed.result()
    record["versions"] = installed_versions(
        python, [*HOST_LIBRARIES, "dagster-dp-synth", *sorted(floors(wheel, EXTRAS))])
    write_record("newest", record)
    return python, alone["resolved"], record


@pytest.fixture(scope="module")
def lowest(wheel, tmp_path_factory) -> tuple[Path, dict, dict]:
    workdir = tmp_path_factory.mktemp("lowest")
    python = fresh_venv("3.11", workdir / "venv")
    bounds = floors(wheel, EXTRAS)
    # Dagster's libraries are versioned 0.(minor + 16).patch beside dagster 1.minor.patch
    major, minor, *patch = (bounds["dagster"].split(".") + ["0"])[:3]
    duckdb_pandas = f"dagster-duckdb-pandas==0.{int(minor) + 16}.{patch[0]}"
    constraints = workdir / "constraints.txt"
    constraints.write_text("".join(f"{name}=={floor}\n" for name, floor in bounds.items()))
    record: dict = {"python": "3.11", "uv": version("uv"), "extras": list(EXTRAS),
                    "constraints": bounds}
    uv_install(python, ["--constraint", constraints, wheel_spec(wheel), duckdb_pandas], record)
    record["versions"] = installed_versions(python, [*bounds, "dagster-duckdb-pandas"])
    write_record("lowest", record)
    return python, bounds, record


def run_host(python: Path, tmp_path: Path) -> tuple[dict, int]:
    """tests/host_project_io materialized by the venv's `dagster` CLI, the host's asset and
    dp-synth's chain in one run: each check's outcome, and the synthetic table's row count."""
    host = tmp_path / "host"
    shutil.copytree(HOST, host, ignore=shutil.ignore_patterns("__pycache__"))
    env = host_env(tmp_path / "dagster_home")
    done = run([python.parent / "dagster", "asset", "materialize", "-f", "definitions.py",
                "--select", "raw_customers*", "--config-json", IN_PROCESS], host, env)
    assert "RUN_SUCCESS" in done.stdout + done.stderr
    checks = json.loads(run([python, "-c", PROBE_CHECKS], host, env).stdout)
    con = duckdb.connect(str(host / "warehouse.duckdb"), read_only=True)
    try:
        written = con.execute("SELECT count(*) FROM main.raw_customers").fetchone()[0]
        rows = con.execute("SELECT count(*) FROM synthetic.customers").fetchone()[0]
    finally:
        con.close()
    assert written == 5000  # the host's IO manager wrote the source table dp-synth read
    return checks, rows


def test_the_newest_end_installs_beside_the_host_libraries_without_moving_them(newest, wheel):
    """The wheel moves nothing the host libraries alone resolve to: every distribution of their
    own resolution is installed beside the wheel at the version it had without it (an upper
    bound of the wheel's below a host's newest release would hold it back), and every installed
    requirement is met."""
    python, alone, record = newest
    assert len(alone) > 20 and "dagster" in alone, alone  # the dry run's list was read
    moved = {name: (was, record["resolved"].get(name)) for name, was in alone.items()
             if record["resolved"].get(name) != was}
    assert not moved, moved
    assert "dagster-dp-synth" in record["resolved"]
    assert uv_verdict(python) == "All installed packages are compatible"
    versions = record["versions"]
    for req in requirements(wheel, EXTRAS):
        assert req.specifier.contains(versions[req.name.lower()] if req.name.lower() in versions
                                      else versions[req.name], prereleases=True), (req, versions)


def test_the_lowest_end_installs_every_declared_floor(lowest):
    python, bounds, record = lowest
    from packaging.version import Version

    assert uv_verdict(python) == "All installed packages are compatible"
    assert {name: Version(v) for name, v in record["versions"].items() if name in bounds} == {
        name: Version(floor) for name, floor in bounds.items()}


@pytest.mark.parametrize("end", ["newest", "lowest"])
def test_each_end_runs_a_host_whose_source_is_written_by_dagster_duckdb_pandas(
        end, request, tmp_path):
    python, _, _ = request.getfixturevalue(end)
    checks, rows = run_host(python, tmp_path)
    assert rows > 0
    assert checks and all(checks.values()), checks
