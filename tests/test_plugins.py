"""Adding a plug-in is one module plus one line in its kind's registry (`core.plugins`).

A selection method (`core.methods.METHODS`) defined in tests/plugin_method.py, registered by the
test alone, validates in a dataset spec, gets its budget split, tells `marginals` what to count,
and synthesizes end to end. A scan engine (`core.scan_engines.SCAN_ENGINES`,
tests/plugin_scan_engine.py) validates its own settings and runs the scans where its rows are; a
preprocessing mechanism (`core.preprocess.MECHANISMS`, tests/plugin_mechanism.py) runs in place of
the one it replaces, with its weight; a check (`checks.suites.CHECKS`, tests/plugin_check.py)
runs, with the engine and the mechanism, in a real Dagster run. (Generators:
tests/test_engine_plugins.py.)"""

import math

import pytest

from dp_synth_assets.api import SpecError, Synthesizer
from dp_synth_assets.core import methods
from dp_synth_assets.core.budget import DatasetBudget
from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example
from dp_synth_assets.core.select import required_cliques


@pytest.fixture
def registered(monkeypatch):
    """The registry line: name, module, default shares (1-way, scores), measures in selection."""
    monkeypatch.setitem(methods.METHODS, "independent",
                        methods.MethodInfo("tests.plugin_method", 0.5, 0.0, False))


def test_an_unregistered_method_is_refused_naming_the_choices():
    with pytest.raises(SpecError, match="unknown selection method 'independent'.*absyn"):
        Synthesizer(columns=EXAMPLE_COLUMNS, epsilon=1.0, method="independent")


def test_a_registered_method_runs_end_to_end_and_spends_the_run_budget(registered):
    synth = Synthesizer(columns=EXAMPLE_COLUMNS, epsilon=1.0, delta=1e-9, method="independent",
                        generator="gum", seed=3)
    domain = {c: 4 for c in EXAMPLE_COLUMNS}
    assert required_cliques("independent", domain) == [(c,) for c in domain]
    table = synth.fit(generate_example(1500, seed=2)).sample(500)
    assert table.num_rows == 500 and table.column_names == list(EXAMPLE_COLUMNS)
    report = synth.report.to_dict()
    budget = DatasetBudget.of(synth.spec)
    assert budget.shares == (0.5, 0.0) and budget.split.score == 0  # the registered shares
    assert math.isclose(budget.split.one_way, budget.split.measure, rel_tol=1e-12)  # its shares
    assert math.isclose(report["rho_spent"], budget.run_rho, rel_tol=1e-9)
    assert report["selected"] == [] or all(len(c) == 1 for c in report["selected"])


# ---- a scan engine: tests/plugin_scan_engine.py, one line in core.scan_engines.SCAN_ENGINES ------

def register_scan_engine(monkeypatch):
    """The registry line: name, module (its settings model is the module's `Settings`)."""
    from dp_synth_assets.core import scan_engines

    monkeypatch.setitem(scan_engines.SCAN_ENGINES, "duckdb_file",
                        scan_engines.ScanEngineInfo("tests.plugin_scan_engine"))


def source_file(path, rows: int = 1500) -> str:
    """A DuckDB database file holding the example table as main.example (the engine's rows)."""
    import duckdb

    with duckdb.connect(str(path)) as con:
        con.register("rows", generate_example(rows, seed=2))
        con.execute("CREATE TABLE main.example AS SELECT * FROM rows")
    return str(path)


def file_spec(path: str, **overrides):
    from dp_synth_assets.core.config import DatasetSpec
    from tests.helpers import example_entry

    return DatasetSpec.model_validate(example_entry(**{
        "source": {"table": "main.example"}, "report": None,
        "engine": {"type": "duckdb_file", "path": path}, **overrides}))


def test_an_unregistered_scan_engine_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"unknown scan engine 'duckdb_file'; choose one of "
                                         r"\['duckdb', 'postgres', 'spark'\]"):
        file_spec("x.duckdb")


def test_a_registered_scan_engine_validates_its_own_settings_beside_it(monkeypatch):
    from tests.plugin_scan_engine import Settings

    register_scan_engine(monkeypatch)
    spec = file_spec("rows.duckdb")
    assert isinstance(spec.engine, Settings) and spec.engine.path == "rows.duckdb"
    assert spec.features() == []  # no optional feature named by its registry line
    with pytest.raises(ValueError, match="Field required"):  # its own rule: `path` is required
        file_spec("x", engine={"type": "duckdb_file"})
    with pytest.raises(ValueError, match="engine duckdb reads the warehouse: path is for engine "
                                         "duckdb_file"):  # its key, set for another engine
        file_spec("x", engine={"type": "duckdb", "path": "x"})
    with pytest.raises(ValueError, match="reads `source: {table: ...}`"):  # its `refusal`
        file_spec("x", source={"parquet": "rows.parquet"})


