"""The bundled example: a deterministic table that matches datasets.yaml and has structure."""

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

from dp_synth_assets.core.config import DEFAULT_BINS, ColumnSpec, load_registry
from dp_synth_assets.example import (
    DEFAULT_TABLE,
    EXAMPLE_COLUMNS,
    UNDECLARED_CATEGORY,
    generate_example,
    main,
    write_example,
)

REGISTRY = Path(__file__).resolve().parents[1] / "datasets.yaml"
DUCKDB_TYPES = {
    "categorical": {"VARCHAR"},
    "integer": {"BIGINT", "INTEGER"},
    "float": {"DOUBLE"},
    "datetime": {"DATE"},
    "boolean": {"BOOLEAN"},
}


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return generate_example()


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    database = tmp_path_factory.mktemp("warehouse") / "nested" / "warehouse.duckdb"
    assert write_example(database)
    return database


def test_same_seed_gives_identical_table_and_another_seed_does_not(table: pa.Table) -> None:
    assert generate_example().equals(table)
    assert not generate_example(seed=1).equals(table)
    assert table.num_rows == 50_000


def test_has_exactly_the_declared_columns_in_order(table: pa.Table) -> None:
    assert table.column_names == list(EXAMPLE_COLUMNS)
    assert len(EXAMPLE_COLUMNS) == 12


def test_warehouse_types_match_declared_kinds(warehouse: Path) -> None:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        described = con.execute(f"DESCRIBE {DEFAULT_TABLE}").fetchall()
    finally:
        con.close()
    types = {row[0]: row[1] for row in described}
    assert list(types) == list(EXAMPLE_COLUMNS)
    for name, spec in EXAMPLE_COLUMNS.items():
        assert types[name] in DUCKDB_TYPES[spec["kind"]], name
    assert types["signup_date"] == "DATE"


def test_warehouse_holds_the_generated_rows(warehouse: Path, table: pa.Table) -> None:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        stored = con.sql(f"SELECT * FROM {DEFAULT_TABLE}").to_arrow_table()
    finally:
        con.close()
    assert stored.cast(table.schema).equals(table)


def test_nulls_exactly_in_the_nullable_columns(table: pa.Table) -> None:
    for name, spec in EXAMPLE_COLUMNS.items():
        fraction = table[name].null_count / table.num_rows
        if spec.get("nullable", False):
            assert 0.01 <= fraction <= 0.10, (name, fraction)
        else:
            assert fraction == 0, name
    assert sum(spec.get("nullable", False) for spec in EXAMPLE_COLUMNS.values()) >= 2


def test_categories_cover_the_data_except_the_one_left_out(table: pa.Table) -> None:
    undeclared = {}
    for name, spec in EXAMPLE_COLUMNS.items():
        if spec["kind"] != "categorical":
            continue
        values = set(pc.unique(table[name].drop_null()).to_pylist())
        missing = values - set(spec["categories"])
        if missing:
            undeclared[name] = missing
    column, category = UNDECLARED_CATEGORY
    assert undeclared == {column: {category}}
    share = pc.sum(pc.equal(table[column], category)).as_py() / table.num_rows
    assert 0 < share < 0.005


def test_some_categories_are_rare(table: pa.Table) -> None:
    counts = {d["values"]: d["counts"] for d in pc.value_counts(table["race"]).to_pylist()}
    rare = [race for race, count in counts.items() if count / table.num_rows < 0.005]
    assert len(rare) >= 2


def test_numeric_bounds_cover_the_data_but_a_few_incomes(table: pa.Table) -> None:
    for name, spec in EXAMPLE_COLUMNS.items():
        if spec["kind"] not in {"integer", "float", "datetime"}:
            continue
        low, high = ColumnSpec.model_validate(spec).numeric_bounds()
        values = table[name].drop_null()
        if spec["kind"] == "datetime":
            values = values.cast(pa.int32())
        values = values.to_numpy()
        assert values.min() >= low, name
        above = np.mean(values > high)
        if spec["kind"] == "float":
            assert 0 < above < 0.005, (name, above)
        else:
            assert above == 0, name


