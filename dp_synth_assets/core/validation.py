"""Run a Great Expectations 1.x suite on a pandas DataFrame and return plain, JSON-safe results.

    outcome = run_suite(df, "orders_synth", [
        Expectation("ExpectTableRowCountToEqual", {"value": 1000}),
        Expectation("ExpectColumnValuesToBeInSet", {"column": "status", "value_set": ["a", "b"]}),
    ])
    outcome.success; outcome.results[0].observed; write_outcome(outcome, "out/orders.json")

great_expectations is imported inside `run_suite` (about 2-7 s the first time, depending on the
disk cache), so importing this module is cheap. One ephemeral GX context is cached per process
(re-created after a fork); every call registers its own uniquely named data source, asset,
batch definition, suite and validation definition, deletes them afterwards and drops its stored
validation result, so calls are independent and the context does not grow. After the first call a
run_suite call costs ~15 ms for one table-level expectation plus ~10 ms per column expectation on
a 10,000-row frame (40 column expectations: ~0.4 s).
GX 1.24.1 has no usage-statistics client any more (GX_ANALYTICS_ENABLED=false is set anyway and the
context's analytics flag is off); its tqdm "Calculating Metrics" bars are switched off through the
context's `progress_bars` variable.

What works on a pandas 3.1 DataFrame with GX 1.24.1 (each verified passing and failing, see
tests/test_validation.py; "nulls" = None/NaN/pd.NA/NaT):

1. Exact column set and order: ExpectTableColumnsToMatchOrderedList(column_list=[...]). A missing,
   extra or reordered column fails; result["details"]["mismatched"] lists positions.
   (ExpectTableColumnsToMatchSet takes column_set=..., exact_match=...; not column_list.)
2. Column dtype. ExpectColumnValuesToBeOfType(column, type_) compares `dtype.type`, so it is coarse;
   ExpectColumnValuesToBeInTypeList(column, type_list) compares the dtype object, so it is exact
   for most dtypes. For an object-dtype column both switch to a per-value isinstance check
   (nulls ignored, `mostly` honoured, a type name GX cannot resolve such as "Int64" raises).
       pandas dtype            OfType type_ that pass           InTypeList type_list (exact)
       Int64 (nullable)        "int64", "int" (= int64 too)     ["Int64Dtype"]
       int64                   "int64", "int"                   ["int64"]
       float64                 "float64", "float"               ["float64"]
       str (pandas 3 default,  "str"                            none works (["StringDtype"] only
         StringDtype(na=nan))                                   matches dtype "string" (pd.NA))
       string (pd.NA)          "str"                            ["StringDtype"]
       boolean (nullable)      "bool", "bool_" (= bool too)     ["BooleanDtype"]
       bool                    "bool", "bool_"                  ["bool"]
       datetime64[ns]/[us]     "datetime64" (any unit; also     ["datetime64[ns]"] /
                                "datetime64[ns]"/"[us]")         ["datetime64[us]"] (unit exact)
       object of datetime.date "date" (per value; a datetime    ["date"]
                                counts, an ISO string fails)
       object of str           "str" (per value)                ["str"]
   "string", "object", "Int64", "boolean" are not usable type names for typed columns. So: Int64,
   float64, boolean, datetime64[unit] -> InTypeList; pandas-3 str -> OfType "str" (it also passes
   an object column that holds only str); date objects -> OfType "date".
3. Values in a set: ExpectColumnValuesToBeInSet(column, value_set=[...]). Nulls are ignored
   (reported as missing_count). Works for str/string, Int64, float64, boolean columns with plain
   Python values. A value_set holding date/datetime/Timestamp values cannot go through a stored
   ValidationDefinition (GX raises ResourceFreshnessAggregateError because the suite's JSON copy
   holds strings); run_suite turns that into a ValueError. ISO strings do not match datetime64 or
   date values, so test membership of dates on a string-cast copy of the column.
4. Values between bounds: ExpectColumnValuesToBeBetween(column, min_value, max_value), inclusive,
   either bound may be None, nulls ignored. For datetime64 columns pass datetime.datetime,
   pd.Timestamp or an ISO *datetime* string ("2020-01-01T00:00:00" or "2020-01-01 00:00:00");
   a date-only string "2020-01-01" or a datetime.date is parsed to a date and the comparison
   raises (success False, exception "Cannot compare Timestamp with datetime.date");
   np.datetime64 is rejected by the kwargs validation. For object columns of datetime.date pass
   datetime.date or "YYYY-MM-DD" strings (a datetime bound raises "can't compare").
   parse_strings_as_datetimes no longer exists.
5. Row count: ExpectTableRowCountToEqual(value=n) (ExpectTableRowCountToBeBetween for a range).
6. Null fraction within [lo, hi]: ExpectColumnValuesToBeNull(column, mostly=lo) together with
   ExpectColumnValuesToNotBeNull(column, mostly=1-hi); both hold iff lo <= null_fraction <= hi,
   including the edges lo=0, hi=1, lo=hi and all-null / no-null columns. The denominator is the
   row count including nulls. `mostly` must lie in [0, 1] (pydantic error otherwise) and the test
   is `fraction >= mostly` in floating point, so pass round(1 - hi, 12): 1 - 0.7 is
   0.30000000000000004 and fails a column that is exactly 70 % null. On an empty frame both pass
   (element_count 0). NotBeNull's unexpected_count / element_count is the observed null fraction.
7. Row-wise comparison of two numeric columns:
   ExpectColumnPairValuesAToBeGreaterThanB(column_A="tolerance", column_B="tvd", or_equal=True)
   checks tvd <= tolerance on every row. With the default ignore_row_if="both_values_are_missing"
   a row whose tvd is NaN counts as unexpected (fails); ignore_row_if="either_value_is_missing"
   would skip it. partial_unexpected_list holds the [A, B] pairs.

Unknown expectation names and invalid kwargs (GX validates them with pydantic) raise before
anything runs; an expectation that fails while being evaluated (missing column, incomparable
types) comes back with success False and `exception` set, and the suite fails. A GX suite is
set-like: a repeated expectation (equal apart from meta) is evaluated once and its result is
reported at every position it was given (raw holds it once, with the first one's meta).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import os
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is only needed for the annotation; run_suite's caller already has it
    import pandas as pd

__all__ = ["Expectation", "ExpectationOutcome", "SuiteOutcome", "run_suite", "write_outcome"]


@dataclass(frozen=True)
class Expectation:
    """One GX expectation: `name` is a class in `great_expectations.expectations`
    (e.g. "ExpectColumnValuesToBeInSet"), `kwargs` its constructor arguments, `meta` free-form
    notes passed to GX as the expectation's `meta` (it comes back in the raw result)."""

    name: str
    kwargs: dict
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ExpectationOutcome:
    """The verdict on one Expectation. `observed` is GX's `result` dict (observed_value,
    element_count, unexpected_count, partial_unexpected_list, ... depending on the expectation and
    result_format), JSON-safe. `exception` is GX's message when evaluating it raised (e.g. a
    missing column); such an expectation has success False and usually an empty `observed`."""

    name: str
    kwargs: dict
    success: bool
    observed: dict
    exception: str | None = None


