"""The whole pipeline, for real: Dagster runs on a DuckDB file, the ledger, GX checks.

One project (3,137 source rows) is synthesized once; the tests below read that run, then
re-materialize public assets, then exhaust the budget. They run in file order. Each check's
verdict on a corrupted table: tests/test_check_suites.py.
"""

import hashlib
import json
import math
import re

import dagster as dg
import duckdb
import pandas as pd
import pytest

from dp_synth_assets.budget import DatasetBudget
from dp_synth_assets.core.preprocess import needs_density
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.core.stages import cover_columns
from dp_synth_assets.artifacts import artifacts
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import EXAMPLE_REPORT, make_project, stage_logs, without_random_ids

SOURCE_ROWS = 3137
# declared (public) rules the source keeps and an unconstrained model breaks now and then: the
# run honours them, and the constraints check counts none broken (tests/test_constraints.py)
CONSTRAINTS = ["hours_per_week <= 80", "income >= 1000", "occupation != 'Armed-Forces'",
               "signup_date >= '2015-01-08'"]
STAGES = ["source", "preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]


def materialize(defs, instance, stages=None, checks: bool = True):
    """`stages` (default: every asset), with the checks of `synthetic` or without them."""
    selection = dg.AssetSelection.all() if stages is None else dg.AssetSelection.assets(
        *(dg.AssetKey(["example", s]) for s in stages))
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=instance, raise_on_error=False,
                          selection=selection if checks else selection.without_checks())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # limit 1.1 with a run of 1.0: the first run fits, a second one cannot (zCDP composes
    # two epsilon-1 runs to about epsilon 1.5 at delta 1e-9)
    project = make_project(tmp_path_factory.mktemp("pipeline"), rows=SOURCE_ROWS, report=EXAMPLE_REPORT,
                           privacy={"epsilon": 1.0, "delta": 1e-9,
                                    "limit": {"epsilon": 1.1, "delta": 1e-9}},
                           constraints=CONSTRAINTS)
    instance = dg.DagsterInstance.ephemeral()
    defs = project.defs_fn()
    result = materialize(defs, instance)
    assert result.success
    return project, defs, instance, result


def ledger_of(project) -> PrivacyLedger:
    return PrivacyLedger(project.ledger)


def spec_of(project):
    return load_registry(project.datasets)["example"]


def test_end_to_end_writes_a_synthetic_twin_with_the_source_schema(run):
    project, defs, _, result = run
    con = duckdb.connect(str(project.warehouse), read_only=True)
    source = con.execute("DESCRIBE main.example").fetchall()
    synthetic = con.execute("DESCRIBE synthetic.example").fetchall()
    rows = con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0]
    con.close()
    declared = [(name, c.sql_type) for name, c in spec_of(project).columns.items()]
    assert [(r[0], r[1]) for r in synthetic] == declared  # the spec's names, order and types
    assert declared == [(r[0], r[1]) for r in source]  # the example declares its source's types
    warehouse = defs.resources["warehouse"]
    noisy_total = artifacts(warehouse, "example").measurements().noisy_total
    assert rows == round(noisy_total)  # rows: same is the noisy estimate
    parquet = pd.read_parquet(project.public / "example" / "synthetic.parquet")
    assert len(parquet) == rows and list(parquet.columns) == [r[0] for r in source]
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"schema": True, "constraints": True, "domain": True, "row_count": True,
                      "null_fraction": True, "one_way_tvd": True, "marginal_tvd": True,
                      "duplicates": True}
    constraints = next(e for e in result.get_asset_check_evaluations()
                       if e.check_name == "constraints").metadata
    assert constraints["violation_share"].value == {c: 0.0 for c in CONSTRAINTS}
    assert constraints["max_violation_share"].value == 0.0
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        assert con.execute(  # the table says so too
            "SELECT count(*) FILTER (WHERE hours_per_week > 80 OR income < 1000 OR "
            "occupation = 'Armed-Forces' OR signup_date < DATE '2015-01-08') "
            "FROM synthetic.example").fetchone()[0] == 0
    for name, passed in checks.items():  # the stored GX results say the same
        stored = json.loads((project.public / "example" / "checks" / f"{name}.json").read_text())
        assert stored["success"] is passed
    index = (project.public / "example" / "data_docs" / "index.html").read_text()
    for name in [*checks, "columns"]:  # GX Data Docs list every suite (schema has two)
        assert f"example_{name}" in index, name
    materialized = {tuple(e.asset_key.path) for e in result.get_asset_materialization_events()}
    assert materialized == {("example", s) for s in STAGES[1:]} | {("example", "utility_report")}


