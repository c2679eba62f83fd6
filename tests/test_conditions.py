"""dp-synth's declarative automation (conditions.py) evaluated as Dagster's automation sensor
evaluates it: real definitions (a host asset writing the source table, dp-synth's factory), a
real instance, a real ledger. No synthesis runs: the host asset is materialized, a synthesis is
recorded as a materialization of the first stage, spends are written into the ledger."""

import datetime

import dagster as dg
import pytest
import yaml

from dp_synth_assets.budget import BudgetStatus, DatasetBudget
from dp_synth_assets.conditions import BUDGET_LABEL, SOURCE_LABEL, interval_label
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.core.privacy import Spend
from dp_synth_assets.core.resynthesis import interval_passed
from dp_synth_assets.example import write_example
from dp_synth_assets.factory import dp_synth_definitions
from tests.helpers import REPO, example_entry

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning",
                                        "ignore::dagster.PreviewWarning")

HOST_KEY = dg.AssetKey(["analytics", "customers"])
STAGES = ["preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]
FIRST = dg.AssetKey(["customers", "preprocessed"])


def host_project(tmp_path, **overrides):
    """The host's asset (writes main.customers) merged with dp-synth's `customers` dataset
    reading it, with `on_source_change: resynthesize` and the entry's `overrides`."""
    database = tmp_path / "warehouse.duckdb"

    @dg.asset(key=HOST_KEY)
    def customers() -> None:
        write_example(database, table="main.customers", rows=300)

    entry = example_entry(source={"asset": list(HOST_KEY.path), "table": "main.customers"},
                          on_source_change="resynthesize", report=None, **overrides)
    datasets = tmp_path / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": {"customers": entry}}, sort_keys=False))
    ours = dp_synth_definitions(datasets=datasets, warehouse=database,
                                ledger=tmp_path / "ledger.sqlite", public_dir=tmp_path / "public")
    return customers, ours, dg.Definitions.merge(dg.Definitions(assets=[customers]), ours), datasets


def tick(defs, instance, cursor=None, at=None):
    return dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor,
                                             evaluation_time=at)


def requested(result) -> set[str]:
    return {key.path[-1] for key in (dg.AssetKey(["customers", s]) for s in STAGES)
            if result.get_num_requested(key)}


def nodes(result, key: dg.AssetKey) -> dict[str, bool]:
    """label -> whether the node was true, over the evaluation tree of `key`'s condition."""
    [root] = [r for r in result.results if r.key == key]
    found, todo = {}, [root]
    while todo:
        node = todo.pop()
        label = node.condition.get_label()
        if label:
            found[label] = not node.true_subset.is_empty
        todo += node.child_results
    return found


def spend_runs(ours, datasets, runs: float) -> None:
    """Write `runs` whole runs of the dataset's budget into the ledger, as finished runs would."""
    budget = DatasetBudget.of(load_registry(datasets)["customers"])
    ledger = ours.resources["dp_synth_ledger"].ledger()
    rho = runs * budget.run_rho
    ledger.reserve("customers", "earlier-runs", rho, budget.limit_rho, delta=budget.delta)
    ledger.charge("customers", "earlier-runs", "measurements", Spend("gaussian", rho))
    ledger.release("customers", "earlier-runs")


def test_the_host_asset_source_is_automated_declaratively_without_polling(tmp_path):
    _, ours, defs, _ = host_project(tmp_path, schedule="0 3 * * *", min_interval="1h")
    sensors = {s.name: s for s in ours.sensors}
    # no polling sensor, no schedule: the automation and the budget's observation (no run)
    assert sorted(sensors) == ["dp_synth_automation", "dp_synth_budget"]
    assert not list(ours.schedules or [])
    assert isinstance(sensors["dp_synth_automation"], dg.AutomationConditionSensorDefinition)
    graph = defs.resolve_asset_graph()
    first = graph.get(FIRST).automation_condition
    labels = str(first.get_snapshot())
    for label in (SOURCE_LABEL, "cron tick 0 3 * * * passed", interval_label("1h"), BUDGET_LABEL):
        assert label in labels
    assert graph.get(HOST_KEY).automation_condition is None  # the host's asset is untouched


