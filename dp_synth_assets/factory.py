"""dp-synth as definitions a host Dagster project merges with its own.

`dp_synth_definitions` builds, from a datasets.yaml registry, the assets, checks, jobs, schedules
and sensors of every dataset, and the resources they use, under keys the host chooses (naming.py):

    defs = dg.Definitions.merge(host_defs, dp_synth_definitions(datasets="datasets.yaml", ...))

It claims nothing else of the host's code location: no executor, no generic resource key, no use
of the host's `io_manager`. The registry is validated first: a malformed datasets.yaml fails
when the definitions load. What it leaves alone, a source that is a host's asset, and what is
validated when: "As implemented: the factory" in docs/decisions/0007-asset-graph.md.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg

from dp_synth_assets.resources.ledger import DEFAULT_SCHEMA, LedgerResource, is_postgres
from dp_synth_assets.resources.warehouse import WarehouseResource

from .automation import build_job, build_schedule, build_source_sensor, resynthesis_assets
from .budget import DatasetBudget
from .conditions import automation_sensor
from .current_budget import budget_asset, build_budget_sensor
from .dataset_context import DatasetContext, family_contexts
from .io_manager import ObjectStoreIOManager
from .core import family
from .core.config import (DatasetSpec, RegistryError, TableSource, load_registry,
                          parse_registry)
from .core.source import source_available, source_path
from .core.units import DEFAULT_WAREHOUSE_NAME, aliases as unit_aliases, checked_warehouse_name
from .infra.store import check_zone, is_url, location
from .core.units import group_name as unit_group_name, privacy_units, source_identity
from .naming import names as make_names
from .pipeline import build_dataset_assets
from .source_check import CheckedSources, checked_sources
from .utility_report import build_utility_report

log = logging.getLogger("dp_synth")
IO_FOLDER = ".dp_synth_io"


def _check_shared_limits(registry: dict, units: dict[str, str]) -> None:
    """Entries of one unit must meet one ledger limit: the same rho and delta_extra limits (a
    column discovered by thresholding sets half of the limit's delta aside for delta_extra)."""
    members: dict[str, list[str]] = {}
    for name, unit in units.items():
        members.setdefault(unit, []).append(name)
    for unit, shared in members.items():
        if len(shared) < 2:
            continue  # one entry meets its own limit: nothing to compare
        limits = {}
        for name in shared:
            budget = DatasetBudget.of(registry[name])
            limits[name] = (budget.limit_rho, budget.limit_delta_extra)
        if len(set(limits.values())) > 1:
            raise RegistryError(
                f"datasets {' and '.join(map(repr, limits))} share budget group "
                f"{unit_group_name(unit)!r} but split its delta differently: a column whose "
                f"categories or bounds are discovered with thresholding sets half of the limit's "
                f"delta aside for it, so either every entry of the group discovers such a column "
                f"or none does. Declare the categories of those columns, or put the entries in "
                f"separate budget groups (only if they read different sources).")


def _check_relations(registry: dict[str, DatasetSpec]) -> None:
    """Refuse, naming the entry and the fix, a family the Dagster stages cannot run yet: a
    source that is not a `table:` of the warehouse or a scan engine other than duckdb (the
    family's views join the two tables inside the warehouse), a `report:` on either, a child
    column `core.family.child_problems` refuses, a child's `rows:`, and a child whose
    `privacy:` differs from its parent's (one budget per family: the child spends a share of the
    parent's run budget, under the parent's limit)."""
    problems = []
    for name, spec in registry.items():
        if spec.parent is None:
            continue
        parent = registry[spec.parent.dataset]
        for entry in (spec, parent):
            if not isinstance(entry.source, TableSource) or entry.engine.type != "duckdb":
                problems.append(f"{entry.entry}: a dataset of a relation reads a `table:` source "
                                "of the warehouse with the duckdb engine for now; load the table "
                                "into the warehouse, or remove `parent:` to synthesize it alone")
        problems += [f"{spec.entry}: {p}" for p in family.child_problems(spec.columns,
                                                                           parent.columns)]
        for entry in (spec, parent):
            if entry.report is not None:
                problems.append(f"{entry.entry}: the utility report of a relation's table is not "
                                "supported yet; remove `report:`")
        if spec.rows != "same":
            problems.append(f"{spec.entry}: a child's row count is its synthetic parents' "
                            "children counts; remove `rows:` (set it on the parent "
                            f"{spec.parent.dataset!r})")
        if spec.privacy != parent.privacy:
            problems.append(f"{spec.entry}: a child spends its parent's budget (one budget per "
                            f"family), so its `privacy:` must be the parent's; copy the "
                            f"`privacy:` block of {spec.parent.dataset!r}")
    if problems:
        raise RegistryError("relational datasets (`parent:`): " + "; ".join(
            dict.fromkeys(problems)) + " (docs/relational.md)")


def _contexts(registry: dict[str, DatasetSpec], names) -> dict[str, DatasetContext]:
    """Every dataset's `DatasetContext`; a family's two (`dataset_context.family_contexts`)."""
    found = {}
    for name, spec in registry.items():
        if spec.parent is not None:
            parent = spec.parent.dataset
            found[parent], found[name] = family_contexts(parent, registry[parent], name, spec,
                                                         names)
    return {name: found.get(name) or DatasetContext.of(name, spec, names)
            for name, spec in registry.items()}


def _check_schedules(registry: dict[str, DatasetSpec]) -> None:
    """Refuse, naming the entry, the key and the value, a `schedule` Dagster cannot run: five
    fields with one out of range (`61 * * * *`), or a day no month has (`0 0 30 2 *`). The
    registry checks the five fields; Dagster's rule for the rest is its ScheduleDefinition's,
    applied here to a probe, so the user reads where to fix it rather than Dagster's own
    definition error."""
    for spec in registry.values():
        if spec.schedule is None:
            continue
        try:
            dg.ScheduleDefinition(name="dp_synth_schedule_probe", cron_schedule=spec.schedule,
                                  target=dg.AssetSelection.all())
        except dg.DagsterInvalidDefinitionError:
            raise RegistryError(
                f"{spec.entry}: `schedule` {spec.schedule!r} is not a cron expression Dagster "
                f"can run. Write five fields, minute (0-59), hour (0-23), day of month (1-31), "
                f"month (1-12 or JAN-DEC) and day of week (0-7 or SUN-SAT), on a day some month "
                f"has, e.g. \"0 3 * * 1\" (Mondays at 03:00); or remove `schedule`") from None


def needs_job(spec: DatasetSpec) -> bool:
    """Whether the dataset needs a job of its own: its schedule launches one (an external
    table's cron), or its fit's units run on the multiprocess executor the job declares
    (`automation.build_job`). Any other dataset runs in the location's implicit asset job:
    materialized from the UI, the CLI, declarative automation or its source-change sensor (which
    targets the dataset's assets, not a job)."""
    from .core.generate import multiprocess

    external = spec.source.asset is None and bool(spec.schedule)
    return external or multiprocess(spec.generator, spec.model)


def dp_synth_definitions(
        datasets: str | Path | Mapping[str, DatasetSpec | Mapping], warehouse: str | Path,
        ledger: str | Path, public_dir: str | Path,
        *, private_dir: str | Path | None = None,
        base_dir: str | Path | None = None, origin: str = "datasets",
        ledger_head: str | Path | None = None, ledger_schema: str = DEFAULT_SCHEMA,
        key_prefix: str | Sequence[str] | None = None, group_name: str | None = None,
        tags: Mapping[str, str] | None = None, owners: Sequence[str] | None = None,
        automation_condition: dg.AutomationCondition | None = None,
        warehouse_resource_key: str = "dp_synth_warehouse",
        ledger_resource_key: str = "dp_synth_ledger",
        io_manager_key: str = "dp_synth_io_manager",
        io_manager: dg.ConfigurableIOManager | dg.IOManagerDefinition | None = None,
        pool: str | None = "dp_synth_warehouse", dataset_jobs: bool = False,
        warehouse_name: str = DEFAULT_WAREHOUSE_NAME) -> dg.Definitions:
    """The dp-synth definitions of the registry `datasets`, to merge with the host's (module
    docstring): a datasets.yaml path, or a mapping of dataset names to entries of that schema
    (validated by the same model, `core.config.parse_registry`, errors prefixed by `origin`,
    which every later message that asks to edit an entry names too (`DatasetSpec.entry`);
    their relative source files are read from `base_dir`, default the working directory).

    `warehouse`: the DuckDB file of the private zone (where `table:` sources are read and the
    synthetic tables written). `warehouse_name`: the warehouse's stable name, which names its
    tables' privacy units (`core.units`: never the file's path, so moving or copying the project
    keeps the spend; give two warehouses that share one ledger different names). `ledger`: the
    privacy ledger's SQLite file (`ledger_head`: its mirrored head file, default: the ledger's
    path + '.head'), or a postgresql:// URL of the database holding it in the schema
    `ledger_schema` (the dataset run locks too). `public_dir`: the public-zone folder, a path or
    an object-store URL (`s3://bucket/prefix`, `gs://`, `az://` ...; the `objectstore` extra).
    `private_dir`: the private zone's folder for its files (the private log, the utility
    report, the change-detection secret), a path or a URL, default `private` beside the
    warehouse file. A zone at a URL is probed when the definitions load (`check_zones`).
    `key_prefix`: prepended to every asset key (`[*key_prefix, <dataset>, <stage>]`).
    `group_name`: one group for every dp-synth asset (default: `Names.label`, i.e. `dp_synth`,
    or the key prefix joined by `__`). `tags`, `owners`: added to every dp-synth asset.
    `automation_condition`: set on every materializable dp-synth asset; without it, a dataset
    whose source is a host's asset and that asks for `on_source_change: resynthesize` or a
    `schedule` gets dp-synth's budget-aware conditions (conditions.py), evaluated by the sensor
    `<label>_automation`; the sensor `<label>_budget` observes each dataset's current budget on
    its `budget` asset (current_budget.py). `*_resource_key`: the keys under which the
    warehouse, the ledger and the IO manager of the model's units are provided. `io_manager`:
    that IO manager (default: pickles under `<public_dir>/.dp_synth_io`, Dagster's
    `FilesystemIOManager` or, on an object store, `io_manager.ObjectStoreIOManager`; the units
    are public, post-processing of the noisy measurements). `pool`: the concurrency pool of the
    steps that open the warehouse (None: no pool). `dataset_jobs`: a job `<dataset>_synthesis`
    for every dataset; by default only where one is needed (`needs_job`): Dagster resolves each job
    against the whole asset graph when the code location loads, a cost that grows with the
    square of the datasets."""
    names = make_names(key_prefix, group_name=group_name, tags=tags, owners=owners,
                       automation_condition=automation_condition,
                       warehouse=warehouse_resource_key, ledger=ledger_resource_key,
                       io_manager=io_manager_key, pool=pool)
    if isinstance(datasets, Mapping):
        registry = parse_registry({"datasets": dict(datasets)}, origin=origin)
        base = Path(base_dir if base_dir is not None else ".").resolve()
    else:
        origin = str(Path(datasets).resolve())  # load_registry's, for every later message
        registry = load_registry(origin)
        base = Path(datasets).resolve().parent
    _check_schedules(registry)
    _check_relations(registry)
    warehouse_name = checked_warehouse_name(warehouse_name)
    units = privacy_units(registry, base, warehouse, warehouse_name)
    _check_shared_limits(registry, units)
    contexts = _contexts(registry, names)
    for name, ctx in contexts.items():  # a family's budget is its parent's: one unit
        units[name] = units[ctx.ledger_dataset]
    ledger_resource = LedgerResource(
        path=str(ledger) if is_postgres(str(ledger)) else str(Path(ledger).resolve()),
        schema_name=ledger_schema, units=units,
        sources={name: source_identity(spec, base, warehouse, warehouse_name)
                 for name, spec in registry.items()},
        aliases={name: list(names) for name, names in
                 unit_aliases(registry, base, warehouse, warehouse_name).items()},
        entries={name: spec.entry for name, spec in registry.items()},
        head_path=str(Path(ledger_head).resolve()) if ledger_head else None)
    assets, jobs, schedules, sensors, automated, observed = [], [], [], [], [], []
    for name, spec in registry.items():
        if spec.optional and not source_available(spec, base):
            log.warning(f"dataset {name!r} skipped: its source file "
                        f"{source_path(spec, base)} is absent (it is marked optional: "
                        f"{spec.entry})")
            continue
        ctx = contexts[name]  # what every definition of the dataset shares
        report = [build_utility_report(ctx)] if spec.report is not None else []
        built = build_dataset_assets(ctx, extra=report)
        if spec.source.asset is not None and automation_condition is None:
            built, keys = resynthesis_assets(ctx, built, ledger_resource)
            automated += keys
        assets += [*built, budget_asset(name, names)]
        observed.append(ctx)
        materializable = [a for a in built if isinstance(a, dg.AssetsDefinition)]
        job = None
        if dataset_jobs or needs_job(spec):
            job = build_job(ctx, materializable)
            jobs.append(job)
        if spec.source.asset is not None:
            continue  # automated declaratively: the host asset's materialization is the signal
        if spec.schedule:
            schedules.append(build_schedule(ctx, job))
        if spec.on_source_change == "resynthesize":
            target = job if job is not None else dg.AssetSelection.assets(*materializable)
            sensors.append(build_source_sensor(ctx, target))
    checked = checked_sources(registry)
    if automated or checked:  # the sensor's target checks the source assets at load
        sensors.append(automation_sensor(names.sensor_name("automation"), automated,
                                         CheckedSources(automated, checked, origin)))
    if observed:
        sensors.append(build_budget_sensor(observed, names))
    public = _zone(public_dir)
    private = _zone(private_dir) if private_dir is not None else None
    check_zones(public, private, ledger)
    if io_manager is None:
        io_folder = f"{public.rstrip('/')}/{IO_FOLDER}"
        io_manager = (ObjectStoreIOManager(base_dir=io_folder) if is_url(public)
                      else dg.FilesystemIOManager(base_dir=io_folder))
    return dg.Definitions(
        assets=assets,
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources={
            names.warehouse: WarehouseResource(database=str(Path(warehouse).resolve()),
                                               public_dir=public, private_dir=private,
                                               base_dir=str(base)),
            names.ledger: ledger_resource,
            names.io_manager: io_manager,
        },
    )


def _zone(where: str | Path) -> str:
    """A zone's location as the resources keep it: an object-store URL as given (refused with
    the pip command when the `objectstore` extra is missing), a path made absolute."""
    if is_url(where):
        location(where)  # the extra's refusal, at load
        return str(where).rstrip("/")
    return str(location(where).resolve())


def check_zones(public: str, private: str | None, ledger) -> None:
    """Refuse, when the definitions load, a zone at a URL that this process cannot use
    (`store.check_zone`: a missing or read-only bucket, wrong credentials, an unreachable
    endpoint), before anything runs or is spent. The public zone's store must also support
    conditional writes, which the run lock takes there (`infra.runs.ObjectStoreDatasetLock`),
    unless the ledger is a PostgreSQL database, whose schema then holds the run locks."""
    postgres = is_postgres(str(ledger))
    where = "the factory's `public_dir`, DP_SYNTH_PUBLIC or the component's `public_dir`"
    check_zone(public, "public zone", where, conditional=not postgres)
    if private is not None:
        check_zone(private, "private zone", "the factory's `private_dir`, DP_SYNTH_PRIVATE or "
                   "the component's `private_dir`")
