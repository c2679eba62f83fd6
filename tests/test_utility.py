"""The utility report (benchmark paper §8.3) checked against independent computations.

TVDs are compared with pandas.crosstab on the same tables (tolerance 1e-12: both sides sum the
same few hundred shares in float64); query errors with hand-derived closed forms on tiny tables
(tolerance 1e-12) and with row filters written out in pandas; ML efficiency with tables whose
target is a deterministic function of a feature. Every table is drawn with a fixed seed, so the
statistical thresholds below hold for these draws (their margins are stated where they are set).
"""

import io
import itertools
import json
import math

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.evaluation import ml, queries
from dp_synth_assets.evaluation import tables as encoded_tables
from dp_synth_assets.evaluation.fidelity import column_comparison, fidelity, pair_tvd
from dp_synth_assets.evaluation.ml import ml_efficiency
from dp_synth_assets.evaluation.plots import (DPI, heatmap_figsize, histogram_figsize,
                                              histograms_png, tvd_heatmap_png)
from dp_synth_assets.evaluation.queries import box_queries, query_error, triples
from dp_synth_assets.evaluation.report import (report_document, report_html, utility_report,
                                               write_owner_only)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DOMAIN = {"a": 3, "b": 5, "c": 2, "d": 7, "e": 4}  # d has codes no row uses


def random_table(rng: np.random.Generator, n: int, domain: dict[str, int] = DOMAIN) -> pd.DataFrame:
    a = rng.integers(0, domain["a"], n)
    return pd.DataFrame({
        "a": a,
        "b": (a + rng.integers(0, 3, n)) % domain["b"],  # depends on a
        "c": rng.integers(0, 2, n),
        "d": rng.integers(0, 5, n),                      # codes 5, 6 unused
        "e": np.where(rng.random(n) < 0.7, a, rng.integers(0, 4, n)),
    })


def crosstab_tvd(real: pd.DataFrame, synthetic: pd.DataFrame, a: str, b: str,
                 domain: dict[str, int]) -> float:
    """Independent 2-way TVD: pandas.crosstab shares on the full code grid."""
    def shares(t: pd.DataFrame) -> pd.DataFrame:
        table = pd.crosstab(t[a], t[b], normalize="all")
        return table.reindex(index=range(domain[a]), columns=range(domain[b]), fill_value=0.0)

    return 0.5 * float((shares(real) - shares(synthetic)).abs().to_numpy().sum())


@pytest.fixture(scope="module")
def tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(3)
    return random_table(rng, 2000), random_table(rng, 1500)


# --- fidelity ------------------------------------------------------------------------------------


def test_pair_tvds_equal_crosstab_computation(tables):
    real, synthetic = tables
    tvds = pair_tvd(real, synthetic, DOMAIN)
    assert list(tvds) == list(itertools.combinations(DOMAIN, 2))  # all i < j, no i = j
    for (a, b), value in tvds.items():
        assert value == pytest.approx(crosstab_tvd(real, synthetic, a, b, DOMAIN), abs=1e-12)


def test_fidelity_of_a_table_against_itself_is_zero(tables):
    real, _ = tables
    assert fidelity(real, real, DOMAIN) == 0.0
    assert fidelity(real, {c: real[c].to_numpy() for c in DOMAIN}, DOMAIN) == 0.0  # dict input


def test_fidelity_against_column_shuffled_copy_equals_crosstab_mean(tables):
    real, _ = tables
    rng = np.random.default_rng(11)
    shuffled = pd.DataFrame({c: rng.permutation(real[c].to_numpy()) for c in DOMAIN})
    expected = np.mean([crosstab_tvd(real, shuffled, a, b, DOMAIN)
                        for a, b in itertools.combinations(DOMAIN, 2)])
    assert fidelity(real, shuffled, DOMAIN) == pytest.approx(expected, abs=1e-12)
    assert expected > 0.05  # shuffling breaks a-b and a-e: the metric sees it
    # the 1-way distributions are untouched by a shuffle
    assert all(abs(c["tvd"]) < 1e-15 for c in column_comparison(real, shuffled, DOMAIN))


def test_column_comparison_reports_normalized_distributions(tables):
    real, synthetic = tables
    for entry in column_comparison(real, synthetic, DOMAIN):
        column, k = entry["column"], DOMAIN[entry["column"]]
        p = real[column].value_counts(normalize=True).reindex(range(k), fill_value=0.0)
        q = synthetic[column].value_counts(normalize=True).reindex(range(k), fill_value=0.0)
        assert entry["real"] == pytest.approx(list(p), abs=1e-12)
        assert entry["synthetic"] == pytest.approx(list(q), abs=1e-12)
        assert entry["tvd"] == pytest.approx(0.5 * float((p - q).abs().sum()), abs=1e-12)


