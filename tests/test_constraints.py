"""Declared constraints (core/constraints.py): the grammar and its refusals, and decoding that
honours them (redraw inside bins, else projection) with the row count and the seed's rows kept."""

import numpy as np
import pyarrow as pa
import pytest

from dp_synth_assets.core.config import ColumnSpec
from dp_synth_assets.core.constraints import ConstraintError, parse, validate
from dp_synth_assets.core.domain import Encoding, EncodingPlan
from dp_synth_assets.core.synthesize import decode_constrained

COLUMNS = {"pickup": ColumnSpec(kind="datetime", bounds=["2024-01-01", "2024-02-01"]),
           "dropoff": ColumnSpec(kind="datetime", bounds=["2024-01-01", "2024-02-01"]),
           "a": ColumnSpec(kind="integer", bounds=[0, 100]),
           "b": ColumnSpec(kind="integer", bounds=[0, 100]),
           "zone": ColumnSpec(kind="categorical", categories=["x", "y", "z"], nullable=True),
           "to_zone": ColumnSpec(kind="categorical", categories=["z", "y", "x"], nullable=True),
           "mode": ColumnSpec(kind="categorical", categories=["x", "y"]),
           "found": ColumnSpec(kind="categorical"),
           "flag": ColumnSpec(kind="boolean")}


def test_parse_and_validate():
    c = parse('dropoff >= pickup')
    assert (c.left, c.op, c.right) == ("dropoff", ">=", "pickup")
    (lit,) = validate(["pickup >= '2024-01-02'"], COLUMNS)
    assert lit.right is None and lit.value == pytest.approx(19724.0)
    assert validate(["a < 5.5"], COLUMNS)[0].value == 5.5


@pytest.mark.parametrize("text, says", [
    ("dropoff >= __import__('os')", "does not read"),
    ("dropof >= pickup", "not a declared column"),
    ("zone == a", "categorical"),
    ("a >= pickup", "compares a number column with a datetime column"),
    ("a >= a", "itself"),
    ("pickup >= 3", "quoted ISO date"),
    ("a >= 'x'", "needs a number"),
    ("zone < to_zone", "orders the categorical column 'zone'"),
    ("zone >= 'x'", "a categorical column takes only == or !="),
    ("zone == mode", "declared categories differ"),
    ("zone != found", "declared categories differ"),
    ("zone == 'w'", "'w' is not a declared category of 'zone'"),
    ("zone == 3", "not a declared category"),
    ("zone != a", "compares a categorical column with a number column"),
    ("flag == a", "column 'flag' is boolean"),
])
def test_refusals(text, says):
    with pytest.raises(ConstraintError, match=says):
        validate([text], COLUMNS)


def plan() -> EncodingPlan:
    def binned(name, kind, sql_type, low, high, integer):
        return Encoding(name, kind, sql_type, 10, low=low, high=high, bins=10,
                        integer_bins=integer)
    return EncodingPlan((binned("pickup", "datetime", "TIMESTAMP", 19723.0, 19754.0, False),
                         binned("dropoff", "datetime", "TIMESTAMP", 19723.0, 19754.0, False),
                         binned("a", "integer", "BIGINT", 0, 99, True),
                         binned("b", "integer", "BIGINT", 0, 99, True)))


def violations(table, texts) -> dict:
    out = {}
    for t in texts:
        c = parse(t)
        left, right = (table.column(n).to_numpy(zero_copy_only=False) for n in c.columns)
        out[t] = float(np.mean(~(right <= left)))
    return out


def test_decoding_honours_constraints_keeps_rows_and_seed():
    rng = np.random.default_rng(0)
    n = 20_000
    pick = rng.integers(0, 10, n)
    codes = {"pickup": pick, "dropoff": np.minimum(pick + rng.integers(0, 2, n), 9),
             "a": (a := rng.integers(0, 10, n)), "b": np.maximum(a - rng.integers(0, 2, n), 0)}
    texts = ["dropoff >= pickup", "a >= b"]
    declared = validate(texts, COLUMNS)
    free = decode_constrained(plan(), codes, np.random.default_rng(1))
    assert min(violations(free, texts).values()) > 0.05  # the test can fail
    kept = decode_constrained(plan(), codes, np.random.default_rng(1), declared)
    assert kept.num_rows == n
    assert violations(kept, texts) == {t: 0.0 for t in texts}
    again = decode_constrained(plan(), codes, np.random.default_rng(1), declared)
    assert kept.equals(again)


