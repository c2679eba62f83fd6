"""The asset factory: one select-measure-generate pipeline per dataset
(docs/decisions/0007-asset-graph.md).

Each asset is wiring: read its inputs through the dataset's artifact store (`artifacts.artifacts`,
a `infra.store.FolderStore` over `<public_dir>/<dataset>/`), call one stage function of
`core/stages.py` (the same the notebook API calls), charge the ledger through `private_stage`,
write its output through the store and return public metadata. The `model` graph asset is in
model.py. Asset keys are `[*key_prefix, <dataset>, <stage>]`, grouped per dataset unless the host
names a group, tagged `privacy=private|public`, with the resource keys of `naming.Names`; a
dataset whose source is a host's asset starts at `preprocessed`, downstream of that asset.
Private-zone assets publish shapes only (column names, domain sizes, numbers of marginals),
never counts. Every stage that reads private data runs under `private_step` (private_log.py):
its failures are generic in public and detailed in the owner-only private log. Every stage
after `preprocessed` reads the plan through `plan_for` (infra/store.py), which refuses a plan made
from another spec than the loaded one (`config.plan_digest`), before the stage reserves budget
or writes anything.
"""

import functools
import json
import os
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from dp_synth_assets.resources.ledger import LedgerError, LedgerResource
from dp_synth_assets.resources.warehouse import WarehouseResource

from .artifacts import artifacts, holding, synthetic_table  # noqa: F401 - synthetic_table re-exported
from .checks.asset_checks import check_synthetic, synthetic_check_specs
from .budget import STAGES, DatasetBudget, budget_metadata, ledger_metadata, private_stage
from .core import change
from .core import generate
from .core.generate import multiprocess
from .core import scans
from .infra.engines import open_engine
from .core import stages
from .core.config import AttachSource, DatasetSpec, TableSource
from .core.source import attach_source, describe_source, source_path, source_relation
from .core.sql import sql
from .core.synthesize import write_synthetic
from .infra import private_files
from .model import DESCRIPTION as MODEL_DESCRIPTION, build_model_asset, fit_model
from .naming import Names
from .private_log import append_private_note, private_dir, private_log_path, private_step
from .writes import check_writes, warehouse_writes

PRIVATE = {"privacy": "private"}
PUBLIC = {"privacy": "public"}


def encoded_view(dataset: str) -> str:
    return f"private.{dataset}_encoded"


def marginal_table(dataset: str) -> str:
    return f"private.{dataset}_marginals"


@contextmanager
def source_connection(warehouse: WarehouseResource, spec: DatasetSpec, dataset: str,
                      read_only: bool = False, lock_timeout_seconds: float | None = None):
    """A warehouse connection that can read the dataset's source and its encoded view: with an
    `attach:` source, the source database is attached to it first (`source.attach_source`,
    whose `SourceError` the stage's `private_errors` turns into a public failure). With an
    `engine:` other than duckdb, the dataset's scan engine over it (core/scans.py)."""
    # a table source lives in the warehouse: a missing warehouse is an error, never created;
    # another engine's store only receives counts: writable, created on first use
    elsewhere = spec.engine.type != "duckdb"
    with warehouse.connect(read_only=read_only and not elsewhere,
                           lock_timeout_seconds=lock_timeout_seconds,
                           create=not isinstance(spec.source, TableSource) or elsewhere) as con:
        attach_source(con, spec, Path(warehouse.base_dir), dataset)
        if spec.engine.type == "duckdb":
            yield con
            return
        with open_engine(spec.engine, con) as engine:
            yield engine


def secret_path(warehouse: WarehouseResource) -> Path:
    """The installation's change-detection secret:
    `<folder of database>/private/change_detection.key`."""
    return private_dir(warehouse) / "change_detection.key"


def change_secret(warehouse: WarehouseResource) -> bytes:
    """The installation's change-detection secret: the environment variable the warehouse
    resource's `change_secret_env` names (DP_SYNTH_CHANGE_SECRET by default), when set, else
    the file `secret_path`, created on first use."""
    text = os.environ.get(warehouse.change_secret_env) if warehouse.change_secret_env else None
    if text:
        return change.secret_from_hex(text, f"the environment variable {warehouse.change_secret_env}")
    return private_files.load_or_create_secret(secret_path(warehouse))


def change_state_path(warehouse: WarehouseResource, dataset: str) -> Path:
    return private_dir(warehouse, dataset) / "change_state.json"


