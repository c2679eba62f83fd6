"""The Great Expectations wrapper: each expectation kind the project relies on, passing and failing.

GX is imported once per test process (a few seconds) and its ephemeral context is reused, so every
run_suite call here costs tens of milliseconds.
"""

import datetime as dt
import html
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.checks import gx_context
from dp_synth_assets.checks.gx import (
    Expectation,
    ExpectationOutcome,
    SuiteOutcome,
    run_suite,
    write_data_docs,
    write_outcome,
)

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["id", "amount", "status", "flag", "created", "day"]


def good_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": pd.array([1, 2, 3, 4, 5, 6], dtype="Int64"),
            "amount": [10.0, 12.5, np.nan, 7.25, 30.0, 0.0],
            "status": ["new", "paid", None, "paid", "void", "new"],  # pandas 3: dtype "str"
            "flag": pd.array([True, False, None, True, True, False], dtype="boolean"),
            "created": pd.to_datetime(
                ["2024-01-01T00:00", "2024-02-15T12:30", None, "2024-06-30T00:00",
                 "2024-03-01T00:00", "2024-12-31T00:00"]
            ).astype("datetime64[us]"),
            "day": pd.Series(
                [dt.date(2024, 1, 1), dt.date(2024, 2, 15), None, dt.date(2024, 6, 30),
                 dt.date(2024, 3, 1), dt.date(2024, 12, 31)],
                dtype=object,
            ),
        }
    )


def E(name, **kwargs):
    return Expectation(name, kwargs)


def by_name(outcome: SuiteOutcome) -> dict[str, ExpectationOutcome]:
    return {r.kwargs.get("column", r.name): r for r in outcome.results}


def test_frame_has_the_dtypes_the_findings_are_about():
    dtypes = {c: str(t) for c, t in good_frame().dtypes.items()}
    assert dtypes == {
        "id": "Int64",
        "amount": "float64",
        "status": "str",
        "flag": "boolean",
        "created": "datetime64[us]",
        "day": "object",
    }


