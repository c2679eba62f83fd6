"""Column encodings: how each declared column maps to integer codes 0..k-1, and back.

An `Encoding` is public: it is derived from the column spec (declared domain and SQL type) and
the DP outputs of the preprocessing stage (`Derived`), never from the data or the source's
schema. `EncodingPlan` is the encodings of one dataset in declaration order; its `domain` maps
attribute -> number of codes. Every encoding is total: no value makes it fail, so no error
message can quote one. The encode side is SQL (sql/encode_*.sql), the decode side numpy. The
codes per kind (their order is part of the contract) and the reading rules:
docs/decisions/0009-dp-preprocessing.md, "As implemented: encodings"."""

import json
import math
from dataclasses import asdict, dataclass, replace
from datetime import date, datetime, timedelta

import numpy as np
import pyarrow as pa

from .config import DEFAULT_BINS, QUANTILE_BINS, ColumnSpec
from .sql import ident, literal, qualified, sql, sql_text

# a marginal's attributes, in the order of its array's axes
Clique = tuple[str, ...]

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
    edges: tuple[float, ...] | None = None     # quantile or PrivTree bin edges, low .. high
    density: tuple | None = None               # ((low, high, noisy count), ...) inside bounds
    counts: tuple | None = None                # ((label text, noisy count), ...) released
    count_sd: float | None = None              # the noise sd of each of `counts`
    gap: tuple | None = None                   # (earlier column, ((low, high, noisy count), ...))


