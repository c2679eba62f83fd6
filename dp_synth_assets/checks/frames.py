"""Reading the synthetic table for the checks, within a bounded amount of memory.

The checks read only the public synthetic table: its Parquet copy and the warehouse table's
schema. At most `frame_bytes` of the table is held in pandas at a time: the per-column suites run
on groups of columns (`column_groups`), strings as pandas categoricals (`read_frame`), and the
distribution checks read counts that DuckDB aggregates in one scan (`SyntheticTable.read`).
Measurements behind these choices: docs/great_expectations.md.
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..core import marginals as margs
from ..core.config import ColumnSpec
from ..core.domain import Clique, EncodingPlan, encoded_columns
from ..core.measure import Measurement
from ..core.sql import ident, literal, sql

if TYPE_CHECKING:  # pandas loads with the checks' run, not with the definitions
    import pandas as pd

FRAME_BYTES = 64 * 2 ** 20  # the most of the synthetic table one GX frame holds


@dataclass(frozen=True)
class CheckInputs:
    """What the checks compare the synthetic table with, all public: the declared columns
    (`DatasetSpec.columns`, in order: the schema, types and domains the table must have), the
    encoding plan (what preprocessing learned, and the codes the measurements count), the noisy
    measurements and their noisy total, the requested rows, the fitted model (None: the duplicate
    bound falls back on the measurements), where the table is, and the Data Docs site."""

    dataset: str
    declared: dict[str, ColumnSpec]
    plan: EncodingPlan
    measurements: list[Measurement]
    noisy_total: float
    rows: int
    table: str
    parquet: str
    docs_dir: object  # a path: the Data Docs site of the dataset
    model: object = None
    frame_bytes: int = FRAME_BYTES


@dataclass(frozen=True)
class SyntheticTable:
    """The synthetic table as the checks see it: the declared and the plan's columns present in the
    Parquet copy, its row count, the column groups that fit in one frame, the counts of every
    measured marginal (1-way included) and the number of rows repeating an earlier one. `con` is the
    read-only connection the row-level checks read frames through while it is open."""

    inputs: CheckInputs
    con: object
    source: str
    present: list[str]
    total: int
    groups: list[list[str]]
    counts: dict[Clique, np.ndarray] = field(repr=False)
    repeated: int

    @classmethod
    def read(cls, con, inputs: CheckInputs) -> "SyntheticTable":
        """Describe the Parquet copy and count its measured marginals and repeated rows (DuckDB
        aggregates, one scan each, on the encoded codes)."""
        plan = inputs.plan
        source = f"read_parquet({literal(inputs.parquet)})"
        present = [r[0] for r in con.execute(sql("describe_source", source=source)).fetchall()]
        total = con.execute(sql("count_rows", source=source)).fetchone()[0]
        wanted = dict.fromkeys([*inputs.declared, *plan.columns])
        groups = column_groups([c for c in wanted if c in present], total, inputs.frame_bytes)
        one_way = dict.fromkeys(m.clique[0] for m in inputs.measurements if len(m.clique) == 1)
        encoded = sql("encoded_relation", expressions=encoded_columns(plan), source=source)
        cliques = [(c,) for c in one_way if c in present] + [
            m.clique for m in inputs.measurements
            if len(m.clique) >= 2 and all(a in present for a in m.clique)]
        with margs.narrow_codes(con, encoded, plan.columns, plan.domain) as codes:
            counts = margs.count_marginals(con, codes, plan.columns, cliques, plan.domain) \
                if cliques else {}
            repeated = margs.repeated_rows(con, codes, plan.domain) if present else 0
        return cls(inputs, con, source, present, total, groups, counts, repeated)

    def frame(self, columns: list[str], limit: int | None = None) -> "pd.DataFrame":
        """Columns of the Parquet copy as pandas (`read_frame`)."""
        return read_frame(self.con, self.source, columns, limit)

    def column_types(self, relation: str) -> list[str]:
        """The SQL type of each declared column in `relation` ("missing" when absent)."""
        return column_types(self.con, relation, list(self.inputs.declared))


def column_groups(columns: list[str], rows: int, frame_bytes: int = FRAME_BYTES) -> list[list[str]]:
    """The columns in consecutive groups whose frame of `rows` rows stays under `frame_bytes`,
    counting 8 bytes a cell (numbers and dates; category codes take less): one group for small
    tables, a column or a few at a time for large ones."""
    per_group = max(1, frame_bytes // max(8 * rows, 1))
    return [columns[i:i + per_group] for i in range(0, len(columns), per_group)] or [[]]


def read_frame(con, source: str, columns: list[str], limit: int | None = None) -> "pd.DataFrame":
    """Columns of a relation as pandas, through Arrow: text as categoricals (a code per row
    instead of a Python string object), integers as int64 and times as datetime64[ns], the dtypes
    GX's pandas engine compares vectorized."""
    import pandas as pd
    import pyarrow as pa

    if not columns:
        return pd.DataFrame()
    table = con.sql(sql("read_columns", columns=", ".join(ident(c) for c in columns), source=source,
                        limit="ALL" if limit is None else int(limit))).to_arrow_table()
    for i, f in enumerate(table.schema):
        column = table.column(i)
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            column = column.dictionary_encode()
        elif pa.types.is_integer(f.type):
            column = column.cast(pa.int64())
        elif pa.types.is_date(f.type):
            column = column.cast(pa.timestamp("ns"))
        table = table.set_column(i, f.name, column)
    return table.to_pandas(coerce_temporal_nanoseconds=True)


def release_memory(held: int, frame_bytes: int = FRAME_BYTES) -> None:
    """Free a group's frame of `held` bytes now when it is a large part (an eighth or more) of
    what one frame may hold: GX's validation objects form reference cycles that keep the frame
    alive until Python's cycle collector runs. A smaller frame is left to the collector's own
    pace: a full collection walks every object of the process (docs/great_expectations.md)."""
    if held * 8 >= frame_bytes:
        import gc

        gc.collect()


def column_types(con, relation: str, columns: list[str]) -> list[str]:
    """The SQL type of each of `columns` in `relation`; "missing" for an absent column or table."""
    try:
        found = {r[0]: r[1]
                 for r in con.execute(sql("describe_source", source=relation)).fetchall()}
    except Exception:  # noqa: BLE001 - an absent table shows as missing types
        found = {}
    return [found.get(c, "missing") for c in columns]
