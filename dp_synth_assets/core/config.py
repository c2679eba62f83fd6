"""The dataset registry: the schema of datasets.yaml and its validation
(docs/decisions/0008-dataset-registry.md).

A `DatasetSpec` is one registered source table with its column specs, privacy settings and
synthesis settings. `load_registry` parses the YAML file and rejects unknown keys, wrong kinds and
impossible values with a `RegistryError` that names the dataset and the key, so a
malformed file fails when the Dagster definitions load, before any run starts. What is refused
beyond the schema (duplicate or non-text keys, case-colliding columns, meaningless `rows: same`
budgets, missing extras...): 0008-dataset-registry.md, "As implemented"."""

import difflib
import hashlib
import json
import math
import numbers
import re
from dataclasses import dataclass, field as dataclass_field
from datetime import date, datetime
from pathlib import Path
from collections.abc import Mapping
from typing import Annotated, Literal, Union

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr,
                      ValidationError, field_validator, model_validator)

from .constraints import ConstraintError
from .constraints import validate as validate_constraints
from .engines import ENGINES
from .extras import refusal
from .methods import METHODS, PACKAGE as SELECT_PACKAGE
from .plugins import plugin_module, require_registered, validate_plugin_settings
from .scan_engines import PACKAGE as SCAN_PACKAGE, SCAN_ENGINES
from .sql import same_identifier, sql_text

DATASET_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
QUALIFIED_TABLE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*\.){0,2}[A-Za-z_][A-Za-z0-9_]*$")
# Default number of codes per binned column (nulls add one more); ISSUE 2: at most 32 codes.
DEFAULT_BINS = 31
# bins of a `binning: quantile` column without `bins` (domain.bin_count)
QUANTILE_BINS = 16

# The SQL type of each kind's column in the synthetic table (`type:` overrides it): from the
# declaration only, never from the source.
DEFAULT_SQL_TYPE = {"integer": "BIGINT", "float": "DOUBLE", "boolean": "BOOLEAN",
                    "datetime": "TIMESTAMP", "categorical": "VARCHAR"}
# The values each integer type holds (clamped to +-2^53, where doubles stop being exact).
INTEGER_SQL_RANGES = {"TINYINT": (-2 ** 7, 2 ** 7 - 1), "SMALLINT": (-2 ** 15, 2 ** 15 - 1),
                      "INTEGER": (-2 ** 31, 2 ** 31 - 1), "BIGINT": (-2 ** 53, 2 ** 53),
                      "UTINYINT": (0, 2 ** 8 - 1), "USMALLINT": (0, 2 ** 16 - 1),
                      "UINTEGER": (0, 2 ** 32 - 1), "UBIGINT": (0, 2 ** 53)}
# `type:` values each kind accepts (float also takes DECIMAL(p,s), 1 <= p <= 38, 0 <= s <= p).
SQL_TYPES = {"integer": tuple(INTEGER_SQL_RANGES), "float": ("DOUBLE", "FLOAT"),
             "boolean": ("BOOLEAN",), "datetime": ("DATE", "TIMESTAMP"),
             "categorical": ("VARCHAR", "TINYINT", "SMALLINT", "INTEGER", "BIGINT")}
