"""Encodings: decoding keeps the declared types and domains, and re-encodes to the same codes."""

import datetime as dt

import duckdb
import numpy as np
import pytest

from dp_synth_assets.core.config import ColumnSpec
from dp_synth_assets.core.domain import SchemaError, build_plan, encode_view_sql
from dp_synth_assets.core.synthesize import write_synthetic

COLUMNS = {
    "city": ColumnSpec(kind="categorical", categories=["Oslo", "Lima", "Pune"], nullable=True),
    "code": ColumnSpec(kind="categorical", categories=[3, 7, 11], other_label="-1"),
    "age": ColumnSpec(kind="integer", bounds=[17, 90], bins=10),
    "small": ColumnSpec(kind="integer", bounds=[1, 5], nullable=True),
    "score": ColumnSpec(kind="float", bounds=[-1.5, 2.5], bins=8, nullable=True),
    "day": ColumnSpec(kind="datetime", bounds=["2020-01-01", "2020-12-31"], bins=12),
    "stamp": ColumnSpec(kind="datetime", bounds=["2021-01-01T00:00:00", "2021-01-02T00:00:00"],
                        bins=24),
    "flag": ColumnSpec(kind="boolean", nullable=True),
}
TYPES = {"city": "VARCHAR", "code": "INTEGER", "age": "BIGINT", "small": "SMALLINT",
         "score": "DOUBLE", "day": "DATE", "stamp": "TIMESTAMP", "flag": "BOOLEAN"}


@pytest.fixture()
def plan():
    return build_plan(COLUMNS, TYPES)


def test_domain_sizes_count_kept_values_other_and_null(plan):
    assert plan.domain == {"city": 5, "code": 4, "age": 10, "small": 6, "score": 9, "day": 12,
                           "stamp": 24, "flag": 3}


def test_decoded_values_keep_types_and_domains_and_reencode_to_the_same_codes(plan, tmp_path):
    rng = np.random.default_rng(0)
    codes = {c: rng.integers(0, k, 5000) for c, k in plan.domain.items()}
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    write_synthetic(con, plan, [codes], rng, "synthetic.t", str(tmp_path / "t.parquet"))
    types = {r[0]: r[1] for r in con.execute("DESCRIBE synthetic.t").fetchall()}
    assert types == TYPES
    for path in ("synthetic.t", f"read_parquet('{tmp_path / 't.parquet'}')"):
        con.execute(encode_view_sql(plan, "enc", path))
        back = con.execute("SELECT * FROM enc").fetchnumpy()
        for c in plan.columns:
            assert np.array_equal(np.asarray(back[c]), codes[c]), c
    df = con.execute("SELECT * FROM synthetic.t").df()
    assert set(df["city"].dropna()) <= {"Oslo", "Lima", "Pune", "other"}
    assert set(df["code"].dropna()) <= {3, 7, 11, -1}
    assert df["age"].between(17, 90).all() and df["small"].dropna().between(1, 5).all()
    assert df["score"].dropna().between(-1.5, 2.5).all()
    assert df["day"].between(dt.datetime(2020, 1, 1), dt.datetime(2020, 12, 31)).all()
    assert df["stamp"].between(dt.datetime(2021, 1, 1), dt.datetime(2021, 1, 2)).all()
    # NULL codes come back as NULL, and only they do
    for c in ("city", "small", "score", "flag"):
        assert np.array_equal(df[c].isna().to_numpy(), codes[c] == plan.domain[c] - 1), c
    assert not df[["code", "age", "day", "stamp"]].isna().any().any()
    con.close()


def test_values_outside_the_bounds_are_clamped_into_the_edge_bins(plan, tmp_path):
    con = duckdb.connect()
    con.execute("CREATE TABLE s AS SELECT * FROM (VALUES (5, 2.0), (1000, -9.0), (17, 2.5)) t(age, score)")
    small = build_plan({"age": COLUMNS["age"], "score": COLUMNS["score"]},
                       {"age": "BIGINT", "score": "DOUBLE"})
    con.execute(encode_view_sql(small, "e", "s"))
    assert con.execute("SELECT age, score FROM e").fetchall() == [(0, 7), (9, 0), (0, 7)]


