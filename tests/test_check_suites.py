"""Each check of the synthetic table (dp_synth_assets/checks/suites.py) on its own: an unchanged
synthetic table passes every check, and a table corrupted the way one check looks for fails that
check (and only the checks that look at what changed).

The inputs are what the pipeline hands the checks (the declared columns, the plan, the noisy
measurements and total, the fitted model), made by the notebook API on the bundled example with
no Dagster run; each case runs the checks it concerns (`suites.CHECKS`) on its table, in an
in-memory warehouse and a Parquet copy.
The whole pipeline's checks, stored results and Data Docs: tests/test_pipeline.py.
"""

import duckdb
import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.api import Synthesizer
from dp_synth_assets.checks.frames import CheckInputs, SyntheticTable, column_aggregates
from dp_synth_assets.checks.suites import CHECKS
from dp_synth_assets.core.domain import encode_expression
from dp_synth_assets.core.measure import Measurement
from dp_synth_assets.core.sql import ident
from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example

SOURCE_ROWS = 3137


@pytest.fixture(scope="module")
def fitted():
    """(the fitted Synthesizer, its synthetic table as a frame of the noisy row count)."""
    synth = Synthesizer(columns=EXAMPLE_COLUMNS, epsilon=1.0, delta=1e-9,
                        model={"iterations": 200}, seed=3)
    synth.fit(generate_example(SOURCE_ROWS, seed=11))
    return synth, synth.sample(seed=1).to_pandas()


@pytest.fixture
def verdicts(fitted, tmp_path):
    """`verdicts(frame, names, measurements=None, metadata=False)`: check name -> passed (with
    `metadata`: -> (passed, the check's metadata)), for the checks `names` of `frame` (written
    to Parquet) against the fit (`measurements`: instead of the fit's)."""
    synth, good = fitted

    def check(frame: pd.DataFrame, names, measurements=None, metadata=False) -> dict:
        path = tmp_path / "synthetic.parquet"
        with duckdb.connect() as con:
            con.register("f", frame)
            con.execute(f"COPY (SELECT * FROM f) TO '{path}' (FORMAT parquet)")
        found = synth.measurements
        inputs = CheckInputs("example", dict(synth.spec.columns), synth.plan,
                             list(found.measurements) if measurements is None else measurements,
                             found.noisy_total, len(good), "synthetic.example", str(path),
                             tmp_path / "data_docs", synth.model)

        with duckdb.connect() as con:  # the warehouse: the table the Parquet file copies
            con.execute("CREATE SCHEMA synthetic")
            con.execute(f"CREATE TABLE synthetic.example AS SELECT * FROM read_parquet('{path}')")
            table = SyntheticTable.read(con, inputs)
            results = {name: CHECKS[name].run(table) for name in names}
        return {name: (r.passed, r.metadata) if metadata else r.passed
                for name, r in results.items()}

    return check


def wrong_type(good):
    return good.assign(age=good["age"].astype(str))


def out_of_domain(good):
    frame = good.copy()
    frame.loc[:10, "education"] = "Wizardry"
    frame.loc[:10, "hours_per_week"] = 500
    return frame


def shifted(good):
    return good.assign(sex="Male")


def too_few_rows(good):
    return good.iloc[:100]


def more_nulls(good):
    return good.assign(country=None).astype({"country": good["country"].dtype})


