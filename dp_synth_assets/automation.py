"""Schedules and resynthesis on source change, both budget-aware
(docs/decisions/0006-budget-aware-automation.md).

Each dataset gets a job that materializes its pipeline (`build_job`). A dataset whose source is
a host's asset is automated declaratively (conditions.py); a dataset reading an external table
gets a schedule (`schedule:`, cron) and, with `on_source_change: resynthesize`, a sensor on the
source's version. Both skip, with the reason shown in the UI, when the ledger cannot cover a
whole run (the sensor also inside `min_interval`); no cursor or run key holds anything made from
the source's content, and the run itself still reserves its budget, so a race cannot overspend.
"""

import json
import multiprocessing
import time

import dagster as dg

from dp_synth_assets.resources.ledger import LedgerResource
from dp_synth_assets.resources.warehouse import WarehouseResource

from .budget import BudgetStatus
from .conditions import resynthesis_condition, with_first_stage
from .core.budget import fits
from .dataset_context import DatasetContext
from .naming import Names
from .private_log import log_privately, private_log_path
from .source_access import source_version


def job_name(dataset: str, names: Names = Names()) -> str:
    """The name of `dataset`'s synthesis job, `names.op_name(dataset, "synthesis")`."""
    return names.op_name(dataset, "synthesis")


# what the multiprocess executor's fork server imports before it forks a step: Dagster's executor
# module first (as Dagster does), Dagster, and dp-synth's factory with what it imports (numpy,
# pandas, DuckDB, pyarrow); a module that fails to import is skipped by the server, and the
# step imports it itself. The fit's libraries (JAX) are not preloaded: a step imports them after
# the fork, so no process forks with their threads started.
PRELOAD = ("dagster._core.executor.multiprocess", "dagster", "dp_synth_assets.factory")


def build_job(ctx: DatasetContext, assets: list):
    """The job of the dataset of `ctx` over `assets` (its materializable assets: not its
    observable `source` nor its observed `budget`). The job declares its own executor,
    so dp-synth sets none on the code location it joins: under `generate.multiprocess`
    (`model.executor`; by default when `generator: parallel_pgm` or `model.workers` > 1)
    Dagster's multiprocess executor, at most `generate.concurrency` steps at a time, so the
    fit's units (steps of the `model` graph) run in parallel processes and each step's memory
    is returned when it ends; otherwise the in-process executor, where the stages, a chain,
    skip each step's start-up. Where the platform has it, the multiprocess executor starts its
    steps by `forkserver`, from a server that imported Dagster and dp-synth once (`PRELOAD`),
    instead of Dagster's default `spawn`, where every step imports them again. On Kubernetes or
    Celery, give the job that executor (docs/deploy.md)."""
    from .core.generate import concurrency, multiprocess

    spec = ctx.spec
    executor = dg.in_process_executor
    if multiprocess(spec.generator, spec.model):
        config = {"max_concurrent": concurrency(spec.generator, spec.model)}
        if "forkserver" in multiprocessing.get_all_start_methods():
            config["start_method"] = {"forkserver": {"preload_modules": list(PRELOAD)}}
        executor = dg.multiprocess_executor.configured(config)
    return dg.define_asset_job(
        job_name(ctx.dataset, ctx.names),
        selection=dg.AssetSelection.assets(*assets),
        description=f"Materialize the whole synthesis pipeline of {ctx.dataset!r}.",
        executor_def=executor,
    )


FIRST_STAGE = "preprocessed"


def resynthesis_assets(ctx: DatasetContext, assets: list,
                       ledger: LedgerResource) -> tuple[list, list[dg.AssetKey]]:
    """`assets` (the dataset's materializable assets) with dp-synth's default automation
    (conditions.py): the gated resynthesis condition on the first stage and "requested with the
    first stage" on every later one, and the keys that now carry a condition (for the
    automation sensor). Unchanged, with no keys, when the spec asks for neither
    `on_source_change: resynthesize` nor a `schedule`."""
    first = ctx.key(FIRST_STAGE)
    condition = resynthesis_condition(ctx, first, ledger)
    if condition is None:
        return assets, []
    follow = with_first_stage(first)
    keys: list[dg.AssetKey] = []

    def automate(asset_spec: dg.AssetSpec) -> dg.AssetSpec:
        keys.append(asset_spec.key)
        return asset_spec.replace_attributes(
            automation_condition=condition if asset_spec.key == first else follow)

    return dg.map_asset_specs(automate, assets), keys