def fingerprint(warehouse: WarehouseResource, spec: DatasetSpec,
                lock_timeout_seconds: float | None = None, dataset: str = "") -> str:
    """The private MAC of the source's change signal, HMAC-SHA256 under the installation's
    secret (`core/change.py`). The signal: for a table (local, in an attached database or in
    the dataset's scan engine) or Parquet at a URI (object storage), its schema and the
    engine's content summary, an order-independent aggregate of per-row digests computed where
    the rows are (`ScanEngine.content_summary`, one scan); for local Parquet/CSV files, their
    names, sizes and modification times (no scan). Private: it is kept in the private zone and
    never published;
    `source_version` turns it into the public, content-free version id."""
    if isinstance(spec.source, (TableSource, AttachSource)) or source_path(
            spec, Path(warehouse.base_dir)) is None:  # a table, or Parquet at a URI
        with source_connection(warehouse, spec, dataset, read_only=True,
                               lock_timeout_seconds=lock_timeout_seconds) as con:
            engine = scans.as_engine(con)
            relation = source_relation(spec, Path(warehouse.base_dir))
            schema = describe_source(engine, relation, dataset, spec.entry)
            summary = engine.content_summary(relation)
        signal = json.dumps({"schema": schema, "content": summary})
    else:
        path = source_path(spec, Path(warehouse.base_dir))
        files = sorted(path.parent.glob(path.name))
        signal = json.dumps([[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files])
    return change.change_mac(change_secret(warehouse), signal)


def source_version(warehouse: WarehouseResource, spec: DatasetSpec, dataset: str,
                   lock_timeout_seconds: float | None = None) -> str:
    """The source's public version: an opaque random id, the same while the source's private
    MAC (`fingerprint`) is unchanged and a new one whenever it changes (`private_files.observe`,
    shared by the sensor and the `source` observation). It is the `source` asset's data version
    and the sensor's cursor; it says only "changed since last time"."""
    mac = fingerprint(warehouse, spec, lock_timeout_seconds, dataset)
    return private_files.observe(change_state_path(warehouse, dataset), mac)


def upstream_key(dataset: str, spec: DatasetSpec, names: Names = Names()) -> dg.AssetKey:
    """The asset the first stage depends on: the host's asset named by `source.asset`, else the
    dataset's own observable `source` asset."""
    if spec.source.asset is not None:
        return dg.AssetKey(list(spec.source.asset))
    return names.key(dataset, "source")


def build_dataset_assets(dataset: str, spec: DatasetSpec, names: Names = Names(),
                         extra: Sequence["Stage"] = ()) -> list:
    """The dataset's assets, named by `names` (naming.py): its observable `source` and its
    chain of stages (`STAGES`, then the `extra` stages downstream of `synthetic`, such as the
    utility report) in one stage op (`stage_asset`), or, when the fit's units run as steps of
    their own (`generate.multiprocess`), the stages before `model`, the model graph
    (model.py) and the stages after it. With a `source.asset`, the first stage depends on the
    host's asset and there is no `source` asset."""
    key = lambda stage: names.key(dataset, stage)  # noqa: E731
    budget = DatasetBudget.of(spec)
    view, table = encoded_view(dataset), marginal_table(dataset)

    @dg.observable_source_asset(key=key("source"), **names.asset_args(dataset, PRIVATE, source=True),
                                required_resource_keys=names.resource_keys("warehouse"),
                                description=f"The private source table of {dataset!r}; its data "
                                            "version is an opaque id that changes when it does.")
    @names.bind("warehouse")
    @private_step(dataset, "source")
    def source(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> dg.DataVersion:
        return dg.DataVersion(source_version(warehouse, spec, dataset))

    @private_step(dataset, "preprocessed")
    def preprocessed(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                     ledger: LedgerResource) -> dg.MaterializeResult:
        led = ledger.ledger()
        check_writes(context, warehouse, dataset, "preprocessed", spec, budget)
        with holding(context, warehouse, dataset, "preprocessed", names), \
                private_stage(context, led, dataset, "preprocessed", budget) as stage:
            def note(fallbacks):  # what the values did: the owner's log, on every run
                append_private_note(private_log_path(warehouse, dataset), dataset,
                                    "preprocessed", context.run_id, fallbacks.report())

            with source_connection(warehouse, spec, dataset) as con:
                plan = stages.preprocess(con, spec, dataset, Path(warehouse.base_dir), view,
                                         budget, stage.charge, note, log=context.log.info)
            path = artifacts(warehouse, dataset, context).write_plan(plan)
        context.log.info(f"encoded {len(plan.columns)} columns; domain {plan.domain}")
        return dg.MaterializeResult(metadata={
            "encoding_plan": dg.MetadataValue.json(json.loads(plan.to_json())),
            "domain": dg.MetadataValue.json(plan.domain), "view": view,
            "plan_path": dg.MetadataValue.path(path),
            **(ledger_metadata(led, dataset, budget, context.run_id) if budget.preprocess else {}),
        })

    @private_step(dataset, "marginals")
    def marginals(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                  ledger: LedgerResource) -> dg.MaterializeResult:
        check_writes(context, warehouse, dataset, "marginals", spec, budget)
        with holding(context, warehouse, dataset, "marginals", names):
            plan = artifacts(warehouse, dataset, context).plan_for(spec)
            with private_stage(context, ledger.ledger(), dataset, "marginals", budget), \
                    source_connection(warehouse, spec, dataset) as con:
                counted = stages.marginals(con, spec, plan, view, table, log=context.log.info)
        # no wall time: the scan's duration depends on the private rows
        # (docs/decisions/0003-privacy-perimeter.md)
        context.log.info(f"{len(counted.cliques)} marginals ({counted.cells} cells) in one scan")
        return dg.MaterializeResult(metadata={
            "table": counted.table, "marginals": len(counted.cliques), "cells": counted.cells,
        })

    @private_step(dataset, "selection")
    def selection(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                  ledger: LedgerResource) -> dg.MaterializeResult:
        led = ledger.ledger()
        check_writes(context, warehouse, dataset, "selection", spec, budget)
        with holding(context, warehouse, dataset, "selection", names):
            store = artifacts(warehouse, dataset, context)
            plan = store.plan_for(spec)
            with private_stage(context, led, dataset, "selection", budget) as stage:
                with source_connection(warehouse, spec, dataset) as con:
                    oracle = stages.oracle(con, plan, view, table)
                    result = stages.select(spec, plan, oracle, budget,
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
            **ledger_metadata(led, dataset, budget, context.run_id),
        })

    @private_step(dataset, "measurements")
    def measurements(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                     ledger: LedgerResource) -> dg.MaterializeResult:
        def exact(cliques):  # the source is opened only when something is left to measure
            with source_connection(warehouse, spec, dataset) as con:
                return stages.oracle(con, plan, view, table)(cliques)

        led = ledger.ledger()
        check_writes(context, warehouse, dataset, "measurements", spec, budget)
        with holding(context, warehouse, dataset, "measurements", names):
            store = artifacts(warehouse, dataset, context)
            plan = store.plan_for(spec)
            with private_stage(context, led, dataset, "measurements", budget) as stage:
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
            **ledger_metadata(led, dataset, budget, context.run_id),
        })

    def model(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
              ledger: LedgerResource) -> dg.MaterializeResult:
        return fit_model(context, warehouse, dataset, spec, names)

    def synthetic(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                  ledger: LedgerResource) -> dg.MaterializeResult:
        from .evaluation.fidelity import MarginalCounter, fidelity_summary

        with holding(context, warehouse, dataset, "synthetic", names):
            store = artifacts(warehouse, dataset, context)
            plan = store.plan_for(spec)
            store.require_consistent("measurements", "model")
            found, fitted = store.measurements(), store.model()
            started = time.perf_counter()
            draw = stages.sample(spec, fitted, found.noisy_total, seed=spec.seed,
                                 log=context.log.info)
            # the measured marginals of the synthetic rows, counted from the codes as they are
            # sampled (public: the rows and the noisy measurements are both public)
            counter = MarginalCounter.of(found.measurements, plan.domain)
            with warehouse_writes(warehouse, dataset, "the synthetic table"), \
                    warehouse.connect() as con:
                # the Parquet goes into this run's folder, then the table is replaced and
                # stamped with the run id (the commit point), then the run's set is published
                written = write_synthetic(con, plan, counter.counting(draw.chunks),
                                          draw.decode_rng, synthetic_table(dataset),
                                          store.writing("synthetic.parquet"),
                                          stamp=context.run_id)
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
                    "dagster/table_name": dg.MetadataValue.text(
                        f"{catalog}.{synthetic_table(dataset)}"),
                    "dagster/storage_kind": dg.MetadataValue.text("duckdb")}
        # where the dataset's budget stands after this run's spend (read only, never charged)
        try:
            budget_figures = budget_metadata(ledger.ledger().summary(dataset), budget,
                                             spec.privacy.epsilon, spec.privacy.delta)
        except LedgerError as e:  # the table is written; a broken ledger fails the next spend
            context.log.warning(f"budget metadata left out: {e}")
            budget_figures = {}
        return dg.MaterializeResult(metadata={
            **standard,
            **budget_figures,
            "table": synthetic_table(dataset),
            "parquet": dg.MetadataValue.path(str(store.path("synthetic.parquet"))),
            "rows": draw.rows, "seeded": spec.seed is not None,
            "generator": "gum" if isinstance(fitted, generate.GumModel) else "clique tree",
            "sample_and_write_seconds": dg.MetadataValue.float(round(seconds, 2)),
            # DP by post-processing: charted over runs in the asset's Plots tab
            **{f"fidelity/{k}": dg.MetadataValue.float(v) for k, v in figures.items()
               if v is not None},
            "fidelity/tvd": dg.MetadataValue.json(fidelity.to_dict()),
        })

    spec_of = {
        "preprocessed": names.spec(dataset, "preprocessed", PRIVATE,
                                   deps=[upstream_key(dataset, spec, names)],
                                   kinds={spec.engine.type}, description="Public encoding plan "
                                   "and the encoded view (private)."),
        "marginals": names.spec(dataset, "marginals", PRIVATE, deps=[key("preprocessed")],
                                kinds={spec.engine.type}, description="Exact marginals the "
                                "method needs, in one scan (private zone)."),
        "selection": names.spec(dataset, "selection", PUBLIC, deps=[key("marginals")],
                                description=f"Marginal selection ({spec.method}) with its noisy "
                                "1-way marginals."),
        "measurements": names.spec(dataset, "measurements", PUBLIC, deps=[key("selection")],
                                   description="Noisy marginals after consistency: the privacy "
                                   "boundary."),
        "model": names.spec(dataset, "model", PUBLIC, deps=[key("measurements")],
                            kinds={"python"},
                            description=MODEL_DESCRIPTION.format(generator=spec.generator)),
        "synthetic": names.spec(dataset, "synthetic", PUBLIC, deps=[key("model")],
                                kinds={"duckdb", "parquet"}, description=f"The synthetic table "
                                f"{synthetic_table(dataset)} and its Parquet copy."),
    }
    run_of = {"preprocessed": preprocessed, "marginals": marginals, "selection": selection,
              "measurements": measurements, "model": model, "synthetic": synthetic}
    checks_of = {"synthetic": (tuple(synthetic_check_specs(dataset, names)), functools.partial(
        check_synthetic, dataset=dataset, spec=spec, names=names))}
    chain = [Stage(spec_of[s], run_of[s], *checks_of.get(s, ())) for s in STAGES] + list(extra)
    first = [] if spec.source.asset is not None else [source]
    if not multiprocess(spec.generator, spec.model):
        return [*first, stage_asset(dataset, names, chain, "stages")]
    # the fit's units run as steps of the executor: the model is a graph asset between two ops
    cut = STAGES.index("model")
    return [*first, stage_asset(dataset, names, chain[:cut], "stages"),
            build_model_asset(dataset, spec, names),
            stage_asset(dataset, names, chain[cut + 1:], "stages_after_model")]


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


def stage_started(key: dg.AssetKey) -> str:
    """The log line that opens a stage in its stage op (public: the fact and time a stage starts,
    as Dagster's own events of a step of its own would show)."""
    return f"stage {key.path[-1]} started"


def stage_asset(dataset: str, names: Names, chain: list[Stage], op: str) -> dg.AssetsDefinition:
    """The stages of `chain` as one subsettable multi-asset, one op `<dataset>_<op>`: a run
    computes the stages it selects, in the chain's order, each yielding its own materialization
    (so a failure leaves the earlier stages materialized and the later ones not). One op per
    dataset instead of one per stage: Dagster builds, resolves and snapshots every op when a code
    location loads, so the op count sets how long hundreds of datasets take to load. The lineage
    in the UI, the asset keys, selection by key, automation conditions and checks are per stage
    as before."""
    pool = {"pool": names.pool} if names.pool else {}

    @dg.multi_asset(name=names.op_name(dataset, op), specs=[s.spec for s in chain],
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
