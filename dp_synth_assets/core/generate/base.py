"""What the `generate` facade and the engine modules share: the cost estimate record, the error a
pre-fit check raises, and how many units of a fit run at once. A leaf of `generate` (the engine
modules import it, never the facade, so the facade can load them by name)."""

import os
from dataclasses import dataclass


class ModelTooLarge(ValueError):
    """An engine's pre-fit check refused the selection (nothing was allocated)."""


@dataclass(frozen=True)
class Estimate:
    """An engine's predicted fitting time and peak memory on one selection, made before anything
    is allocated; `feasible` when both are within `model.max_seconds` / `model.max_memory_mb` and
    the engine's own conditions hold; `why` says what the numbers were computed from."""

    engine: str
    feasible: bool
    seconds: float
    memory_mb: float
    why: str

    def to_dict(self) -> dict:
        return {"engine": self.engine, "feasible": self.feasible,
                "seconds": round(self.seconds, 1), "memory_mb": round(self.memory_mb, 1),
                "why": self.why}


def budget_text(settings) -> str:
    """The budget an estimate is judged against, as its `why` quotes it."""
    return f"(budget {settings.max_seconds:g} s, {settings.max_memory_mb:g} MB)"


def within_budget(seconds: float, memory_mb: float, settings) -> bool:
    """Whether a fit of `seconds` and `memory_mb` stays within `model.max_seconds` and
    `model.max_memory_mb`."""
    return seconds <= settings.max_seconds and memory_mb <= settings.max_memory_mb


def multiprocess_executor(parallel_units: bool, settings) -> bool:
    """Whether the dataset's job runs on Dagster's multiprocess executor: `model.executor`, or
    for `auto` when the fit has units to run in parallel (`parallel_units`: the engine declares
    `PARALLEL_UNITS`) or `model.workers` > 1."""
    if settings.executor != "auto":
        return settings.executor == "multiprocess"
    return parallel_units or (settings.workers or 1) > 1


def steps_at_once(parallel_units: bool, settings, cores: int | None = None) -> int:
    """How many steps, hence units of a fit, run at once: `model.workers` (default: the cores)
    under the multiprocess executor (`automation.build_job` sets it as `max_concurrent`), else 1
    (one process, unit after unit)."""
    if multiprocess_executor(parallel_units, settings):
        return settings.workers or cores or os.cpu_count() or 1
    return 1
