"""What every Dagster definition of one dataset shares: `DatasetContext`, built once per dataset
by the factory (factory.py) and handed to each stage function of the asset factory
(pipeline.py, model.py, utility_report.py), to the checks (checks/asset_checks.py), to the
schedule and the source sensor (automation.py) and to the budget sensor (current_budget.py).
It is a frozen record of facts derived from the entry and the naming only (no I/O, nothing
private): the dataset's name, its spec, `naming.Names`, its `DatasetBudget`, the names of its
private encoded view and marginal table and of its synthetic table, and the asset its first
stage depends on.

`Stage` is one stage of a dataset's stage op (`pipeline.stage_asset`): its asset's spec, its
compute function bound to the context, and the checks of its asset.
"""

from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from .artifacts import synthetic_table
from .budget import DatasetBudget
from .core.config import DatasetSpec
from .naming import Names
from .private_log import private_step

PRIVATE = {"privacy": "private"}
PUBLIC = {"privacy": "public"}


@dataclass(frozen=True)
class DatasetContext:
    """One dataset as its Dagster definitions see it (module docstring). `view` and `table`: the
    private encoded view and marginal table in the warehouse (`private.<dataset>_encoded`,
    `private.<dataset>_marginals`); `synthetic`: the synthetic table (`synthetic.<dataset>`);
    `upstream`: the asset the first stage depends on, the host's asset named by
    `source.asset`, else the dataset's own observable `source` asset."""

    dataset: str
    spec: DatasetSpec
    names: Names
    budget: DatasetBudget
    view: str
    table: str
    synthetic: str
    upstream: dg.AssetKey

    @classmethod
    def of(cls, dataset: str, spec: DatasetSpec, names: Names = Names()) -> "DatasetContext":
        upstream = (dg.AssetKey(list(spec.source.asset)) if spec.source.asset is not None
                    else names.key(dataset, "source"))
        return cls(dataset, spec, names, DatasetBudget.of(spec), f"private.{dataset}_encoded",
                   f"private.{dataset}_marginals", synthetic_table(dataset), upstream)

    def key(self, stage: str) -> dg.AssetKey:
        """The asset key of one of the dataset's stages, `[*key_prefix, dataset, stage]`."""
        return self.names.key(self.dataset, stage)

    def asset_spec(self, stage: str, zone: dict[str, str], **kwargs) -> dg.AssetSpec:
        """The `AssetSpec` of one of the dataset's stages (`Names.spec`)."""
        return self.names.spec(self.dataset, stage, zone, **kwargs)


StageFunction = Callable[..., dg.MaterializeResult]  # (ctx, context, warehouse, ledger)


@dataclass(frozen=True)
class Stage:
    """One stage of a dataset's chain: its asset's spec and its compute function, called as
    `run(context, warehouse=..., ledger=...)` and returning the stage's `MaterializeResult`;
    optionally the checks of its asset (`check_specs`) and the function that yields their
    results, `check(context, warehouse=...)`, run right after it."""

    spec: dg.AssetSpec
    run: Callable[..., dg.MaterializeResult]
    check_specs: tuple[dg.AssetCheckSpec, ...] = ()
    check: Callable | None = None


def bind(ctx: DatasetContext, stage: str, fn: StageFunction, private: bool) -> Callable:
    """The stage function `fn(ctx, context, warehouse, ledger)` as a `Stage.run`; a stage that
    reads private data (`private`) runs under `private_step` (private_log.py): its failures are
    generic in public and detailed in the owner-only private log."""
    def run(context, warehouse, ledger=None) -> dg.MaterializeResult:
        return fn(ctx, context, warehouse, ledger)

    run.__name__ = run.__qualname__ = stage
    return private_step(ctx.dataset, stage)(run) if private else run
