"""Fixtures shared by test files: a throwaway PostgreSQL server (`helpers.postgres_server`) for
the tests that run the privacy ledger (and the run lock) in PostgreSQL, and a fresh ledger
location in each store."""

import uuid

import pytest

from tests.helpers import postgres_server

STORES = ("sqlite", "postgres")


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server for the session (skips, saying why, without the binaries or
    psycopg)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (the `postgres` extra)")
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
