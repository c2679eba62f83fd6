"""Large benchmark tables for issue 7: the example's distribution at any row count and width.

    .venv/bin/python bench/scale_data.py --rows 10000000 --columns 15 \
        --database bench/work/scale/scale.duckdb --table main.scale_10m_15 \
        [--parquet bench/work/scale/scale_10m_15.parquet]

The table is written chunk by chunk (`--chunk-rows`, default 1,000,000): each chunk is drawn by
`dp_synth_assets.example.generate_example` as Arrow arrays and appended with DuckDB's
INSERT from the registered Arrow table, so memory stays at one chunk whatever `--rows` is (no
pandas anywhere). Wider tables repeat the example's 12 columns in independent blocks: block b > 1
has the same columns suffixed `_b`, drawn with its own seed, and the table keeps the first
`--columns` columns (15 = the 12 columns + age_2, sex_2, race_2; 40 = three blocks + age_4,
sex_4, race_4, country_4), so every block has the example's dependencies and blocks are
independent of each other. Deterministic: chunk k of block b is drawn with seed
`seed + 1000 * b + k` (chunk k's rows do not depend on the chunk size of the others only when
`--chunk-rows` is kept; the default is what the benchmark uses).

`spec_columns(columns)` returns the matching `columns:` block for datasets.yaml (the example's
declarations, suffixed per block).
"""

import argparse
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import WORK  # noqa: E402
sys.path.insert(0, str(ROOT))

from dp_synth_assets.example import (DEFAULT_SEED, EXAMPLE_COLUMNS,  # noqa: E402
                                          generate_example)
from dp_synth_assets.core.sql import qualified as ident  # noqa: E402 (table names)

BASE = list(EXAMPLE_COLUMNS)


def column_names(columns: int) -> list[tuple[int, str, str]]:
    """(block, base column, name) of the first `columns` columns."""
    out = []
    block = 1
    while len(out) < columns:
        out += [(block, c, c if block == 1 else f"{c}_{block}") for c in BASE]
        block += 1
    return out[:columns]


def spec_columns(columns: int) -> dict:
    return {name: EXAMPLE_COLUMNS[base] for _, base, name in column_names(columns)}


def chunk(rows: int, columns: int, seed: int, k: int) -> pa.Table:
    names = column_names(columns)
    blocks = sorted({b for b, _, _ in names})
    drawn = {b: generate_example(rows, seed + 1000 * b + k) for b in blocks}
    return pa.table({name: drawn[b].column(base) for b, base, name in names})


def write_scaled(database: Path, table: str, rows: int, columns: int = 12,
                 seed: int = DEFAULT_SEED, chunk_rows: int = 1_000_000) -> float:
    """Create (or replace) `table` with `rows` rows; returns the seconds it took."""
    started = time.perf_counter()
    database.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(database))
    try:
        schema = table.rsplit(".", 1)[0]
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {ident(schema)}")
        done, k = 0, 0
        while done < rows:
            n = min(chunk_rows, rows - done)
            con.register("scale_chunk", chunk(n, columns, seed, k))
            if k == 0:
                con.execute(f"CREATE OR REPLACE TABLE {ident(table)} AS SELECT * FROM scale_chunk")
            else:
                con.execute(f"INSERT INTO {ident(table)} SELECT * FROM scale_chunk")
            con.unregister("scale_chunk")
            done += n
            k += 1
    finally:
        con.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--columns", type=int, default=15)
    parser.add_argument("--database", type=Path, default=WORK / "scale" / "scale.duckdb")
    parser.add_argument("--table", default=None)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--chunk-rows", type=int, default=1_000_000)
    parser.add_argument("--parquet", type=Path, default=None,
                        help="also write the table to this Parquet file (DuckDB's COPY, streamed)")
    args = parser.parse_args()
    table = args.table or f"main.scale_{args.rows}_{args.columns}"
    seconds = write_scaled(args.database, table, args.rows, args.columns, args.seed, args.chunk_rows)
    print(f"wrote {table} ({args.rows:,} rows x {args.columns} columns) to {args.database} "
          f"in {seconds:.1f} s")
    if args.parquet is not None:
        started = time.perf_counter()
        args.parquet.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(args.database), read_only=True)
        try:
            con.execute("SET preserve_insertion_order = false")
            con.execute(f"COPY {ident(table)} TO '{args.parquet}' (FORMAT parquet)")
        finally:
            con.close()
        print(f"wrote {args.parquet} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