def test_spend_equals_the_run_budget_and_the_sum_of_the_mechanisms_rho(run):
    project, defs, _, result = run
    budget = DatasetBudget.of(spec_of(project))
    events = [e for e in ledger_of(project).events("example") if e["run_id"] == result.run_id]
    charges = [e for e in events if e["kind"] == "charge"]
    assert math.isclose(sum(e["rho"] for e in charges), budget.run_rho, rel_tol=1e-9)
    store = artifacts(defs.resources["warehouse"], "example")
    measurements = store.measurements().measurements
    # one charge per marginal drawn (the selection's 1-way marginals, which `auto` draws in two
    # steps and merges when it picks absyn, and in `measurements` its cliques plus the 1-way
    # marginal of each column they leave uncovered, or, when absyn kept no pair, every column's
    # 1-way marginal again), one for all InDif scores; the independence
    # guard then keeps what beats the independent model (it spends nothing), so the published
    # measurements can be fewer; in `preprocessed`, one density histogram per column whose
    # declared bins can hold more than one value
    chosen = store.selection()
    plan = store.plan()
    assert chosen.method == "auto" and chosen.details["picked"] == "absyn"
    kept_any = bool(chosen.cliques) and sum(chosen.budgets.values()) > 0
    measured = len(cover_columns(chosen, plan.domain).cliques) if kept_any else len(plan.domain)
    drawn = 2 * len(chosen.one_way) + len(chosen.measured) + measured
    densities = sum(needs_density(c) for c in spec_of(project).columns.values())
    assert densities > 0
    assert len([e for e in charges if e["stage"] == "preprocessed"]) == densities
    assert len(charges) == drawn + 1 + densities
    assert len(measurements) <= drawn
    for m in measurements:  # every recorded noise scale is the one its rho calls for
        assert math.isclose(m.sigma, math.sqrt(1 / (2 * m.rho)), rel_tol=1e-12)
    assert [e["kind"] for e in events][0] == "reserve" and events[-1]["kind"] == "release"
    assert events[-1]["rho"] == pytest.approx(0.0, abs=1e-12)
    assert {e["stage"] for e in charges} == {"preprocessed", "selection", "measurements"}


