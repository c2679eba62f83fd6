"""Column encodings: how each declared column maps to integer codes 0..k-1, and back.

An `Encoding` is public: it is derived from the column spec (the declared public domain) and the
source's SQL type only, never from the data. `EncodingPlan` is the encodings of one dataset; its
`domain` is what mbi calls a Domain (attribute -> number of codes).

Codes, per kind (the order is part of the contract):
- categorical: one code per declared category, then the `other` code (values outside the list),
  then the null code when nullable.
- boolean: false = 0, true = 1, then the null code when nullable.
- integer / datetime stored as DATE: uniform bins over the declared bounds in exact integer
  arithmetic, code = (x - low) * bins // (high - low + 1); a bin decodes to a uniformly drawn
  integer inside it, so encode(decode(code)) == code.
- float / timestamps: uniform bins of width (high - low) / bins; a bin decodes to a uniform value
  inside it. Values outside the bounds are clamped into the first or last bin (public rule).
The encode side is SQL (sql/encode_*.sql) run by DuckDB; the decode side is numpy.
"""

import json
import math
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta

import numpy as np
import pyarrow as pa

from .config import DEFAULT_BINS, ColumnSpec
from .sql import ident, literal, sql

INTEGER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                 "UINTEGER", "UBIGINT"}
FLOAT_TYPES = {"FLOAT", "DOUBLE", "REAL"}
STRING_TYPES = {"VARCHAR", "TEXT", "STRING"}
EPOCH = date(1970, 1, 1)


class SchemaError(ValueError):
    """The source does not match the declared columns (missing column, impossible type)."""


@dataclass(frozen=True)
class Encoding:
    column: str
    kind: str                         # categorical | boolean | integer | float | datetime
    source_type: str                  # the source column's SQL type, restored on decode
    size: int                         # number of codes
    categories: tuple | None = None   # categorical: code i -> categories[i]
    other_label: str | int | None = None
    low: float | None = None          # binned kinds: numeric bounds (days for datetime)
    high: float | None = None
    bins: int | None = None
    integer_bins: bool = False        # exact integer binning (integers, DATE columns)
    nullable: bool = False

    @property
    def null_code(self) -> int | None:
        return self.size - 1 if self.nullable else None

    @property
    def other_code(self) -> int | None:
        return len(self.categories) if self.kind == "categorical" else None


