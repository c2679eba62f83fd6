"""Reading the synthetic table for the checks: aggregates, in memory that does not grow with rows.

The checks read only the public synthetic table: its Parquet copy and the warehouse table's
schema. DuckDB computes every figure they judge as aggregates of the whole table
(`SyntheticTable.read`): one scan for the row count and each column's NULL and out-of-domain
counts (`column_aggregates`), GROUPING SETS for the measured marginals' counts and a sort of the
rows' codes for the repeated rows (`marginals.repeated_rows`, within DuckDB's memory limit); GX
then validates small frames of those figures (`suites`). Only the schema check reads rows into
pandas, the first 1,000 (`read_frame`). docs/great_expectations.md.
"""

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING

import numpy as np

from ..core import marginals as margs
from ..core.config import ColumnSpec
from ..core.domain import Clique, EncodingPlan, declared_domain, encoded_columns
from ..core.measure import Measurement
from ..core.sql import ident, literal, sql

if TYPE_CHECKING:  # pandas loads with the checks' run, not with the definitions
    import pandas as pd


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
    constraints: tuple = ()  # the declared constraints (`constraints.Constraint`)


@dataclass(frozen=True)
class SyntheticTable:
    """The synthetic table as the checks see it, all aggregates DuckDB computes over its Parquet
    copy: its columns (`present`), its row count, each present declared
    column's NULL count (`nulls`: NULL, or NaN in a float column) and count of present values
    outside its declared domain (`outside`, for the columns whose domain is known:
    `domain.declared_domain`), the counts of every measured marginal (1-way included) and the
    number of rows repeating an earlier one. `con` is the read-only connection a check reads
    rows through (`frame`) while it is open."""

    inputs: CheckInputs
    con: object
    source: str
    present: list[str]
    total: int
    nulls: dict[str, int]
    outside: dict[str, int]
    counts: dict[Clique, np.ndarray] = field(repr=False)
    repeated: int

    @classmethod
    def read(cls, con, inputs: CheckInputs) -> "SyntheticTable":
        """Describe the Parquet copy, count its rows, NULLs and out-of-domain values (one scan,
        `column_aggregates`), its measured marginals and its repeated rows (DuckDB aggregates on
        the encoded codes). Memory: the aggregates' results, whatever the row count."""
        plan = inputs.plan
        source = f"read_parquet({literal(inputs.parquet)})"
        types = {r[0]: r[1] for r in con.execute(sql("describe_source", source=source)).fetchall()}
        present = list(types)
        checked = {c: types[c] for c in inputs.declared if c in types}
        total, nulls, outside = column_aggregates(con, source, checked, domains(inputs))
        one_way = dict.fromkeys(m.clique[0] for m in inputs.measurements if len(m.clique) == 1)
        encoded = sql("encoded_relation", expressions=encoded_columns(plan), source=source)
        cliques = [(c,) for c in one_way if c in present] + [
            m.clique for m in inputs.measurements
            if len(m.clique) >= 2 and all(a in present for a in m.clique)]
        with margs.narrow_codes(con, encoded, plan.columns, plan.domain) as codes:
            counts = margs.count_marginals(con, codes, plan.columns, cliques, plan.domain) \
                if cliques else {}
            repeated = margs.repeated_rows(con, codes, plan.domain) if present else 0
        return cls(inputs, con, source, present, total, nulls, outside, counts, repeated)

    def frame(self, columns: list[str], limit: int | None = None) -> "pd.DataFrame":
        """Columns of the Parquet copy as pandas (`read_frame`): at most `limit` rows (the
        checks read only the first rows this way)."""
        return read_frame(self.con, self.source, columns, limit)

    def column_types(self, relation: str) -> list[str]:
        """The SQL type of each declared column in `relation` ("missing" when absent)."""
        return column_types(self.con, relation, list(self.inputs.declared))


def domains(inputs: CheckInputs) -> dict[str, tuple]:
    """Each declared column's domain where it is known (`domain.declared_domain`), with its
    declared SQL type."""
    learned = {e.column: e for e in inputs.plan.encodings}
    found = {name: (declared_domain(name, column, learned.get(name)), column.sql_type)
             for name, column in inputs.declared.items()}
    return {name: found[name] for name in found if found[name][0] is not None}


