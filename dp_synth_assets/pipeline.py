"""The asset factory: one select-measure-generate pipeline per dataset
(docs/decisions/0007-asset-graph.md).

`RUN` holds one module-level stage function per stage of `STAGES`,
`(ctx, context, warehouse, ledger) -> MaterializeResult`, and `SPEC` the `AssetSpec` of each;
`build_dataset_assets` binds them to the dataset's `DatasetContext` and wraps them in its stage
op (`stage_asset`). Each stage function is wiring around one function of `core/stages.py`.
Private-zone assets publish shapes only, never counts; stages that read private data run under
`private_step`; every stage after `preprocessed` refuses a plan made from another spec first.
Keys, tags and each stage's wiring: "As implemented: the asset factory" in that record.
"""

import functools
import json
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from pathlib import Path

import dagster as dg

from dp_synth_assets.resources.ledger import LedgerError, LedgerResource
from dp_synth_assets.resources.warehouse import WarehouseResource

from .artifacts import artifacts, holding
from .budget import (PRIVATE_STAGES, STAGES, budget_metadata, family_run_plan, ledger_metadata,
                     private_stage)
from .checks.asset_checks import check_synthetic, synthetic_check_specs
from .core import family, generate
from .core import stages
from .core.generate import multiprocess
from .core.config import PublicListError, with_public_categories
from .core.relational import bounded_children_sql, parents_sql, unique_parents_sql
from .core.scans import store_of
from .core.sql import ident, qualified, sql
from .core.synthesize import write_synthetic
from .infra.public_lists import read_public_lists
from .dataset_context import PRIVATE, PUBLIC, DatasetContext, Stage, StageFunction, bind
from .family_assets import child_synthetic, family_checks, parent_synthetic
from .model import build_model_asset, fit_model, model_spec
from .private_log import append_private_note, private_log_path, private_step
from .source_access import source_connection, source_version
from .writes import check_writes, warehouse_writes


# ------------------------------------------------------------------ a family's wiring


@contextmanager
def dataset_source(ctx: DatasetContext, warehouse: WarehouseResource):
    """`source_connection` of the dataset; in a family (docs/relational.md), with the family's
    private views made first (the bounded child view, then the family view over it,
    `core.relational`), over one parent row per key (`unique_parents_sql`: a duplicated key
    is never refused, so the keys' uniqueness decides nothing public)."""
    rel = ctx.relation
    with source_connection(warehouse, ctx.spec, ctx.dataset) as con:
        if rel is not None:
            parent, child = rel.sources[rel.parent], rel.sources[rel.child]
            con.execute(sql("create_schema", schema=qualified(rel.family_view.split(".")[0])))
            parents = qualified(rel.parents_view)
            con.execute(unique_parents_sql(qualified(parent.source.table), rel.spec.key,
                                           child.seed or 0, rel.parents_view))
            con.execute(bounded_children_sql(
                qualified(child.source.table), parents, rel.spec.foreign_key, rel.spec.key,
                rel.spec.max_children, child.seed or 0, rel.bounded_view, list(rel.joined)))
            con.execute(parents_sql(parents, rel.spec.foreign_key, rel.spec.key,
                                    rel.family_view, rel.bounded_view))
            if rel.role(ctx.dataset) == "child":
                con.execute(bounded_children_sql(
                    qualified(child.source.table), parents, rel.spec.foreign_key,
                    rel.spec.key, rel.d_in, child.seed or 0, rel.model_view, list(rel.joined)))
        yield con


def modeled(ctx: DatasetContext, warehouse: WarehouseResource, context) -> DatasetContext:
    """A child's context at the children per family its stages read
    (`family.model_children`, from its parent's consistent measurements of this run, else the
    published ones: post-processing of charged releases, and public facts); any other dataset's
    as it is. A parent with no measurements yet leaves max_children."""
    rel = ctx.relation
    if rel is None or rel.role(ctx.dataset) != "child":
        return ctx
    found = None
    for store in (artifacts(warehouse, rel.parent, context), artifacts(warehouse, rel.parent)):
        if store.has("measurements"):
            found = store.measurements()
            break
    if found is None:
        return ctx
    k = family.children_to_read(found.measurements, rel.spec.max_children,
                                rel.family_budget.run_rho * rel.child_share, ctx.spec.columns)
    return ctx.at_model_children(k)


