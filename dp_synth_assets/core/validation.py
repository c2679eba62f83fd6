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

Data Docs. `run_suite(..., docs_dir=d)` (or `write_data_docs(outcome, d)` for an outcome already
in hand) also renders the outcome as GX's own Data Docs, a static site in `d`, and returns the
page in `outcome.docs_page`; without docs_dir nothing of this runs. write_data_docs also takes an
outcome without results (a suite with nothing to check: an empty page with its success), but not
one whose `raw` was merged by hand from several run_suite outcomes (document each of those). The
suite name becomes a path, so it may hold only letters, digits, "_" and "-". An error while
writing the docs raises (from run_suite too, losing the verdict: to keep it whatever happens, call
run_suite without docs_dir and write_data_docs in a try). Several suites share one site:
    d/index.html                          GX's index: one row per suite (status, run time, link
                                          to its validation page and to its expectation page)
    d/validations/<suite>/__none__/<run time>/<data fingerprint>.html   the validation page
    d/expectations/<suite>.html           the suite's expectations (GX's suite page)
    d/static/                             GX's CSS, fonts, images (~4 MB, rewritten each build)
    d/gx_stores/{validations,expectations}/...json   what the site is built from: GX's JSON of
                                          each suite's latest validation result and of the suite
The site keeps the latest run of each suite: writing a suite first deletes that suite's earlier
results from d/gx_stores, and GX's index builder (skip_and_clean_missing) then deletes their
pages, so a rerun replaces the page (its path changes with the run time) and other suites' pages
stay. Suites that are no longer run stay listed until d is deleted. The site is built with GX's
SiteBuilder (HtmlSiteStore on a TupleFilesystemStoreBackend, DefaultSiteSectionBuilder for
validations and expectations, DefaultSiteIndexBuilder), fed by a ValidationResultsStore and an
ExpectationsStore on TupleFilesystemStoreBackends that are registered in the cached ephemeral
context for the call only; nothing is written outside d (no gx/ folder; the store-id file is
suppressed). Writers of one d take turns (the module lock, and flock on d across processes).
The pages are rebuilt from `outcome.raw` (round trip through GX's result schema) with the
per-call suffix of run_suite's names removed. The first site build in a process costs 0.2-0.3 s
(Jinja compiles GX's templates); later ones 0.07-0.17 s on a loaded 2-core machine, whatever the
suite's size (the Jinja views are cached per process, GX would otherwise recompile every template
on every build, ~0.15 s more; about a third is copying static/, a quarter registering the stores).
GX 1.24.1 findings about its Data Docs:
- The validation page names each expectation by GX's prose ("Must have exactly 3 rows.",
  "values must belong to this set: ...") with a pass/fail icon; the class name is not shown, and
  GX's custom-column mechanism (kwargs.meta_properties_to_render) cannot add it: every
  expectation is re-validated with pydantic while rendering and the extra kwarg makes the page
  fail to render.
