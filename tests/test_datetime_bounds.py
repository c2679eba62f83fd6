"""DP bounds of datetimes: the calendar descent (years -> months -> days -> hours) of
`preprocess.calendar_bounds`, on real DuckDB tables (no Dagster): the bounds land on the unit
the rows allow, DATE columns stop at whole days, every level is charged its OpenDP map, and the
exact hour histogram and every level's histogram move by at most the charged L2 sensitivity
between neighbouring tables (brute force)."""

import datetime as dt
import math
from contextlib import nullcontext

import duckdb
import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.core import preprocess as pp
from dp_synth_assets.core.config import ColumnSpec
from dp_synth_assets.core.domain import build_plan, decode, encode_view_sql
from dp_synth_assets.core.opendp_api import dp

from helpers import ChargeRecorder, without_consistency

EPOCH = dt.datetime(1970, 1, 1)


def days(stamp: str) -> float:
    return (dt.datetime.fromisoformat(stamp) - EPOCH).total_seconds() / 86400


def exact_hours(con, relation: str, column: str, spec: ColumnSpec) -> np.ndarray:
    task = pp.Task(column, "calendar")
    return pp.exact_aggregates(con, relation, {column: spec}, [task], {})[task]


@pytest.fixture()
def con():
    c = duckdb.connect()
    yield c
    c.close()


def load(con, name: str, frame: pd.DataFrame) -> str:
    con.register("frame", frame)
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM frame")
    con.unregister("frame")
    return name


def test_a_datetime_without_bounds_descends_and_a_number_keeps_its_buckets():
    assert pp.mechanisms("t", ColumnSpec(kind="datetime")) == [pp.Task("t", "calendar")]
    assert pp.mechanisms("d", ColumnSpec(kind="datetime", type="DATE"))[0].mechanism == "calendar"
    assert pp.mechanisms("x", ColumnSpec(kind="float"))[0] == pp.Task("x", "bounds")
    declared = ColumnSpec(kind="datetime", bounds=["2024-01-01", "2024-02-01"])
    assert all(t.mechanism != "calendar" for t in pp.mechanisms("t", declared))


def test_a_month_of_timestamps_is_bounded_by_that_month_and_decodes_inside_it(con):
    rng = np.random.default_rng(0)
    stamps = pd.Timestamp("2024-03-01") + pd.to_timedelta(rng.random(20000) * 31 * 86400, unit="s")
    relation = load(con, "month", pd.DataFrame({"t": stamps}))
    spec = ColumnSpec(kind="datetime")
    charge = ChargeRecorder()
    (low, high), pieces = pp.calendar_bounds(exact_hours(con, relation, "t", spec), "t", spec,
                                             0.05, charge)
    assert (low, high) == (days("2024-03-01"), days("2024-04-01"))
    assert all(low <= a <= b <= high for a, b, _ in pieces)
    purposes = [p["purpose"] for _, p in charge.calls]
    assert purposes[:3] == ["DP bounds (calendar years)", "DP bounds (calendar months)",
                            "DP bounds (calendar days)"]
    # before: year buckets, 2024 whole; the same rows through the whole preprocessing stage
    columns = {"t": spec}
    derived = pp.preprocess(con, relation, columns, 0.5, 0.0, ChargeRecorder())
    plan = build_plan(columns, columns, derived)
    con.execute(encode_view_sql(plan, "month_enc", relation))
    back = decode(plan, con.execute("SELECT * FROM month_enc").fetchnumpy(),
                  np.random.default_rng(1)).column("t").to_pylist()
    assert all(dt.datetime(2024, 3, 1) <= v <= dt.datetime(2024, 4, 1) for v in back)