def require_counted(ctx: DatasetContext, con) -> None:
    """Refuse a child's selection or measurement whose marginals were counted at another k
    (`DatasetContext.at_model_children` names the table by k): when the parent ran again since
    the child's `marginals` stage, its new measurements can give another k, and counts of a view
    of more children a family, charged at the new k, would be charged below their sensitivity.
    Raised before anything is charged; names only k, which the child publishes."""
    rel = ctx.relation
    if rel is None or rel.role(ctx.dataset) != "child":
        return
    schema, name = ctx.table.split(".", 1)
    if not store_of(con).execute(sql("table_exists"), [schema, name]).fetchone()[0]:
        raise dg.Failure(description=(
            f"dataset {ctx.dataset!r}: its marginals were not counted at {rel.d_in} children "
            f"per family, the number its parent {rel.parent!r}'s measurements now give (the "
            f"parent ran again since the 'marginals' stage). Materialize {ctx.dataset!r}'s "
            "stages from 'preprocessed' on in one run; nothing was charged"))


@contextmanager
def spending(ctx: DatasetContext, context, led, stage: str):
    """`private_stage` of the dataset's stage, charged through `ctx.charge`: in a family under
    its parent's ledger entry, reserving for both sides' private stages of the run
    (`family_run_plan`) and charging what `ctx.ledger_budget` says."""
    rel = ctx.relation
    plan = None
    if rel is not None:
        plan = family_run_plan(context, [
            (n, functools.partial(ctx.names.key, n), rel.ledger_budgets[n])
            for n in (rel.parent, rel.child)], ctx.dataset, stage)
    with private_stage(context, led, ctx.ledger_dataset, stage, ctx.ledger_budget,
                       plan) as found:
        charge = found.charge
        if rel is not None:  # each charge says which table of the family it is for
            charge = functools.partial(found.charge, table=ctx.dataset)
        yield SimpleNamespace(charge=ctx.charge(charge))


def spent_metadata(ctx: DatasetContext, led, run_id: str) -> dict:
    """`ledger_metadata` of the dataset's ledger entry (its family's, against the family's
    budget, in a relation)."""
    return ledger_metadata(led, ctx.ledger_dataset, ctx.unit_budget, run_id)


# ------------------------------------------------------------------ the stage functions
# Each is `(ctx, context, warehouse, ledger) -> MaterializeResult`: `ctx` the dataset's
# `DatasetContext`, `context` the stage op's, `warehouse` and `ledger` its resources.


def observe_source(ctx: DatasetContext, context: dg.OpExecutionContext,
                   warehouse: WarehouseResource) -> dg.DataVersion:
    """The observation of the `source` asset: the source's public version id."""
    spec = ctx.relation.sources[ctx.dataset] if ctx.relation is not None else ctx.spec
    return dg.DataVersion(source_version(warehouse, spec, ctx.dataset))


