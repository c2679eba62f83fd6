"""What a Great Expectations suite run returns, as plain JSON-safe records.

An `Expectation` names a GX expectation class and its arguments; `run_suite` (`checks.gx`)
returns a `SuiteOutcome` holding one `ExpectationOutcome` per expectation, in the order given, and
GX's whole validation result (`raw`), every value made JSON-safe (`json_safe`), so an outcome can
be stored (`write_outcome`) and published without GX.
"""

import datetime as _dt
import decimal
import json
import math
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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


def json_safe(obj: Any) -> Any:
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
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in obj]
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
        return json_safe(float(obj))
    if isinstance(obj, (uuid.UUID, Path)):
        return str(obj)
    # numpy / pandas scalars and arrays, without importing them when not needed
    mod = type(obj).__module__ or ""
    if mod.startswith("numpy"):
        import numpy as np

        if isinstance(obj, np.ndarray):
            return [json_safe(v) for v in obj.tolist()]
        if isinstance(obj, np.datetime64):
            if np.isnat(obj):
                return None
            return np.datetime_as_string(obj)
        if isinstance(obj, np.timedelta64):
            return None if np.isnat(obj) else obj.astype("timedelta64[ns]").astype("int64") / 1e9
        if isinstance(obj, np.generic):
            return json_safe(obj.item())
    if mod.startswith("pandas"):
        import pandas as pd

        if obj is pd.NA or obj is pd.NaT:
            return None
        if isinstance(obj, (pd.Series, pd.Index)):
            return [json_safe(v) for v in obj.tolist()]
        if isinstance(obj, pd.DataFrame):
            return json_safe(obj.to_dict(orient="records"))
        if isinstance(obj, pd.Timedelta):
            return obj.total_seconds()
        if isinstance(obj, pd.Period):
            return str(obj)
    if hasattr(obj, "to_json_dict"):
        return json_safe(obj.to_json_dict())
    return str(obj)


def write_outcome(outcome: SuiteOutcome, path: str | os.PathLike) -> Path:
    """Write `outcome.raw` as strict JSON (indented, keys sorted) to `path`, creating parent
    directories; returns the path (a local path or an object-store URL, `store.location`)."""
    from ..infra.store import location, make_folder

    p = location(path)
    make_folder(p.parent)
    p.write_text(json.dumps(outcome.raw, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return p

