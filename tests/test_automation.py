"""The automation of docs/decisions/0006-budget-aware-automation.md:
per-dataset jobs, the budget-aware schedule and the
source-change sensor, evaluated as Dagster evaluates them (real definitions, warehouse, ledger)."""

import json
import time
from datetime import datetime, timezone

import dagster as dg
import duckdb
import pytest

from dp_synth_assets.budget import DatasetBudget
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.core.privacy import Spend
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import EXAMPLE_REPORT, make_project, run_sql

pytestmark = pytest.mark.filterwarnings(
    "ignore:Starting in dagster 1.11:UserWarning",  # get_sensor_def / get_schedule_def
    "ignore::dagster.BetaWarning",
)

DATASET = "example"
JOB = "example_synthesis"
SENSOR = "example_source_change"
BUDGET_SENSOR = "dp_synth_budget"
SCHEDULE = "example_schedule"
STAGES = ["source", "preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]


def change_source(project, rows: int = 5) -> None:
    """Append copies of a few rows to the source table, as an upstream load would."""
    con = duckdb.connect(str(project.warehouse))
    try:
        con.execute(f"INSERT INTO main.example SELECT * FROM main.example LIMIT {rows}")
    finally:
        con.close()


def budget_of(project) -> DatasetBudget:
    return DatasetBudget.of(load_registry(project.datasets)[DATASET])


def exhaust_budget(project) -> None:
    """Spend all of the dataset's limit but half a run, through the ledger itself."""
    budget = budget_of(project)
    ledger = project.defs_fn().resources["ledger"].ledger()  # keyed by the dataset's unit
    rho = budget.limit_rho - budget.run_rho / 2
    ledger.reserve(DATASET, "earlier-runs", rho, budget.limit_rho, delta=budget.delta)
    ledger.charge(DATASET, "earlier-runs", "measurements", Spend("gaussian", rho))
    ledger.release(DATASET, "earlier-runs")
    assert not ledger.can_cover(DATASET, budget.run_rho, budget.limit_rho)


def tick(sensor, instance, defs, cursor=None):
    """One sensor evaluation, as the daemon runs it: the result carries the skip message and
    the cursor the sensor wrote."""
    # `with`: the context opens its own instance from the ref, which must be closed again
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources,
                                 definitions=defs) as context:
        return sensor.evaluate_tick(context)


@pytest.fixture
def instance():
    """A throwaway instance, also the current one while the test runs (Dagster reads it when it
    loads a repository)."""
    with dg.instance_for_test() as instance:
        yield instance


# ---- the source-change sensor --------------------------------------------------------------------


def test_sensor_baseline_unchanged_change_and_min_interval(tmp_path, instance):
    project = make_project(tmp_path, rows=1000, min_interval="1h", report=EXAMPLE_REPORT)
    defs = project.defs_fn()
    sensor = defs.get_sensor_def(SENSOR)
    # no job of its own: the sensor targets the dataset's stages, run in the implicit asset job
    stages = {dg.AssetKey([DATASET, s]) for s in [*STAGES[1:], "utility_report"]}
    assert sensor.asset_selection.resolve(defs.resolve_asset_graph()) == stages
    assert not defs.get_repository_def().has_job(JOB)

    first = tick(sensor, instance, defs)
    assert first.run_requests == []
    assert "first evaluation" in first.skip_message
    baseline = json.loads(first.cursor)
    assert baseline["requested_at"] == 0 and len(baseline["version"]) == 32

    same = tick(sensor, instance, defs, first.cursor)
    assert same.run_requests == []
    assert "unchanged" in same.skip_message
    assert json.loads(same.cursor) == baseline

    change_source(project)
    before = time.time()
    changed = tick(sensor, instance, defs, same.cursor)
    assert changed.skip_message is None
    [request] = changed.run_requests
    assert request.job_name == "__ASSET_JOB" and set(request.asset_selection) == stages
    assert {k.asset_key for k in request.asset_check_keys} == {dg.AssetKey([DATASET, "synthetic"])}
    assert request.tags["dp_synth/trigger"] == "source_change"
    written = json.loads(changed.cursor)
    assert written["version"] != baseline["version"]
    assert request.run_key.startswith(f"{DATASET}-{written['version']}-")
    assert before <= written["requested_at"] <= time.time()

    # another change right after: min_interval (1h) holds it back, and the cursor stays put
    change_source(project)
    held = tick(sensor, instance, defs, changed.cursor)
    assert held.run_requests == []
    assert "min_interval" in held.skip_message and "1h" in held.skip_message
    assert json.loads(held.cursor) == written

    # inside min_interval the source is not even read: a table it cannot read is no error yet
    run_sql(project, "ALTER TABLE main.example RENAME TO example_away")
    unread = tick(sensor, instance, defs, changed.cursor)
    assert "min_interval" in unread.skip_message and "not read" in unread.skip_message
    run_sql(project, "ALTER TABLE main.example_away RENAME TO example")

    # once min_interval has passed (simulated by an older requested_at), the change is requested
    old = json.dumps({**written, "requested_at": written["requested_at"] - 3601})
    later = tick(sensor, instance, defs, old)
    [request] = later.run_requests
    assert json.loads(later.cursor)["version"] not in (baseline["version"], written["version"])



