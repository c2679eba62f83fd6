"""When an automatic resynthesis may start, with no Dagster in it (DESIGN.md section 5).

Two gates, besides the trigger (a new version of the source, or a cron tick), decide whether
automation may start a run of a dataset:

- `interval_passed`: at least `min_interval` has passed since the last synthesis began (the
  last materialization of the dataset's first stage); a dataset never synthesized passes;
- `covers_one_run`: the ledger's privacy unit can take one more whole run, the test the
  ledger's own reservation applies: `BudgetStatus.runs_left >= 1` for rho (always true when a
  run spends no rho) and the run's extra delta within the limit's.

Both read only public figures (a timestamp of the event log, the ledger's sums), so a skip
reveals nothing about the source's rows. The run still reserves its budget in the ledger, so
a race between a gate's decision and a run can never overspend.
"""

from .budget import BudgetStatus, DatasetBudget, fits


def interval_passed(last_synthesis: float | None, now: float, min_interval_seconds: float) -> bool:
    """`now - last_synthesis >= min_interval_seconds` (unix seconds); True when never run."""
    return last_synthesis is None or now - last_synthesis >= min_interval_seconds


def covers_one_run(summary, budget: DatasetBudget) -> bool:
    """Whether the ledger summary of the dataset's unit (`ledger.LedgerSummary`) leaves room
    for one more run of `budget` (module docstring)."""
    runs_left = BudgetStatus.of(summary, budget).runs_left
    delta_extra = summary.spent_delta_extra + summary.reserved_delta_extra + budget.run_delta_extra
    return (runs_left is None or runs_left >= 1) and fits(delta_extra, budget.limit_delta_extra)
