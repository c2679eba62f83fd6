"""The ledger keeps the limit a privacy unit was first given: a configuration (datasets.yaml, a
Component, a notebook's Synthesizer) cannot raise it; `set_limit` / `raise-limit` can, on the
record. And rows recorded under an earlier name of a source still count for its unit."""

import json
import sqlite3
from pathlib import Path

import pytest

from dp_synth_assets.core.ledger import LedgerError, LimitNotGranted
from dp_synth_assets.infra.ledger import PrivacyLedger
from dp_synth_assets.core.privacy import Spend
from dp_synth_assets.core.units import alias_digest

LIMIT = 1.0


@pytest.fixture
def ledger(location) -> PrivacyLedger:
    """A new ledger in each store (tests/conftest.py: SQLite, and PostgreSQL when the server
    binaries are here)."""
    path, schema = location
    return PrivacyLedger(path, units={"a": "table:w:main.t"}, schema=schema)


def run(ledger: PrivacyLedger, run_id: str, rho: float, limit: float, dataset: str = "a"):
    ledger.reserve(dataset, run_id, rho, limit, delta=1e-9)
    ledger.charge(dataset, run_id, "measurements", Spend("gaussian", rho, 0.0, 1.0, 1.0))
    ledger.release(dataset, run_id)


def test_a_larger_limit_is_refused_and_writes_nothing(ledger):
    run(ledger, "r1", 0.5, LIMIT)
    rows = len(ledger.events())
    with pytest.raises(LimitNotGranted) as refused:
        ledger.reserve("a", "r2", 0.5, 50 * LIMIT, delta=1e-9)
    message = str(refused.value)
    assert "first given by run r1" in message and "raise-limit a" in message, message
    assert "Nothing was spent" in message and "table:w:main.t" in message
    assert isinstance(refused.value, LedgerError)  # the pipeline publishes it as a refusal
    assert len(ledger.events()) == rows
    assert not ledger.can_cover("a", 0.1, 50 * LIMIT)
    # the kept limit still allows what fits under it
    assert ledger.can_cover("a", 0.5, LIMIT)
    run(ledger, "r3", 0.5, LIMIT)
    assert ledger.summary("a").spent_rho == pytest.approx(1.0)


def test_a_smaller_limit_applies_and_pins_nothing(ledger):
    run(ledger, "r1", 0.2, LIMIT)
    with pytest.raises(Exception, match="cannot cover"):
        ledger.reserve("a", "r2", 0.2, 0.3)  # 0.2 spent + 0.2 > 0.3: the smaller limit applies
    run(ledger, "r3", 0.1, 0.3)
    assert ledger.limit("a") == (LIMIT, 0.0)
    run(ledger, "r4", 0.5, LIMIT)  # back at the kept limit: granted
    assert ledger.summary("a").spent_rho == pytest.approx(0.8)


def test_a_delta_extra_limit_is_kept_too(ledger):
    ledger.reserve("a", "r1", 0.1, LIMIT, 0.0, 1e-9)
    ledger.release("a", "r1")
    with pytest.raises(LimitNotGranted, match="delta_extra"):
        ledger.reserve("a", "r2", 0.1, LIMIT, 0.0, 1e-6)


def test_set_limit_raises_it_on_the_record_and_the_chain_holds(ledger, location):
    run(ledger, "r1", 0.5, LIMIT)
    with pytest.raises(ValueError, match="reason"):
        ledger.set_limit("a", 3.0, reason=" ")
    row = ledger.set_limit("a", 3.0, reason="approved by the data owner", by="alice@h",
                           delta=1e-9)
    assert row["kind"] == "limit" and row["rho"] == 3.0
    run(ledger, "r2", 2.0, 3.0)
    assert ledger.limit("a") == (3.0, 0.0)
    recorded = [e for e in ledger.events("a") if e["kind"] == "limit"]
    assert recorded[0]["parameters"]["reason"] == "approved by the data owner"
    assert recorded[0]["parameters"]["by"] == "alice@h"
    assert recorded[0]["parameters"]["previous_rho"] == LIMIT
    # an explicit limit is kept against later, larger reservations too
    with pytest.raises(LimitNotGranted, match="set by `raise-limit`"):
        ledger.reserve("a", "r3", 0.1, 4.0)
    # a fresh reader verifies the whole chain, the limit row included
    assert PrivacyLedger(location[0], schema=location[1]).head() == ledger.head()


