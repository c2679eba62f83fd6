"""Each stage's seconds from a run's public progress in Dagster's event log (shared by
bench/scale.py, bench/preprocessing.py and the runs of bench/anchors/): the stages of a dataset
run in one op, so Dagster's step durations no longer time them one by one, and a stage publishes
no timing of its private work (docs/decisions/0003-privacy-perimeter.md); its log lines'
timestamps are public by design.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHECK_STARTED = re.compile(r"^check (\w+): started$")  # dp_synth_assets/checks/suites.py


def run_stage_times(instance, run_id: str, expect=None) -> dict[str, dict]:
    """`stage_times` of the run `run_id` of `instance`."""
    record = instance.get_run_record_by_id(run_id)
    return stage_times(instance.all_logs(run_id), record.start_time, expect)


def stage_times(logs, run_start: float, expect=None) -> dict[str, dict]:
    """Each stage's window from the run's public progress in the event log, and nothing else
    (log timestamps are public by design, docs/decisions/0003-privacy-perimeter.md): from its
    `stage <name> started` line (`pipeline.stage_started`) to its own materialization. A stage
    with no such line (the source asset; the model when its fit runs as steps of the executor)
    starts at the previous materialization (the run's start for the first). `checks`: from the
    synthetic table's materialization to the last check result, and each check's own from its
    `check <name>: started` line to its result (`each`). Times in seconds; `start` and `end`
    are the window's timestamps. Raises when a stage of `expect` (default: every stage) was
    not materialized or no stage logged its line: the public progress changed."""
    from dp_synth_assets.core.budget import STAGES
    from dp_synth_assets.pipeline import stage_started

    started_line = {stage_started(dg_key(name)): name for name in STAGES}
    started, ended, checked, each, check = {}, {}, [], {}, None
    for entry in logs:
        event = entry.dagster_event
        if event is None and entry.user_message in started_line:
            started[started_line[entry.user_message]] = entry.timestamp
        elif event is None and CHECK_STARTED.match(entry.user_message or ""):
            check = (CHECK_STARTED.match(entry.user_message)[1], entry.timestamp)
        elif event is not None and event.event_type_value == "ASSET_MATERIALIZATION":
            ended.setdefault(event.asset_key.path[-1], entry.timestamp)
        elif event is not None and event.event_type_value == "ASSET_CHECK_EVALUATION":
            checked.append(entry.timestamp)
            if check is not None:
                each[check[0]], check = round(entry.timestamp - check[1], 3), None
    missing = [name for name in (STAGES if expect is None else expect) if name not in ended]
    if missing or not started:
        raise RuntimeError(f"the run's event log has no materialization of {missing} or no "
                           f"line among {sorted(started_line)}: the stages' public progress "
                           "changed, update bench/progress.py")
    stages, previous = {}, run_start
    for name, end in sorted(ended.items(), key=lambda kv: kv[1]):
        start = started.get(name, previous)
        stages[name] = {"seconds": round(end - start, 3), "start": start, "end": end}
        previous = end
    if checked:
        end = max(checked)
        stages["checks"] = {"seconds": round(end - ended["synthetic"], 3),
                            "start": ended["synthetic"], "end": end, "each": each}
    return stages


def dg_key(stage: str):
    import dagster as dg

    return dg.AssetKey(["dataset", stage])
