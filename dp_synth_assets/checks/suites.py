"""The checks of the synthetic table: one function per check, each running its GX suite(s).

Each check takes the `SyntheticTable` and returns a `CheckResult`: GX's verdict (`SuiteOutcome`)
and the metadata to publish. The suites are built from the declared spec, the dataset's plan and
its noisy measurements only: they read the synthetic table, never the source, so every verdict
and figure is public. `CHECKS`, the checks' registry, lists them with their module, severity,
whether a failure blocks the downstream assets and whether they read rows of the table; a
check's description is the first line of its function's docstring. `publish` stores a result
where the public can read it."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.plugins import NO_SETTINGS, plugin_module
from ..core.sql import qualified
from ..evaluation import fidelity
from .data_docs import write_data_docs
from .frames import CheckInputs, SyntheticTable
from .gx import Expectation, SuiteOutcome, run_suite, write_outcome
from .tolerances import duplicate_bound, marginal_tolerance, tolerances

if TYPE_CHECKING:  # pandas loads with the checks' run, not with the definitions
    import pandas as pd

NO_BOUND = "ExpectColumnPairValuesAToBeGreaterThanB"  # tolerance >= observed, row by row


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict: `outcome` is GX's, `metadata` what to publish beside it; `rendered`
    says its Data Docs pages are written already."""

    name: str
    outcome: SuiteOutcome
    metadata: dict
    rendered: bool = False

    @property
    def passed(self) -> bool:
        return bool(self.outcome.success)


def expectations_result(name: str, frame: "pd.DataFrame", expectations: list, dataset: str,
                        metadata: dict) -> CheckResult:
    """Run one suite on `frame`; a suite with nothing to check (no nullable column, no measured
    marginal) passes vacuously, and its stored result says so."""
    if expectations:
        outcome = run_suite(frame, f"{dataset}_{name}", expectations)
    else:
        outcome = SuiteOutcome(f"{dataset}_{name}", True, [],
                               {"success": True, "note": "nothing to check"})
    return CheckResult(name, outcome, metadata)


# ---- the checks ----------------------------------------------------------------------------------


def schema(table: SyntheticTable) -> CheckResult:
    """The declared columns, in order, with their declared SQL types, in the table and its Parquet.

    Two suites: the declared, warehouse and Parquet types side by side (a frame of one row per
    column), and the column list of the Parquet copy's first rows."""
    import pandas as pd

    inputs = table.inputs
    columns, dataset, docs = list(inputs.declared), inputs.dataset, inputs.docs_dir
    types = pd.DataFrame({
        "column": columns,
        "expected": [c.sql_type for c in inputs.declared.values()],
        "warehouse": table.column_types(qualified(inputs.table)),
        "parquet": table.column_types(table.source),
    })
    outcome = run_suite(types, f"{dataset}_schema", [
        Expectation("ExpectColumnPairValuesToBeEqual", {"column_A": "expected", "column_B": "warehouse"}),
        Expectation("ExpectColumnPairValuesToBeEqual", {"column_A": "expected", "column_B": "parquet"}),
    ], docs_dir=docs)
    head = table.frame(table.present, limit=1000)
    columns_outcome = run_suite(head, f"{dataset}_columns", [
        Expectation("ExpectTableColumnsToMatchOrderedList", {"column_list": columns})],
        docs_dir=docs)
    success = outcome.success and columns_outcome.success
    merged = type(outcome)(outcome.suite, success, outcome.results + columns_outcome.results,
                           {"success": success, "types": outcome.raw, "columns": columns_outcome.raw})
    return CheckResult("schema", merged, {"types": types.to_dict(orient="records")}, rendered=True)


def domain(table: SyntheticTable) -> CheckResult:
    """Values in the declared domain: its categories or `other`, its bounds, NULL only if nullable.

    Where the spec leaves a domain to preprocessing (discovered categories, learned bounds), the
    plan's (`domain.declared_domain`). GX validates a frame of one row per column, the counts
    DuckDB aggregated over the whole table (`frames.column_aggregates`): `outside` (present
    values outside the domain, or not readable as the declared type) must be 0 and `nulls` at
    most `allowed_nulls` (0 for a column that is not nullable, the row count for one that is)."""
    import pandas as pd

    declared = table.inputs.declared
    records = [{"column": name, "outside": table.outside.get(name, 0),
                "nulls": table.nulls[name],
                "allowed_nulls": table.total if declared[name].is_nullable else 0}
               for name in declared if name in table.nulls
               and (name in table.outside or not declared[name].is_nullable)]
    frame = pd.DataFrame(records, columns=["column", "outside", "nulls", "allowed_nulls"])
    outside = {r["column"]: r["outside"] for r in records if r["outside"]}
    nulls = {r["column"]: r["nulls"] for r in records if r["nulls"] > r["allowed_nulls"]}
    return expectations_result("domain", frame, [
        Expectation("ExpectColumnValuesToBeBetween",
                    {"column": "outside", "min_value": 0, "max_value": 0}),
        Expectation(NO_BOUND, {"column_A": "allowed_nulls", "column_B": "nulls",
                               "or_equal": True})] if records else [],
        table.inputs.dataset, {"outside": outside, "unexpected_nulls": nulls})