def copied(good):
    return pd.concat([good.iloc[:50]] * (len(good) // 50 + 1)).iloc[:len(good)]


# check -> (the corruption it must catch, other checks that must still pass on it)
CORRUPTIONS = {
    "schema": (wrong_type, ()),
    "domain": (out_of_domain, ()),
    "row_count": (too_few_rows, ()),
    "null_fraction": (more_nulls, ()),
    "one_way_tvd": (shifted, ("domain",)),
    "duplicates": (copied, ()),
}


def test_every_check_has_a_case_here():
    assert set(CHECKS) == {*CORRUPTIONS, "marginal_tvd", "constraints"}  # constraints: tests/test_constraints.py


def test_the_unchanged_synthetic_table_passes_every_check(fitted, verdicts):
    assert verdicts(fitted[1], CHECKS) == dict.fromkeys(CHECKS, True)


def test_domain_names_the_columns_outside_their_domain_and_the_unexpected_nulls(fitted,
                                                                              verdicts):
    """The domain check's figures are DuckDB's counts over the whole table: 11 values outside in
    each of two columns, and NULLs in a column that is not nullable."""
    frame = out_of_domain(fitted[1])
    passed, metadata = verdicts(frame, ["domain"], metadata=True)["domain"]
    assert not passed
    assert metadata == {"outside": {"education": 11, "hours_per_week": 11}, "unexpected_nulls": {}}
    frame = fitted[1].copy()
    frame.loc[:4, "age"] = None
    passed, metadata = verdicts(frame, ["domain"], metadata=True)["domain"]
    assert not passed and metadata == {"outside": {}, "unexpected_nulls": {"age": 5}}


def test_the_aggregates_count_nulls_and_values_outside_each_kind_of_domain():
    """One scan counts, per column, NULLs (NaN too in a float column, as pandas counts them)
    and present values outside the domain: a set, numeric bounds, date bounds (compared as
    timestamps), and a value that does not read as the declared type."""
    import datetime as dt

    with duckdb.connect() as con:
        con.execute("""CREATE TABLE t AS SELECT * FROM (VALUES
            (1.5::DOUBLE, 'a', DATE '2020-01-01', '7', true),
            ('nan'::DOUBLE, 'z', DATE '2019-12-31', 'x', NULL),
            (2.5::DOUBLE, 'b', DATE '2020-12-31', '11', false),
            (NULL, NULL, NULL, NULL, NULL)) v(f, s, d, i, b)""")
        allowed = {"f": (("between", 0.0, 2.0), "DOUBLE"), "s": (("set", ["a", "b"]), "VARCHAR"),
                   "d": (("between", dt.date(2020, 1, 1), dt.date(2020, 12, 31)), "DATE"),
                   "i": (("between", 0, 10), "BIGINT"), "b": (("set", [False, True]), "BOOLEAN")}
        types = {"f": "DOUBLE", "s": "VARCHAR", "d": "DATE", "i": "VARCHAR", "b": "BOOLEAN"}
        rows, nulls, outside = column_aggregates(con, "t", types, allowed)
    assert rows == 4
    assert nulls == {"f": 2, "s": 1, "d": 1, "i": 1, "b": 2}
    assert outside == {"f": 1, "s": 1, "d": 1, "i": 2, "b": 0}


@pytest.mark.parametrize("values", ["(NULL::DOUBLE, NULL::BIGINT)", None])
def test_the_aggregates_of_one_row_of_nulls_or_of_no_row_are_counts(values):
    """A synthetic table of one row whose float column is NULL (isnan(NULL) is NULL on every
    row: `count_if` gave NULL, and the checks of a run on an empty source failed), or of none."""
    with duckdb.connect() as con:
        con.execute(f"CREATE TABLE t AS SELECT * FROM (VALUES {values}) v(f, i)" if values else
                    "CREATE TABLE t (f DOUBLE, i BIGINT)")
        rows, nulls, outside = column_aggregates(
            con, "t", {"f": "DOUBLE", "i": "BIGINT"},
            {"f": (("between", 0.0, 2.0), "DOUBLE"), "i": (("between", 0, 10), "BIGINT")})
    expected = 1 if values else 0
    assert (rows, nulls, outside) == (expected, {"f": expected, "i": expected}, {"f": 0, "i": 0})


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_corrupted_table_fails_its_check(fitted, verdicts, name):
    corrupt, still_passing = CORRUPTIONS[name]
    result = verdicts(corrupt(fitted[1]), [name, *still_passing])
    assert result == {name: False, **dict.fromkeys(still_passing, True)}, result


def test_a_measured_pairs_joint_distribution_changed_fails_marginal_tvd(fitted, verdicts):
    """Every 1-way distribution kept, the pair's joint changed: the pair (age, marital_status)
    is measured on the good table itself, as if with noise sigma 2, and the rearranged table
    gives the oldest rows the alphabetically last statuses (a dependence the measurement does
    not have)."""
    synth, good = fitted
    pair = ("age", "marital_status")
    encodings = {e.column: e for e in synth.plan.encodings}
    with duckdb.connect() as con:
        con.register("good", good)
        codes = con.execute("SELECT " + ", ".join(
            f"{encode_expression(encodings[a])} AS {ident(a)}" for a in pair) + " FROM good"
        ).fetchnumpy()
    shape = [encodings[a].size for a in pair]
    counts = np.bincount(np.ravel_multi_index([codes[a].astype(np.int64) for a in pair], shape),
                         minlength=int(np.prod(shape))).reshape(shape).astype(float)
    measured = [*synth.measurements.measurements, Measurement(pair, counts, 2.0, 0.1)]
    decoupled = good.copy()
    order = np.argsort(good["age"].to_numpy(), kind="stable")
    decoupled.loc[decoupled.index[order], "marital_status"] = np.sort(
        good["marital_status"].fillna("~").to_numpy())
    decoupled["marital_status"] = decoupled["marital_status"].replace("~", None)

    checks = ["marginal_tvd", "one_way_tvd"]
    assert verdicts(good, checks, measurements=measured) == dict.fromkeys(checks, True)
    result = verdicts(decoupled, checks, measurements=measured)
    assert result == {"marginal_tvd": False, "one_way_tvd": True}, result