def test_sparse_counting_of_large_marginals_agrees_with_dense(tables, monkeypatch):
    real, synthetic = tables
    dense = pair_tvd(real, synthetic, DOMAIN)
    chosen = triples(DOMAIN)
    dense_q = query_error(real, synthetic, DOMAIN, chosen, 40, seed=1, ordinal={"d"})
    monkeypatch.setattr(encoded_tables, "MAX_DENSE_CELLS", 0)  # every marginal takes the sparse path
    sparse = pair_tvd(real, synthetic, DOMAIN)
    sparse_q = query_error(real, synthetic, DOMAIN, chosen, 40, seed=1, ordinal={"d"})
    assert all(sparse[p] == pytest.approx(dense[p], abs=1e-12) for p in dense)
    assert sparse_q.query_error == pytest.approx(dense_q.query_error, abs=1e-12)
    assert sparse_q.tvd3 == pytest.approx(dense_q.tvd3, abs=1e-12)


def test_codes_outside_the_domain_are_refused(tables):
    real, synthetic = tables
    bad = synthetic.assign(c=synthetic["c"] + 1)  # code 2 in a 2-code column
    with pytest.raises(ValueError, match="outside 0..1"):
        pair_tvd(real, bad, DOMAIN)


# --- triples and query error ---------------------------------------------------------------------


def test_triples_are_all_triples_when_few_else_a_fixed_sample():
    assert triples(DOMAIN, count=200) == list(itertools.combinations(DOMAIN, 3))  # 10 <= 200
    wide = {f"x{i:02d}": 2 for i in range(15)}  # 455 triples
    order = {c: i for i, c in enumerate(wide)}
    chosen = triples(wide, count=100, seed=5)
    assert len(chosen) == len(set(chosen)) == 100
    assert all(len(set(t)) == 3 and [order[c] for c in t] == sorted(order[c] for c in t)
               for t in chosen)
    assert chosen == triples(wide, count=100, seed=5)
    assert chosen != triples(wide, count=100, seed=6)
    assert triples({"a": 2, "b": 2}) == []


TINY = {"a": 3, "b": 2, "c": 2}


def rows(*codes: tuple[int, int, int]) -> pd.DataFrame:
    return pd.DataFrame(list(codes), columns=list(TINY))


@pytest.mark.parametrize("synthetic_row, ordinal, expected", [
    # a ordered: 6 ranges x 2 x 2 boxes; |diff| = 1 only with b = c = 0 and a range holding
    # exactly one of the two a codes. 0 vs 1: [0,0], [1,1], [1,2] -> 3 / 24.
    ((1, 0, 0), {"a"}, 3 / 24),
    # 0 vs 2: [0,0], [0,1], [1,2], [2,2] -> 4 / 24.
    ((2, 0, 0), {"a"}, 4 / 24),
    # a categorical: 3 points x 2 x 2; points 0 and 1 differ -> 2 / 12.
    ((1, 0, 0), set(), 2 / 12),
    # only codes 0, 1 of a ordered (code 2 like a null code): [0,0], [0,1], [1,1], {2};
    # 0 vs 2: [0,0], [0,1], {2} -> 3 / 16.
    ((2, 0, 0), {"a": 2}, 3 / 16),
])
def test_query_error_closed_form_on_one_row_tables(synthetic_row, ordinal, expected):
    result = query_error(rows((0, 0, 0)), rows(synthetic_row), TINY, [("a", "b", "c")],
                         queries_per_triple=None, ordinal=ordinal)
    assert result.query_error == pytest.approx(expected, abs=1e-12)
    assert result.tvd3 == pytest.approx(1.0, abs=1e-12)  # disjoint supports


def test_query_error_closed_form_with_fractional_answers():
    # all categorical, 12 point queries. real: half (0,0,0), half (1,1,0); synthetic: all (0,0,0).
    # |diff| = 0.5 at (0,0,0) and at (1,1,0), 0 elsewhere -> 1.0 / 12; 3-way TVD = 0.5.
    real = rows((0, 0, 0), (1, 1, 0))
    synthetic = rows((0, 0, 0), (0, 0, 0), (0, 0, 0))
    result = query_error(real, synthetic, TINY, [("a", "b", "c")], queries_per_triple=None)
    assert result.queries == 12
    assert result.query_error == pytest.approx(1 / 12, abs=1e-12)
    assert result.tvd3 == pytest.approx(0.5, abs=1e-12)


