"""The metadata a run publishes for people and for Dagster's UI: the standard table metadata and
the budget on `synthetic`, epsilons rounded for display, the checks' numbers, and the report's
bin labels. One real run of the example (2,000 rows), then a second one (the budget figures
move), then unit tests."""

import math

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.budget import DatasetBudget, budget_metadata, composition_note, shown
from dp_synth_assets.checks.suites import worst
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.core.domain import Encoding, EncodingPlan, encode_expression
from dp_synth_assets.core.privacy import Spend, epsilon_from_rho
from dp_synth_assets.core.sql import ident
from dp_synth_assets.evaluation.report import bin_ranges, code_labels
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import make_project

STAGES = ["source", "preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]
PRIVACY = {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 3.0, "delta": 1e-9}}


def materialize(defs, instance, checks: bool = True):
    """The stages, with the checks of `synthetic` or without them (`checks`)."""
    selection = dg.AssetSelection.assets(*(dg.AssetKey(["example", s]) for s in STAGES))
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=instance, raise_on_error=False,
                          selection=selection if checks else selection.without_checks())


def metadata_of(result, stage: str) -> dict:
    event = next(e for e in result.get_asset_materialization_events()
                 if e.asset_key == dg.AssetKey(["example", stage]))
    return event.materialization.metadata


def significant_digits(x: float) -> int:
    return len(f"{x:.15g}".replace(".", "").replace("-", "").lstrip("0").rstrip("0") or "0")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("metadata"), rows=2000, privacy=PRIVACY)
    instance = dg.DagsterInstance.ephemeral()
    defs = project.defs_fn()
    first = materialize(defs, instance, checks=False)  # the checks' figures: `second`'s
    assert first.success
    spent_after_first = PrivacyLedger(project.ledger).summary("example").spent_rho
    second = materialize(defs, instance)
    assert second.success
    spec = load_registry(project.datasets)["example"]
    return project, spec, first, spent_after_first, second


def test_synthetic_carries_the_standard_table_metadata_of_the_written_table(runs):
    project, spec, _, _, result = runs
    metadata = metadata_of(result, "synthetic")
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        described = con.execute("DESCRIBE synthetic.example").fetchall()
        # the table name is fully qualified: it resolves as it stands
        rows = con.execute(
            f"SELECT count(*) FROM {metadata['dagster/table_name'].value}").fetchone()[0]
    assert metadata["dagster/table_name"].value == "warehouse.synthetic.example"
    assert isinstance(metadata["dagster/row_count"], dg.IntMetadataValue)
    assert metadata["dagster/row_count"].value == rows == metadata["rows"].value
    schema = metadata["dagster/column_schema"].value
    # the declared columns and SQL types, in declaration order: what DESCRIBE finds
    assert [(c.name, c.type) for c in schema.columns] == [
        (name, c.sql_type) for name, c in spec.columns.items()] == [(r[0], r[1]) for r in described]
    assert [c.constraints.nullable for c in schema.columns] == [
        c.is_nullable for c in spec.columns.values()]
    assert metadata["dagster/storage_kind"].value == "duckdb"


def test_synthetic_carries_the_budget_after_the_run_as_plottable_numbers(runs):
    project, spec, first, spent_after_first, second = runs
    budget = DatasetBudget.of(spec)
    summary = PrivacyLedger(project.ledger).summary("example")
    assert summary.reserved_rho == 0
    for result, spent in ((first, spent_after_first), (second, summary.spent_rho)):
        metadata = metadata_of(result, "synthetic")
        assert metadata["privacy/run_epsilon"].value == 1.0
        assert metadata["privacy/run_delta"].value == 1e-9
        share = metadata["privacy/budget_used_share"]
        assert isinstance(share, dg.FloatMetadataValue) and 0 <= share.value <= 1
        assert share.value == pytest.approx(spent / budget.limit_rho, rel=1e-12)
        left = metadata["privacy/runs_left"]
        assert isinstance(left, dg.IntMetadataValue)
        # closed form: whole runs of run_rho that still fit under the limit
        assert left.value == math.floor((budget.limit_rho - spent) / budget.run_rho + 1e-9)
        remaining = epsilon_from_rho(budget.limit_rho - spent, 1e-9)
        assert metadata["privacy/epsilon_remaining"].value == float(f"{remaining:.3g}")
        assert metadata["privacy/epsilon_limit"].value == 3.0
        assert "rho" in metadata["privacy/composition"].value
    # each run spends its whole run budget: the share grows by run_rho / limit_rho, one run fewer
    first_md, second_md = metadata_of(first, "synthetic"), metadata_of(second, "synthetic")
    assert spent_after_first == pytest.approx(budget.run_rho, rel=1e-9)
    assert second_md["privacy/budget_used_share"].value == pytest.approx(
        2 * first_md["privacy/budget_used_share"].value, rel=1e-9)
    assert second_md["privacy/runs_left"].value == first_md["privacy/runs_left"].value - 1


