"""Any column name a user may declare works, and dp-synth's own names never collide with a user's.

Issue 17: a source column named `n` was read back as the marginals' counts (a 5,000-row table
synthesized to one row, and the Gaussian mechanism was given codes it was not calibrated for),
`gid` crashed selection, a dotted name was split into schema and column, a dataset `x` destroyed
dataset `x__writing` (its staging table), and 64 or more columns hit GROUPING_ID's limit. Exact
marginals are checked against a brute-force numpy count of the codes the spec implies.
"""

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml

from dp_synth_assets.api import Synthesizer
from dp_synth_assets.core.config import RegistryError, parse_registry
from dp_synth_assets.definitions import build_definitions
from tests.helpers import counting_oracle, example_entry

ROWS = 3000
MODEL = {"iterations": 200}

# name -> (spec, values as a function of a generator and a row count, their codes)
LETTERS = ["p", "q", "r", "s"]


def categorical(rng, rows, k):
    return rng.integers(0, k, rows)


def hostile_columns() -> dict:
    """Names that are SQL keywords of the marginals table (`n`, `gid`), its positional aliases
    in swapped positions (`c1` first, `c0` later), the lambda parameter of the old PrivTree
    encoding (`edge`), and names with dots, quotes, a semicolon, spaces and unicode."""
    return {
        "n": {"kind": "categorical", "categories": LETTERS, "other": False},
        "gid": {"kind": "categorical", "categories": LETTERS[:3], "other": False},
        "c1": {"kind": "integer", "bounds": [0, 9], "bins": 10},
        "a.b": {"kind": "integer", "bounds": [0, 4], "bins": 5},
        'say "hi"; DROP TABLE x': {"kind": "boolean"},
        "größe ✓": {"kind": "categorical", "categories": LETTERS[:2], "other": False},
        "with space": {"kind": "float", "bounds": [0.0, 1.0], "bins": 4},
        "c0": {"kind": "categorical", "categories": LETTERS[:3], "other": False},
        "edge": {"kind": "float", "bounds": [0.0, 100.0], "binning": "privtree"},
    }