def test_a_host_materialization_requests_the_chain_and_min_interval_holds_the_next(tmp_path):
    customers, _, defs, _ = host_project(tmp_path, min_interval="1h")
    instance = dg.DagsterInstance.ephemeral()
    baseline = tick(defs, instance)
    assert requested(baseline) == set()

    assert dg.materialize([customers], instance=instance).success
    first = tick(defs, instance, baseline.cursor)
    assert requested(first) == set(STAGES)  # the whole chain, in this one tick

    # the run it launched synthesized (recorded as its first stage's materialization) ...
    instance.report_runless_asset_event(dg.AssetMaterialization(FIRST))
    quiet = tick(defs, instance, first.cursor)
    assert requested(quiet) == set()
    # ... and the host changes again inside min_interval: skipped, for the interval
    dg.materialize([customers], instance=instance)
    held = tick(defs, instance, quiet.cursor)
    assert requested(held) == set()
    gates = nodes(held, FIRST)
    assert gates[SOURCE_LABEL] and not gates[interval_label("1h")]
    # the change stays pending: once min_interval has passed, it is synthesized
    later = tick(defs, instance, held.cursor,
                 at=datetime.datetime.now() + datetime.timedelta(hours=1, minutes=1))
    assert requested(later) == set(STAGES)
    assert nodes(later, FIRST)[interval_label("1h")]


def test_the_automation_sensor_launches_one_run_of_the_whole_chain(tmp_path):
    """The sensor the factory builds, evaluated in the code location as Dagster runs it."""
    customers, _, defs, _ = host_project(tmp_path)
    sensor = defs.resolve_sensor_def("dp_synth_automation")
    with dg.instance_for_test() as instance:
        def evaluate(cursor=None):
            with dg.build_sensor_context(instance=instance, cursor=cursor,
                                         repository_def=defs.get_repository_def()) as context:
                return sensor.evaluate_tick(context)

        baseline = evaluate()
        assert baseline.run_requests == []
        dg.materialize([customers], instance=instance)
        [run] = evaluate(baseline.cursor).run_requests
        assert sorted(k.path[-1] for k in run.asset_selection) == sorted(STAGES)
        assert run.tags["dp_synth/trigger"] == "automation"


def test_a_ledger_that_cannot_cover_a_run_skips_the_tick_for_the_budget(tmp_path):
    privacy = {**example_entry()["privacy"]}
    privacy["limit"] = {**privacy["limit"], "epsilon": privacy["epsilon"]}  # one run
    customers, ours, defs, datasets = host_project(tmp_path, privacy=privacy, min_interval="1h")
    instance = dg.DagsterInstance.ephemeral()
    baseline = tick(defs, instance)
    spend_runs(ours, datasets, 1.0)
    budget = DatasetBudget.of(load_registry(datasets)["customers"])
    summary = ours.resources["dp_synth_ledger"].ledger().summary("customers")
    assert BudgetStatus.of(summary, budget).runs_left == 0

    dg.materialize([customers], instance=instance)
    result = tick(defs, instance, baseline.cursor)
    assert result.total_requested == 0
    gates = nodes(result, FIRST)
    assert gates[SOURCE_LABEL] and gates[interval_label("1h")] and not gates[BUDGET_LABEL]


def test_the_budget_gate_opens_while_one_run_still_fits(tmp_path):
    privacy = {**example_entry()["privacy"]}
    privacy["limit"] = {**privacy["limit"], "epsilon": 2 * privacy["epsilon"]}
    customers, ours, defs, datasets = host_project(tmp_path, privacy=privacy, min_interval="1h")
    instance = dg.DagsterInstance.ephemeral()
    baseline = tick(defs, instance)
    spend_runs(ours, datasets, 0.5)

    dg.materialize([customers], instance=instance)
    result = tick(defs, instance, baseline.cursor)
    assert requested(result) == set(STAGES)
    assert nodes(result, FIRST)[BUDGET_LABEL]