def test_sensor_requests_a_source_that_returns_to_an_earlier_content_under_a_new_run_key(
        tmp_path, instance):
    """A -> B -> A -> B: the second B needs a run too. Dagster drops a RunRequest whose run key
    an earlier run of the sensor used, so the keys must differ; and the version, not being a
    function of the content, is new at every change, even back to an earlier content."""
    project = make_project(tmp_path, rows=500, min_interval="0s")
    defs = project.defs_fn()
    sensor = defs.get_sensor_def(SENSOR)
    run_sql(project, "CREATE TABLE main.state_a AS SELECT * FROM main.example")
    change_source(project)
    run_sql(project, "CREATE TABLE main.state_b AS SELECT * FROM main.example")
    restore = "CREATE OR REPLACE TABLE main.example AS SELECT * FROM main.{}"
    run_sql(project, restore.format("state_a"))

    cursors = [tick(sensor, instance, defs).cursor]  # baseline: A
    keys, versions = [], []
    for state in ("state_b", "state_a", "state_b"):
        run_sql(project, restore.format(state))
        result = tick(sensor, instance, defs, cursors[-1])
        [request] = result.run_requests
        keys.append(request.run_key)
        versions.append(json.loads(result.cursor)["version"])
        cursors.append(result.cursor)
        time.sleep(0.01)
    baseline = json.loads(cursors[0])["version"]
    assert len(set(versions) | {baseline}) == 4, versions
    assert len(set(keys)) == 3, keys
    # a retried tick (the cursor before the last request, same source) asks under the same key,
    # so Dagster does not start the run twice
    [retried] = tick(sensor, instance, defs, cursors[-2]).run_requests
    assert retried.run_key == keys[-1]
    assert "unchanged" in tick(sensor, instance, defs, cursors[-1]).skip_message


def test_sensor_skips_a_change_the_budget_cannot_cover(tmp_path, instance):
    project = make_project(tmp_path, rows=1000, min_interval="1h")
    defs = project.defs_fn()
    sensor = defs.get_sensor_def(SENSOR)
    first = tick(sensor, instance, defs)
    exhaust_budget(project)

    change_source(project)
    skipped = tick(sensor, instance, defs, first.cursor)
    assert skipped.run_requests == []
    message = skipped.skip_message
    assert "budget" in message and "the source is not read until a run fits" in message
    assert "privacy.limit.epsilon" in message and "'example'" in message
    # the change stays pending: the cursor keeps the old version
    assert json.loads(skipped.cursor) == json.loads(first.cursor)
    # nothing was reserved or charged by the sensor
    summary = PrivacyLedger(project.ledger).summary(DATASET)
    assert summary.reserved_rho == 0 and list(summary.runs) == ["earlier-runs"]


def test_sensor_skips_when_the_source_cannot_be_read_saying_why_only_in_the_private_log(
        tmp_path, instance):
    project = make_project(tmp_path, rows=200, source={"table": "main.missing"})
    defs = project.defs_fn()
    result = tick(defs.get_sensor_def(SENSOR), instance, defs)
    assert result.run_requests == []
    log = tmp_path / "private" / DATASET / "private.log"
    assert "cannot read the source of 'example'" in result.skip_message
    assert str(log) in result.skip_message
    # DuckDB's own text (which can quote values) is in the owner-only log, not in the skip
    assert "Catalog Error" not in result.skip_message
    assert "Catalog Error" in log.read_text() and "source (sensor)" in log.read_text()
    assert log.stat().st_mode & 0o777 == 0o600
    assert result.cursor is None


# ---- the schedule --------------------------------------------------------------------------------


def test_schedule_requests_a_run_only_when_the_budget_covers_it(tmp_path, instance):
    project = make_project(tmp_path, rows=200, schedule="0 3 * * 1")
    defs = project.defs_fn()
    schedule = defs.get_schedule_def(SCHEDULE)
    assert schedule.cron_schedule == "0 3 * * 1"
    assert schedule.job_name == JOB

    def evaluate():
        with dg.build_schedule_context(
                instance=instance, resources=defs.resources,
                scheduled_execution_time=datetime(2026, 11, 23, 3, tzinfo=timezone.utc)) as context:
            return schedule.evaluate_tick(context)

    ok = evaluate()
    assert ok.skip_message is None
    [request] = ok.run_requests
    assert request.tags["dp_synth/trigger"] == "schedule"

    exhaust_budget(project)
    skipped = evaluate()
    assert skipped.run_requests == []
    assert "budget" in skipped.skip_message and "privacy.limit.epsilon" in skipped.skip_message


