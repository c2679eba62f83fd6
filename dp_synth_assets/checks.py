"""Great Expectations checks on `synthetic`, as Dagster asset checks (public zone).

The suites are built from the dataset spec, the encoding plan and the noisy measurements only;
they read the synthetic table and never the source. Each check runs one GX 1.x suite
(`core.validation.run_suite`), stores GX's validation result as JSON under
`<public_dir>/<dataset>/checks/`, and reports a Dagster `AssetCheckResult`:

- `schema` (ERROR, blocking): the synthetic table has the source's columns, in order, with the
  source's SQL types, in the warehouse table and in the Parquet copy.
- `domain` (ERROR, blocking): categorical values among the plan's categories, rare members or
  the `other` label; numbers and dates inside the plan's bounds.
- `row_count` (ERROR): the requested number of rows.
- `null_fraction` (WARN): each nullable column's NULL share within a tolerance of the noisy
  estimate from the measured 1-way marginal (see `tolerances`).
- `one_way_tvd` (WARN): each column's 1-way distribution within a TVD tolerance of its noisy
  measurement (see `tolerances`).
- `marginal_tvd` (WARN): the same for every measured marginal of two or more columns, on the
  synthetic table's encoded codes; each tolerance comes from that measurement's own noise scale.
- `duplicates` (WARN): the share of rows that repeat an earlier row (on the encoded codes) below
  the bound the model implies (see `duplicate_bound`), so a generator that copies rows wholesale
  is caught.

At ten million rows the checks hold at most `FRAME_BYTES` of the table in pandas at a time: the
per-column suites (domain, null_fraction) run on groups of columns, one GX suite and Data Docs
page per group when the table does not fit in one frame, and the distribution checks read
counts that DuckDB aggregates (`marginals.count_marginals`, `marginals.repeated_rows`).
"""


import dagster as dg
import numpy as np
import pandas as pd

from resources.warehouse import WarehouseResource

from .core import marginals as margs
from .core.config import DatasetSpec
from .core.domain import EncodingPlan, allowed_values, encoded_columns, value_bounds
from .evaluation.fidelity import marginal_tvd, noisy_distribution
from .core.measure import Measurement
from .core.sql import ident, literal, sql

CHECKS = {  # name -> (severity, blocking)
    "schema": (dg.AssetCheckSeverity.ERROR, True),
    "domain": (dg.AssetCheckSeverity.ERROR, True),
    "row_count": (dg.AssetCheckSeverity.ERROR, False),
    "null_fraction": (dg.AssetCheckSeverity.WARN, False),
    "one_way_tvd": (dg.AssetCheckSeverity.WARN, False),
    "marginal_tvd": (dg.AssetCheckSeverity.WARN, False),
    "duplicates": (dg.AssetCheckSeverity.WARN, False),
}
Z = 4.0           # sampling allowance in standard deviations (false alarm < 1e-4 per cell)
FIT_SLACK = 0.01  # allowance for the estimator not matching a measurement exactly
FRAME_BYTES = 64 * 2 ** 20  # the most of the synthetic table one GX frame holds


def tolerances(m: Measurement, noisy_total: float, rows: int) -> tuple[float, np.ndarray]:
    """TVD tolerance of a 1-way marginal and per-cell tolerances of its shares.

    A synthetic share differs from the noisy measured share by (a) sampling `rows` rows, standard
    deviation sqrt(p(1-p)/rows) per cell, allowed Z of them; (b) the estimator fitting a
    non-negative distribution to noisy counts: at most about the noise per cell, sigma / noisy_total
    (clipped negatives, least-squares compromise between overlapping measurements); (c) FIT_SLACK.
    """
    p = noisy_distribution(m)
    n = max(noisy_total, 1.0)
    per_cell = Z * np.sqrt(p * (1 - p) / rows) + m.sigma / n
    return float(0.5 * per_cell.sum() + FIT_SLACK), per_cell + FIT_SLACK / 2


