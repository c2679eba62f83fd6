"""A declared order between two timestamps (`dropoff >= pickup`) makes preprocessing measure the
pair's gap (`preprocess.gap_pairs`, `gap_density`: a noisy histogram of later - earlier over
public buckets), and decoding places the later value inside its bin by that gap
(`constraints.draw_gaps`). Tested against brute force: which pairs get a task, the exact
histogram from SQL, its sensitivity on neighbouring tables, the charge, the restricted draw's
distribution, and the decoded pair's gap with every code kept."""

import math
from datetime import datetime, timedelta

import duckdb
import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.core import preprocess as pp
from dp_synth_assets.core.config import ColumnSpec
from dp_synth_assets.core.constraints import (_cdf, _draw_inside, _linear_draw, _roots,
                                              place_earlier, validate)
from dp_synth_assets.core.domain import Encoding, EncodingPlan, bin_cuts
from dp_synth_assets.core.synthesize import decode_constrained
from tests.helpers import ChargeRecorder

MONTH = ["2024-03-01", "2024-04-01"]
COLUMNS = {"pickup": ColumnSpec(kind="datetime", bounds=MONTH),
           "dropoff": ColumnSpec(kind="datetime", bounds=MONTH),
           "paid": ColumnSpec(kind="datetime", bounds=MONTH),
           "day": ColumnSpec(kind="datetime", type="DATE", bounds=MONTH),
           "later_day": ColumnSpec(kind="datetime", type="DATE", bounds=MONTH),
           "fare": ColumnSpec(kind="float", bounds=[0, 100]),
           "tip": ColumnSpec(kind="float", bounds=[0, 100])}


def pairs(*texts):
    return pp.gap_pairs(COLUMNS, validate(list(texts), COLUMNS))


def test_which_declared_orders_get_a_gap_task():
    assert pairs("dropoff >= pickup") == {"dropoff": "pickup"}
    assert pairs("pickup < dropoff") == {"dropoff": "pickup"}  # the later side, either way
    assert pairs("pickup <= dropoff", "paid > dropoff") == {"dropoff": "pickup", "paid": "dropoff"}
    assert pairs("dropoff >= pickup", "dropoff >= paid") == {"dropoff": "pickup"}  # first wins
    assert pairs("later_day >= day") == {}  # whole days: decoded in whole days already
    assert pairs("fare >= tip") == {}  # numbers: not yet
    assert pairs("dropoff >= '2024-03-02'", "dropoff != pickup") == {}
    tasks = pp.all_tasks(COLUMNS, validate(["dropoff >= pickup"], COLUMNS))
    assert tasks[-1] == pp.Task("dropoff", "gap", "pickup")
    assert pp.all_tasks(COLUMNS) == [t for t in tasks if t.mechanism != "gap"]


def test_preprocessing_runs_the_gap_task_in_its_share_and_the_plan_carries_it():
    """The gap task takes its weight's part of the preprocessing rho, beside the two densities,
    and its release reaches the later column's encoding; without the order nothing changes."""
    rng = np.random.default_rng(2)
    pick = START + pd.to_timedelta(rng.integers(0, 30 * 86400, 5000), unit="s")
    drop = pick + pd.to_timedelta(rng.integers(600, 1200, 5000), unit="s")
    con = duckdb.connect()
    con.register("f", frame_of(list(zip(pick, drop))))
    con.execute("CREATE TABLE t AS SELECT * FROM f")
    columns = {n: COLUMNS[n] for n in ("pickup", "dropoff")}
    declared = validate(["dropoff >= pickup"], columns)
    recorder = ChargeRecorder()
    derived = pp.preprocess(con, "t", columns, 1.0, 0.0, recorder, constraints=declared)
    weights = {"density": 0.25, "gap": pp.MECHANISMS["gap"].weight}
    assert recorder.rho == pytest.approx(1.0)
    gap_rho = [s.rho for s, params in recorder.calls if "gap" in params["purpose"]]
    assert gap_rho == [pytest.approx(weights["gap"] / (2 * weights["density"] + weights["gap"]))]
    earlier, pieces = derived["dropoff"].gap
    assert earlier == "pickup" and derived["pickup"].gap is None
    inside = sum(w for lo, hi, w in pieces if 10 / 1440 * 0.7 <= lo and hi <= 20 / 1440 / 0.7)
    assert inside > 0.99 * sum(w for *_, w in pieces)  # a stray bucket of noise holds a few
    without = pp.preprocess(con, "t", columns, 1.0, 0.0, ChargeRecorder())
    assert all(d.gap is None for d in without.values())


