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
    "code": ColumnSpec(kind="categorical", categories=[3, 7, 11], other_label="-1", type="INTEGER"),
    "age": ColumnSpec(kind="integer", bounds=[17, 90], bins=10),
    "small": ColumnSpec(kind="integer", bounds=[1, 5], nullable=True, type="smallint"),
    "score": ColumnSpec(kind="float", bounds=[-1.5, 2.5], bins=8, nullable=True),
    "day": ColumnSpec(kind="datetime", bounds=["2020-01-01", "2020-12-31"], bins=12, type="DATE"),
    "stamp": ColumnSpec(kind="datetime", bounds=["2021-01-01T00:00:00", "2021-01-02T00:00:00"],
                        bins=24),
    "flag": ColumnSpec(kind="boolean", nullable=True),
}
# the declared types (defaults for age, score, stamp, flag, city; `type:` for the others)
TYPES = {"city": "VARCHAR", "code": "INTEGER", "age": "BIGINT", "small": "SMALLINT",
         "score": "DOUBLE", "day": "DATE", "stamp": "TIMESTAMP", "flag": "BOOLEAN"}


@pytest.fixture()
def plan():
    return build_plan(COLUMNS, TYPES)


def test_types_and_column_order_come_from_the_spec_not_the_source():
    # the source's types and order play no part: only its column names are checked
    source = {"flag": "VARCHAR", "stamp": "VARCHAR", "day": "TIMESTAMP", "score": "DECIMAL(4,1)",
              "small": "DOUBLE", "age": "DOUBLE", "code": "VARCHAR", "city": "INTEGER"}
    plan = build_plan(COLUMNS, source)
    assert plan.columns == list(COLUMNS)
    assert {e.column: e.sql_type for e in plan.encodings} == TYPES
    assert plan["day"].integer_bins and not plan["stamp"].integer_bins


def test_a_declared_type_must_suit_the_kind_and_fit_the_bounds():
    from dp_synth_assets.core.config import RegistryError, parse_registry
    from tests.helpers import example_entry

    for column, problem in [({"kind": "integer", "type": "DATE"}, "not a type for kind integer"),
                            ({"kind": "float", "type": "VARCHAR"}, "not a type for kind float"),
                            ({"kind": "integer", "type": "TINYINT", "bounds": [0, 300]},
                             "do not fit the column's type TINYINT"),
                            ({"kind": "float", "type": "DECIMAL(4,2)", "bounds": [0, 500]},
                             "do not fit"),
                            ({"kind": "categorical", "categories": ["a"], "type": "INTEGER",
                              "nullable": True}, "must be integers")]:
        entry = example_entry()
        entry["columns"] = {**entry["columns"], "age": column}
        with pytest.raises(RegistryError, match=problem) as info:
            parse_registry({"datasets": {"example": entry}})
        assert "dataset 'example', key 'columns.age" in str(info.value)
    assert ColumnSpec(kind="float", type=" decimal( 10, 2 )").sql_type == "DECIMAL(10,2)"
    assert ColumnSpec(kind="datetime", type="date").sql_type == "DATE"


def test_dp_bounds_are_cut_to_the_declared_type():
    from dp_synth_assets.core.preprocess import bucket_edges, dp_bounds

    spec = ColumnSpec(kind="integer", type="TINYINT")
    hist = np.zeros(bucket_edges(spec).size + 1, dtype=np.int64)
    hist[[1, -2]] = 10 ** 6  # buckets near -2^40 and 2^40, far beyond -128 and 127
    low, high = dp_bounds(hist, "x", spec, 50.0, lambda *a, **k: None)
    assert (low, high) == (-128, 127)


def test_decimal_and_float_types_survive_the_table_and_its_parquet_copy(tmp_path):
    columns = {"price": ColumnSpec(kind="float", bounds=[0, 1000], type="DECIMAL(10,2)"),
               "ratio": ColumnSpec(kind="float", bounds=[0, 1], type="FLOAT"),
               "n": ColumnSpec(kind="integer", bounds=[0, 200], type="UTINYINT")}
    plan = build_plan(columns, columns)
    rng = np.random.default_rng(1)
    codes = {c: rng.integers(0, k, 500) for c, k in plan.domain.items()}
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    write_synthetic(con, plan, [codes], rng, "synthetic.d", str(tmp_path / "d.parquet"))
    expected = [("price", "DECIMAL(10,2)"), ("ratio", "FLOAT"), ("n", "UTINYINT")]
    for relation in ("synthetic.d", f"read_parquet('{tmp_path / 'd.parquet'}')"):
        assert [r[:2] for r in con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()] \
            == expected


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


def test_other_label_must_fit_an_integer_type():
    with pytest.raises(ValueError, match="other_label"):
        ColumnSpec(kind="categorical", categories=[1, 2], type="INTEGER")
    nullable = ColumnSpec(kind="categorical", categories=[1, 2], type="INTEGER", nullable=True)
    assert build_plan({"code": nullable}, ["code"])["code"].other_label is None  # decodes to NULL


def test_rare_codes_and_privtree_edges_round_trip_through_sql(tmp_path):
    from dp_synth_assets.core.domain import Derived

    columns = {
        "city": ColumnSpec(kind="categorical"),
        "n": ColumnSpec(kind="integer", bounds=[0, 100], binning="privtree", type="INTEGER"),
        "x": ColumnSpec(kind="float", bounds=[0.0, 10.0], binning="privtree"),
        "day": ColumnSpec(kind="datetime", bounds=["2020-01-01", "2020-12-31"], binning="privtree",
                          type="DATE"),
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


def test_exhaustive_categories_have_no_other_code_and_values_outside_take_the_fallback(tmp_path):
    from dp_synth_assets.core.source import count_fallbacks

    con = duckdb.connect()
    con.execute("CREATE TABLE ok AS SELECT (i % 3)::INTEGER AS g, true AS h FROM range(30) t(i)")
    con.execute("CREATE TABLE bad AS SELECT (i % 4)::INTEGER AS g, true AS h FROM range(8) t(i)")
    for fallback, code in ((None, 0), (2, 2)):
        spec = {"g": ColumnSpec(kind="categorical", categories=[0, 1, 2], other=False,
                                type="INTEGER", fallback=fallback),
                "h": ColumnSpec(kind="boolean")}
        plan = build_plan(spec, {"g": "INTEGER", "h": "BOOLEAN"})
        assert plan.domain["g"] == 3 and plan["g"].other_code is None
        assert count_fallbacks(con, "ok", spec, "t").counts == ()
        con.execute(encode_view_sql(plan, "e", "ok"))
        assert sorted({r[0] for r in con.execute("SELECT g FROM e").fetchall()}) == [0, 1, 2]
        found = count_fallbacks(con, "bad", spec, "t")
        assert found.rows == 8 and [(c, n) for c, _, n in found.counts] == [("g", 2)], found
        con.execute(encode_view_sql(plan, "e", "bad"))
        assert [r[0] for r in con.execute("SELECT g FROM e").fetchall()] == [
            0, 1, 2, code, 0, 1, 2, code]