def test_a_host_condition_replaces_the_default_and_the_automation_sensor_only_checks(tmp_path):
    """With the host's condition, dp-synth's sensor automates nothing (Dagster's default sensor
    evaluates the host's condition): it is built stopped, only to check the source assets when
    the location loads (source_check.py)."""
    database = tmp_path / "warehouse.duckdb"
    entry = example_entry(source={"asset": list(HOST_KEY.path), "table": "main.customers"},
                          on_source_change="resynthesize", report=None)
    datasets = tmp_path / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": {"customers": entry}}, sort_keys=False))
    eager = dg.AutomationCondition.eager()
    ours = dp_synth_definitions(datasets=datasets, warehouse=database,
                                ledger=tmp_path / "ledger.sqlite", public_dir=tmp_path / "public",
                                automation_condition=eager)
    assert sorted(s.name for s in ours.sensors) == ["dp_synth_automation", "dp_synth_budget"]
    sensor = next(s for s in ours.sensors if s.name == "dp_synth_automation")
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    merged = dg.Definitions.merge(dg.Definitions(assets=[dg.AssetSpec(HOST_KEY)]), ours)
    graph = merged.resolve_asset_graph()
    assert graph.get(FIRST).automation_condition == eager
    assert sensor.asset_selection.resolve(graph) == set()
    default = merged.get_repository_def().get_sensor_def("default_automation_condition_sensor")
    assert FIRST in default.asset_selection.resolve(graph)


# ---- the decisions, without Dagster ------------------------------------------------------------


def test_interval_passed_at_exactly_min_interval_and_when_never_synthesized():
    assert interval_passed(None, 10.0, 3600)
    assert interval_passed(1000.0, 4600.0, 3600)
    assert not interval_passed(1000.0, 4599.9, 3600)


RESERVE_AND_DIE = """
import os, sys
from pathlib import Path
from dp_synth_assets.budget import DatasetBudget
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.factory import dp_synth_definitions
root = Path(sys.argv[1])
ours = dp_synth_definitions(datasets=root / "datasets.yaml", warehouse=root / "warehouse.duckdb",
                            ledger=root / "ledger.sqlite", public_dir=root / "public")
budget = DatasetBudget.of(load_registry(root / "datasets.yaml")["customers"])
ours.resources["dp_synth_ledger"].ledger().reserve(
    "customers", "crashed-run", budget.run_rho, budget.limit_rho, delta=budget.delta)
os._exit(0)  # a run killed while it held its reservation: no release written
"""


def test_a_crashed_runs_reservation_does_not_hold_the_budget_gate_but_a_live_one_does(tmp_path):
    """The gate asks the ledger as `reserve` would: a reservation whose process is gone is stale
    (the next run frees it), so it does not block automation; a live run's reservation counts."""
    import subprocess
    import sys

    privacy = {**example_entry()["privacy"]}
    privacy["limit"] = {**privacy["limit"], "epsilon": 2 * privacy["epsilon"]}  # two runs
    customers, ours, defs, datasets = host_project(tmp_path, privacy=privacy, min_interval="1h")
    instance = dg.DagsterInstance.ephemeral()
    baseline = tick(defs, instance)
    spend_runs(ours, datasets, 1.0)
    done = subprocess.run([sys.executable, "-c", RESERVE_AND_DIE, str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert ours.resources["dp_synth_ledger"].ledger().summary("customers").reserved_rho > 0

    dg.materialize([customers], instance=instance)
    crashed = tick(defs, instance, baseline.cursor)
    assert requested(crashed) == set(STAGES)
    assert nodes(crashed, FIRST)[BUDGET_LABEL]

    # a run of this process holds the last run's budget: the gate closes
    budget = DatasetBudget.of(load_registry(datasets)["customers"])
    ours.resources["dp_synth_ledger"].ledger().reserve(
        "customers", "live-run", budget.run_rho, budget.limit_rho, delta=budget.delta)
    dg.materialize([customers], instance=instance)
    live = tick(defs, instance, crashed.cursor,
                at=datetime.datetime.now() + datetime.timedelta(hours=2))
    assert requested(live) == set()
    assert not nodes(live, FIRST)[BUDGET_LABEL]