# ---- the exact aggregate ----------------------------------------------------------------------

def brute_histogram(frame: pd.DataFrame) -> np.ndarray:
    """Bucket 0: below 0 (or not comparable); bucket b: GAP_EDGES[b-1] <= gap < GAP_EDGES[b]."""
    hist = np.zeros(pp.GAP_EDGES.size + 1, dtype=np.int64)
    for later, earlier in zip(frame["dropoff"], frame["pickup"]):
        if pd.isna(later) or pd.isna(earlier):
            continue
        days = (later - earlier).total_seconds() / 86400
        hist[int(np.sum(pp.GAP_EDGES <= days))] += 1
    return hist


START = datetime(2024, 3, 1)
EDGE_CASES = [  # (pickup, dropoff): equal, a second, an edge exactly, negative, NULLs, far apart
    (START, START), (START, START + timedelta(seconds=1)),
    (START, START + timedelta(seconds=2 ** 10)), (START, START + timedelta(minutes=12)),
    (START + timedelta(hours=1), START), (None, START), (START, None),
    (START, datetime(2200, 1, 1)), (datetime(1800, 1, 1), START)]


def frame_of(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["pickup", "dropoff"]).astype("datetime64[us]")


def exact(frame: pd.DataFrame) -> np.ndarray:
    con = duckdb.connect()
    con.register("f", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM f")
    task = pp.Task("dropoff", "gap", "pickup")
    return pp.exact_aggregates(con, "t", COLUMNS, [task], {})[task]


def test_the_scan_counts_the_gap_histogram_as_brute_force_does():
    rng = np.random.default_rng(3)
    pick = START + pd.to_timedelta(rng.integers(0, 30 * 86400, 300), unit="s")
    drop = pick + pd.to_timedelta(np.exp(rng.uniform(0, 14, 300)).astype(int), unit="s")
    frame = frame_of(list(zip(pick, drop)) + EDGE_CASES)
    hist = exact(frame)
    assert hist.sum() == len(frame) - 2  # the rows with a NULL operand do not count
    np.testing.assert_array_equal(hist, brute_histogram(frame))


def test_the_gap_histogram_moves_by_at_most_its_charged_sensitivity():
    """Neighbours add or remove one row, adversarial ones included (NULLs, negative gaps, gaps
    beyond the last edge, a value on an edge): the exact histogram moves by at most L2 1, the
    sensitivity the mechanism's spend reports (from OpenDP's map at d_in 1)."""
    base_rows = EDGE_CASES + [(START, START + timedelta(minutes=m)) for m in (3, 30, 300)]
    base = exact(frame_of(base_rows))
    recorder = ChargeRecorder()
    pp.gap_density(base, "dropoff", 0.5, recorder)
    charged = recorder.calls[0][0].sensitivity
    assert charged == 1.0
    for i in range(len(base_rows)):
        removed = exact(frame_of(base_rows[:i] + base_rows[i + 1:]))
        assert np.linalg.norm(base - removed) <= charged
    for row in EDGE_CASES:
        added = exact(frame_of(base_rows + [row]))
        assert np.linalg.norm(base - added) <= charged


def test_the_mechanism_is_charged_opendps_rho_and_keeps_only_what_clears_the_noise():
    hist = np.zeros(pp.GAP_EDGES.size + 1, dtype=np.int64)
    hist[0], hist[22], hist[23], hist[-1] = 500, 4000, 2500, 900  # below 0, ~12-18 min, beyond
    recorder = ChargeRecorder()
    pieces = pp.gap_density(hist, "dropoff", 0.05, recorder)
    (spend, params), = recorder.calls
    assert spend.rho == pytest.approx(0.05, rel=1e-6)  # the map at d_in 1 gives back its rho
    assert params["column"] == "dropoff"
    lows = [p[0] for p in pieces]
    # the two planted buckets, nothing below 0 or beyond the last edge
    assert pp.GAP_EDGES[21] in lows and pp.GAP_EDGES[22] in lows
    assert all(0 <= lo < pp.GAP_EDGES[-1] for lo in lows)
    planted = [p[2] for p in pieces if p[0] in (pp.GAP_EDGES[21], pp.GAP_EDGES[22])]
    assert sum(planted) == pytest.approx(6500, abs=5 * spend.scale * math.sqrt(2))
    # noise keeps each of the 64 empty buckets with probability P(Z >= GAP_Z), about 2.3%
    # (1.5 expected); a kept one clears GAP_Z sigma, so strays bias the total up, never down.
    # More than 9 strays has probability below 1e-5 (binomial tail)
    strays = [p[2] for p in pieces if p[0] not in (pp.GAP_EDGES[21], pp.GAP_EDGES[22])]
    assert len(strays) <= 9
    assert all(c >= pp.GAP_Z * spend.scale for c in strays)


# ---- the restricted draw and the decoded pair -------------------------------------------------

def test_the_restricted_draw_follows_the_density_inside_each_rows_interval():
    pieces = ((0.0, 1.0, 1.0), (1.0, 3.0, 6.0), (5.0, 6.0, 2.0))  # densities 1, 3, 2
    rng = np.random.default_rng(0)
    n = 60_000
    lows, highs = np.full(n, 0.5), np.full(n, 5.5)
    x = _draw_inside(pieces, lows, highs, rng)
    assert ((x >= 0.5) & (x < 5.5)).all()
    # masses inside [0.5, 5.5): 0.5 x 1, 2 x 3, 0.5 x 2 -> 0.5, 6, 1 of 7.5
    observed = np.histogram(x, [0.5, 1.0, 3.0, 5.5])[0] / n
    np.testing.assert_allclose(observed, [0.5 / 7.5, 6 / 7.5, 1 / 7.5], atol=0.01)
    # uniform inside a piece
    inside = x[(x >= 1) & (x < 3)]
    np.testing.assert_allclose(np.histogram(inside, [1, 2, 3])[0] / inside.size, [0.5, 0.5],
                               atol=0.02)
    # no mass in [3, 5): NaN; per-row intervals
    y = _draw_inside(pieces, np.array([3.0, 0.0, 5.2]), np.array([5.0, 0.25, 9.0]), rng)
    assert np.isnan(y[0]) and 0 <= y[1] < 0.25 and 5.2 <= y[2] < 6.0


def trip_plan(gap) -> EncodingPlan:
    def month(name, gap=None):  # 16 bins of about two days over March 2024
        return Encoding(name, "datetime", "TIMESTAMP", 16, low=19783.0, high=19814.0, bins=16,
                        gap=gap)
    return EncodingPlan((month("pickup"), month("dropoff", gap)))


def test_decoding_places_the_pair_by_the_gap_and_keeps_every_code():
    """Trips of 10-20 minutes whose two codes agree: without the gap, a drop-off is anywhere in
    its two-day bin after the pick-up (hours on average); with it, 10-20 minutes after on every
    row, a pick-up near its bin's end included (it is drawn where the gap can still reach the
    drop-off's bin), and every value stays in the bin its code names."""
    minutes = 1 / 1440
    gap = ("pickup", ((10 * minutes, 20 * minutes, 1000.0),))
    rng = np.random.default_rng(5)
    codes = {"pickup": rng.integers(0, 16, 5000)}
    codes["dropoff"] = codes["pickup"].copy()
    declared = validate(["dropoff >= pickup"], {"pickup": COLUMNS["pickup"],
                                                "dropoff": COLUMNS["dropoff"]})

    def decoded(plan, constraints=declared):
        table = decode_constrained(plan, codes, np.random.default_rng(1), constraints)
        return {n: table.column(n).to_numpy().astype("datetime64[us]").astype(np.int64) / 86400e6
                for n in ("pickup", "dropoff")}

    free = decoded(trip_plan(None))
    placed = decoded(trip_plan(gap))
    assert np.median(free["dropoff"] - free["pickup"]) > 0.1  # more than 2.4 hours: can fail
    cut = bin_cuts(trip_plan(gap)["dropoff"])
    for name in ("pickup", "dropoff"):
        kept = np.searchsorted(cut, placed[name], side="right") - 1
        np.testing.assert_array_equal(kept, codes[name])  # codes kept
    delay = (placed["dropoff"] - placed["pickup"]) / minutes
    assert ((delay >= 10 - 1e-3) & (delay <= 20 + 1e-3)).all()
    # the pick-up is uniform in its bin but for the last 10-20 minutes, where fewer gaps fit
    share = (placed["pickup"] - cut[codes["pickup"]]) / np.diff(cut)[codes["pickup"]]
    np.testing.assert_allclose(np.histogram(share, [0, 0.25, 0.5, 0.75, 1])[0] / share.size,
                               0.25, atol=0.025)
    again = decoded(trip_plan(gap))
    np.testing.assert_array_equal(again["dropoff"], placed["dropoff"])  # same stream, same rows


def shifted_plan(gap, chain=False) -> EncodingPlan:
    """Pick-up bins of a day from March 1st; drop-off bins of a day from noon (each column
    learns its own edges); `chain`: a third column paid after the drop-off."""
    days = tuple(19783.0 + k for k in range(17))
    noons = tuple(19783.0 + 0.5 * (k > 0) + k for k in range(17))
    enc = [Encoding("pickup", "datetime", "TIMESTAMP", 16, low=days[0], high=days[-1], bins=16,
                    edges=days),
           Encoding("dropoff", "datetime", "TIMESTAMP", 16, low=noons[0], high=noons[-1],
                    bins=16, edges=noons, gap=gap)]
    if chain:
        enc.append(Encoding("paid", "datetime", "TIMESTAMP", 16, low=noons[0], high=noons[-1],
                            bins=16, edges=noons, gap=("dropoff", gap[1])))
    return EncodingPlan(tuple(enc))


def test_a_pick_up_is_drawn_where_its_drop_off_bin_can_be_reached():
    """Bins that do not line up: pick-up bin k is day k, drop-off bin k runs from noon of day k
    to noon of day k + 1. With trips of 10-20 minutes, codes (k, k - 1) are morning pick-ups
    and (k, k) afternoon ones from 11:40 on. Drawn alone, a pick-up is anywhere in its day, and
    half the rows cannot reach their drop-off's bin; drawn with the pair, every row does, and
    every value stays in the bin its code names."""
    minutes = 1 / 1440
    gap = ("pickup", ((10 * minutes, 20 * minutes, 1000.0),))
    rng = np.random.default_rng(3)
    k = rng.integers(1, 15, 4000)
    morning = rng.random(k.size) < 0.5
    codes = {"pickup": k, "dropoff": np.where(morning, k - 1, k)}
    columns = {n: COLUMNS[n] for n in ("pickup", "dropoff")}
    table = decode_constrained(shifted_plan(gap), codes, np.random.default_rng(4),
                               validate(["dropoff >= pickup"], columns))
    got = {n: table.column(n).to_numpy().astype("datetime64[us]").astype(np.int64) / 86400e6
           for n in ("pickup", "dropoff")}
    delay = (got["dropoff"] - got["pickup"]) / minutes
    assert ((delay >= 10 - 1e-3) & (delay <= 20 + 1e-3)).all()
    hour = (got["pickup"] - np.floor(got["pickup"])) * 24
    assert (hour[morning] < 12).all() and (hour[~morning] >= 11.6).all()
    for name, plan_name in (("pickup", "pickup"), ("dropoff", "dropoff")):
        cut = bin_cuts(shifted_plan(gap)[plan_name])
        np.testing.assert_array_equal(np.searchsorted(cut, got[name], side="right") - 1,
                                      codes[name])


def test_the_earlier_draw_follows_density_times_the_chance_of_reaching_the_later_bin():
    """place_earlier against brute force: earlier values drawn from its density in the bin,
    gaps from the gap density, kept where the later value lands in the later bin (rejection:
    the exact conditional). Histograms of the two agree within sampling error (n = 40,000,
    bins of 1/8: sd of a share about 0.0025, tolerance 0.012)."""
    density = np.array([(0.0, 0.5, 1.0), (0.5, 0.75, 3.0), (0.75, 1.0, 0.5)])
    gap = np.array([(0.0, 0.1, 2.0), (0.1, 0.4, 1.0)])
    first = Encoding("a", "datetime", "TIMESTAMP", 1, low=0.0, high=1.0, bins=1,
                     density=tuple(map(tuple, density)))
    rng = np.random.default_rng(7)
    n = 40_000
    got = place_earlier(first, np.array([0.0, 1.0]), np.zeros(n, np.int64),
                        np.array([0.8, 1.2]), 1.2, np.zeros(n, np.int64), gap, rng)
    x = np.concatenate([rng.uniform(a, b, rng.poisson(60 * n * w)) for a, b, w in density])
    weights = gap[:, 2]
    piece = rng.choice(len(gap), size=x.size, p=weights / weights.sum())
    g = rng.uniform(gap[piece, 0], gap[piece, 1])
    kept = x[(x + g >= 0.8) & (x + g < 1.2)]
    edges = np.linspace(0, 1, 9)
    np.testing.assert_allclose(np.histogram(got, edges)[0] / n,
                               np.histogram(kept, edges)[0] / kept.size, atol=0.012)
    assert not np.isnan(got).any() and (got >= 0.4).all()  # below 0.8 - 0.4 nothing reaches
    # a bin the density has no mass in is weighed uniformly, as decoding draws there
    empty = Encoding("a", "datetime", "TIMESTAMP", 2, low=0.0, high=2.0, bins=2,
                     edges=(0.0, 1.0, 2.0), density=((0.0, 1.0, 5.0),))
    inside = place_earlier(empty, np.array([0.0, 1.0, 2.0]), np.ones(n, np.int64),
                           np.array([1.8, 2.2]), 2.2, np.zeros(n, np.int64), gap, rng)
    assert ((inside >= 1.4) & (inside < 2.0)).all()
    # f is 0 below 1.4, rises to 1/3 at 1.7, 1 at 1.8, 7/9 at 2: masses 0.05, 1/15, 8/45
    share = np.histogram(inside, [1.4, 1.7, 2.0])[0] / n
    assert abs(share[0] - 0.05 / (0.05 + 1 / 15 + 8 / 45)) < 0.01 and share.sum() == 1
    # a later bin no gap reaches: NaN
    far = place_earlier(first, np.array([0.0, 1.0]), np.zeros(3, np.int64),
                        np.array([5.0, 6.0]), 6.0, np.zeros(3, np.int64), gap, rng)
    assert np.isnan(far).all()


def test_the_gap_cdf_and_the_linear_draw_are_their_closed_forms():
    """_cdf against the pieces' masses; _linear_draw's draws against the linear density's CDF
    (n = 200,000: a share's sd about 0.001, tolerance 0.005), its ends and its flat case."""
    table = np.array([(0.0, 0.5, 2.0), (0.5, 2.0, 1.0), (3.0, 3.5, 4.0)])
    np.testing.assert_allclose(_cdf(table, np.array([-1.0, 0.25, 0.5, 2.0, 2.5, 3.5, 9.0])),
                               [0, 1 / 7, 2 / 7, 3 / 7, 3 / 7, 1.0, 1.0])
    rng = np.random.default_rng(0)
    u = rng.random(200_000)
    for a, b in ((1.0, 3.0), (2.0, 0.5), (0.0, 1.0), (1.0, 0.0)):
        y = _linear_draw(np.full(u.size, a), np.full(u.size, b), u)
        assert ((y >= 0) & (y <= 1)).all()
        at = np.array([0.25, 0.5, 0.75])
        expected = (a * at + (b - a) * at ** 2 / 2) / ((a + b) / 2)
        np.testing.assert_allclose([(y < x).mean() for x in at], expected, atol=0.005)
    np.testing.assert_allclose(_linear_draw(np.full(3, 2.0), np.full(3, 2.0),
                                            np.array([0.0, 0.3, 0.9])), [0.0, 0.3, 0.9])


def test_only_a_chains_first_column_is_redrawn():
    """In pickup <= dropoff <= paid, the pick-up is placed for the drop-off; the drop-off, the
    later of one pair, is not moved for the paid column (that would undo its own gap)."""
    gap = ("pickup", ((0.0, 0.01, 1.0),))
    plan = shifted_plan(gap, chain=True)
    columns = {n: None for n in ("pickup", "dropoff", "paid")}
    assert _roots(plan, columns) == {"pickup": "dropoff"}
    assert _roots(plan, {"dropoff": None, "paid": None}) == {"dropoff": "paid"}


def test_a_plan_with_a_gap_reads_back_from_json():
    plan = trip_plan(("pickup", ((0.0, 0.5, 3.0), (0.5, 1.0, 1.5))))
    assert EncodingPlan.from_json(plan.to_json()) == plan