def test_a_few_days_at_hour_resolution_get_hour_bounds(con):
    rng = np.random.default_rng(1)
    # 2024-03-04 06:00 to 2024-03-06 21:59: the bounds are those hours, not the days around them
    start = pd.Timestamp("2024-03-04 06:00")
    seconds = rng.random(20000) * (pd.Timestamp("2024-03-06 22:00") - start).total_seconds()
    relation = load(con, "hours", pd.DataFrame({"t": start + pd.to_timedelta(seconds, unit="s")}))
    spec = ColumnSpec(kind="datetime")
    charge = ChargeRecorder()
    (low, high), _ = pp.calendar_bounds(exact_hours(con, relation, "t", spec), "t", spec, 1.0,
                                        charge)
    assert (low, high) == (days("2024-03-04T06:00"), days("2024-03-06T22:00"))
    assert charge.calls[-1][1]["purpose"] == "DP bounds (calendar hours)"


def test_a_date_column_bins_whole_days_and_never_descends_to_hours(con):
    first = dt.date(2021, 5, 3)
    dates = [first + dt.timedelta(days=int(k)) for k in np.arange(30000) % 40]
    relation = load(con, "dates", pd.DataFrame({"d": dates}))
    spec = ColumnSpec(kind="datetime", type="DATE")
    charge = ChargeRecorder()
    (low, high), pieces = pp.calendar_bounds(exact_hours(con, relation, "d", spec), "d", spec,
                                             1.0, charge)
    # integer bounds, `high` the last day inside (2021-06-11), as a declared DATE's
    assert (low, high) == (days("2021-05-03"), days("2021-06-11"))
    assert all(float(x).is_integer() for a, b, _ in pieces for x in (a, b))
    assert not any("hours" in p["purpose"] for _, p in charge.calls)
    assert math.isclose(charge.rho, 1.0, rel_tol=1e-9)


def test_an_early_stop_spends_the_rest_on_the_last_level_and_the_task_spends_its_rho(con):
    """Twelve rows across two years at a tiny rho: the years are not informative, so the
    descent stops there; the rest of the rho measures the years again."""
    stamps = pd.to_datetime([f"20{y}-0{m}-15" for y in (10, 11) for m in range(1, 7)])
    relation = load(con, "few", pd.DataFrame({"t": stamps}))
    spec = ColumnSpec(kind="datetime")
    charge = ChargeRecorder()
    pp.calendar_bounds(exact_hours(con, relation, "t", spec), "t", spec, 1e-3, charge)
    purposes = [p["purpose"] for _, p in charge.calls]
    assert purposes[-1].endswith(", again)") and len(purposes) < len(pp.CALENDAR_UNITS) + 1
    assert math.isclose(charge.rho, 1e-3, rel_tol=1e-9)


@pytest.mark.parametrize("rho", [1e-4, 0.02, 3.0])
def test_each_level_is_charged_its_opendp_map_at_its_scale(con, rho):
    rng = np.random.default_rng(2)
    stamps = pd.Timestamp("2019-07-01") + pd.to_timedelta(rng.random(5000) * 200, unit="D")
    relation = load(con, "levels", pd.DataFrame({"t": stamps}))
    spec = ColumnSpec(kind="datetime")
    charge = ChargeRecorder()
    pp.calendar_bounds(exact_hours(con, relation, "t", spec), "t", spec, rho, charge)
    for spend, params in charge.calls:
        meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                                  dp.l2_distance(T="i64"), scale=spend.scale)
        assert spend.rho == pytest.approx(float(meas.map(1)), rel=1e-12), params
        assert spend.sensitivity == 1.0 and spend.delta_extra == 0.0
    assert math.fsum(s.rho for s, _ in charge.calls) == pytest.approx(rho, rel=1e-9)
    # the levels, and when the descent stops at days the hour of day and the days again
    assert len(charge.calls) <= len(pp.CALENDAR_UNITS) + 1


# ------------------------------------------------------------------------------ sensitivity

VALUES = [None, "1899-12-31 23:59:59", "1900-01-01 00:00:00", "2024-03-01 00:00:00",
          "2024-03-01 00:59:59.999999", "2024-03-01 01:00:00", "2024-03-31 23:00:00",
          "2024-12-31 12:00:00", "2101-12-31 23:59:59", "2102-01-01 00:00:00", "infinity",
          "-infinity", "not a date", "0001-01-01 00:00:00"]