def test_sampled_queries_estimate_the_exhaustive_mean():
    # each sampled query errs (by 1) with probability 3/24 = 0.125; 20,000 draws: sd 0.0023,
    # tolerance 0.01 is over 4 sd.
    result = query_error(rows((0, 0, 0)), rows((1, 0, 0)), TINY, [("a", "b", "c")],
                         queries_per_triple=20_000, seed=2, ordinal={"a"})
    assert result.query_error == pytest.approx(0.125, abs=0.01)


def test_box_answers_equal_row_filters(tables):
    real, _ = tables
    ordinal = {"a", "d"}
    for q in box_queries(DOMAIN, triples(DOMAIN), ordinal, queries_per_triple=30, seed=4):
        for lo, hi in zip(q.lo, q.hi):
            for j, column in enumerate(q.attrs):
                assert 0 <= lo[j] <= hi[j] < DOMAIN[column]
                if column not in ordinal:
                    assert lo[j] == hi[j]  # point query on a categorical column
        mask = np.ones((len(q.lo), len(real)), dtype=bool)
        for j, column in enumerate(q.attrs):
            x = real[column].to_numpy()
            mask &= (x >= q.lo[:, [j]]) & (x <= q.hi[:, [j]])
        assert queries.answer_queries(real, DOMAIN, q) == pytest.approx(mask.mean(axis=1), abs=1e-12)


# --- ML efficiency -------------------------------------------------------------------------------

ML_DOMAIN = {"x": 6, "y": 3, "noise": 4, "level": 5}


def ml_table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """y = x mod 3 exactly; noise and level are independent of y."""
    x = rng.integers(0, 6, n)
    return pd.DataFrame({"x": x, "y": x % 3, "noise": rng.integers(0, 4, n),
                         "level": rng.integers(0, 5, n)})


@pytest.fixture(scope="module")
def ml_tables() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(21)
    return ml_table(rng, 3000), ml_table(rng, 1000), ml_table(rng, 3000)


def test_classifiers_learn_a_deterministic_target_from_real_like_synthetic(ml_tables):
    train, test, synthetic = ml_tables
    frame = ml_efficiency(train, test, synthetic, "y", ML_DOMAIN, seed=0, ordinal={"level"})
    assert list(frame["classifier"]) == [*ml.CLASSIFIERS, "mean"]
    # the target is a function of x: every model should be (near) perfect; 0.99 leaves room
    # for nothing but a pathological fit
    assert (frame[["f1_synthetic", "f1_real", "accuracy_synthetic", "accuracy_real"]] >= 0.99).all().all()


def test_shuffled_synthetic_target_scores_near_chance(ml_tables):
    train, test, synthetic = ml_tables
    broken = synthetic.assign(y=np.random.default_rng(5).permutation(synthetic["y"].to_numpy()))
    frame = ml_efficiency(train, test, broken, "y", ML_DOMAIN, seed=0).set_index("classifier")
    # chance is 1/3 (three balanced classes); 1000 test rows give a sd near 0.015, so 0.45 is
    # far above what a model without signal reaches
    assert frame.loc["mean", "accuracy_synthetic"] <= 0.45
    assert frame.loc["mean", "f1_synthetic"] <= 0.45
    assert frame.loc["mean", "f1_real"] >= 0.99


def test_a_class_absent_from_synthetic_scores_zero_for_that_class(ml_tables):
    train, test, synthetic = ml_tables
    no_two = synthetic[synthetic["y"] != 2]
    frame = ml_efficiency(train, test, no_two, "y", ML_DOMAIN, seed=0).set_index("classifier")
    share_two = float((test["y"] == 2).mean())
    for name in ml.CLASSIFIERS:
        # perfect on classes 0 and 1 at best, never right on class 2
        assert frame.loc[name, "accuracy_synthetic"] <= 1 - share_two + 1e-12
        assert frame.loc[name, "f1_synthetic"] <= 2 / 3 + 1e-12
        assert frame.loc[name, "f1_real"] >= 0.99


def test_single_class_and_constant_columns_and_tiny_tables_do_not_fail(ml_tables):
    train, test, synthetic = ml_tables
    one_class = synthetic[synthetic["y"] == 0].assign(noise=1)  # constant feature too
    frame = ml_efficiency(train, test, one_class, "y", ML_DOMAIN).set_index("classifier")
    share_zero = float((test["y"] == 0).mean())
    assert frame.loc["random_forest", "accuracy_synthetic"] == pytest.approx(share_zero, abs=1e-12)
    assert "constant prediction" in frame.loc["random_forest", "note"]
    tiny = ml_efficiency(train.head(3), test.head(20), synthetic.iloc[[0, 1, 2, 4, 5]], "y",
                         ML_DOMAIN).set_index("classifier")
    assert tiny.drop(columns="note").map(math.isfinite).all().all()