def test_the_check_sql_counts_planted_violations_in_duckdb():
    """The constraints check's scan (check_aggregates.sql over `condition_sql`) on a real DuckDB
    table: 2 of 4 rows violate `dropoff >= pickup`, 1 violates `a >= 10`, a NULL is no violation."""
    import duckdb

    from dp_synth_assets.core.constraints import condition_sql
    from dp_synth_assets.core.sql import sql

    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES "
                "(TIMESTAMP '2024-01-02', TIMESTAMP '2024-01-01', 5), "
                "(TIMESTAMP '2024-01-01', TIMESTAMP '2024-01-03', 20), "
                "(TIMESTAMP '2024-01-05', TIMESTAMP '2024-01-04', 30), "
                "(NULL, TIMESTAMP '2024-01-04', NULL)) AS v(pickup, dropoff, a)")
    declared = validate(["dropoff >= pickup", "a >= 10"], COLUMNS)
    kinds = {n: c.kind for n, c in COLUMNS.items()}
    counts = "".join(", " + sql("check_count_if", condition=f"NOT {condition_sql(c, kinds)}",
                                alias=f"v{i}") for i, c in enumerate(declared))
    assert con.execute(sql("check_aggregates", source="t", aggregates=counts)).fetchall() == [(4, 2, 1)]


# ---- categorical constraints, against brute force ---------------------------------------------

ZONES = ("x", "y", "z")


def categorical_plan() -> EncodingPlan:
    def zone(name, categories):  # codes: the categories, then other, then NULL
        return Encoding(name, "categorical", "VARCHAR", len(categories) + 2,
                        categories=categories, other_label="other", nullable=True)
    return EncodingPlan((zone("zone", ZONES), zone("to_zone", ("z", "y", "x")),
                         Encoding("a", "integer", "BIGINT", 10, low=0, high=99, bins=10,
                                  integer_bins=True)))


def holds(op: str, left, right) -> bool:
    """One row, as a SQL CHECK reads it: a NULL operand satisfies the constraint."""
    if left is None or right is None:
        return True
    return {"==": left == right, "!=": left != right, ">=": left >= right,
            "<": left < right}[op]


def brute_violations(table, c) -> int:
    return sum(not holds(c.op, r[c.left], operand(c, r)) for r in table.to_pylist())


def operand(c, row):
    """The right operand of `c` in `row`: a column's value, a category or a number."""
    return row[c.right] if c.right else (c.literal if c.value is None else c.value)


CATEGORICAL = [["zone == 'x'"], ["zone != 'x'"], ["zone != to_zone"], ["zone == to_zone"],
               ["to_zone != 'other'"], ["zone != 'y'", "to_zone != zone"],
               ["zone != to_zone", "zone != 'x'", "a >= 40"],
               ["to_zone == 'z'", "zone != to_zone"]]