def budget_skip_reason(ledger: LedgerResource, ctx: DatasetContext) -> str | None:
    """Why a new run of the dataset of `ctx` cannot be covered by the ledger, or None when it
    can. A ledger that fails its tamper checks raises LedgerError (the schedule or sensor tick
    fails with its message)."""
    dataset, spec, budget = ctx.dataset, ctx.spec, ctx.budget
    led = ledger.ledger()
    if led.can_cover(dataset, budget.run_rho, budget.limit_rho, budget.run_delta_extra,
                     budget.limit_delta_extra):
        return None
    kept = led.limit(dataset)
    if kept is not None and not (fits(budget.limit_rho, kept[0])
                                 and fits(budget.limit_delta_extra, kept[1])):
        return (f"the privacy limit of {dataset!r} in {spec.entry} is above the limit the ledger "
                f"keeps for its data (rho {kept[0]:.6g}): record the new limit with `python -m "
                f"dp_synth_assets.resources.ledger raise-limit {dataset} --reason '<why>'`, or "
                f"set the entry back")
    left = BudgetStatus.of(led.summary(dataset), budget).remaining_rho
    group = spec.privacy.budget_group
    return (f"privacy budget of {dataset!r}"
            f"{f' (budget group {group!r})' if group else ''} cannot cover a run: it needs "
            f"epsilon {spec.privacy.epsilon} (rho {budget.run_rho:.6g}), "
            f"rho {left:.6g} is left of the limit; raise privacy.limit.epsilon of {spec.entry}"
            f"{' and of every entry of the group' if group else ''} to continue")


def build_schedule(ctx: DatasetContext, job) -> dg.ScheduleDefinition:
    """The dataset's `schedule:` (cron) launching `job`, skipped when the budget cannot cover a
    run (`budget_skip_reason`)."""
    dataset, names = ctx.dataset, ctx.names

    @dg.schedule(name=names.op_name(dataset, "schedule"), cron_schedule=ctx.spec.schedule,
                 job=job, required_resource_keys=names.resource_keys("ledger"),
                 description=f"Resynthesize {dataset!r} on its cron schedule, budget permitting.")
    @names.bind("ledger")
    def _schedule(context: dg.ScheduleEvaluationContext, ledger: LedgerResource):
        reason = budget_skip_reason(ledger, ctx)
        if reason:
            return dg.SkipReason(reason)
        return dg.RunRequest(tags={"dp_synth/trigger": "schedule"})

    return _schedule


def build_source_sensor(ctx: DatasetContext, target) -> dg.SensorDefinition:
    """The source-change sensor of the dataset of `ctx` (module docstring). What it launches,
    `target`: the dataset's job, or (when it has none) an `AssetSelection` of its materializable
    assets, which Dagster runs in the location's implicit asset job (no job of its own to
    resolve and snapshot when the location loads). Cursor:
    {"version": the opaque version id of the source last synthesized, "requested_at": unix time
    of that request}. Run key: `<dataset>-<version>-<previous requested_at>`."""
    dataset, spec, names = ctx.dataset, ctx.spec, ctx.names
    aimed = ({"asset_selection": target} if isinstance(target, dg.AssetSelection)
             else {"job": target})

    @dg.sensor(name=names.op_name(dataset, "source_change"), **aimed, minimum_interval_seconds=30,
               required_resource_keys=names.resource_keys("warehouse", "ledger"),
               description=f"Resynthesize {dataset!r} when its source changes, honouring "
                           f"min_interval ({spec.min_interval}) and the privacy budget.")
    @names.bind("warehouse", "ledger")
    def _sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource,
                ledger: LedgerResource):
        cursor = json.loads(context.cursor) if context.cursor else {}
        if "version" in cursor:
            # the source is read only when a run could follow: not inside min_interval, not
            # while the ledger cannot cover a run (a change then stays pending: the cursor
            # keeps the version last synthesized)
            wait = cursor["requested_at"] + spec.min_interval_seconds - time.time()
            if wait > 0:
                return dg.SkipReason(f"next resynthesis allowed in {wait:.0f}s (min_interval "
                                     f"{spec.min_interval}); the source is not read before")
            reason = budget_skip_reason(ledger, ctx)
            if reason:
                return dg.SkipReason(f"the {reason}; the source is not read until a run fits")
        try:
            # a run holding the warehouse's write lock makes this tick skip, not time out
            current = source_version(warehouse, spec, dataset, lock_timeout_seconds=10)
        except Exception as e:  # noqa: BLE001 - a busy or missing source is a skip, not a crash
            # the exception's text can quote a value of the source: it goes to the private log
            log = private_log_path(warehouse, dataset)
            cannot = (f"cannot read the source of {dataset!r} (it is missing, busy or does not "
                      f"match its declared spec)")
            message = f"{cannot}; the data owner finds the details in the private log {log}"
            unlogged = log_privately(log, dataset, "source (sensor)", "-", e, message)
            return dg.SkipReason(message if unlogged is None else f"{cannot}. {unlogged}")
        if "version" not in cursor:
            context.update_cursor(json.dumps({"version": current, "requested_at": 0}))
            return dg.SkipReason("first evaluation: recorded the source's version")
        if current == cursor["version"]:
            return dg.SkipReason("source unchanged")
        context.update_cursor(json.dumps({"version": current, "requested_at": time.time()}))
        # The run key must be new for every request: Dagster drops a RunRequest whose key an
        # earlier run of this sensor used. The version is new for every change (even back to an
        # earlier content), and the previous request time keeps the key deterministic for a
        # retried tick (same cursor, same key).
        return dg.RunRequest(run_key=f"{dataset}-{current}-{cursor['requested_at']:.3f}",
                             tags={"dp_synth/trigger": "source_change"})

    return _sensor
