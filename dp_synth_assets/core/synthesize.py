"""Writing the synthetic table: decoded rows into `synthetic.<dataset>` and a Parquet copy.

Rows arrive in chunks of codes (`generate.sample_chunks`): each chunk is decoded and cast in SQL
to the declared SQL types, so the table has the declared names, order and types and memory holds
a few chunks whatever the row count (the next ones are drawn in threads meanwhile). The chunks
go into a staging table, each committed on its own; the Parquet copy is exported from it into
the run's own folder, and only then one transaction replaces the table and stamps it with the
run: a failure before that commit leaves the previous table as it was, and readers see the old
table or the new one. How and why:
docs/decisions/0007-asset-graph.md, "As implemented: writing the synthetic table"."""

import queue
import threading
from collections.abc import Iterable, Iterator
from contextlib import nullcontext

import duckdb
import numpy as np
import pyarrow as pa

from .constraints import honour
from .domain import EncodingPlan, bin_cuts, decode, decode_column
from .sql import ident, literal, qualified, sql


def write_synthetic(con: duckdb.DuckDBPyConnection, plan: EncodingPlan,
                    chunks: Iterable[dict[str, np.ndarray]], rng: np.random.Generator, table: str,
                    parquet_path, stamp: str | None = None, constraints: tuple = ()) -> int:
    """Write the synthetic table and its Parquet copy; a failure leaves the previous table.

    Every chunk of codes goes into the staging table, which is exported to `parquet_path` and
    then replaces `table`, stamped, in one transaction. The chunks are drawn one ahead in a
    thread of their own (`prefetched`), so drawing the next chunk overlaps decoding and writing
    this one (numpy and DuckDB release the GIL); they come in their order, so the rows are
    those of a sequential draw.

    Args:
        con: the warehouse connection.
        plan: the encoding plan (decoding, and the declared SQL types of the casts).
        chunks: code arrays per attribute, one dict per chunk (`generate.sample_chunks`).
        rng: draws values inside bins and rare codes' members while decoding.
        table: the synthetic table, `schema.name`.
        parquet_path: a path, or a context manager yielding one (`RunStore.writing`).
        stamp: the run id the table is stamped with (`COMMENT ON TABLE`), or None.
        constraints: the declared constraints every row satisfies (`constraints.honour`).

    Returns:
        The number of rows written.
    """
    casts = synthetic_casts(plan)
    schema, name = table.rsplit(".", 1)
    con.execute(sql("create_schema", schema=qualified(schema)))
    staging = staging_table(table)
    rows = 0
    try:
        for i, codes in enumerate(prefetched(chunks)):
            batch = decode_constrained(plan, codes, rng, constraints)
            con.register("synthetic_rows", batch)
            try:
                con.execute(sql("write_synthetic" if i == 0 else "append_synthetic",
                                table=staging, casts=casts, relation="synthetic_rows"))
            finally:
                con.unregister("synthetic_rows")
            rows += batch.num_rows
        target = parquet_path if hasattr(parquet_path, "__enter__") else nullcontext(parquet_path)
        with target as path:
            export_parquet(con, staging, str(path))
        con.execute("BEGIN TRANSACTION")
        con.execute(sql("drop_table", table=qualified(table)))
        con.execute(sql("rename_table", table=staging, name=ident(name)))
        if stamp is not None:
            con.execute(sql("comment_table", table=qualified(table),
                            comment=literal(STAMP + stamp)))
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # no transaction was open: the failure came while writing the chunks
        con.execute(sql("drop_table", table=staging))
        raise
    return rows


def prefetched(chunks: Iterable, depth: int = 1) -> Iterator:
    """The items of `chunks`, in order, produced in a thread of their own at most `depth` items
    ahead of the consumer (memory: `depth` + 2 items). An exception of the producer is raised
    to the consumer; when the consumer stops early, the producer stops after its current item."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in chunks:
                if not put((item, None)):
                    return
            put((end, None))
        except BaseException as e:  # handed to the consumer, raised there
            put((end, e))
        finally:  # a generator stops here, in the thread that ran it (its threads are freed)
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    producer = threading.Thread(target=produce, name="dp-synth-sampler", daemon=True)
    producer.start()
    try:
        while True:
            item, error = ready.get()
            if error is not None:
                raise error
            if item is end:
                return
            yield item
    finally:
        stop.set()
        producer.join()


def export_parquet(con: duckdb.DuckDBPyConnection, relation: str, path: str) -> None:
    """Copy `relation` (a quoted table name, such as `staging_table`'s) to the Parquet file
    `path`."""
    # rows are exchangeable: without keeping their order, DuckDB's Parquet writer streams them
    # (peak 1.0 GB -> 0.3 GB for ten million rows)
    con.execute(sql("set_option", name="preserve_insertion_order", value="false"))
    try:
        con.execute(sql("export_parquet", table=relation, path=literal(path)))
    finally:
        con.execute(sql("reset_option", name="preserve_insertion_order"))


STAMP = "dp-synth run "


def table_stamp(con: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """The run that wrote `table` (its `write_synthetic` stamp), or None (no table, no stamp)."""
    schema, name = table.rsplit(".", 1)
    row = con.execute(sql("table_comment"), [schema, name]).fetchone()
    comment = row[0] if row else None
    return comment[len(STAMP):] if comment and comment.startswith(STAMP) else None


def staging_table(table: str) -> str:
    """The quoted staging table of `table` (`schema.name`): `schema."name:writing"`, in the
    same schema (DuckDB renames a table within its schema only, so the final swap is a rename,
    not a copy) under a bookkeeping name (`sql.bookkeeping`'s `:` rule)."""
    schema, name = table.rsplit(".", 1)
    return qualified(schema) + "." + ident(f"{name}:writing")


def requested_rows(rows: int | str, total: float) -> int:
    """The rows to synthesize under the `rows:` setting `rows`: `same` means the noisy row
    count estimate `total`, never the exact one."""
    return max(int(round(total)), 1) if rows == "same" else int(rows)


def synthetic_casts(plan: EncodingPlan) -> str:
    """The select list casting decoded columns to their declared SQL types (`Encoding.sql_type`)."""
    return ", ".join(f"CAST({ident(e.column)} AS {e.sql_type}) AS {ident(e.column)}"
                     for e in plan.encodings)


def decode_typed(con: duckdb.DuckDBPyConnection, plan: EncodingPlan, codes: dict[str, np.ndarray],
                 rng: np.random.Generator, constraints: tuple = ()) -> pa.Table:
    """One chunk of codes decoded and cast in DuckDB to the declared types: the rows
    `write_synthetic` writes, as an Arrow table (nothing is stored)."""
    batch = decode_constrained(plan, codes, rng, constraints)
    con.register("synthetic_rows", batch)
    try:
        return con.sql(sql("cast_synthetic", casts=synthetic_casts(plan),
                         relation="synthetic_rows")).to_arrow_table()
    finally:
        con.unregister("synthetic_rows")


def decode_constrained(plan: EncodingPlan, codes: dict[str, np.ndarray], rng: np.random.Generator,
                       constraints: tuple = ()) -> pa.Table:
    """`domain.decode`, then every row made to satisfy the declared `constraints`
    (`constraints.honour`: redrawn inside its bins, else projected; same rows, same stream)."""
    batch = decode(plan, codes, rng, dictionary=True)
    return (honour(plan, constraints, codes, batch, rng, decode_column, bin_cuts) if constraints
            else batch)
