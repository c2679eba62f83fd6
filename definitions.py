"""The Dagster entry point: Definitions built from datasets.yaml.

Paths come from the environment, with defaults inside the project folder:
DP_SYNTH_DATASETS (datasets.yaml), DP_SYNTH_WAREHOUSE (data/warehouse.duckdb, the private zone),
DP_SYNTH_LEDGER (.dp_synth/ledger.sqlite: outside data/, which `make clean` deletes, because the
budget outlives the outputs it paid for), DP_SYNTH_LEDGER_HEAD (the ledger's mirrored head file,
default: the ledger's path + '.head'), DP_SYNTH_PUBLIC (public/, the public zone).
"""

import os
from pathlib import Path

from dp_synth_assets.definitions import build_definitions
from resources.ledger import LedgerError

HERE = Path(__file__).resolve().parent
LEGACY_LEDGER = HERE / "data" / "ledger.sqlite"
DEFAULT_LEDGER = HERE / ".dp_synth" / "ledger.sqlite"

if "DP_SYNTH_LEDGER" not in os.environ and LEGACY_LEDGER.exists() and not DEFAULT_LEDGER.exists():
    raise LedgerError(
        f"The privacy ledger now lives in {DEFAULT_LEDGER} (outside data/, which `make clean` "
        f"deletes), and {LEGACY_LEDGER} is a ledger from before the hash chain. Migrate it: "
        f"`python -m resources.ledger migrate {LEGACY_LEDGER} {DEFAULT_LEDGER}`, or set "
        f"DP_SYNTH_LEDGER to use another file.")

defs = build_definitions(
    datasets=os.environ.get("DP_SYNTH_DATASETS", HERE / "datasets.yaml"),
    warehouse=os.environ.get("DP_SYNTH_WAREHOUSE", HERE / "data" / "warehouse.duckdb"),
    ledger=os.environ.get("DP_SYNTH_LEDGER", DEFAULT_LEDGER),
    public_dir=os.environ.get("DP_SYNTH_PUBLIC", HERE / "public"),
    ledger_head=os.environ.get("DP_SYNTH_LEDGER_HEAD") or None,
)