def test_every_column_has_at_most_32_codes() -> None:
    for name, raw in EXAMPLE_COLUMNS.items():
        spec = ColumnSpec.model_validate(raw)
        if spec.kind == "categorical":
            codes = len(spec.categories) + 1  # the kept categories and `other`
        elif spec.kind == "boolean":
            codes = 2
        else:
            codes = spec.bins or DEFAULT_BINS
        assert codes + spec.is_nullable <= 32, name


def test_registry_entry_loads_and_equals_the_example_columns() -> None:
    spec = load_registry(REGISTRY)["example"]
    declared = {name: ColumnSpec.model_validate(c) for name, c in EXAMPLE_COLUMNS.items()}
    assert spec.columns == declared
    assert yaml.safe_load(REGISTRY.read_text())["datasets"]["example"]["columns"] == EXAMPLE_COLUMNS
    assert spec.source.table == DEFAULT_TABLE
    assert (spec.method, spec.generator, spec.rows, spec.seed) == ("auto", "auto", "same", 7)
    assert spec.on_source_change == "resynthesize" and spec.min_interval_seconds == 600


def _cramers_v(a: np.ndarray, b: np.ndarray) -> float:
    """Cramer's V of two code arrays: 0 for independence, 1 for a deterministic relation."""
    _, a = np.unique(a, return_inverse=True)
    _, b = np.unique(b, return_inverse=True)
    observed = np.zeros((a.max() + 1, b.max() + 1))
    np.add.at(observed, (a, b), 1)
    expected = observed.sum(1, keepdims=True) * observed.sum(0, keepdims=True) / len(a)
    chi2 = ((observed - expected) ** 2 / expected).sum()
    return float(np.sqrt(chi2 / (len(a) * (min(observed.shape) - 1))))


def test_linked_pairs_are_clearly_dependent_and_unlinked_pairs_are_not(table: pa.Table) -> None:
    def numbers(name: str) -> np.ndarray:
        return pc.fill_null(table[name], -1).to_numpy()

    cols = {
        "age": np.digitize(numbers("age"), [25, 35, 50, 65]),
        "hours_per_week": np.digitize(numbers("hours_per_week"), [30, 40, 41, 50]),
        "income": np.digitize(numbers("income"), [0, 20_000, 40_000, 80_000, 150_000]),
    }
    for name in ["sex", "race", "education", "marital_status", "occupation", "newsletter"]:
        column = table[name].cast(pa.string())
        cols[name] = pc.fill_null(column, "NULL").to_numpy(zero_copy_only=False).astype(str)

    linked = [("age", "marital_status"), ("education", "occupation"), ("sex", "hours_per_week"),
              ("education", "income"), ("occupation", "income")]
    unlinked = [("newsletter", "sex"), ("newsletter", "education"), ("race", "education"),
                ("newsletter", "income")]
    v_linked = {pair: _cramers_v(cols[pair[0]], cols[pair[1]]) for pair in linked}
    v_unlinked = {pair: _cramers_v(cols[pair[0]], cols[pair[1]]) for pair in unlinked}
    # With a fixed seed this is deterministic; at 50k rows an independent pair scores about 0.01.
    assert max(v_unlinked.values()) < 0.03, v_unlinked
    assert min(v_linked.values()) > 0.15, v_linked


def test_write_example_writes_once(tmp_path: Path) -> None:
    database = tmp_path / "w.duckdb"
    assert write_example(database, table="raw.people", rows=500) is True
    assert write_example(database, table="raw.people", rows=500) is False
    con = duckdb.connect(str(database), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM raw.people").fetchone()[0] == 500
    finally:
        con.close()


def test_main_writes_to_the_given_database_and_says_where(tmp_path: Path, capsys) -> None:
    database = tmp_path / "data" / "warehouse.duckdb"
    assert main([str(database)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and str(database) in out[0]
    assert database.exists()