def test_no_schedule_without_cron_and_no_source_sensor_when_changes_are_ignored(tmp_path, instance):
    # (`instance`: loading a repository reads the current instance's definitions state)
    project = make_project(tmp_path, rows=200, schedule=None, on_source_change="ignore")
    repo = project.defs_fn().get_repository_def()
    assert repo.schedule_defs == []
    assert [s.name for s in repo.sensor_defs] == [BUDGET_SENSOR]  # observes; requests no run
    # nothing launches a job of its own: manual runs use the location's implicit asset job
    assert not repo.has_job(JOB)
    assert repo.get_implicit_global_asset_job_def().asset_layer.has(dg.AssetKey([DATASET,
                                                                                  "synthetic"]))

    project = make_project(tmp_path / "default", rows=200)  # the repo's entry: sensor, no cron
    repo = project.defs_fn().get_repository_def()
    assert [s.name for s in repo.schedule_defs] == []
    assert sorted(s.name for s in repo.sensor_defs) == [BUDGET_SENSOR, SENSOR]


# ---- the asset graph -----------------------------------------------------------------------------


def test_asset_graph_of_a_dataset(tmp_path, instance):
    defs = make_project(tmp_path, rows=200, report=EXAMPLE_REPORT).defs_fn()
    graph = defs.resolve_asset_graph()
    keys = [dg.AssetKey([DATASET, stage]) for stage in STAGES]
    report = dg.AssetKey([DATASET, "utility_report"])  # the example has a `report:` block
    budget = dg.AssetKey([DATASET, "budget"])  # observed by the budget sensor, never run
    assert set(graph.get_all_asset_keys()) == set(keys) | {report, budget}
    assert not graph.get(budget).is_executable and graph.get(budget).group_name == "dp_synth"
    assert graph.get(report).parent_keys == {keys[-1]}
    assert graph.get(report).tags["privacy"] == "private"
    for previous, key in zip([None, *keys], keys):
        node = graph.get(key)
        assert node.parent_keys == ({previous} if previous else set()), key
        assert node.group_name == "dp_synth"
        expected = "private" if key.path[1] in ("source", "preprocessed", "marginals") else "public"
        assert node.tags["privacy"] == expected, key
    assert graph.get(keys[0]).is_observable and not graph.get(keys[0]).is_materializable
    assert all(graph.get(k).is_materializable for k in keys[1:])

    synthetic = dg.AssetKey([DATASET, "synthetic"])
    checks = {k.name: graph.get_check_spec(k) for k in graph.asset_check_keys}
    assert set(checks) == {"schema", "constraints", "domain", "row_count", "null_fraction",
                           "one_way_tvd", "marginal_tvd", "duplicates"}
    assert all(spec.asset_key == synthetic for spec in checks.values())
    assert {n for n, spec in checks.items() if spec.blocking} == {"schema", "domain"}

    # the sensor's runs materialize every stage but observe nothing: the source is its business
    selected = defs.get_sensor_def(SENSOR).asset_selection.resolve(graph)
    assert selected == set(keys[1:]) | {report}


# ---- a real run, requested by the sensor ---------------------------------------------------------


def test_a_run_requested_by_the_sensor_charges_the_ledger(tmp_path, instance):
    project = make_project(tmp_path, rows=2000, min_interval="1h")
    defs = project.defs_fn()
    sensor = defs.get_sensor_def(SENSOR)
    first = tick(sensor, instance, defs)
    change_source(project)
    result = tick(sensor, instance, defs, first.cursor)
    [request] = result.run_requests

    job = defs.resolve_job_def(request.job_name).get_subset(
        asset_selection=set(request.asset_selection),
        asset_check_selection=set(request.asset_check_keys))
    run = job.execute_in_process(instance=instance, run_config=request.run_config,
                                 tags=request.tags)
    assert run.success
    stored = instance.get_run_by_id(run.run_id)
    assert stored.status == dg.DagsterRunStatus.SUCCESS
    assert stored.tags["dp_synth/trigger"] == "source_change"

    budget = budget_of(project)
    ledger = PrivacyLedger(project.ledger)
    by_stage = ledger.spent_by_run(DATASET, run.run_id)
    assert set(by_stage) == {"preprocessed", "selection", "measurements"}  # densities
    assert sum(by_stage.values()) == pytest.approx(budget.run_rho, rel=1e-9)
    assert by_stage["measurements"] == pytest.approx(budget.split.measure, rel=1e-9)
    kinds = [e["kind"] for e in ledger.events(DATASET) if e["run_id"] == run.run_id]
    assert kinds[0] == "reserve" and kinds[-1] == "release" and "charge" in kinds
    assert ledger.summary(DATASET).reserved_rho == 0

    # the checks ran in the same run, and the public table exists
    checks = {e.check_name: e.passed
              for e in (ev.asset_check_evaluation_data for ev in run.all_events
                        if ev.event_type_value == "ASSET_CHECK_EVALUATION")}
    assert checks["schema"] and checks["domain"]
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0] > 0
    finally:
        con.close()

    # the synthesized source is now the sensor's baseline: nothing new to do (once min_interval
    # has passed, simulated by an older request time; before, the source is not even read)
    assert "not read" in tick(sensor, instance, defs, result.cursor).skip_message
    old = json.dumps({**json.loads(result.cursor), "requested_at": 0})
    assert "unchanged" in tick(sensor, instance, defs, old).skip_message
