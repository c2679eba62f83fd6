"""The checks package: each Dagster check described by its own function, Dagster and GX loaded
only when needed."""

import subprocess
import sys

from dp_synth_assets.checks import CHECKS, synthetic_check_specs
from tests.helpers import REPO


def test_each_check_is_described_by_the_first_line_of_its_own_function():
    specs = {s.name: s for s in synthetic_check_specs("example")}
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