DECIMAL = re.compile(r"^DECIMAL\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
INTEGER_TEXT = re.compile(r"^[+-]?\d+$")
# The largest epsilon (run or limit) whose rho the accountant can compute (OpenDP's profile
# overflows above about 5e4); far beyond any meaningful guarantee.
MAX_EPSILON = 10_000.0
# `rows: same` is refused when the noisy row count's standard deviation is at least this many
# rows whatever the run measures (0008-dataset-registry.md).
MAX_TOTAL_SD = 1_000_000.0
# the widest declared `bounds` (high - low): the bins are cut from the span (up to 4096 times
# it, and the density grid rounds it up), which overflows a float (about 1.8e308) near its top
MAX_BOUNDS_SPAN = 1e300
# what a message calls the entry of a spec that no registry parsed (`DatasetSpec.entry`)
UNKNOWN_ENTRY = "the dataset's entry"


# a number in exponent notation without a dot: YAML 1.1's resolver (PyYAML's, Dagster's) reads
# a plain `1e-9` as text; datasets.yaml's own loader reads it as the number it is (`_construct`)
EXPONENT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _number(value):
    """A YAML number, as is: booleans (`epsilon: true` would read as 1.0) and text are refused
    rather than converted; text in exponent notation is refused saying how to write it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        if isinstance(value, str) and EXPONENT.match(value.strip()):
            mantissa, exponent = value.strip().lower().split("e")
            written = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}"
            raise ValueError(f"expected a number, got the text {value!r} (YAML reads a number "
                             f"in exponent notation without a dot, or in quotes, as text): write "
                             f"{written}")
        raise ValueError(f"expected a number, got {value!r}")
    return value


def key_problem(key) -> str | None:
    """Why a mapping key of a registry is not a name (None when it is text): YAML 1.1 reads some
    unquoted keys as other values (`true:` is a boolean, `1:` a number, `null:` nothing), which
    no column, dataset or setting can be named; the message says what it was read as and how to
    quote it."""
    if isinstance(key, str):
        return None
    if isinstance(key, bool):
        read = ("a boolean (YAML 1.1 reads an unquoted true, false, yes, no, on or off as a "
                "boolean)")
    elif isinstance(key, numbers.Number):
        read = "a number"
    elif key is None:
        read = "null (YAML reads an unquoted null, ~ or an empty key as null)"
    elif isinstance(key, (date, datetime)):
        read = "a date"
    else:
        read = f"a {type(key).__name__}"
    return f"is read as {read}, not as a name: quote it"


def text_keys(what: str):
    """A before-validator refusing a mapping whose keys are not all text (`key_problem`), naming
    the key as `what` (e.g. "column"): pydantic's own message was "Input should be a valid
    string"."""
    def check(value):
        if isinstance(value, dict):
            for key in value:
                problem = key_problem(key)
                if problem:
                    example = (('`"true":`, `"yes":` or `"on":`' if key else
                                '`"false":`, `"no":` or `"off":`') if isinstance(key, bool) else
                               '`"null":`' if key is None else f'`"{key}":`')
                    shown = str(key) if isinstance(key, (date, datetime)) else repr(key)
                    raise ValueError(f"{what} key {shown} {problem} as written, e.g. {example}")
        return value
    return check


def _integer(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _epsilon(value):
    value = _number(value)
    if value > MAX_EPSILON:
        raise ValueError(f"epsilon {value:g} is above {MAX_EPSILON:g}, the largest whose rho "
                         "can be computed (and far beyond any meaningful guarantee)")
    return value


Number = Annotated[float, BeforeValidator(_number)]
Epsilon = Annotated[float, BeforeValidator(_epsilon)]


def sql_type_range(sql_type: str) -> tuple[float, float] | None:
    """The values a numeric SQL type holds (None: no limit that matters for binning)."""
    if sql_type in INTEGER_SQL_RANGES:
        return INTEGER_SQL_RANGES[sql_type]
    if sql_type == "FLOAT":
        return -3.4e38, 3.4e38
    m = DECIMAL.match(sql_type)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        top = 10.0 ** (precision - scale) - 10.0 ** -scale
        return -top, top
    return None


def _normalized_type(kind: str, declared: str) -> str:
    """The canonical spelling of a declared `type:` (as DuckDB's DESCRIBE writes it)."""
    text = " ".join(declared.split()).upper()
    m = DECIMAL.match(text)
    if m and kind == "float":
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise ValueError(f"`type: {declared}` needs 1 <= precision <= 38 and "
                             "0 <= scale <= precision")
        return f"DECIMAL({precision},{scale})"
    if text not in SQL_TYPES[kind]:
        allowed = ", ".join(SQL_TYPES[kind]) + (", DECIMAL(p,s)" if kind == "float" else "")
        raise ValueError(f"`type: {declared}` is not a type for kind {kind} "
                         f"(one of {allowed})")
    return text


class RegistryError(ValueError):
    """datasets.yaml is malformed; the message names the dataset and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# the most values a `categories: {from: ...}` list may hold: each is a code of the column, and
# the 2-way marginals a method measures grow with it (a domain this large is better binned or
# left out)
MAX_PUBLIC_CATEGORIES = 10_000
# `from: schema.table.column` (a catalog before the schema too): a table and a column
QUALIFIED_COLUMN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*\.){1,3}[A-Za-z_][A-Za-z0-9_]*$")


def asset_key(v):
    """A Dagster asset key as written in a registry (a list of strings, or one string with `/`
    between the parts), as a tuple; None stays None."""
    if v is None:
        return v
    parts = tuple(v.split("/")) if isinstance(v, str) else tuple(v)
    if not parts or any(not p.strip() for p in parts):
        raise ValueError(f"asset {v!r} is not an asset key: a list of non-empty strings "
                         "like [analytics, customers], or analytics/customers")
    return parts


def same_table(a: str, b: str) -> bool:
    """Whether two qualified table names of the warehouse name one table: compared without
    case, a name without a schema being in DuckDB's default schema `main` (a catalog part is
    dropped: the warehouse is one database)."""
    def parts(name: str) -> tuple[str, str]:
        names = [p.lower() for p in name.split(".")]
        return ("main" if len(names) == 1 else names[-2], names[-1])
    return parts(a) == parts(b)


class PublicColumn(_Strict):
    """A column of a PUBLIC table of the warehouse (a dimension table: zones, products,
    countries) whose values are a categorical column's complete list: `table` (schema.table),
    `column` (any name), and `asset`, the key of the host's Dagster asset that writes the table
    (a list of strings or `a/b`), when a host asset does: the dataset's `preprocessed` stage
    then depends on it, as on a `source.asset`."""

    # the public table, schema.table
    table: str
    # its column holding the list, one row per value
    column: str = Field(min_length=1)
    # the host asset that writes the table (lineage: `preprocessed` depends on it)
    asset: tuple[str, ...] | str | None = None

    @field_validator("table")
    @classmethod
    def _qualified(cls, v: str) -> str:
        if not QUALIFIED_TABLE.match(v):
            raise ValueError(f"{v!r} is not a table name like schema.table")
        return v

    @field_validator("asset")
    @classmethod
    def _asset_key(cls, v):
        return asset_key(v)

    @property
    def name(self) -> str:
        """`table.column`, as a message or the plan names it."""
        return f"{self.table}.{self.column}"


class CategoriesFrom(_Strict):
    """`categories: {from: ...}`: the complete list of a categorical column, read from a public
    table of the warehouse when the `preprocessed` stage runs, before anything is charged, and
    used exactly as a declared `categories:` list (no budget; the plan records where it came
    from). `from` is `schema.table.column`, or a mapping {table, column, asset} (`PublicColumn`)
    when the column's name is not a plain identifier or a host asset writes the table. The
    table must be public, never a table of private data: one naming this dataset's or another
    dataset's source table, or in the `private` or `synthetic` schema, is refused when the
    registry loads. Refused when the stage reads it (naming the problem and the fix, spending
    nothing): a missing table or column, no values, NULLs, duplicates, more than
    MAX_PUBLIC_CATEGORIES (10,000) values."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    # `schema.table.column`, or {table, column, asset} (PublicColumn)
    from_: PublicColumn | str = Field(alias="from")

    @field_validator("from_")
    @classmethod
    def _column(cls, v):
        if isinstance(v, str):
            if not QUALIFIED_COLUMN.match(v):
                raise ValueError(f"`from: {v}` is not a column like schema.table.column (write "
                                 "{table: schema.table, column: <name>} for a name that is not "
                                 "a plain identifier)")
            table, column = v.rsplit(".", 1)
            v = PublicColumn(table=table, column=column)
        parts = v.table.split(".")
        if len(parts) > 1 and parts[-2].lower() in DP_SYNTH_SCHEMAS:
            raise ValueError(f"`from` table {v.table!r} is in schema {parts[-2]!r}, which holds "
                             "dp-synth's private working tables and synthetic tables: name a "
                             "public dimension table")
        return v

    @property
    def public(self) -> PublicColumn:
        """The public column the list is read from."""
        assert isinstance(self.from_, PublicColumn)
        return self.from_


class ColumnSpec(_Strict):
    """A column's declared kind and public domain, and how `preprocessed` encodes it.

    categorical: `categories` lists the kept values; anything else in the source maps to the
    `other` code, decoded as `other_label`; `categories: {from: schema.table.column}` reads the
    list from a public table of the warehouse instead (`CategoriesFrom`: no budget, the same
    afterwards as a written list); `other: false` declares the list exhaustive (no other
    code; a value outside it takes the column's fallback code, below). Without `categories`, the
    kept values are discovered
    with a thresholded Gaussian histogram (DP, approximate zCDP). `rare` merges categories whose
    noisy count is small into one rare code: `merge` (benchmark Algorithm 1, threshold
    max(theta * noisy_total, 3 sigma); the default when categories are discovered), `filter_combine`
    (PrivSyn's rule) or `none` (the default for declared categories).
    integer / float / datetime: `bounds` [low, high] (dates as ISO strings); without them, DP
    bounds from noisy histograms over public buckets (datetimes: years, then months, days and
    hours as the noisy counts allow; a DATE stops at whole days). `binning: uniform` cuts the
    bounds into `bins` equal bins (no budget); `binning: quantile` cuts the DP bounds into
    `bins` bins of about equal mass, at the cumulative noisy counts of the bounds' histogram (no
    extra budget); `binning: privtree` finds adaptive bins with PrivTree (DP). Without
    `binning`: quantile when the bounds are learned, uniform when declared. `bins` defaults to
    QUANTILE_BINS for quantile bins, DEFAULT_BINS for uniform ones. Values outside the bounds
    are clamped into the first or last bin.
    boolean: two codes. `nullable` adds a code for NULL; unset, it is true exactly when the domain
    is discovered (no `categories` / no `bounds`) or `missing` markers are given. `missing` lists
    source values read as NULL (e.g. "?", "").
    A value the column cannot represent never fails a run (whether a run succeeds must not
    depend on one row): NULL, a `missing` marker, NaN or a value that does not cast to the kind,
    in a column that is not nullable, and a value outside an exhaustive category list, take the
    column's fallback code: the code of `fallback` when declared (a listed category or the
    `other_label`, a boolean, or a value of a binned column, which bins as any value), else the
    NULL code when the column is nullable, else the other code when it has one, else code 0 (the
    first category, false, the first bin). The rule reads the spec only; how many values took
    it goes to the dataset's private log.
    `type` is the column's SQL type in the synthetic table (`sql_type`), from the declaration only:
    by default BIGINT, DOUBLE, BOOLEAN, TIMESTAMP and VARCHAR for integer, float, boolean,
    datetime and categorical; `SQL_TYPES` lists what each kind may declare instead. A DATE
    column bins whole days. Bounds must fit the type; an integer-typed categorical column needs
    integer categories, and an integer `other_label` unless it is nullable (the other code then
    decodes to NULL) or has no other code.
    """

    kind: Literal["categorical", "integer", "float", "datetime", "boolean"]
    categories: list[str | int | bool] | CategoriesFrom | None = None
    # discovered categories: about how many distinct values the column holds (public: a
    # catalogue's size, the dimension's row count); the column's discovery then gets a larger
    # share of the preprocessing budget (`preprocess.discovery_weight`)
    expected_categories: int | None = Field(default=None, ge=1, le=1_000_000)
    rare: Literal["none", "merge", "filter_combine"] | None = None
    theta: float = Field(default=0.002, ge=0, lt=1)
    other_label: str = "other"
    other: bool = True
    bounds: tuple[float | int | date | datetime | str, float | int | date | datetime | str] | None = None
    binning: Literal["uniform", "quantile", "privtree"] | None = None
    bins: int | None = Field(default=None, ge=1, le=4096)
    nullable: bool | None = None
    missing: list[str] = []
    type: str | None = None
    fallback: bool | int | float | date | datetime | str | None = None

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str | None, info) -> str | None:
        kind = info.data.get("kind")
        return _normalized_type(kind, v) if v is not None and kind is not None else v

    @model_validator(mode="after")
    def _domain_matches_kind(self) -> "ColumnSpec":
        if self.kind == "categorical":
            listed = self.category_list
            if listed is not None and not listed:
                raise ValueError("`categories` is empty: list the values, or leave it out to "
                                 "discover them with DP")
            if listed and len(set(map(str, listed))) != len(listed):
                raise ValueError("`categories` has duplicates")
            if self.bounds is not None or self.bins is not None or self.binning is not None:
                raise ValueError("`bounds`/`bins`/`binning` do not apply to a categorical column")
            if self.expected_categories is not None and self.categories is not None:
                raise ValueError("`expected_categories` sizes the budget of a discovery: it "
                                 "applies to a column without `categories`")
            if not self.other and self.categories is None:
                raise ValueError("`other: false` needs a declared `categories` list (the "
                                 "exhaustive domain); discovered categories need the other code")
            if self.other and listed and self.other_label in map(str, listed):
                raise ValueError(
                    f"category {self.other_label!r} is also the label of the other code (the "
                    f"values outside `categories`), so the two would be one value in the "
                    f"synthetic table: set `other_label` to a label that is not a category, or "
                    f"`other: false` if the list is exhaustive")
        elif not self.other:
            raise ValueError("`other` applies to categorical columns only")
        if self.kind == "boolean":
            if any(v is not None for v in (self.categories, self.bounds, self.bins, self.binning,
                                           self.rare, self.expected_categories)):
                raise ValueError("a boolean column takes no `categories`, `rare`, `bounds`, "
                                 "`bins`, `binning` or `expected_categories`")
        elif self.kind != "categorical":
            if self.categories is not None or self.rare is not None:
                raise ValueError(f"`categories`/`rare` do not apply to a {self.kind} column")
            if self.expected_categories is not None:
                raise ValueError(f"`expected_categories` does not apply to a {self.kind} column")
            if self.binning == "privtree" and self.bins is not None:
                raise ValueError("`bins` does not apply to `binning: privtree` (it finds its own)")
            if self.binning == "quantile" and self.bounds is not None:
                raise ValueError("`binning: quantile` cuts the DP bounds' histogram: leave "
                                 "`bounds` out, or use `binning: uniform`")
            if self.bounds is not None:
                low, high = self.numeric_bounds()
                if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
                    raise ValueError(f"`bounds` must be finite with low < high, got {list(self.bounds)}")
                if not high - low <= MAX_BOUNDS_SPAN:
                    raise ValueError(
                        f"`bounds` {list(self.bounds)} are too far apart: high - low must be at "
                        f"most {MAX_BOUNDS_SPAN:g} (the bins' arithmetic overflows a float "
                        f"beyond it); declare bounds that fit the column's real range, or leave "
                        f"`bounds` out to learn them with DP")
        if self.nullable is False and self.missing:
            raise ValueError("`missing` markers become NULLs, so the column must be nullable")
        self._values_fit_type()
        if self.fallback is not None:
            self._fallback_fits()
        return self

    def _fallback_fits(self) -> None:
        """A declared `fallback` is a value the column can take, and some value can need it."""
        exhaustive = self.kind == "categorical" and not self.other
        if self.is_nullable and not exhaustive:
            raise ValueError("`fallback` is for values a column cannot represent, and a nullable "
                             "column reads them as NULL: drop `fallback`, or set "
                             "`nullable: false`")
        value = self.fallback
        if self.kind == "categorical":
            labels = [sql_text(c) for c in self.category_list or ()]
            if self.other:
                labels.append(self.other_label)
            # a list read `from` a public table is checked when it is read
            if sql_text(value) not in labels and self.categories_from is None:
                raise ValueError(f"`fallback` {value!r} is not one of `categories`"
                                 + (" or the `other_label`" if self.other else "")
                                 + ": name the value a row outside the list should read as")
        elif self.kind == "boolean":
            if not isinstance(value, bool):
                raise ValueError(f"`fallback` of a boolean column is true or false, got {value!r}")
        elif self.kind == "datetime":
            if isinstance(value, bool) or not isinstance(value, (date, datetime, str)):
                raise ValueError(f"`fallback` of a datetime column is an ISO date, got {value!r}")
            _as_days(value)
        elif (isinstance(value, bool) or not isinstance(value, (int, float))
              or not math.isfinite(value)):
            raise ValueError(f"`fallback` of a {self.kind} column is a finite number, got "
                             f"{value!r}")

    def fallback_value(self) -> float | None:
        """A binned column's declared `fallback` as a number (days for datetimes), else None."""
        if self.fallback is None or self.kind not in ("integer", "float", "datetime"):
            return None
        return _as_days(self.fallback) if self.kind == "datetime" else float(self.fallback)

    def _values_fit_type(self) -> None:
        """Declared bounds and categories are values of the declared SQL type."""
        span = sql_type_range(self.sql_type)
        if self.kind == "categorical" and span is not None:
            def as_int(value):
                if isinstance(value, bool) or not INTEGER_TEXT.match(str(value)):
                    return None
                return int(value)
            if any(as_int(c) is None or not span[0] <= as_int(c) <= span[1]
                   for c in self.category_list or ()):
                raise ValueError(f"`categories` of a {self.sql_type} column must be integers "
                                 f"in [{span[0]}, {span[1]}]")
            if self.other and not self.is_nullable and as_int(self.other_label) is None:
                raise ValueError(f"`other_label` of a {self.sql_type} categorical column must be "
                                 f"an integer (got {self.other_label!r}), or make the column "
                                 "nullable so the other code decodes to NULL")
        elif self.bounds is not None and span is not None:
            low, high = self.numeric_bounds()
            if low < span[0] or high > span[1]:
                raise ValueError(f"`bounds` {list(self.bounds)} do not fit the column's type "
                                 f"{self.sql_type} ([{span[0]:.6g}, {span[1]:.6g}])")

    @property
    def sql_type(self) -> str:
        """The column's SQL type: `type`, or its kind's default (never the source's)."""
        return self.type or DEFAULT_SQL_TYPE[self.kind]

    @property
    def category_list(self) -> list | None:
        """The categories written in the spec (None: discovered, or read `from` a table)."""
        return self.categories if isinstance(self.categories, list) else None

    @property
    def categories_from(self) -> PublicColumn | None:
        """The public column a `categories: {from: ...}` list is read from, else None."""
        return self.categories.public if isinstance(self.categories, CategoriesFrom) else None

    @property
    def discovered(self) -> bool:
        """Whether the domain comes from the data through a DP mechanism."""
        return (self.kind == "categorical" and self.categories is None) or (
            self.kind in ("integer", "float", "datetime") and self.bounds is None)

    @property
    def is_nullable(self) -> bool:
        return self.nullable if self.nullable is not None else (self.discovered or bool(self.missing))

    @property
    def rare_rule(self) -> str:
        if self.kind != "categorical":
            return "none"
        return self.rare or ("merge" if self.categories is None else "none")

    @property
    def binning_rule(self) -> str:
        """`binning`, else `quantile` for a binned kind with learned bounds, else `uniform`."""
        if self.binning is not None:
            return self.binning
        learned = self.bounds is None and self.kind in ("integer", "float", "datetime")
        return "quantile" if learned else "uniform"

    def numeric_bounds(self) -> tuple[float, float]:
        """Declared bounds as numbers: datetimes as days since 1970-01-01 (fractional for
        timestamps)."""
        assert self.bounds is not None
        if self.kind == "datetime":
            return tuple(_as_days(b) for b in self.bounds)  # type: ignore[return-value]
        try:
            return float(self.bounds[0]), float(self.bounds[1])
        except (TypeError, ValueError) as e:
            raise ValueError(f"`bounds` of a {self.kind} column must be numbers") from e