def preprocessed(ctx: DatasetContext, context: dg.AssetExecutionContext,
                 warehouse: WarehouseResource, ledger: LedgerResource) -> dg.MaterializeResult:
    """Check the source, learn its undeclared domains (DP) and create the encoded view
    (`stages.preprocess`); publishes the encoding plan."""
    ctx = modeled(ctx, warehouse, context)
    dataset, budget = ctx.dataset, ctx.budget
    led = ledger.ledger()
    check_writes(context, warehouse, dataset, "preprocessed", budget, ctx.spec.rows,
                 len(ctx.spec.columns))
    lists = read_lists(warehouse, ctx.spec)  # before anything is charged
    with holding(context, warehouse, dataset, "preprocessed", ctx.names), \
            spending(ctx, context, led, "preprocessed") as stage:
        def note(fallbacks):  # what the values did: the owner's log, on every run
            append_private_note(private_log_path(warehouse, dataset), dataset,
                                "preprocessed", context.run_id, fallbacks.report())

        with dataset_source(ctx, warehouse) as con:
            plan = stages.preprocess(con, ctx.spec, dataset, Path(warehouse.base_dir), ctx.view,
                                     budget, stage.charge, note, log=context.log.info,
                                     public_lists=lists)
        path = artifacts(warehouse, dataset, context).write_plan(plan)
    context.log.info(f"encoded {len(plan.columns)} columns; domain {plan.domain}")
    return dg.MaterializeResult(metadata={
        "encoding_plan": dg.MetadataValue.json(json.loads(plan.to_json())),
        "domain": dg.MetadataValue.json(plan.domain), "view": ctx.view,
        "plan_path": dg.MetadataValue.path(path),
        **({"model_children": ctx.relation.d_in} if ctx.relation is not None
           and ctx.relation.role(dataset) == "child" else {}),
        **({"categories_from": dg.MetadataValue.json(
            {e.column: e.categories_from for e in plan.encodings if e.categories_from})}
           if lists else {}),
        **(spent_metadata(ctx, led, context.run_id) if budget.preprocess else {}),
    })


def read_lists(warehouse: WarehouseResource, spec) -> dict[str, list]:
    """The public lists of the `categories: {from: ...}` columns of `spec`, read from the
    warehouse and validated (`infra.public_lists`, `config.with_public_categories`); a bad one
    fails the stage with the public message naming the problem and the fix, before anything
    is charged. Empty when no column reads one."""
    if not any(c.categories_from is not None for c in spec.columns.values()):
        return {}
    try:
        with warehouse.connect(read_only=True) as con:
            lists = read_public_lists(con, spec)
        with_public_categories(spec, lists)
    except PublicListError as e:
        raise dg.Failure(description=str(e)) from None
    return lists


def public_list_assets(spec) -> list[dg.AssetKey]:
    """The host assets that write the public tables of the `categories: {from: ...}` columns
    (`asset:` of `from`): `preprocessed` depends on them."""
    keys = {c.categories_from.asset for c in spec.columns.values()
            if c.categories_from is not None and c.categories_from.asset is not None}
    return [dg.AssetKey(list(k)) for k in sorted(keys)]


def marginals(ctx: DatasetContext, context: dg.AssetExecutionContext,
              warehouse: WarehouseResource, ledger: LedgerResource) -> dg.MaterializeResult:
    """Count the exact marginals the method needs in one scan (`stages.marginals`);
    publishes their number and cells, never counts."""
    ctx = modeled(ctx, warehouse, context)
    dataset, spec = ctx.dataset, ctx.spec
    check_writes(context, warehouse, dataset, "marginals", ctx.budget, spec.rows,
                 len(spec.columns))
    with holding(context, warehouse, dataset, "marginals", ctx.names):
        plan = artifacts(warehouse, dataset, context).plan_for(spec)
        with spending(ctx, context, ledger.ledger(), "marginals"), \
                dataset_source(ctx, warehouse) as con:
            counted = stages.marginals(con, spec.method, spec.selection, plan, ctx.view,
                                       ctx.table, log=context.log.info)
    # no wall time: the scan's duration depends on the private rows
    # (docs/decisions/0003-privacy-perimeter.md)
    context.log.info(f"{len(counted.cliques)} marginals ({counted.cells} cells) in one scan")
    return dg.MaterializeResult(metadata={
        "table": counted.table, "marginals": len(counted.cliques), "cells": counted.cells,
    })