def test_every_published_epsilon_is_rounded_for_display_and_rho_is_exact(runs):
    _, spec, _, _, result = runs
    budget = DatasetBudget.of(spec)
    for stage in ("selection", "measurements", "synthetic"):
        metadata = metadata_of(result, stage)
        epsilons = {k: v.value for k, v in metadata.items() if k.startswith("privacy/epsilon_")}
        assert {"privacy/epsilon_spent", "privacy/epsilon_remaining",
                "privacy/epsilon_limit"} <= set(epsilons), stage
        assert all(significant_digits(v) <= 3 for v in epsilons.values()), (stage, epsilons)
        assert epsilons["privacy/epsilon_limit"] == 3.0
    # the rho figures are exact: they are what the ledger adds up (two whole runs by now)
    assert metadata_of(result, "synthetic")["privacy/rho_spent"].value == pytest.approx(
        2 * budget.run_rho, rel=1e-12)


def test_each_check_publishes_its_figures_as_numbers(runs):
    _, _, _, _, result = runs
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(checks) >= {"row_count", "null_fraction", "one_way_tvd", "marginal_tvd",
                           "duplicates"}
    md = {name: e.metadata for name, e in checks.items()}
    assert isinstance(md["row_count"]["rows"], dg.IntMetadataValue)
    assert md["row_count"]["rows"].value == md["row_count"]["requested_rows"].value
    for name in ("one_way_tvd", "marginal_tvd"):
        records = md[name]["tvd"].value
        if not records:  # a selection may measure no pair on a small table
            assert "max_tvd" not in md[name]
            continue
        top = max(records, key=lambda r: r["tvd"])
        for key in ("max_tvd", "max_tvd_tolerance", "max_tvd_ratio"):
            assert isinstance(md[name][key], dg.FloatMetadataValue), (name, key)
        assert md[name]["max_tvd"].value == top["tvd"]
        assert md[name]["max_tvd_tolerance"].value == top["tolerance"]
        assert md[name]["max_tvd_ratio"].value == pytest.approx(
            max(r["tvd"] / r["tolerance"] for r in records), abs=1e-5)
        assert (md[name]["max_tvd_ratio"].value <= 1) == checks[name].passed
    nulls = md["null_fraction"]
    assert isinstance(nulls["max_null_gap"], dg.FloatMetadataValue)
    assert isinstance(nulls["max_null_gap_tolerance"], dg.FloatMetadataValue)
    assert 0 <= nulls["max_null_gap"].value <= nulls["max_null_gap_tolerance"].value
    dup = md["duplicates"]
    assert isinstance(dup["duplicate_share"], dg.FloatMetadataValue)
    assert isinstance(dup["allowed"], dg.FloatMetadataValue)
    assert 0 <= dup["duplicate_share"].value <= dup["allowed"].value


# ---- units ---------------------------------------------------------------------------------------


def test_shown_keeps_three_significant_digits():
    assert shown(9.999999999999998) == 10.0
    assert shown(0.930421) == 0.93
    assert shown(0.0123456) == 0.0123
    assert shown(123.456) == 123.0
    assert shown(0.0) == 0.0
    assert "rho" in composition_note(1e-9) and "1e-09" in composition_note(1e-9)


