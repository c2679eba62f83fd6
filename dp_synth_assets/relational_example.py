"""The bundled relational example: generated customers and their orders, with known dependencies
across the relation (docs/relational.md).

`generate_relational_example` draws both tables (a seeded numpy Generator, vectorized): a
customer's `segment` sets how many orders it places (business customers place more, some above
the declared `max_children`) and the `amount` and `channel` of each order; `region` depends on
nothing. `RELATIONAL_DATASETS` is the matching datasets.yaml block. `write_relational_example`
puts both tables into a DuckDB file."""

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from .core.sql import ident, qualified, sql

DEFAULT_CUSTOMERS = 5_000
DEFAULT_SEED = 20261128
MAX_CHILDREN = 20
SEGMENTS = ["retail", "business"]
REGIONS = ["north", "south", "east", "west"]
CHANNELS = ["web", "store"]
# mean orders per customer, and mean order amount, by segment
ORDER_RATE = {"retail": 2.0, "business": 9.0}
AMOUNT_MEAN = {"retail": 40.0, "business": 220.0}
WEB_SHARE = {"retail": 0.75, "business": 0.3}

RELATIONAL_DATASETS = {
    "customers": {
        "source": {"table": "main.customers"},
        "columns": {"segment": {"kind": "categorical", "categories": SEGMENTS},
                    "region": {"kind": "categorical", "categories": REGIONS}},
        "privacy": {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 10.0, "delta": 1e-8}},
    },
    "orders": {
        "source": {"table": "main.orders"},
        "parent": {"dataset": "customers", "foreign_key": "customer_id", "key": "id",
                   "max_children": MAX_CHILDREN},
        "columns": {"amount": {"kind": "float", "bounds": [0.0, 1000.0], "bins": 20},
                    "channel": {"kind": "categorical", "categories": CHANNELS}},
        "privacy": {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 10.0, "delta": 1e-8}},
    },
}


def generate_relational_example(customers: int = DEFAULT_CUSTOMERS,
                                seed: int = DEFAULT_SEED) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The `customers` (id, segment, region) and `orders` (order_id, customer_id, amount,
    channel) frames; customer ids are 1..customers, orders are shuffled (storage order carries
    no family)."""
    rng = np.random.default_rng(seed)
    segment = np.where(rng.random(customers) < 0.3, "business", "retail")
    region = rng.choice(REGIONS, size=customers)
    rate = np.where(segment == "business", ORDER_RATE["business"], ORDER_RATE["retail"])
    n_orders = rng.poisson(rate * rng.gamma(2.0, 0.5, customers))  # overdispersed: long tail
    ids = np.arange(1, customers + 1)
    owner = np.repeat(ids, n_orders)
    owner_segment = np.repeat(segment, n_orders)
    business = owner_segment == "business"
    mean = np.where(business, AMOUNT_MEAN["business"], AMOUNT_MEAN["retail"])
    amount = np.round(np.minimum(rng.gamma(4.0, mean / 4.0), 1000.0), 2)
    web = rng.random(owner.size) < np.where(business, WEB_SHARE["business"], WEB_SHARE["retail"])
    order = rng.permutation(owner.size)
    orders = pd.DataFrame({"order_id": np.arange(1, owner.size + 1), "customer_id": owner[order],
                           "amount": amount[order],
                           "channel": np.where(web, "web", "store")[order]})
    return pd.DataFrame({"id": ids, "segment": segment, "region": region}), orders


def write_relational_example(database: str | Path, customers: int = DEFAULT_CUSTOMERS,
                             seed: int = DEFAULT_SEED) -> None:
    """Create (or replace) `main.customers` and `main.orders` in the DuckDB file `database`."""
    parents, children = generate_relational_example(customers, seed)
    Path(database).parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(database))
    try:
        con.register("dp_synth_customers_frame", parents)
        con.register("dp_synth_orders_frame", children)
        for table, frame in (("main.customers", "dp_synth_customers_frame"),
                             ("main.orders", "dp_synth_orders_frame")):
            con.execute(sql("write_table", table=qualified(table), relation=ident(frame)))
    finally:
        con.close()


def write_relational_project(folder: str | Path, customers: int = DEFAULT_CUSTOMERS,
                             seed: int = DEFAULT_SEED) -> Path:
    """The example as a project folder: `warehouse.duckdb` (both tables) and `datasets.yaml`
    (`RELATIONAL_DATASETS`); returns the datasets file. `make run-relational` points the
    repository's definitions.py at it (DP_SYNTH_DATASETS, DP_SYNTH_WAREHOUSE)."""
    import yaml

    folder = Path(folder)
    write_relational_example(folder / "warehouse.duckdb", customers, seed)
    datasets = folder / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": RELATIONAL_DATASETS}, sort_keys=False))
    return datasets


if __name__ == "__main__":
    import sys

    print(f"wrote {write_relational_project(sys.argv[1] if len(sys.argv) > 1 else 'data/relational')}")
