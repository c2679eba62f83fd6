"""Assemble Dagster Definitions from a datasets.yaml registry.

`build_definitions` is what the repository's `definitions.py` calls (with paths from the
environment) and what tests call (with temporary paths). The registry is validated first: a
malformed datasets.yaml fails here, when the definitions load.
"""

import logging
from pathlib import Path

import dagster as dg

from resources.ledger import LedgerResource
from resources.warehouse import WarehouseResource

from .automation import build_job, build_schedule, build_source_sensor
from .core.config import load_registry
from .core.marginals import source_available, source_path
from .pipeline import build_checks, build_dataset_assets


log = logging.getLogger("dp_synth")


def build_definitions(datasets: str | Path, warehouse: str | Path, ledger: str | Path,
                      public_dir: str | Path) -> dg.Definitions:
    datasets = Path(datasets).resolve()
    registry = load_registry(datasets)
    assets, checks, jobs, schedules, sensors = [], [], [], [], []
    for name, spec in registry.items():
        if spec.optional and not source_available(spec, datasets.parent):
            log.warning(f"dataset {name!r} skipped: its source file {source_path(spec, datasets.parent)} "
                        "is absent (it is marked optional in datasets.yaml)")
            continue
        assets += build_dataset_assets(name, spec)
        checks.append(build_checks(name, spec))
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
            "ledger": LedgerResource(path=str(Path(ledger).resolve())),
        },
        # one process per run: the stages form a chain and DuckDB allows one writer per file
        executor=dg.in_process_executor,
    )