TABLES = {
    "spread": [VALUES[i % len(VALUES)] for i in range(17)] + ["2024-03-15 10:30:00"] * 5,
    "one-row": ["2024-03-15 10:30:00"],
    "all-equal": ["2024-03-01 00:00:00"] * 9,
}


@pytest.mark.parametrize("name", list(TABLES))
def test_the_hour_histogram_and_every_level_move_by_at_most_the_charged_l2_one(con, name):
    """Every removal and the addition of every value (at the calendar's ends, at an hour's
    start and just before it, infinite, unreadable, NULL): the exact hour histogram (the real
    SQL) and each level's counts over several public spans move by at most L2 1, the
    sensitivity every level's Spend reports."""
    rows = TABLES[name]
    tables = [rows] + [rows[:i] + rows[i + 1:] for i in range(len(rows))] \
        + [rows + [v] for v in VALUES]
    frame = pd.DataFrame([(k, v) for k, t in enumerate(tables) for v in t], columns=["nb", "t"])
    load(con, "stacked", frame.astype({"t": object}))
    spec = ColumnSpec(kind="datetime", nullable=True)
    hists = [exact_hours(con, f"(SELECT t FROM stacked WHERE nb = {k})", "t", spec)
             for k in range(len(tables))]
    charge = ChargeRecorder()
    pp.calendar_bounds(hists[0] + 1000, "t", spec, 1.0, charge)  # a real invocation
    charged = {s.sensitivity for s, _ in charge.calls}
    assert charged == {1.0}
    inside = (1, pp.CALENDAR_CELLS - 1)
    march = pp.calendar_edges("M", int(pp.calendar_edges("M", *inside)[1490]),
                              int(pp.calendar_edges("M", *inside)[1491]))
    levels = [np.concatenate([[0], pp.calendar_edges("Y", *inside), [pp.CALENDAR_CELLS]]),
              pp.calendar_edges("M", int(march[0]), int(march[-1])),
              pp.calendar_edges("D", int(march[0]), int(march[-1])),
              pp.calendar_edges("h", int(march[0]), int(march[0]) + 48)]
    assert pp.calendar_days(march[0]) == days("2024-03-01")  # the spans are where rows are
    base = [pp.level_counts(np.concatenate([[0], np.cumsum(hists[0])]), e) for e in levels]
    profile = pp.hour_of_day_counts(hists[0])
    for k, hist in enumerate(hists[1:], start=1):
        assert abs(int(hist.sum()) - int(hists[0].sum())) <= 1
        assert np.linalg.norm(hist - hists[0]) <= 1.0
        assert np.linalg.norm(pp.hour_of_day_counts(hist) - profile) <= 1.0
        cumulative = np.concatenate([[0], np.cumsum(hist)])
        for edges, counts in zip(levels, base):
            moved = pp.level_counts(cumulative, edges) - counts
            assert np.linalg.norm(moved) <= 1.0, (k, edges[:3])


def test_far_and_infinite_values_clamp_into_the_outer_cells(con):
    values = ["infinity", "-infinity", "0001-01-01", "1899-12-31 23:59:59", "1900-01-01",
              "2101-12-31 23:00:00", "2102-01-01", "294000-01-01", None, "2024-03-01 00:59:59"]
    relation = load(con, "far", pd.DataFrame({"t": values}, dtype=object))
    hist = exact_hours(con, relation, "t", ColumnSpec(kind="datetime", nullable=True))
    last = pp.CALENDAR_CELLS - 1
    hour = lambda s: int(round(days(s) * 24)) - pp.CALENDAR_FIRST_HOUR + 1  # noqa: E731
    expected = np.bincount([last, 0, 0, 0, 1, last - 1, last, last, hour("2024-03-01T00:00")],
                           minlength=pp.CALENDAR_CELLS)
    assert hour("1900-01-01T00:00") == 1 and hour("2101-12-31T23:00") == last - 1
    np.testing.assert_array_equal(hist, expected)


