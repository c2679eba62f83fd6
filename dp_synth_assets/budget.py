"""How a Dagster run meets the privacy ledger
(docs/decisions/0004-privacy-ledger.md, docs/decisions/0005-ledger-hash-chain.md).

A run reserves, before its first read of private data, the rho of every spending stage it will
execute; each mechanism charges its spend as it draws noise; the last private stage of the run (or
the first one to fail) releases the unspent remainder. A run that executes only public-zone assets
(model, synthetic, checks) never touches the ledger. Two public mirrors of the ledger's head (the
spending materializations' metadata and a record per privacy unit in Dagster's instance,
`unit_head_key`) let a run refuse, before anything is spent, a ledger that lost spending; how
they are written and why: "As implemented: budget.py" in docs/decisions/0004-privacy-ledger.md.
"""

import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass

import dagster as dg

from dp_synth_assets.resources.ledger import (BudgetExceeded, LedgerError, LedgerSummary,
                                              PrivacyLedger)

from .core.budget import (DELTA_EXTRA_SHARE, PRIVATE_STAGES, STAGES, BudgetStatus,  # noqa: F401
                          DatasetBudget)
from .core.privacy import Spend
from .core.units import group_name


def run_asset_keys(context) -> set[dg.AssetKey] | None:
    """The asset keys this run materializes: the run's asset selection, or, for an in-process
    subset (`materialize(selection=...)`, which leaves the selection empty), the executable keys
    of its job; None when neither says."""
    selection = context.run.asset_selection
    if selection:
        return set(selection)
    try:
        return set(context.job_def.asset_layer.executable_asset_keys)
    except AttributeError:
        return None


def stages_in_run(context: dg.AssetExecutionContext, dataset: str) -> set[str]:
    """The stages of `dataset` this run materializes (all of them when the run cannot say)."""
    selection = run_asset_keys(context)
    if not selection:
        return {"source", *STAGES}
    parent = dataset_path(context)
    return {key.path[-1] for key in selection if key.path[:-1] == parent}


def dataset_path(context) -> list[str]:
    """`[*key_prefix, dataset]` of the dataset whose stage op runs (every key of the op is
    `[*key_prefix, dataset, stage]`)."""
    return list(next(iter(context.assets_def.keys)).path[:-1])


def ledger_metadata(ledger: PrivacyLedger, dataset: str, budget: DatasetBudget, run_id: str) -> dict:
    """Public metadata: the spent / reserved / remaining budget of the dataset's privacy unit
    (shared by its budget group), this run's charges, and the ledger's head (row count and hash
    of the last row), a mirror against which a truncated or swapped ledger can be recognized.
    The head hash starts from a secret drawn with the ledger, so it cannot be tested against
    guessed ledger contents."""
    s = ledger.summary(dataset)
    status = BudgetStatus.of(s, budget)
    rows, head = ledger.head()
    return {
        **_standing(s, budget, status),
        "privacy/ledger_rows": dg.MetadataValue.int(rows),
        "privacy/ledger_head": dg.MetadataValue.text(head),
        "privacy/epsilon_reserved": dg.MetadataValue.float(shown(budget.epsilon(s.reserved_rho))),
        "privacy/rho_remaining": dg.MetadataValue.float(status.remaining_rho),
        "privacy/this_run_rho_by_stage": dg.MetadataValue.json(
            ledger.spent_by_run(dataset, run_id)),
    }


def _standing(s: LedgerSummary, budget: DatasetBudget, status: BudgetStatus) -> dict:
    """The metadata both a run's ledger entries and the budget's standing publish: the unit's
    budget group, the epsilons spent, remaining and limit (rounded by `shown`), rho spent,
    the extra delta spent and how they compose."""
    group = group_name(s.unit)
    return {
        **({"privacy/budget_group": dg.MetadataValue.text(group)} if group else {}),
        "privacy/epsilon_spent": dg.MetadataValue.float(shown(budget.epsilon(s.spent_rho))),
        "privacy/epsilon_remaining": dg.MetadataValue.float(shown(status.remaining_epsilon)),
        "privacy/epsilon_limit": dg.MetadataValue.float(shown(budget.epsilon(budget.limit_rho))),
        "privacy/rho_spent": dg.MetadataValue.float(s.spent_rho),
        "privacy/delta_extra_spent": dg.MetadataValue.float(s.spent_delta_extra),
        "privacy/composition": dg.MetadataValue.text(composition_note(budget.delta)),
    }


EPSILON_DIGITS = 3  # significant digits of every published epsilon (rho is published exactly)


def shown(epsilon: float) -> float:
    """`epsilon` rounded to `EPSILON_DIGITS` significant digits, for display: the exact figure
    is the rho beside it, from which the conversion drifts in its last float bits."""
    return float(f"{epsilon:.{EPSILON_DIGITS}g}")