def test_raises_made_before_limits_were_kept_are_honoured(ledger):
    """A ledger written before this rule holds reservations with growing limits (each edit of
    datasets.yaml was a raise then): the largest is the unit's limit."""
    with ledger._transaction() as tx:  # rows as an earlier release wrote them
        for run_id, limit in (("old1", 1.0), ("old2", 2.0)):
            for kind in ("reserve", "release"):
                ledger._insert(tx, ("table:w:main.t", "table:w:main.t"), "a", run_id, kind, 0.1,
                               parameters={"limit_rho": limit, "limit_delta_extra": 0.0})
    assert ledger.limit("a") == (2.0, 0.0)
    run(ledger, "r1", 0.1, 2.0)
    with pytest.raises(LimitNotGranted):
        ledger.reserve("a", "r2", 0.1, 2.5)


def test_a_ledger_from_before_the_limit_kind_is_upgraded_with_its_chain(tmp_path):
    path = tmp_path / "ledger.sqlite"
    first = PrivacyLedger(path)
    run(first, "r1", 0.5, LIMIT)
    before = first.events()
    conn = sqlite3.connect(path, isolation_level=None)
    old_schema = (Path(__file__).parents[1] / "sql" / "ledger_create_events.sql").read_text()
    old_schema = "\n".join(line for line in old_schema.splitlines()
                           if not line.startswith("--")).replace(", 'limit'", "").replace("{{}}", "{}")
    conn.execute("ALTER TABLE privacy_ledger RENAME TO t0")
    conn.execute(old_schema)
    conn.execute("INSERT INTO privacy_ledger SELECT * FROM t0")
    conn.execute("DROP TABLE t0")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO privacy_ledger (ts, unit, source, dataset, run_id, kind, rho, "
                     "owner, hash) VALUES ('', '', '', '', '', 'limit', 0, '', '')")
    conn.close()
    upgraded = PrivacyLedger(path)
    upgraded.set_limit("a", 2.0, reason="more runs")
    after = upgraded.events()
    assert after[:len(before)] == before and after[-1]["kind"] == "limit"
    with pytest.raises(sqlite3.IntegrityError):  # still append-only
        sqlite3.connect(path).execute("DELETE FROM privacy_ledger")


def test_rows_recorded_under_an_earlier_name_of_the_source_still_count(tmp_path):
    """Upgrading from path-keyed units: the rows of `duckdb:/old/path:main.t` count for the
    unit `table:default:main.t` when the registry names it as an alias."""
    path = tmp_path / "ledger.sqlite"
    old = PrivacyLedger(path, units={"a": "duckdb:/x/warehouse.duckdb:main.t"},
                        sources={"a": "duckdb:/x/warehouse.duckdb:main.t"})
    run(old, "r1", 0.7, LIMIT)
    new = PrivacyLedger(path, units={"b": "table:default:main.t"},
                        sources={"b": "table:default:main.t"},
                        aliases={"b": (alias_digest("duckdb:/x/warehouse.duckdb:main.t"),)})
    assert new.summary("b").spent_rho == pytest.approx(0.7)
    with pytest.raises(Exception, match="cannot cover"):
        new.reserve("b", "r2", 0.5, LIMIT)
    unrelated = PrivacyLedger(path, units={"b": "table:default:main.t"})
    assert unrelated.summary("b").spent_rho == 0.0
    assert json.loads(json.dumps(new.limit("b"))) == [LIMIT, 0.0]
