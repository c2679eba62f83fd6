"""The whole pipeline in Dagster over the selection methods and the generators: one run of the
bundled example per case, each case a method with a generator (the engines are paired with
methods rather than crossed with them: the wiring is the same, and every method and every
engine runs once), read by the tests below.

Each case spends exactly its run budget; each method's own mark is in its run (AIM's rounds,
ppsyn's 3-way workload, MST's tree, AbSyn's noise scales), and each engine's (its name on the
model, a synthetic table of the noisy row count, every check passed, in chunks where asked).
The methods' and engines' algorithms: tests/test_select_*.py and tests/test_generate.py.
"""

import json
import math

import dagster as dg
import duckdb
import numpy as np
import pytest

from dp_synth_assets.artifacts import artifacts
from dp_synth_assets.budget import DatasetBudget
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import make_project

# case -> (source rows, dataset overrides)
CASES = {
    "absyn-parallel_pgm-chunked": (3000, {"method": "absyn", "generator": "parallel_pgm",
                                          "model": {"iterations": 200, "chunk_rows": 1000}}),
    "mst-gum": (3000, {"method": "mst", "generator": "gum"}),
    "aim": (2000, {"method": "aim", "model": {"iterations": 200}}),
    "ppsyn": (2000, {"method": "ppsyn", "model": {"iterations": 200}}),
}
ENGINES = {"absyn-parallel_pgm-chunked": "parallel_pgm", "mst-gum": "gum"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """`runs(case)`: (project, defs, result) of the case's one run (made on first use). The
    checks of `synthetic` run in the engines' cases, whose tests read them; the other cases
    (a method with the default generator) run the assets alone."""
    done = {}

    def run(case: str):
        if case not in done:
            rows, overrides = CASES[case]
            project = make_project(tmp_path_factory.mktemp(case), rows=rows, **overrides)
            defs = project.defs_fn()
            selection = dg.AssetSelection.all()
            if case not in ENGINES:
                selection = selection.without_checks()
            result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                                    instance=dg.DagsterInstance.ephemeral(),
                                    selection=selection, raise_on_error=False)
            done[case] = project, defs, result
        return done[case]

    return run


def published(result, stage: str) -> dict:
    events = [e for e in result.get_asset_materialization_events()
              if e.asset_key == dg.AssetKey(["example", stage])]
    return {k: v.value for k, v in events[0].materialization.metadata.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_each_case_runs_and_spends_exactly_the_run_budget(runs, case):
    project, _, result = runs(case)
    assert result.success
    spec = load_registry(project.datasets)["example"]
    spent = PrivacyLedger(project.ledger).summary("example").spent_rho
    assert math.isclose(spent, DatasetBudget.of(spec).run_rho, rel_tol=1e-9)
    assert published(result, "selection")["method"] == CASES[case][1]["method"]


def test_aim_measures_its_rounds_beside_the_one_way_marginals(runs):
    project, defs, _ = runs("aim")
    spec = load_registry(project.datasets)["example"]
    found = list(artifacts(defs.resources["warehouse"], "example").measurements().measurements)
    assert len(found) > len(spec.columns)  # the 1-way marginals and the rounds' measurements


def test_ppsyn_counts_its_3_way_workload_in_the_marginals_stage(runs):
    project, _, _ = runs("ppsyn")
    # the marginals stage computed the method's 3-way workload, so no fallback to pairs
    chosen = json.loads((project.public / "example" / "selection.json").read_text())
    assert chosen["details"]["workload_order"] == 3, chosen["details"].get("workload_fallback")


def test_mst_selects_a_spanning_tree(runs):
    project, _, result = runs("mst-gum")
    spec = load_registry(project.datasets)["example"]
    assert published(result, "selection")["selected_count"] == len(spec.columns) - 1


def test_absyn_records_the_noise_scale_each_rho_calls_for(runs):
    _, defs, _ = runs("absyn-parallel_pgm-chunked")
    found = list(artifacts(defs.resources["warehouse"], "example").measurements().measurements)
    assert found and all(math.isclose(m.sigma, math.sqrt(1 / (2 * m.rho)), rel_tol=1e-12)
                         for m in found)


@pytest.mark.parametrize("case", list(ENGINES))
def test_each_engine_synthesizes_the_noisy_row_count_and_every_check_passes(runs, case):
    project, _, result = runs(case)
    assert result.success
    assert published(result, "model")["generator"] == ENGINES[case]
    measurements = json.loads((project.public / "example" / "measurements.json").read_text())
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        rows = con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0]
    assert rows == round(measurements["noisy_total"])
    if "chunked" in case:  # 1,000-row chunks on a ~2,400-row table: three chunks, one write
        assert rows > 2000
    # every check (schema, domain, row count, nulls, 1-way TVD within its noise) passed
    checks = result.get_asset_check_evaluations()
    assert {c.check_name for c in checks} >= {"schema", "domain", "one_way_tvd"}
    assert all(c.passed for c in checks), [(c.check_name, c.passed) for c in checks]


def test_a_failing_chunk_leaves_the_previous_synthetic_table(runs):
    from dp_synth_assets.core.domain import EncodingPlan
    from dp_synth_assets.core.synthesize import write_synthetic

    project, _, result = runs("absyn-parallel_pgm-chunked")
    assert result.success
    plan = EncodingPlan.from_json((project.public / "example" / "plan.json").read_text())
    parquet = project.public / "example" / "synthetic.parquet"
    with duckdb.connect(str(project.warehouse)) as con:
        before = con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0]
        good = {e.column: np.zeros(10, dtype=np.int64) for e in plan.encodings}
        bad = {e.column: np.full(10, e.size + 5, dtype=np.int64) for e in plan.encodings}
        with pytest.raises(ValueError, match="codes outside"):
            write_synthetic(con, plan, iter([good, bad]), np.random.default_rng(0),
                            "synthetic.example", str(parquet))
        assert con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0] == before