def _as_days(value: object) -> float:
    if isinstance(value, datetime):
        return (value - datetime(1970, 1, 1)).total_seconds() / 86400.0
    if isinstance(value, date):
        return float((value - date(1970, 1, 1)).days)
    if isinstance(value, str):
        try:
            return _as_days(datetime.fromisoformat(value))
        except ValueError as e:
            raise ValueError(f"datetime bound {value!r} is not an ISO date") from e
    raise ValueError(f"datetime bound {value!r} is not a date")


class _SourceBase(_Strict):
    """`asset`: the asset key of the host's Dagster asset that writes this source (a list of
    strings, or one string with `/` between the parts, as Dagster spells keys), when the source
    is a host's asset rather than an external table: dp-synth's first stage then depends on that
    asset, and no `source` asset of dp-synth observes the table. The rest of the entry says where
    the asset's data is read (a table, a Parquet or CSV file, an attached database's table)."""

    # (a string is split at `/`: after validation, always a tuple)
    asset: tuple[str, ...] | str | None = None
    # the asset is defined in another code location: the load-time check that `asset` is a key of
    # the definitions dp-synth joins (`unknown_source_assets`) skips this source
    asset_elsewhere: bool = False

    @model_validator(mode="after")
    def _elsewhere_needs_asset(self):
        if self.asset_elsewhere and self.asset is None:
            raise ValueError("`asset_elsewhere` applies to a source with `asset:`")
        return self

    @field_validator("asset")
    @classmethod
    def _asset_key(cls, v):
        if v is None:
            return v
        parts = tuple(v.split("/")) if isinstance(v, str) else v
        if not parts or any(not p.strip() for p in parts):
            raise ValueError(f"asset {v!r} is not an asset key: a list of non-empty strings "
                             "like [analytics, customers], or analytics/customers")
        return tuple(parts)


