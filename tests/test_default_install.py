"""The default install: no extra's module is needed by a dataset that uses no optional feature,
and a dataset that uses one whose extra is missing is refused when the definitions load.

The extras' modules are made unimportable in real subprocesses (the dagster CLI, the report) by
a `sitecustomize` on PYTHONPATH that installs an import finder refusing them, as if they were
not installed; every import it refuses is written to a file the test reads.
"""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from dp_synth_assets.core import extras
from dp_synth_assets.core.config import RegistryError, parse_registry
from tests.helpers import REPO, dagster_env, example_entry, make_project, needs_extra

BIN = Path(sys.executable).parent
# every module an extra brings (core/extras.py)
BLOCKED = sorted({m for f in extras.FEATURES.values() for m in f.modules})
REPORT = {"holdout": 0.2, "target": "marital_status"}  # the bundled example's `report:`

SITECUSTOMIZE = '''
import importlib.util
import sys

PROBE = importlib.util.find_spec.__code__
BLOCKED = set({blocked!r})
LOG = {log!r}


class _NotInstalled:
    """Refuses the extras' modules as an environment without them would."""

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BLOCKED:
            # a probe (importlib.util.find_spec, which imports nothing) or an import
            frame, kind = sys._getframe(1), "import"
            while frame is not None:
                if frame.f_code is PROBE:
                    kind = "probe"
                    break
                frame = frame.f_back
            with open(LOG, "a") as out:
                out.write(f"{{kind}}:{{name}}\\n")
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


def blocked_env(tmp_path: Path, project) -> tuple[dict, Path]:
    """The Dagster CLI's environment for `project` with the extras' modules refused; the file
    listing each refused import."""
    site = tmp_path / "without_extras"
    site.mkdir()
    log = tmp_path / "refused.txt"
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=BLOCKED, log=str(log)))
    env = dagster_env(project, tmp_path / "dagster_home")
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    return env, log


def run(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def materialize(env: dict) -> subprocess.CompletedProcess:
    return run([str(BIN / "dagster"), "asset", "materialize", "-f", str(REPO / "definitions.py"),
                "--select", "*example/synthetic+"], env)


def test_the_blocker_refuses_the_extras(tmp_path):
    """The finder works (else the tests below would prove nothing)."""
    project = make_project(tmp_path / "project", rows=1000)
    env, log = blocked_env(tmp_path, project)
    probe = run([sys.executable, "-c", "import mbi"], env)
    assert probe.returncode != 0 and "No module named 'mbi'" in probe.stderr
    found = run([sys.executable, "-c", "from dp_synth_assets.core import extras; "
                 "print(sorted(f for f in extras.FEATURES if extras.available(f)))"], env)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"


def test_a_default_dataset_runs_its_whole_pipeline_without_the_extras(tmp_path):
    # the bundled example without `report:` (an optional feature): a default dataset, whose
    # pgm fit is numpy's (no mbi) on every estimator choice
    project = make_project(tmp_path / "project", rows=2000, report=None)
    env, log = blocked_env(tmp_path, project)
    done = materialize(env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "RUN_SUCCESS" in done.stdout + done.stderr
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0] > 0
    finally:
        con.close()
    # no warning of JAX's float32 mode (nor anything of JAX) in the run's output
    assert "float32" not in done.stdout + done.stderr
    report = run([sys.executable, "-m", "dp_synth_assets.report", "example"], env, timeout=300)
    assert report.returncode == 0, report.stdout + report.stderr[-3000:]
    assert "synthetic.example" in report.stdout and "FAILED" not in report.stdout
    # nothing imported mbi or JAX (dp-synth only probed them, `extras.available`)
    refused = set(log.read_text().split()) if log.exists() else set()
    assert {"probe:mbi"} <= refused
    assert not {r for r in refused if r.split(":")[1].partition(".")[0] in ("mbi", "jax", "jaxlib")
                and r.startswith("import:")}, refused


@pytest.mark.parametrize("feature, overrides", [
    ("postgres", {"engine": {"type": "postgres", "dsn_env": "PG_DSN"},
                  "source": {"table": "main.example"}, "report": None}),
    ("report", {"report": REPORT}),  # the bundled example's own `report:` block
])
def test_a_dataset_needing_a_missing_extra_is_refused_at_load(tmp_path, feature, overrides):
    project = make_project(tmp_path / "project", rows=1000, **overrides)
    env, _ = blocked_env(tmp_path, project)
    done = materialize(env)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert str(project.datasets) in out  # the user's file
    assert "dataset 'example'" in out
    assert f"`{feature}` extra" in out
    assert f"pip install 'dagster-dp-synth[{feature}]'" in out
    assert "RUN_START" not in out
    # nothing spent: the ledger holds no spend (it may not even exist)
    if project.ledger.exists():
        con = sqlite3.connect(f"file:{project.ledger}?mode=ro", uri=True)
        try:
            tables = [r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]
            for table in tables:
                assert con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == 0, table
        finally:
            con.close()


def test_the_refusal_names_the_component_s_file(monkeypatch):
    """The Component passes its defs.yaml as the origin; the refusal goes through the same
    error prefix (the missing module is injected)."""
    real = extras.importable
    monkeypatch.setattr(extras, "importable", lambda m: m != "matplotlib" and real(m))
    entry = example_entry(report=REPORT)
    origin = "my_project/defs/people/defs.yaml (attributes.datasets)"
    with pytest.raises(RegistryError) as refused:
        parse_registry({"datasets": {"people": entry}}, origin=origin)
    message = str(refused.value)
    assert message.startswith(origin)
    assert "dataset 'people'" in message and "`report` extra" in message
    assert "matplotlib" in message and "pip install 'dagster-dp-synth[report]'" in message
    # with the module back, the same entry loads
    monkeypatch.setattr(extras, "importable", real)
    if extras.available("report"):
        assert parse_registry({"datasets": {"people": entry}}, origin=origin)["people"].report


def test_the_registry_of_extras_is_the_distribution_s(pyproject=REPO / "pyproject.toml"):
    """Every extra named in core/extras.py is an extra of pyproject.toml that requires each of
    its modules' distributions."""
    import re
    import tomllib

    optional = tomllib.loads(Path(pyproject).read_text())["project"].get(
        "optional-dependencies", {})
    distribution = {"mbi": "mbi", "jax": "jax", "jaxlib": "jaxlib", "sklearn": "scikit-learn",
                    "matplotlib": "matplotlib", "psycopg": "psycopg", "sqlglot": "sqlglot",
                    "pyspark": "pyspark", "s3fs": "s3fs"}
    for name, feature in extras.FEATURES.items():
        if feature.extra not in optional:
            pytest.skip(f"pyproject.toml has no `{feature.extra}` extra yet")
        names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in optional[feature.extra]}
        for module in feature.modules:
            assert distribution[module] in names, (name, module, names)


FIT = """
import numpy as np
from dp_synth_assets.core.generate import pgm
from dp_synth_assets.core.measure import Measurement
rng = np.random.default_rng(0)
domain = {"a": 3, "b": 4, "c": 2}
ms = [Measurement(c, rng.random([domain[x] for x in c]) * 100, 1.0, 0.1)
      for c in [("a", "b"), ("b", "c")]]
model = pgm.fit(domain, ms, 500.0, 20, log=print)
print(sorted(pgm.model_marginals(model, [("a", "c")])))
"""


@needs_extra("jax")
def test_the_jax_fit_warns_nothing(tmp_path):
    """mbi's float32 warning (it is imported into a JAX without float64) no longer reaches the
    run's log; any user warning of the fit would fail this process."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_COMPILATION_CACHE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", FIT], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "JAX compiled the fit" in done.stdout
    assert "float32" not in done.stdout + done.stderr