def selection(ctx: DatasetContext, context: dg.AssetExecutionContext,
              warehouse: WarehouseResource, ledger: LedgerResource) -> dg.MaterializeResult:
    """The method's selection with its noisy measurements (`stages.select`)."""
    ctx = modeled(ctx, warehouse, context)
    dataset, spec, budget = ctx.dataset, ctx.spec, ctx.budget
    led = ledger.ledger()
    check_writes(context, warehouse, dataset, "selection", budget, spec.rows, len(spec.columns))
    with holding(context, warehouse, dataset, "selection", ctx.names):
        store = artifacts(warehouse, dataset, context)
        plan = store.plan_for(spec)
        with spending(ctx, context, led, "selection") as stage:
            with dataset_source(ctx, warehouse) as con:
                require_counted(ctx, con)
                oracle = stages.oracle(con, plan, ctx.view, ctx.table)
                result = stages.select(spec.method, spec.selection, plan, oracle, budget,
                                       logged_charge(context, stage.charge, spec.method),
                                       log=context.log.info)
            if oracle.on_demand:
                context.log.info(f"counted on demand: {[list(c) for c in oracle.on_demand]}")
            path = store.write_selection(result)
    chosen = [list(m.clique) for m in result.measured] + [list(c) for c in result.cliques]
    context.log.info(f"{spec.method} selected {len(chosen)} marginals "
                     f"({len(result.measured)} measured during selection): {chosen}")
    return dg.MaterializeResult(metadata={
        "method": spec.method,
        "selected": dg.MetadataValue.json(chosen),
        "selected_count": len(chosen),
        "rounds": dg.MetadataValue.json(result.details.get("rounds", [])),
        "marginals_on_demand": dg.MetadataValue.json([list(c) for c in oracle.on_demand]),
        "path": dg.MetadataValue.path(path),
        **spent_metadata(ctx, led, context.run_id),
    })


def measurements(ctx: DatasetContext, context: dg.AssetExecutionContext,
                 warehouse: WarehouseResource, ledger: LedgerResource) -> dg.MaterializeResult:
    """The selected marginals measured and made consistent (`stages.measure`): the privacy
    boundary."""
    ctx = modeled(ctx, warehouse, context)
    dataset, spec, budget = ctx.dataset, ctx.spec, ctx.budget

    def exact(cliques):  # the source is opened only when something is left to measure
        with dataset_source(ctx, warehouse) as con:
            require_counted(ctx, con)
            return stages.oracle(con, plan, ctx.view, ctx.table)(cliques)

    led = ledger.ledger()
    check_writes(context, warehouse, dataset, "measurements", budget, spec.rows,
                 len(spec.columns))
    with holding(context, warehouse, dataset, "measurements", ctx.names):
        store = artifacts(warehouse, dataset, context)
        plan = store.plan_for(spec)
        with spending(ctx, context, led, "measurements") as stage:
            chosen = store.selection()
            store.require_consistent("selection")
            found = stages.measure(plan, chosen, exact, budget, stage.charge)
            path = store.write_measurements(found)
    return dg.MaterializeResult(metadata={
        "measurements": len(found.measurements),
        "noise": dg.MetadataValue.json([{"clique": list(m.clique), "sigma": round(m.sigma, 4),
                                         "rho": m.rho} for m in found.measurements]),
        "noisy_total": dg.MetadataValue.float(round(found.noisy_total, 1)),
        "path": dg.MetadataValue.path(path),
        **spent_metadata(ctx, led, context.run_id),
    })