def test_budget_metadata_counts_open_reservations_in_runs_left_but_not_in_the_share(tmp_path):
    # limit rho 1.0, run rho 0.25: one run spent, another holds its reservation
    budget = DatasetBudget(run_rho=0.25, limit_rho=1.0, delta=1e-9, run_delta_extra=0.0,
                           limit_delta_extra=0.0, preprocess=0.0, split=None)
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite")
    ledger.reserve("d", "run1", 0.25, 1.0, delta=1e-9)
    ledger.charge("d", "run1", "measurements", Spend("gaussian", 0.25))
    ledger.release("d", "run1")
    ledger.reserve("d", "run2", 0.25, 1.0, delta=1e-9)
    md = budget_metadata(ledger.summary("d"), budget, 1.0, 1e-9)
    assert md["privacy/budget_used_share"].value == 0.25
    assert md["privacy/runs_left"].value == 2  # 1.0 - 0.25 spent - 0.25 reserved = 2 runs
    assert md["privacy/rho_spent"].value == 0.25 and md["privacy/rho_limit"].value == 1.0
    assert md["privacy/runs_spent"].value == 1  # run2 holds a reservation but charged nothing
    assert md["privacy/epsilon_remaining"].value == shown(epsilon_from_rho(0.5, 1e-9))


def test_worst_is_the_largest_value_with_its_tolerance_and_the_largest_ratio():
    records = [{"tvd": 0.05, "tolerance": 0.2}, {"tvd": 0.04, "tolerance": 0.05},
               {"tvd": 0.01, "tolerance": 0.0}]
    assert worst(records, "tvd", "max_tvd") == {
        "max_tvd": 0.05, "max_tvd_tolerance": 0.2, "max_tvd_ratio": 0.8}
    assert worst([], "tvd", "max_tvd") == {}


def plan_with_known_edges() -> EncodingPlan:
    return EncodingPlan((
        Encoding("age", "integer", "BIGINT", 9, low=17.0, high=90.0, bins=8, integer_bins=True,
                 nullable=True),
        Encoding("hours", "integer", "BIGINT", 3, low=0.0, high=100.0, bins=3,
                 edges=(0.0, 10.5, 50.0, 100.0), integer_bins=True),
        Encoding("signup", "datetime", "DATE", 3, low=0.0, high=89.0, bins=3, integer_bins=True),
        Encoding("income", "float", "DOUBLE", 4, low=0.0, high=1000.0, bins=4),
        Encoding("score", "float", "DOUBLE", 3, low=0.0, high=1.0, bins=3,
                 edges=(0.0, 0.25, 0.3, 1.0)),
        Encoding("seen", "datetime", "TIMESTAMP", 2, low=0.0, high=1.0, bins=2),
        Encoding("sex", "categorical", "VARCHAR", 3, categories=("F", "M"), other_label="other"),
    ))


def test_code_labels_name_numeric_bins_by_their_value_ranges():
    labels = code_labels(plan_with_known_edges())
    assert labels["age"] == ["17–26", "27–35", "36–44", "45–53", "54–63", "64–72", "73–81",
                             "82–90", "NULL"]
    assert labels["hours"] == ["0–10", "11–49", "50–100"]
    assert labels["signup"] == ["1970-01-01–1970-01-30", "1970-01-31–1970-03-01",
                                "1970-03-02–1970-03-31"]
    assert labels["income"] == ["0–250", "250–500", "500–750", "750–1000"]
    assert labels["score"] == ["0.000–0.250", "0.250–0.300", "0.300–1.000"]
    assert labels["seen"] == ["1970-01-01 00:00–1970-01-01 12:00",
                              "1970-01-01 12:00–1970-01-02 00:00"]
    assert labels["sex"] == ["F", "M", "other"]


@pytest.mark.parametrize("column", ["age", "hours", "signup"])
def test_integer_bin_ranges_hold_exactly_the_integers_the_encoding_puts_in_them(column):
    e = plan_with_known_edges()[column]
    values = np.arange(int(e.low), int(e.high) + 1)
    frame = pd.DataFrame({column: values if e.kind == "integer"
                          else pd.to_datetime(values, unit="D").date})
    with duckdb.connect() as con:
        con.register("f", frame)
        codes = con.execute(f"SELECT {encode_expression(e)} AS {ident(column)} FROM f"
                            ).fetchnumpy()[column]
    for k, (first, last) in enumerate(bin_ranges(e)):
        assert list(values[codes == k]) == list(range(int(first), int(last) + 1)), k