@dataclass(frozen=True)
class SuiteOutcome:
    """The verdict on a suite: `success` is True iff every expectation succeeded; `results` are in
    the order the expectations were given; `raw` is GX's whole validation result
    (`ExpectationSuiteValidationResult.to_json_dict()`), JSON-safe. GX's suite name inside `raw`
    carries a per-call suffix (`<suite>__<hex>`); `suite` is the name the caller gave."""

    suite: str
    success: bool
    results: list[ExpectationOutcome]
    raw: dict

    @property
    def failures(self) -> list[ExpectationOutcome]:
        return [r for r in self.results if not r.success]


# --------------------------------------------------------------------------------------------
# JSON safety


def _json_safe(obj: Any) -> Any:
    """Recursively turn numpy/pandas/datetime/decimal values into JSON types. Non-finite floats,
    pd.NA and NaT become None (as GX's own serializer does for NaN); dates become ISO strings;
    dict keys become strings; anything unknown becomes its str()."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (_dt.datetime, _dt.date, _dt.time)):
        # pd.Timestamp is a datetime subclass; NaT is too, but its isoformat() is "NaT"
        try:
            import pandas as pd

            if obj is pd.NaT:
                return None
        except ImportError:  # pragma: no cover
            pass
        return obj.isoformat()
    if isinstance(obj, _dt.timedelta):
        return obj.total_seconds()
    if isinstance(obj, decimal.Decimal):
        return _json_safe(float(obj))
    if isinstance(obj, (uuid.UUID, Path)):
        return str(obj)
    # numpy / pandas scalars and arrays, without importing them when not needed
    mod = type(obj).__module__ or ""
    if mod.startswith("numpy"):
        import numpy as np

        if isinstance(obj, np.ndarray):
            return [_json_safe(v) for v in obj.tolist()]
        if isinstance(obj, np.datetime64):
            if np.isnat(obj):
                return None
            return np.datetime_as_string(obj)
        if isinstance(obj, np.timedelta64):
            return None if np.isnat(obj) else obj.astype("timedelta64[ns]").astype("int64") / 1e9
        if isinstance(obj, np.generic):
            return _json_safe(obj.item())
    if mod.startswith("pandas"):
        import pandas as pd

        if obj is pd.NA or obj is pd.NaT:
            return None
        if isinstance(obj, (pd.Series, pd.Index)):
            return [_json_safe(v) for v in obj.tolist()]
        if isinstance(obj, pd.DataFrame):
            return _json_safe(obj.to_dict(orient="records"))
        if isinstance(obj, pd.Timedelta):
            return obj.total_seconds()
        if isinstance(obj, pd.Period):
            return str(obj)
    if hasattr(obj, "to_json_dict"):
        return _json_safe(obj.to_json_dict())
    return str(obj)


# --------------------------------------------------------------------------------------------
# One ephemeral GX context per process


_LOCK = threading.RLock()
_CONTEXT: Any = None
_CONTEXT_PID: int | None = None


def _quiet_environment() -> None:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


def _context() -> Any:
    """The process's ephemeral GX context, created on first use with analytics and progress
    bars off. Re-created after a fork (a child never shares its parent's context object)."""
    global _CONTEXT, _CONTEXT_PID
    if _CONTEXT is not None and _CONTEXT_PID == os.getpid():
        return _CONTEXT
    _quiet_environment()
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    ctx.enable_analytics(False)
    _CONTEXT, _CONTEXT_PID = ctx, os.getpid()
    return ctx


def _build_expectation(gx: Any, exp: Expectation) -> Any:
    if not isinstance(exp, Expectation):
        raise TypeError(f"expected an Expectation, got {type(exp).__name__}")
    cls = getattr(gx.expectations, exp.name, None)
    if cls is None or not isinstance(cls, type):
        raise ValueError(f"unknown Great Expectations expectation class {exp.name!r}")
    kwargs = dict(exp.kwargs)
    if exp.meta:
        kwargs["meta"] = dict(exp.meta)
    return cls(**kwargs)


def _add_to_suite(suite: Any, expectation: Any) -> Any:
    """Add to a saved suite and return the suite's member. A GX suite is set-like: an expectation
    equal to one already present (ignoring id, meta, notes) is not added again, and the returned
    object has no id; map it to the member it duplicates so both get that member's result."""
    added = suite.add_expectation(expectation)
    if added.id is not None:
        return added
    skip = {"id", "rendered_content", "notes", "meta"}
    for member in suite.expectations:
        if member.expectation_type == expectation.expectation_type and member.dict(
            exclude=skip
        ) == expectation.dict(exclude=skip):
            return member
    raise RuntimeError(f"GX did not add {expectation!r} to the suite")  # pragma: no cover


def run_suite(
    df: "pd.DataFrame",
    suite_name: str,
    expectations: list[Expectation],
    result_format: str = "SUMMARY",
) -> SuiteOutcome:
    """Validate `df` against `expectations` with GX and return a SuiteOutcome.

    Each call registers its own pandas data source, dataframe asset, whole-dataframe batch
    definition, ExpectationSuite and ValidationDefinition under unique names in the process's
    cached ephemeral context, runs the ValidationDefinition with `batch_parameters={"dataframe":
    df}` and `result_format`, and deletes them again. Calls are serialised by a lock (GX's
    in-memory stores are not documented as thread-safe). An unknown expectation name or bad
    kwargs raise before anything runs; a failure while evaluating an expectation (e.g. a missing
    column) yields success False with `exception` set, as GX reports it.
    """
    if not expectations:
        raise ValueError("run_suite needs at least one expectation")
    _quiet_environment()
    import great_expectations as gx
    from great_expectations.exceptions.resource_freshness import ResourceFreshnessAggregateError

    gx_expectations = [_build_expectation(gx, e) for e in expectations]
    token = uuid.uuid4().hex[:12]
    base = f"{suite_name}__{token}"
    with _LOCK:
        ctx = _context()
        ds_name, vd_name = f"ds__{base}", f"vd__{base}"
        suite_added = vd_added = False
        try:
            ds = ctx.data_sources.add_pandas(ds_name)
            asset = ds.add_dataframe_asset(f"asset__{base}")
            batch_def = asset.add_batch_definition_whole_dataframe(f"batch__{base}")
            suite = ctx.suites.add(gx.ExpectationSuite(name=base))
            suite_added = True
            added = [_add_to_suite(suite, e) for e in gx_expectations]
            try:
                vd = ctx.validation_definitions.add(
                    gx.ValidationDefinition(name=vd_name, data=batch_def, suite=suite)
                )
            except ResourceFreshnessAggregateError as err:
                raise ValueError(
                    f"suite {suite_name!r}: an expectation's kwargs do not survive GX's JSON "
                    "round trip (typically a value_set holding date/datetime/Timestamp values); "
                    "pass JSON-native values instead, e.g. compare ISO strings against a "
                    "string-cast copy of the column"
                ) from err
            vd_added = True
            results_store = ctx.validation_results_store
            stored_before = set(results_store.list_keys())
            try:
                result = vd.run(batch_parameters={"dataframe": df}, result_format=result_format)
            finally:
                # ValidationDefinition.run keeps every result in the context's in-memory store;
                # drop ours so a long-lived process does not accumulate them
                for key in set(results_store.list_keys()) - stored_before:
                    try:
                        results_store.remove_key(key)
                    except Exception:  # noqa: BLE001 - cleanup must not mask the real error
                        pass
        finally:
            for deleter, name, done in (
                (ctx.validation_definitions.delete, vd_name, vd_added),
                (ctx.suites.delete, base, suite_added),
                (ctx.data_sources.delete, ds_name, True),
            ):
                if done:
                    try:
                        deleter(name)
                    except Exception:  # noqa: BLE001 - cleanup must not mask the real error
                        pass

    by_id = {str(r.expectation_config.id): r for r in result.results}
    outcomes = []
    for exp, gx_exp in zip(expectations, added):
        r = by_id.get(str(gx_exp.id))
        if r is None:  # pragma: no cover - GX always reports every expectation
            outcomes.append(
                ExpectationOutcome(exp.name, _json_safe(exp.kwargs), False, {}, "no result from GX")
            )
            continue
        exc = r.exception_info if isinstance(r.exception_info, dict) else {}
        if "raised_exception" not in exc:
            # GX nests exception_info by metric id when a metric failed to resolve
            msgs = [v.get("exception_message") for v in exc.values() if isinstance(v, dict)]
            exc_msg = "; ".join(dict.fromkeys(m for m in msgs if m)) or None
        else:
            exc_msg = exc.get("exception_message") if exc.get("raised_exception") else None
        outcomes.append(
            ExpectationOutcome(
                name=exp.name,
                kwargs=_json_safe(exp.kwargs),
                success=bool(r.success),
                observed=_json_safe(dict(r.result or {})),
                exception=exc_msg,
            )
        )
    return SuiteOutcome(
        suite=suite_name,
        success=bool(result.success),
        results=outcomes,
        raw=_json_safe(result.to_json_dict()),
    )


def write_outcome(outcome: SuiteOutcome, path: str | os.PathLike) -> Path:
    """Write `outcome.raw` as strict JSON (indented, keys sorted) to `path`, creating parent
    directories; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(outcome.raw, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return p