def test_a_registered_scan_engine_runs_the_scans_where_its_rows_are(monkeypatch, tmp_path):
    """Through the notebook API: the source table is only in the engine's own database file, and
    no query returns more rows than the marginals the method counts have cells (a bound set by
    the domain, not by the rows)."""
    from dp_synth_assets.api import Synthesizer
    from tests.helpers import counted_cells, record_fetches
    from tests.plugin_scan_engine import FileEngine

    register_scan_engine(monkeypatch)
    fetched = record_fetches(monkeypatch, FileEngine)
    spec = file_spec(source_file(tmp_path / "rows.duckdb"), method="mst", generator="gum")
    synth = Synthesizer.from_spec(spec)
    table = synth.fit("main.example").sample(400)
    assert table.num_rows == 400 and table.column_names == list(spec.columns)
    assert fetched and max(fetched) <= counted_cells(spec, synth.plan.domain)


# ---- a preprocessing mechanism: tests/plugin_mechanism.py, one line in preprocess.MECHANISMS -----

def test_a_registered_mechanism_runs_in_place_of_the_one_it_replaces(monkeypatch):
    import duckdb

    from dp_synth_assets.core import preprocess
    from dp_synth_assets.core.config import ColumnSpec
    from tests import plugin_mechanism

    monkeypatch.setitem(preprocess.MECHANISMS, "rare", preprocess.Mechanism(
        "tests.plugin_mechanism", "release", "values", weight=3.0))
    monkeypatch.setattr(plugin_mechanism, "RELEASED", [])
    con = duckdb.connect()
    con.register("rows", generate_example(2000, seed=1))
    columns = {"race": ColumnSpec(kind="categorical", categories=[
        "White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"], rare="merge"),
        "age": ColumnSpec(kind="integer")}
    spends = []
    derived = preprocess.preprocess(con, "rows", columns, 0.4, 1e-6,
                                    lambda spend, **params: spends.append((spend, params)))
    purposes = [p["purpose"] for _, p in spends]
    assert purposes.count(plugin_mechanism.PURPOSE) == 1
    rare = next(s for s, p in spends if p["purpose"] == plugin_mechanism.PURPOSE)
    # its weight 3, beside age's bounds (1) and density (1/4)
    assert math.isclose(rare.rho, 0.4 * 3.0 / (3.0 + 1.0 + 0.25), rel_tol=1e-9)
    assert math.isclose(sum(s.rho for s, _ in spends), 0.4, rel_tol=1e-9)
    # every declared category kept; `rare: merge` may move one whose noisy count fell below the
    # cut to the rare group at the end (about 1 run in 300 here), so the order is not asserted
    assert sorted(derived["race"].categories) == sorted(columns["race"].categories)
    assert plugin_mechanism.RELEASED == ["race"]


# ---- a check: tests/plugin_check.py, one line in checks.suites.CHECKS ----------------------------

@pytest.mark.e2e
def test_registered_plugins_of_every_kind_run_in_one_dagster_run(monkeypatch, tmp_path):
    """A check, a scan engine and a mechanism, each registered by one line, in a real Dagster run:
    the check is one of the synthetic table's asset checks (described by its function's
    docstring, run with the checks that read frames) and passes; the scans ran in the engine's
    database file; the plug-in mechanism measured the declared categories."""
    import dagster as dg

    from dp_synth_assets.checks import suites, synthetic_check_specs
    from dp_synth_assets.core import preprocess
    from tests import plugin_mechanism
    from tests.helpers import make_project

    monkeypatch.setitem(suites.CHECKS, "no_empty_column", suites.Check(
        "no_empty_column", "tests.plugin_check", "WARN", False, rows=True))
    monkeypatch.setitem(preprocess.MECHANISMS, "rare", preprocess.Mechanism(
        "tests.plugin_mechanism", "release", "values"))
    register_scan_engine(monkeypatch)
    monkeypatch.setattr(plugin_mechanism, "RELEASED", [])

    rows = source_file(tmp_path / "rows.duckdb")
    kept = ("age", "sex", "race", "income", "newsletter")
    from tests.helpers import example_entry
    columns = {k: v for k, v in example_entry()["columns"].items() if k in kept}
    columns["race"] = {**columns["race"], "rare": "merge"}  # a `rare` task: the plug-in's
    project = make_project(tmp_path, rows=500, report=None, columns=columns, method="mst",
                           engine={"type": "duckdb_file", "path": rows})
    spec = {s.name: s for s in synthetic_check_specs("example")}["no_empty_column"]
    assert spec.description == "No column of the synthetic table's first rows is entirely NULL."
    defs = project.defs_fn()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success
    verdicts = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert verdicts["no_empty_column"] is True and set(verdicts) == set(suites.CHECKS)
    assert plugin_mechanism.RELEASED == ["race"]
    import duckdb
    with duckdb.connect(rows, read_only=True) as con:  # the encoded view is in the engine's file
        views = con.execute("SELECT schema_name FROM duckdb_views() WHERE NOT internal").fetchall()
    assert ("dp_synth",) in views