# schemas of the warehouse that dp-synth writes (its private working tables, the synthetic
# tables): a source table there could be replaced by a dataset's own objects
DP_SYNTH_SCHEMAS = ("private", "synthetic")


class TableSource(_SourceBase):
    table: str

    @field_validator("table")
    @classmethod
    def _qualified(cls, v: str) -> str:
        if not QUALIFIED_TABLE.match(v):
            raise ValueError(f"{v!r} is not a table name like schema.table")
        parts = v.split(".")
        if len(parts) > 1 and parts[-2].lower() in DP_SYNTH_SCHEMAS:
            raise ValueError(f"{v!r} is in schema {parts[-2]!r}, which dp-synth writes (its "
                             f"working tables and synthetic tables live in "
                             f"{' and '.join(DP_SYNTH_SCHEMAS)}): keep source tables in another "
                             f"schema, e.g. main")
        return v


_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(location: str) -> bool:
    """A location with a scheme (`s3a://bucket/events/*.parquet`, `abfss://...`, `gs://...`):
    the scan engine reads it as written; it is never resolved against a folder, globbed or
    stat-ed here (core/source.py)."""
    return _URI.match(location) is not None


class ParquetSource(_SourceBase):
    """Parquet files: a path or glob, relative to the registry's folder, or a URI the scan
    engine reads itself (Spark's `s3a://`, `abfss://`, `gs://`; DuckDB's `s3://` through its
    httpfs extension): a URI's change signal is the engine's content summary of the files'
    rows, not their names, sizes and modification times."""

    parquet: str


class CsvSource(_SourceBase):
    """A CSV file (or glob) read with the dialect declared here, nothing sniffed from the data:
    every column is read as text and the declared kinds set the types (through the encodings'
    TRY_CAST). `header`: the first line holds the column names (read as schema); `columns`: the
    names in file order, required without a header and overriding it otherwise. `null`: the field
    values read as NULL (at least one; by default the empty field). `escape`: the character escaping
    a quote inside a quoted field (default: the quote itself, doubled)."""

    csv: str
    header: bool = True
    delimiter: str = Field(default=",", min_length=1, max_length=1)
    quote: str = Field(default='"', min_length=1, max_length=1)
    escape: str | None = Field(default=None, min_length=1, max_length=1)
    null: list[str] = Field(default=[""], min_length=1)
    columns: list[str] | None = None

    @model_validator(mode="after")
    def _dialect(self) -> "CsvSource":
        if is_uri(self.csv):
            raise ValueError("a `csv:` source is a local file or glob (its header is read "
                             "here); for files in object storage use Parquet or a table of "
                             "the scan engine")
        if len({self.delimiter, self.quote}) < 2 or "\n" in self.delimiter + self.quote:
            raise ValueError("`delimiter` and `quote` must be two different characters, "
                             "neither a newline")
        if not self.header and self.columns is None:
            raise ValueError("a CSV without a header needs `columns:` (the names in file order)")
        if self.columns is not None:
            if not self.columns or any(not c.strip() or "\x00" in c for c in self.columns):
                raise ValueError("`columns` must list non-empty names")
            if len(set(self.columns)) != len(self.columns):
                raise ValueError("`columns` has duplicates")
            for group in same_identifier(self.columns):
                raise ValueError(f"`columns` names {' and '.join(map(repr, group))}, which "
                                 f"differ only in case: DuckDB (like SQL) reads them as one "
                                 f"name; rename one")
        return self


class AttachSource(_SourceBase):
    """A table of another database, read where it lives through DuckDB's ATTACH: `attach` is
    what ATTACH takes (a libpq connection string for postgres, `host=... database=...` for
    mysql, a file path for duckdb and sqlite, relative to datasets.yaml), `type` DuckDB's
    database type (duckdb is built in; postgres, mysql and sqlite are DuckDB extensions), and
    `table` the table inside it (`schema.table`). The database is attached READ_ONLY."""

    attach: str
    type: Literal["duckdb", "postgres", "mysql", "sqlite"] = "duckdb"
    table: str

    @field_validator("table")
    @classmethod
    def _qualified(cls, v: str) -> str:
        if not QUALIFIED_TABLE.match(v) or v.count(".") > 1:
            raise ValueError(f"{v!r} is not a table name like schema.table")
        return v


Source = Union[TableSource, ParquetSource, CsvSource, AttachSource]


