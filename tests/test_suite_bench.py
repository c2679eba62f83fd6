"""bench/suite.py's measuring instruments: the wide table's known network and the TVD."""

import itertools
import sys

import numpy as np
import pytest
import pandas as pd

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "bench"))

import suite  # noqa: E402
import wide_table  # noqa: E402


def test_wide_table_draws_each_column_from_its_known_conditional_table():
    frame = wide_table.generate(20_000, seed=3)
    tables = wide_table.cpts(3)
    assert list(frame.columns) == list(wide_table.DOMAIN) and len(frame.columns) >= 24
    for name, k, parents in wide_table.NETWORK:
        groups = frame.groupby(list(parents)) if parents else [((), frame)]
        for config, rows in groups:
            if len(rows) < 1000:
                continue
            config = config if isinstance(config, tuple) else (config,)
            empirical = np.bincount(rows[name], minlength=k) / len(rows)
            assert np.abs(empirical - tables[name][config]).max() < 0.05, (name, config)


def test_wide_table_independent_columns_carry_no_dependence_and_seeds_reproduce():
    frame = wide_table.generate(20_000, seed=0)
    assert frame.equals(wide_table.generate(20_000, seed=0))
    for a in wide_table.INDEPENDENT:
        for b in frame.columns:
            if a == b:
                continue
            joint = pd.crosstab(frame[a], frame[b], normalize=True).to_numpy()
            product = np.outer(joint.sum(1), joint.sum(0))
            assert 0.5 * np.abs(joint - product).sum() < 0.02, (a, b)
    # a strong edge is visibly dependent
    joint = pd.crosstab(frame["a0"], frame["a1"], normalize=True).to_numpy()
    assert 0.5 * np.abs(joint - np.outer(joint.sum(1), joint.sum(0))).sum() > 0.05


def brute_force_tvd(real: np.ndarray, synth: np.ndarray, idx: tuple[int, ...]) -> float:
    cells = set(map(tuple, real[:, idx])) | set(map(tuple, synth[:, idx]))
    p = {c: np.mean([tuple(r) == c for r in real[:, idx]]) for c in cells}
    q = {c: np.mean([tuple(r) == c for r in synth[:, idx]]) for c in cells}
    return 0.5 * sum(abs(p[c] - q[c]) for c in cells)


def test_tvd_equals_brute_force_on_a_tiny_table():
    rng = np.random.default_rng(0)
    sizes = np.array([2, 3, 4])
    real = np.column_stack([rng.integers(0, k, 40) for k in sizes])
    synth = np.column_stack([rng.integers(0, k, 25) for k in sizes])
    for r in (1, 2, 3):
        for idx in itertools.combinations(range(3), r):
            assert abs(suite.tvd(real, synth, idx, sizes) - brute_force_tvd(real, synth, idx)) < 1e-12


def test_evaluation_cells_compare_numbers_as_numbers_and_keep_nulls_and_rare_values_apart():
    real = pd.DataFrame({"n": [1, 2, 3, None] * 50, "s": ["a", "b", None, "a"] * 50})
    ev = suite.Evaluation.of_frame(real)
    same = ev.of_table(pd.DataFrame({"n": [1.0, 2.0, 3.0, None] * 50, "s": ["a", "b", None, "a"] * 50}))
    assert same == {"tvd1": 0.0, "tvd2": 0.0, "tvd3": None}
    # an unseen category and a NULL are different cells: half the rows moved
    moved = ev.of_table(pd.DataFrame({"n": [1, 2, 3, None] * 50, "s": ["a", "b", "zzz", "a"] * 50}))
    assert moved["tvd1"] == 0.25 / 2


def test_default_given_domain_reads_the_anchors_codes_with_every_cell_declared(tmp_path):
    real = pd.DataFrame({"n": [1.5, 2.5, None, 7.0] * 50, "s": ["a", "b", None, "a"] * 50})
    ev = suite.Evaluation.of_frame(real)
    codes = tmp_path / "codes.csv"
    pd.DataFrame(ev.real, columns=ev.columns).to_csv(codes, index=False)
    table = suite.Table("t", tmp_path / "raw.csv", {"n": {"kind": "float"}, "s": {"kind": "categorical"}},
                        codes, tmp_path / "domain.json", tmp_path / "raw.csv", ev)
    entry = suite.our_entry(table, suite.GIVEN_DOMAIN, 1.0, 0, table.source)
    assert entry["source"] == {"csv": str(codes)} and "method" not in entry
    assert entry["columns"] == {c: {"kind": "categorical", "categories": list(range(k)),
                                    "other": False} for c, k in ev.domain.items()}
    # the codes themselves score 0; a code outside the cells counts in the last cell
    frame = pd.read_csv(codes)
    assert ev.of_codes_frame(frame)["tvd2"] == 0.0
    a_rows = frame.index[frame["s"] == frame.loc[0, "s"]][:50]  # 50 of the 100 "a" rows
    frame.loc[a_rows, "s"] = 99
    assert ev.of_codes_frame(frame)["tvd1"] == pytest.approx(0.25 / 2)


def test_an_anchor_given_a_free_domain_never_counts_as_paid_however_long_its_note():
    # the table cuts notes to 160 characters; the paid check must not read the cut ones
    long_note = "OpenDP MST float edge (" + "x" * 200 + "); " + suite.FREE
    records = [
        {"dataset": "t", "method": "opendp-mst", "epsilon": 1.0, "seed": 0, "tvd2": 0.1,
         "note": long_note},
        {"dataset": "t", "method": "dpmm-mst", "epsilon": 1.0, "seed": 0, "tvd2": 0.2,
         "note": "dpmm's DP bounds failed (...); rerun given each numeric column's exact min "
                 "and max (not private, favours dpmm)"},
        {"dataset": "t", "method": "pgm-mst", "epsilon": 1.0, "seed": 0, "tvd2": 0.3, "note": ""},
    ]
    summary = suite.summarize(records)
    assert suite.FREE not in summary[("t", "opendp-mst", 1.0)]["notes"][0]  # the cut note
    assert suite.best_anchor(summary, "t", 1.0)[0] == "opendp-mst"
    assert suite.best_anchor(summary, "t", 1.0, paid=True)[0] == "pgm-mst"


def test_a_datetime_column_gets_the_same_cells_whatever_resolution_each_side_was_parsed_at():
    """The source's dates (Python dates, seconds) and an anchor's CSV timestamps (microseconds
    once read back) are placed in the same quantile bins: the cells compare instants, not the
    integers of two resolutions."""
    days = pd.Series(pd.date_range("2015-01-01", periods=400, freq="D").date, dtype=object)
    cells = suite.ColumnCells(days)
    assert cells.edges is not None  # more than 20 distinct instants: quantile bins
    as_text = pd.Series([f"{d} 00:00:00.000" for d in days])
    assert pd.to_datetime(as_text).dtype != pd.to_datetime(days).dtype  # two resolutions
    np.testing.assert_array_equal(cells.codes(as_text), cells.codes(days))
    shifted = pd.Series([f"{d + pd.Timedelta(days=200)} 00:00:00.000" for d in days])
    assert cells.codes(shifted).mean() > cells.codes(days).mean()
