"""Progress lines of long private work: which of its steps a line reports.

A private stage's progress line states public facts only: how many of its steps (queries,
marginals, mechanisms) are done out of how many, both functions of the spec and the plan. It
never states an elapsed time or a rate (the work's duration depends on the rows); Dagster
timestamps each line, which docs/privacy-perimeter.md lists as public.
"""

PROGRESS_LINES = 10  # about this many lines for the steps of one piece of work


def due(done: int, total: int, lines: int = PROGRESS_LINES) -> bool:
    """Whether the `done`-th of `total` steps (counted from 1) is one a progress line reports:
    about `lines` of them, evenly spread, the last always (every step when there are fewer)."""
    return done >= total or done * lines // total > (done - 1) * lines // total
