"""A host Dagster project that installs dp-synth as a package (tests/test_wheel.py runs it from a
copy outside the repository, with dagster-dp-synth installed from the built wheel).

The host has one asset of its own, `raw_customers`, that writes a DuckDB table as a dbt model
would; dp-synth's definitions for datasets.yaml (beside this file), whose source is that asset,
are merged into the host's with the factory: keys under `privacy/`, namespaced resources, no
executor set on the host's location.
"""

from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pandas as pd

from dp_synth_assets import dp_synth_definitions

HERE = Path(__file__).resolve().parent
WAREHOUSE = HERE / "warehouse.duckdb"
ROWS = 2000


@dg.asset(group_name="host")
def raw_customers() -> dg.MaterializeResult:
    """The host's table: customers with an age, a plan and an active flag."""
    rng = np.random.default_rng(0)
    plan = rng.choice(["basic", "plus", "pro"], size=ROWS, p=[0.6, 0.3, 0.1])
    age = np.clip(rng.normal(40, 12, size=ROWS).round(), 18, 80).astype("int64")
    active = rng.random(ROWS) < np.where(plan == "basic", 0.5, 0.8)
    frame = pd.DataFrame({"age": age, "plan": plan, "active": active})
    con = duckdb.connect(str(WAREHOUSE))
    try:
        con.execute("CREATE OR REPLACE TABLE main.customers AS SELECT * FROM frame")
    finally:
        con.close()
    return dg.MaterializeResult(metadata={"dagster/row_count": ROWS})


defs = dg.Definitions.merge(
    dg.Definitions(assets=[raw_customers]),
    dp_synth_definitions(datasets=HERE / "datasets.yaml", warehouse=WAREHOUSE,
                         ledger=HERE / ".dp_synth" / "ledger.sqlite", public_dir=HERE / "public",
                         key_prefix="privacy", group_name="synthetic_data",
                         owners=["team:data-platform"]),
)