class EngineSpec(_Strict):
    """Where the private scans run (core/scans.py): `type` names a scan engine of
    `scan_engines.SCAN_ENGINES` (`duckdb`, the default: the warehouse's DuckDB reads the source;
    `postgres`; `spark`); `schema` is the engine's working schema, where a PostgreSQL engine
    creates the encoded view. The block's other keys are the engine's own settings, declared
    and checked by its settings model beside its connector (`infra/engines/<engine>.py`, a
    subclass of this one), which `engine_settings` finds through the registry: after
    validation a dataset's `engine` is an instance of it."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    type: str = "duckdb"
    # `schema:` in datasets.yaml (a field named `schema` would shadow pydantic's)
    schema_: str = Field(default="dp_synth", alias="schema", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


def engine_settings(value) -> EngineSpec:
    """The `engine:` block (a name, a mapping or an EngineSpec) validated by its engine's own
    settings model (`scan_engines.SCAN_ENGINES`). A key that another registered engine declares
    is refused naming that engine (its `OWNED`, after this engine's `READS` when it has one)."""
    data = {"type": value} if isinstance(value, str) else (
        value.model_dump(by_alias=True, exclude_unset=True) if isinstance(value, BaseModel)
        else dict(value))
    return validate_plugin_settings(SCAN_ENGINES, data.get("type", "duckdb"), SCAN_PACKAGE,
                                    "scan engine", data)


class Limit(_Strict):
    """The lifetime (epsilon, delta) a privacy unit may spend over all its runs; the ledger
    keeps the limit a unit was first given until an explicit ledger command changes it."""

    epsilon: Epsilon = Field(gt=0, allow_inf_nan=False)
    delta: Number = Field(gt=0, lt=1, allow_inf_nan=False)


class Privacy(_Strict):
    """The budget of one synthesis run and the lifetime limit, both as (epsilon, delta).

    The limit belongs to the dataset's privacy unit (dp_synth_assets.core.units): its source, or
    `budget_group`, a name several entries share to spend one budget (required when they read the
    same source; they must then declare the same limit).
    """

    epsilon: Epsilon = Field(gt=0, allow_inf_nan=False)
    delta: Number = Field(gt=0, lt=1, allow_inf_nan=False)
    limit: Limit
    budget_group: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

    @model_validator(mode="after")
    def _run_within_limit(self) -> "Privacy":
        if self.epsilon > self.limit.epsilon:
            raise ValueError(
                f"run epsilon {self.epsilon} is above the dataset's limit epsilon "
                f"{self.limit.epsilon}; lower privacy.epsilon or raise privacy.limit.epsilon"
            )
        if self.delta > self.limit.delta:
            raise ValueError(
                f"run delta {self.delta} is above the limit delta {self.limit.delta}; "
                "lower privacy.delta or raise privacy.limit.delta"
            )
        return self


class SelectionSettings(_Strict):
    """Settings of the selection stage every method reads (see dp_synth_assets.core.select).
    The `selection:` block's other keys are the method's own (`marginals` of manual, `workload`
    of aim), declared and checked by its settings model beside it (`Settings` of its module, a
    subclass of this one), which `method_settings` finds through `methods.METHODS`: after
    validation a dataset's `selection` is an instance of it."""

    model_config = ConfigDict(extra="allow", frozen=True)
    # rho shares of the run's budget: noisy 1-way marginals, selection mechanisms (scores,
    # exponential mechanism), and the rest for measured marginals; unset: the method's default.
    one_way_share: float | None = Field(default=None, gt=0, lt=1)
    score_share: float | None = Field(default=None, gt=0, lt=1)
    # the greedy refuses a pair whose junction tree would exceed this many MB (float64 cells).
    max_model_mb: float = Field(default=4.0, gt=0)
    # adaptive methods (aim): the most rounds, each a model refit (unset: the method's default)
    max_rounds: int | None = Field(default=None, ge=1, le=10_000)


class SharedSelection(SelectionSettings):
    """The settings of a method with no key of its own: the shared keys only."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def method_settings(method: str, selection: SelectionSettings,
                    columns: Mapping | None = None) -> SelectionSettings:
    """The `selection:` block validated by `method`'s own settings model (`methods.METHODS`),
    whose rules read the dataset's `columns` (validation context). A key that another
    registered method declares is refused naming that method (its `OWNED`)."""
    data = selection.model_dump(exclude_unset=True)
    return validate_plugin_settings(METHODS, method, SELECT_PACKAGE, "selection method", data,
                                    {"columns": dict(columns or {}), "method": method})


class ModelSettings(_Strict):
    """Settings of the generation stage (see dp_synth_assets.core.generate)."""

    # pgm and parallel_pgm: iterations of each fit (unset: the estimator's own, pgm.iterations:
    # 250 accelerated steps of the numpy fit, 1500 mirror-descent steps of mbi's)
    iterations: int | None = Field(default=None, ge=1, le=100_000)
    # guard (pgm, parallel_pgm): refuse a junction-tree clique with more cells than this.
    max_clique_cells: int = Field(default=2_000_000, ge=1)
    # generator auto: the estimated peak memory and fitting time the stage may use
    max_memory_mb: float = Field(default=4096.0, gt=0)
    max_seconds: float = Field(default=900.0, gt=0)
    # parallel_pgm: units of work, each a step of the model graph (unset: one per core)
    workers: int | None = Field(default=None, ge=1, le=1024)
    # how the dataset's job runs its steps: `multiprocess` (Dagster's multiprocess executor:
    # each step in its own process, `workers` at a time, so a step's memory is returned when
    # it ends), `in_process` (one process), or `auto`: multiprocess when the fit has units to
    # run in parallel (generator parallel_pgm, or workers > 1), else in_process
    executor: Literal["auto", "in_process", "multiprocess"] = "auto"
    # gum: update iterations (benchmark paper Table 6: 50)
    gum_iterations: int = Field(default=50, ge=1, le=10_000)
    # synthetic: rows sampled, decoded and written per chunk (memory holds a few chunks, whatever
    # the rows); 250,000: docs/generators.md (sampling)
    chunk_rows: int = Field(default=250_000, ge=1_000, le=100_000_000)


class ReportSettings(_Strict):
    """The owner-only utility report (`utility_report`, private zone); off without this block."""

    # share of source rows held out from synthesis (never seen by any mechanism) to test the
    # ML-efficiency classifiers on; 0 = no holdout, no ML efficiency
    holdout: float = Field(default=0.0, ge=0.0, le=0.5)
    # the column the classifiers predict (needs holdout > 0)
    target: str | None = None
    # 3-way query error over this many fixed random triples (benchmark paper section 8.3)
    triples: int = Field(default=200, ge=1, le=10_000)
    # the report reads at most this many rows of each of source, holdout and synthetic
    max_rows: int = Field(default=50_000, ge=100, le=10_000_000)


DurationText = Annotated[str, Field(pattern=r"^\d+(\.\d+)?\s*(s|m|h|d)$")]


class ParentSpec(_Strict):
    """A child dataset's relation to its parent dataset (docs/relational.md): the parent's
    dataset name, the child's `foreign_key` column, the parent's `key` column, and the public
    bound `max_children` on the children kept per parent. The key columns are named only here,
    never under `columns:` (`core.relational.relation_problems` checks the rules across entries)."""

    # the parent dataset: an entry of the same file
    dataset: str
    # the child's column that holds its parent's key (never under `columns:`)
    foreign_key: str
    # the parent's key column, unique (never under `columns:`)
    key: str
    # the public bound on the children kept per parent; child-side noise grows with it
    max_children: Annotated[int, Field(strict=True, ge=1, le=10_000)]


class DatasetSpec(_Strict):
    """One registered source table: its source, its columns, its privacy budget, and how it is
    selected, generated, scheduled and checked."""

    source: Source
    columns: Annotated[dict[str, ColumnSpec], BeforeValidator(text_keys("column"))]
    privacy: Privacy
    # default: auto, absyn or MST by public facts (select/auto.py; measured by bench/suite.py)
    method: str = "auto"  # a key of core.methods.METHODS (checked below)
    generator: str = "auto"  # a key of core.engines.ENGINES or auto (checked below)
    # where the private scans run (core/scans.py): a scan engine's name (duckdb, postgres,
    # spark) or its block {type: ..., ...}; after validation, always the engine's own settings
    # (`engine_settings`, a subclass of EngineSpec)
    engine: Annotated[str | EngineSpec, AfterValidator(engine_settings)] = Field(
        default="duckdb", validate_default=True)
    rows: Literal["same"] | Annotated[int, Field(ge=1, le=1_000_000_000)] = "same"
    seed: Annotated[int, BeforeValidator(_integer), Field(ge=0, lt=2 ** 63)] | None = None
    # declared, public: what every synthetic row satisfies (core/constraints.py), e.g.
    # ["dropoff >= pickup"]; honoured when rows are decoded, counted by the constraints check;
    # an order between two timestamps also has its gap measured in preprocessing
    constraints: list[str] = []
    schedule: str | None = None
    on_source_change: Literal["resynthesize", "ignore"] = "ignore"
    min_interval: DurationText = "1h"
    # after validation, the method's own settings (`_method_settings`)
    selection: SelectionSettings = Field(default_factory=SelectionSettings, validate_default=True)
    model: ModelSettings = ModelSettings()
    report: ReportSettings | None = None
    # a child dataset's relation to its parent (docs/relational.md)
    parent: ParentSpec | None = None
    description: str | None = None
    # optional: a file source that may be absent (e.g. shared benchmark data); the dataset is
    # skipped, with a message, when its file is missing
    optional: bool = False
    # where the entry is written (`entry_location`), set by `parse_registry` from its origin
    _entry: str = PrivateAttr(default=UNKNOWN_ENTRY)

    @property
    def entry(self) -> str:
        """Where this entry is written, for a message that asks the user to edit it: `dataset
        'x' in <datasets.yaml>`, `` `attributes.datasets.x` in <defs.yaml> `` (`entry_location`),
        or `UNKNOWN_ENTRY` for a spec no registry parsed."""
        return self._entry

    @field_validator("columns")
    @classmethod
    def _column_names(cls, v: dict[str, ColumnSpec]) -> dict[str, ColumnSpec]:
        if len(v) < 2:
            raise ValueError("declare at least two columns")
        for name in v:  # identifiers are always quoted in SQL, so any non-empty name works
            if not name.strip() or "\x00" in name:
                raise ValueError(f"column name {name!r} is empty or has a NUL character")
        for group in same_identifier(v):
            raise ValueError(f"columns {' and '.join(map(repr, group))} differ only in case, "
                             f"which DuckDB (like SQL) reads as one name, quoted or not: the "
                             f"source and the synthetic table cannot hold both; rename one")
        return v

    @field_validator("method")
    @classmethod
    def _registered_method(cls, v: str) -> str:
        require_registered(METHODS, v, "selection method")
        return v

    @field_validator("generator")
    @classmethod
    def _registered_generator(cls, v: str) -> str:
        if v != "auto":
            require_registered(ENGINES, v, "generator", " or auto")
        return v

    @field_validator("selection")
    @classmethod
    def _method_settings(cls, v: SelectionSettings, info) -> SelectionSettings:
        if "method" not in info.data:  # an unregistered method: refused already
            return v
        return method_settings(info.data["method"], v, info.data.get("columns"))

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        if v is not None and len(v.split()) != 5:
            raise ValueError(f"schedule {v!r} is not a five-field cron expression")
        return v

    @model_validator(mode="after")
    def _cross_field_rules(self) -> "DatasetSpec":
        """The rules that read more than one key of an entry: `report.target` is a declared column
        and has held-out rows; a scan engine other than duckdb reads a table (spark: or a Parquet
        file) and no owner report; `selection.marginals` only with method manual (which needs it,
        without `score_share`, naming declared columns); `selection.workload` only with method aim,
        naming declared columns; the one-way and score shares (set or the method's defaults) sum
        below 1; `rows: same` only at a budget whose noisy row count is meaningful
        (`MAX_TOTAL_SD`)."""
        method = METHODS[self.method]
        if self.report is not None and self.report.target is not None:
            if self.report.target not in self.columns:
                raise ValueError(f"report.target {self.report.target!r} is not a declared column "
                                 f"({sorted(self.columns)})")
            if self.report.holdout <= 0:
                raise ValueError("report.target needs held-out rows to test on: set "
                                 "report.holdout (e.g. 0.2)")
        refuse = getattr(plugin_module(SCAN_ENGINES, self.engine.type, SCAN_PACKAGE,
                                        "scan engine"), "refusal", None)
        problem = refuse(self.engine, self.source, self.report) if refuse else None
        if problem:
            raise ValueError(problem)
        shares = ((self.selection.one_way_share or method.one_way_share)
                  + (self.selection.score_share or method.score_share))
        if shares >= 1:
            raise ValueError(f"selection.one_way_share + selection.score_share must be below 1 "
                             f"(with {self.method}'s defaults for unset shares: {shares:.3g})")
        if self.rows == "same":
            sd = noisy_total_sd_bound(self.privacy.epsilon, self.privacy.delta)
            if sd > MAX_TOTAL_SD:
                raise ValueError(
                    f"privacy.epsilon {self.privacy.epsilon:g} is too small for `rows: same`: the "
                    f"noisy row count it can measure has a standard deviation of at least "
                    f"{sd:.3g} rows (above {MAX_TOTAL_SD:.0f}); raise privacy.epsilon or declare "
                    "the number of rows (`rows: 10000`)")
        return self

    @model_validator(mode="after")
    def _declared_constraints(self) -> "DatasetSpec":
        """Every `constraints` entry parses and fits the declared columns
        (`constraints.validate`)."""
        validate_constraints(self.constraints, self.columns)
        return self

    @property
    def declared_constraints(self) -> tuple:
        """The `constraints`, parsed (`constraints.Constraint`, in order)."""
        return validate_constraints(self.constraints, self.columns)

    @model_validator(mode="after")
    def _public_lists(self) -> "DatasetSpec":
        """A `categories: {from: ...}` never reads the dataset's own source table: its values
        are private, and the list would publish them (every value, even one a single row
        holds) in the plan."""
        if isinstance(self.source, TableSource):
            for name, column in self.columns.items():
                public = column.categories_from
                if public is not None and same_table(public.table, self.source.table):
                    raise ValueError(private_list(name, public, "this dataset's source"))
        return self

    @model_validator(mode="after")
    def _extras_installed(self) -> "DatasetSpec":
        """Refuse a feature whose extra is not installed (`extras`), when the definitions load."""
        for feature in self.features():
            problem = refusal(feature)
            if problem:
                raise ValueError(problem)
        return self

    def features(self) -> list[str]:
        """The optional features (`extras.FEATURES`) this dataset uses."""
        feature = SCAN_ENGINES[self.engine.type].feature
        used = [feature] if feature is not None else []
        return used + (["report"] if self.report is not None else [])

    @property
    def min_interval_seconds(self) -> float:
        number, unit = re.match(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$", self.min_interval).groups()
        return float(number) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


def plan_digest(spec: DatasetSpec) -> str:
    """The digest of what a dataset's encoding plan and encoded view are made from: the first
    16 hex digits of the SHA-256 of a canonical JSON of the parts of `spec` that decide them.
    The `preprocessed` stage records it in the plan (`EncodingPlan.spec_digest`) and every later
    stage refuses a plan whose digest is not the loaded spec's (`store.StalePlan`), so no stage
    publishes a table that contradicts the spec. A function of the spec alone, never of the
    data: public.

    What counts:
    - `columns`, in their order, every key of each (`type`, `nullable`, `rare` and `binning`
      as the defaults resolve them, bounds as numbers, other keys only where they differ from
      their defaults, so writing a default out changes nothing, nor does a later version's new
      key left at its default): they set the plan's names, kinds, SQL types and declared
      domains, and how its learned parts are learned;
    - `source` (where the rows are read, the CSV dialect), without `asset` and
      `asset_elsewhere` (the lineage, not the rows), and without the connection string of a
      postgres or mysql `attach:` (it may hold a password and this digest is public; a file
      database's path counts): the encoded view, and hence the counted marginals, read it;
    - `engine`: its type and `schema` (where the encoded view lives), not its connection
      settings (`dsn`, `conf`, `master`, `remote`, which may hold secrets);
    - `report.holdout`: the held-out rows are left out of the view.
    What does not: `privacy` (the plan's learned parts were charged when they were drawn; an
    old plan is a public release reused at no cost, and every later stage spends under the
    loaded `privacy`), `method`, `selection`, `generator`, `model`, `rows`, `seed` (the later
    stages read them from the loaded spec each run), automation (`schedule`,
    `on_source_change`, `min_interval`), `description`, `optional` and the rest of `report`;
    nor `constraints` (honoured when rows are decoded; the gap an order between two timestamps
    adds to the plan is a refinement: a plan made without it decodes as before, and the next
    `preprocessed` run measures it). The rule is conservative: any change of a column's
    declaration counts, even one that happens to give the same plan."""
    def column(c: ColumnSpec) -> dict:
        data = c.model_dump(mode="json", exclude_defaults=True)
        data.update(type=c.sql_type, nullable=c.is_nullable, rare=c.rare_rule,
                    binning=c.binning_rule,
                    bounds=list(c.numeric_bounds()) if c.bounds is not None else None)
        return data

    source = spec.source.model_dump(mode="json", exclude_defaults=True,
                                    exclude={"asset", "asset_elsewhere"})
    if isinstance(spec.source, AttachSource) and spec.source.type in ("postgres", "mysql"):
        source.pop("attach", None)
    parts = {
        "columns": [[name, column(c)] for name, c in spec.columns.items()],
        "source": {"class": type(spec.source).__name__, **source},
        "engine": {"type": spec.engine.type, "schema": spec.engine.schema_},
        "holdout": spec.report.holdout if spec.report is not None else 0.0,
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def noisy_total_sd_bound(epsilon: float, delta: float) -> float:
    """The least standard deviation of any noisy row count a run of (epsilon, delta) measures:
    sqrt(1 / (2 rho)) with rho the whole run's zCDP budget at `delta` (0008-dataset-registry.md);
    inf when rho rounds to 0."""
    from .privacy import rho_from_epsilon_delta

    rho = rho_from_epsilon_delta(epsilon, delta)
    return math.sqrt(1.0 / (2.0 * rho)) if rho > 0 else math.inf


class Registry(_Strict):
    """A whole datasets.yaml: dataset name -> entry, with the rules across entries."""

    datasets: Annotated[dict[str, DatasetSpec], BeforeValidator(text_keys("dataset"))]

    @field_validator("datasets")
    @classmethod
    def _names(cls, v: dict[str, DatasetSpec]) -> dict[str, DatasetSpec]:
        for name in v:
            if not DATASET_NAME.match(name):
                raise ValueError(f"dataset name {name!r} must match {DATASET_NAME.pattern}")
        sources = {n: s.source.table for n, s in v.items() if isinstance(s.source, TableSource)}
        for dataset, spec in v.items():
            for column, c in spec.columns.items():
                public = c.categories_from
                for other, table in sources.items():
                    if public is not None and other != dataset and same_table(public.table, table):
                        raise ValueError(f"dataset {dataset!r}: "
                                         + private_list(column, public,
                                                        f"the source of dataset {other!r}"))
        return v


def private_list(column: str, public: PublicColumn, whose: str) -> str:
    """The refusal of a `from` that names a private source table."""
    return (f"column {column!r}: `categories: {{from: {public.name}}}` reads {whose} "
            f"({public.table}), whose values are private: the list would publish them in the "
            f"plan. Name a public dimension table (e.g. main.zones.zone), or write the list, or "
            f"leave `categories` out to discover them with DP")


class PublicListError(ValueError):
    """A list read by `categories: {from: ...}` cannot be used; the message names the dataset's
    entry, the column, the public table, the problem and the fix. Nothing is charged."""


def with_public_categories(spec: DatasetSpec, lists: Mapping[str, list]) -> DatasetSpec:
    """`spec` with each `categories: {from: ...}` replaced by the list read from its public
    table (`lists`: column -> the table column's values, in the table's order, read by the
    Dagster layer), validated as a written list would be; afterwards the column is exactly a
    column of declared categories. Pure. Refused (`PublicListError`): a column whose list is
    missing from `lists`, empty, with NULLs or duplicates, longer than MAX_PUBLIC_CATEGORIES,
    or that breaks a rule of `ColumnSpec` (the other label is a value, a value that does not
    fit the declared type, a `fallback` that is not a value). The messages count values and
    never quote one."""
    columns = dict(spec.columns)
    for name, column in spec.columns.items():
        public = column.categories_from
        if public is None:
            continue
        where = (f"{spec.entry}, column {name!r}: the categories read from "
                 f"{public.name}")
        if isinstance(spec.source, TableSource) and same_table(public.table, spec.source.table):
            # the notebook API names its source late (`api.open_source`): checked again here
            raise PublicListError(f"{spec.entry}: " + private_list(name, public, "the source"))
        values = lists.get(name)
        if values is None:
            raise PublicListError(f"{where} were not read")
        problem = list_problem(values)
        if problem is None:
            try:
                columns[name] = ColumnSpec.model_validate(
                    {**column.model_dump(exclude_unset=True), "categories": list(values)})
                continue
            except ValidationError as e:
                problem = "; ".join(err["msg"].removeprefix("Value error, ")
                                    for err in e.errors())
        raise PublicListError(f"{where}: {problem}. Fix the table, or point `from` at the "
                              f"column that holds the complete list (one row per value); "
                              f"nothing was charged")
    return spec.model_copy(update={"columns": columns})


def list_problem(values: list) -> str | None:
    """Why a public table's column is no category list (None: it is one)."""
    if not values:
        return "the column has no values (is the table loaded?)"
    if len(values) > MAX_PUBLIC_CATEGORIES:
        return (f"there are more than {MAX_PUBLIC_CATEGORIES:,} values, the most a list may "
                f"hold (bin the column, or group its values in a coarser column)")
    nulls = sum(v is None for v in values)
    if nulls:
        return f"{nulls} value(s) are NULL (filter them out, e.g. in a view)"
    repeated = len(values) - len(set(map(str, values)))
    if repeated:
        return (f"{repeated} value(s) are repeated: a list names each value once (use the "
                f"table's key column, or a view of its DISTINCT values)")
    return None


def parse_registry(data: object, origin: str = "datasets.yaml") -> dict[str, DatasetSpec]:
    """Validate a parsed datasets.yaml document; errors name the dataset and the key. `origin`:
    the file the user edits (datasets.yaml's path), or a file followed by the key of the
    datasets mapping in it, in parentheses (`<folder>/defs.yaml (attributes.datasets)`); it
    prefixes the errors, and each spec's `entry` names its entry in it (`entry_location`)."""
    if not isinstance(data, dict) or "datasets" not in data:
        raise RegistryError(f"{origin}: expected a top-level `datasets:` mapping")
    try:
        registry = Registry.model_validate(data).datasets
    except ValidationError as e:
        problems: dict[str, list[str]] = {}
        for err in e.errors():
            where = _describe_location([str(p) for p in err["loc"]])
            msg = err["msg"]
            if isinstance(err.get("ctx", {}).get("error"), ConstraintError):
                where, msg = f"{where}, key 'constraints'", str(err["ctx"]["error"])
            problems.setdefault(where, [])
            if msg not in problems[where]:
                problems[where].append(msg)
        lines = [f"{where}: {' or '.join(msgs)}" for where, msgs in problems.items()]
        raise RegistryError(f"{origin} is invalid:\n  " + "\n  ".join(lines)) from None
    specs = {}
    for name, spec in registry.items():
        spec = spec.model_copy()  # a caller's DatasetSpec instance is kept as it was
        spec._entry = entry_location(origin, name)
        specs[name] = spec
    from .relational import relation_problems
    problems = relation_problems(specs)
    if problems:
        raise RegistryError(f"{origin} is invalid:\n  " + "\n  ".join(problems))
    return specs


def entry_location(origin: str, dataset: str) -> str:
    """Where `dataset`'s entry is written, for a message that asks the user to edit it. `origin`
    is the registry's `origin` (`parse_registry`): a file (datasets.yaml's path), or a file
    followed by the key of its datasets mapping in parentheses, as the Component passes it
    (`<folder>/defs.yaml (attributes.datasets)`): `dataset 'x' in <datasets.yaml>`, or
    `` `attributes.datasets.x` in <folder>/defs.yaml ``."""
    file, _, key = origin.rpartition(" (")
    if file and key.endswith(")"):
        return f"`{key[:-1]}.{dataset}` in {file}"
    return f"dataset {dataset!r} in {origin}"


def unknown_source_assets(sources: dict[str, tuple[str, ...]], defined: set[tuple[str, ...]],
                          origin: str) -> str | None:
    """Why the definitions cannot load when a `source.asset` of `sources` (dataset -> asset key)
    is not among `defined` (the asset keys the definitions that dp-synth joined define, each a
    tuple of parts), naming for each such dataset its entry, the key and the nearest defined
    keys (difflib); None when every key is defined. Dagster would otherwise add a placeholder
    asset of the mistyped key: the dataset would lose its lineage to the real asset and its
    automation would never fire."""
    known = sorted("/".join(key) for key in defined)
    lines = []
    for dataset, key in sources.items():
        text = "/".join(key)
        if key in defined:
            continue
        near = difflib.get_close_matches(text, known, n=3, cutoff=0.6)
        lines.append(f"{entry_location(origin, dataset)}: `source.asset` {text} is not an "
                     f"asset of these definitions; "
                     + (f"nearest asset keys: {', '.join(near)}" if near
                        else "no asset key is close to it"))
    if not lines:
        return None
    return ("dp-synth source assets not found:\n  " + "\n  ".join(lines) + "\nFix `source.asset` "
            "(a key such as [analytics, customers] or analytics/customers). An asset defined in "
            "another code location: set `asset_elsewhere: true` beside `asset:` (no check).")


# pydantic's tag of a generic union member in an error's location (`tuple[str, ...]`)
_UNION_TAG = re.compile(r"^[a-z]+\[.*\]$")


def _describe_location(loc: list[str]) -> str:
    """`dataset 'x', key 'privacy.epsilon'`; pydantic's union-member tags (class names,
    `literal[...]`, `tuple[str, ...]`, `constrained-int`) are not keys and are dropped."""
    keys = [p for p in loc if not p.startswith(("literal[", "constrained-", "function-"))
            and not _UNION_TAG.match(p)
            and p not in {"TableSource", "ParquetSource", "CsvSource", "AttachSource",
                          "EngineSpec"}]
    if len(keys) >= 2 and keys[0] == "datasets":
        key = ".".join(keys[2:])
        return f"dataset {keys[1]!r}, key {key!r}" if key else f"dataset {keys[1]!r}"
    return "key " + ".".join(keys)


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when PyYAML has it
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"


MAX_YAML_VALUES = 1_000_000  # values a registry's YAML may expand to, aliases included


class AliasError(yaml.YAMLError):
    """A YAML document whose aliases refer to themselves, or expand it past MAX_YAML_VALUES
    (a few lines of nested aliases can stand for billions of values)."""


@dataclass
class _Walk:
    """What `_construct` has built so far: the values counted, the collections being built;
    `text_keys`: refuse a mapping key that is not text (`NonTextKey`)."""

    values: int = 0
    open: set = dataclass_field(default_factory=set)
    text_keys: bool = False


def _construct(node, loader, walk: "_Walk | None" = None):
    """The Python value of a composed YAML node, as YAML's safe constructor builds it, refusing
    a key written twice in one mapping (`DuplicateKey`), at any depth, inside an anchored node,
    an alias or a merge. Strings, mappings and sequences (most of a registry) are built here,
    every other scalar by the safe constructor: a registry of hundreds of entries loads in half
    the time of the safe loader's generic walk. A merge key (`<<: *base` or `<<: [*a, *b]`)
    follows YAML's merge rule: the mapping's own keys win over merged ones, and an earlier
    merged mapping wins over a later one; each merged mapping is itself built and checked
    here. An alias that contains itself, or a document that aliases expand past
    MAX_YAML_VALUES, raises AliasError at once."""
    walk = _Walk() if walk is None else walk
    walk.values += 1
    if walk.values > MAX_YAML_VALUES:
        raise AliasError(f"its aliases expand it to more than {MAX_YAML_VALUES:,} values "
                         f"(line {node.start_mark.line + 1}): write the repeated parts out, or "
                         f"alias fewer levels deep")
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        if id(node) in walk.open:
            raise AliasError(f"an alias on line {node.start_mark.line + 1} refers to a mapping "
                             f"or list that contains it: a recursive alias has no value")
        walk.open.add(id(node))
        try:
            return _construct_collection(node, loader, walk)
        finally:
            walk.open.discard(id(node))
    if node.tag == _STR:
        if not node.style and EXPONENT.match(node.value):  # plain `1e-9`: a number
            return float(node.value)
        return node.value
    return loader.construct_object(node, deep=True)


def _construct_collection(node, loader, walk: _Walk):
    """`_construct` of a mapping (its own keys checked, merges applied) or a sequence."""
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        out = {}
        merged: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                sources = (value_node.value if isinstance(value_node, yaml.SequenceNode)
                           else [value_node])
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping", node.start_mark,
                            "expected a mapping (or a list of mappings) for merging",
                            source.start_mark)
                    for key, value in _construct(source, loader, walk).items():
                        merged.setdefault(key, value)
                continue
            key, line = _construct(key_node, loader, walk), key_node.start_mark.line + 1
            if walk.text_keys and key_problem(key):
                raise NonTextKey(key, key_node, line)
            try:
                if key in seen:
                    raise DuplicateKey(key, seen[key], line)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, "found unhashable key",
                    key_node.start_mark) from None
            seen[key] = line
            out[key] = _construct(value_node, loader, walk)
        return {**merged, **out} if merged else out
    return [_construct(item, loader, walk) for item in node.value]


class DuplicateKey(ValueError):
    """A key written twice in one YAML mapping; the message names the key and both lines."""

    def __init__(self, key, first: int, line: int):
        super().__init__(f"key {key!r} is written twice in one mapping, on line {first} and on "
                         f"line {line}: YAML would keep the second silently. Keep one.")


class NonTextKey(ValueError):
    """A mapping key that YAML 1.1 reads as no text (`true:`, `1:`, `null:`); the message names
    the line and the quoted spelling."""

    def __init__(self, key, node, line: int):
        written = node.value if isinstance(node, yaml.ScalarNode) and node.value else "null"
        super().__init__(f"the key `{written}` on line {line} {key_problem(key)}, "
                         f"`\"{written}\":`")


def parse_yaml(text: str, text_keys: bool = False) -> object:
    """A YAML document, loaded safely (YAML's safe loader composes it; `_construct` builds it),
    refusing duplicate keys (`DuplicateKey`) and, with `text_keys`, a mapping key that is not
    text (`NonTextKey`: every key of a registry is a name)."""
    loader = _SAFE_LOADER(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _construct(node, loader, _Walk(text_keys=text_keys))
    finally:
        loader.dispose()


def check_unique_keys(text: str, where: str) -> None:
    """Refuse (RegistryError naming `where` and the lines) a YAML stream, of one document or
    several (a Component's defs.yaml), that writes a key twice in one mapping, merges and
    anchors included: YAML loaders, Dagster's among them, keep the second value silently."""
    loader = _SAFE_LOADER(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                _construct(node, loader)
    except DuplicateKey as e:
        raise RegistryError(f"{where}: {e}") from None
    except yaml.YAMLError:
        return  # not ours to report: the YAML's own loader names the syntax error
    finally:
        loader.dispose()


def load_registry(path: str | Path) -> dict[str, DatasetSpec]:
    """Read and validate a datasets.yaml file.

    Args:
        path: the datasets.yaml file.

    Returns:
        Dataset name -> its validated entry.

    Raises:
        RegistryError: the file is missing, is not YAML, writes a key twice or a non-text key, or
            breaks a rule of the schema; the message names the file and, for a rule, the dataset
            and the key.
    """
    path = Path(path)
    if not path.exists():
        raise RegistryError(f"{path} does not exist; create it or set DP_SYNTH_DATASETS")
    try:
        data = parse_yaml(path.read_text(), text_keys=True)
    except (DuplicateKey, NonTextKey) as e:
        raise RegistryError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise RegistryError(f"{path} is not valid YAML: {e}") from None
    return parse_registry(data, origin=str(path))