def marginal_tolerance(m: Measurement, noisy_total: float, rows: int) -> float:
    """TVD tolerance of a measured marginal (`marginal_tvd`): a bound on the expected TVD plus Z
    standard deviations. Per cell, the synthetic share differs from the noisy share by sampling
    (sd s_i = sqrt(p_i (1 - p_i) / rows)) plus the measurement's noise (sd sigma / noisy_total; the
    model sits between the truth and the noisy counts); each |difference| has expectation at
    most sqrt(2/pi) (s_i + sigma / noisy_total) and variance at most s_i^2 + (sigma / noisy_total)^2, and the
    TVD is half their sum over the cells, a sum of many small terms that concentrates around its
    mean. FIT_SLACK covers what the estimator cannot reproduce (conflicting measurements)."""
    p = noisy_distribution(m).ravel()
    n = max(noisy_total, 1.0)
    s = np.sqrt(p * (1 - p) / max(rows, 1))
    noise = m.sigma / n
    mean = 0.5 * np.sqrt(2 / np.pi) * float((s + noise).sum())
    sd = 0.5 * float(np.sqrt((s ** 2 + noise ** 2).sum()))
    return mean + Z * sd + FIT_SLACK


def duplicate_bound(model, measurements: list[Measurement], rows: int) -> tuple[float, float, str]:
    """(allowed share of repeated rows, collision probability q, where q comes from).

    Two independent rows from a distribution P are equal with probability q = sum_x P(x)^2, so a
    sample of `rows` rows has C(rows, 2) q colliding pairs in expectation, and at most that many
    rows repeat an earlier one. For a clique-tree model (pgm, parallel_pgm) q is the model's own
    (`tree.collision_probability`); for gum, whose rows come from the updates rather than a
    distribution, q is bounded by the smallest sum_v p_C(v)^2 over the noisy measured marginals
    (merging cells only raises the collision probability, so every marginal's q bounds the joint
    one). Allowed: the expected pairs plus Z standard deviations (Poisson), plus Z rows."""
    from .core.generate import GumModel
    from .core.generate.tree import CliqueTree, collision_probability

    if isinstance(model, CliqueTree):
        q, source = collision_probability(model), "the fitted model"
    else:
        q = min(float((noisy_distribution(m) ** 2).sum()) for m in measurements)
        source = "the measured marginals (upper bound)" if isinstance(model, GumModel) else "marginals"
    pairs = rows * (rows - 1) / 2 * q
    allowed = (pairs + Z * np.sqrt(pairs) + Z) / max(rows, 1)
    return float(min(allowed, 1.0)), float(q), source


def _check(name: str, frame: pd.DataFrame, expectations: list, warehouse: WarehouseResource,
           dataset: str, asset_key, metadata: dict) -> dg.AssetCheckResult:
    """Run one suite (a suite with nothing to check, e.g. no nullable column, passes vacuously)."""
    from .core.validation import SuiteOutcome, run_suite

    if expectations:
        outcome = run_suite(frame, f"{dataset}_{name}", expectations)
    else:
        outcome = SuiteOutcome(f"{dataset}_{name}", True, [],
                               {"success": True, "note": "nothing to check"})
    return _suite_result(name, outcome, warehouse, dataset, asset_key, metadata)


def data_docs_dir(warehouse: WarehouseResource, dataset: str):
    """GX Data Docs of the checks (a static site: open index.html): public/<dataset>/data_docs."""
    return warehouse.public_path(dataset, "data_docs/index.html").parent


def _suite_result(name: str, outcome, warehouse: WarehouseResource, dataset: str, asset_key,
                  metadata: dict, rendered: bool = False) -> dg.AssetCheckResult:
    """Store the GX result as JSON and render it into the Data Docs site (unless `rendered`
    already: the schema check's two suites render themselves). A rendering failure does not
    change the verdict: it is reported in the metadata."""
    from .core.validation import write_data_docs, write_outcome

    path = warehouse.public_path(dataset, f"checks/{name}.json")
    write_outcome(outcome, path)
    docs = data_docs_dir(warehouse, dataset)
    if not rendered:
        try:
            write_data_docs(outcome, docs)
        except Exception as e:  # noqa: BLE001 - docs are a view of the verdict, not the verdict
            metadata = {**metadata, "data_docs_error": f"{type(e).__name__}: {e}"}
    metadata = {**metadata, "data_docs": dg.MetadataValue.path(str(docs / "index.html"))}
    severity, _ = CHECKS[name]
    failures = [f"{r.name}({r.kwargs.get('column', '')})" for r in outcome.results if not r.success]
    return dg.AssetCheckResult(
        asset_key=asset_key, check_name=name, passed=bool(outcome.success), severity=severity,
        metadata={**metadata, "failed_expectations": dg.MetadataValue.json(failures),
                  "gx_result": dg.MetadataValue.path(str(path))},
    )