def synthetic(ctx: DatasetContext, context: dg.AssetExecutionContext,
              warehouse: WarehouseResource, ledger: LedgerResource) -> dg.MaterializeResult:
    """Sample from the model into the synthetic table and its Parquet copy
    (`stages.sample`, `synthesize.write_synthetic`); publishes the table's standard metadata,
    the budget's standing and the fidelity to the noisy measurements."""
    from .evaluation.fidelity import MarginalCounter, fidelity_summary

    dataset, spec = ctx.dataset, ctx.spec
    with holding(context, warehouse, dataset, "synthetic", ctx.names):
        store = artifacts(warehouse, dataset, context)
        plan = store.plan_for(spec)
        store.require_consistent("measurements", "model")
        found, fitted = store.measurements(), store.model()
        started = time.perf_counter()
        draw = stages.sample(fitted, found.noisy_total, spec.rows, spec.model.chunk_rows,
                             seed=spec.seed, log=context.log.info)
        # the measured marginals of the synthetic rows, counted from the codes as they are
        # sampled (public: the rows and the noisy measurements are both public)
        counter = MarginalCounter.of(found.measurements, plan.domain)
        with warehouse_writes(warehouse, dataset, "the synthetic table"), \
                warehouse.connect() as con:
            # the Parquet goes into this run's folder, then the table is replaced and
            # stamped with the run id (the commit point), then the run's set is published
            written = write_synthetic(con, plan, counter.counting(draw.chunks),
                                      draw.decode_rng, ctx.synthetic,
                                      store.writing("synthetic.parquet"),
                                      stamp=context.run_id,
                                      constraints=spec.declared_constraints)
            catalog = con.execute(sql("current_database")).fetchone()[0]
        store.publish()
    seconds = time.perf_counter() - started
    context.log.info(f"sampled and wrote {written} rows in {seconds:.1f}s")
    fidelity = fidelity_summary(counter.counts, list(found.measurements))
    figures = {"one_way_tvd_mean": fidelity.one_way_mean,
               "one_way_tvd_max": fidelity.one_way_max,
               "marginal_tvd_mean": fidelity.marginal_mean,
               "marginal_tvd_max": fidelity.marginal_max}
    context.log.info("TVD to the noisy measurements: " + ", ".join(
        f"{k} {v:.4f}" for k, v in figures.items() if v is not None))
    # the standard table metadata, from the plan (the declared columns and SQL types, in
    # order) and the rows written (the requested rows: public), never from the data
    columns = dg.TableSchema(columns=[
        dg.TableColumn(e.column, e.sql_type,
                       constraints=dg.TableColumnConstraints(nullable=e.nullable))
        for e in plan.encodings])
    standard = {"dagster/column_schema": dg.MetadataValue.table_schema(columns),
                "dagster/row_count": dg.MetadataValue.int(written),
                "dagster/table_name": dg.MetadataValue.text(f"{catalog}.{ctx.synthetic}"),
                "dagster/storage_kind": dg.MetadataValue.text("duckdb")}
    # where the dataset's budget stands after this run's spend (read only, never charged)
    try:
        budget_figures = budget_metadata(ledger.ledger().summary(dataset), ctx.budget,
                                         spec.privacy.epsilon, spec.privacy.delta)
    except LedgerError as e:  # the table is written; a broken ledger fails the next spend
        context.log.warning(f"budget metadata left out: {e}")
        budget_figures = {}
    return dg.MaterializeResult(metadata={
        **standard,
        **budget_figures,
        "table": ctx.synthetic,
        "parquet": dg.MetadataValue.path(str(store.path("synthetic.parquet"))),
        "rows": draw.rows, "seeded": spec.seed is not None,
        "generator": "gum" if isinstance(fitted, generate.GumModel) else "clique tree",
        "sample_and_write_seconds": dg.MetadataValue.float(round(seconds, 2)),
        # DP by post-processing: charted over runs in the asset's Plots tab
        **{f"fidelity/{k}": dg.MetadataValue.float(v) for k, v in figures.items()
           if v is not None},
        "fidelity/tvd": dg.MetadataValue.json(fidelity.to_dict()),
    })


# ------------------------------------------------------------------------ the stage table

# one stage function per stage of STAGES, in that order (model.py's for `model`)
RUN: dict[str, StageFunction] = {
    "preprocessed": preprocessed, "marginals": marginals, "selection": selection,
    "measurements": measurements, "model": fit_model, "synthetic": synthetic,
}