def test_consistent_counts_are_the_least_squares_counts_of_every_level():
    """Against generalized least squares solved directly: 12 leaves [10 + i, 11 + i) (the first
    from minus infinity, the last to infinity), a level of four buckets of three leaves, and a
    top level whose first two buckets end on a leaf edge only together (its runs: the first
    six leaves, the last six), each with its own sigma."""
    rng = np.random.default_rng(0)
    leaf_edges = np.arange(10, 23)
    middle_edges = np.array([10, 13, 16, 19, 22])
    top_edges = np.array([0, 10, 16, 30])
    sigmas = (4.0, 2.0, 3.0)  # top, middle, leaves
    top, middle, leaves = (rng.normal(50, 20, n) for n in (3, 4, 12))
    got = pp.consistent_counts([(top_edges, top, sigmas[0]), (middle_edges, middle, sigmas[1]),
                                (leaf_edges, leaves, sigmas[2])])
    rows, y, var = [], [], []
    for i in range(12):
        rows.append(np.eye(12)[i]), y.append(leaves[i]), var.append(sigmas[2] ** 2)
    for j in range(4):
        rows.append(np.repeat(np.eye(4)[j], 3)), y.append(middle[j]), var.append(sigmas[1] ** 2)
    rows.append(np.r_[np.ones(6), np.zeros(6)]), y.append(top[0] + top[1])
    var.append(2 * sigmas[0] ** 2)
    rows.append(np.r_[np.zeros(6), np.ones(6)]), y.append(top[2]), var.append(sigmas[0] ** 2)
    a, w = np.array(rows), np.diag(1 / np.array(var))
    expected = np.linalg.solve(a.T @ w @ a, a.T @ w @ np.array(y))
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    # a level whose runs do not hold whole nodes is left out (no nesting): the other two stand
    skew = pp.consistent_counts([(np.array([0, 14, 30]), top[:2], 1.0),
                                 (middle_edges, middle, sigmas[1]),
                                 (leaf_edges, leaves, sigmas[2])])
    alone = pp.consistent_counts([(middle_edges, middle, sigmas[1]),
                                  (leaf_edges, leaves, sigmas[2])])
    np.testing.assert_allclose(skew, alone)


def quiet_nights(seed: int, rows: int = 20_000) -> pd.DatetimeIndex:
    """Timestamps over March 2024 with a daily cycle: each hour from midnight to 6 holds 1% of
    the rows, the other 18 the rest evenly."""
    rng = np.random.default_rng(seed)
    hour = rng.choice(24, rows, p=np.r_[np.full(6, 0.01), np.full(18, 0.94 / 18)])
    return pd.DatetimeIndex(
        pd.Timestamp("2024-03-01") + pd.to_timedelta(rng.integers(0, 31, rows), "D")
        + pd.to_timedelta(hour * 3600 + rng.integers(0, 3600, rows), "s"))


def test_the_density_of_a_month_is_closer_in_range_sums_with_the_days_above_it(con):
    """The calendar's density of a month of timestamps (a daily cycle), 30 invocations: the
    rows it puts before each day's end are off by a root-mean-square about four times smaller
    than the hours alone give (sum of up to 744 noisy hours against about one noisy day per
    day; at least 2x asserted)."""
    stamps = quiet_nights(1)
    hour = stamps.hour
    relation = load(con, "month", pd.DataFrame({"t": stamps}))
    spec = ColumnSpec(kind="datetime")
    hist = exact_hours(con, relation, "t", spec)
    ends = np.array([days(f"2024-03-{d:02d}") for d in range(2, 32)])
    truth = np.array([(stamps < pd.Timestamp(f"2024-03-{d:02d}")).sum() for d in range(2, 32)])
    errors = {"consistent": [], "hours": []}
    for k in range(30):
        for name in errors:
            with without_consistency() if name == "hours" else nullcontext():
                _, pieces = pp.calendar_bounds(hist, "t", spec, 0.05, ChargeRecorder())
            piece = np.asarray(pieces)
            before = np.array([piece[piece[:, 1] <= e, 2].sum() for e in ends])
            scale = hour.size / piece[:, 2].sum()  # the total is not what is compared
            errors[name].append(before * scale - truth)
    rms = {n: float(np.sqrt(np.mean(np.square(e)))) for n, e in errors.items()}
    assert rms["consistent"] * 2 < rms["hours"], rms