def run_checks(warehouse: WarehouseResource, dataset: str, plan: EncodingPlan,
               measurements: list[Measurement], noisy_total: float, rows: int, table: str,
               parquet: str, model=None, frame_bytes: int = FRAME_BYTES):
    """Yield one AssetCheckResult per check in CHECKS.

    Memory does not grow with the table beyond `frame_bytes`: the row-level suites (domain, NULL
    fractions, row count) run GX on frames of a few columns at a time (`column_groups`), strings
    as pandas categoricals, and the distribution checks (1-way and measured marginals, repeated
    rows) run on counts that DuckDB aggregates from the Parquet copy in one scan each."""
    from .core.validation import Expectation, run_suite

    asset_key = dg.AssetKey([dataset, "synthetic"])
    source = f"read_parquet({literal(parquet)})"
    docs = data_docs_dir(warehouse, dataset)
    with warehouse.connect(read_only=True) as con:
        present = [r[0] for r in con.execute(sql("describe_source", source=source)).fetchall()]
        total = con.execute(sql("count_rows", source=source)).fetchone()[0]
        groups = column_groups([c for c in plan.columns if c in present], total, frame_bytes)
        types = pd.DataFrame({
            "column": plan.columns,
            "expected": [e.sql_type for e in plan.encodings],
            "warehouse": _types(con, ident(table), plan.columns),
            "parquet": _types(con, source, plan.columns),
        })

        # schema: column names and order of the table, SQL types of the table and the Parquet copy
        outcome = run_suite(types, f"{dataset}_schema", [
            Expectation("ExpectColumnPairValuesToBeEqual", {"column_A": "expected", "column_B": "warehouse"}),
            Expectation("ExpectColumnPairValuesToBeEqual", {"column_A": "expected", "column_B": "parquet"}),
        ], docs_dir=docs)
        head = read_frame(con, source, present, limit=1000)
        columns_outcome = run_suite(head, f"{dataset}_columns", [
            Expectation("ExpectTableColumnsToMatchOrderedList", {"column_list": plan.columns})],
            docs_dir=docs)
        success = outcome.success and columns_outcome.success
        merged = type(outcome)(outcome.suite, success, outcome.results + columns_outcome.results,
                               {"success": success, "types": outcome.raw, "columns": columns_outcome.raw})
        yield _suite_result("schema", merged, warehouse, dataset, asset_key, {
            "types": dg.MetadataValue.json(types.to_dict(orient="records"))}, rendered=True)

        # domain
        by_column = {}
        for e in plan.encodings:
            if e.kind == "categorical":
                by_column[e.column] = Expectation("ExpectColumnValuesToBeInSet", {
                    "column": e.column, "value_set": allowed_values(e)})
            elif e.kind == "boolean":
                by_column[e.column] = Expectation("ExpectColumnValuesToBeInSet", {
                    "column": e.column, "value_set": [False, True]})
            else:
                low, high = value_bounds(e)
                by_column[e.column] = Expectation("ExpectColumnValuesToBeBetween", {
                    "column": e.column, "min_value": _bound(low), "max_value": _bound(high)})
        yield _grouped_check("domain", con, source, groups, by_column, warehouse, dataset,
                             asset_key, {})

        # row count, on a frame of one column
        narrow = read_frame(con, source, present[:1])
        yield _check("row_count", narrow,
                     [Expectation("ExpectTableRowCountToEqual", {"value": rows})],
                     warehouse, dataset, asset_key, {"requested_rows": rows})
        del narrow

        one_way = {m.clique[0]: m for m in measurements if len(m.clique) == 1}
        # null fractions
        by_column, shown = {}, {}
        for e in plan.encodings:
            if not e.nullable or e.column not in one_way:
                continue
            m = one_way[e.column]
            _, per_cell = tolerances(m, noisy_total, rows)
            p = float(noisy_distribution(m)[e.null_code])
            low = float(max(p - per_cell[e.null_code], 0.0))
            high = float(min(p + per_cell[e.null_code], 1.0))
            shown[e.column] = {"expected": round(p, 4), "low": round(low, 4), "high": round(high, 4)}
            by_column[e.column] = [
                Expectation("ExpectColumnValuesToBeNull", {"column": e.column, "mostly": low}),
                Expectation("ExpectColumnValuesToNotBeNull",
                            {"column": e.column, "mostly": round(1.0 - high, 12)})]
        # BASIC: the NULL share without GX's value counts of the "unexpected" (non-NULL) values,
        # which for ten million floats took 10 s and 800 MB
        yield _grouped_check("null_fraction", con, source, groups, by_column, warehouse, dataset,
                             asset_key, {"bounds": dg.MetadataValue.json(shown)},
                             result_format="BASIC")

        # the distribution checks read counts of the encoded table, aggregated by DuckDB
        encoded = sql("encoded_relation", expressions=encoded_columns(plan), source=source)
        cliques = [(c,) for c in one_way if c in present] + [
            m.clique for m in measurements
            if len(m.clique) >= 2 and all(a in present for a in m.clique)]
        with margs.narrow_codes(con, encoded, plan.columns, plan.domain) as codes:
            counts = margs.count_marginals(con, codes, plan.columns, cliques, plan.domain) \
                if cliques else {}
            repeated = margs.repeated_rows(con, codes, plan.domain) if present else 0

    # 1-way TVD against the noisy measurements
    records = []
    for e in plan.encodings:
        if (e.column,) not in counts:
            continue
        m = one_way[e.column]
        tvd = marginal_tvd(counts[(e.column,)], m)
        records.append({"column": e.column, "tvd": round(tvd, 5),
                        "tolerance": round(tolerances(m, noisy_total, rows)[0], 5)})
    frame = pd.DataFrame(records, columns=["column", "tvd", "tolerance"])
    yield _check("one_way_tvd", frame, [
        Expectation("ExpectColumnPairValuesAToBeGreaterThanB",
                    {"column_A": "tolerance", "column_B": "tvd", "or_equal": True})],
        warehouse, dataset, asset_key, {"tvd": dg.MetadataValue.json(records)})

    # every measured marginal of two or more columns against its noisy measurement
    records = []
    for m in measurements:
        if len(m.clique) < 2 or m.clique not in counts:
            continue
        tvd = marginal_tvd(counts[m.clique], m)
        records.append({"marginal": " x ".join(m.clique), "tvd": round(tvd, 5),
                        "tolerance": round(marginal_tolerance(m, noisy_total, rows), 5)})
    frame = pd.DataFrame(records, columns=["marginal", "tvd", "tolerance"])
    yield _check("marginal_tvd", frame, [
        Expectation("ExpectColumnPairValuesAToBeGreaterThanB",
                    {"column_A": "tolerance", "column_B": "tvd", "or_equal": True})]
        if records else [], warehouse, dataset, asset_key, {"tvd": dg.MetadataValue.json(records)})

    # repeated rows against the bound the model implies
    share = repeated / total if total else 0.0
    allowed, q, source = duplicate_bound(model, measurements, rows)
    frame = pd.DataFrame({"duplicate_share": [share], "allowed": [allowed]})
    yield _check("duplicates", frame, [
        Expectation("ExpectColumnPairValuesAToBeGreaterThanB",
                    {"column_A": "allowed", "column_B": "duplicate_share", "or_equal": True})],
        warehouse, dataset, asset_key, {
            "duplicate_share": dg.MetadataValue.float(round(share, 5)),
            "allowed": dg.MetadataValue.float(round(allowed, 5)),
            "collision_probability": dg.MetadataValue.float(q), "bound_from": source})


