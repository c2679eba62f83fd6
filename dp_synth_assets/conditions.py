"""Budget-aware declarative automation of a dataset
(docs/decisions/0006-budget-aware-automation.md).

dp-synth's default `AutomationCondition` on a dataset's first stage is a trigger (a new source
materialization or a cron tick, pending until handled) gated by `MinIntervalPassed` (the
minimum interval since the last synthesis) and `BudgetCoversRun` (the ledger covers one more
run); every later stage is "requested with" the first, so one tick launches the chain as one
run, and no run is launched that the ledger would refuse. The decisions are `core.resynthesis`
and the ledger's `can_cover`. The conditions are evaluated by an automation condition sensor in
the code location. The condition tree and its labels: 0006, "As implemented"."""

import dagster as dg

from dp_synth_assets.resources.ledger import LedgerError, LedgerResource

from .core.budget import DatasetBudget
from .core.resynthesis import interval_passed
from .dataset_context import DatasetContext

BUDGET_LABEL = "privacy budget covers one more run"
SOURCE_LABEL = "source has a new materialization"


def interval_label(min_interval: str) -> str:
    """The label of the minimum-interval gate in the automation history."""
    return f"min_interval {min_interval} passed since the last synthesis"


def cron_label(cron: str) -> str:
    """The label of the cron trigger in the automation history."""
    return f"cron tick {cron} passed"


class _Gate(dg.AutomationCondition):
    """A condition true on its whole candidate subset or on none of it (dp-synth's assets are
    unpartitioned), decided by `passes`; never evaluated on an empty candidate subset."""

    label: str = ""

    @property
    def requires_cursor(self) -> bool:
        return False

    @property
    def name(self) -> str:
        return self.label

    @property
    def description(self) -> str:
        return self.label

    def get_label(self) -> str | None:
        return self.label

    def passes(self, context: dg.AutomationContext) -> bool:
        raise NotImplementedError

    def evaluate(self, context: dg.AutomationContext) -> dg.AutomationResult:
        if context.candidate_subset.is_empty or not self.passes(context):
            return dg.AutomationResult(context, context.get_empty_subset())
        return dg.AutomationResult(context, context.candidate_subset)


class MinIntervalPassed(_Gate):
    """True when at least `min_interval` has passed, at the tick's evaluation time, since the
    last materialization of `first_stage` (the start of the last synthesis), or when it has none."""

    def __init__(self, first_stage: dg.AssetKey, min_interval: str, seconds: float):
        self.first_stage, self.seconds = first_stage, seconds
        self.label = interval_label(min_interval)

    def passes(self, context: dg.AutomationContext) -> bool:
        event = context.asset_graph_view.instance.get_latest_materialization_event(self.first_stage)
        last = event.timestamp if event is not None else None
        return interval_passed(last, context.evaluation_time.timestamp(), self.seconds)


class BudgetCoversRun(_Gate):
    """True when the ledger can take one more run of `budget` on `dataset`'s privacy unit: the
    very test the run's reservation will apply (`PrivacyLedger.can_cover`, i.e.
    `BudgetStatus.runs_left >= 1` with stale reservations of dead runs counted as released, so
    a crashed run cannot hold automation back forever). A ledger that fails its tamper checks
    counts as not covering (the tick skips; its message goes to the sensor's log)."""

    label = BUDGET_LABEL

    def __init__(self, dataset: str, budget: DatasetBudget, ledger: LedgerResource):
        self.dataset, self.budget, self.ledger = dataset, budget, ledger

    def passes(self, context: dg.AutomationContext) -> bool:
        b = self.budget
        try:
            return self.ledger.ledger().can_cover(self.dataset, b.run_rho, b.limit_rho,
                                                  b.run_delta_extra, b.limit_delta_extra)
        except LedgerError as e:  # public: paths, row counts and hashes
            context.log.warning(f"{self.dataset}: the ledger cannot be used: {e}")
            return False


def source_updated() -> dg.AutomationCondition:
    """The first stage's upstream (the host's asset, or dp-synth's observed `source`) has a new
    materialization or will be materialized this tick, since the first stage was last handled."""
    return dg.AutomationCondition.any_deps_updated().since_last_handled().with_label(SOURCE_LABEL)


def cron_passed(cron: str) -> dg.AutomationCondition:
    """The cron trigger: a tick of `cron` passed since the first stage was last handled."""
    return (dg.AutomationCondition.cron_tick_passed(cron).since_last_handled()
            .with_label(cron_label(cron)))


def resynthesis_condition(ctx: DatasetContext, first_stage: dg.AssetKey,
                          ledger: LedgerResource) -> dg.AutomationCondition | None:
    """The default condition of the first stage of the dataset of `ctx` (module docstring): the
    triggers its spec asks for (`on_source_change: resynthesize`, `schedule`), gated; None when
    it asks for neither."""
    dataset, spec = ctx.dataset, ctx.spec
    triggers = ([source_updated()] if spec.on_source_change == "resynthesize" else []) + (
        [cron_passed(spec.schedule)] if spec.schedule else [])
    if not triggers:
        return None
    trigger = triggers[0] if len(triggers) == 1 else triggers[0] | triggers[1]
    return (trigger
            & ~dg.AutomationCondition.in_progress()
            & ~dg.AutomationCondition.any_deps_in_progress()
            & MinIntervalPassed(first_stage, spec.min_interval, spec.min_interval_seconds)
            & BudgetCoversRun(dataset, ctx.budget, ledger)
            ).with_label(f"dp-synth resynthesis of {dataset}")


def with_first_stage(first_stage: dg.AssetKey) -> dg.AutomationCondition:
    """The condition of every later stage: requested when one of its upstream stages is
    requested on this tick, so the chain from `first_stage` is requested whole, in one run."""
    return dg.AutomationCondition.any_deps_match(
        dg.AutomationCondition.will_be_requested()
    ).with_label(f"requested with {first_stage.to_user_string()}")


def automation_sensor(name: str, keys: list[dg.AssetKey],
                      target: dg.AssetSelection | None = None
                      ) -> dg.AutomationConditionSensorDefinition:
    """The automation condition sensor that evaluates dp-synth's conditions on `keys`, in the
    code location (they are not serializable for the daemon). `target`: a selection of `keys`
    to use instead of the plain one (`source_check.CheckedSources`, which Dagster resolves when
    the code location loads). With no `keys` the sensor only carries that check: it is created
    stopped, with nothing to evaluate."""
    return dg.AutomationConditionSensorDefinition(
        name, target=target if target is not None else dg.AssetSelection.assets(*keys),
        use_user_code_server=True, run_tags={"dp_synth/trigger": "automation"},
        default_status=(dg.DefaultSensorStatus.RUNNING if keys
                        else dg.DefaultSensorStatus.STOPPED),
        description="Resynthesize dp-synth's datasets when their source changes or their cron "
                    "ticks, when min_interval has passed and the privacy budget covers a run."
                    if keys else "Checks, when the code location loads, that every dp-synth "
                    "source asset is defined; no dp-synth asset is automated.")
