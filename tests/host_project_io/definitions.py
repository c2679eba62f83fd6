"""A host Dagster project as most are written: its asset returns a pandas DataFrame and
dagster-duckdb-pandas's DuckDBPandasIOManager stores it as the DuckDB table main.raw_customers.
dp-synth's definitions for datasets.yaml (beside this file) read that table and are merged in with
the factory. tests/test_install_ends.py runs it with the real `dagster` CLI, from a copy outside the
repository, in venvs resolved at the newest and at the lowest supported versions.
"""

from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
from dagster_duckdb_pandas import DuckDBPandasIOManager

from dp_synth_assets import dp_synth_definitions

HERE = Path(__file__).resolve().parent
WAREHOUSE = HERE / "warehouse.duckdb"
ROWS = 5000


@dg.asset(group_name="host")
def raw_customers() -> pd.DataFrame:
    """The host's customers: an age, a plan and an active flag."""
    rng = np.random.default_rng()
    plan = rng.choice(["basic", "plus", "pro"], size=ROWS, p=[0.6, 0.3, 0.1])
    age = np.clip(rng.normal(40, 12, size=ROWS).round(), 18, 80).astype("int64")
    active = rng.random(ROWS) < np.where(plan == "basic", 0.5, 0.8)
    return pd.DataFrame({"age": age, "plan": plan, "active": active})


defs = dg.Definitions.merge(
    dg.Definitions(assets=[raw_customers],
                   resources={"io_manager": DuckDBPandasIOManager(database=str(WAREHOUSE),
                                                                  schema="main")}),
    dp_synth_definitions(datasets=HERE / "datasets.yaml", warehouse=WAREHOUSE,
                         ledger=HERE / ".dp_synth" / "ledger.sqlite", public_dir=HERE / "public",
                         key_prefix="privacy"),
)
