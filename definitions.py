"""The Dagster entry point: Definitions built from datasets.yaml.

Paths come from the environment, with defaults inside the project folder:
DP_SYNTH_DATASETS (datasets.yaml), DP_SYNTH_WAREHOUSE (data/warehouse.duckdb, the private zone),
DP_SYNTH_LEDGER (data/ledger.sqlite), DP_SYNTH_PUBLIC (public/, the public zone).
"""

import os
from pathlib import Path

from dp_synth_assets.definitions import build_definitions

HERE = Path(__file__).resolve().parent

defs = build_definitions(
    datasets=os.environ.get("DP_SYNTH_DATASETS", HERE / "datasets.yaml"),
    warehouse=os.environ.get("DP_SYNTH_WAREHOUSE", HERE / "data" / "warehouse.duckdb"),
    ledger=os.environ.get("DP_SYNTH_LEDGER", HERE / "data" / "ledger.sqlite"),
    public_dir=os.environ.get("DP_SYNTH_PUBLIC", HERE / "public"),
)