def hostile_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = categorical(rng, rows, 4)
    return pd.DataFrame({
        "n": [LETTERS[i] for i in n],
        "gid": [LETTERS[(i + j) % 3] for i, j in zip(n, categorical(rng, rows, 2))],
        "c1": categorical(rng, rows, 10),
        "a.b": (n + categorical(rng, rows, 2)) % 5,
        'say "hi"; DROP TABLE x': rng.random(rows) < 0.3,
        "größe ✓": [LETTERS[i % 2] for i in n],
        "with space": rng.random(rows),
        "c0": [LETTERS[i] for i in categorical(rng, rows, 3)],
        "edge": np.concatenate([rng.normal(20, 3, rows // 2), rng.normal(80, 5, rows - rows // 2)]),
    })


def brute_codes(frame: pd.DataFrame, columns: dict, plan) -> dict[str, np.ndarray]:
    """The code of every row by the spec's rule, in numpy: category position, uniform bin,
    PrivTree bin (interior edges <= value), boolean 0/1."""
    codes = {}
    for e in plan.encodings:
        spec, values = columns[e.column], frame[e.column].to_numpy()
        if spec["kind"] == "categorical":
            codes[e.column] = np.array([spec["categories"].index(v) for v in values])
        elif spec["kind"] == "boolean":
            codes[e.column] = values.astype(np.int64)
        elif e.edges is not None:
            interior = np.asarray(e.edges[1:-1], dtype=float)
            codes[e.column] = np.searchsorted(interior, values.astype(float), side="right")
        else:
            low, high = spec["bounds"]
            width = (high - low) / spec["bins"]
            codes[e.column] = np.minimum(((values - low) // width).astype(np.int64),
                                         spec["bins"] - 1)
    return codes


def brute_marginal(codes: dict, domain: dict, clique) -> np.ndarray:
    return counting_oracle(codes, domain)([clique])[tuple(clique)]


def exact_marginals(synth: Synthesizer, frame, cliques):
    """The plan and the exact counts the marginals stage gives the mechanisms (the private
    oracle, read here only to test it)."""
    with synth.reading(frame) as run:
        plan = run.preprocess()
        oracle = run.marginals(plan)
        return plan, oracle(cliques)


@pytest.mark.parametrize("name", ["n", "gid"])
def test_a_column_named_like_a_bookkeeping_column_is_counted_as_a_column(name):
    """A column `n` (the count's old alias) or `gid` (the set id's): the vector given to the
    Gaussian mechanism is the exact count of each cell (brute force), not the column's codes,
    and the synthetic table has about as many rows as the source."""
    columns = {name: hostile_columns()[name], "colour": hostile_columns()["c0"],
               "size": hostile_columns()["c1"]}
    frame = hostile_frame(5000)[[name, "c0", "c1"]].set_axis(list(columns), axis=1)
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, model=MODEL, seed=3)
    cliques = [(name,), ("colour",), (name, "colour"), ("size", name)]
    plan, exact = exact_marginals(synth, frame, cliques)
    codes = brute_codes(frame, columns, plan)
    for clique in cliques:
        np.testing.assert_array_equal(exact[clique], brute_marginal(codes, plan.domain, clique))
        assert exact[clique].sum() == 5000
    table = synth.fit(frame).sample()
    assert abs(synth.noisy_total - 5000) < 250 and abs(table.num_rows - 5000) < 250
    assert table.column_names == list(columns)


def test_a_privtree_column_named_edge_is_binned_by_its_values():
    """The PrivTree encoding counted interior edges with a lambda whose parameter was `edge`:
    a column of that name compared each edge with itself and every row fell in the last bin."""
    columns = {"edge": hostile_columns()["edge"], "colour": hostile_columns()["c0"]}
    frame = hostile_frame(ROWS)[["edge", "c0"]].set_axis(list(columns), axis=1)
    synth = Synthesizer(columns=columns, epsilon=2.0, delta=1e-9)
    plan, exact = exact_marginals(synth, frame, [("edge",)])
    assert plan.domain["edge"] > 2
    codes = brute_codes(frame, columns, plan)
    np.testing.assert_array_equal(exact[("edge",)], brute_marginal(codes, plan.domain, ("edge",)))


def test_hostile_column_names_round_trip_and_count_exactly():
    columns = hostile_columns()
    frame = hostile_frame(ROWS)
    synth = Synthesizer(columns=columns, epsilon=2.0, delta=1e-9, model=MODEL, seed=1,
                        generator="gum")
    cliques = [(c,) for c in columns] + [("c1", "c0"), ("edge", "a.b"), ("gid", "n", "größe ✓"),
                                         ('say "hi"; DROP TABLE x', "with space")]
    plan, exact = exact_marginals(synth, frame, cliques)
    assert plan.columns == list(columns)
    edge = next(e for e in plan.encodings if e.column == "edge")
    assert edge.edges is not None and len(edge.edges) > 2  # PrivTree found interior edges
    codes = brute_codes(frame, columns, plan)
    for clique in cliques:
        np.testing.assert_array_equal(exact[clique], brute_marginal(codes, plan.domain, clique),
                                      err_msg=str(clique))
    table = synth.fit(frame).sample(500)
    assert table.column_names == list(columns) and table.num_rows == 500
    assert set(table.column("n").to_pylist()) <= set(LETTERS)


def test_two_hundred_columns_are_counted_exactly_and_synthesized():
    """More than GROUPING_ID's 63 arguments: a 200-column table, exact marginals of cliques
    spread over the columns (brute force), then a fit and a sample with every column."""
    rows, width = 400, 200
    rng = np.random.default_rng(5)
    names = [f"col_{i}" for i in range(width)]
    data = {name: rng.integers(0, 2 + i % 3, rows) for i, name in enumerate(names)}
    frame = pd.DataFrame({name: [f"v{x}" for x in values] for name, values in data.items()})
    columns = {name: {"kind": "categorical", "categories": [f"v{k}" for k in range(2 + i % 3)],
                      "other": False} for i, name in enumerate(names)}
    declared = [["col_0", "col_199"], ["col_63", "col_64"], ["col_10", "col_100", "col_150"]]
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, model=MODEL, seed=2,
                        method="manual", generator="gum", selection={"marginals": declared})
    cliques = [tuple(c) for c in declared] + [("col_199",), ("col_70", "col_5")]
    plan, exact = exact_marginals(synth, frame, cliques)
    for clique in cliques:
        np.testing.assert_array_equal(exact[clique], brute_marginal(data, plan.domain, clique),
                                      err_msg=str(clique))
    table = synth.fit(frame).sample(50)
    assert table.column_names == names and table.num_rows == 50


# ---- the synthetic tables: staging, and hostile names through the pipeline ----------------


def test_dataset_x_does_not_replace_dataset_x__writing_when_it_writes(tmp_path):
    """x's staging table was `synthetic.x__writing`: writing x replaced dataset x__writing's
    table with x's rows, then renamed it away."""
    from dp_synth_assets.core.synthesize import write_synthetic

    columns = {"colour": hostile_columns()["c0"], "size": hostile_columns()["c1"]}
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9)
    with synth.reading(hostile_frame(500)[["c0", "c1"]].set_axis(list(columns), axis=1)) as run:
        plan = run.preprocess()
    con = duckdb.connect()
    rng = np.random.default_rng(0)
    for table, rows in (("synthetic.x__writing", 7), ("synthetic.x", 5)):
        codes = {c: np.zeros(rows, dtype=np.int64) for c in plan.columns}
        write_synthetic(con, plan, [codes], rng, table, str(tmp_path / f"{table}.parquet"))
    assert con.execute('SELECT count(*) FROM synthetic."x__writing"').fetchone()[0] == 7
    assert con.execute("SELECT count(*) FROM synthetic.x").fetchone()[0] == 5
    assert con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall() == [
        ("x",), ("x__writing",)]


@pytest.mark.e2e
def test_hostile_column_names_reach_the_synthetic_table_and_pass_every_check(tmp_path):
    warehouse, public = tmp_path / "warehouse.duckdb", tmp_path / "public"
    con = duckdb.connect(str(warehouse))
    con.register("frame", hostile_frame(2000))
    con.execute("CREATE TABLE main.hostile AS SELECT * FROM frame")
    con.close()
    entry = {"source": {"table": "main.hostile"}, "columns": hostile_columns(),
             "privacy": {"epsilon": 2.0, "delta": 1e-9, "limit": {"epsilon": 20.0, "delta": 1e-8}},
             "generator": "gum", "seed": 4, "model": MODEL}
    datasets = tmp_path / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": {"hostile": entry}}, sort_keys=False,
                                       allow_unicode=True))
    defs = build_definitions(datasets, warehouse, tmp_path / "ledger.sqlite", public)
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [(c.check_name, c.passed) for c in checks]
    with duckdb.connect(str(warehouse), read_only=True) as con:
        names = [r[0] for r in con.execute("DESCRIBE synthetic.hostile").fetchall()]
        parquet = [r[0] for r in con.execute(
            f"DESCRIBE SELECT * FROM read_parquet('{public / 'hostile' / 'synthetic.parquet'}')"
        ).fetchall()]
    assert names == parquet == list(hostile_columns())


