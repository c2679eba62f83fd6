"""The asset factory: one select-measure-generate pipeline per dataset (DESIGN.md section 6).

Each asset is a few lines: read its inputs (warehouse or public artifacts), call the core, charge
the ledger through `private_stage`, write its outputs and public metadata. Asset keys are
`[<dataset>, <stage>]`, grouped per dataset, tagged `privacy=private|public`. Private-zone assets
publish shapes only (column names, domain sizes, numbers of marginals), never counts. Every
stage that reads private data runs under `private_step` (private_log.py): its failures are
generic in public and detailed in the owner-only private log.
"""

import json
import time
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import numpy as np

from resources.ledger import LedgerResource
from resources.warehouse import WarehouseResource

from .budget import DatasetBudget, ledger_metadata, private_stage
from .core.budget import measurement_plan
from .core import change
from .core import marginals as margs
from .core.config import AttachSource, DatasetSpec, TableSource
from .core.domain import EncodingPlan
from .core import generate
from .core.measure import Measurement, clique_size, make_consistent, measure, noisy_total
from .core.preprocess import prepare_encoded_view
from .core.select import Selection, required_cliques, select
from .core.source import attach_source, describe_source, source_path, source_relation
from .core.sql import sql
from .core.synthesize import requested_rows, write_synthetic
from .private_log import private_dir, private_step

PRIVATE = {"privacy": "private"}
PUBLIC = {"privacy": "public"}


def encoded_view(dataset: str) -> str:
    return f"private.{dataset}_encoded"


def marginal_table(dataset: str) -> str:
    return f"private.{dataset}_marginals"


def synthetic_table(dataset: str) -> str:
    return f"synthetic.{dataset}"


def read_json(warehouse: WarehouseResource, dataset: str, name: str) -> dict:
    path = warehouse.public_path(dataset, name)
    if not path.exists():
        raise dg.Failure(f"dataset {dataset!r}: {path} is missing; materialize the upstream "
                         "stages of this dataset first")
    return json.loads(path.read_text())


def write_json(warehouse: WarehouseResource, dataset: str, name: str, data: object) -> str:
    path = warehouse.public_path(dataset, name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, default=str))
    tmp.replace(path)  # atomic: a failed stage never leaves a half-written artifact
    return str(path)


def load_plan(warehouse: WarehouseResource, dataset: str) -> EncodingPlan:
    return EncodingPlan.from_json(json.dumps(read_json(warehouse, dataset, "plan.json")))


def load_measurements(warehouse: WarehouseResource, dataset: str) -> tuple[list[Measurement], float]:
    data = read_json(warehouse, dataset, "measurements.json")
    return [Measurement.from_dict(m) for m in data["measurements"]], float(data["noisy_total"])


@contextmanager
def source_connection(warehouse: WarehouseResource, spec: DatasetSpec, dataset: str,
                      read_only: bool = False, lock_timeout_seconds: float | None = None):
    """A warehouse connection that can read the dataset's source and its encoded view: with an
    `attach:` source, the source database is attached to it first (`source.attach_source`,
    whose `SourceError` the stage's `private_errors` turns into a public failure)."""
    with warehouse.connect(read_only=read_only, lock_timeout_seconds=lock_timeout_seconds) as con:
        attach_source(con, spec, Path(warehouse.base_dir), dataset)
        yield con


def secret_path(warehouse: WarehouseResource) -> Path:
    """The installation's change-detection secret: `<folder of database>/private/change_detection.key`."""
    return private_dir(warehouse) / "change_detection.key"


def change_state_path(warehouse: WarehouseResource, dataset: str) -> Path:
    return private_dir(warehouse, dataset) / "change_state.json"


