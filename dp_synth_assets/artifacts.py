"""The pipeline's artifact store and its runs: one run per dataset at a time, each run's public
artifacts in a folder of its own, published by switching one pointer.

`artifacts(warehouse, dataset, context)` is the step's `infra.store.RunStore` over
`<public_dir>/<dataset>/`; `holding(...)` wraps every step that writes or spends for a dataset
(it takes the dataset, repairs what a killed run left, and frees it when the run's last writing
stage publishes or a step fails). A missing or inconsistent artifact fails the step with a
`dagster.Failure` naming the stages to materialize; messages hold paths, run ids and stage names
only: public. The folder layout, the lock and the repair: docs/decisions/0007-asset-graph.md.
"""

from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from dp_synth_assets.resources.warehouse import WarehouseResource

from .budget import STAGES, run_asset_keys
from .infra.ledger_store import DEFAULT_SCHEMA, PostgresDatabase, is_postgres
from .infra.runs import DEFAULT_RUN_WAIT_SECONDS, RunWaitTimeout, dataset_lock
from .infra.store import (ARTIFACTS, KEEP_RUNS, InconsistentArtifacts, MissingArtifact, RunStore,
                         StalePlan, location, remove_temporaries)
from .writes import public_zone_writes


class PublicArtifacts(RunStore):
    """A `RunStore` whose missing or inconsistent artifact, or plan made from another spec, is a
    `dagster.Failure` (public, passed unchanged by `private_log.private_step`)."""

    def _read(self, name: str):
        try:
            return super()._read(name)
        except MissingArtifact as e:
            raise dg.Failure(description=str(e)) from None

    def require_consistent(self, *names: str) -> None:
        try:
            super().require_consistent(*names)
        except InconsistentArtifacts as e:
            raise dg.Failure(description=str(e)) from None

    # a write error is a public write failure naming the run's folder (`writes.write_failure`)
    def _write(self, name: str, record) -> str:
        with public_zone_writes(self.dataset, str(self.root), ARTIFACTS[name].file):
            return super()._write(name, record)

    @contextmanager
    def writing(self, name: str):
        with public_zone_writes(self.dataset, str(self.root), name), \
                super().writing(name) as tmp:
            yield tmp

    def publish(self, keep: int = KEEP_RUNS) -> str:
        with public_zone_writes(self.dataset, str(self.root), "the run's pointer"):
            return super().publish(keep)

    def plan_for(self, spec):
        try:
            return super().plan_for(spec)
        except StalePlan as e:
            raise dg.Failure(description=str(e)) from None


def synthetic_table(dataset: str) -> str:
    """The warehouse table of `dataset`'s synthetic rows: `synthetic.<dataset>`."""
    return f"synthetic.{dataset}"


def dataset_dir(warehouse: WarehouseResource, dataset: str):
    """`<public_dir>/<dataset>`: a local folder, or a `UPath` on an object store."""
    return location(warehouse.public_dir) / dataset


def artifacts(warehouse: WarehouseResource, dataset: str, context=None) -> PublicArtifacts:
    """The artifact store of `dataset`: the set of the run of `context` (see "As implemented:
    the artifact store and its runs" in docs/decisions/0007-asset-graph.md), or the published set
    without one."""
    if context is None:
        return PublicArtifacts(dataset_dir(warehouse, dataset), dataset)
    run = context.run
    parents = tuple(p for p in (run.parent_run_id, run.root_run_id) if p)
    return PublicArtifacts(dataset_dir(warehouse, dataset), dataset, run.run_id, parents)


def last_writer(context, dataset: str, names) -> str:
    """The run's last stage of `dataset` that writes (where it publishes and frees the dataset)."""
    selection = run_asset_keys(context)
    if not selection:
        return STAGES[-1]
    in_run = [s for s in STAGES if names.key(dataset, s) in selection]
    return in_run[-1] if in_run else STAGES[-1]


def _finished(context):
    def finished(run_id: str) -> bool:
        try:
            run = context.instance.get_run_by_id(run_id)
        except Exception:  # noqa: BLE001 - an instance that cannot tell frees nothing
            return False
        return run is not None and run.is_finished
    return finished


def ledger_database(ledger) -> PostgresDatabase | None:
    """The PostgreSQL schema of a `LedgerResource` whose ledger is there, else None."""
    path = getattr(ledger, "path", None)
    if not is_postgres(str(path)):
        return None
    return PostgresDatabase(str(path), getattr(ledger, "schema_name", DEFAULT_SCHEMA))


def run_lock(context, warehouse: WarehouseResource, dataset: str, names=None):
    """The run lock of `dataset` (`infra.runs.dataset_lock`): in the ledger's PostgreSQL schema
    when the step's ledger resource (key `names.ledger`) is there, else the file."""
    ledger = None
    if names is not None:
        ledger = getattr(context.resources, names.ledger, None)
    return dataset_lock(dataset_dir(warehouse, dataset), dataset, ledger_database(ledger))


def take_dataset(context, warehouse: WarehouseResource, dataset: str, names=None) -> bool:
    """Hold `dataset` for the step's run (waiting for another run to end, `RunWaitTimeout` as a
    `dagster.Failure` after `run_wait_seconds`); on the run's first step, repair what a killed
    run left. Returns whether this step took it."""
    lock = run_lock(context, warehouse, dataset, names)
    wait = getattr(warehouse, "run_wait_seconds", DEFAULT_RUN_WAIT_SECONDS)
    try:
        fresh = lock.acquire(context.run_id, timeout=wait, finished=_finished(context),
                             log=context.log.info)
    except RunWaitTimeout as e:
        raise dg.Failure(description=str(e)) from None
    if fresh:
        try:
            repair(warehouse, dataset, context.log.info)
        except BaseException:
            lock.release(context.run_id)
            raise
    return fresh


def repair(warehouse: WarehouseResource, dataset: str, log=None) -> None:
    """What a killed run may leave, set right by the next run holding the dataset: temporary
    files, and a synthetic table committed but not published (`reconcile_synthetic`)."""
    from .infra.store import reconcile_synthetic

    root = dataset_dir(warehouse, dataset)
    removed = remove_temporaries(root)
    if removed and log:
        log(f"dataset {dataset!r}: removed {len(removed)} temporary file(s) a stopped run left")
    if not Path(warehouse.database).exists():
        return
    with warehouse.connect() as con:
        reconcile_synthetic(con, synthetic_table(dataset), root, log)


def free_dataset(context, warehouse: WarehouseResource, dataset: str, names=None) -> None:
    """Release `dataset`'s run lock (`run_lock`) if the run of `context` holds it."""
    run_lock(context, warehouse, dataset, names).release(context.run_id)


@contextmanager
def holding(context, warehouse: WarehouseResource, dataset: str, stage: str, names):
    """Run a writing step of `dataset` holding it (module docstring): `stage` the step's stage;
    when it is the run's last writing stage, its set is published and the dataset freed at the
    end; any failure frees it."""
    take_dataset(context, warehouse, dataset, names)
    try:
        yield
    except BaseException:
        free_dataset(context, warehouse, dataset, names)
        raise
    if stage == last_writer(context, dataset, names):
        try:
            store = artifacts(warehouse, dataset, context)
            if store.own is not None and store.own.is_dir():
                store.publish()
                context.log.info(f"published the artifacts of run {context.run_id} "
                                 f"({store.own})")
        finally:
            free_dataset(context, warehouse, dataset, names)
