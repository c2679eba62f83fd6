"""The built wheel is a package a platform can install: it carries the SQL templates and the
resources inside `dp_synth_assets`, installs no top-level `resources`, declares ranges and no
test tool as its requirements, and a host Dagster project (tests/host_project/, run from a copy
outside the repository) materializes dp-synth's synthetic table from the installed package.

The wheel is built with `pip wheel --no-deps` from a copy of the sources (the checkout gets no
build/ folder) and installed into a fresh virtual environment. Its dependencies come one of two
ways, chosen by DP_SYNTH_WHEEL_DEPS:
- `layered` (the default, for `make test`): the wheel is installed with `--no-deps` into a venv
  that sees the test environment's site-packages through a .pth file (their .pth files, the
  editable install's finder among them, are not run, so the source tree stays invisible), and
  each of the wheel's requirements is checked against the version the venv imports.
- `resolve`: pip resolves and installs the whole dependency set from the package index into the
  fresh venv (pip's cache is reused), as a platform's `pip install` does.
DP_SYNTH_WHEEL_DAGSTER=<version> then installs that Dagster (and its webserver) into the venv, to
run the host project at either end of the supported range.
"""

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import duckdb
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
HOST = Path(__file__).resolve().parent / "host_project"
DEPS = os.environ.get("DP_SYNTH_WHEEL_DEPS", "layered")
DAGSTER = os.environ.get("DP_SYNTH_WHEEL_DAGSTER")
# what a wheel build reads: the project file, the README it names, the package (with its links
# to resources/ and sql/) and the two linked folders
SOURCES = ("pyproject.toml", "README.md", "dp_synth_assets", "resources", "sql")


# each runtime requirement of the installed distribution that the venv's packages do not meet
UNMET = """
from importlib.metadata import requires, version
from packaging.requirements import Requirement
for text in requires("dagster-dp-synth"):
    req = Requirement(text)
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        found = version(req.name)
        if not req.specifier.contains(found, prereleases=True):
            print(f"{req} but {req.name} {found} is installed")
"""


def run(args: list, cwd: Path, env: dict | None = None, timeout: float = 900):
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", out, source], source)
    [built] = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; its python."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    if DEPS == "layered":
        purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                      env_dir).stdout.strip()
        # the test environment's installed packages (its venv may live inside the checkout, as
        # `make`'s .venv does; the source tree itself is never a site-packages folder, and the
        # editable install's finder is not loaded: a .pth line adds a path, not its .pth files)
        outer = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")
                 and Path(p).is_dir()]
        (Path(purelib) / "zz_test_environment.pth").write_text("\n".join(outer) + "\n")
        run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--ignore-installed", wheel],
            env_dir)
    else:
        run([python, "-m", "pip", "install", "--quiet", wheel], env_dir, timeout=1800)
    if DAGSTER:
        run([python, "-m", "pip", "install", "--quiet", f"dagster=={DAGSTER}",
             f"dagster-webserver=={DAGSTER}"], env_dir)
    unmet = run([python, "-c", UNMET], env_dir).stdout.strip()
    assert not unmet, unmet
    return python


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
    assert {n.split("/")[0] for n in names} == {"dp_synth_assets", metadata_name.split("/")[0]}
    assert metadata["Name"] == "dagster-dp-synth"
    requirements = metadata.get_all("Requires-Dist")
    runtime = [r for r in requirements if "extra ==" not in r]
    assert not any(r.startswith("pytest") for r in runtime), runtime
    assert any(r.startswith("pytest") and 'extra == "test"' in r for r in requirements)
    assert not any("==" in r for r in runtime), runtime
    assert not any(r.startswith("dagster-duckdb") for r in requirements)
    assert any(r.replace(" ", "").startswith("dagster<1.14,>=1.13") for r in runtime), runtime


def test_a_host_project_materializes_dp_synth_from_the_installed_wheel(installed, tmp_path):
    host = tmp_path / "host"
    shutil.copytree(HOST, host, ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME")
           and not k.startswith("DP_SYNTH_")}
    env.update(DAGSTER_HOME=str(home), JAX_ENABLE_COMPILATION_CACHE="false")
    venv_dir = installed.parents[1]

    # the package comes from the venv, with its templates and resources, and nothing else
    probe = run([installed, "-c", (
        "import importlib.util, dagster, dp_synth_assets\n"
        "import dp_synth_assets.resources.ledger as ledger\n"
        "from importlib.resources import files\n"
        "print(dp_synth_assets.__file__)\nprint(ledger.__file__)\n"
        "print(len(list((files('dp_synth_assets') / 'sql').glob('*.sql'))))\n"
        "print(importlib.util.find_spec('resources'))\nprint(dagster.__version__)")],
                host, env).stdout.split("\n")
    assert Path(probe[0]).is_relative_to(venv_dir) and Path(probe[1]).is_relative_to(venv_dir)
    assert int(probe[2]) == len(list((REPO / "sql").glob("*.sql")))
    assert probe[3] == "None"
    assert probe[4] == (DAGSTER or probe[4])
    run([installed, "-m", "dp_synth_assets.resources.ledger", "--help"], host, env)

    # lineage from the host's asset into dp-synth's first stage, no `source` asset of its own,
    # and the host's location keeps its default executor
    graph = run([installed, "-c", (
        "import dagster as dg\nfrom definitions import defs\n"
        "graph = defs.resolve_asset_graph()\n"
        "first = dg.AssetKey(['privacy', 'customers', 'preprocessed'])\n"
        "print(sorted(k.to_user_string() for k in graph.get(first).parent_keys))\n"
        "print(dg.AssetKey(['privacy', 'customers', 'source']) in graph.get_all_asset_keys())\n"
        "print(defs.executor)")], host, env).stdout.split("\n")
    assert graph[:3] == ["['raw_customers']", "False", "None"], graph

    # one command: the host's asset and every dp-synth stage downstream of it
    dagster = [installed, "-m", "dagster", "asset", "materialize", "-f", "definitions.py"]
    done = run([*dagster, "--select", "raw_customers*"], host, env)
    assert "RUN_SUCCESS" in done.stdout + done.stderr

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
