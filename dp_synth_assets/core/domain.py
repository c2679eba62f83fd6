"""Column encodings: how each declared column maps to integer codes 0..k-1, and back.

An `Encoding` is public: it is derived from the column spec (the declared public domain), the
source's SQL type, and the DP outputs of the preprocessing stage (`Derived`: discovered
categories, merged-rare members with their noisy counts, DP bounds, PrivTree bin edges), never
from the data directly. `EncodingPlan` is the encodings of one dataset; its `domain` is what mbi
calls a Domain (attribute -> number of codes).

Codes, per kind (the order is part of the contract):
- categorical: one code per kept category, then the rare code (when categories were merged),
  then the `other` code (values outside the list; absent with `other: false`), then the null
  code when nullable. The rare
  code decodes to one of its members drawn in proportion to their noisy counts.
- boolean: false = 0, true = 1, then the null code when nullable.
- integer / DATE, uniform binning: exact integer arithmetic, code = (x - low) * bins // (high -
  low + 1); a bin decodes to a uniformly drawn integer inside it, so encode(decode(code)) == code.
- float / timestamps, uniform binning: bins of width (high - low) / bins, decoded uniformly.
- `edges` (PrivTree): code = number of interior edges <= x; bin k is [edges[k], edges[k+1]),
  decoded uniformly inside (integers: a uniformly drawn integer inside).
Values outside the bounds are clamped into the first or last bin (public rule); source values
listed in `missing` read as NULL. The encode side is SQL (sql/encode_*.sql) run by DuckDB; the
decode side is numpy.
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
FLOAT_TYPES = {"FLOAT", "DOUBLE", "REAL", "DECIMAL"}
EPOCH = date(1970, 1, 1)


class SchemaError(ValueError):
    """The source does not match the declared columns (missing column, impossible type)."""


@dataclass(frozen=True)
class Derived:
    """What preprocessing learned about one column with DP (all of it public)."""

    categories: tuple | None = None            # discovered kept categories
    rare: tuple | None = None                  # ((member, noisy count), ...) merged into one code
    bounds: tuple[float, float] | None = None  # DP bounds (numeric space; days for dates)
    edges: tuple[float, ...] | None = None     # PrivTree bin edges, low .. high


@dataclass(frozen=True)
class Encoding:
    column: str
    kind: str                         # categorical | boolean | integer | float | datetime
    source_type: str                  # the source column's SQL type, restored on decode
    size: int                         # number of codes
    categories: tuple | None = None   # categorical: code i -> categories[i]
    rare: tuple | None = None         # categorical: ((member, weight), ...) behind the rare code
    other_label: str | int | float | None = None
    low: float | None = None          # binned kinds: numeric bounds (days for datetime)
    high: float | None = None
    bins: int | None = None
    edges: tuple[float, ...] | None = None  # non-uniform bins (PrivTree); None = uniform
    integer_bins: bool = False        # integer-valued bins (integers, DATE columns)
    nullable: bool = False
    missing: tuple[str, ...] = ()
    has_other: bool = True            # categorical: an `other` code for values outside the list

    @property
    def null_code(self) -> int | None:
        return self.size - 1 if self.nullable else None

    @property
    def rare_code(self) -> int | None:
        return len(self.categories) if self.kind == "categorical" and self.rare else None

    @property
    def other_code(self) -> int | None:
        if self.kind != "categorical" or not self.has_other:
            return None
        return len(self.categories) + (1 if self.rare else 0)


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
        def tup(v):
            return tuple(tuple(x) if isinstance(x, list) else x for x in v) if v is not None else None

        return cls(tuple(Encoding(**{**r, "categories": tup(r["categories"]), "rare": tup(r["rare"]),
                                     "edges": tup(r["edges"]), "missing": tuple(r["missing"])})
                         for r in json.loads(text)))


def base_type(sql_type: str) -> str:
    return sql_type.split("(")[0].strip().upper()


def check_columns(columns: dict[str, ColumnSpec], source_types: dict[str, str]) -> None:
    missing = [c for c in columns if c not in source_types]
    if missing:
        raise SchemaError(
            f"declared column(s) {missing} are not in the source (it has {sorted(source_types)}); "
            "fix the column names in datasets.yaml"
        )


def build_plan(columns: dict[str, ColumnSpec], source_types: dict[str, str],
               derived: dict[str, Derived] | None = None) -> EncodingPlan:
    """The encoding of every declared column, in the source's column order, from its spec, the
    source's SQL type and what preprocessing derived with DP."""
    check_columns(columns, source_types)
    derived = derived or {}
    ordered = [name for name in source_types if name in columns]  # the source's column order
    return EncodingPlan(tuple(_encoding(name, columns[name], source_types[name],
                                        derived.get(name, Derived())) for name in ordered))


