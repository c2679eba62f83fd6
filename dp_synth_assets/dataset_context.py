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
from dataclasses import dataclass, replace

import dagster as dg

from .artifacts import synthetic_table
from .budget import DatasetBudget
from .core import family
from .core.config import DatasetSpec, ParentSpec
from .core.relational import CHILDREN, PARENT_PREFIX
from .naming import Names
from .private_log import private_step

PRIVATE = {"privacy": "private"}
# the warehouse schema of a family's private views (a source may not be in `private`)
VIEWS = "dp_synth_family"
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
    relation: "Relation | None" = None

    @property
    def ledger_dataset(self) -> str:
        """The dataset whose ledger entries this dataset's runs reserve and charge: its own, or
        its family's parent (one budget per family: docs/relational.md)."""
        return self.relation.parent if self.relation is not None else self.dataset

    @property
    def ledger_budget(self) -> DatasetBudget:
        """What this dataset's private stages reserve and charge (`core.family.ledger_budget`
        in a family, the same whatever d_in the child's charges are at), else
        `budget`."""
        return self.relation.ledger_budgets[self.dataset] if self.relation else self.budget

    @property
    def unit_budget(self) -> DatasetBudget:
        """The budget the dataset's privacy unit stands against (runs left, spent, limit): in a
        family, the family's (the parent's `privacy:`), else `budget`."""
        return self.relation.family_budget if self.relation is not None else self.budget

    def charge(self, charge: Callable) -> Callable:
        """A stage's `charge` as this dataset's mechanisms must call it: at d_in =
        k on a family's child side, the children a family has in the view its stages read
        (`Relation.d_in`, `core.family.side_charge`)."""
        if self.relation is None or self.relation.role(self.dataset) != "child":
            return charge
        return family.side_charge(charge, self.relation.d_in, child=True)

    def at_model_children(self, k: int) -> "DatasetContext":
        """This child's context when its stages read `k` children per family
        (`family.model_children`): the view they read holds at most k (`Relation.model_view`),
        its mechanisms are calibrated on `family.split_budget` at d_in = k and charged at k.
        What it reserves (`ledger_budget`) does not depend on k. Its marginal table is named
        by k (`<table>_k<k>`): counts made at another k are never read as this k's."""
        rel = self.relation
        side = family.split_budget(rel.family_budget, DatasetBudget.of(self.spec), rel.child_share,
                                   k, child=True)
        return replace(self, budget=side, table=f"{self.table}_k{int(k)}",
                       relation=replace(rel, model_children=int(k)))

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


@dataclass(frozen=True)
class Relation:
    """A family as the Dagster definitions of its two datasets see it (docs/relational.md):
    `parent` and `child` dataset names, the child's `parent:` declaration (`spec`), their
    entries as declared (`sources`: what the `source` assets observe and the views read), the
    private views the stages read (`family_view`: each parent with its bounded `children`
    count; `bounded_view`: each kept child joined with its parent's `joined` columns), the
    family's budget (the parent's `privacy:`) and what each side reserves and charges
    (`ledger_budgets`, by dataset) under the parent's ledger entry."""

    parent: str
    child: str
    spec: ParentSpec
    sources: dict
    family_view: str
    bounded_view: str
    joined: tuple[str, ...]
    family_budget: DatasetBudget
    ledger_budgets: dict
    upstreams: dict
    child_share: float = family.CHILD_SHARE
    # children per family the child's stages read (`family.model_children`); None: max_children
    model_children: int | None = None

    def role(self, dataset: str) -> str:
        return "parent" if dataset == self.parent else "child"

    @property
    def parents_view(self) -> str:
        """The private view of one parent row per key (`relational.unique_parents_sql`), which
        the two other views read."""
        return f"{VIEWS}.{self.parent}_parents"

    @property
    def model_view(self) -> str:
        """The private view the child's stages read: the bounded children, at most `d_in` per
        family (the same draw as `bounded_view`, cut lower)."""
        return f"{VIEWS}.{self.child}_modeled"

    @property
    def d_in(self) -> int:
        """The child rows one family has in `model_view`: the d_in of the child's mechanisms."""
        return self.model_children or self.spec.max_children


def _side_spec(spec: DatasetSpec, columns: dict, view: str) -> DatasetSpec:
    """`spec` with `columns` and the private view `view` as its source (validated again, so every
    derived setting follows); its entry is the declared one."""
    entry = spec.model_dump(by_alias=True, exclude_unset=True)
    entry.update(columns={n: (c.model_dump(by_alias=True, exclude_unset=True)
                              if hasattr(c, "model_dump") else c) for n, c in columns.items()},
                 source={"table": view})
    side = DatasetSpec.model_validate(entry)
    side._entry = spec.entry
    return side


def family_contexts(parent: str, parent_spec: DatasetSpec, child: str, child_spec: DatasetSpec,
                    names: Names, child_share: float = family.CHILD_SHARE
                    ) -> tuple[DatasetContext, DatasetContext]:
    """The contexts of a family's two datasets (`Relation`): the parent synthesized over its
    columns and its bounded `children` count from the family view, the child over its columns
    and its parent's declared ones (`family.joined_columns`) from the bounded child view, each
    with the share of the family's budget `family.split_budget` gives it (calibration) and
    `family.ledger_budget` what it charges, both under the parent's ledger entry."""
    rel = child_spec.parent
    family_view, bounded_view = f"{VIEWS}.{parent}_family", f"{VIEWS}.{child}_bounded"
    parent_side = _side_spec(parent_spec, {**parent_spec.columns, CHILDREN: family.children_column(
        rel.max_children)}, family_view)
    joined = family.joined_columns(parent_spec.columns)
    child_side = _side_spec(child_spec, {**child_spec.columns, **joined},
                            f"{VIEWS}.{child}_modeled")
    budget = DatasetBudget.of(parent_side)
    sides = {parent: (parent_side, 1 - child_share, 1), child: (child_side, child_share,
                                                                   rel.max_children)}
    calibrated = {n: family.split_budget(budget, DatasetBudget.of(s), share, d, child=n == child)
                  for n, (s, share, d) in sides.items()}
    charged = {n: family.ledger_budget(budget, DatasetBudget.of(s), share, child=n == child)
               for n, (s, share, d) in sides.items()}
    base = {parent: DatasetContext.of(parent, parent_spec, names),
            child: DatasetContext.of(child, child_spec, names)}
    relation = Relation(parent, child, rel, {parent: parent_spec, child: child_spec},
                        family_view, bounded_view,
                        tuple(n[len(PARENT_PREFIX):] for n in joined), budget, charged,
                        {n: c.upstream for n, c in base.items()}, child_share)
    return tuple(replace(base[n], spec=sides[n][0], budget=calibrated[n], relation=relation)
                 for n in (parent, child))


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