def composition_note(delta: float) -> str:
    """The one sentence that says why the epsilon figures do not add up (Bun-Steinke 2016)."""
    return (f"Epsilons do not add up, rho does: runs compose under zCDP by adding their rho, and "
            f"each epsilon shown is its own rho converted at delta {delta:g}, so spent and "
            f"remaining epsilon need not sum to the limit.")


def budget_metadata(s: LedgerSummary, budget: DatasetBudget, run_epsilon: float,
                    run_delta: float) -> dict:
    """Public metadata of where a dataset's privacy unit stands against its lifetime limit, from
    the ledger's summary of the dataset (`PrivacyLedger.summary`) and its budget, as
    plottable numbers: the (epsilon, delta) a run of the dataset spends, the share of the
    limit's rho spent, the runs of that run budget that still fit (`BudgetStatus.runs_left`;
    absent when a run spends no rho), the runs that have charged the unit (`runs_spent`, every
    dataset of a budget group counted), the extra delta spent and the epsilons rounded for
    display (`shown`), with the sentence on how they compose. Published by a finished synthesis
    (read after its spend) and by the budget sensor (current_budget.py) on each change. From the
    ledger and the limit only (budget figures are public)."""
    status = BudgetStatus.of(s, budget)
    used = min(1.0, max(0.0, s.spent_rho / budget.limit_rho)) if budget.limit_rho > 0 else 1.0
    runs_left = status.runs_left
    return {
        **_standing(s, budget, status),
        "privacy/run_epsilon": dg.MetadataValue.float(float(run_epsilon)),
        "privacy/run_delta": dg.MetadataValue.float(float(run_delta)),
        "privacy/budget_used_share": dg.MetadataValue.float(used),
        **({"privacy/runs_left": dg.MetadataValue.int(runs_left)} if runs_left is not None else {}),
        "privacy/runs_spent": dg.MetadataValue.int(len(s.runs)),
        "privacy/rho_limit": dg.MetadataValue.float(budget.limit_rho),
    }


class StageBudget:
    """The ledger as one stage of one run sees it: `charge(spend, **params)` records a spend."""

    def __init__(self, ledger: PrivacyLedger, dataset: str, run_id: str, stage: str,
                 budget: DatasetBudget):
        self.ledger, self.dataset, self.run_id, self.stage, self.budget = (
            ledger, dataset, run_id, stage, budget)

    def charge(self, spend: Spend, **params) -> None:
        try:
            self.ledger.charge(self.dataset, self.run_id, self.stage, spend, params)
        except BudgetExceeded as e:
            raise dg.Failure(description=str(e)) from None


def verify_published_head(context, ledger: PrivacyLedger, dataset: str) -> None:
    """Refuse a run whose ledger does not extend the ledger head this dataset's latest spending
    materializations published (`privacy/ledger_rows`, `privacy/ledger_head`): the public
    outputs prove that spending, so a ledger without it (deleted with its head file, replaced
    by an older copy or another ledger) must not start afresh."""
    for stage in reversed(PRIVATE_STAGES):
        event = context.instance.get_latest_materialization_event(
            dg.AssetKey([*dataset_path(context), stage]))
        if event is None or event.asset_materialization is None:
            continue
        metadata = event.asset_materialization.metadata
        rows, head = metadata.get("privacy/ledger_rows"), metadata.get("privacy/ledger_head")
        if rows is not None and head is not None:
            ledger.verify_published(int(rows.value), str(head.value),
                                    f"the metadata of {dataset}/{stage} (run {event.run_id})")
            return


def unit_head_key(unit: str) -> str:
    """The key of a privacy unit's ledger head in the instance's cursor storage."""
    return "dp_synth/ledger_head/" + hashlib.sha256(unit.encode()).hexdigest()[:32]


def record_unit_head(context, ledger: PrivacyLedger, dataset: str) -> None:
    """Keep the ledger's current head as the dataset's unit's record in the instance (module
    docstring). A failure to keep it is logged and the stage's own outcome stands: the next
    run's record catches up, and the materializations' metadata still mirror the head."""
    unit = ledger.units.get(dataset)
    if unit is None:
        return
    try:
        rows, head = ledger.head()
        if rows == 0:
            return
        context.instance.daemon_cursor_storage.set_cursor_values({unit_head_key(unit): json.dumps(
            {"rows": rows, "head": head, "unit": unit, "dataset": dataset,
             "run_id": context.run_id})})
    except Exception as e:  # noqa: BLE001 - an unreadable ledger is reported by the next run
        context.log.warning(f"The ledger head of dataset {dataset!r} could not be kept in "
                            f"Dagster's instance ({type(e).__name__}); the next run keeps it.")