def integer_valued(spec: ColumnSpec, source_type: str) -> bool:
    """Integers and DATE columns bin in exact integer arithmetic."""
    return spec.kind == "integer" or (spec.kind == "datetime" and base_type(source_type) == "DATE")


def _encoding(name: str, spec: ColumnSpec, source_type: str, derived: Derived) -> Encoding:
    nullable = spec.is_nullable
    extra = 1 if nullable else 0
    missing = tuple(spec.missing)
    if spec.kind == "categorical":
        categories = tuple(spec.categories) if spec.categories is not None else (derived.categories or ())
        rare = derived.rare or None
        other = _typed_label(name, spec.other_label, source_type, nullable) if spec.other else None
        size = len(categories) + (1 if rare else 0) + (1 if spec.other else 0) + extra
        return Encoding(name, "categorical", source_type, size, categories=categories, rare=rare,
                        other_label=other, nullable=nullable, missing=missing,
                        has_other=spec.other)
    if spec.kind == "boolean":
        return Encoding(name, "boolean", source_type, 2 + extra, nullable=nullable, missing=missing)
    if spec.bounds is not None:
        low, high = spec.numeric_bounds()
    elif derived.bounds is not None:
        low, high = derived.bounds
    else:
        raise SchemaError(f"column {name!r} has no bounds: declare `bounds: [low, high]`")
    integer_bins = integer_valued(spec, source_type)
    if derived.edges is not None:
        edges = tuple(float(x) for x in derived.edges)
        return Encoding(name, spec.kind, source_type, len(edges) - 1 + extra, low=edges[0],
                        high=edges[-1], bins=len(edges) - 1, edges=edges,
                        integer_bins=integer_bins, nullable=nullable, missing=missing)
    if integer_bins:
        low, high = math.ceil(low), math.floor(high)
        if high < low:
            raise SchemaError(f"column {name!r}: bounds contain no integer")
        bins = min(spec.bins or DEFAULT_BINS, high - low + 1)
    else:
        bins = spec.bins or DEFAULT_BINS
    return Encoding(name, spec.kind, source_type, bins + extra, low=float(low), high=float(high),
                    bins=bins, integer_bins=integer_bins, nullable=nullable, missing=missing)


def _typed_label(name: str, label: str, source_type: str, nullable: bool):
    """`other_label` in the source column's type; for a numeric column whose label is not a
    number, the other code decodes to NULL when the column is nullable."""
    t = base_type(source_type)
    if t not in INTEGER_TYPES and t not in FLOAT_TYPES:
        return label
    try:
        return int(label) if t in INTEGER_TYPES else float(label)
    except ValueError:
        if nullable:
            return None
        raise SchemaError(
            f"column {name!r} is {source_type} in the source, so its `other_label` must be a "
            f"number (got {label!r}); set `other_label:` in datasets.yaml"
        ) from None


# ----------------------------------------------------------------------------------- encode (SQL)

def is_null_condition(column: str, missing: tuple[str, ...] | list[str]) -> str:
    """SQL: the column's value reads as NULL (NULL, or one of the `missing` markers)."""
    col = ident(column)
    if not missing:
        return f"{col} IS NULL"
    markers = ", ".join(literal(m) for m in missing)
    return f"({col} IS NULL OR CAST({col} AS VARCHAR) IN ({markers}))"


def value_expression(column: str, kind: str, source_type: str) -> str:
    """SQL: the column as a number for binning (days since 1970 for datetimes)."""
    col = ident(column)
    if kind == "datetime":
        if base_type(source_type) == "DATE":
            return f"date_diff('day', DATE '1970-01-01', TRY_CAST({col} AS DATE))"
        return f"(epoch(TRY_CAST({col} AS TIMESTAMP)) / 86400.0)"
    if kind == "integer":
        return f"TRY_CAST({col} AS BIGINT)"
    return f"TRY_CAST({col} AS DOUBLE)"


