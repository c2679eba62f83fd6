"""The current budget in the UI without a synthesis (current_budget.py), and the names dp-synth
takes in a host's location (naming.py).

The budget sensor is ticked as Dagster's sensor daemon ticks it (`execute_sensor_iteration`,
the daemon's own loop body) on a real instance in a temporary DAGSTER_HOME, against a code
location loaded from a definitions file: the daemon stores the observations the tick returns and
the tick itself (skipped, or failed with its error). Changing the limit in datasets.yaml and
reloading the code location is what a user does in the UI ("Reload"). The clock the daemon reads
is frozen at chosen instants (Dagster's `freeze_time`) so that each tick falls outside the
sensor's minimum interval.
"""

import contextlib
import datetime
import logging
import sqlite3

import dagster as dg
import pytest
import yaml
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._core.workspace.load_target import PythonFileTarget
from dagster._daemon.sensor import execute_sensor_iteration

from dp_synth_assets import dp_synth_definitions
from dp_synth_assets.budget import DatasetBudget, shown
from dp_synth_assets.core.budget import BudgetStatus
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.core.privacy import Spend, epsilon_from_rho
from dp_synth_assets.current_budget import MINIMUM_INTERVAL_SECONDS
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import example_entry, make_project

DATASET = "example"
BUDGET_KEY = dg.AssetKey([DATASET, "budget"])
SENSOR = "dp_synth_budget"
DEFINITIONS = """\
from dp_synth_assets.definitions import build_definitions

defs = build_definitions({datasets!r}, {warehouse!r}, {ledger!r}, {public!r})
"""


def set_limit(project, epsilon: float) -> None:
    """Write `epsilon` as the dataset's `privacy.limit.epsilon` in its datasets.yaml."""
    registry = yaml.safe_load(project.datasets.read_text())
    registry["datasets"][DATASET]["privacy"]["limit"]["epsilon"] = epsilon
    project.datasets.write_text(yaml.safe_dump(registry, sort_keys=False))


def the_ledger(project) -> PrivacyLedger:
    """The ledger as the definitions configure it (with the dataset's privacy unit)."""
    return project.defs_fn().resources["ledger"].ledger()


def spend_one_run(project) -> None:
    """One whole run of the dataset's budget in its ledger, as a finished run leaves it."""
    budget = DatasetBudget.of(load_registry(project.datasets)[DATASET])
    ledger = the_ledger(project)
    ledger.reserve(DATASET, "run-1", budget.run_rho, budget.limit_rho, delta=budget.delta)
    ledger.charge(DATASET, "run-1", "measurements", Spend("gaussian", budget.run_rho))
    ledger.release(DATASET, "run-1")


class Daemon:
    """The sensor daemon's iteration over one code location, served by a code server (a
    `dagster api grpc` process, as under `dagster dev`) from a definitions file."""

    def __init__(self, instance, definitions_file, sensor: str = SENSOR):
        self.instance, self.sensor = instance, sensor
        self.location = "budget_test"
        self.stack = contextlib.ExitStack()
        self.context = self.stack.enter_context(create_test_daemon_workspace_context(
            PythonFileTarget(python_file=str(definitions_file), attribute="defs",
                             working_directory=str(definitions_file.parent),
                             location_name=self.location), instance))
        self.loaded()
        self.now = datetime.datetime.now(datetime.timezone.utc)

    def loaded(self) -> None:
        entry = self.context.create_request_context().get_code_location_entries()[self.location]
        assert entry.code_location is not None, entry.load_error

    def reload(self) -> None:
        """What the UI's "Reload" does: a new code server loads the definitions again."""
        self.context.reload_code_location(self.location)
        self.loaded()

    def tick(self):
        """One iteration, past the sensor's minimum interval since the previous one; returns the
        budget sensor's latest tick."""
        self.now += datetime.timedelta(seconds=MINIMUM_INTERVAL_SECONDS + 1)
        with freeze_time(self.now):
            list(execute_sensor_iteration(self.context, logging.getLogger("test"),
                                          threadpool_executor=None,
                                          submit_threadpool_executor=None))
        [state] = [s for s in self.instance.all_instigator_state(
            instigator_type=InstigatorType.SENSOR) if s.instigator_name == self.sensor]
        return self.instance.get_ticks(state.instigator_origin_id, state.selector_id,
                                       limit=1)[0]

    def close(self) -> None:
        self.stack.close()