def verify_unit_head(context, ledger: PrivacyLedger, dataset: str) -> None:
    """Refuse a run whose ledger does not extend the head the instance keeps for the dataset's
    unit (`record_unit_head`), whatever entry or key prefix recorded it."""
    unit = ledger.units.get(dataset)
    if unit is None:
        return
    key = unit_head_key(unit)
    text = context.instance.daemon_cursor_storage.get_cursor_values({key}).get(key)
    if not text:
        return
    kept = json.loads(text)
    ledger.verify_published(
        int(kept["rows"]), str(kept["head"]),
        f"Dagster's instance, for privacy unit {unit} (kept by dataset {kept['dataset']!r}, "
        f"run {kept['run_id']})")


@contextmanager
def private_stage(context: dg.AssetExecutionContext, ledger: PrivacyLedger, dataset: str,
                  stage: str, budget: DatasetBudget, run_plan: "RunPlan | None" = None):
    """Enter a private-zone stage: reserve the run's budget first if this is the run's first
    private stage, release the remainder when it is the last one or when anything fails.
    `run_plan`: what the run reserves and whether this stage is its last private one, when
    the run's private stages are not all the dataset's own (a family: `family_run_plan`)."""
    if run_plan is None:
        in_run = stages_in_run(context, dataset)
        private = [s for s in PRIVATE_STAGES if s in in_run]
        run_plan = RunPlan(budget.reservation(private),
                           sum(budget.stage_delta_extra(s) for s in private), bool(private),
                           not private or stage == private[-1])
    request, request_delta = run_plan.rho, run_plan.delta_extra
    private, last = run_plan.private, run_plan.last
    run_id = context.run_id
    if request > 0:
        try:
            verify_published_head(context, ledger, dataset)
            verify_unit_head(context, ledger, dataset)
            ledger.reserve(dataset, run_id, request, budget.limit_rho, request_delta,
                           budget.limit_delta_extra, delta=budget.delta)
        except (BudgetExceeded, LedgerError) as e:  # public: amounts, paths and row counts
            raise dg.Failure(description=str(e), metadata={"dataset": dataset}) from None
    try:
        yield StageBudget(ledger, dataset, run_id, stage, budget)
    except BaseException:
        release(context, ledger, dataset, run_id, f"failed in {stage}")
        if private:
            record_unit_head(context, ledger, dataset)
        raise
    if last:
        release(context, ledger, dataset, run_id, "run finished")
        if private:  # once per run: the head after its charges and its release
            record_unit_head(context, ledger, dataset)


@dataclass(frozen=True)
class RunPlan:
    """What a run reserves (`rho`, `delta_extra`) for its private stages under one ledger entry,
    whether it has any (`private`) and whether the stage entered is the last of them (`last`:
    it releases the remainder)."""

    rho: float
    delta_extra: float
    private: bool
    last: bool


def family_run_plan(context, sides, dataset: str, stage: str) -> RunPlan:
    """The `RunPlan` of a family's run under its parent's ledger entry: `sides` are (dataset
    name, stage -> its asset key, what it charges: a `DatasetBudget`) for the parent then the
    child; the run reserves, at its first private stage, what the private stages of both sides
    that it materializes can spend (so a run over the limit is refused before anything is
    drawn), and releases at the last of them."""
    selection = run_asset_keys(context)
    ordered, rho, delta_extra = [], 0.0, 0.0
    for name, key, budget in sides:
        private = [s for s in PRIVATE_STAGES if not selection or key(s) in selection]
        rho += budget.reservation(private)
        delta_extra += sum(budget.stage_delta_extra(s) for s in private)
        ordered += [(name, s) for s in private]
    return RunPlan(rho, delta_extra, bool(ordered),
                   not ordered or (dataset, stage) == ordered[-1])


def release(context, ledger: PrivacyLedger, dataset: str, run_id: str, reason: str) -> None:
    """Release the run's reservation; when the ledger cannot record it (locked past its
    timeout, unwritable), say so in the run's log and go on: the stage's own outcome stands,
    and the reservation stays open until a later reservation frees it as stale (its process
    gone, or no activity for `stale_after_seconds`). What was charged stays charged."""
    try:
        ledger.release(dataset, run_id, reason=reason)
    except (LedgerError, OSError) as e:
        context.log.error(
            f"The release of run {run_id}'s reservation for dataset {dataset!r} ({reason}) could "
            f"not be recorded: {e} The reservation stays open until a later run frees it as "
            f"stale (when this run's process has ended, or after "
            f"{ledger.stale_after_seconds:g} s without activity); nothing more is spent.")