def column_groups(columns: list[str], rows: int, frame_bytes: int = FRAME_BYTES) -> list[list[str]]:
    """The columns in consecutive groups whose frame of `rows` rows stays under `frame_bytes`,
    counting 8 bytes a cell (numbers and dates; category codes take less): one group for small
    tables, a column or a few at a time for large ones."""
    per_group = max(1, frame_bytes // max(8 * rows, 1))
    return [columns[i:i + per_group] for i in range(0, len(columns), per_group)] or [[]]


def read_frame(con, source: str, columns: list[str], limit: int | None = None) -> pd.DataFrame:
    """Columns of a relation as pandas, through Arrow: text as categoricals (a code per row
    instead of a Python string object), integers as int64 and times as datetime64[ns], the dtypes
    GX's pandas engine compares vectorized (others go through a Python call per value: 2.6 s per
    million dates)."""
    import pyarrow as pa

    if not columns:
        return pd.DataFrame()
    table = con.sql(sql("read_columns", columns=", ".join(ident(c) for c in columns), source=source,
                        limit="ALL" if limit is None else int(limit))).to_arrow_table()
    for i, field in enumerate(table.schema):
        column = table.column(i)
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            column = column.dictionary_encode()
        elif pa.types.is_integer(field.type):
            column = column.cast(pa.int64())
        elif pa.types.is_date(field.type):
            column = column.cast(pa.timestamp("ns"))
        table = table.set_column(i, field.name, column)
    return table.to_pandas(coerce_temporal_nanoseconds=True)


def _release_memory() -> None:
    """Free a group's frame now: GX's validation objects form reference cycles that keep the
    frame alive until Python's cycle collector runs, so without this resident memory grew by
    about a frame per group (1.4 GB over 15 groups at ten million rows)."""
    import gc

    gc.collect()


def _grouped_check(name: str, con, source: str, groups: list[list[str]], by_column: dict,
                   warehouse: WarehouseResource, dataset: str, asset_key,
                   metadata: dict, result_format: str = "SUMMARY") -> dg.AssetCheckResult:
    """One check whose expectations are per column, run group by group (`column_groups`): one GX
    suite per group, `<dataset>_<name>` when one group holds them all, else `_part<k>`; each suite
    has its Data Docs page, and the check passes when every suite does."""
    from .core.validation import SuiteOutcome, run_suite

    def flat(column):
        found = by_column.get(column, [])
        return found if isinstance(found, list) else [found]

    parts = [g for g in groups if any(flat(c) for c in g)]
    if not parts:
        return _check(name, pd.DataFrame(), [], warehouse, dataset, asset_key, metadata)
    docs = data_docs_dir(warehouse, dataset)
    outcomes = []
    for k, group in enumerate(parts, start=1):
        frame = read_frame(con, source, [c for c in group if flat(c)])
        suite = f"{dataset}_{name}" if len(parts) == 1 else f"{dataset}_{name}_part{k}"
        outcomes.append(run_suite(frame, suite, [x for c in group for x in flat(c)],
                                  result_format=result_format, docs_dir=docs))
        del frame
        _release_memory()
    if len(outcomes) == 1:
        merged = outcomes[0]
    else:
        success = all(o.success for o in outcomes)
        merged = SuiteOutcome(f"{dataset}_{name}", success,
                              [r for o in outcomes for r in o.results],
                              {"success": success, "parts": [o.raw for o in outcomes]})
    return _suite_result(name, merged, warehouse, dataset, asset_key,
                         {**metadata, "suites": len(outcomes)}, rendered=True)


def _types(con, relation: str, columns: list[str]) -> list[str]:
    try:
        found = {r[0]: r[1]
                 for r in con.execute(sql("describe_source", source=relation)).fetchall()}
    except Exception:  # noqa: BLE001 - an absent table shows as missing types
        found = {}
    return [found.get(c, "missing") for c in columns]


def _bound(value):
    """Bounds as GX compares them with the frame's values: dates as pandas Timestamps."""
    return pd.Timestamp(value) if hasattr(value, "isoformat") else value


def build_synthetic_checks(dataset: str, spec: DatasetSpec) -> dg.AssetChecksDefinition:
    asset_key = dg.AssetKey([dataset, "synthetic"])
    specs = [dg.AssetCheckSpec(name, asset=asset_key, blocking=blocking,
                               description=(run_checks.__doc__ or "").strip())
             for name, (_, blocking) in CHECKS.items()]

    @dg.multi_asset_check(specs=specs, name=f"{dataset}_synthetic_checks",
                          description="Great Expectations suites on the synthetic table.")
    def synthetic_checks(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource):
        from .pipeline import load_measurements, load_plan, requested_rows, synthetic_table

        plan = load_plan(warehouse, dataset)
        found, noisy_total = load_measurements(warehouse, dataset)
        rows = requested_rows(spec, noisy_total)
        parquet = str(warehouse.public_path(dataset, "synthetic.parquet"))
        model_path = warehouse.public_path(dataset, "model.npz")
        from .core import generate

        model = generate.load(str(model_path)) if model_path.exists() else None
        yield from run_checks(warehouse, dataset, plan, found, noisy_total, rows,
                              synthetic_table(dataset), parquet, model)

    return synthetic_checks
