"""When an automatic resynthesis may start, with no Dagster in it
(docs/decisions/0006-budget-aware-automation.md).

Two gates, besides the trigger (a new version of the source, or a cron tick), decide whether
automation may start a run of a dataset: `interval_passed` (at least `min_interval` since the
last synthesis began) and the ledger's own test that one more run fits
(`PrivacyLedger.can_cover`: `BudgetStatus.runs_left >= 1` with reservations of dead runs counted
as released, and the run's extra delta within the limit's). Both read only public figures (a
timestamp of the event log, the ledger's sums), so a skip reveals nothing about the source's
rows. The run still reserves its budget in the ledger, so a race between a gate's decision and
a run can never overspend.
"""


def interval_passed(last_synthesis: float | None, now: float, min_interval_seconds: float) -> bool:
    """`now - last_synthesis >= min_interval_seconds` (unix seconds); True when never run."""
    return last_synthesis is None or now - last_synthesis >= min_interval_seconds
