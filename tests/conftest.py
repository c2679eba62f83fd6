"""Fixtures shared by test files: a throwaway PostgreSQL server (`helpers.postgres_server`) for
the tests that run the privacy ledger (and the run lock) in PostgreSQL, and a fresh ledger
location in each store; and the test tiers.

Two tiers: the unit tier (`make test-fast`, `pytest -m "not e2e"`) and the end-to-end tier,
marked `e2e`: Dagster runs, the CLI, the built wheel, the UI and the browser. `make test` runs
both. A module whose every test is end to end is named in `E2E_MODULES`; a single end-to-end
test in a unit module carries `@pytest.mark.e2e` itself. Under `-m "not e2e"` the modules of
`E2E_MODULES` are not even imported (their imports are most of the collection's time).
"""

import uuid

import pytest

# the modules of the end-to-end tier (file names without .py)
E2E_MODULES = frozenset({
    "test_automation",
    "test_bad_input",
    "test_bench",
    "test_bench_ops",
    "test_bench_runs",
    "test_bench_tables",
    "test_budget_moves",
    "test_budget_unit",
    "test_checks",
    "test_cli",
    "test_component",
    "test_conditions",
    "test_current_budget",
    "test_data_docs_offline",
    "test_default_install",
    "test_deploy",
    "test_engine_postgres",
    "test_engine_spark",
    "test_install_ends",
    "test_leak_scan",
    "test_load_time",
    "test_metadata",
    "test_perimeter",
    "test_pipeline",
    "test_pipeline_methods",
    "test_report",
    "test_runs",
    "test_stale_plan",
    "test_ui",
    "test_wheel",
    "test_wheel_component",
    "test_writes",
})


def pytest_ignore_collect(collection_path, config):
    """The unit tier (`-m "not e2e"`, `make test-fast`) does not import the end-to-end modules."""
    if config.getoption("markexpr", "").strip() == "not e2e" and (
            collection_path.suffix == ".py" and collection_path.stem in E2E_MODULES):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in E2E_MODULES:
            item.add_marker(pytest.mark.e2e)

STORES = ("sqlite", "postgres")


@pytest.fixture(scope="module")
def bench_base(tmp_path_factory):
    """The folder a test file's benchmark smoke runs share (tests/bench_cases.py)."""
    return tmp_path_factory.mktemp("bench")


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server for the session (skips, saying why, without the binaries or
    psycopg)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (the `postgres` extra)")
    from tests.helpers import postgres_server
    with postgres_server() as server:
        yield server


@pytest.fixture
def pg_schema():
    """A schema name no other test uses: each test's PostgreSQL ledger starts empty."""
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=STORES)
def store(request):
    return request.param


@pytest.fixture
def location(store, tmp_path, request):
    """(path or URL, schema) of a new, empty ledger in the `store` under test."""
    if store == "sqlite":
        return str(tmp_path / "ledger" / "privacy.sqlite"), "dp_synth"
    server = request.getfixturevalue("pg_server")
    return server.url, request.getfixturevalue("pg_schema")
