"""Raw tables with only column kinds declared: budget arithmetic, optional registry entries, and
the acceptance runs on `../shared/datasets` (adult_raw, titanic_raw).

The acceptance tests need the shared datasets, which a fresh clone does not have: they are
skipped, saying so, only when those files are absent.
"""

import logging
import math
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml

from dp_synth_assets.budget import DELTA_EXTRA_SHARE, DatasetBudget
from dp_synth_assets.core.budget import HIGH_RHO, MIN_PREPROCESS_SHARE
from dp_synth_assets.core.budget import BOUNDS_SHARE
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.core.privacy import rho_from_epsilon_delta
from dp_synth_assets.definitions import build_definitions
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import REPO, REPO_DATASETS, example_entry

SHARED = REPO.parent / "shared" / "datasets"
needs_shared = pytest.mark.skipif(
    not (SHARED / "adult_raw" / "adult_raw.csv").exists(),
    reason=f"needs the shared datasets in {SHARED} (present in CI, not in a fresh clone)")


def test_discovery_sets_aside_half_of_each_delta_and_preprocessing_a_tenth_of_rho():
    spec = load_registry(REPO_DATASETS)["example"]
    plain = DatasetBudget.of(spec)  # declared domains: only the density inside wide bins
    assert plain.preprocess == pytest.approx(BOUNDS_SHARE * plain.run_rho)
    assert plain.run_delta_extra == 0
    assert plain.run_rho == pytest.approx(rho_from_epsilon_delta(1.0, 1e-9))
    raw = spec.model_copy(update={"columns": {**spec.columns, "sex": spec.columns["sex"].model_copy(
        update={"categories": None})}})
    budget = DatasetBudget.of(raw)
    assert budget.run_delta_extra == pytest.approx(1e-9 * DELTA_EXTRA_SHARE)
    assert budget.run_rho == pytest.approx(rho_from_epsilon_delta(1.0, 1e-9 * (1 - DELTA_EXTRA_SHARE)))
    # before the noisy count, the share of a table with enough rows at this rho (epsilon 1)
    assert budget.run_rho > HIGH_RHO
    assert budget.preprocess == pytest.approx(MIN_PREPROCESS_SHARE * budget.run_rho)
    total = budget.preprocess + budget.split.total
    assert math.isclose(total, budget.run_rho, rel_tol=1e-12)


def test_optional_dataset_with_an_absent_file_is_skipped_with_a_message(tmp_path, caplog):
    registry = {"datasets": {
        "example": example_entry(),
        "gone": {**example_entry(), "optional": True, "source": {"csv": "no/such/file.csv"}},
    }}
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump(registry))
    with caplog.at_level(logging.WARNING, logger="dp_synth"):
        defs = build_definitions(path, tmp_path / "w.duckdb", tmp_path / "l.sqlite", tmp_path / "p")
    groups = {k.path[0] for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert groups == {"example"}
    assert "dataset 'gone' skipped" in caplog.text and "no/such/file.csv" in caplog.text


def _raw_project(tmp_path: Path, name: str):
    entry = yaml.safe_load(REPO_DATASETS.read_text())["datasets"][name]
    entry["source"] = {"csv": str((REPO / entry["source"]["csv"]).resolve())}
    entry["model"] = {"iterations": 300}
    path = tmp_path / "datasets.yaml"
    # safe_dump sorts the keys: the columns are declared in another order than the source's,
    # and the synthetic table follows the declaration
    path.write_text(yaml.safe_dump({"datasets": {name: entry}}))
    return build_definitions(path, tmp_path / "w.duckdb", tmp_path / "ledger.sqlite", tmp_path / "public")


@pytest.mark.e2e
@needs_shared
@pytest.mark.parametrize("name", ["adult_raw", "titanic_raw"])
def test_raw_table_with_only_kinds_declared_synthesizes_with_the_declared_schema(tmp_path, name):
    defs = _raw_project(tmp_path, name)
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success
    spec = load_registry(tmp_path / "datasets.yaml")[name]
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    synthetic = con.execute(f"DESCRIBE synthetic.{name}").fetchall()
    con.close()
    # the declared names, order and types (the kinds' defaults): nothing sniffed from the CSV
    assert [(r[0], r[1]) for r in synthetic] == [(c, s.sql_type) for c, s in spec.columns.items()]
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["schema"] and checks["domain"] and checks["row_count"]
    spent = PrivacyLedger(tmp_path / "ledger.sqlite").summary(name)
    budget = DatasetBudget.of(load_registry(tmp_path / "datasets.yaml")[name])
    assert math.isclose(spent.spent_rho, budget.run_rho, rel_tol=1e-9)
    assert 0 < spent.spent_delta_extra <= budget.run_delta_extra