# ---- whole-row hashes: no column can stand in for the row ------------------------------------


def test_the_holdout_split_hashes_the_row_even_with_a_column_named_src(tmp_path):
    """The split hashed `src`, the source's alias, which a column of that name shadows: every
    row then had the same side when that column was constant."""
    from dp_synth_assets.core.config import DatasetSpec
    from dp_synth_assets.core.source import holdout_relation, training_relation

    con = duckdb.connect()
    con.execute("CREATE TABLE main.s AS SELECT 'same' AS src, range AS v FROM range(4000)")
    spec = DatasetSpec.model_validate({
        "source": {"table": "main.s"},
        "privacy": {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 2.0, "delta": 1e-8}},
        "columns": {"src": {"kind": "categorical"}, "v": {"kind": "integer"}},
        "report": {"holdout": 0.25, "target": "src"}})
    def count(relation: str) -> int:
        return con.execute(f"SELECT count(*) FROM {relation}").fetchone()[0]

    train = count(training_relation(spec, tmp_path, "d"))
    held = count(holdout_relation(spec, tmp_path, "d"))
    assert train + held == 4000 and 800 < held < 1200


def test_the_content_summary_sees_every_column_even_with_a_column_named_t():
    """The change detector's summary hashed `t`, the source's alias: a column of that name made
    it blind to every other column."""
    from dp_synth_assets.core.sql import sql

    con = duckdb.connect()
    con.execute("CREATE TABLE main.s AS SELECT 1 AS t, range AS v FROM range(100)")
    before = con.execute(sql("content_summary", source="main.s")).fetchone()[0]
    con.execute("UPDATE main.s SET v = v + 1 WHERE v = 7")
    assert con.execute(sql("content_summary", source="main.s")).fetchone()[0] != before


def test_a_source_table_in_a_schema_dp_synth_writes_is_refused_at_load():
    """dp-synth's private working tables and synthetic tables live in `private` and `synthetic`:
    a source there could be replaced by a dataset's own objects (`private.x_encoded`)."""
    for table in ("private.x_encoded", "synthetic.customers", "db.Private.t"):
        with pytest.raises(RegistryError, match="which dp-synth writes"):
            parse_registry({"datasets": {"x": example_entry(source={"table": table})}})
    parse_registry({"datasets": {"x": example_entry(source={"table": "main.private_t"})}})