def row_count(table: SyntheticTable) -> CheckResult:
    """The requested number of rows (counted by DuckDB, compared by GX)."""
    import pandas as pd

    rows = table.inputs.rows
    frame = pd.DataFrame({"rows": [int(table.total)], "requested_rows": [int(rows)]})
    return expectations_result("row_count", frame, [
        Expectation("ExpectColumnPairValuesToBeEqual",
                    {"column_A": "rows", "column_B": "requested_rows"})],
        table.inputs.dataset, {"rows": int(table.total), "requested_rows": int(rows)})


def null_fraction(table: SyntheticTable) -> CheckResult:
    """Each nullable column's NULL share near the noisy estimate of its measured 1-way marginal.

    The allowed interval is the measured NULL share plus or minus that cell's tolerance
    (`tolerances`). GX validates a frame of one row per column: the column's NULL share (its
    NULL count, NaN included, over its rows, aggregated by DuckDB) at least `low` and at most
    `high`. An empty table has no share to judge and passes."""
    import pandas as pd

    inputs = table.inputs
    one_way = {m.clique[0]: m for m in inputs.measurements if len(m.clique) == 1}
    records, shown, gaps = [], {}, []
    for e in inputs.plan.encodings:
        if not e.nullable or e.column not in one_way:
            continue
        m = one_way[e.column]
        _, per_cell = tolerances(m, inputs.noisy_total, inputs.rows)
        p = float(fidelity.noisy_distribution(m)[e.null_code])
        low = float(max(p - per_cell[e.null_code], 0.0))
        high = float(min(p + per_cell[e.null_code], 1.0))
        shown[e.column] = {"expected": round(p, 4), "low": round(low, 4), "high": round(high, 4)}
        counts = table.counts.get((e.column,))
        if counts is not None and counts.sum() > 0:
            share = float(counts[e.null_code] / counts.sum())
            gaps.append({"gap": round(abs(share - p), 5),
                         "tolerance": round(float(per_cell[e.null_code]), 5)})
        if e.column in table.nulls and table.total:
            records.append({"column": e.column, "null_share": table.nulls[e.column] / table.total,
                            "low": low, "high": high})
    frame = pd.DataFrame(records, columns=["column", "null_share", "low", "high"])
    return expectations_result("null_fraction", frame, [
        Expectation(NO_BOUND, {"column_A": "null_share", "column_B": "low", "or_equal": True}),
        Expectation(NO_BOUND, {"column_A": "high", "column_B": "null_share", "or_equal": True})]
        if records else [], inputs.dataset, {"bounds": shown, **worst(gaps, "gap", "max_null_gap")})


def one_way_tvd(table: SyntheticTable) -> CheckResult:
    """Each column's distribution within a TVD tolerance of its noisy 1-way measurement."""
    import pandas as pd

    inputs = table.inputs
    one_way = {m.clique[0]: m for m in inputs.measurements if len(m.clique) == 1}
    records = []
    for e in inputs.plan.encodings:
        if (e.column,) not in table.counts:
            continue
        m = one_way[e.column]
        tvd = fidelity.marginal_tvd(table.counts[(e.column,)], m)
        records.append({"column": e.column, "tvd": round(tvd, 5),
                        "tolerance": round(tolerances(m, inputs.noisy_total, inputs.rows)[0], 5)})
    frame = pd.DataFrame(records, columns=["column", "tvd", "tolerance"])
    return expectations_result("one_way_tvd", frame, [
        Expectation(NO_BOUND, {"column_A": "tolerance", "column_B": "tvd", "or_equal": True})],
        inputs.dataset, {"tvd": records, **worst(records, "tvd", "max_tvd")})


def marginal_tvd(table: SyntheticTable) -> CheckResult:
    """Every measured marginal of 2+ columns within a TVD tolerance of its noisy measurement.

    Counted on the synthetic table's encoded codes; each tolerance comes from that measurement's
    own noise scale (`marginal_tolerance`)."""
    import pandas as pd

    inputs = table.inputs
    records = []
    for m in inputs.measurements:
        if len(m.clique) < 2 or m.clique not in table.counts:
            continue
        tvd = fidelity.marginal_tvd(table.counts[m.clique], m)
        records.append({"marginal": " x ".join(m.clique), "tvd": round(tvd, 5),
                        "tolerance": round(marginal_tolerance(m, inputs.noisy_total, inputs.rows), 5)})
    frame = pd.DataFrame(records, columns=["marginal", "tvd", "tolerance"])
    return expectations_result("marginal_tvd", frame, [
        Expectation(NO_BOUND, {"column_A": "tolerance", "column_B": "tvd", "or_equal": True})]
        if records else [], inputs.dataset, {"tvd": records, **worst(records, "tvd", "max_tvd")})