def fingerprint(warehouse: WarehouseResource, spec: DatasetSpec,
                lock_timeout_seconds: float | None = None, dataset: str = "") -> str:
    """The private MAC of the source's change signal, HMAC-SHA256 under the installation's
    secret (`core/change.py`). The signal: for a table (local or in an attached database), its
    schema and an order-independent sum of row hashes (one scan in DuckDB,
    sql/content_summary.sql); for Parquet/CSV files, their names, sizes and modification times
    (no scan). Private: it is kept in the private zone and never published; `source_version`
    turns it into the public, content-free version id."""
    if isinstance(spec.source, (TableSource, AttachSource)):
        with source_connection(warehouse, spec, dataset, read_only=True,
                               lock_timeout_seconds=lock_timeout_seconds) as con:
            relation = source_relation(spec, Path(warehouse.base_dir))
            schema = describe_source(con, relation, dataset)
            summary = con.execute(sql("content_summary", source=relation)).fetchone()[0]
        signal = json.dumps({"schema": schema, "content": summary})
    else:
        path = source_path(spec, Path(warehouse.base_dir))
        files = sorted(path.parent.glob(path.name))
        signal = json.dumps([[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files])
    return change.change_mac(change.load_or_create_secret(secret_path(warehouse)), signal)


def source_version(warehouse: WarehouseResource, spec: DatasetSpec, dataset: str,
                   lock_timeout_seconds: float | None = None) -> str:
    """The source's public version: an opaque random id, the same while the source's private
    MAC (`fingerprint`) is unchanged and a new one whenever it changes (`change.observe`,
    shared by the sensor and the `source` observation). It is the `source` asset's data version
    and the sensor's cursor; it says only "changed since last time"."""
    mac = fingerprint(warehouse, spec, lock_timeout_seconds, dataset)
    return change.observe(change_state_path(warehouse, dataset), mac)


def build_dataset_assets(dataset: str, spec: DatasetSpec) -> list:
    key = lambda stage: dg.AssetKey([dataset, stage])  # noqa: E731
    budget = DatasetBudget.of(spec)

    @dg.observable_source_asset(key=key("source"), group_name=dataset, tags=PRIVATE,
                                description=f"The private source table of {dataset!r}; its data "
                                            "version is an opaque id that changes when it does.")
    @private_step(dataset, "source")
    def source(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> dg.DataVersion:
        return dg.DataVersion(source_version(warehouse, spec, dataset))

    @dg.asset(key=key("preprocessed"), deps=[key("source")], group_name=dataset, tags=PRIVATE,
              kinds={"duckdb"}, description="Public encoding plan and the encoded view (private).")
    @private_step(dataset, "preprocessed")
    def preprocessed(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                     ledger: LedgerResource) -> dg.MaterializeResult:
        led = ledger.ledger()
        with private_stage(context, led, dataset, "preprocessed", budget) as stage:
            with source_connection(warehouse, spec, dataset) as con:
                plan = prepare_encoded_view(con, spec, dataset, Path(warehouse.base_dir),
                                                  encoded_view(dataset), budget.preprocess,
                                                  budget.run_delta_extra, stage.charge)
            path = write_json(warehouse, dataset, "plan.json", json.loads(plan.to_json()))
        context.log.info(f"encoded {len(plan.columns)} columns; domain {plan.domain}")
        return dg.MaterializeResult(metadata={
            "encoding_plan": dg.MetadataValue.json(json.loads(plan.to_json())),
            "domain": dg.MetadataValue.json(plan.domain),
            "view": encoded_view(dataset),
            "plan_path": dg.MetadataValue.path(path),
            **(ledger_metadata(led, dataset, budget, context.run_id) if budget.preprocess else {}),
        })

    @dg.asset(key=key("marginals"), deps=[key("preprocessed")], group_name=dataset, tags=PRIVATE,
              kinds={"duckdb"}, description="Exact marginals the method needs, in one scan (private zone).")
    @private_step(dataset, "marginals")
    def marginals(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                  ledger: LedgerResource) -> dg.MaterializeResult:
        plan = load_plan(warehouse, dataset)
        cliques = required_cliques(spec.method, plan.domain, spec.selection)
        with private_stage(context, ledger.ledger(), dataset, "marginals", budget):
            with source_connection(warehouse, spec, dataset) as con:
                table = margs.compute_marginals(con, encoded_view(dataset), marginal_table(dataset),
                                                plan.columns, cliques, plan.domain)
        cells = sum(clique_size(c, plan.domain) for c in cliques)
        # no wall time: the scan's duration depends on the private rows (DESIGN.md section 4)
        context.log.info(f"{len(cliques)} marginals ({cells} cells) in one scan")
        return dg.MaterializeResult(metadata={
            "table": table.table, "marginals": len(cliques), "cells": cells,
        })

    @dg.asset(key=key("selection"), deps=[key("marginals")], group_name=dataset, tags=PUBLIC,
              description=f"Marginal selection ({spec.method}) with its noisy 1-way marginals.")
    @private_step(dataset, "selection")
    def selection(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                  ledger: LedgerResource) -> dg.MaterializeResult:
        plan = load_plan(warehouse, dataset)
        led = ledger.ledger()
        with private_stage(context, led, dataset, "selection", budget) as stage:
            with source_connection(warehouse, spec, dataset) as con:
                oracle = margs.MarginalStore(con, encoded_view(dataset), marginal_table(dataset),
                                             plan.columns, plan.domain)
                result = select(spec.method, plan.domain, oracle, budget.split, spec.selection,
                                logged_charge(context, stage.charge, spec.method))
            if oracle.on_demand:
                context.log.info(f"counted on demand: {[list(c) for c in oracle.on_demand]}")
            path = write_json(warehouse, dataset, "selection.json", result.to_dict())
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
            **ledger_metadata(led, dataset, budget, context.run_id),
        })

    @dg.asset(key=key("measurements"), deps=[key("selection")], group_name=dataset, tags=PUBLIC,
              description="Noisy marginals after consistency: the privacy boundary.")
    @private_step(dataset, "measurements")
    def measurements(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                     ledger: LedgerResource) -> dg.MaterializeResult:
        plan = load_plan(warehouse, dataset)
        chosen = Selection.from_dict(read_json(warehouse, dataset, "selection.json"))
        led = ledger.ledger()
        with private_stage(context, led, dataset, "measurements", budget) as stage:
            noisy = []
            rhos = measurement_plan(chosen, plan.domain, budget.stage_rho("measurements"))
            if rhos:
                with source_connection(warehouse, spec, dataset) as con:
                    exact = margs.MarginalStore(con, encoded_view(dataset), marginal_table(dataset),
                                                plan.columns, plan.domain)(list(rhos))
                noisy = measure(exact, rhos, stage.charge)
                del exact
            consistent = make_consistent(list(chosen.one_way) + list(chosen.measured) + noisy)
            total = noisy_total(consistent)
            path = write_json(warehouse, dataset, "measurements.json", {
                "noisy_total": total, "measurements": [m.to_dict() for m in consistent]})
        return dg.MaterializeResult(metadata={
            "measurements": len(consistent),
            "noise": dg.MetadataValue.json([{"clique": list(m.clique), "sigma": round(m.sigma, 4),
                                             "rho": m.rho} for m in consistent]),
            "noisy_total": dg.MetadataValue.float(round(total, 1)),
            "path": dg.MetadataValue.path(path),
            **ledger_metadata(led, dataset, budget, context.run_id),
        })

    model = build_model_asset(dataset, spec, key)

    @dg.asset(key=key("synthetic"), deps=[key("model")], group_name=dataset, tags=PUBLIC,
              kinds={"duckdb", "parquet"},
              description=f"The synthetic table {synthetic_table(dataset)} and its Parquet copy.")
    def synthetic(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
        plan = load_plan(warehouse, dataset)
        found, noisy_total = load_measurements(warehouse, dataset)
        rows = requested_rows(spec, noisy_total)
        fitted = generate.load(str(warehouse.public_path(dataset, "model.npz")))
        from .evaluation.fidelity import MarginalCounter, fidelity_summary

        started = time.perf_counter()
        # the measured marginals of the synthetic rows, counted from the codes as they are
        # sampled (public: the rows and the noisy measurements are both public)
        counter = MarginalCounter.of(found, plan.domain)
        chunks = counter.counting(generate.sample_chunks(fitted, rows, spec.seed,
                                                         spec.model.chunk_rows,
                                                         log=context.log.info))
        # decoding (values inside bins, rare members) draws from its own stream, never the
        # sampler's: the same seed would otherwise replay the sampler's uniforms
        rng = np.random.default_rng(None if spec.seed is None else [spec.seed, 1])
        parquet = warehouse.public_path(dataset, "synthetic.parquet")
        with warehouse.connect() as con:
            written = write_synthetic(con, plan, chunks, rng, synthetic_table(dataset),
                                      str(parquet))
        seconds = time.perf_counter() - started
        context.log.info(f"sampled and wrote {written} rows in {seconds:.1f}s")
        fidelity = fidelity_summary(counter.counts, found)
        figures = {"one_way_tvd_mean": fidelity.one_way_mean,
                   "one_way_tvd_max": fidelity.one_way_max,
                   "marginal_tvd_mean": fidelity.marginal_mean,
                   "marginal_tvd_max": fidelity.marginal_max}
        context.log.info("TVD to the noisy measurements: " + ", ".join(
            f"{k} {v:.4f}" for k, v in figures.items() if v is not None))
        return dg.MaterializeResult(metadata={
            "table": synthetic_table(dataset), "parquet": dg.MetadataValue.path(str(parquet)),
            "rows": rows, "seeded": spec.seed is not None,
            "generator": "gum" if isinstance(fitted, generate.GumModel) else "clique tree",
            "sample_and_write_seconds": dg.MetadataValue.float(round(seconds, 2)),
            # DP by post-processing: charted over runs in the asset's Plots tab
            **{f"fidelity/{k}": dg.MetadataValue.float(v) for k, v in figures.items()
               if v is not None},
            "fidelity/tvd": dg.MetadataValue.json(fidelity.to_dict()),
        })

    return [source, preprocessed, marginals, selection, measurements, model, synthetic]


def build_model_asset(dataset: str, spec: DatasetSpec, key):
    """The `model` asset, a graph of three ops so that Dagster's executor runs the fit's units:
    `plan_fit` chooses the engine (`generate.choose`) and yields one dynamic output per unit of
    work (`generate.fit_units`: parallel_pgm's groups of maximal cliques, one unit for pgm and
    gum); `fit_unit` fits one unit (a step each: separate processes under the multiprocess
    executor, pods under Kubernetes or Celery); `save_model` assembles the units' results and
    writes `model.npz`. Units pass through the run's IO manager (pickles; a shared one such as
    S3 when steps run on several machines)."""
    prefix = f"{dataset}_model"

    def load_inputs(warehouse: WarehouseResource):
        plan = load_plan(warehouse, dataset)
        found, noisy_total = load_measurements(warehouse, dataset)
        return plan, found, noisy_total

    @dg.op(name=f"{prefix}_plan_fit", ins={"after": dg.In(dg.Nothing)}, out=dg.DynamicOut())
    def plan_fit(context: dg.OpExecutionContext, warehouse: WarehouseResource):
        plan, found, noisy_total = load_inputs(warehouse)
        rows = requested_rows(spec, noisy_total)
        choice = generate.choose(spec.generator, plan.domain, found, rows, spec.model)
        context.log.info(f"generator {choice.engine}: {choice.reason}")
        try:
            size = generate.check(choice.engine, plan.domain, found, spec.model, dataset)
        except generate.ModelTooLarge as e:
            raise dg.Failure(description=f"{e} (or set generator: auto or gum)") from None
        if size:
            context.log.info(f"fitting {choice.engine}: {len(found)} measurements, {size}")
        units = generate.fit_units(choice.engine, plan.domain, found, spec.model)
        context.log.info(f"{len(units)} unit(s) of work")
        metadata = {
            "generator": choice.engine, "requested_generator": spec.generator,
            "choice_reason": dg.MetadataValue.text(choice.reason),
            "estimates": dg.MetadataValue.json([e.to_dict() for e in choice.estimates]),
            "units": len(units),
            **(size or {}),
        }
        for k, unit in enumerate(units):
            yield dg.DynamicOutput({"engine": choice.engine, "unit": unit, "metadata": metadata},
                                   mapping_key=f"unit_{k}")

    @dg.op(name=f"{prefix}_fit_unit")
    def fit_unit(context: dg.OpExecutionContext, warehouse: WarehouseResource, work: dict) -> dict:
        plan, found, noisy_total = load_inputs(warehouse)
        started = time.perf_counter()
        result = generate.fit_unit(work["engine"], work["unit"], plan.domain, found, noisy_total,
                                   spec.model, log=context.log.info)
        seconds = time.perf_counter() - started
        context.log.info(f"{work['engine']} unit {work['unit']} fitted in {seconds:.1f}s")
        return {**work, "result": result, "seconds": seconds}

    @dg.op(name=f"{prefix}_save")
    def save_model(context: dg.OpExecutionContext, warehouse: WarehouseResource,
                   fitted: list[dict]) -> dg.Output:
        plan, found, _ = load_inputs(warehouse)
        engine, metadata = fitted[0]["engine"], fitted[0]["metadata"]
        model = generate.assemble(engine, plan.domain, found, [f["result"] for f in fitted])
        path = warehouse.public_path(dataset, "model.npz")
        generate.save(model, str(path))
        seconds = [f["seconds"] for f in fitted]
        context.log.info(f"{engine} fitted in {max(seconds):.1f}s (slowest of {len(seconds)} "
                         f"unit(s), {sum(seconds):.1f}s in all)")
        return dg.Output(str(path), metadata={
            **metadata, "path": dg.MetadataValue.path(str(path)),
            "fit_seconds": dg.MetadataValue.float(round(max(seconds), 2)),
            "unit_seconds": dg.MetadataValue.json([round(x, 2) for x in seconds]),
        })

    @dg.graph_asset(key=key("model"), group_name=dataset, tags=PUBLIC, kinds={"python"},
                    ins={"measurements": dg.AssetIn(key=key("measurements"),
                                                    dagster_type=dg.Nothing)},
                    description=f"The fitted generator ({spec.generator}: pgm, parallel_pgm or "
                                "gum), its units of work run by Dagster's executor.")
    def model(measurements):
        return save_model(plan_fit(measurements).map(fit_unit).collect())

    return model


def logged_charge(context, charge, method: str):
    """`charge` that also logs each mechanism call (public: its rho and parameters), so a user
    watching an adaptive selection sees its rounds go by. No elapsed time: the time between
    mechanisms is private work (DESIGN.md section 4)."""
    calls = [0]

    def wrapped(spend, **params):
        charge(spend, **params)
        calls[0] += 1
        what = ", ".join(f"{k}={v}" for k, v in params.items())
        context.log.info(f"{method}: mechanism {calls[0]} ({what}) charged rho {spend.rho:.3g}")
    return wrapped
