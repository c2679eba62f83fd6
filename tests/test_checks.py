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
        "schema", "constraints", "domain", "row_count"}


def test_importing_the_checks_and_evaluation_loads_neither_dagster_nor_gx():
    code = ("import sys, dp_synth_assets.checks.suites, dp_synth_assets.evaluation.report; "
            "loaded = {'dagster', 'great_expectations'} & set(sys.modules); "
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_a_failed_blocking_check_fails_the_run_after_synthetic_and_skips_the_report(
        tmp_path, monkeypatch):
    """The checks run inside the dataset's stage op, right after `synthetic`: a blocking check
    that fails (injected) leaves `synthetic` materialized, fails the step as Dagster does for
    blocking checks, and the stage after it (the owner's report) does not run."""
    import dagster as dg

    from dp_synth_assets.checks import asset_checks
    from tests.helpers import EXAMPLE_REPORT, make_project

    def failing_schema(*args, **kwargs):
        yield dg.AssetCheckResult(asset_key=dg.AssetKey(["example", "synthetic"]),
                                  check_name="schema", passed=False,
                                  severity=dg.AssetCheckSeverity.ERROR)
        for name in list(CHECKS)[1:]:
            yield dg.AssetCheckResult(asset_key=dg.AssetKey(["example", "synthetic"]),
                                      check_name=name, passed=True)

    monkeypatch.setattr(asset_checks, "run_checks", failing_schema)
    project = make_project(tmp_path, rows=500, report=EXAMPLE_REPORT)
    defs = project.defs_fn()
    result = dg.materialize([*defs.assets], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    materialized = {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}
    assert "synthetic" in materialized and "utility_report" not in materialized
    verdicts = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert verdicts == {name: name != "schema" for name in CHECKS}