def test_public_outputs_contain_no_exact_statistic_of_the_source(run):
    project, defs, instance, result = run
    con = duckdb.connect(str(project.warehouse), read_only=True)
    exact = con.execute(
        "SELECT count(*), min(income), max(income), avg(income), avg(age), sum(hours_per_week) "
        "FROM main.example").fetchone()
    con.close()
    assert exact[0] == SOURCE_ROWS
    texts = []
    # every event of the run, the owner-only utility report's too (its figures stay in files in
    # the private zone; the event log is public)
    assert stage_logs(instance, result.run_id, "example", "utility_report")
    for event in instance.all_logs(result.run_id):
        texts.append(event.message or "")
        entry = event.dagster_event
        if entry is not None and entry.event_specific_data is not None:
            texts.append(repr(entry.event_specific_data))
    for path in (project.public / "example").rglob("*.json"):
        if path.name in ("selection.json", "measurements.json"):
            # the DP release itself: noisy counts may equal an exact count by chance
            data = json.loads(path.read_text())
            data.pop("measurements", None), data.pop("one_way", None)
            texts.append(json.dumps(data))
        else:
            texts.append(path.read_text())
    pages = [p for p in (project.public / "example" / "data_docs").rglob("*.html")
             if "static" not in p.parts]
    assert pages  # the GX Data Docs site is public too: scan its pages
    texts += [p.read_text() for p in pages]
    blob = without_random_ids("\n".join(texts))  # the digits of a UUID state no value
    numbers = {float(t) for t in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", blob)}
    for value in exact:
        assert not any(math.isclose(float(value), n, rel_tol=1e-12) for n in numbers), value
    # the report's split: the exact held-out count (the training count is what `rows: same`
    # estimates with noise, so a public number may equal it by chance) in the report's events
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        holdout = con.execute("SELECT count(*) FROM private.example_encoded_holdout").fetchone()[0]
    report_events = stage_logs(instance, result.run_id, "example", "utility_report")
    report_blob = "\n".join([e.message or "" for e in report_events] + [
        repr(e.dagster_event.event_specific_data) for e in report_events
        if e.dagster_event is not None and e.dagster_event.event_specific_data is not None])
    # numbers as the events state them: not the digits of a run id or of a temporary path
    report_blob = without_random_ids(report_blob)
    report_blob = re.sub(r"(?:/[^\s'\"/]+)+", " ", report_blob)
    report_numbers = {float(t) for t in re.findall(r"-?\d+(?:\.\d+)?", report_blob)}
    assert 0 < holdout and float(holdout) not in report_numbers, [
        line for line in report_blob.splitlines() if str(holdout) in line]
    assert float(SOURCE_ROWS - holdout) not in report_numbers
    # private-zone assets publish shapes only
    for event in result.get_asset_materialization_events():
        if event.asset_key.path[1] in ("preprocessed", "marginals"):
            keys = {k for k in event.materialization.metadata if not k.startswith("privacy/")}
            assert keys <= {"encoding_plan", "domain", "view", "plan_path", "table", "marginals",
                            "cells"}, keys
        if event.asset_key.path[1] == "utility_report":  # where its files are, nothing else
            assert all(isinstance(v, dg.PathMetadataValue)
                       for v in event.materialization.metadata.values())


def test_rematerializing_public_assets_spends_nothing(run):
    project, defs, instance, _ = run
    before = ledger_of(project).events("example")
    digest = hashlib.sha256((project.public / "example" / "measurements.json").read_bytes()).hexdigest()
    result = materialize(defs, instance, ["model", "synthetic"], checks=False)
    assert result.success
    assert ledger_of(project).events("example") == before
    assert hashlib.sha256((project.public / "example" / "measurements.json").read_bytes()).hexdigest() == digest


def test_refuses_a_run_beyond_the_limit_spends_nothing_and_keeps_earlier_outputs(run):
    project, defs, instance, _ = run
    ledger = ledger_of(project)
    spent = ledger.summary("example").spent_rho
    outputs = {p: p.read_bytes() for p in (project.public / "example").glob("*.*")}
    result = materialize(defs, instance)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    for part in ("example", "epsilon", "rho", "privacy.limit.epsilon"):
        assert part in message
    assert ledger.summary("example").spent_rho == spent
    assert ledger.summary("example").reserved_rho == 0
    assert {p: p.read_bytes() for p in outputs} == outputs


def test_a_check_with_nothing_to_check_passes_and_says_so(run):
    from dp_synth_assets.checks.asset_checks import asset_check_result
    from dp_synth_assets.checks.suites import expectations_result

    project, defs, _, _ = run
    result = asset_check_result(
        expectations_result("null_fraction", pd.DataFrame({"a": [1]}), [], "example", {}),
        defs.resources["warehouse"], "example")
    assert result.passed
    stored = json.loads((project.public / "example" / "checks" / "null_fraction.json").read_text())
    assert stored["success"] is True and stored["note"] == "nothing to check"


def test_the_long_private_stages_log_their_progress_in_counts(run):
    """`preprocessed` and `marginals` say, in the run's log, how much of their work is done
    (counts of the plan's mechanisms, marginals and queries; no time), ending with all of it."""
    _, _, instance, result = run
    logged = {stage: [r.user_message for r in stage_logs(instance, result.run_id, "example",
                                                         stage)]
              for stage in ("preprocessed", "marginals")}
    pre = [m for m in logged["preprocessed"] if m.startswith("preprocessed: ")]
    assert pre[0].startswith("preprocessed: scan 1/1: the exact aggregates of "), pre
    total = int(re.search(r"of (\d+) mechanisms", pre[0]).group(1))
    assert pre[-1] == f"preprocessed: {total}/{total} mechanisms run", pre
    counted = [m for m in logged["marginals"] if m.startswith("marginals: ")]
    start = re.fullmatch(r"marginals: counting (\d+) marginals in (\d+) queries", counted[0])
    assert start, counted
    marginals, queries = start.groups()
    assert counted[-1] == (f"marginals: {marginals}/{marginals} marginals counted "
                           f"({queries}/{queries} queries)"), counted
