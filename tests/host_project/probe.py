"""Run by tests/test_wheel.py with the python of the venv that has the built wheel, in a copy of
this project whose dp-synth stages were materialized once (by the CLI, with raw_customers). Prints
one JSON object of three parts:

- `definitions`: what the installed package and the merged definitions are, seen from the host
  (where dp_synth_assets and its ledger were imported from, its SQL templates, no top-level
  `resources`, the Dagster version, the first stage's parents, the executor and resources).
- `first_synthesis`: the synthetic table's latest materialization (that first run's) on the
  instance, its metadata and the numeric metadata of each check its run evaluated.
- `ticks`: the dataset's automation evaluated on the real instance of DAGSTER_HOME, as its sensor
  evaluates it on each tick, at increasing evaluation times; what each tick decided:

1. baseline: nothing changed since the first synthesis.
2. the host materializes raw_customers; a tick one hour after the probe started (so min_interval
   has passed since the first synthesis, which ended before) requests the dp-synth chain, and the
   requested assets are executed as one run on the instance (the run the sensor launches), on
   Dagster's test clock set a quarter second after that tick: its materializations are stamped
   then, whatever the wall clock says.
3. a tick half a second after the second tick sees that run's materializations (the sensor
   ticks while a run goes on: the change it requested is handled); then the host changes
   again, and a tick one second after the second is inside min_interval (1h) of that run (the
   interval runs from the first stage's materialization, the start of the run) and requests
   nothing, for the interval.
4. a tick three hours later: the ledger cannot cover a third run (the limit covers two), so it
   requests nothing, for the budget.
"""

import datetime
import importlib.util
import json
from importlib.resources import files

import dagster as dg
from dagster._core.events import DagsterEventType
from dagster._core.test_utils import freeze_time

import dp_synth_assets
import dp_synth_assets.resources.ledger as ledger

from definitions import defs, raw_customers
from dp_synth_assets.conditions import BUDGET_LABEL, SOURCE_LABEL, interval_label

FIRST = dg.AssetKey(["privacy", "customers", "preprocessed"])
SYNTHETIC = dg.AssetKey(["privacy", "customers", "synthetic"])
INTERVAL = interval_label("1h")


def definitions() -> dict:
    graph = defs.resolve_asset_graph()
    return {
        "package": dp_synth_assets.__file__, "ledger": ledger.__file__,
        "templates": len(list((files("dp_synth_assets") / "sql").glob("*.sql"))),
        "top_level_resources": importlib.util.find_spec("resources") is not None,
        "dagster": dg.__version__,
        "parents": sorted(k.to_user_string() for k in graph.get(FIRST).parent_keys),
        "source_asset": dg.AssetKey(["privacy", "customers", "source"])
        in graph.get_all_asset_keys(),
        "executor": defs.executor.name,
        "resources": {k: type(v).__name__ for k, v in defs.resources.items()},
    }


def latest_synthesis(instance) -> dict:
    event = instance.get_latest_materialization_event(SYNTHETIC)
    checks = instance.all_logs(event.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    return {
        "metadata": {k: str(v.value) for k, v in event.asset_materialization.metadata.items()},
        "checks": {c.dagster_event.event_specific_data.check_name:
                   [k for k, v in c.dagster_event.event_specific_data.metadata.items()
                    if isinstance(v.value, (int, float))] for c in checks},
    }


def gates(result) -> dict[str, bool]:
    """label -> whether the node was true, over the evaluation tree of the first stage."""
    [root] = [r for r in result.results if r.key == FIRST]
    found, todo = {}, [root]
    while todo:
        node = todo.pop()
        if node.condition.get_label():
            found[node.condition.get_label()] = not node.true_subset.is_empty
        todo += node.child_results
    return {label: found.get(label) for label in (SOURCE_LABEL, INTERVAL, BUDGET_LABEL)}


def requested(result) -> list[str]:
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    return sorted(k.to_user_string() for k in keys if result.get_num_requested(k))


with dg.DagsterInstance.get() as instance:
    first_synthesis = latest_synthesis(instance)
    start = datetime.datetime.now(datetime.timezone.utc)
    report, cursor = {}, None

    def tick(name: str, hours: float):
        global cursor
        result = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, cursor=cursor,
            evaluation_time=start + datetime.timedelta(hours=hours))
        cursor = result.cursor
        runs = instance.get_runs_count()
        report[name] = {"requested": requested(result), "gates": gates(result), "runs": runs}
        return result

    tick("baseline", 0)
    dg.materialize([raw_customers], instance=instance)
    changed = tick("changed", 1)
    selection = [k for k in defs.resolve_asset_graph().get_all_asset_keys()
                 if changed.get_num_requested(k)]
    if selection:
        job = defs.resolve_implicit_global_asset_job_def()
        with freeze_time(start + datetime.timedelta(hours=1, seconds=0.25)):
            launched = job.execute_in_process(instance=instance, asset_selection=selection,
                                              tags={"dp_synth/trigger": "automation"})
        report["changed"]["run_success"] = launched.success
    tick("synthesized", 1 + 0.5 / 3600)
    dg.materialize([raw_customers], instance=instance)
    tick("inside_interval", 1 + 1 / 3600)
    tick("out_of_budget", 4)
    print(json.dumps({"definitions": definitions(), "first_synthesis": first_synthesis,
                      "ticks": report}))