def encode_expression(e: Encoding) -> str:
    """The SQL expression computing e's code from the source column."""
    col = ident(e.column)
    is_null = is_null_condition(e.column, e.missing)
    null_code = e.null_code if e.nullable else "NULL"  # non-nullable columns are checked NULL-free
    if e.kind == "categorical":
        kept = "[" + ", ".join(literal(sql_text(c)) for c in e.categories) + "]"
        rare = "[" + ", ".join(literal(sql_text(m)) for m, _ in (e.rare or ())) + "]"
        return sql("encode_categorical", column=col, is_null=is_null, null_code=null_code,
                   categories=kept, rare=rare, rare_code=e.rare_code if e.rare else "NULL",
                   other_code=e.other_code if e.has_other else "NULL")  # checked: none outside
    if e.kind == "boolean":
        return sql("encode_boolean", column=col, is_null=is_null, null_code=null_code)
    value = value_expression(e.column, e.kind, e.source_type)
    if e.edges is not None:
        interior = "[" + ", ".join(repr(float(x)) for x in e.edges[1:-1]) + "]"
        return sql("encode_edges", is_null=is_null, null_code=null_code, value=value,
                   interior=interior if len(e.edges) > 2 else "[]::DOUBLE[]")
    if e.integer_bins:
        span = int(e.high - e.low + 1)
        return sql("encode_integer_bins", is_null=is_null, null_code=null_code, value=value,
                   low=int(e.low), bins=e.bins, span=span, last_bin=e.bins - 1)
    width = (e.high - e.low) / e.bins
    return sql("encode_binned", is_null=is_null, null_code=null_code, value=value,
               low=repr(e.low), width=repr(width), last_bin=e.bins - 1)


