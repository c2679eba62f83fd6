"""The process's one ephemeral Great Expectations context, and the lock its users take turns on.

GX is imported on first use only. The context is created with analytics and progress bars off,
kept for the process and re-created after a fork; nothing is ever written to disk by it (no gx/
folder). GX's in-memory stores are not documented as thread-safe, so every use holds `LOCK`.
"""

import os
import threading
from typing import Any

LOCK = threading.RLock()
_CONTEXT: Any = None
_CONTEXT_PID: int | None = None


def quiet_environment() -> None:
    """Turn GX's usage statistics off for this process (before GX is imported)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


def context() -> Any:
    """The process's ephemeral GX context, created on first use with analytics and progress
    bars off, and without its config's YAML copy on each change (it is never read). Re-created
    after a fork (a child never shares its parent's context object)."""
    global _CONTEXT, _CONTEXT_PID
    if _CONTEXT is not None and _CONTEXT_PID == os.getpid():
        return _CONTEXT
    quiet_environment()
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    ctx.enable_analytics(False)
    # on every add or delete of a data source or store (four per suite run, four per Data Docs
    # page) GX serializes the context's whole config to YAML into the ephemeral context's
    # in-memory variables store, which nothing reads (the context keeps its config object);
    # ~0.1 s per check on a busy machine. Nothing is persisted in this mode, so skip it (GX
    # 1.24 internals: without the method nothing is skipped; docs/great_expectations.md, Cost)
    if hasattr(ctx, "_save_project_config"):
        ctx._save_project_config = lambda: None
    _CONTEXT, _CONTEXT_PID = ctx, os.getpid()
    return ctx
