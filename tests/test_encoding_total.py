"""Every encoding is total: outliers, sentinels, infinities and NaN get a code by the documented
rule (domain.py) and never a DuckDB error, which would quote the value. Checked against a numpy
reference over adversarial values (boundaries, one ulp inside and outside, huge, tiny, negative
zero), in the encoded view, in the preprocessing keys, and end to end through a real run whose
public outputs must not mention the planted values."""

import datetime as dt
import json
import math

import dagster as dg
import duckdb
import numpy as np
import pyarrow as pa
import pytest

from dp_synth_assets.core.config import ColumnSpec
from dp_synth_assets.core.domain import Derived, build_plan, encode_view_sql
from dp_synth_assets.core.source import count_fallbacks
from dp_synth_assets.core.preprocess import (CALENDAR_CELLS, CALENDAR_FIRST_HOUR, PRIVTREE_CELLS,
                                             Task, bucket_edges, exact_aggregates,
                                             privtree_cell_width)
from tests.helpers import make_project, without_random_ids

INF, NAN = math.inf, math.nan
HUGE = 123456789012345.67


def adversarial(low: float, high: float, bins: int) -> list[float | None]:
    """Bounds, bin edges and their float neighbours, huge, tiny, signed zeros, +-inf, NaN, NULL."""
    width = (high - low) / bins
    edges = [low + k * width for k in range(bins + 1)]
    near = [x for e in edges for x in (np.nextafter(e, -INF), e, np.nextafter(e, INF))]
    return [float(x) for x in near] + [
        0.0, -0.0, 5e-324, -5e-324, 1e-300, -1e-300, HUGE, -HUGE, 9e18, -9e18, 1e300, -1e300,
        1.7976931348623157e308, -1.7976931348623157e308, INF, -INF, NAN, None,
        low - 0.5, high + 0.5, (low + high) / 2]


def encode(con, plan, values: dict[str, list], types: dict[str, str]) -> dict[str, np.ndarray]:
    """The codes of `values` (one list per column, SQL `types`) through the encoded view."""
    con.execute("CREATE OR REPLACE TABLE src (" + ", ".join(
        f'"{c}" {t}' for c, t in types.items()) + ")")
    insert(con, "src", values, types)
    con.execute(encode_view_sql(plan, "enc", "src"))
    return {c: np.asarray(v) for c, v in con.execute("SELECT * FROM enc").fetchnumpy().items()}


ARROW = {"DOUBLE": pa.float64(), "BIGINT": pa.int64(), "VARCHAR": pa.string()}


def insert(con, table: str, values: dict[str, list], types: dict[str, str]) -> None:
    rows = pa.table({c: pa.array(values[c], type=ARROW[t], from_pandas=False)
                     for c, t in types.items()})
    con.register("rows", rows)
    con.execute(f"INSERT INTO {table} SELECT * FROM rows")
    con.unregister("rows")


def reference_binned(v, low, high, bins, null_code):
    if v is None or math.isnan(v):
        return null_code
    c = min(max(v, low), high)
    return min(math.floor((c - low) / ((high - low) / bins)), bins - 1)


def reference_integer(v, low, high, bins, null_code):
    if v is None or math.isnan(v):
        return null_code
    c = min(max(float(np.rint(v)), low), high)  # DuckDB casts doubles half to even, as rint
    return (int(c) - int(low)) * bins // (int(high) - int(low) + 1)


@pytest.fixture()
def con():
    c = duckdb.connect()
    yield c
    c.close()


@pytest.mark.parametrize("low, high, bins", [(0.0, 100.0, 8), (0.0, 1.0, 3), (-1.5, 2.5, 31),
                                             (-1e-3, 7e5, 17)])
def test_float_bins_equal_the_reference_on_adversarial_values(con, low, high, bins):
    plan = build_plan({"x": ColumnSpec(kind="float", bounds=[low, high], bins=bins,
                                       nullable=True)}, ["x"])
    values = adversarial(low, high, bins)
    codes = encode(con, plan, {"x": values}, {"x": "DOUBLE"})["x"]
    expected = [reference_binned(v, low, high, bins, bins) for v in values]
    assert codes.tolist() == expected


@pytest.mark.parametrize("low, high, bins", [(17, 90, 10), (0, 2 ** 53, 4096), (-5, 5, 11),
                                             (1, 8, 8)])