def test_a_declared_column_missing_from_the_source_is_named():
    with pytest.raises(SchemaError, match="city"):
        build_plan(COLUMNS, {k: v for k, v in TYPES.items() if k != "city"})


def test_other_label_must_fit_a_numeric_source_type():
    with pytest.raises(SchemaError, match="other_label"):
        build_plan({"code": ColumnSpec(kind="categorical", categories=[1, 2])}, {"code": "INTEGER"})


def test_rare_codes_and_privtree_edges_round_trip_through_sql(tmp_path):
    from dp_synth_assets.core.domain import Derived

    columns = {
        "city": ColumnSpec(kind="categorical"),
        "n": ColumnSpec(kind="integer", bounds=[0, 100], binning="privtree"),
        "x": ColumnSpec(kind="float", bounds=[0.0, 10.0], binning="privtree"),
        "day": ColumnSpec(kind="datetime", bounds=["2020-01-01", "2020-12-31"], binning="privtree"),
    }
    types = {"city": "VARCHAR", "n": "INTEGER", "x": "DOUBLE", "day": "DATE"}
    derived = {
        "city": Derived(categories=("Oslo", "Lima"), rare=(("Ayr", 3.0), ("Ely", 1.0))),
        "n": Derived(edges=(0.0, 7.0, 8.0, 50.0, 100.0)),
        "x": Derived(edges=(0.0, 0.5, 2.25, 10.0)),
        "day": Derived(edges=(18262.0, 18300.0, 18627.0)),
    }
    plan = build_plan(columns, types, derived)
    # city: 2 kept + rare + other + null (discovered, so nullable); bins only for declared bounds
    assert plan.domain == {"city": 5, "n": 4, "x": 3, "day": 2}
    rng = np.random.default_rng(3)
    codes = {c: rng.integers(0, k, 3000) for c, k in plan.domain.items()}
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    write_synthetic(con, plan, [codes], rng, "synthetic.r", str(tmp_path / "r.parquet"))
    con.execute(encode_view_sql(plan, "enc", "synthetic.r"))
    back = con.execute("SELECT * FROM enc").fetchnumpy()
    for c in plan.columns:
        assert np.array_equal(np.asarray(back[c]), codes[c]), c
    df = con.execute("SELECT * FROM synthetic.r").df()
    assert set(df["city"].dropna()) <= {"Oslo", "Lima", "Ayr", "Ely", "other"}
    assert df["n"].between(0, 100).all() and df["x"].between(0, 10).all()
    assert {r[1] for r in con.execute("DESCRIBE synthetic.r").fetchall()} >= {"INTEGER", "DATE"}
    con.close()


def test_exhaustive_categories_have_no_other_code_and_refuse_values_outside(tmp_path):
    from dp_synth_assets.core.marginals import SourceError, validate_source

    spec = {"g": ColumnSpec(kind="categorical", categories=[0, 1, 2], other=False),
            "h": ColumnSpec(kind="boolean")}
    plan = build_plan(spec, {"g": "INTEGER", "h": "BOOLEAN"})
    assert plan.domain["g"] == 3 and plan["g"].other_code is None
    con = duckdb.connect()
    con.execute("CREATE TABLE ok AS SELECT (i % 3)::INTEGER AS g, true AS h FROM range(30) t(i)")
    validate_source(con, "ok", spec, {"g": "INTEGER", "h": "BOOLEAN"}, "t")
    con.execute(encode_view_sql(plan, "e", "ok"))
    assert sorted({r[0] for r in con.execute("SELECT g FROM e").fetchall()}) == [0, 1, 2]
    con.execute("CREATE TABLE bad AS SELECT (i % 4)::INTEGER AS g, true AS h FROM range(30) t(i)")
    with pytest.raises(SourceError, match="'g' has values outside its declared categories"):
        validate_source(con, "bad", spec, {"g": "INTEGER", "h": "BOOLEAN"}, "t")