def test_hour_of_day_counts_are_the_rows_in_each_hour_of_the_day(con):
    values = ["2024-03-01 00:10:00", "2024-03-02 00:59:59", "2024-03-01 13:00:00",
              "1900-01-01 23:30:00", "1899-12-31 23:30:00", "2102-01-01 05:00:00", None]
    relation = load(con, "hours", pd.DataFrame({"t": values}, dtype=object))
    counts = pp.hour_of_day_counts(exact_hours(con, relation, "t",
                                               ColumnSpec(kind="datetime", nullable=True)))
    expected = np.zeros(24, np.int64)
    np.add.at(expected, [0, 0, 13, 23], 1)  # the outer cells (before 1900, from 2102) left out
    np.testing.assert_array_equal(counts, expected)


def test_within_days_cuts_whole_days_by_the_profile_and_keeps_the_rest():
    profile = np.r_[np.zeros(6), np.full(18, 10.0)]
    profile[0] = -5.0  # clipped at 0
    pieces = ((100.0, 101.0, 240.0), (101.0, 102.0, 120.0), (102.0, 102.5, 30.0))
    cut = pp.within_days(pieces, profile)
    assert len(cut) == 24 + 24 + 1 and cut[-1] == (102.0, 102.5, 30.0)  # half a day: whole
    first = np.array(cut[:24])
    np.testing.assert_allclose(first[:, 0], 100 + np.arange(24) / 24)
    np.testing.assert_allclose(first[:, 2], np.r_[np.zeros(6), np.full(18, 240 / 18)])
    many = tuple((float(d), float(d + 1), 24.0) for d in range(100))  # 2,400 parts: too many
    cut = pp.within_days(many, profile)
    assert len(cut) == 800  # 8 parts of 3 hours a day
    np.testing.assert_allclose([c[2] for c in cut[:8]], [0, 0, 4, 4, 4, 4, 4, 4])
    assert pp.within_days((), profile) == ()
    flat = pp.within_days(pieces[:1], -np.ones(24))  # nothing left: flat
    np.testing.assert_allclose([c[2] for c in flat], 10.0)


def test_a_month_too_thin_for_hours_gets_its_day_shape_from_the_hour_of_day(con):
    """A month of timestamps, quiet from midnight to 6 (1% of rows each hour), at a rho too small
    for the hours level: the descent stops at days and half of what is left measures the hour
    of day; the density puts about 6% of each day's mass in the quiet hours (uniform: 25%). The
    task spends exactly its rho; a DATE column gets no hour of day."""
    stamps = quiet_nights(4)
    relation = load(con, "quiet", pd.DataFrame({"t": stamps}))
    spec = ColumnSpec(kind="datetime")
    charge = ChargeRecorder()
    _, pieces = pp.calendar_bounds(exact_hours(con, relation, "t", spec), "t", spec, 2e-3,
                                   charge)
    purposes = [p["purpose"] for _, p in charge.calls]
    assert "DP bounds (calendar hours)" not in purposes
    assert "DP bounds (calendar hour of day)" in purposes
    assert math.isclose(sum(s.rho for s, _ in charge.calls), 2e-3, rel_tol=1e-9)
    piece = np.asarray(pieces)
    night = (piece[:, 0] - np.floor(piece[:, 0] + 1e-9)) < 0.25 - 1e-9
    assert 0.03 < piece[night, 2].sum() / piece[:, 2].sum() < 0.10
    day_spec = ColumnSpec(kind="datetime", type="DATE")
    dates = load(con, "quiet_days", pd.DataFrame({"d": stamps.normalize()}))
    charge = ChargeRecorder()
    pp.calendar_bounds(exact_hours(con, dates, "d", day_spec), "d", day_spec, 2e-3, charge)
    assert all("hour of day" not in p["purpose"] for _, p in charge.calls)