@dataclass(frozen=True)
class Encoding:
    """How one column maps to codes 0..size-1 and back: public (from the spec and DP
    outputs only); the order of the codes per kind is in docs/decisions/0009-dp-preprocessing.md."""

    column: str
    kind: str                         # categorical | boolean | integer | float | datetime
    sql_type: str                     # the declared SQL type (ColumnSpec.sql_type), set on decode
    size: int                         # number of codes
    categories: tuple | None = None   # categorical: code i -> categories[i]
    rare: tuple | None = None         # categorical: ((member, weight), ...) behind the rare code
    other_label: str | int | float | None = None
    low: float | None = None          # binned kinds: numeric bounds (days for datetime)
    high: float | None = None
    bins: int | None = None
    edges: tuple[float, ...] | None = None  # non-uniform bins (quantile, PrivTree); None = uniform
    integer_bins: bool = False        # integer-valued bins (integers, DATE columns)
    nullable: bool = False
    missing: tuple[str, ...] = ()
    has_other: bool = True            # categorical: an `other` code for values outside the list
    density: tuple | None = None      # ((low, high, weight), ...) drawn inside a bin
    prior: tuple | None = None        # ((code, noisy count, sd), ...) preprocessing released
    fallback: int | None = None       # the code of the declared `fallback` value, if any
    # categorical: the public table's column its declared list was read from
    # (`categories: {from: ...}`, no budget), as `schema.table.column`
    categories_from: str | None = None
    # a later timestamp of a declared order: (earlier column, ((low, high, weight), ...)), the
    # density of later - earlier in days, followed inside the bin (constraints.draw_gaps)
    gap: tuple | None = None

    @property
    def null_code(self) -> int | None:
        return self.size - 1 if self.nullable else None

    @property
    def fallback_code(self) -> int:
        """The code of a value the column cannot represent (`ColumnSpec`'s rule): the declared
        fallback's, else the NULL code, else the other code, else 0. From the spec only."""
        for code in (self.fallback, self.null_code, self.other_code):
            if code is not None:
                return code
        return 0

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
    """Every column's encoding; `noisy_rows`: the noisy row count preprocessing drew (public,
    charged), when it drew one (`budget.DatasetBudget.with_rows` splits the run with it);
    `spec_digest`: the digest of the spec it was made from (`config.plan_digest`), which the
    later stages compare with the loaded spec's (`store.ArtifactStore.plan_for`)."""

    encodings: tuple[Encoding, ...]
    noisy_rows: float | None = None
    spec_digest: str | None = None

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
        """A list of encodings; with a noisy row count or a spec digest, {"encodings": [...],
        "noisy_rows": n, "spec_digest": d} (each when set)."""
        encodings = [asdict(e) for e in self.encodings]
        extra = {k: v for k, v in (("noisy_rows", self.noisy_rows),
                                   ("spec_digest", self.spec_digest)) if v is not None}
        data = {"encodings": encodings, **extra} if extra else encodings
        return json.dumps(data, default=str, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "EncodingPlan":
        def tup(v):
            return tuple(tuple(x) if isinstance(x, list) else x for x in v) if v is not None else None

        def fields(r: dict) -> dict:
            if "source_type" in r:  # plans written before the field was named sql_type
                r = {**{k: v for k, v in r.items() if k != "source_type"},
                     "sql_type": r["source_type"]}
            return {**r, "categories": tup(r["categories"]), "rare": tup(r["rare"]),
                    "edges": tup(r["edges"]), "missing": tuple(r["missing"]),
                    "density": tup(r.get("density")), "prior": tup(r.get("prior")),
                    "gap": (r["gap"][0], tup(r["gap"][1])) if r.get("gap") else None}

        data = json.loads(text)
        extra = data if isinstance(data, dict) else {}
        records = data["encodings"] if isinstance(data, dict) else data
        return cls(tuple(Encoding(**fields(r)) for r in records), extra.get("noisy_rows"),
                   extra.get("spec_digest"))


def base_type(sql_type: str) -> str:
    """The SQL type without its parameters, upper-cased: `decimal(10, 2)` -> `DECIMAL`."""
    return sql_type.split("(")[0].strip().upper()


def check_columns(columns: dict[str, ColumnSpec], source_columns) -> None:
    """Every declared column is a column of the source (`source_columns`: its names)."""
    present = list(source_columns)
    missing = [c for c in columns if c not in present]
    if missing:
        raise SchemaError(
            f"declared column(s) {missing} are not in the source (it has {sorted(present)}); "
            "fix the column names in the dataset's entry"
        )


def build_plan(columns: dict[str, ColumnSpec], source_columns,
               derived: dict[str, Derived] | None = None) -> EncodingPlan:
    """The encoding of every declared column, in the declaration order, from its spec (kind,
    domain, SQL type) and what preprocessing derived with DP; `source_columns` (the source's
    column names) only checks that every declared column exists. Nothing of the source's schema
    beyond its names is used, so the synthetic table's schema is the spec's."""
    check_columns(columns, source_columns)
    derived = derived or {}
    encodings = []
    for name, spec in columns.items():
        e = _encoding(name, spec, derived.get(name, Derived()))
        encodings.append(replace(e, fallback=declared_fallback(spec, e)))
    return EncodingPlan(tuple(encodings))


def integer_valued(spec: ColumnSpec) -> bool:
    """Integers and DATE-typed datetimes bin in exact integer arithmetic (days for dates)."""
    return spec.kind == "integer" or (spec.kind == "datetime" and spec.sql_type == "DATE")


def uniform_edges(low: float, high: float, bins: int, integer: bool) -> np.ndarray:
    """The edges of the encoding's `bins` equal bins over [low, high]: low + k (high - low) /
    bins; integers: bin k holds low + ceil(k span / bins) up to the next edge, span = high - low
    + 1, so the last edge is high + 1 (decoding and the `density` histogram cut at these)."""
    if integer:
        low, span = int(low), int(high - low + 1)
        return np.array([low - ((-k * span) // bins) for k in range(bins + 1)], dtype=np.float64)
    return low + (high - low) * np.arange(bins + 1, dtype=np.float64) / bins


def uniform_bins(spec: ColumnSpec, low: float, high: float) -> tuple[float, float, int]:
    """(low, high, bins) of a uniformly binned column over [low, high]: `bins` (or
    DEFAULT_BINS); integers: the bounds rounded inward and at most one bin per integer."""
    bins = bin_count(spec)
    if integer_valued(spec):
        low, high = math.ceil(low), math.floor(high)
        bins = min(bins, max(high - low + 1, 1))
    return low, high, bins


def bin_count(spec: ColumnSpec) -> int:
    """The number of bins of a binned column: its declared `bins`, else QUANTILE_BINS for
    quantile bins (equal-mass bins need fewer: a dense range no longer shares one wide bin),
    DEFAULT_BINS for uniform ones."""
    if spec.bins:
        return spec.bins
    return QUANTILE_BINS if spec.binning_rule == "quantile" else DEFAULT_BINS


def grid_points(x, width: float) -> np.ndarray:
    """Points start + i * width of a grid whose width is 1, 2 or 5 times a power of ten, as the
    doubles nearest their decimal values: computed in floating point they land an ulp off
    (140 * 0.005 = 0.7000000000000001), and a source value on the point (0.7, read from text as
    the double nearest 0.7) would then compare below an edge placed there and encode into the
    bin under it, whose density has no mass at 0.7: the decoded heap moved out of its cell
    (diamonds_raw's 2-way TVD, docs/decisions/0009-dp-preprocessing.md). Rounded to one decimal more
    than the width has."""
    digits = max(0, 1 - math.floor(math.log10(width)))
    return np.round(np.asarray(x, dtype=np.float64), digits)


def equal_mass_edges(pieces, low: float, high: float, bins: int, integer: bool,
                     grid: tuple[float, float] | None = None) -> tuple[float, ...]:
    """Edges low .. high of at most `bins` bins of about equal mass under the piecewise-uniform
    density `pieces` ((a, b, weight), ...; weights clipped at 0) over [low, high]: the interior
    edges are the points where its cumulative mass reaches j / bins of the total (j = 1 ..
    bins - 1), linear inside a piece, then moved to the nearest point of a public grid: the
    integers for integers (bin k holds edges[k] .. edges[k+1] - 1, the last one up to `high`),
    else `grid` = (start, width), the multiples start + i width (the `density` histogram's
    cells, so a value on that grid, and the cell holding it, fall in one bin). Equal edges
    merge: a piece holding more than 1 / bins of the mass is not cut into empty bins more than
    the grid allows. With no mass, the uniform edges (`uniform_edges`). Post-processing of
    `pieces` only."""
    p = np.asarray(pieces, dtype=np.float64).reshape(-1, 3)
    p = p[(p[:, 1] > p[:, 0]) & (p[:, 2] > 0)]
    p = p[np.argsort(p[:, 0], kind="stable")]
    total = float(p[:, 2].sum()) if p.size else 0.0
    if bins <= 1 or not total > 0:
        cut = uniform_edges(low, high, max(bins, 1), integer)
        return tuple(float(x) for x in cut[:-1]) + (float(high),)
    cumulative = np.concatenate([[0.0], np.cumsum(p[:, 2])])
    targets = total * np.arange(1, bins) / bins
    i = np.clip(np.searchsorted(cumulative, targets, side="right") - 1, 0, len(p) - 1)
    cuts = p[i, 0] + (targets - cumulative[i]) / p[i, 2] * (p[i, 1] - p[i, 0])
    if integer:
        cuts = np.round(cuts)
        interior = cuts[(cuts > low) & (cuts <= high)]
    else:
        if grid is not None:
            start, width = grid
            cuts = grid_points(start + np.round((cuts - start) / width) * width, width)
        interior = cuts[(cuts > low) & (cuts < high)]
    return (float(low),) + tuple(float(x) for x in np.unique(interior)) + (float(high),)


def _encoding(name: str, spec: ColumnSpec, derived: Derived) -> Encoding:
    sql_type = spec.sql_type
    nullable = spec.is_nullable
    extra = 1 if nullable else 0
    missing = tuple(spec.missing)
    if spec.kind == "categorical":
        categories = tuple(spec.categories) if spec.categories is not None else (derived.categories or ())
        rare = derived.rare or None
        other = _typed_label(name, spec.other_label, sql_type, nullable) if spec.other else None
        size = len(categories) + (1 if rare else 0) + (1 if spec.other else 0) + extra
        return Encoding(name, "categorical", sql_type, size, categories=categories, rare=rare,
                        other_label=other, nullable=nullable, missing=missing,
                        has_other=spec.other, prior=category_prior(categories, derived))
    if spec.kind == "boolean":
        return Encoding(name, "boolean", sql_type, 2 + extra, nullable=nullable, missing=missing)
    if spec.bounds is not None:
        low, high = spec.numeric_bounds()
    elif derived.bounds is not None:
        low, high = derived.bounds
    else:
        raise SchemaError(f"column {name!r} has no bounds: declare `bounds: [low, high]`")
    integer_bins = integer_valued(spec)
    if derived.edges is not None:
        edges = tuple(float(x) for x in derived.edges)
        return Encoding(name, spec.kind, sql_type, len(edges) - 1 + extra, low=edges[0],
                        high=edges[-1], bins=len(edges) - 1, edges=edges,
                        integer_bins=integer_bins, nullable=nullable, missing=missing,
                        density=derived.density or None, gap=derived.gap)
    if integer_bins and math.floor(high) < math.ceil(low):
        raise SchemaError(f"column {name!r}: bounds contain no integer")
    low, high, bins = uniform_bins(spec, low, high)
    density = derived.density or None
    return Encoding(name, spec.kind, sql_type, bins + extra, low=float(low), high=float(high),
                    bins=bins, integer_bins=integer_bins, nullable=nullable, missing=missing,
                    density=density, gap=derived.gap)


def declared_fallback(spec: ColumnSpec, e: Encoding) -> int | None:
    """The code of the column's declared `fallback` value in encoding `e`, or None."""
    if spec.fallback is None:
        return None
    if e.kind == "categorical":
        labels = [sql_text(c) for c in e.categories]
        text = sql_text(spec.fallback)
        return labels.index(text) if text in labels else e.other_code
    if e.kind == "boolean":
        return int(spec.fallback)
    return value_code(e, spec.fallback_value())


def value_code(e: Encoding, x: float) -> int:
    """The bin of number `x` (days for datetimes) in a binned encoding, as the SQL encoding
    (`encode_expression`) computes it for a value that reads as `x`: integers rounded half to
    even, then clamped to [low, high]; uniform or edge bins."""
    if e.kind == "integer":
        x = float(round(x))
    if e.edges is not None:
        return int(sum(edge <= x for edge in e.edges[1:-1]))
    x = min(max(x, e.low), e.high)
    if e.integer_bins:
        low, high = int(e.low), int(e.high)
        return (int(x) - low) * e.bins // (high - low + 1)
    return min(int(math.floor((x - e.low) / ((e.high - e.low) / e.bins))), e.bins - 1)


def category_prior(categories: tuple, derived: Derived) -> tuple | None:
    """((code, noisy count, sd), ...): the counts preprocessing released for a categorical
    column's codes (`Derived.counts`: category discovery's thresholded histogram or the declared
    categories' noisy counts), which the measurement stage merges into the column's 1-way
    marginal (`measure.with_prior`). A kept category's code gets its own count when
    preprocessing passed it (`preprocess.unbiased_counts`: not a rare member, not near a cut);
    the rare, `other` and NULL codes none. Post-processing of charged releases: public."""
    if not derived.counts or not derived.count_sd:
        return None
    counts, sd = dict(derived.counts), float(derived.count_sd)
    prior = [(code, float(counts[sql_text(c)]), sd) for code, c in enumerate(categories)
             if sql_text(c) in counts]
    return tuple(prior) or None


def _typed_label(name: str, label: str, sql_type: str, nullable: bool):
    """`other_label` in the column's declared type; for an integer-typed column whose label is
    not a number, the other code decodes to NULL (ColumnSpec allows that only when nullable)."""
    t = base_type(sql_type)
    if t not in INTEGER_TYPES and t not in FLOAT_TYPES:
        return label
    try:
        return int(label) if t in INTEGER_TYPES else float(label)
    except ValueError:
        if nullable:
            return None
        raise SchemaError(
            f"column {name!r} is {sql_type}, so its `other_label` must be a "
            f"number (got {label!r}); set `other_label:` in the dataset's entry"
        ) from None


# ----------------------------------------------------------------------------------- encode (SQL)

NUMERIC_KINDS = ("integer", "float")


def is_null_condition(column: str, missing: tuple[str, ...] | list[str],
                      kind: str | None = None) -> str:
    """SQL: the column's value reads as NULL: NULL, one of the `missing` markers, or (integer and
    float `kind`) NaN. Total and two-valued: never fails on a value, never NULL."""
    col = ident(column)
    conditions = [f"{col} IS NULL"]
    if missing:
        conditions.append(f"CAST({col} AS VARCHAR) IN ({', '.join(literal(m) for m in missing)})")
    if kind in NUMERIC_KINDS:
        conditions.append(f"coalesce(isnan(TRY_CAST({col} AS DOUBLE)), false)")
    return conditions[0] if len(conditions) == 1 else "(" + " OR ".join(conditions) + ")"


def value_expression(column: str, kind: str, sql_type: str) -> str:
    """SQL: the column as a DOUBLE for binning, NULL where it does not cast: integers rounded
    half to even (as DuckDB casts), datetimes as days since 1970 in the declared type (DATE or
    TIMESTAMP; +-infinity as +-inf). May be +-inf or NaN; never fails."""
    col = ident(column)
    if kind == "datetime":
        t = "DATE" if base_type(sql_type) == "DATE" else "TIMESTAMP"
        return sql("encode_days", value=f"TRY_CAST({col} AS {t})", epoch=f"{t} '1970-01-01'")
    if kind == "integer":
        return f"round_even(TRY_CAST({col} AS DOUBLE), 0)"
    return f"TRY_CAST({col} AS DOUBLE)"


def boolean_value(column: str) -> str:
    """SQL: a boolean column's value, NULL where it reads as no boolean (sql/boolean_value.sql:
    text by its spelling, whatever DuckDB's own cast accepts; other types with TRY_CAST)."""
    return sql("boolean_value", column=ident(column))


def encode_expression(e: Encoding) -> str:
    """The SQL expression computing e's code from the source column (total: see the module
    docstring)."""
    col = ident(e.column)
    is_null = is_null_condition(e.column, e.missing, e.kind)
    null_code = e.null_code if e.nullable else e.fallback_code  # no row fails (0009, encodings)
    if e.kind == "categorical":
        kept = "[" + ", ".join(literal(sql_text(c)) for c in e.categories) + "]"
        rare = "[" + ", ".join(literal(sql_text(m)) for m, _ in (e.rare or ())) + "]"
        return sql("encode_categorical", column=col, is_null=is_null, null_code=null_code,
                   categories=kept, rare=rare, rare_code=e.rare_code if e.rare else "NULL",
                   other_code=e.other_code if e.has_other else e.fallback_code)
    if e.kind == "boolean":
        return sql("encode_boolean", value=boolean_value(e.column), is_null=is_null,
                   null_code=null_code)
    value = value_expression(e.column, e.kind, e.sql_type)
    if e.edges is not None:
        comparisons = " + ".join(f"CAST({float(x)!r} <= {value} AS INTEGER)"
                                 for x in e.edges[1:-1]) or "0"
        return sql("encode_edges", is_null=is_null, null_code=null_code, value=value,
                   comparisons=comparisons)
    if e.integer_bins:
        low, high = int(e.low), int(e.high)
        span = high - low + 1
        # (x - low) * bins stays below span * bins: BIGINT while that fits in 62 bits
        wide = "BIGINT" if span * e.bins < 2 ** 62 else "HUGEINT"
        return sql("encode_integer_bins", is_null=is_null, null_code=null_code, value=value,
                   low=low, high=high, bins=e.bins, span=span, wide=wide)
    width = (e.high - e.low) / e.bins
    return sql("encode_binned", is_null=is_null, null_code=null_code, value=value,
               low=repr(e.low), high=repr(e.high), width=repr(width), last_bin=e.bins - 1)


def encoded_columns(plan: EncodingPlan) -> str:
    """The SELECT list that encodes every column of a relation with the source's columns (the
    encoded view, the checks and the utility report read the synthetic table through it)."""
    return ",\n  ".join(f"{encode_expression(e)} AS {ident(e.column)}" for e in plan.encodings)


def encode_view_sql(plan: EncodingPlan, view: str, source: str) -> str:
    """The statement that creates `view`, the encoded codes of every column of `plan` read from
    the `source` relation (sql/encode_view.sql): total, no value makes it fail."""
    return sql("encode_view", view=qualified(view), expressions=encoded_columns(plan),
               source=source)


def cast_type(spec: ColumnSpec) -> str | None:
    """The SQL type every present (non-NULL, non-marker, non-NaN) value must cast to, or None:
    the type the encoding reads it with (`value_expression`)."""
    if spec.kind == "categorical":
        return None
    if spec.kind == "boolean":
        return "BOOLEAN"
    if spec.kind in NUMERIC_KINDS:
        return "DOUBLE"
    return spec.sql_type


# ----------------------------------------------------------------------------------- decode (numpy)

def decode(plan: EncodingPlan, codes: dict[str, np.ndarray], rng: np.random.Generator,
           dictionary: bool = False) -> pa.Table:
    """Codes back to values: an Arrow table in the plan's column order (cast later in SQL to the
    declared types, see sql/write_synthetic.sql). `dictionary`: categorical columns stay Arrow
    dictionary arrays (the same values, not spelled out row by row: for a reader that casts
    them, such as DuckDB)."""
    arrays = {e.column: decode_column(e, np.asarray(codes[e.column]), rng, dictionary)
              for e in plan.encodings}
    return pa.table(arrays)


def _arrow_type(sql_type: str) -> pa.DataType:
    t = base_type(sql_type)
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


def decode_column(e: Encoding, codes: np.ndarray, rng: np.random.Generator,
                  dictionary: bool = False) -> pa.Array:
    """Codes of one column back to values, as an Arrow array of the declared SQL type.

    Args:
        e: the column's encoding.
        codes: one code per row, each in 0..e.size-1.
        rng: draws a value inside a bin (from the column's DP density) and a rare code's member.
        dictionary: a categorical column as an Arrow dictionary array of its values (the same
            values and random draws; decoding them is left to the reader).

    Returns:
        The decoded values, NULL where a code is the null code.

    Raises:
        ValueError: a code outside 0..e.size-1.
    """
    as_dictionary = dictionary
    codes = codes.astype(np.int64)
    if codes.size and (codes.min() < 0 or codes.max() >= e.size):
        raise ValueError(f"column {e.column!r}: codes outside 0..{e.size - 1}")
    is_null = codes == e.null_code if e.nullable else np.zeros(codes.shape, bool)
    if e.kind == "categorical":  # vectorized: codes index a dictionary of the column's values
        arrow_type = _arrow_type(e.sql_type)
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
        coded = pa.DictionaryArray.from_arrays(pa.array(indices, mask=is_null),
                                               pa.array(dictionary, type=arrow_type))
        return coded if as_dictionary else coded.dictionary_decode()
    if e.kind == "boolean":
        return pa.array(codes == 1, mask=is_null, type=pa.bool_())
    bins = np.where(is_null, 0, codes)
    cut = bin_cuts(e)
    lows, highs = cut[:-1], cut[1:]  # each bin's interval
    if e.integer_bins:
        lows = lows.astype(np.int64)
        highs = np.maximum(highs.astype(np.int64), lows + 1)
        starts, stops = lows[bins], highs[bins]
        values = starts + (rng.random(bins.shape) * (stops - starts)).astype(np.int64)
        if e.density:
            inside = _draw_density(e.density, lows.astype(float), highs.astype(float), bins, rng)
            values = np.where(np.isnan(inside), values,
                              np.clip(np.floor(np.nan_to_num(inside)), starts, stops - 1)
                              ).astype(np.int64)
        if e.kind == "datetime":
            return pa.array(values.astype("datetime64[D]"), mask=is_null, type=pa.date32())
        return pa.array(values, mask=is_null, type=pa.int64())
    starts, stops = lows[bins], highs[bins]
    values = starts + rng.random(bins.shape) * (stops - starts)
    if e.density:
        inside = _draw_density(e.density, lows, highs, bins, rng)
        values = np.where(np.isnan(inside), values, inside)
    values = np.minimum(values, e.high)
    if e.kind == "datetime":
        micros = np.round(values * 86400e6).astype("int64").astype("datetime64[us]")
        return pa.array(micros, mask=is_null, type=pa.timestamp("us"))
    return pa.array(values, mask=is_null, type=pa.float64())


def bin_cuts(e: Encoding) -> np.ndarray:
    """A binned column's cut points: bin k is [cut[k], cut[k + 1]) in the encoding's numeric
    space (days for a datetime); with integer bins, bin k holds the integers cut[k] ..
    cut[k + 1] - 1."""
    if e.edges is not None:
        cut = np.asarray(e.edges, dtype=np.float64)
        if e.integer_bins:  # bin k holds the integers ceil(edges[k]) .. ceil(edges[k+1]) - 1
            cut = np.ceil(cut)
            cut[-1] = e.high + 1
        return cut
    return uniform_edges(e.low, e.high, e.bins, e.integer_bins)


def _draw_density(density: tuple, lows: np.ndarray, highs: np.ndarray, bins: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """One value per row inside its bin's interval [lows[bin], highs[bin]), drawn from the
    piecewise-uniform density ((low, high, weight), ...; a piece with low == high is a point
    mass at low) restricted to that interval (NaN where it puts no weight there). Vectorized
    over the rows: a bins x pieces table of each piece's mass inside each bin, one inverse-CDF
    search for every row's piece, one uniform for its place inside the piece."""
    pieces = np.asarray(density, dtype=np.float64).reshape(-1, 3)
    a, b = lows[:, None], highs[:, None]
    lo, hi = np.maximum(pieces[None, :, 0], a), np.minimum(pieces[None, :, 1], b)
    overlap = np.clip(hi - lo, 0, None)  # bins x pieces
    length = pieces[:, 1] - pieces[:, 0]
    point = (length == 0) & (pieces[None, :, 0] >= a) & (pieces[None, :, 0] < b)
    mass = np.where(length > 0, pieces[:, 2] * overlap / np.where(length > 0, length, 1),
                    np.where(point, pieces[:, 2], 0.0))
    mass = np.clip(mass, 0.0, None)
    total = mass.sum(axis=1)
    has = total > 0
    count = mass.shape[1]
    cdf = np.cumsum(mass, axis=1) / np.where(has, total, 1.0)[:, None]
    cdf[:, -1] = 1.0
    # one increasing array: bin k's cdf shifted by k, so one searchsorted serves every bin
    shifted = (cdf + np.arange(len(lows), dtype=np.float64)[:, None]).ravel()
    u = rng.random(bins.shape)
    u += bins
    # the flat index of the row's (bin, piece); a zero-mass piece is never found (empty step)
    cell = np.searchsorted(shifted, u, side="right")
    last = (bins + 1) * count - 1
    np.minimum(cell, last, out=cell)  # u rounded up to the next bin: its own last piece
    out = rng.random(bins.shape)
    out *= overlap.ravel()[cell]
    out += lo.ravel()[cell]
    out[~has[bins]] = np.nan
    return out


def allowed_values(e: Encoding) -> list:
    """Every non-NULL value a categorical column may take after decoding, in the column's type."""
    arrow_type = _arrow_type(e.sql_type)
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


def declared_domain(name: str, column: ColumnSpec, learned: Encoding | None
                    ) -> tuple | None:
    """What the synthetic table's column `name` may hold by its declaration `column` (the spec,
    not the plan), the plan's encoding `learned` of it filling in only what the declaration
    leaves to preprocessing (discovered categories with their rare members, learned bounds):
    `("set", values)` for a categorical or boolean column (its non-NULL values, in its SQL
    type: the declared categories and the other code's label), `("between", low, high)` for a
    binned one (in its type: integers rounded inward, dates as dates), or None when neither says
    (a learned domain that `learned`, missing or of another kind, does not have)."""
    if column.kind == "boolean":
        return ("set", [False, True])
    known = learned if learned is not None and learned.kind == column.kind else None
    try:
        if column.kind == "categorical":
            listed = column.category_list  # None: discovered, or read `from` a public table
            if listed is None and known is None:
                return None
            categories, rare = ((tuple(listed), None) if listed is not None
                                else (known.categories, known.rare))
            other = (_typed_label(name, column.other_label, column.sql_type, column.is_nullable)
                     if column.other else None)
            return ("set", allowed_values(Encoding(name, "categorical", column.sql_type, 0,
                                                   categories=categories, rare=rare,
                                                   other_label=other)))
        if column.bounds is None:
            return None if known is None else ("between", *value_bounds(known))
        return ("between", *value_bounds(_encoding(name, column, Derived())))
    except SchemaError:  # a declaration preprocessing refuses: no table was made from it
        return None