def column_aggregates(con, source: str, types: dict[str, str], allowed: dict[str, tuple]
                      ) -> tuple[int, dict[str, int], dict[str, int]]:
    """(rows, NULL count per column of `types`, count of present values outside its domain per
    column of `allowed` among them).

    One scan of `source` (check_aggregates.sql) counts the rows, each column's present values
    (NaN counts as NULL in a float column: `types` are the columns' SQL types in `source`) and
    the values outside each bounded domain; each column with a set domain is judged on its
    distinct values (a GROUP BY, check_outside_set.sql), which DuckDB reads from the Parquet
    dictionary. `allowed`: `domains`' (declared_domain's ("set", values) or ("between", low,
    high), the declared SQL type), compared in the declared type (dates and times as TIMESTAMP);
    a value that does not read as that type is outside."""
    scan, sets = {}, {}  # alias -> aggregate SQL
    for i, (column, sql_type) in enumerate(types.items()):
        scan[f"p{i}"] = sql("check_count_present", column=ident(column), alias=f"p{i}")
        if sql_type.upper() in FLOAT_SQL_TYPES:
            scan[f"nan{i}"] = sql("check_count_if", condition=f"isnan({ident(column)})",
                                  alias=f"nan{i}")
        if column not in allowed:
            continue
        outside = sql("check_outside", is_null=_is_null(column, sql_type),
                      inside=_inside(column, allowed[column]))
        if allowed[column][0][0] == "set":
            sets[f"o{i}"] = sql("check_outside_set", outside=outside, column=ident(column),
                                source=source, alias=f"o{i}")
        else:
            scan[f"o{i}"] = sql("check_count_if", condition=outside, alias=f"o{i}")
    row = con.execute(sql("check_aggregates", source=source,
                          aggregates="".join(f", {a}" for a in scan.values()))).fetchone()
    found = dict(zip(["rows", *scan], (int(v) for v in row)))
    if sets:
        row = con.execute(sql("check_outside_sets", counts=", ".join(sets.values()))).fetchone()
        found.update(zip(sets, (int(v) for v in row)))
    rows = found["rows"]
    return (rows, {c: rows - found[f"p{i}"] + found.get(f"nan{i}", 0)
                   for i, c in enumerate(types)},
            {c: found[f"o{i}"] for i, c in enumerate(types) if c in allowed})


FLOAT_SQL_TYPES = ("FLOAT", "DOUBLE", "REAL")


def _is_null(column: str, sql_type: str) -> str:
    """SQL: a value the checks count as NULL, as pandas does (NaN too in a float column)."""
    nan = f" OR isnan({ident(column)})" if sql_type.upper() in FLOAT_SQL_TYPES else ""
    return sql("check_is_null", column=ident(column), nan=nan)


def _inside(column: str, allowed: tuple) -> str:
    """SQL: a value (not NULL) within `allowed`: the column's `declared_domain` and its declared
    SQL type."""
    (kind, *domain), sql_type = allowed
    if kind == "set":
        value = sql("check_read_as", column=ident(column), type=sql_type)
        values = ", ".join(_sql_value(v) for v in domain[0] if v is not None) or "NULL"
        return sql("check_in_set", value=value, values=values)
    low, high = domain
    if any(isinstance(b, (date, datetime)) for b in (low, high)):
        sql_type = "TIMESTAMP"
    value = sql("check_read_as", column=ident(column), type=sql_type)
    return sql("check_between", value=value,
               low=value if low is None else _sql_value(low),
               high=value if high is None else _sql_value(high))


def _sql_value(value) -> str:
    """A domain value or bound as a SQL literal of its own type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"CAST({literal(repr(value))} AS DOUBLE)"
    if isinstance(value, (date, datetime)):
        return f"CAST({literal(value.isoformat())} AS TIMESTAMP)"
    return literal(value)


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


def column_types(con, relation: str, columns: list[str]) -> list[str]:
    """The SQL type of each of `columns` in `relation`; "missing" for an absent column or table."""
    try:
        found = {r[0]: r[1]
                 for r in con.execute(sql("describe_source", source=relation)).fetchall()}
    except Exception:  # noqa: BLE001 - an absent table shows as missing types
        found = {}
    return [found.get(c, "missing") for c in columns]