@dataclass(frozen=True)
class EncodingPlan:
    encodings: tuple[Encoding, ...]

    @property
    def domain(self) -> dict[str, int]:
        return {e.column: e.size for e in self.encodings}

    @property
    def columns(self) -> list[str]:
        return [e.column for e in self.encodings]

    def __getitem__(self, column: str) -> Encoding:
        for e in self.encodings:
            if e.column == column:
                return e
        raise KeyError(column)

    def to_json(self) -> str:
        return json.dumps([asdict(e) for e in self.encodings], default=str, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "EncodingPlan":
        rows = json.loads(text)
        return cls(tuple(Encoding(**{**r, "categories": tuple(r["categories"]) if r["categories"]
                                     is not None else None}) for r in rows))


def base_type(sql_type: str) -> str:
    return sql_type.split("(")[0].strip().upper()


def build_plan(columns: dict[str, ColumnSpec], source_types: dict[str, str]) -> EncodingPlan:
    """The encoding of every declared column, from its spec and the source's SQL type."""
    missing = [c for c in columns if c not in source_types]
    if missing:
        raise SchemaError(
            f"declared column(s) {missing} are not in the source (it has {sorted(source_types)}); "
            "fix the column names in datasets.yaml"
        )
    return EncodingPlan(tuple(_encoding(name, spec, source_types[name]) for name, spec in columns.items()))


def _encoding(name: str, spec: ColumnSpec, source_type: str) -> Encoding:
    t = base_type(source_type)
    extra = 1 if spec.nullable else 0
    if spec.kind == "categorical":
        categories = tuple(spec.categories)
        other = spec.other_label
        if t in INTEGER_TYPES or t in FLOAT_TYPES:
            try:
                other = int(other) if t in INTEGER_TYPES else float(other)
            except ValueError:
                raise SchemaError(
                    f"column {name!r} is {source_type} in the source, so its `other_label` must be a "
                    f"number (got {other!r}); set `other_label:` in datasets.yaml"
                ) from None
        return Encoding(name, "categorical", source_type, len(categories) + 1 + extra,
                        categories=categories, other_label=other, nullable=spec.nullable)
    if spec.kind == "boolean":
        return Encoding(name, "boolean", source_type, 2 + extra, nullable=spec.nullable)
    low, high = spec.numeric_bounds()
    integer_bins = spec.kind == "integer" or (spec.kind == "datetime" and t == "DATE")
    if integer_bins:
        low, high = math.ceil(low), math.floor(high)
        width = high - low + 1
        bins = min(spec.bins or DEFAULT_BINS, width)
    else:
        bins = spec.bins or DEFAULT_BINS
    return Encoding(name, spec.kind, source_type, bins + extra, low=float(low), high=float(high),
                    bins=bins, integer_bins=integer_bins, nullable=spec.nullable)


# ----------------------------------------------------------------------------------- encode (SQL)

def _value_expression(e: Encoding) -> str:
    col = ident(e.column)
    if e.kind == "datetime":
        if e.integer_bins:
            return f"date_diff('day', DATE '1970-01-01', CAST({col} AS DATE))"
        return f"(epoch(CAST({col} AS TIMESTAMP)) / 86400.0)"
    return f"CAST({col} AS DOUBLE)" if not e.integer_bins else f"CAST({col} AS BIGINT)"


def encode_expression(e: Encoding) -> str:
    """The SQL expression computing e's code from the source column."""
    col = ident(e.column)
    null_code = e.null_code if e.nullable else "NULL"  # non-nullable columns are checked NULL-free
    if e.kind == "categorical":
        cats = "[" + ", ".join(literal(_sql_text(c)) for c in e.categories) + "]"
        return sql("encode_categorical", column=col, null_code=null_code, categories=cats,
                   other_code=e.other_code)
    if e.kind == "boolean":
        return sql("encode_boolean", column=col, null_code=null_code)
    if e.integer_bins:
        span = int(e.high - e.low + 1)
        return sql("encode_integer_bins", column=col, null_code=null_code,
                   value=_value_expression(e), low=int(e.low), bins=e.bins, span=span,
                   last_bin=e.bins - 1)
    width = (e.high - e.low) / e.bins
    return sql("encode_binned", column=col, null_code=null_code, value=_value_expression(e),
               low=repr(e.low), width=repr(width), last_bin=e.bins - 1)


def _sql_text(value: object) -> str:
    """How DuckDB's CAST(x AS VARCHAR) writes a declared category."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode_view_sql(plan: EncodingPlan, view: str, source: str) -> str:
    expressions = ",\n  ".join(f"{encode_expression(e)} AS {ident(e.column)}" for e in plan.encodings)
    return sql("encode_view", view=ident(view), expressions=expressions, source=source)


def cast_type(e: Encoding) -> str | None:
    """The SQL type every non-NULL value of the column must cast to, or None (anything goes)."""
    if e.kind == "categorical":
        return None
    if e.kind == "boolean":
        return "BOOLEAN"
    if e.kind == "integer":
        return "BIGINT" if base_type(e.source_type) not in FLOAT_TYPES else "DOUBLE"
    if e.kind == "float":
        return "DOUBLE"
    return "DATE" if e.integer_bins else "TIMESTAMP"


# ----------------------------------------------------------------------------------- decode (numpy)

def decode(plan: EncodingPlan, codes: dict[str, np.ndarray], rng: np.random.Generator) -> pa.Table:
    """Codes back to values: an Arrow table with the source's column order (types cast later in SQL
    to the exact source types, see sql/write_synthetic.sql)."""
    arrays = {e.column: decode_column(e, np.asarray(codes[e.column]), rng) for e in plan.encodings}
    return pa.table(arrays)


def decode_column(e: Encoding, codes: np.ndarray, rng: np.random.Generator) -> pa.Array:
    codes = codes.astype(np.int64)
    if codes.size and (codes.min() < 0 or codes.max() >= e.size):
        raise ValueError(f"column {e.column!r}: codes outside 0..{e.size - 1}")
    is_null = codes == e.null_code if e.nullable else np.zeros(codes.shape, bool)
    if e.kind == "categorical":
        labels = list(e.categories) + [e.other_label]
        if e.nullable:
            labels.append(None)
        values = [labels[c] for c in codes.tolist()]
        t = base_type(e.source_type)
        arrow_type = pa.int64() if t in INTEGER_TYPES else pa.float64() if t in FLOAT_TYPES else (
            pa.bool_() if t == "BOOLEAN" else pa.string())
        if arrow_type == pa.string():
            values = [None if v is None else _sql_text(v) for v in values]
        return pa.array(values, type=arrow_type)
    if e.kind == "boolean":
        return pa.array(codes == 1, mask=is_null, type=pa.bool_())
    bins = np.where(is_null, 0, codes)
    if e.integer_bins:
        span = int(e.high - e.low + 1)
        first = -((-bins * span) // e.bins)             # ceil(k * span / bins)
        after = -((-(bins + 1) * span) // e.bins)        # ceil((k + 1) * span / bins)
        values = int(e.low) + first + (rng.random(bins.shape) * (after - first)).astype(np.int64)
        if e.kind == "datetime":
            return pa.array(values.astype("datetime64[D]"), mask=is_null, type=pa.date32())
        return pa.array(values, mask=is_null, type=pa.int64())
    width = (e.high - e.low) / e.bins
    values = e.low + (bins + rng.random(bins.shape)) * width
    values = np.minimum(values, e.high)
    if e.kind == "datetime":
        micros = np.round(values * 86400e6).astype("int64").astype("datetime64[us]")
        return pa.array(micros, mask=is_null, type=pa.timestamp("us"))
    return pa.array(values, mask=is_null, type=pa.float64())


def value_bounds(e: Encoding) -> tuple[object, object] | None:
    """The declared bounds in the column's own type (for domain checks)."""
    if e.low is None:
        return None
    if e.kind == "datetime":
        if e.integer_bins:
            return EPOCH + timedelta(days=e.low), EPOCH + timedelta(days=e.high)
        start = datetime(1970, 1, 1)
        return start + timedelta(days=e.low), start + timedelta(days=e.high)
    if e.integer_bins:
        return int(e.low), int(e.high)
    return e.low, e.high
