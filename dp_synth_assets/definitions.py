"""The repository's own Dagster code location, built from a datasets.yaml registry.

`build_definitions` is what the repository's `definitions.py` calls (with the paths of
`environment_paths`) and what tests call (with temporary paths): the factory's definitions
(factory.py, which validates the registry when the definitions load) under this location's own
resource keys and executor.
"""

import os
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from dp_synth_assets.resources.ledger import DEFAULT_SCHEMA, LedgerError

from .core.units import DEFAULT_WAREHOUSE_NAME
from .factory import dp_synth_definitions


PROJECT_DIR = Path(__file__).resolve().parents[1]


def environment_paths(environ: Mapping[str, str] | None = None,
                      project_dir: Path = PROJECT_DIR) -> dict:
    """`build_definitions`'s paths from the environment, with defaults inside the project folder:
    DP_SYNTH_DATASETS (datasets.yaml), DP_SYNTH_WAREHOUSE (data/warehouse.duckdb, the private
    zone), DP_SYNTH_LEDGER (.dp_synth/ledger.sqlite: outside data/, which `make clean` deletes,
    because the budget outlives the outputs it paid for; or a postgresql:// URL),
    DP_SYNTH_LEDGER_SCHEMA (a PostgreSQL ledger's schema, default dp_synth),
    DP_SYNTH_LEDGER_HEAD (the ledger's mirrored head file, default: the ledger's path + '.head'),
    DP_SYNTH_PUBLIC (public/, the public zone), DP_SYNTH_PRIVATE (the private zone's folder,
    default `private` beside the warehouse file; either zone may be an object-store URL,
    `s3://bucket/prefix`), DP_SYNTH_WAREHOUSE_NAME (the warehouse's stable name, which names its
    tables' privacy units; default `default`). Raises LedgerError rather than default to a fresh
    ledger beside one from before the hash chain (data/ledger.sqlite), whose budget would be
    forgotten."""
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
        "warehouse_name": environ.get("DP_SYNTH_WAREHOUSE_NAME") or DEFAULT_WAREHOUSE_NAME,
        "ledger_schema": environ.get("DP_SYNTH_LEDGER_SCHEMA") or DEFAULT_SCHEMA,
        "private_dir": environ.get("DP_SYNTH_PRIVATE") or None,
    }


def build_definitions(datasets: str | Path, warehouse: str | Path, ledger: str | Path,
                      public_dir: str | Path, ledger_head: str | Path | None = None,
                      ledger_schema: str = DEFAULT_SCHEMA,
                      warehouse_name: str = DEFAULT_WAREHOUSE_NAME,
                      private_dir: str | Path | None = None) -> dg.Definitions:
    """The repository's own code location: `factory.dp_synth_definitions` with the resource
    keys `warehouse` and `ledger` (this location holds dp-synth alone, so nothing competes for
    them), and the in-process executor for the location's implicit job (one process per run:
    the stages form a chain and DuckDB allows one writer per file). A host project calls the
    factory instead, which claims neither. `ledger_head`: the ledger's mirrored head file
    (default: the ledger's path + '.head'); `ledger_schema`: a PostgreSQL ledger's schema;
    `private_dir`: the private zone's folder (default: `private` beside the warehouse file)."""
    return dg.Definitions.merge(
        dp_synth_definitions(datasets, warehouse, ledger, public_dir, ledger_head=ledger_head,
                             warehouse_name=warehouse_name,
                             ledger_schema=ledger_schema, private_dir=private_dir,
                             warehouse_resource_key="warehouse", ledger_resource_key="ledger"),
        dg.Definitions(executor=dg.in_process_executor),
    )
