"""The Dagster entry point: Definitions built from datasets.yaml.

Paths come from the environment, with defaults inside the project folder
(dp_synth_assets.definitions.environment_paths): DP_SYNTH_DATASETS (datasets.yaml),
DP_SYNTH_WAREHOUSE (data/warehouse.duckdb, the private zone), DP_SYNTH_LEDGER
(.dp_synth/ledger.sqlite: outside data/, which `make clean` deletes, because the budget outlives
the outputs it paid for), DP_SYNTH_LEDGER_HEAD (the ledger's mirrored head file, default: the
ledger's path + '.head'), DP_SYNTH_PUBLIC (public/, the public zone), DP_SYNTH_WAREHOUSE_NAME
(the warehouse's stable name, which names its tables' privacy units; default `default`).
"""

from pathlib import Path

from dp_synth_assets.definitions import build_definitions, environment_paths

defs = build_definitions(**environment_paths(project_dir=Path(__file__).resolve().parent))
