"""The host's own asset: orders written as a Parquet file under the project's data/ folder, as a
lakehouse job would."""

from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[3]
ROWS = 2000


@dg.asset(key=["analytics", "orders"], group_name="lake")
def orders() -> dg.MaterializeResult:
    """Orders: a channel, a basket size and whether it was returned."""
    rng = np.random.default_rng(1)
    channel = rng.choice(["web", "store", "phone"], size=ROWS, p=[0.5, 0.4, 0.1])
    items = np.clip(rng.poisson(np.where(channel == "store", 4, 2)), 1, 12).astype("int64")
    returned = rng.random(ROWS) < np.where(channel == "web", 0.2, 0.05)
    path = ROOT / "data" / "orders.parquet"
    path.parent.mkdir(exist_ok=True)
    pd.DataFrame({"channel": channel, "items": items, "returned": returned}).to_parquet(path)
    return dg.MaterializeResult(metadata={"dagster/row_count": ROWS,
                                          "path": dg.MetadataValue.path(str(path))})