# the AssetSpec of each stage, from the dataset's context
SPEC: dict[str, Callable[[DatasetContext], dg.AssetSpec]] = {
    "preprocessed": lambda ctx: ctx.asset_spec(
        "preprocessed", PRIVATE, deps=[*family_sources(ctx), *public_list_assets(ctx.spec)],
        kinds={ctx.spec.engine.type},
        description="Public encoding plan and the encoded view (private)."),
    "marginals": lambda ctx: ctx.asset_spec(
        "marginals", PRIVATE, deps=[ctx.key("preprocessed")], kinds={ctx.spec.engine.type},
        description="Exact marginals the method needs, in one scan (private zone)."),
    "selection": lambda ctx: ctx.asset_spec(
        "selection", PUBLIC, deps=[ctx.key("marginals")],
        description=f"Marginal selection ({ctx.spec.method}) with its noisy 1-way marginals."),
    "measurements": lambda ctx: ctx.asset_spec(
        "measurements", PUBLIC, deps=[ctx.key("selection")],
        description="Noisy marginals after consistency: the privacy boundary."),
    "model": model_spec,
    "synthetic": lambda ctx: ctx.asset_spec(
        "synthetic", PUBLIC, deps=[ctx.key("model"), *parent_synthetic_key(ctx)],
        kinds={"duckdb", "parquet"},
        description=f"The synthetic table {ctx.synthetic} and its Parquet copy."),
}


def family_sources(ctx: DatasetContext) -> list[dg.AssetKey]:
    """What the first stage reads: the dataset's source, and in a family both datasets' (the
    family's views join the two tables). A child's private stages also come after its
    parent's `measurements`: the family's run holds one reservation, released by the last
    private stage in that order (`budget.family_run_plan`), so the two sides may not run at
    once (on the multiprocess executor the child's release would refuse the parent's charges)."""
    if ctx.relation is None:
        return [ctx.upstream]
    after = ([ctx.names.key(ctx.relation.parent, "measurements")]
             if ctx.relation.role(ctx.dataset) == "child" else [])
    return list(dict.fromkeys([ctx.upstream, *ctx.relation.upstreams.values(), *after]))


def parent_synthetic_key(ctx: DatasetContext) -> list[dg.AssetKey]:
    """A child's synthetic stage draws from its parent's synthetic rows: that asset's key."""
    rel = ctx.relation
    if rel is None or rel.role(ctx.dataset) == "parent":
        return []
    return [ctx.names.key(rel.parent, "synthetic")]


def checks(ctx: DatasetContext, stage: str) -> tuple:
    """The check specs of a stage's asset and the function that runs them (`Stage`)."""
    if stage != "synthetic":
        return ()
    if ctx.relation is not None:  # a family's tables: checks of their own (family_assets.py)
        return family_checks(ctx)
    return (tuple(synthetic_check_specs(ctx.dataset, ctx.names)),
            functools.partial(check_synthetic, ctx))