def duplicates(table: SyntheticTable) -> CheckResult:
    """The share of rows repeating an earlier row below the bound the model implies.

    Rows are compared on their encoded codes; the bound (`duplicate_bound`) catches a generator
    that copies rows wholesale."""
    import pandas as pd

    inputs = table.inputs
    share = table.repeated / table.total if table.total else 0.0
    allowed, q, source = duplicate_bound(inputs.model, inputs.measurements, inputs.rows)
    frame = pd.DataFrame({"duplicate_share": [share], "allowed": [allowed]})
    return expectations_result("duplicates", frame, [
        Expectation(NO_BOUND, {"column_A": "allowed", "column_B": "duplicate_share",
                               "or_equal": True})],
        inputs.dataset, {"duplicate_share": round(float(share), 5),
                         "allowed": round(float(allowed), 5),
                         "collision_probability": float(q), "bound_from": source})


def worst(records: list[dict], value: str, name: str) -> dict:
    """The figures a check charts over runs: `<name>` the largest `value` among `records` and
    `<name>_tolerance` that record's tolerance, and `<name>_ratio` the largest value / tolerance
    (above 1: outside its tolerance), all floats; nothing when there is no record."""
    if not records:
        return {}
    top = max(records, key=lambda r: r[value])
    ratios = [r[value] / r["tolerance"] for r in records if r["tolerance"] > 0]
    return {name: float(top[value]), f"{name}_tolerance": float(top["tolerance"]),
            **({f"{name}_ratio": round(float(max(ratios)), 5)} if ratios else {})}


# ---- the registry --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """A check: `module` holds its function, named as the check, which takes the
    `SyntheticTable` and returns a `CheckResult` (a module of this package, or a dotted path for
    a check that lives elsewhere); `severity` ("ERROR" or "WARN"); whether a failure blocks the
    assets downstream of `synthetic`; `rows`: it reads rows of the table
    (`SyntheticTable.frame`), so it runs while the table's connection is open (`run_all`); the
    others judge `SyntheticTable`'s aggregates only; `settings`: its settings model (none yet takes
    any: `plugins.NO_SETTINGS`). Adding a check is its module plus one line in `CHECKS`."""

    name: str
    module: str
    severity: str
    blocking: bool
    rows: bool = False
    settings: str = NO_SETTINGS

    @property
    def run(self) -> Callable[[SyntheticTable], CheckResult]:
        """The check's function: `name` of its module."""
        return getattr(plugin_module(CHECKS, self.name, __package__, "check"), self.name)

    @property
    def description(self) -> str:
        """The first line of the check function's docstring."""
        return (self.run.__doc__ or "").strip().splitlines()[0]


CHECKS = {c.name: c for c in (
    Check("schema", "suites", "ERROR", True, rows=True),
    Check("domain", "suites", "ERROR", True),
    Check("row_count", "suites", "ERROR", False),
    Check("null_fraction", "suites", "WARN", False),
    Check("one_way_tvd", "suites", "WARN", False),
    Check("marginal_tvd", "suites", "WARN", False),
    Check("duplicates", "suites", "WARN", False),
    Check("constraints", "constraints", "ERROR", False, rows=True),
)}


def run_all(connect, inputs: CheckInputs, log=None) -> Iterator[CheckResult]:
    """Every check of `CHECKS`, in order, as each finishes. `connect()` opens a read-only DuckDB
    connection (a context manager) on which the table's aggregates are computed
    (`SyntheticTable.read`); the checks that read rows (`Check.rows`) run while it is open, the
    others on the aggregates afterwards. `log`, if given, gets a line when each check
    starts and one with its verdict and duration when it ends (public: a check reads only the
    synthetic table and the public plan and measurements)."""
    import time

    def run(name: str, table: SyntheticTable) -> CheckResult:
        if log is not None:
            log(f"check {name}: started")
        started = time.perf_counter()
        result = CHECKS[name].run(table)
        if log is not None:
            log(f"check {name}: {'passed' if result.passed else 'failed'} in "
                f"{time.perf_counter() - started:.1f}s")
        return result

    rows = [name for name, check in CHECKS.items() if check.rows]
    with connect() as con:
        table = SyntheticTable.read(con, inputs)
        for name in rows:
            yield run(name, table)
    for name in CHECKS:
        if name not in rows:
            yield run(name, table)


def publish(result: CheckResult, checks_dir: Path, docs_dir: Path) -> dict:
    """Store GX's result as `<checks_dir>/<name>.json`, render it into the Data Docs site in
    `docs_dir` unless its pages are written already, and return the check's metadata with the
    failed expectations and both paths. A rendering failure does not change the verdict: it is
    reported in the metadata (`data_docs_error`)."""
    from ..infra.store import location

    path = write_outcome(result.outcome, location(checks_dir) / f"{result.name}.json")
    metadata = dict(result.metadata)
    if not result.rendered:
        try:
            write_data_docs(result.outcome, docs_dir)
        except Exception as e:  # noqa: BLE001 - docs are a view of the verdict, not the verdict
            metadata["data_docs_error"] = f"{type(e).__name__}: {e}"
    failures = [f"{r.name}({r.kwargs.get('column', '')})"
                for r in result.outcome.results if not r.success]
    return {**metadata, "data_docs": Path(docs_dir) / "index.html",
            "failed_expectations": failures, "gx_result": path}