@pytest.mark.parametrize("texts", CATEGORICAL, ids=lambda t: " & ".join(t))
def test_categorical_constraints_hold_after_decoding_and_the_check_counts_as_brute_force(texts):
    import duckdb

    from dp_synth_assets.core.constraints import condition_sql
    from dp_synth_assets.core.sql import sql

    rng = np.random.default_rng(len(texts) + len(texts[0]))
    n = 3000
    codes = {"zone": rng.integers(0, 5, n), "to_zone": rng.integers(0, 5, n),
             "a": rng.integers(0, 10, n)}
    declared = validate(texts, COLUMNS)
    free = decode_constrained(categorical_plan(), codes, np.random.default_rng(2))
    plain = free.select(["zone", "to_zone", "a"]).cast(
        pa.schema([("zone", "string"), ("to_zone", "string"), ("a", "int64")]))
    before = {c.text: brute_violations(plain, c) for c in declared}
    assert all(v > 0 for v in before.values())  # the test can fail
    con = duckdb.connect(":memory:")
    con.register("t", plain)
    kinds = {n: c.kind for n, c in COLUMNS.items()}
    counts = "".join(", " + sql("check_count_if", condition=f"NOT {condition_sql(c, kinds)}",
                                alias=f"v{i}") for i, c in enumerate(declared))
    assert con.execute(sql("check_aggregates", source="t", aggregates=counts)).fetchall() == [
        (n, *before.values())]

    kept = decode_constrained(categorical_plan(), codes, np.random.default_rng(2), declared)
    assert kept.num_rows == n and kept.equals(
        decode_constrained(categorical_plan(), codes, np.random.default_rng(2), declared))
    typed = kept.select(["zone", "to_zone", "a"]).cast(plain.schema)
    assert {c.text: brute_violations(typed, c) for c in declared} == {c.text: 0 for c in declared}
    # NULLs stay NULL, and values stay among the column's own
    for name in ("zone", "to_zone"):
        was, now = plain.column(name).to_pylist(), typed.column(name).to_pylist()
        assert [v is None for v in was] == [v is None for v in now]
        assert set(now) <= set(ZONES) | {"other", None}
    if len(declared) == 1:  # a row that satisfied the one constraint is untouched
        c = declared[0]
        rows, after = plain.to_pylist(), typed.to_pylist()
        ok = [r == s for r, s in zip(rows, after)
              if holds(c.op, r[c.left], operand(c, r))]
        assert all(ok)
    if "zone != 'x'" in texts and len(declared) == 1:  # drawn from the rows that satisfy it
        share = lambda t, v: t.column("zone").to_pylist().count(v)  # noqa: E731
        assert abs(share(typed, "y") / max(share(typed, "z"), 1) - 1) < 0.2


def test_integer_typed_categoricals_compare_as_the_table_writes_them():
    """Categories of an INTEGER column: `a != 3` and `a != b` hold after decoding, the values
    stay integers of the declared list, and the check's SQL (VARCHAR) agrees."""
    import duckdb

    from dp_synth_assets.core.constraints import condition_sql
    from dp_synth_assets.core.sql import sql

    columns = {n: ColumnSpec(kind="categorical", categories=[1, 2, 3], type="INTEGER",
                             other=False) for n in ("a", "b")}
    declared = validate(["a != 3", "a != b"], columns)
    plan = EncodingPlan(tuple(Encoding(n, "categorical", "INTEGER", 3, categories=(1, 2, 3),
                                       has_other=False) for n in ("a", "b")))
    rng = np.random.default_rng(3)
    codes = {"a": rng.integers(0, 3, 2000), "b": rng.integers(0, 3, 2000)}
    con = duckdb.connect(":memory:")
    kinds = {"a": "categorical", "b": "categorical"}
    counts = "".join(", " + sql("check_count_if", condition=f"NOT {condition_sql(c, kinds)}",
                                alias=f"v{i}") for i, c in enumerate(declared))
    for kept, expected in ((decode_constrained(plan, codes, np.random.default_rng(1)), None),
                           (decode_constrained(plan, codes, np.random.default_rng(1), declared),
                            [0, 0])):
        frame = {n: kept.column(n).to_pylist() for n in ("a", "b")}
        assert set(frame["a"]) <= {1, 2, 3} and all(isinstance(v, int) for v in frame["a"])
        brute = [sum(a == 3 for a in frame["a"]),
                 sum(a == b for a, b in zip(frame["a"], frame["b"]))]
        con.register("t", kept)
        assert list(con.execute(sql("check_aggregates", source="t",
                                    aggregates=counts)).fetchall()[0][1:]) == brute
        con.unregister("t")
        assert brute == expected if expected else min(brute) > 100