def test_integer_bins_equal_the_reference_on_adversarial_values(con, low, high, bins):
    plan = build_plan({"n": ColumnSpec(kind="integer", bounds=[low, high], bins=bins,
                                       nullable=True)}, ["n"])
    e = plan["n"]
    span = high - low + 1
    edges = [low + -(-k * span // e.bins) for k in range(e.bins + 1)]  # first integer of each bin
    values = adversarial(low, high, e.bins) + [
        float(x) for b in edges for x in (b - 1, b, b + 1)] + [16.5, 17.5, 89.5, 90.5, -2.5, 2.5]
    codes = encode(con, plan, {"n": values}, {"n": "DOUBLE"})["n"]
    expected = [reference_integer(v, e.low, e.high, e.bins, e.null_code) for v in values]
    assert codes.tolist() == expected


def test_bigint_and_text_sources_with_overflowing_values_clamp_without_error(con):
    spec = {"n": ColumnSpec(kind="integer", bounds=[0, 100], bins=10, nullable=True),
            "t": ColumnSpec(kind="integer", bounds=[0, 100], bins=10, nullable=True)}
    plan = build_plan(spec, spec)
    big = [9_000_000_000_000_000_000, 2 ** 63 - 1, -2 ** 63, 50, None]
    text = ["9e18", "1e400", "-1e400", " 50 ", "abc"]
    codes = encode(con, plan, {"n": big, "t": text}, {"n": "BIGINT", "t": "VARCHAR"})
    assert codes["n"].tolist() == [9, 9, 0, 50 * 10 // 101, 10]
    assert codes["t"].tolist() == [9, 9, 0, 50 * 10 // 101, 10]  # "abc" does not cast: NULL


def test_privtree_edges_take_infinities_into_the_outer_bins(con):
    spec = {"x": ColumnSpec(kind="float", bounds=[0, 10], binning="privtree", nullable=True),
            "n": ColumnSpec(kind="integer", bounds=[0, 100], binning="privtree", nullable=True)}
    derived = {"x": Derived(edges=(0.0, 0.5, 2.25, 10.0)), "n": Derived(edges=(0.0, 7.0, 50.0, 100.0))}
    plan = build_plan(spec, spec, derived)
    x = [-INF, -HUGE, -0.0, 0.5, np.nextafter(0.5, 0), 2.25, 10.0, HUGE, INF, NAN, None]
    n = [-INF, -9e18, 6.5, 7.5, 49.5, 50.0, 9e18, INF, 1e300, NAN, None]
    codes = encode(con, plan, {"x": x, "n": n}, {"x": "DOUBLE", "n": "DOUBLE"})
    interior_x, interior_n = [0.5, 2.25], [7.0, 50.0]
    assert codes["x"].tolist() == [3 if v is None or math.isnan(v) else
                                   sum(e <= v for e in interior_x) for v in x]
    assert codes["n"].tolist() == [3 if v is None or math.isnan(v) else
                                   sum(e <= np.rint(v) for e in interior_n) for v in n]


def test_dates_and_timestamps_clamp_infinities_and_far_sentinels_and_null_what_does_not_cast(con):
    spec = {"d": ColumnSpec(kind="datetime", bounds=["2020-01-01", "2020-12-31"], bins=12,
                            type="DATE", nullable=True),
            "s": ColumnSpec(kind="datetime", bounds=["2021-01-01", "2021-01-02"], bins=24,
                            nullable=True)}
    plan = build_plan(spec, spec)
    d = ["infinity", "-infinity", "0001-01-01", "5877641-06-25", "-999999999999", "2020-01-01",
         "2020-12-31", "2020-06-15", "not a date", None]
    s = ["infinity", "-infinity", "0001-01-01 00:00:00", "290000-01-01 00:00:00",
         "-999999999999", "2021-01-01 00:00:00", "2021-01-02 00:00:00", "2021-01-01 12:00:00",
         "2021-01-01 11:59:59", None]
    codes = encode(con, plan, {"d": d, "s": s}, {"d": "VARCHAR", "s": "VARCHAR"})
    e = plan["d"]
    days = lambda text: (dt.date.fromisoformat(text) - dt.date(1970, 1, 1)).days  # noqa: E731
    expected_d = [11, 0, 0, 11, 12, reference_integer(days("2020-01-01"), e.low, e.high, 12, 12),
                  reference_integer(days("2020-12-31"), e.low, e.high, 12, 12),
                  reference_integer(days("2020-06-15"), e.low, e.high, 12, 12), 12, 12]
    assert codes["d"].tolist() == expected_d
    assert codes["s"].tolist() == [23, 0, 0, 23, 24, 0, 23, 12, 11, 24]
    # the same values in DATE / TIMESTAMP columns (no text): infinities clamp, nothing fails
    con.execute("CREATE OR REPLACE TABLE typed AS SELECT TRY_CAST(d AS DATE) AS d, "
                "TRY_CAST(s AS TIMESTAMP) AS s FROM src")
    con.execute(encode_view_sql(plan, "enc2", "typed"))
    assert [r[0] for r in con.execute("SELECT d FROM enc2").fetchall()] == expected_d


def test_nan_reads_as_null_and_takes_the_fallback_code_in_a_non_nullable_column(con):
    con.execute("CREATE TABLE f AS SELECT * FROM (VALUES (1.0), ('nan'::DOUBLE), ('inf'::DOUBLE)) t(x)")
    nullable = {"x": ColumnSpec(kind="float", bounds=[0, 2], bins=4, nullable=True)}
    assert count_fallbacks(con, "f", nullable, "t").counts == ()
    plan = build_plan(nullable, {"x": "DOUBLE"})
    con.execute(encode_view_sql(plan, "e1", "f"))
    assert [r[0] for r in con.execute("SELECT x FROM e1").fetchall()] == [2, 4, 3]
    for fallback, code in ((None, 0), (1.9, 3)):
        strict = {"x": ColumnSpec(kind="float", bounds=[0, 2], bins=4, fallback=fallback)}
        found = count_fallbacks(con, "f", strict, "t")
        assert [(c, n) for c, _, n in found.counts] == [("x", 1)], found
        con.execute(encode_view_sql(build_plan(strict, {"x": "DOUBLE"}), "e2", "f"))
        assert [r[0] for r in con.execute("SELECT x FROM e2").fetchall()] == [2, code, 3]


def test_preprocessing_keys_clamp_outliers_like_the_reference(con):
    columns = {"x": ColumnSpec(kind="float", binning="privtree", nullable=True),
               "n": ColumnSpec(kind="integer", binning="privtree", nullable=True),
               "d": ColumnSpec(kind="datetime", type="DATE", nullable=True)}
    x = [1.0, 3.5, 100.0, HUGE, -HUGE, INF, -INF, NAN, None, -0.0, 5e-324, 1e308]
    n = [1.0, 3.0, 100.0, 9e18, -9e18, INF, -INF, NAN, None, -0.0, 2.5, 1e308]
    d = ["2020-01-01", "infinity", "-infinity", "0001-01-01", "5877641-06-25", "-999999999999",
         None, "2020-06-01", "1900-01-01", "2101-12-31", "1899-12-31", "2102-01-01"]
    con.execute("CREATE TABLE p (x DOUBLE, n DOUBLE, d VARCHAR)")
    insert(con, "p", {"x": x, "n": n, "d": d}, {"x": "DOUBLE", "n": "DOUBLE", "d": "VARCHAR"})
    spans = {"x": (0.0, 50.0), "n": (0.0, 63.0)}
    tasks = [Task("x", "bounds"), Task("n", "bounds"), Task("d", "calendar"), Task("x", "privtree"),
             Task("n", "privtree")]
    exact = exact_aggregates(con, "p", columns, tasks, spans)

    def present(values):
        return [float(v) for v in values if v is not None and not math.isnan(v)]

    day = lambda s: float((dt.date.fromisoformat(s) - dt.date(1970, 1, 1)).days)  # noqa: E731
    far = {"infinity": INF, "-infinity": -INF, "5877641-06-25": 2e9}  # beyond Python's dates
    days = [far[v] if v in far else day(v) for v in d if v not in (None, "-999999999999")]
    for column, values in [("x", present(x)), ("n", [float(np.rint(v)) for v in present(n)])]:
        edges = bucket_edges(columns[column])  # bucket b: edges[b-1] <= v < edges[b]
        expected = np.bincount(np.searchsorted(edges, values, side="right"),
                               minlength=edges.size + 1)
        buckets = exact[Task(column, "bounds")].reshape(edges.size + 1, -1).sum(axis=1)  # parts
        assert np.array_equal(buckets, expected), column
    # the date's hour cells (calendar descent): 1900-2101, before and after in the outer cells
    cells = [min(max(int(math.floor(v * 24)) - CALENDAR_FIRST_HOUR + 1, 0), CALENDAR_CELLS - 1)
             if math.isfinite(v) else (0 if v < 0 else CALENDAR_CELLS - 1) for v in days]
    assert np.array_equal(exact[Task("d", "calendar")],
                          np.bincount(cells, minlength=CALENDAR_CELLS))
    assert exact[Task("d", "calendar")][[0, -1]].tolist() == [3, 3]  # -inf, 0001, 1899 | ...
    for column, values, integer in [("x", present(x), False),
                                    ("n", [float(np.rint(v)) for v in present(n)], True)]:
        low, high = spans[column]
        width = privtree_cell_width(low, high, integer)
        top = low + PRIVTREE_CELLS * width
        cells = [min(math.floor((min(max(v, low), top) - low) / width), PRIVTREE_CELLS - 1)
                 for v in values]
        expected = np.bincount(cells, minlength=PRIVTREE_CELLS)
        assert np.array_equal(exact[Task(column, "privtree")], expected), column


@pytest.mark.e2e
def test_an_outlier_sentinel_and_infinities_run_end_to_end_and_publish_nothing_of_them(tmp_path):
    """The attack of issue 13: an overflowing income once made DuckDB quote it in the public
    STEP_FAILURE event. Now the run succeeds and no public output mentions the planted values."""
    project = make_project(tmp_path, rows=2000, report=None, columns={
        **json.loads(json.dumps(_example_columns())),
        "age": {"kind": "integer"},                                        # DP bounds
        "income": {"kind": "float", "nullable": True, "binning": "privtree"},  # bounds + PrivTree
        "signup_date": {"kind": "datetime", "type": "DATE", "nullable": True},  # DP bounds
    })
    with duckdb.connect(str(project.warehouse)) as con:
        for age, income, signup in [(9_000_000_000_000_000_000, HUGE, "infinity"),
                                    (-9_000_000_000_000_000_000, INF, "-infinity"),
                                    (40, -INF, "0001-01-01"), (41, NAN, "5877641-06-25"),
                                    (42, -999999999999.0, "2020-01-01")]:
            con.execute("INSERT INTO main.example SELECT * REPLACE (? AS age, ? AS income, "
                        "CAST(? AS DATE) AS signup_date) FROM main.example LIMIT 1",
                        [age, income, signup])
    defs = project.defs_fn()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success
    published = [repr(e) for e in result.all_events]
    published += [p.read_bytes().decode("latin-1") for p in project.public.rglob("*") if p.is_file()]
    text = "\n".join(published).lower()
    text = without_random_ids(text)  # '9e18' once sat inside a UUID's hex
    for planted in ["123456789012345", "1.2345678901234", "1.23456789e+14", "9000000000000000000",
                    "9e+18", "9.0e+18", "9e18", "-999999999999", "5877641", "0001-01-01"]:
        assert planted not in text, planted


def _example_columns() -> dict:
    from tests.helpers import example_entry

    return example_entry()["columns"]


@pytest.mark.parametrize("spec", [
    dict(kind="float", bounds=[-3.0, 7.5], bins=7),
    dict(kind="integer", bounds=[-20, 1000], bins=13),
    dict(kind="integer", bounds=[0, 6], bins=50),
    dict(kind="datetime", bounds=["2020-01-01", "2020-03-01"], bins=9, type="DATE"),
    dict(kind="datetime", bounds=["2020-01-01", "2020-01-02 12:00:00"], bins=5),
])
def test_a_declared_fallback_takes_the_code_its_value_gets_in_sql(con, spec):
    """The fallback's code (computed in Python, `domain.value_code`) is the code the SQL
    encoding gives a row holding that value, over values inside, on the edges of and outside
    the bounds (brute force against the encoding itself, not a formula)."""
    rng = np.random.default_rng(3)
    if spec["kind"] == "datetime":
        start = dt.datetime(2019, 12, 20)
        values = [start + dt.timedelta(hours=float(h)) for h in rng.uniform(0, 24 * 90, 60)]
        values += [dt.datetime(2020, 1, 1), dt.datetime(2020, 3, 1)]
        if spec.get("type") == "DATE":
            values = [v.date() for v in values]
    else:
        low, high = spec["bounds"]
        values = list(rng.uniform(low - 5, high + 5, 60)) + [low, high, low - 0.5, high + 0.5]
        if spec["kind"] == "integer":
            values += [2.5, 3.5, -0.5]  # halves round to even, as DuckDB's round_even
    for value in values:
        strict = {"x": ColumnSpec(**spec, nullable=False, fallback=value)}
        plan = build_plan(strict, {"x": "DOUBLE"})
        con.execute("CREATE OR REPLACE TABLE one AS SELECT ? AS x", [value])
        con.execute(encode_view_sql(plan, "e1", "one"))
        assert con.execute("SELECT x FROM e1").fetchone()[0] == plan["x"].fallback, value
