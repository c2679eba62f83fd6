"""Loading a code location's definitions: what it may import and touch, and how its work grows.

Each load runs in a fresh interpreter (imports and memoized conversions start empty), on a
registry of N copies of the bundled example's entry, each on its own source table, with a
warehouse, ledger and public folder under a directory that does not exist. Wall time is the
benchmark's business (bench/load_definitions.py); these tests assert behaviour.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.helpers import EXAMPLE_REPORT, REPO, example_entry

HEAVY = ("great_expectations", "jax", "mbi", "sklearn", "matplotlib", "pandas")

CHILD = r"""
import json, os, sqlite3, sys, warnings
warnings.simplefilter("ignore")
import duckdb

opened = []
def recording(name, real):
    def connect(*args, **kwargs):
        opened.append(name)
        return real(*args, **kwargs)
    return connect
duckdb.connect = recording("duckdb", duckdb.connect)
sqlite3.connect = recording("sqlite3", sqlite3.connect)

import dagster as dg
from dp_synth_assets.core import privacy
from dp_synth_assets.core import config

counts = {"epsilon_from_rho": 0, "parse_registry": 0}
def counted(module, name):
    real = getattr(module, name)
    def wrapper(*args, **kwargs):
        counts[name] += 1
        return real(*args, **kwargs)
    setattr(module, name, wrapper)
counted(privacy, "epsilon_from_rho")   # one OpenDP privacy-profile evaluation
counted(config, "parse_registry")

from dp_synth_assets.definitions import build_definitions

folder = sys.argv[1]
absent = os.path.join(folder, "absent")
defs = build_definitions(os.path.join(folder, "datasets.yaml"),
                         os.path.join(absent, "warehouse.duckdb"),
                         os.path.join(absent, "ledger.sqlite"), os.path.join(absent, "public"))
dg.Definitions.validate_loadable(defs)
repo = defs.get_repository_def()
# what a code server hands the webserver and the daemon when it starts (every job's snapshot id)
from dagster._core.remote_representation.external_data import RepositorySnap
RepositorySnap.from_def(repo, defer_snapshots=True)
print(json.dumps({"modules": sorted(m.split(".")[0] for m in sys.modules), "opened": opened,
                  "created": os.path.exists(absent), "counts": counts,
                  "jobs": sorted(j.name for j in repo.get_all_jobs()),
                  "sensors": len(repo.sensor_defs),
                  "nodes": len(repo.get_implicit_global_asset_job_def().graph.node_dict)}))
"""


def load(tmp_path, n: int) -> dict:
    """Load the definitions of an N-dataset registry in a fresh interpreter (module docstring)."""
    folder = tmp_path / f"n{n}"
    folder.mkdir()
    datasets = {f"example_{i}": example_entry(source={"table": f"main.example_{i}"},
                                              report=EXAMPLE_REPORT)
                for i in range(n)}
    (folder / "datasets.yaml").write_text(yaml.safe_dump({"datasets": datasets}, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_ENABLE_COMPILATION_CACHE": "false"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def loads(tmp_path_factory) -> dict[int, dict]:
    """One load each of a 1- and a 50-dataset registry, shared by the tests below."""
    folder = tmp_path_factory.mktemp("load")
    return {n: load(folder, n) for n in (1, 50)}


def test_loading_fifty_datasets_imports_no_step_library_and_opens_no_database(loads):
    loaded = loads[50]
    assert not set(HEAVY) & set(loaded["modules"]), \
        f"loading definitions imported {sorted(set(HEAVY) & set(loaded['modules']))}"
    assert loaded["opened"] == [], f"loading definitions connected to {loaded['opened']}"
    assert not loaded["created"], "loading definitions created the warehouse, ledger or public dir"


def test_registry_is_parsed_once_and_budget_conversions_do_not_grow_with_datasets(loads):
    one, fifty = loads[1], loads[50]
    assert one["counts"]["parse_registry"] == fifty["counts"]["parse_registry"] == 1
    # fifty entries with one (epsilon, delta) and one limit convert them as often as one entry
    assert one["counts"]["epsilon_from_rho"] > 0
    assert fifty["counts"]["epsilon_from_rho"] == one["counts"]["epsilon_from_rho"], \
        (one["counts"], fifty["counts"])


def test_sensor_automated_datasets_add_no_job_and_a_fixed_number_of_ops_each(loads):
    """Dagster resolves every job against the whole asset graph and snapshots it when a code
    location starts, so a job per dataset makes the load grow with the square of the datasets:
    the example's entry (an external table resynthesized by its source-change sensor) gets a
    sensor that targets its assets, run in the location's one implicit asset job."""
    one, fifty = loads[1], loads[50]
    assert fifty["sensors"] == 50 + 1  # and the location's one budget sensor (no run, no op)
    assert one["jobs"] == fifty["jobs"] == ["__ASSET_JOB"]
    # each dataset adds the same nodes to that job: its source observation and one op for its
    # stages and checks (Dagster builds and snapshots every op when the location loads)
    assert one["nodes"] == 2, one["nodes"]
    assert fifty["nodes"] == 50 * one["nodes"]
