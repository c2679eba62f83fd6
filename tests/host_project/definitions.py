"""A host Dagster project that installs dp-synth as a package (tests/test_wheel.py runs it from a
copy outside the repository, with dagster-dp-synth installed from the built wheel).

The host has one asset of its own, `raw_customers`, that writes a DuckDB table as a dbt model
would, and its own settings that dp-synth must leave alone: an executor, a default IO manager
that stores only DataFrames (and notes every output it is handed in io_calls.txt), and a resource
under the generic key `warehouse`. dp-synth's definitions for datasets.yaml (beside this file),
whose source is that asset, are merged into the host's with the factory: keys under `privacy/`,
namespaced resources, no executor.
"""

from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pandas as pd

from dp_synth_assets import dp_synth_definitions

HERE = Path(__file__).resolve().parent
WAREHOUSE = HERE / "warehouse.duckdb"
# 5,000 rows: the test reads the marginal_tvd check's numbers, so a pair must be measured; at
# 2,000 rows and epsilon 1 absyn selected none in 1 run of 100 (CI failed once), at 5,000 in 0
ROWS = 5000


class HostWarehouse(dg.ConfigurableResource):
    """The host's own resource named `warehouse` (a connection string of its BI tool)."""

    dsn: str


class FramesOnlyIOManager(dg.ConfigurableIOManager):
    """The host's default IO manager: stores pandas DataFrames as Parquet, refuses anything else.
    Every output it is handed is noted in io_calls.txt."""

    folder: str

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        with open(Path(self.folder) / "io_calls.txt", "a") as calls:
            calls.write("/".join(context.asset_key.path) + "\n")
        if not isinstance(obj, pd.DataFrame):
            raise TypeError(f"the host's IO manager stores DataFrames, not {type(obj).__name__}")
        obj.to_parquet(Path(self.folder) / ("_".join(context.asset_key.path) + ".parquet"))

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        return pd.read_parquet(Path(self.folder) / ("_".join(context.asset_key.path) + ".parquet"))


@dg.asset(group_name="host")
def raw_customers() -> dg.MaterializeResult:
    """The host's table: customers with an age, a plan and an active flag (changes each time)."""
    rng = np.random.default_rng()
    plan = rng.choice(["basic", "plus", "pro"], size=ROWS, p=[0.6, 0.3, 0.1])
    age = np.clip(rng.normal(40, 12, size=ROWS).round(), 18, 80).astype("int64")
    active = rng.random(ROWS) < np.where(plan == "basic", 0.5, 0.8)
    frame = pd.DataFrame({"age": age, "plan": plan, "active": active})  # noqa: F841 (read by SQL)
    con = duckdb.connect(str(WAREHOUSE))
    try:
        con.execute("CREATE OR REPLACE TABLE main.customers AS SELECT * FROM frame")
    finally:
        con.close()
    return dg.MaterializeResult(metadata={"dagster/row_count": ROWS})


defs = dg.Definitions.merge(
    dg.Definitions(assets=[raw_customers],
                   resources={"warehouse": HostWarehouse(dsn="bi://reports"),
                              "io_manager": FramesOnlyIOManager(folder=str(HERE))},
                   executor=dg.in_process_executor),
    dp_synth_definitions(datasets=HERE / "datasets.yaml", warehouse=WAREHOUSE,
                         ledger=HERE / ".dp_synth" / "ledger.sqlite", public_dir=HERE / "public",
                         key_prefix="privacy", group_name="synthetic_data",
                         owners=["team:data-platform"]),
)
