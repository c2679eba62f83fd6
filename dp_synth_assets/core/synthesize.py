"""Writing the synthetic table: decoded rows into `synthetic.<dataset>` and a Parquet copy.

The decoded Arrow table is cast in SQL to the exact SQL types of the source columns (recorded in
the encoding plan), so the synthetic table has the source's column names, order and types. The
Parquet file is written to a temporary name and renamed, so a failure never leaves half a file.
"""

import os

import duckdb
import numpy as np

from .domain import EncodingPlan, decode
from .sql import ident, literal, sql


def write_synthetic(con: duckdb.DuckDBPyConnection, plan: EncodingPlan, codes: dict[str, np.ndarray],
                    rng: np.random.Generator, table: str, parquet_path: str) -> None:
    rows = decode(plan, codes, rng)
    con.register("synthetic_rows", rows)
    try:
        casts = ", ".join(f"CAST({ident(e.column)} AS {e.source_type}) AS {ident(e.column)}"
                          for e in plan.encodings)
        con.execute(sql("create_schema", schema=ident(table.rsplit(".", 1)[0])))
        con.execute(sql("write_synthetic", table=ident(table), casts=casts, relation="synthetic_rows"))
    finally:
        con.unregister("synthetic_rows")
    tmp = parquet_path + ".tmp"
    con.execute(sql("export_parquet", table=ident(table), path=literal(tmp)))
    os.replace(tmp, parquet_path)