def source_asset(ctx: DatasetContext) -> dg.SourceAsset:
    """The dataset's observable `source` asset (none when `source.asset` names a host's)."""
    names, dataset = ctx.names, ctx.dataset

    @dg.observable_source_asset(key=ctx.key("source"),
                                **names.asset_args(dataset, PRIVATE, source=True),
                                required_resource_keys=names.resource_keys("warehouse"),
                                description=f"The private source table of {dataset!r}; its data "
                                            "version is an opaque id that changes when it does.")
    @names.bind("warehouse")
    @private_step(dataset, "source")
    def source(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> dg.DataVersion:
        return observe_source(ctx, context, warehouse)

    return source


def build_dataset_assets(ctx: DatasetContext, extra: Sequence[Stage] = ()) -> list:
    """The assets of the dataset of `ctx`, named by `ctx.names` (naming.py): its observable
    `source` and its chain of stages (`STAGES`, each `RUN[stage]` bound to `ctx`, then the
    `extra` stages downstream of `synthetic`, such as the utility report) in one stage op
    (`stage_asset`), or, when the fit's units run as steps of their own
    (`generate.multiprocess`), the stages before `model`, the model graph (model.py) and the
    stages after it. With a `source.asset`, the first stage depends on the host's asset and
    there is no `source` asset."""
    spec = ctx.spec
    run = dict(RUN)
    if ctx.relation is not None:  # a family's synthetic stages (family_assets.py)
        run["synthetic"] = (parent_synthetic if ctx.relation.role(ctx.dataset) == "parent"
                            else child_synthetic)
    chain = [Stage(SPEC[s](ctx), bind(ctx, s, run[s], private=s in PRIVATE_STAGES),
                   *checks(ctx, s)) for s in STAGES] + list(extra)
    first = [] if spec.source.asset is not None else [source_asset(ctx)]
    if not multiprocess(spec.generator, spec.model):
        return [*first, stage_asset(ctx, chain, "stages")]
    # the fit's units run as steps of the executor: the model is a graph asset between two ops
    cut = STAGES.index("model")
    return [*first, stage_asset(ctx, chain[:cut], "stages"), build_model_asset(ctx),
            stage_asset(ctx, chain[cut + 1:], "stages_after_model")]


def stage_started(key: dg.AssetKey) -> str:
    """The log line that opens a stage in its stage op (public: the fact and time a stage starts,
    as Dagster's own events of a step of its own would show)."""
    return f"stage {key.path[-1]} started"


def stage_asset(ctx: DatasetContext, chain: list[Stage], op: str) -> dg.AssetsDefinition:
    """The stages of `chain` as one subsettable multi-asset, one op `<dataset>_<op>`: a run
    computes the stages it selects, in the chain's order, each yielding its own materialization
    (so a failure leaves the earlier stages materialized and the later ones not). One op per
    dataset instead of one per stage: Dagster builds, resolves and snapshots every op when a code
    location loads, so the op count sets how long hundreds of datasets take to load. The lineage
    in the UI, the asset keys, selection by key, automation conditions and checks are per stage
    as before."""
    names = ctx.names
    pool = {"pool": names.pool} if names.pool else {}

    @dg.multi_asset(name=names.op_name(ctx.dataset, op), specs=[s.spec for s in chain],
                    check_specs=[c for s in chain for c in s.check_specs], can_subset=True,
                    required_resource_keys=names.resource_keys("warehouse", "ledger"), **pool)
    def stages(context: dg.AssetExecutionContext):
        resources = {"warehouse": getattr(context.resources, names.warehouse),
                     "ledger": getattr(context.resources, names.ledger)}
        selected, checks = context.selected_asset_keys, context.selected_asset_check_keys
        for stage in chain:
            if stage.spec.key in selected:
                context.log.info(stage_started(stage.spec.key))
                result = stage.run(context, **resources)
                yield dg.MaterializeResult(asset_key=stage.spec.key, metadata=result.metadata)
            if not any(c.key in checks for c in stage.check_specs):
                continue
            blocked = False
            for result in stage.check(context, warehouse=resources["warehouse"]):
                if dg.AssetCheckKey(result.asset_key, result.check_name) in checks:
                    yield result
                    blocked |= (not result.passed and result.severity ==
                                dg.AssetCheckSeverity.ERROR and any(
                                    c.blocking for c in stage.check_specs
                                    if c.name == result.check_name))
            if blocked:  # Dagster fails the step; nothing downstream of the asset runs
                context.log.info(f"a blocking check of {stage.spec.key.to_user_string()} "
                                 "failed: the later stages of this run are skipped")
                return

    return stages


def logged_charge(context, charge, method: str):
    """`charge` that also logs each mechanism call (public: its rho and parameters), so a user
    watching an adaptive selection sees its rounds go by. No elapsed time: the time between
    mechanisms is private work (docs/decisions/0003-privacy-perimeter.md)."""
    calls = [0]

    def wrapped(spend, **params):
        charge(spend, **params)
        calls[0] += 1
        what = ", ".join(f"{k}={v}" for k, v in params.items())
        context.log.info(f"{method}: mechanism {calls[0]} ({what}) charged rho {spend.rho:.3g}")
    return wrapped
