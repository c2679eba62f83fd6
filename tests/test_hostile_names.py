"""Any column name a user may declare works, and dp-synth's own names never collide with a user's.

Issue 17: a source column named `n` was read back as the marginals' counts (a 5,000-row table
synthesized to one row, and the Gaussian mechanism was given codes it was not calibrated for),
`gid` crashed selection, a dotted name was split into schema and column, a dataset `x` destroyed
dataset `x__writing` (its staging table), and 64 or more columns hit GROUPING_ID's limit. Exact
marginals are checked against a brute-force numpy count of the codes the spec implies.
"""

import itertools

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml

from dp_synth_assets.api import Synthesizer
from dp_synth_assets.definitions import build_definitions

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
    counts = np.zeros([domain[c] for c in clique], dtype=np.int64)
    np.add.at(counts, tuple(codes[c] for c in clique), 1)
    return counts


def exact_marginals(synth: Synthesizer, frame, cliques):
    """The plan and the exact counts the marginals stage gives the mechanisms (the private
    oracle, read here only to test it)."""
    with synth.reading(frame) as run:
        plan = run.preprocess()
        oracle = run.marginals(plan)
        return plan, oracle(cliques)


def test_a_column_named_n_is_counted_as_a_column_and_the_rows_come_out_right():
    """The vector given to the Gaussian mechanism is the exact count of each cell (brute force),
    not the codes of the column `n`; the synthetic table has about as many rows as the source."""
    columns = {name: hostile_columns()[name] for name in ("n", "gid", "a.b")}
    frame = hostile_frame(5000)[list(columns)]
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, model=MODEL, seed=3)
    cliques = [("n",), ("gid",), ("n", "gid"), ("a.b", "n")]
    plan, exact = exact_marginals(synth, frame, cliques)
    codes = brute_codes(frame, columns, plan)
    for clique in cliques:
        np.testing.assert_array_equal(exact[clique], brute_marginal(codes, plan.domain, clique))
        assert exact[clique].sum() == 5000
    table = synth.fit(frame).sample()
    assert abs(synth.noisy_total - 5000) < 250 and abs(table.num_rows - 5000) < 250
    assert table.column_names == list(columns)


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


# ---- the pipeline: hostile names in the warehouse, and datasets x and x__writing -----------


def pipeline_project(tmp_path):
    warehouse, public = tmp_path / "warehouse.duckdb", tmp_path / "public"
    frame = hostile_frame(2000)
    con = duckdb.connect(str(warehouse))
    con.register("frame", frame)
    for table in ("x", "y"):  # one source each: two privacy units
        con.execute(f"CREATE TABLE main.{table} AS SELECT * FROM frame")
    con.close()

    def entry(table: str) -> dict:
        return {"source": {"table": f"main.{table}"}, "columns": hostile_columns(),
                "privacy": {"epsilon": 2.0, "delta": 1e-9,
                            "limit": {"epsilon": 20.0, "delta": 1e-8}},
                "generator": "gum", "seed": 4, "model": MODEL}

    datasets = tmp_path / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": {"x": entry("x"), "x__writing": entry("y")}},
                                       sort_keys=False, allow_unicode=True))
    return build_definitions(datasets, warehouse, tmp_path / "ledger.sqlite", public), warehouse


def materialize(defs, dataset: str):
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
                          selection=dg.AssetSelection.groups(dataset))


def test_datasets_x_and_x__writing_coexist_with_hostile_names_in_the_pipeline(tmp_path):
    """`x__writing` first, then `x`: x's staging table must not replace x__writing's table. Both
    synthetic tables keep the declared names, and every check passes."""
    defs, warehouse = pipeline_project(tmp_path)
    for dataset in ("x__writing", "x"):
        result = materialize(defs, dataset)
        assert result.success, dataset
        checks = result.get_asset_check_evaluations()
        assert checks and all(c.passed for c in checks), [(c.check_name, c.passed) for c in checks]
    with duckdb.connect(str(warehouse), read_only=True) as con:
        for dataset in ("x", "x__writing"):
            names = [r[0] for r in con.execute(
                f'DESCRIBE SELECT * FROM synthetic."{dataset}"').fetchall()]
            assert names == list(hostile_columns())
            assert con.execute(f'SELECT count(*) FROM synthetic."{dataset}"').fetchone()[0] > 1000
        tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = "
                             "'synthetic' ORDER BY table_name").fetchall()
        assert tables == [("x",), ("x__writing",)]  # no staging table left behind