def sql_text(value: object) -> str:
    """How DuckDB's CAST(x AS VARCHAR) writes a declared category."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encoded_columns(plan: EncodingPlan) -> str:
    """The SELECT list that encodes every column of a relation with the source's columns (the
    encoded view, the checks and the utility report read the synthetic table through it)."""
    return ",\n  ".join(f"{encode_expression(e)} AS {ident(e.column)}" for e in plan.encodings)


def encode_view_sql(plan: EncodingPlan, view: str, source: str) -> str:
    return sql("encode_view", view=ident(view), expressions=encoded_columns(plan), source=source)


def cast_type(spec: ColumnSpec, source_type: str) -> str | None:
    """The SQL type every present (non-NULL, non-marker) value must cast to, or None."""
    if spec.kind == "categorical":
        return None
    if spec.kind == "boolean":
        return "BOOLEAN"
    if spec.kind == "integer":
        return "BIGINT" if base_type(source_type) not in FLOAT_TYPES else "DOUBLE"
    if spec.kind == "float":
        return "DOUBLE"
    return "DATE" if base_type(source_type) == "DATE" else "TIMESTAMP"


# ----------------------------------------------------------------------------------- decode (numpy)

def decode(plan: EncodingPlan, codes: dict[str, np.ndarray], rng: np.random.Generator) -> pa.Table:
    """Codes back to values: an Arrow table with the source's column order (types cast later in SQL
    to the exact source types, see sql/write_synthetic.sql)."""
    arrays = {e.column: decode_column(e, np.asarray(codes[e.column]), rng) for e in plan.encodings}
    return pa.table(arrays)


def _arrow_type(source_type: str) -> pa.DataType:
    t = base_type(source_type)
    if t in INTEGER_TYPES:
        return pa.int64()
    if t in FLOAT_TYPES:
        return pa.float64()
    return pa.bool_() if t == "BOOLEAN" else pa.string()


def _typed(value, arrow_type: pa.DataType):
    if value is None:
        return None
    if arrow_type == pa.string():
        return sql_text(value)
    if arrow_type == pa.int64():
        return int(float(value))
    if arrow_type == pa.float64():
        return float(value)
    return value if isinstance(value, bool) else str(value).lower() == "true"


def decode_column(e: Encoding, codes: np.ndarray, rng: np.random.Generator) -> pa.Array:
    codes = codes.astype(np.int64)
    if codes.size and (codes.min() < 0 or codes.max() >= e.size):
        raise ValueError(f"column {e.column!r}: codes outside 0..{e.size - 1}")
    is_null = codes == e.null_code if e.nullable else np.zeros(codes.shape, bool)
    if e.kind == "categorical":  # vectorized: codes index a dictionary of the column's values
        arrow_type = _arrow_type(e.source_type)
        dictionary = [_typed(c, arrow_type) for c in e.categories]
        position = np.zeros(e.size, dtype=np.int32)  # code -> index into `dictionary`
        position[:len(dictionary)] = np.arange(len(dictionary))
        if e.has_other:
            position[e.other_code] = len(dictionary)
            dictionary.append(_typed(e.other_label, arrow_type))
        indices = position[codes]
        if e.rare:  # each rare row becomes a member, drawn in proportion to the noisy counts
            at = np.flatnonzero(codes == e.rare_code)
            members = [_typed(m, arrow_type) for m, _ in e.rare]
            weights = np.clip(np.array([w for _, w in e.rare], dtype=float), 0, None)
            p = weights / weights.sum() if weights.sum() > 0 else np.full(len(members), 1 / len(members))
            indices[at] = len(dictionary) + rng.choice(len(members), size=at.size, p=p)
            dictionary += members
        return pa.DictionaryArray.from_arrays(pa.array(indices, mask=is_null),
                                              pa.array(dictionary, type=arrow_type)
                                              ).dictionary_decode()
    if e.kind == "boolean":
        return pa.array(codes == 1, mask=is_null, type=pa.bool_())
    bins = np.where(is_null, 0, codes)
    edges = np.asarray(e.edges) if e.edges is not None else None
    if e.integer_bins:
        if edges is not None:
            first = np.ceil(edges[bins]).astype(np.int64)
            after = np.where(bins == e.bins - 1, int(e.high) + 1, np.ceil(edges[bins + 1]).astype(np.int64))
            values = first + (rng.random(bins.shape) * np.maximum(after - first, 1)).astype(np.int64)
        else:
            span = int(e.high - e.low + 1)
            first = -((-bins * span) // e.bins)             # ceil(k * span / bins)
            after = -((-(bins + 1) * span) // e.bins)        # ceil((k + 1) * span / bins)
            values = int(e.low) + first + (rng.random(bins.shape) * (after - first)).astype(np.int64)
        if e.kind == "datetime":
            return pa.array(values.astype("datetime64[D]"), mask=is_null, type=pa.date32())
        return pa.array(values, mask=is_null, type=pa.int64())
    if edges is not None:
        values = edges[bins] + rng.random(bins.shape) * (edges[bins + 1] - edges[bins])
    else:
        width = (e.high - e.low) / e.bins
        values = e.low + (bins + rng.random(bins.shape)) * width
    values = np.minimum(values, e.high)
    if e.kind == "datetime":
        micros = np.round(values * 86400e6).astype("int64").astype("datetime64[us]")
        return pa.array(micros, mask=is_null, type=pa.timestamp("us"))
    return pa.array(values, mask=is_null, type=pa.float64())


def allowed_values(e: Encoding) -> list:
    """Every non-NULL value a categorical column may take after decoding, in the column's type."""
    arrow_type = _arrow_type(e.source_type)
    values = list(e.categories) + [m for m, _ in (e.rare or ())]
    values += [e.other_label] if e.other_label is not None else []
    return [_typed(v, arrow_type) for v in values]


def value_bounds(e: Encoding) -> tuple[object, object] | None:
    """The bounds in the column's own type (for domain checks)."""
    if e.low is None:
        return None
    if e.kind == "datetime":
        if e.integer_bins:
            return EPOCH + timedelta(days=e.low), EPOCH + timedelta(days=e.high)
        start = datetime(1970, 1, 1)
        return start + timedelta(days=e.low), start + timedelta(days=e.high)
    if e.integer_bins:
        return int(math.ceil(e.low)), int(math.floor(e.high))
    return e.low, e.high