def test_training_rows_are_capped_with_a_seeded_sample(ml_tables, monkeypatch):
    train, test, synthetic = ml_tables
    monkeypatch.setattr(ml, "MAX_TRAIN_ROWS", 500)
    built = []
    tree_features = ml._tree_features
    monkeypatch.setattr(ml, "_tree_features",
                        lambda codes, features: built.append(len(codes["y"]))
                        or tree_features(codes, features))
    first = ml_efficiency(train, test, synthetic, "y", ML_DOMAIN, seed=9)
    assert sorted(built) == [500, 500, 1000]  # both training tables capped; test rows kept
    assert first.equals(ml_efficiency(train, test, synthetic, "y", ML_DOMAIN, seed=9))
    # 500 rows still teach y = x mod 3 (the random forest, splitting codes of x with one random
    # feature per split, is the weakest: 0.97 here)
    assert (first["f1_synthetic"] >= 0.95).all()


# --- figures -------------------------------------------------------------------------------------


def decoded_shape(png: bytes) -> tuple[int, ...]:
    return matplotlib.image.imread(io.BytesIO(png), format="png").shape


def test_histograms_png_decodes_to_the_documented_size():
    wide = {f"column_{i}": k for i, k in enumerate([2, 3, 5, 7, 12, 20, 40, 100, 4, 6, 9, 2, 3])}
    rng = np.random.default_rng(8)
    r = pd.DataFrame({c: rng.integers(0, k, 300) for c, k in wide.items()})
    s = pd.DataFrame({c: rng.integers(0, k, 200) for c, k in wide.items()})
    png = histograms_png(r, s, wide, labels={"column_1": ["low", "middle", "a very long label"]})
    assert png.startswith(PNG_SIGNATURE)
    width, height = histogram_figsize(len(wide))  # 13 columns: 4 x 4 grid
    assert decoded_shape(png)[:2] == (round(height * DPI), round(width * DPI))


def test_tvd_heatmap_png_decodes_to_the_documented_size(tables):
    real, synthetic = tables
    png = tvd_heatmap_png(pair_tvd(real, synthetic, DOMAIN), list(DOMAIN))
    assert png.startswith(PNG_SIGNATURE)
    width, height = heatmap_figsize(len(DOMAIN))
    assert decoded_shape(png)[:2] == (round(height * DPI), round(width * DPI))


# --- the report ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report_tables() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(31)

    def frame(n: int) -> pd.DataFrame:
        return ml_table(rng, n).join(random_table(rng, n)[["a", "b", "d"]])

    return frame(1500), frame(600), frame(1500)


REPORT_DOMAIN = {**ML_DOMAIN, "a": 3, "b": 5, "d": 7}


def test_report_compares_with_test_rows_and_gives_the_train_baseline(report_tables):
    train, test, synthetic = report_tables
    report = utility_report(train, test, synthetic, REPORT_DOMAIN, target="y",
                            ordinal={"level", "d"}, seed=0, triples_count=15)
    assert report.reference == "test_real"
    assert report.fidelity == pytest.approx(fidelity(test, synthetic, REPORT_DOMAIN), abs=1e-12)
    assert report.fidelity_train == pytest.approx(fidelity(train, synthetic, REPORT_DOMAIN), abs=1e-12)
    assert report.fidelity_baseline == pytest.approx(fidelity(train, test, REPORT_DOMAIN), abs=1e-12)
    assert len(report.triples) == 15 and report.queries == 15 * queries.DEFAULT_QUERIES_PER_TRIPLE
    expected = query_error(test, synthetic, REPORT_DOMAIN, list(report.triples),
                           seed=0, ordinal={"level", "d"})
    assert report.query_error == pytest.approx(expected.query_error, abs=1e-12)
    assert report.tvd3 == pytest.approx(expected.tvd3, abs=1e-12)
    assert report.ml is not None and report.ml_reason is None
    summary = report.summary()
    json.dumps(summary, allow_nan=False)  # JSON-safe
    assert summary["ml_f1_synthetic"] >= 0.99 and summary["rows"]["test_real"] == 600


@pytest.fixture(scope="module")
def report(report_tables):
    """The report of report_tables with target y, 5 triples, the default seed (0)."""
    train, test, synthetic = report_tables
    return utility_report(train, test, synthetic, REPORT_DOMAIN, target="y", triples_count=5)


