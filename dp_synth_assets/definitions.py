"""Assemble Dagster Definitions from a datasets.yaml registry.

`build_definitions` is what the repository's `definitions.py` calls (with the paths of
`environment_paths`) and what tests call (with temporary paths). The registry is validated first: a
malformed datasets.yaml fails here, when the definitions load, and so do two entries on one source
without a shared `privacy.budget_group` or a budget group whose entries disagree on the limit
(dp_synth_assets.core.units).
"""

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from dp_synth_assets.resources.ledger import LedgerError, LedgerResource
from dp_synth_assets.resources.warehouse import WarehouseResource

from .automation import build_job, build_schedule, build_source_sensor
from .budget import DatasetBudget
from .core.config import RegistryError, load_registry
from .core.units import group_name, privacy_units, source_identity
from .core.source import source_available, source_path
from .checks import build_synthetic_checks
from .pipeline import build_dataset_assets
from .utility_report import build_utility_report


log = logging.getLogger("dp_synth")
PROJECT_DIR = Path(__file__).resolve().parents[1]


def environment_paths(environ: Mapping[str, str] | None = None,
                      project_dir: Path = PROJECT_DIR) -> dict:
    """`build_definitions`'s paths from the environment, with defaults inside the project folder:
    DP_SYNTH_DATASETS (datasets.yaml), DP_SYNTH_WAREHOUSE (data/warehouse.duckdb, the private
    zone), DP_SYNTH_LEDGER (.dp_synth/ledger.sqlite: outside data/, which `make clean` deletes,
    because the budget outlives the outputs it paid for), DP_SYNTH_LEDGER_HEAD (the ledger's
    mirrored head file, default: the ledger's path + '.head'), DP_SYNTH_PUBLIC (public/, the
    public zone). Raises LedgerError rather than default to a fresh ledger beside one from before
    the hash chain (data/ledger.sqlite), whose budget would be forgotten."""
    environ = os.environ if environ is None else environ
    legacy = project_dir / "data" / "ledger.sqlite"
    default = project_dir / ".dp_synth" / "ledger.sqlite"
    if "DP_SYNTH_LEDGER" not in environ and legacy.exists() and not default.exists():
        raise LedgerError(
            f"The privacy ledger now lives in {default} (outside data/, which `make clean` "
            f"deletes), and {legacy} is a ledger from before the hash chain. Migrate it: "
            f"`python -m dp_synth_assets.resources.ledger migrate {legacy} {default}`, or set "
            f"DP_SYNTH_LEDGER to use another file.")
    return {
        "datasets": environ.get("DP_SYNTH_DATASETS", project_dir / "datasets.yaml"),
        "warehouse": environ.get("DP_SYNTH_WAREHOUSE", project_dir / "data" / "warehouse.duckdb"),
        "ledger": environ.get("DP_SYNTH_LEDGER", default),
        "public_dir": environ.get("DP_SYNTH_PUBLIC", project_dir / "public"),
        "ledger_head": environ.get("DP_SYNTH_LEDGER_HEAD") or None,
    }


def _check_shared_limits(registry: dict, units: dict[str, str]) -> None:
    """Entries of one unit must meet one ledger limit: the same rho and delta_extra limits (a
    column discovered by thresholding sets half of the limit's delta aside for delta_extra)."""
    by_unit: dict[str, dict[str, tuple[float, float]]] = {}
    for name, unit in units.items():
        budget = DatasetBudget.of(registry[name])
        by_unit.setdefault(unit, {})[name] = (budget.limit_rho, budget.limit_delta_extra)
    for unit, limits in by_unit.items():
        if len(set(limits.values())) > 1:
            raise RegistryError(
                f"datasets {' and '.join(map(repr, limits))} share budget group "
                f"{group_name(unit)!r} but split its delta differently: a column whose categories "
                f"or bounds are discovered with thresholding sets half of the limit's delta aside "
                f"for it, so either every entry of the group discovers such a column or none "
                f"does. Declare the categories of those columns, or put the entries in separate "
                f"budget groups (only if they read different sources).")


def build_definitions(datasets: str | Path, warehouse: str | Path, ledger: str | Path,
                      public_dir: str | Path, ledger_head: str | Path | None = None
                      ) -> dg.Definitions:
    """`ledger_head`: the ledger's mirrored head file (default: the ledger's path + '.head')."""
    datasets = Path(datasets).resolve()
    registry = load_registry(datasets)
    units = privacy_units(registry, datasets.parent, warehouse)
    _check_shared_limits(registry, units)
    assets, checks, jobs, schedules, sensors = [], [], [], [], []
    for name, spec in registry.items():
        if spec.optional and not source_available(spec, datasets.parent):
            log.warning(f"dataset {name!r} skipped: its source file {source_path(spec, datasets.parent)} "
                        "is absent (it is marked optional in datasets.yaml)")
            continue
        assets += build_dataset_assets(name, spec)
        if spec.report is not None:
            assets.append(build_utility_report(name, spec))
        checks.append(build_synthetic_checks(name, spec))
        job = build_job(name, spec)
        jobs.append(job)
        if spec.schedule:
            schedules.append(build_schedule(name, spec, job))
        if spec.on_source_change == "resynthesize":
            sensors.append(build_source_sensor(name, spec, job))
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources={
            "warehouse": WarehouseResource(database=str(Path(warehouse).resolve()),
                                           public_dir=str(Path(public_dir).resolve()),
                                           base_dir=str(datasets.parent)),
            "ledger": LedgerResource(
                path=str(Path(ledger).resolve()), units=units,
                sources={name: source_identity(spec, datasets.parent, warehouse)
                         for name, spec in registry.items()},
                head_path=str(Path(ledger_head).resolve()) if ledger_head else None),
        },
        # one process per run: the stages form a chain and DuckDB allows one writer per file
        executor=dg.in_process_executor,
    )