def test_importing_the_module_does_not_import_great_expectations():
    code = (
        "import sys, dp_synth_assets.checks.gx as v; "
        "assert 'great_expectations' not in sys.modules, 'GX imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# 1. exact column set and order
def test_columns_match_ordered_list():
    suite = [E("ExpectTableColumnsToMatchOrderedList", column_list=COLUMNS)]
    assert run_suite(good_frame(), "cols", suite).success
    df = good_frame()
    for bad in (df[COLUMNS[::-1]], df.drop(columns="day"), df.assign(extra=1)):
        out = run_suite(bad, "cols", suite)
        assert not out.success
        assert out.results[0].observed["observed_value"] == list(bad.columns)
        assert out.results[0].observed["details"]["mismatched"]


# 2. column types
TYPE_SUITE = [
    E("ExpectColumnValuesToBeInTypeList", column="id", type_list=["Int64Dtype"]),
    E("ExpectColumnValuesToBeInTypeList", column="amount", type_list=["float64"]),
    E("ExpectColumnValuesToBeOfType", column="status", type_="str"),
    E("ExpectColumnValuesToBeInTypeList", column="flag", type_list=["BooleanDtype"]),
    E("ExpectColumnValuesToBeInTypeList", column="created", type_list=["datetime64[us]"]),
    E("ExpectColumnValuesToBeOfType", column="day", type_="date"),
]


def test_column_types_pass_on_the_right_dtypes():
    out = run_suite(good_frame(), "types", TYPE_SUITE)
    assert out.success, [r for r in out.results if not r.success]


@pytest.mark.parametrize(
    "column, corrupt",
    [
        ("id", lambda s: s.astype("float64")),
        ("id", lambda s: s.fillna(0).astype("int64")),
        ("amount", lambda s: s.astype(str)),
        ("status", lambda s: pd.Series(["new", 5, None, "paid", "void", "new"], dtype=object)),
        ("flag", lambda s: s.fillna(False).astype(bool)),
        ("created", lambda s: s.astype("datetime64[ns]")),
        ("day", lambda s: s.where(s.index != 1, "2024-02-15")),
    ],
    ids=["Int64->float64", "Int64->int64", "float->str", "str->object-mixed", "boolean->bool",
         "us->ns", "date->str-value"],
)
def test_column_types_fail_on_a_corrupted_column(column, corrupt):
    df = good_frame()
    df[column] = corrupt(df[column])
    out = run_suite(df, "types", TYPE_SUITE)
    failed = [r.kwargs["column"] for r in out.results if not r.success]
    assert failed == [column]


def test_coarse_type_checks_do_not_see_nullability_or_unit():
    df = good_frame().assign(
        id=lambda d: d["id"].fillna(0).astype("int64"),
        created=lambda d: d["created"].astype("datetime64[ns]"),
    )
    out = run_suite(df, "coarse", [
        E("ExpectColumnValuesToBeOfType", column="id", type_="int64"),
        E("ExpectColumnValuesToBeOfType", column="created", type_="datetime64"),
        E("ExpectColumnValuesToBeInTypeList", column="id", type_list=["int64"]),
    ])
    assert out.success


# 3. values in a set, nulls ignored
SET_SUITE = [
    E("ExpectColumnValuesToBeInSet", column="status", value_set=["new", "paid", "void"]),
    E("ExpectColumnValuesToBeInSet", column="id", value_set=[1, 2, 3, 4, 5, 6]),
    E("ExpectColumnValuesToBeInSet", column="flag", value_set=[True, False]),
]


def test_in_set_ignores_nulls():
    out = run_suite(good_frame(), "set", SET_SUITE)
    assert out.success
    assert by_name(out)["status"].observed["missing_count"] == 1


def test_in_set_fails_on_an_unknown_value():
    df = good_frame()
    df.loc[3, "status"] = "refunded"
    df.loc[0, "id"] = 7
    out = run_suite(df, "set", SET_SUITE)
    assert not out.success
    res = by_name(out)
    assert not res["status"].success
    assert res["status"].observed["partial_unexpected_list"] == ["refunded"]
    assert not res["id"].success and res["id"].observed["partial_unexpected_list"] == [7]
    assert res["flag"].success


def test_in_set_with_date_values_is_refused_clearly():
    with pytest.raises(ValueError, match="JSON round trip"):
        run_suite(good_frame(), "dates", [
            E("ExpectColumnValuesToBeInSet", column="day", value_set=[dt.date(2024, 1, 1)])
        ])


# 4. values between bounds, numeric and datetime
BETWEEN_SUITE = [
    E("ExpectColumnValuesToBeBetween", column="amount", min_value=0, max_value=30),
    E("ExpectColumnValuesToBeBetween", column="id", min_value=1, max_value=None),
    E("ExpectColumnValuesToBeBetween", column="created",
      min_value="2024-01-01T00:00:00", max_value=dt.datetime(2024, 12, 31)),
    E("ExpectColumnValuesToBeBetween", column="day",
      min_value=dt.date(2024, 1, 1), max_value="2024-12-31"),
]


def test_between_passes_inclusive_bounds():
    out = run_suite(good_frame(), "between", BETWEEN_SUITE)
    assert out.success, [r for r in out.results if not r.success]


def test_between_fails_outside_bounds():
    df = good_frame()
    df.loc[0, "amount"] = 30.5
    df.loc[1, "id"] = 0
    df.loc[4, "created"] = pd.Timestamp("2023-12-31 23:59")
    df.loc[5, "day"] = dt.date(2025, 1, 1)
    out = run_suite(df, "between", BETWEEN_SUITE)
    assert [r.success for r in out.results] == [False] * 4
    assert all(r.exception is None for r in out.results)
    assert by_name(out)["created"].observed["partial_unexpected_list"] == ["2023-12-31T23:59:00"]
    assert by_name(out)["day"].observed["partial_unexpected_list"] == ["2025-01-01"]


def test_between_a_datetime_column_and_a_date_only_bound_is_an_error_not_a_pass():
    out = run_suite(good_frame(), "between", [
        E("ExpectColumnValuesToBeBetween", column="created", min_value="2024-01-01", max_value=None)
    ])
    assert not out.success
    assert "Cannot compare Timestamp with datetime.date" in out.results[0].exception


# 5. row count
def test_row_count():
    suite = [E("ExpectTableRowCountToEqual", value=6)]
    assert run_suite(good_frame(), "rows", suite).success
    out = run_suite(good_frame().iloc[:5], "rows", suite)
    assert not out.success and out.results[0].observed == {"observed_value": 5}


# 6. null fraction within [lo, hi]
def null_fraction(column: str, lo: float, hi: float) -> list[Expectation]:
    return [
        E("ExpectColumnValuesToBeNull", column=column, mostly=lo),
        E("ExpectColumnValuesToNotBeNull", column=column, mostly=round(1 - hi, 12)),
    ]


BOUNDS = [(0, 1), (0, 0), (1, 1), (0.25, 0.25), (0.2, 0.3), (0.3, 0.5), (0.0, 0.2), (0.5, 1.0),
          (0.7, 0.7)]


def test_null_fraction_bounds_match_the_arithmetic_including_edges():
    n = 20
    df = pd.DataFrame({
        "none": np.arange(n, dtype="float64"),
        "quarter": pd.array([None] * 5 + list(range(15)), dtype="Int64"),
        "seventy": pd.Series([None] * 14 + ["x"] * 6, dtype="str"),
        "all": pd.Series([None] * n, dtype="float64"),
        "dates": pd.Series([None] * 5 + [dt.date(2024, 1, 1)] * 15, dtype=object),
    })
    cases = [(c, lo, hi) for c in df.columns for lo, hi in BOUNDS]
    suite = [e for c, lo, hi in cases for e in null_fraction(c, lo, hi)]
    out = run_suite(df, "nulls", suite)
    assert len(out.results) == 2 * len(cases)
    for i, (c, lo, hi) in enumerate(cases):
        is_null, not_null = out.results[2 * i], out.results[2 * i + 1]
        frac = df[c].isna().mean()
        assert (is_null.success and not_null.success) == (lo <= frac <= hi), (c, lo, hi, frac)
        assert not_null.observed["unexpected_count"] / not_null.observed["element_count"] == frac


def test_unrounded_one_minus_hi_is_a_float_trap():
    df = pd.DataFrame({"x": [None] * 7 + [1.0] * 3})
    out = run_suite(df, "trap", [E("ExpectColumnValuesToNotBeNull", column="x", mostly=1 - 0.7)])
    assert not out.success  # 1 - 0.7 == 0.30000000000000004 > 0.3; hence round() above


def test_mostly_outside_unit_interval_is_rejected():
    with pytest.raises(ValueError):
        run_suite(good_frame(), "bad", [E("ExpectColumnValuesToBeNull", column="id", mostly=1.5)])


# 7. tvd <= tolerance on every row of a statistics frame
TVD = [E("ExpectColumnPairValuesAToBeGreaterThanB",
         column_A="tolerance", column_B="tvd", or_equal=True)]


def test_tvd_within_tolerance():
    stats = pd.DataFrame({"column": ["a", "b", "c"], "tvd": [0.01, 0.05, 0.1],
                          "tolerance": [0.02, 0.05, 0.1]})
    assert run_suite(stats, "tvd", TVD).success


def test_tvd_above_tolerance_or_nan_fails():
    stats = pd.DataFrame({"column": ["a", "b", "c"], "tvd": [0.01, 0.06, np.nan],
                          "tolerance": [0.02, 0.05, 0.1]})
    out = run_suite(stats, "tvd", TVD)
    assert not out.success
    obs = out.results[0].observed
    assert obs["unexpected_count"] == 2
    assert obs["partial_unexpected_list"] == [[0.05, 0.06], [0.1, None]]


# the wrapper itself
def test_results_keep_input_order_and_raw_is_strict_json(tmp_path):
    suite = [
        Expectation("ExpectTableRowCountToEqual", {"value": 6}, meta={"check": "rows"}),
        E("ExpectColumnValuesToBeInSet", column="status", value_set=["new"]),
        E("ExpectColumnValuesToBeBetween", column="created", min_value=pd.Timestamp("2024-03-01"),
          max_value=None),
        E("ExpectColumnValuesToNotBeNull", column="no_such_column"),
    ]
    out = run_suite(good_frame(), "order", suite)
    assert out.suite == "order" and not out.success
    assert [r.name for r in out.results] == [e.name for e in suite]
    assert [r.success for r in out.results] == [True, False, False, False]
    assert out.results[2].kwargs["min_value"] == "2024-03-01T00:00:00"
    assert 'column "no_such_column"' in out.results[3].exception
    assert out.results[3].observed == {}
    assert [r.name for r in out.failures] == [e.name for e in suite[1:]]
    text = json.dumps(out.raw, allow_nan=False)  # strict JSON: no NaN, no numpy, no Timestamps
    assert '"check": "rows"' in text
    assert out.raw["suite_name"].startswith("order__")
    assert out.raw["statistics"]["evaluated_expectations"] == 4
    path = write_outcome(out, tmp_path / "nested" / "dir" / "order.json")
    assert json.loads(path.read_text()) == out.raw


def test_unknown_expectation_or_bad_kwargs_raise_before_running():
    with pytest.raises(ValueError, match="unknown Great Expectations expectation"):
        run_suite(good_frame(), "x", [E("ExpectNothingInParticular")])
    with pytest.raises(ValueError):
        run_suite(good_frame(), "x", [E("ExpectTableRowCountToEqual", value=1, bogus=True)])
    with pytest.raises(ValueError):
        run_suite(good_frame(), "x", [])


def test_calls_are_independent_and_leave_the_cached_context_empty():
    suite = [E("ExpectTableRowCountToEqual", value=6)]
    outs = [run_suite(good_frame(), "same-name", suite) for _ in range(3)]
    with ThreadPoolExecutor(4) as pool:
        outs += list(pool.map(lambda _: run_suite(good_frame(), "same-name", suite), range(4)))
    assert all(o.success for o in outs)
    assert len({o.raw["suite_name"] for o in outs}) == len(outs)
    ctx = gx_context._CONTEXT
    assert ctx is gx_context.context()
    assert list(ctx.data_sources.all()) == []
    assert ctx.suites.all() == [] and ctx.validation_definitions.all() == []
    assert ctx.validation_results_store.list_keys() == []
    assert not any(name.startswith("docs_") for name in ctx.stores)  # Data Docs stores removed


def test_runs_quietly(capfd):
    run_suite(good_frame(), "quiet", [E("ExpectColumnValuesToBeBetween", column="amount",
                                        min_value=0, max_value=100)])
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_a_repeated_expectation_is_reported_at_each_position():
    same = E("ExpectTableRowCountToEqual", value=6)
    twin = Expectation(same.name, same.kwargs, {"n": 2})
    out = run_suite(good_frame(), "dup", [same, twin, same])
    assert [r.success for r in out.results] == [True, True, True]
    assert out.raw["statistics"]["evaluated_expectations"] == 1


# Data Docs
def page_text(path: Path) -> str:
    """What a reader sees: the page without scripts and tags, whitespace collapsed."""
    text = path.read_text()
    text = re.sub(r"<script.*?</script>", " ", text[text.find("<body"):], flags=re.DOTALL)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def status_icons(path: Path) -> tuple[int, int, int]:
    """(passed, failed, raised) status icons in a validation page's expectation rows (the page
    header's icon carries aria-hidden and is not counted)."""
    text = path.read_text()
    return tuple(text.count(f'<i class="fas fa-{icon}" ></i>') for icon in (
        "check-circle text-success", "times text-danger", "exclamation-triangle text-warning"))


PASSING = [E("ExpectTableRowCountToEqual", value=6),
           E("ExpectColumnValuesToBeInSet", column="status", value_set=["new", "paid", "void"])]
FAILING = [E("ExpectTableRowCountToEqual", value=5),
           E("ExpectColumnValuesToBeInSet", column="status", value_set=["new", "paid"]),
           E("ExpectColumnValuesToNotBeNull", column="no_such_column")]


@pytest.fixture
def in_empty_cwd(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield cwd
    assert sorted(os.listdir(cwd)) == [], "GX wrote into the current working directory"


def test_data_docs_index_links_each_suite_and_pages_show_the_verdicts(tmp_path, in_empty_cwd):
    docs = tmp_path / "public" / "orders" / "data_docs"
    good = run_suite(good_frame(), "orders_domain", PASSING, docs_dir=docs)
    bad = run_suite(good_frame(), "orders_row_count", FAILING, docs_dir=docs)
    plain = run_suite(good_frame(), "orders_domain", PASSING)
    assert plain.docs_page is None and not (tmp_path / "cwd" / "gx").exists()
    assert good.success and not bad.success  # the verdicts do not depend on docs_dir
    assert [r.success for r in good.results] == [r.success for r in plain.results]

    index = docs / "index.html"
    assert index.is_file() and (docs / "static" / "styles").is_dir()
    index_html = index.read_text()
    for out in (good, bad):
        page = out.docs_page
        assert page.is_file() and page.suffix == ".html"
        rel = page.relative_to(docs).as_posix()
        assert rel.startswith(f"validations/{out.suite}/")
        assert f"'_table_row_link_path': '{rel}'" in index_html  # the row links the page
        assert f'href="expectations/{out.suite}.html"' in index_html  # the suite cell links...
        assert (docs / "expectations" / f"{out.suite}.html").is_file()  # ...an existing page
        assert f"Expectation Suite: {out.suite}" in page_text(page)
    assert "orders/data_docs" in page_text(index)  # the site's title

    text = page_text(good.docs_page)
    assert "Status: Succeeded" in text
    assert "Evaluated Expectations 2 Successful Expectations 2" in text
    assert "Must have exactly 6 rows." in text
    assert "values must belong to this set: new paid void . 0% unexpected" in text
    assert status_icons(good.docs_page) == (2, 0, 0)

    text = page_text(bad.docs_page)
    assert "Status: Failed" in text
    assert "Evaluated Expectations 3 Successful Expectations 0 Unsuccessful Expectations 3" in text
    assert "Must have exactly 5 rows. 6" in text  # the expectation, then the observed value
    assert "values must belong to this set: new paid . 1 unexpected values found." in text
    assert "Unexpected Value Count void 1" in text
    assert 'The column "no_such_column" in BatchData does not exist.' in text
    assert status_icons(bad.docs_page) == (0, 2, 1)  # the missing column raised
    for page in (good.docs_page, bad.docs_page):  # run_suite's per-call suffix is not shown
        assert not re.search(r"__[0-9a-f]{12}", page.read_text())

    suite_page = page_text(docs / "expectations" / "orders_row_count.html")
    assert "Must have exactly 5 rows." in suite_page and "values must never be null." in suite_page


def test_data_docs_rerun_replaces_the_suites_page(tmp_path, in_empty_cwd):
    docs = tmp_path / "data_docs"
    first = run_suite(good_frame(), "ds_domain", PASSING, docs_dir=docs)
    other = run_suite(good_frame(), "ds_row_count", FAILING, docs_dir=docs)
    second = run_suite(good_frame(), "ds_domain", FAILING[:1], docs_dir=docs)  # now it fails

    pages = sorted(p.relative_to(docs).as_posix() for p in (docs / "validations").rglob("*.html"))
    assert pages == sorted(p.relative_to(docs).as_posix() for p in (second.docs_page,
                                                                     other.docs_page))
    assert not first.docs_page.exists() and first.docs_page != second.docs_page
    assert len(list((docs / "gx_stores" / "validations").rglob("*.json"))) == 2
    assert sorted(p.name for p in (docs / "expectations").glob("*.html")) == [
        "ds_domain.html", "ds_row_count.html"]
    index = (docs / "index.html").read_text()
    assert first.docs_page.relative_to(docs).as_posix() not in index
    assert second.docs_page.relative_to(docs).as_posix() in index
    assert other.docs_page.relative_to(docs).as_posix() in index
    assert index.count("_table_row_link_path': 'validations/") == 2
    assert status_icons(second.docs_page) == (0, 1, 0)
    assert "Must have exactly 5 rows." in page_text(docs / "expectations" / "ds_domain.html")
    empty_dirs = [d for d in docs.rglob("*") if d.is_dir() and not any(d.iterdir())]
    assert empty_dirs == []


def test_data_docs_reuse_their_compiled_templates_after_the_first(tmp_path, monkeypatch):
    """GX builds a fresh Jinja view per page, recompiling every template (about 1 s a site);
    the process's cached views (`data_docs._reuse_views`) compile them once: the first render
    compiles templates, later ones none (a count, not a timing)."""
    import jinja2

    compiled = []
    compile_ = jinja2.Environment.compile

    def counted(self, *args, **kwargs):
        compiled.append(1)
        return compile_(self, *args, **kwargs)

    from dp_synth_assets.checks import data_docs

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    monkeypatch.setattr(data_docs, "_VIEWS", {})  # as in a new process: no view cached yet
    out = run_suite(good_frame(), "timing", PASSING)
    write_data_docs(out, tmp_path / "warm-up")
    first = len(compiled)
    write_data_docs(out, tmp_path / "docs")
    write_data_docs(out, tmp_path / "docs")
    assert first > 0 and len(compiled) == first


def test_write_data_docs_for_outcomes_built_by_hand(tmp_path):
    docs = tmp_path / "docs"
    vacuous = SuiteOutcome("ds_null_fraction", True, [], {"success": True, "note": "nothing"})
    page = write_data_docs(vacuous, docs)
    assert "Status: Succeeded" in page_text(page)
    assert "Evaluated Expectations 0" in page_text(page)
    assert "validations/ds_null_fraction/" in (docs / "index.html").read_text()

    a = run_suite(good_frame(), "a", PASSING)
    merged = SuiteOutcome("ds_schema", a.success, a.results, {"success": True, "a": a.raw})
    with pytest.raises(ValueError, match="not a GX validation result"):
        write_data_docs(merged, docs)
    with pytest.raises(TypeError):
        write_data_docs(a.raw, docs)


def test_data_docs_need_a_path_safe_suite_name(tmp_path):
    for name in ("a/b", "a.b", "", "ü"):
        with pytest.raises(ValueError, match="cannot name a Data Docs page"):
            run_suite(good_frame(), name, PASSING, docs_dir=tmp_path / "docs")
    assert not (tmp_path / "docs").exists()  # refused before anything ran


def test_data_docs_escape_data_values(tmp_path):
    frame = pd.DataFrame({"<b>col</b>": ["ok", "<script>alert(1)</script>", "<i>x</i>"]})
    out = run_suite(frame, "esc", [
        E("ExpectColumnValuesToBeInSet", column="<b>col</b>", value_set=["ok"]),
        E("ExpectTableColumnsToMatchOrderedList", column_list=["<b>col</b>", "extra"]),
    ], docs_dir=tmp_path / "docs")
    assert out.results[0].observed["partial_unexpected_list"][0] == "<script>alert(1)</script>"
    for path in [out.docs_page, *tmp_path.joinpath("docs").glob("*/*.html"),
                 tmp_path / "docs" / "index.html"]:
        raw = path.read_text()
        assert "<script>alert" not in raw and "<i>x</i>" not in raw and "<b>col" not in raw
    text = page_text(out.docs_page)
    assert "<script>alert(1)</script> 1" in text and "<b>col</b>" in text  # shown as text


def test_data_docs_run_quietly(tmp_path, capfd):
    run_suite(good_frame(), "quiet_docs", FAILING, docs_dir=tmp_path / "docs")
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""
