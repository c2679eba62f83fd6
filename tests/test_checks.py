"""The checks package: each Dagster check described by its own function, Dagster and GX loaded
only when needed."""

import subprocess
import sys

from dp_synth_assets.checks import CHECKS, build_synthetic_checks
from dp_synth_assets.core.config import load_registry
from tests.helpers import REPO, make_project


def test_each_check_is_described_by_the_first_line_of_its_own_function(tmp_path):
    project = make_project(tmp_path, rows=100)
    spec = load_registry(project.datasets)["example"]
    specs = {s.name: s for s in build_synthetic_checks("example", spec).check_specs}
    assert list(specs) == list(CHECKS)
    for name, check in CHECKS.items():
        assert specs[name].description == check.run.__doc__.strip().splitlines()[0]
        assert specs[name].blocking == (name in ("schema", "domain"))
    assert len({s.description for s in specs.values()}) == len(specs)
    assert {n for n, c in CHECKS.items() if c.severity == "ERROR"} == {
        "schema", "domain", "row_count"}


def test_importing_the_checks_and_evaluation_loads_neither_dagster_nor_gx():
    code = ("import sys, dp_synth_assets.checks.suites, dp_synth_assets.evaluation.report; "
            "loaded = {'dagster', 'great_expectations'} & set(sys.modules); "
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