def test_report_is_deterministic_given_the_seed(report_tables, report):
    train, test, synthetic = report_tables
    again = utility_report(train, test, synthetic, REPORT_DOMAIN, target="y", seed=0,
                           triples_count=5)
    assert report.summary() == again.summary()
    assert report.ml.equals(again.ml)
    assert report.histograms_png == again.histograms_png
    assert report.tvd_heatmap_png == again.tvd_heatmap_png
    # 35 triples, 5 drawn: another seed, another draw (no classifiers needed to see it)
    other = utility_report(train, test, synthetic, REPORT_DOMAIN, target=None, seed=5,
                           triples_count=5)
    assert report.triples != other.triples


@pytest.mark.parametrize("test_rows, target, reason", [
    (600, None, "no target"),
    (1, "y", "1 row(s)"),
])
def test_report_without_target_or_with_too_few_test_rows_has_no_ml(report_tables, test_rows,
                                                                    target, reason):
    train, test, synthetic = report_tables
    report = utility_report(train, test.head(test_rows), synthetic, REPORT_DOMAIN, target=target,
                            triples_count=5)
    assert report.ml is None and reason in report.ml_reason
    assert report.summary()["ml_reason"] == report.ml_reason
    if test_rows < ml.MIN_TEST_ROWS:  # too few held-out rows: compare with train_real
        assert report.reference == "train_real" and report.fidelity_baseline is None
        assert report.fidelity == pytest.approx(fidelity(train, synthetic, REPORT_DOMAIN), abs=1e-12)


def test_report_without_test_table_uses_train_rows(report_tables):
    train, _, synthetic = report_tables
    report = utility_report(train, None, synthetic, REPORT_DOMAIN, target="y", triples_count=5)
    assert report.reference == "train_real" and report.rows["test_real"] == 0
    assert report.ml is None and "0 row(s)" in report.ml_reason
    assert report.query_error_baseline is None and report.tvd3_baseline is None


# --- files for the owner -------------------------------------------------------------------------


def test_report_html_is_one_page_with_the_summary_the_ml_table_and_both_figures(report_tables,
                                                                                report):
    import base64

    train, test, synthetic = report_tables
    page = report_html(report, "Utility report of 'x<y>' (owner-only)")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "x&lt;y&gt;" in page and "x<y>" not in page  # the title is escaped
    for png in (report.histograms_png, report.tvd_heatmap_png):  # inline, no other file needed
        assert f'src="data:image/png;base64,{base64.b64encode(png).decode()}"' in page
    assert page.count("<img ") == 2 and page.count('src="') == 2  # self-contained
    assert "<link" not in page and "<script" not in page
    for name in (*ml.CLASSIFIERS, "mean"):
        assert f"<td>{name}</td>" in page
    mean = report.ml.set_index("classifier").loc["mean"]
    assert f"<td>{mean['f1_synthetic']:.4f}</td>" in page
    assert f"<td>fidelity</td><td>{report.summary()['fidelity']:.4f}</td>" in page
    assert "not differentially private" in page
    without_ml = utility_report(train, test, synthetic, REPORT_DOMAIN, target=None, triples_count=5)
    assert "not computed: no target" in report_html(without_ml, "t")


def test_report_document_round_trips_through_json(report):
    document = report_document(report)
    assert json.loads(json.dumps(document, allow_nan=False)) == document
    assert document["summary"]["fidelity"] == report.summary()["fidelity"]
    assert set(document["pair_tvd"]) == {" x ".join(p) for p in report.pair_tvds}
    assert [r["classifier"] for r in document["ml"]] == [*ml.CLASSIFIERS, "mean"]


def test_owner_only_files_are_0600_in_0700_folders_and_replace_wider_old_files(tmp_path):
    import os
    import stat

    os.chmod(tmp_path, 0o755)  # pytest makes it 0700
    root = tmp_path / "private"
    folder = root / "example"
    folder.mkdir(parents=True, mode=0o755)
    os.chmod(root, 0o755)
    os.chmod(folder, 0o755)
    old = folder / "report.json"
    old.write_text("old")
    os.chmod(old, 0o644)
    paths = write_owner_only(folder, {"report.json": b"{}", "a.png": b"\x89PNG"}, root=root)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(root) == mode(folder) == 0o700
    assert mode(tmp_path) == 0o755  # above the root: untouched
    assert {n: mode(p) for n, p in paths.items()} == {"report.json": 0o600, "a.png": 0o600}
    assert old.read_bytes() == b"{}" and sorted(os.listdir(folder)) == ["a.png", "report.json"]
    with pytest.raises(ValueError, match="does not contain"):
        write_owner_only(folder, {}, root=tmp_path / "elsewhere")
