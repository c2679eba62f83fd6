"""The `model` stage of a dataset: the generator fitted on the public measurements, in three steps:
`plan_fit` (the engine and its units of work), `fit_unit` (one unit) and `save_model` (the
units assembled into `model.npz`, stamped with the hashes of the plan and the measurements).

`fit_model` calls the three in a row inside the dataset's stage op when the fit runs in one
process; `build_model_asset` makes them a graph asset of three ops when its units run in
parallel processes, passing units through dp-synth's own IO manager, never the host's.
`plan_fit` refuses a plan made from another spec than the loaded one and measurements made for
another plan. Everything here is post-processing of public records: no ledger. The steps, when
the graph is used and why: "As implemented: the model stage" in docs/decisions/0007-asset-graph.md.
"""

import time

import dagster as dg

from dp_synth_assets.resources.warehouse import WarehouseResource

from .artifacts import artifacts, holding
from .core import stages
from .core import generate
from .dataset_context import PUBLIC, DatasetContext

DESCRIPTION = "The fitted generator ({generator}: pgm, parallel_pgm or gum)."


def plan_fit(ctx: DatasetContext, context, warehouse: WarehouseResource) -> list[dict]:
    """The fit's units of work, each `{"engine", "unit", "metadata"}` (module docstring)."""
    dataset, spec = ctx.dataset, ctx.spec
    with holding(context, warehouse, dataset, "model:plan_fit", ctx.names):
        store = artifacts(warehouse, dataset, context)
        plan = store.plan_for(spec)
        store.require_consistent("measurements")
        found = store.measurements()
        try:
            fit_plan = stages.plan_fit(spec, plan, found, dataset)
        except generate.ModelTooLarge as e:
            raise dg.Failure(description=f"{e} (or set generator: auto or gum). The entry: "
                                         f"{spec.entry}.") from None
    choice, size = fit_plan.choice, fit_plan.size
    context.log.info(f"generator {choice.engine}: {choice.reason}")
    if size:
        context.log.info(f"fitting {choice.engine}: {len(found.measurements)} measurements, "
                         + ", ".join(f"{k} {v}" for k, v in size.items()))
    context.log.info(f"{len(fit_plan.units)} unit(s) of work")
    metadata = {
        "generator": choice.engine, "requested_generator": spec.generator,
        "choice_reason": dg.MetadataValue.text(choice.reason),
        "estimates": dg.MetadataValue.json([e.to_dict() for e in choice.estimates]),
        "units": len(fit_plan.units),
        **(size or {}),
    }
    return [{"engine": choice.engine, "unit": unit, "metadata": metadata}
            for unit in fit_plan.units]


def fit_unit(ctx: DatasetContext, context, warehouse: WarehouseResource, work: dict) -> dict:
    """One unit of `plan_fit`'s work fitted, with its fit time."""
    store = artifacts(warehouse, ctx.dataset, context)
    started = time.perf_counter()
    result = stages.fit_unit(ctx.spec.model, store.plan_for(ctx.spec), store.measurements(),
                             work["engine"], work["unit"], log=context.log.info)
    seconds = time.perf_counter() - started
    context.log.info(f"{work['engine']} unit {work['unit']} fitted in {seconds:.1f}s")
    return {**work, "result": result, "seconds": seconds}


def save_model(ctx: DatasetContext, context, warehouse: WarehouseResource,
               fitted: list[dict]) -> dict:
    """The units' results assembled and written as `model.npz`; returns the stage's metadata."""
    engine, metadata = fitted[0]["engine"], fitted[0]["metadata"]
    with holding(context, warehouse, ctx.dataset, "model", ctx.names):
        store = artifacts(warehouse, ctx.dataset, context)
        model = stages.assemble(store.plan(), store.measurements(), engine,
                                [f["result"] for f in fitted])
        path = store.write_model(model)
    seconds = [f["seconds"] for f in fitted]
    context.log.info(f"{engine} fitted in {max(seconds):.1f}s (slowest of {len(seconds)} "
                     f"unit(s), {sum(seconds):.1f}s in all)")
    return {**metadata, "path": dg.MetadataValue.path(path),
            "fit_seconds": dg.MetadataValue.float(round(max(seconds), 2)),
            "unit_seconds": dg.MetadataValue.json([round(x, 2) for x in seconds])}


def fit_model(ctx: DatasetContext, context, warehouse: WarehouseResource,
              ledger=None) -> dg.MaterializeResult:
    """The whole stage in this process: plan, every unit in turn, save (the stage function of
    `model` in the dataset's stage op, pipeline.py; no ledger)."""
    units = plan_fit(ctx, context, warehouse)
    fitted = [fit_unit(ctx, context, warehouse, work) for work in units]
    return dg.MaterializeResult(metadata=save_model(ctx, context, warehouse, fitted))


def model_spec(ctx: DatasetContext) -> dg.AssetSpec:
    """The `AssetSpec` of `model` in the dataset's stage op."""
    return ctx.asset_spec("model", PUBLIC, deps=[ctx.key("measurements")], kinds={"python"},
                          description=DESCRIPTION.format(generator=ctx.spec.generator))


def build_model_asset(ctx: DatasetContext) -> dg.AssetsDefinition:
    """The graph asset `[dataset, "model"]` of a fit whose units run as separate steps,
    downstream of `[dataset, "measurements"]` (keys, resource keys and IO manager key from
    `ctx.names`)."""
    dataset, names, key = ctx.dataset, ctx.names, ctx.key
    prefix = names.op_name(dataset, "model")
    # the ledger too: a PostgreSQL ledger holds the dataset's run lock (artifacts.holding)
    warehouse_key = names.resource_keys("warehouse", "ledger")

    @dg.op(name=f"{prefix}_plan_fit", ins={"after": dg.In(dg.Nothing)},
           out=dg.DynamicOut(io_manager_key=names.io_manager),
           required_resource_keys=warehouse_key)
    @names.bind("warehouse")
    def plan_fit_op(context: dg.OpExecutionContext, warehouse: WarehouseResource):
        for k, work in enumerate(plan_fit(ctx, context, warehouse)):
            yield dg.DynamicOutput(work, mapping_key=f"unit_{k}")

    @dg.op(name=f"{prefix}_fit_unit", out=dg.Out(io_manager_key=names.io_manager),
           required_resource_keys=warehouse_key)
    @names.bind("warehouse")
    def fit_unit_op(context: dg.OpExecutionContext, warehouse: WarehouseResource,
                    work: dict) -> dict:
        return fit_unit(ctx, context, warehouse, work)

    @dg.op(name=f"{prefix}_save", out=dg.Out(dg.Nothing), required_resource_keys=warehouse_key)
    @names.bind("warehouse")
    def save_op(context: dg.OpExecutionContext, fitted: list[dict],
                warehouse: WarehouseResource) -> dg.Output:
        return dg.Output(None, metadata=save_model(ctx, context, warehouse, fitted))

    @dg.graph_asset(key=key("model"), **names.asset_args(dataset, PUBLIC, graph=True), kinds={"python"},
                    ins={"measurements": dg.AssetIn(key=key("measurements"),
                                                    dagster_type=dg.Nothing)},
                    description=DESCRIPTION.format(generator=ctx.spec.generator)
                    + " Its units of work run as steps of Dagster's executor.")
    def model(measurements):
        return save_op(plan_fit_op(measurements).map(fit_unit_op).collect())

    return model
