"""Writing the synthetic table: decoded rows into `synthetic.<dataset>` and a Parquet copy.

Rows arrive in chunks of codes (see `generate.sample_chunks`): each chunk is decoded to an Arrow
table and cast in SQL to the exact SQL types of the source columns (recorded in the encoding
plan), so the synthetic table has the source's column names, order and types, and memory holds
one chunk at a time whatever `rows` is. All chunks are written in one transaction: a failure
leaves the previous table as it was. The Parquet file is written to a temporary name and
renamed, so a failure never leaves half a file.
"""

import os
from collections.abc import Iterable

import duckdb
import numpy as np

from .domain import EncodingPlan, decode
from .sql import ident, literal, sql


def write_synthetic(con: duckdb.DuckDBPyConnection, plan: EncodingPlan,
                    chunks: Iterable[dict[str, np.ndarray]], rng: np.random.Generator, table: str,
                    parquet_path: str) -> int:
    """Write every chunk of codes; returns the number of rows written."""
    casts = ", ".join(f"CAST({ident(e.column)} AS {e.source_type}) AS {ident(e.column)}"
                      for e in plan.encodings)
    con.execute(sql("create_schema", schema=ident(table.rsplit(".", 1)[0])))
    rows = 0
    con.execute("BEGIN TRANSACTION")
    try:
        for i, codes in enumerate(chunks):
            batch = decode(plan, codes, rng)
            con.register("synthetic_rows", batch)
            try:
                con.execute(sql("write_synthetic" if i == 0 else "append_synthetic",
                                table=ident(table), casts=casts, relation="synthetic_rows"))
            finally:
                con.unregister("synthetic_rows")
            rows += batch.num_rows
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    tmp = parquet_path + ".tmp"
    con.execute(sql("export_parquet", table=ident(table), path=literal(tmp)))
    os.replace(tmp, parquet_path)
    return rows