- Column names, unexpected values, observed values and exception tracebacks go into the HTML
  unescaped (a value "<script>..." would run in the viewer's browser), while expectation
  parameters (value_set, column_list, ...) and exception messages are escaped. The docs copy of
  each result therefore has every string of its `result`, its kwargs and its exception traceback
  HTML-escaped; a parameter containing <, >, &, " or ' then shows in its escaped form on the page.
- The pages load Bootstrap, jQuery, bootstrap-table, Font Awesome and vega from public CDNs and
  the GX logo from GX's S3 bucket (the context has no data_context_id, so no id is sent): offline,
  the pages are unstyled and the index's table, which bootstrap-table draws from a JSON literal in
  index.html, is empty.
- The site builder logs (does not raise) rendering errors; write_data_docs raises RuntimeError
  when the page is missing afterwards.

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

import contextlib
import dataclasses
import datetime as _dt
import decimal
import html
import json
import math
import os
import re
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is only needed for the annotation; run_suite's caller already has it
    import pandas as pd

__all__ = [
    "DOCS_STORES_DIR",
    "Expectation",
    "ExpectationOutcome",
    "SuiteOutcome",
    "run_suite",
    "write_data_docs",
    "write_outcome",
]


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
    carries a per-call suffix (`<suite>__<hex>`); `suite` is the name the caller gave.
    `docs_page` is the Data Docs page written for this outcome (run_suite with docs_dir), else
    None."""

    suite: str
    success: bool
    results: list[ExpectationOutcome]
    raw: dict
    docs_page: Path | None = None

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
    docs_dir: str | os.PathLike | None = None,
) -> SuiteOutcome:
    """Validate `df` against `expectations` with GX and return a SuiteOutcome.

    Each call registers its own pandas data source, dataframe asset, whole-dataframe batch
    definition, ExpectationSuite and ValidationDefinition under unique names in the process's
    cached ephemeral context, runs the ValidationDefinition with `batch_parameters={"dataframe":
    df}` and `result_format`, and deletes them again. Calls are serialised by a lock (GX's
    in-memory stores are not documented as thread-safe). An unknown expectation name or bad
    kwargs raise before anything runs; a failure while evaluating an expectation (e.g. a missing
    column) yields success False with `exception` set, as GX reports it.

    With `docs_dir`, the outcome is also rendered into the Data Docs site there
    (`write_data_docs`) and the returned outcome's `docs_page` is its page; `suite_name` must
    then be a docs-safe name (checked before anything runs).
    """
    if not expectations:
        raise ValueError("run_suite needs at least one expectation")
    if docs_dir is not None:
        _check_docs_name(suite_name)
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
    outcome = SuiteOutcome(
        suite=suite_name,
        success=bool(result.success),
        results=outcomes,
        raw=_json_safe(result.to_json_dict()),
    )
    if docs_dir is not None:
        outcome = dataclasses.replace(outcome, docs_page=write_data_docs(outcome, docs_dir))
    return outcome


def write_outcome(outcome: SuiteOutcome, path: str | os.PathLike) -> Path:
    """Write `outcome.raw` as strict JSON (indented, keys sorted) to `path`, creating parent
    directories; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(outcome.raw, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return p


# --------------------------------------------------------------------------------------------
# Data Docs


DOCS_STORES_DIR = "gx_stores"  # inside docs_dir: the JSON stores the site is built from
_DOCS_NAME = re.compile(r"[A-Za-z0-9_-]+")
_VIEWS: dict = {}
_VIEWS_PID: int | None = None


def _check_docs_name(suite: str) -> None:
    # GX turns a suite name into a path: dots become directories, "/" is forbidden
    if not isinstance(suite, str) or not _DOCS_NAME.fullmatch(suite):
        raise ValueError(
            f"suite name {suite!r} cannot name a Data Docs page: use only letters, digits, '_', '-'"
        )


def _docs_result_dict(outcome: SuiteOutcome) -> dict:
    """The validation result to document, as a GX result dict named after `outcome.suite`."""
    raw = outcome.raw
    if isinstance(raw, dict) and isinstance(raw.get("results"), list) and "statistics" in raw:
        text = json.dumps(raw, allow_nan=False)
        base = raw.get("suite_name")
        if isinstance(base, str) and base.startswith(f"{outcome.suite}__"):
            # run_suite's per-call names (suite, data source, asset, batch id) -> the caller's name
            text = text.replace(json.dumps(base)[1:-1], json.dumps(outcome.suite)[1:-1])
        data = json.loads(text)
    elif not outcome.results:
        # e.g. a suite with nothing to check, reported without running GX: an empty page
        now = _dt.datetime.now(_dt.UTC).isoformat()
        data = {
            "success": bool(outcome.success),
            "results": [],
            "statistics": {
                "evaluated_expectations": 0,
                "successful_expectations": 0,
                "unsuccessful_expectations": 0,
                "success_percent": None,
            },
            "suite_parameters": {},
            "meta": {"run_id": {"run_name": None, "run_time": now}, "validation_time": now},
        }
    else:
        raise ValueError(
            f"outcome {outcome.suite!r}: raw is not a GX validation result (e.g. outcomes merged "
            "by hand); document each run_suite outcome instead"
        )
    data["suite_name"] = outcome.suite
    for r in data["results"]:
        # GX 1.24 puts column names, unexpected and observed values and exception tracebacks
        # into the HTML unescaped; escape the strings of these data-derived parts so that no
        # value can inject markup (where GX does escape, such a value shows escaped: "a&lt;b")
        if "result" in r:
            r["result"] = _escape_strings(r["result"])
        if "exception_info" in r:  # (flat or nested by metric id) GX escapes the message only
            r["exception_info"] = _escape_strings(r["exception_info"], keep={"exception_message"})
        config = r.get("expectation_config")
        if isinstance(config, dict) and isinstance(config.get("kwargs"), dict):
            config["kwargs"] = {
                k: v if k == "batch_id" else _escape_strings(v) for k, v in config["kwargs"].items()
            }
    return data


def _escape_strings(obj: Any, keep: frozenset | set = frozenset()) -> Any:
    """HTML-escape every string in a JSON value, except the values of dict keys in `keep`."""
    if isinstance(obj, str):
        return html.escape(obj, quote=True)
    if isinstance(obj, dict):
        return {k: v if k in keep else _escape_strings(v, keep) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_escape_strings(v, keep) for v in obj]
    return obj


def _suite_configs(data: dict) -> list[dict]:
    """The evaluated expectations as suite entries (for the suite's own page)."""
    configs = []
    for r in data["results"]:
        config = r.get("expectation_config")
        if isinstance(config, dict) and isinstance(config.get("type"), str):
            kwargs = {k: v for k, v in (config.get("kwargs") or {}).items() if k != "batch_id"}
            configs.append({"type": config["type"], "kwargs": kwargs, "meta": config.get("meta")})
    return configs


@contextlib.contextmanager
def _directory_lock(path: Path):
    """Exclusive flock on the directory itself, so processes writing one site take turns."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: the in-process lock only
        yield
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _reuse_views(site: Any) -> None:
    """Give the site builder's sections the process's cached Jinja views. GX builds a fresh Jinja
    Environment per view, so every build would recompile all templates (~0.15 s); a view holds
    no per-page state, so the cached ones render the same HTML."""
    global _VIEWS, _VIEWS_PID
    if _VIEWS_PID != os.getpid():
        _VIEWS, _VIEWS_PID = {}, os.getpid()
    # GX internals (1.24): a missing attribute only means no reuse, never a failure
    sections = getattr(site, "site_section_builders", None) or {}
    for holder in [*sections.values(), getattr(site, "site_index_builder", None)]:
        view = getattr(holder, "view_class", None)
        if view is None:  # pragma: no cover
            continue
        key = (
            type(view),
            getattr(view, "custom_styles_directory", None),
            getattr(view, "custom_views_directory", None),
        )
        holder.view_class = _VIEWS.setdefault(key, view)


def _prune_empty_dirs(root: Path) -> None:
    """Remove empty directories under `root` and `root` itself when it ends up empty."""
    if not root.is_dir():
        return
    for dirpath, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):  # not empty
            os.rmdir(dirpath)


def write_data_docs(
    outcome: SuiteOutcome, docs_dir: str | os.PathLike, site_name: str | None = None
) -> Path:
    """Render `outcome` into the GX Data Docs site in `docs_dir` and return its validation page.

    The site holds the latest outcome of every suite written into it: this suite's previous
    result and page are replaced, other suites' stay, and index.html lists them all (and links
    each suite's expectation page). `outcome` is one run_suite outcome (rebuilt from its `raw`),
    or an outcome with no results, shown as an empty page with the outcome's success. The suite
    name must be docs-safe (only letters, digits, "_" and "-"). Errors while writing
    raise; a page GX failed to render raises RuntimeError. `site_name` is the index's title
    (default: the last two components of docs_dir, e.g. "orders/data_docs").
    """
    if not isinstance(outcome, SuiteOutcome):
        raise TypeError(f"expected a SuiteOutcome, got {type(outcome).__name__}")
    _check_docs_name(outcome.suite)
    data = _docs_result_dict(outcome)
    _quiet_environment()
    import great_expectations as gx
    from great_expectations.core.expectation_validation_result import (
        ExpectationSuiteValidationResultSchema,
    )
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )
    from great_expectations.render.renderer.site_builder import SiteBuilder

    result = ExpectationSuiteValidationResultSchema().load(data)
    suite = gx.ExpectationSuite(name=outcome.suite, expectations=_suite_configs(data))
    run = data["meta"].get("run_id") if isinstance(data["meta"].get("run_id"), dict) else {}
    run_id = RunIdentifier(run_name=run.get("run_name"), run_time=run.get("run_time"))
    markers = data["meta"].get("batch_markers") or {}
    batch = str(markers.get("pandas_data_fingerprint") or "dataframe")
    suite_key = ExpectationSuiteIdentifier(name=outcome.suite)
    result_key = ValidationResultIdentifier(
        expectation_suite_identifier=suite_key, run_id=run_id, batch_identifier=batch
    )

    docs = Path(docs_dir).resolve()
    docs.mkdir(parents=True, exist_ok=True)
    stores = docs / DOCS_STORES_DIR
    page = docs.joinpath("validations", outcome.suite, *run_id.to_tuple(), f"{batch}.html")
    token = uuid.uuid4().hex[:12]
    names = {"results": f"docs_results__{token}", "suites": f"docs_suites__{token}"}

    def backend(base: Path, **extra: Any) -> dict:
        return {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(base), **extra}

    with _LOCK, _directory_lock(docs):
        ctx = _context()
        added: list[str] = []
        try:
            results_store = ctx.add_store(names["results"], {
                "class_name": "ValidationResultsStore",
                "store_backend": backend(stores / "validations", suppress_store_backend_id=True),
            })
            added.append(names["results"])
            suites_store = ctx.add_store(names["suites"], {
                "class_name": "ExpectationsStore",
                "store_backend": backend(stores / "expectations", suppress_store_backend_id=True),
            })
            added.append(names["suites"])
            # the latest run only: drop this suite's older results; building the index then
            # deletes every page whose result is gone (GX's skip_and_clean_missing)
            for key in results_store.list_keys():
                if key.expectation_suite_identifier.name == outcome.suite:
                    results_store.remove_key(key)
            results_store.set(result_key, result)
            suites_store.set(suite_key, suite)
            site = SiteBuilder(
                data_context=ctx,
                store_backend=backend(docs),
                site_name=site_name or "/".join(docs.parts[-2:]),
                show_how_to_buttons=False,
                site_section_builders={
                    "expectations": {"source_store_name": names["suites"]},
                    "validations": {"source_store_name": names["results"]},
                    "profiling": "None",
                },
            )
            _reuse_views(site)
            site.build(resource_identifiers=[result_key, suite_key])
        finally:
            for name in added:
                with contextlib.suppress(Exception):
                    ctx.delete_store(name)
            for root in (docs / "validations", stores / "validations"):
                _prune_empty_dirs(root / outcome.suite)
    if not page.is_file():
        raise RuntimeError(f"GX did not render the Data Docs page for {outcome.suite!r} ({page})")
    return page