@pytest.fixture
def instance(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        yield instance


@pytest.fixture
def project(tmp_path):
    project = make_project(tmp_path, rows=200, on_source_change="ignore", schedule=None)
    project.definitions = tmp_path / "definitions.py"
    project.definitions.write_text(DEFINITIONS.format(
        datasets=str(project.datasets), warehouse=str(project.warehouse),
        ledger=str(project.ledger), public=str(project.public)))
    return project


def observations(instance) -> list[dict]:
    """The budget asset's observations on the instance, oldest first, as plain values."""
    records = instance.fetch_observations(BUDGET_KEY, limit=100, ascending=True).records
    return [{k: v.value for k, v in r.asset_observation.metadata.items()} for r in records]


def expected_figures(project) -> dict:
    """What the ledger and the current datasets.yaml say, computed here from the ledger's
    summary and the dataset's budget (not by the sensor's code path)."""
    spec = load_registry(project.datasets)[DATASET]
    budget = DatasetBudget.of(spec)
    summary = the_ledger(project).summary(DATASET)
    status = BudgetStatus.of(summary, budget)
    return {"privacy/epsilon_limit": spec.privacy.limit.epsilon,
            "privacy/runs_left": status.runs_left,
            "privacy/runs_spent": len(summary.runs),
            "privacy/rho_spent": summary.spent_rho,
            "privacy/rho_limit": budget.limit_rho,
            "privacy/epsilon_spent": shown(epsilon_from_rho(summary.spent_rho, budget.delta))}


def test_a_limit_change_is_observed_after_a_reload_with_no_synthesis(project, instance):
    set_limit(project, 3.0)
    spend_one_run(project)
    daemon = Daemon(instance, project.definitions)
    try:
        first = daemon.tick()
        assert first.status == TickStatus.SKIPPED, first.error
        [a] = observations(instance)
        for key, value in expected_figures(project).items():
            assert a[key] == pytest.approx(value), key
        assert a["privacy/runs_spent"] == 1 and a["privacy/epsilon_limit"] == 3.0

        # nothing changed: the next tick records nothing
        assert daemon.tick().status == TickStatus.SKIPPED
        assert len(observations(instance)) == 1

        # the limit is lowered in datasets.yaml; until the location reloads, the loaded limit holds
        set_limit(project, 2.0)
        daemon.tick()
        assert len(observations(instance)) == 1
        daemon.reload()
        daemon.tick()
        a, b = observations(instance)
        for key, value in expected_figures(project).items():
            assert b[key] == pytest.approx(value), key
        assert b["privacy/epsilon_limit"] == 2.0
        assert b["privacy/runs_left"] < a["privacy/runs_left"]
        assert b["privacy/rho_spent"] == a["privacy/rho_spent"]  # nothing was spent
    finally:
        daemon.close()
    # no run, no materialization of any dp-synth asset
    assert instance.get_runs_count() == 0
    for stage in ("source", "preprocessed", "synthetic", "budget"):
        assert instance.get_latest_materialization_event(dg.AssetKey([DATASET, stage])) is None


def test_a_new_spend_is_observed_without_a_reload(project, instance):
    daemon = Daemon(instance, project.definitions)
    try:
        daemon.tick()
        [a] = observations(instance)
        assert a["privacy/runs_spent"] == 0 and a["privacy/rho_spent"] == 0.0
        spend_one_run(project)
        daemon.tick()
        a, b = observations(instance)
        assert b["privacy/runs_spent"] == 1 and b["privacy/runs_left"] == a["privacy/runs_left"] - 1
    finally:
        daemon.close()


def test_a_tampered_ledger_fails_the_tick_with_the_ledgers_message(project, instance):
    spend_one_run(project)
    conn = sqlite3.connect(project.ledger)  # an edited row: the charge forgotten
    conn.execute("DROP TRIGGER privacy_ledger_append_only_u")
    conn.execute("UPDATE privacy_ledger SET rho = 0 WHERE kind = 'charge'")
    conn.commit()
    conn.close()
    daemon = Daemon(instance, project.definitions)
    try:
        tick = daemon.tick()
    finally:
        daemon.close()
    assert tick.status == TickStatus.FAILURE
    message = tick.error.to_string()
    assert "LedgerError" in message and "fails its hash chain" in message
    assert str(project.ledger) in message
    assert observations(instance) == []


def test_the_budget_asset_is_external_public_and_in_the_dp_synth_group(project, instance):
    graph = project.defs_fn().resolve_asset_graph()
    node = graph.get(BUDGET_KEY)
    assert not node.is_executable and not node.is_materializable
    assert node.group_name == "dp_synth" and node.tags["privacy"] == "public"
    assert node.kinds == {"sqlite"}
    assert graph.get(dg.AssetKey([DATASET, "synthetic"])).group_name == "dp_synth"


@pytest.mark.parametrize("key_prefix, label", [
    (None, "dp_synth"), ("privacy", "privacy"), (["analytics", "synth"], "analytics__synth")])
def test_group_and_sensors_are_named_after_the_key_prefix(tmp_path, key_prefix, label):
    host = dg.AssetKey(["analytics", "people"])
    entry = example_entry(source={"asset": list(host.path), "table": "main.example"},
                          on_source_change="resynthesize", report=None)
    datasets = tmp_path / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": {"people": entry}}, sort_keys=False))
    ours = dp_synth_definitions(datasets=datasets, warehouse=tmp_path / "warehouse.duckdb",
                                ledger=tmp_path / "ledger.sqlite",
                                public_dir=tmp_path / "public", key_prefix=key_prefix)
    defs = dg.Definitions.merge(dg.Definitions(assets=[dg.AssetSpec(host, group_name="people")]),
                                ours)
    graph = defs.resolve_asset_graph()
    ours_keys = [k for k in graph.get_all_asset_keys() if k != host]
    assert {graph.get(k).group_name for k in ours_keys} == {label}
    assert sorted(s.name for s in ours.sensors) == [f"{label}_automation", f"{label}_budget"]
    # a host's own group name is kept
    named = dp_synth_definitions(datasets=datasets, warehouse=tmp_path / "warehouse.duckdb",
                                 ledger=tmp_path / "ledger.sqlite",
                                 public_dir=tmp_path / "public", key_prefix=key_prefix,
                                 group_name="synthetic_data")
    assert {a.group_names_by_key[k] for a in named.assets if isinstance(a, dg.AssetsDefinition)
            for k in a.keys} == {"synthetic_data"}
