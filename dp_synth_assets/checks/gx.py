"""Run a Great Expectations 1.x suite on a pandas DataFrame and return plain, JSON-safe results.

Contract: importing this module does not import great_expectations (`run_suite` does, the first
time). Calls are independent: each registers its own uniquely named objects in the process's
ephemeral context (`gx_context`) and deletes them afterwards, so the context does not grow.
Unknown expectation names and invalid kwargs raise before anything runs; an expectation that
fails while being evaluated comes back with success False and `exception` set, and the suite
fails. A repeated expectation is evaluated once and reported at every position it was given.
How each expectation the checks use behaves on pandas dtypes: docs/great_expectations.md."""

import dataclasses
import os
import uuid
from typing import TYPE_CHECKING, Any

from .data_docs import check_docs_name, write_data_docs
from .gx_context import LOCK, context, quiet_environment
from .outcomes import Expectation, ExpectationOutcome, SuiteOutcome, json_safe, write_outcome

if TYPE_CHECKING:  # pandas is only needed for the annotation; run_suite's caller already has it
    import pandas as pd

__all__ = ["Expectation", "ExpectationOutcome", "SuiteOutcome", "run_suite", "write_data_docs",
           "write_outcome"]


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
        check_docs_name(suite_name)
    quiet_environment()
    import great_expectations as gx
    from great_expectations.exceptions.resource_freshness import ResourceFreshnessAggregateError

    gx_expectations = [_build_expectation(gx, e) for e in expectations]
    token = uuid.uuid4().hex[:12]
    base = f"{suite_name}__{token}"
    with LOCK:
        ctx = context()
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
                ExpectationOutcome(exp.name, json_safe(exp.kwargs), False, {}, "no result from GX")
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
                kwargs=json_safe(exp.kwargs),
                success=bool(r.success),
                observed=json_safe(dict(r.result or {})),
                exception=exc_msg,
            )
        )
    outcome = SuiteOutcome(
        suite=suite_name,
        success=bool(result.success),
        results=outcomes,
        raw=json_safe(result.to_json_dict()),
    )
    if docs_dir is not None:
        outcome = dataclasses.replace(outcome, docs_page=write_data_docs(outcome, docs_dir))
    return outcome

