"""The privacy ledger in PostgreSQL (infra/ledger_store.py), against a real server the tests start
(conftest `pg_server`; skipped, saying why, without the server binaries): what only that store
does. The behaviour both stores share runs over both in tests/test_ledger.py.

- a killed run's reservation is released from any host: its presence lock vanished with it;
- the chain and the head table catch rows deleted, truncated or edited, and a replaced chain
  secret, by a superuser who disabled the triggers; a lost head table is adopted;
- a dropped schema is caught by the head a spending run published in Dagster's metadata;
- `migrate` copies a chained SQLite ledger with its ids, hashes and secret, and refuses a
  non-empty target; a ledger from before the chain migrates into PostgreSQL too;
- the run lock of a dataset lives in the ledger's schema: re-entrant, exclusive, stale when
  Dagster says its run ended;
- an unreachable server, a missing permission and a missing driver are clear LedgerErrors that
  never show the password, and spend nothing;
- one real Dagster run of the bundled example with DP_SYNTH_LEDGER a postgresql:// URL.
"""

import multiprocessing
import os
import signal
import socket
import time

import dagster as dg
import pytest

import dp_synth_assets.infra.ledger as ledger_module
import dp_synth_assets.infra.ledger_migrate as migrate_module
import dp_synth_assets.resources.ledger as resource_module
from dp_synth_assets.core.ledger import BudgetExceeded, LedgerError
from dp_synth_assets.core.privacy import Spend
from dp_synth_assets.infra.ledger import PrivacyLedger
from dp_synth_assets.infra.runs import DatabaseDatasetLock, RunWaitTimeout, dataset_lock
from tests.helpers import pre_chain_ledger
from tests.test_ledger import assert_refused

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (the `postgres` extra)")


def spend(rho: float) -> Spend:
    return Spend("gaussian_counts", rho, sensitivity=1.0, scale=1.5)


def spend_once(ledger: PrivacyLedger, run_id: str, rho: float = 0.25) -> None:
    ledger.reserve("adult", run_id, rho, 1.0)
    ledger.charge("adult", run_id, "measure", spend(rho))
    ledger.release("adult", run_id)


@pytest.fixture
def ledger(pg_server, pg_schema) -> PrivacyLedger:
    return PrivacyLedger(pg_server.url, schema=pg_schema)


def superuser(ledger: PrivacyLedger, *statements: str) -> None:
    """Run statements as the server's superuser with the ledger's triggers disabled: the
    tampering the chain and the head must catch."""
    schema = ledger.database.schema
    with psycopg.connect(ledger.database.url, autocommit=True) as conn:
        for table in ("privacy_ledger", "ledger_meta", "ledger_head"):
            conn.execute(f"ALTER TABLE {schema}.{table} DISABLE TRIGGER USER")
        for statement in statements:
            conn.execute(statement.format(schema=schema))


# ---- the tables --------------------------------------------------------------------------------


def test_rows_hash_identically_in_both_stores(ledger, tmp_path):
    """The same events, written through each store, make the same chain from the same secret:
    a row's hash does not depend on where it is stored."""
    file = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(file, "r1")
    resource_module.main(["migrate", str(file.path), ledger.database.url, "--schema",
                          ledger.database.schema])
    assert ledger.events() == file.events()  # read back and re-hashed from PostgreSQL's values
    for each in (file, ledger):  # one more row, the same in both (its time and owner fixed)
        with each._transaction() as tx:
            each._insert(tx, ("adult", "adult"), "adult", "r2", "charge", 0.1 + 0.2,
                         parameters={"scale": 1 / 3}, stage="measure",
                         ts="2026-01-01T00:00:00.000001+00:00", owner="h:1:1")
    assert file.events()[-1]["hash"] == ledger.events()[-1]["hash"]


def test_the_head_is_mirrored_in_the_same_transaction(ledger):
    spend_once(ledger, "r1")
    with psycopg.connect(ledger.database.url) as conn:
        heads = conn.execute(f"SELECT rows, head FROM {ledger.database.schema}.ledger_head "
                             f"ORDER BY rows").fetchall()
    assert heads == [(n, e["hash"]) for n, e in enumerate(ledger.events(), start=1)]
    assert ledger.head() == heads[-1]


# ---- tamper evidence -----------------------------------------------------------------------------


def test_deleted_rows_are_refused(ledger):
    spend_once(ledger, "r1", rho=0.75)
    superuser(ledger, "DELETE FROM {schema}.privacy_ledger WHERE id > 1")
    assert_refused(ledger, "has 1 rows, but its head table", "records 3")


def test_a_truncated_ledger_is_refused(ledger):
    spend_once(ledger, "r1", rho=0.75)
    superuser(ledger, "TRUNCATE {schema}.privacy_ledger")
    assert_refused(ledger, "has 0 rows, but its head table", "records 3")


def test_an_edited_row_is_refused(ledger):
    spend_once(ledger, "r1", rho=0.75)
    superuser(ledger, "UPDATE {schema}.privacy_ledger SET rho = 0 WHERE kind = 'charge'")
    assert_refused(ledger, "fails its hash chain at row 2")


def test_a_replaced_chain_secret_is_refused(ledger):
    spend_once(ledger, "r1")
    superuser(ledger, "INSERT INTO {schema}.ledger_meta VALUES (2, 'genesis', 'guessed')")
    assert_refused(ledger, "fails its hash chain at row 1")


def test_a_lost_head_table_is_refused_until_adopted(ledger):
    spend_once(ledger, "r1")
    superuser(ledger, "DELETE FROM {schema}.ledger_head")
    with pytest.raises(LedgerError, match="no head table") as error:
        ledger.reserve("adult", "r2", 0.25, 1.0)
    assert "adopt" in str(error.value)
    resource_module.main(["adopt", ledger.database.url, "--schema", ledger.database.schema])
    spend_once(ledger, "r2")
    assert ledger.head()[0] == 6


def test_a_dropped_schema_is_caught_by_the_published_head_and_not_recreated(ledger):
    spend_once(ledger, "r1")
    rows, head = ledger.head()
    with psycopg.connect(ledger.database.url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {ledger.database.schema} CASCADE")
    with pytest.raises(LedgerError, match="does not exist, but the metadata of x records"):
        ledger.verify_published(rows, head, "the metadata of x")
    with psycopg.connect(ledger.database.url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                            (ledger.database.schema,)).fetchone()[0] == 0


# ---- a dead owner, seen from any host --------------------------------------------------------------


def _reserve_charge_and_hang(url: str, schema: str, ready) -> None:
    ledger = PrivacyLedger(url, schema=schema)
    ledger.reserve("adult", "doomed", 0.625, 1.0)
    ledger.charge("adult", "doomed", "measure", spend(0.25))
    ready.set()
    time.sleep(300)


@pytest.mark.e2e
def test_a_killed_runs_reservation_is_released_from_another_host(ledger, monkeypatch):
    """The fault injected: this process cannot read the owner's process table (it is on
    another host, as in a container deployment). While the owner lives its presence lock keeps
    the reservation; once it is killed the lock is gone and the next reservation releases it,
    keeping its charges, long before `stale_after_seconds`."""
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=_reserve_charge_and_hang,
                              args=(ledger.database.url, ledger.database.schema, ready))
    process.start()
    monkeypatch.setattr(ledger_module, "owner_alive", lambda owner: None)
    try:
        assert ready.wait(timeout=60)
        assert ledger.release_stale() == []
        with pytest.raises(BudgetExceeded):
            ledger.reserve("adult", "fresh", 0.5, 1.0)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=60)
    deadline = time.monotonic() + 30  # the server ends the killed session as its socket closes
    while not ledger.can_cover("adult", 0.5, 1.0) and time.monotonic() < deadline:
        time.sleep(0.1)
    ledger.reserve("adult", "fresh", 0.5, 1.0)
    summary = ledger.summary("adult")
    assert (summary.spent_rho, summary.reserved_rho) == (0.25, 0.5)
    [release] = [e for e in ledger.events() if e["kind"] == "release"]
    assert (release["run_id"], release["parameters"]["reason"]) == (
        "doomed", "stale: owner process gone")
    assert ledger.stale_after_seconds == 6 * 3600


def test_an_owner_that_never_held_a_presence_lock_is_judged_by_inactivity(ledger, monkeypatch):
    with monkeypatch.context() as patch:  # rows written for another process (`owner_pid`)
        patch.setattr(ledger_module, "owner_id", lambda pid=None: "elsewhere:7:7")
        ledger.reserve("adult", "remote", 0.5, 1.0)
    assert ledger.release_stale() == []


# ---- migrate ---------------------------------------------------------------------------------------


def test_migrate_copies_a_chained_sqlite_ledger_with_its_chain(ledger, tmp_path, capsys):
    file = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(file, "r1")
    file.reserve("adult", "open", 0.25, 1.0)
    url, schema = ledger.database.url, ledger.database.schema
    resource_module.main(["migrate", str(file.path), url, "--schema", schema])
    assert "4 rows copied" in capsys.readouterr().out
    assert ledger.events() == file.events()  # the same ids, rows and hashes
    assert ledger.head() == file.head()
    assert ledger._snapshot()[1] == file._snapshot()[1]  # the same chain secret
    ledger.charge("adult", "open", "measure", spend(0.25))  # and it goes on in PostgreSQL
    assert ledger.summary("adult").spent_rho == 0.5
    with pytest.raises(LedgerError, match="already holds 5 rows"):
        resource_module.main(["migrate", str(file.path), url, "--schema", schema])
    assert len(ledger.events()) == 5


def test_migrate_into_an_empty_existing_ledger_keeps_the_old_secret(ledger, tmp_path):
    ledger.summary("adult")  # creates the schema, with a secret of its own
    file = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(file, "r1")
    migrate_module.migrate_chain(file.path, ledger.database.url, ledger.database.schema)
    assert ledger.head() == file.head()


def test_migrate_refuses_a_tampered_source(ledger, tmp_path):
    file = PrivacyLedger(tmp_path / "ledger.sqlite")
    spend_once(file, "r1")
    file.head_path.unlink()
    with pytest.raises(LedgerError, match="no head file"):
        resource_module.main(["migrate", str(file.path), ledger.database.url, "--schema",
                              ledger.database.schema])
    assert ledger.events() == []


def test_a_ledger_from_before_the_chain_migrates_into_postgres(ledger, tmp_path):
    old = tmp_path / "old.sqlite"
    pre_chain_ledger(old, [(None, "reserve", 0.5, "{}"), ("measure", "charge", 0.5, "{}"),
                           (None, "release", 0.0, "{}")])
    assert migrate_module.migrate_legacy(old, ledger.database.url, {}, {},
                                        schema=ledger.database.schema) == 3
    assert ledger.summary("adult").spent_rho == 0.5


# ---- the run lock ----------------------------------------------------------------------------------


def test_the_run_lock_lives_in_the_ledgers_schema(ledger, tmp_path):
    lock = dataset_lock(tmp_path / "public" / "adult", "adult", ledger.database)
    other = DatabaseDatasetLock(ledger.database, "adult")
    assert isinstance(lock, DatabaseDatasetLock)
    assert lock.acquire("run-1") is True
    assert lock.acquire("run-1") is False  # re-entrant by run id
    assert other.holder()["run_id"] == "run-1"
    lines = []
    with pytest.raises(RunWaitTimeout, match="run-1") as error:
        other.acquire("run-2", timeout=0.3, poll=0.1, log=lines.append)
    assert "waiting for run run-1" in lines[0]
    assert f"{ledger.database.schema}.run_locks" in str(error.value)
    assert DatabaseDatasetLock(ledger.database, "census").acquire("run-2")  # another dataset
    assert other.release("run-2") is False and lock.release("run-1") is True
    assert other.acquire("run-2") is True
    # a run that Dagster reports ended is stale, whatever host it ran on
    assert lock.acquire("run-3", finished=lambda run_id: run_id == "run-2") is True
    assert other.holder()["run_id"] == "run-3"
    assert not (tmp_path / "public").exists()  # no lock file


def test_a_run_lock_whose_process_died_on_this_host_is_taken_over(ledger):
    lock = DatabaseDatasetLock(ledger.database, "adult")
    lock.acquire("dead", owner=f"{socket.gethostname()}:{os.getpid()}:1")  # a reused pid: gone
    assert lock.acquire("next") is True
    assert lock.holder()["run_id"] == "next"


# ---- errors ------------------------------------------------------------------------------------


def test_an_unreachable_server_is_a_clear_error_without_the_password(pg_server):
    ledger = PrivacyLedger("postgresql://dp:s3cr3t-pw@127.0.0.1:1/ledgerdb")
    with pytest.raises(LedgerError) as error:
        ledger.reserve("adult", "r1", 0.5, 1.0)
    message = str(error.value)
    assert "s3cr3t-pw" not in message and "postgresql://dp:***@127.0.0.1:1/ledgerdb" in message
    assert "Nothing was spent" in message and "server is running and reachable" in message
    assert "s3cr3t-pw" not in ledger.path


def test_a_missing_permission_names_the_grant(pg_server, pg_schema):
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {pg_schema} LOGIN PASSWORD 'pw-{pg_schema}'")
    url = pg_server.url.replace("postgres@", f"{pg_schema}:pw-{pg_schema}@")
    with pytest.raises(LedgerError) as error:
        PrivacyLedger(url, schema=pg_schema).summary("adult")
    message = str(error.value)
    assert "permission" in message and f"schema {pg_schema}" in message
    assert f"pw-{pg_schema}" not in message and "Nothing was spent" in message


def test_a_postgres_url_without_the_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "psycopg", None)  # the fault: not installed
    with pytest.raises(LedgerError, match=r"pip install 'dagster-dp-synth\[postgres\]'"):
        PrivacyLedger("postgresql://u:pw@localhost/db").summary("adult")


# ---- one Dagster run -----------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_dagster_run_of_the_example_spends_into_postgres(pg_server, pg_schema, tmp_path):
    """DP_SYNTH_LEDGER a postgresql:// URL (and DP_SYNTH_LEDGER_SCHEMA): the whole pipeline
    reserves, charges and releases in PostgreSQL, holds its run lock there (no lock file), and
    publishes the PostgreSQL ledger's head; a second run extends it; after the schema is
    dropped, the next run is refused by the published head, spending nothing."""
    from dp_synth_assets.definitions import build_definitions, environment_paths
    from tests.helpers import make_project

    project = make_project(tmp_path, rows=800, report=None)
    env = {"DP_SYNTH_DATASETS": str(project.datasets), "DP_SYNTH_WAREHOUSE": str(project.warehouse),
           "DP_SYNTH_LEDGER": pg_server.url, "DP_SYNTH_LEDGER_SCHEMA": pg_schema,
           "DP_SYNTH_PUBLIC": str(project.public)}
    defs = build_definitions(**environment_paths(env, project_dir=tmp_path))
    instance = dg.DagsterInstance.ephemeral()
    stages = ("preprocessed", "marginals", "selection", "measurements", "model", "synthetic")

    def run():  # the stages, without the checks of `synthetic` (they spend nothing)
        return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                              instance=instance, raise_on_error=False,
                              selection=dg.AssetSelection.assets(
                                  *(dg.AssetKey(["example", s]) for s in stages)).without_checks())

    first = run()
    assert first.success
    ledger = PrivacyLedger(pg_server.url, schema=pg_schema)
    summary = ledger.summary("example")
    assert summary.spent_rho > 0 and summary.reserved_rho == 0
    assert set(summary.runs) == {first.run_id}
    kinds = [e["kind"] for e in ledger.events("example")]
    assert kinds[0] == "reserve" and kinds[-1] == "release" and "charge" in kinds
    published = [m.step_materialization_data.materialization.metadata
                 for m in first.get_asset_materialization_events()]
    heads = [(m["privacy/ledger_rows"].value, m["privacy/ledger_head"].value)
             for m in published if "privacy/ledger_head" in m]
    assert heads and heads[-1] in [(n, e["hash"]) for n, e in
                                   enumerate(ledger.events(), start=1)]
    assert not list(tmp_path.rglob("*.sqlite*")) and not list(tmp_path.rglob("run.lock*"))
    assert DatabaseDatasetLock(ledger.database, "example").holder() is None

    second = run()
    assert second.success and set(ledger.summary("example").runs) == {first.run_id,
                                                                       second.run_id}
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {pg_schema} CASCADE")
    third = run()
    assert not third.success
    failure = " ".join(str(e.event_specific_data.error) for e in third.all_events
                       if e.event_type_value == "STEP_FAILURE")
    # the run lock recreated an empty ledger (a first run on a new installation does that),
    # which does not extend the head the first runs published
    assert "does not extend the head that the metadata of example/" in failure
    assert "postgres@127.0.0.1" in failure and "Nothing was spent" in failure
    assert ledger.events() == []


def test_a_notebook_fit_with_a_postgres_ledger_holds_the_run_lock_there(ledger, tmp_path):
    """`Synthesizer(ledger=<a PostgreSQL ledger>, public_dir=...)` takes the dataset's run lock
    in the ledger's schema, where a pipeline run of the dataset takes it: held, the fit waits
    and gives up with nothing reserved; free, it spends into PostgreSQL."""
    from dp_synth_assets import Synthesizer
    from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example

    columns = {name: EXAMPLE_COLUMNS[name] for name in ("sex", "race", "newsletter")}
    synth = Synthesizer(columns=columns, epsilon=1.0, delta=1e-9, generator="gum", seed=1,
                        ledger=ledger, dataset="adult", public_dir=tmp_path / "public",
                        run_wait_seconds=0.5)
    pipeline = DatabaseDatasetLock(ledger.database, "adult")
    assert pipeline.acquire("dagster-run-1")
    with pytest.raises(RunWaitTimeout, match="dagster-run-1"):
        synth.fit(generate_example(500, seed=2))
    assert ledger.events("adult") == []
    pipeline.release("dagster-run-1")
    synth.fit(generate_example(500, seed=2))
    assert ledger.summary("adult").spent_rho > 0 and pipeline.holder() is None
    assert not (tmp_path / "public" / "adult" / "run.lock").exists()


def test_a_held_ledger_lock_is_waited_for_reported_and_refused_naming_its_holder(pg_server,
                                                                                  pg_schema):
    from dp_synth_assets.infra.ledger_store import _key

    lines = []
    ledger = PrivacyLedger(pg_server.url, schema=pg_schema, lock_timeout_seconds=0.6,
                           lock_report_seconds=0.2, log=lines.append)
    ledger.summary("adult")
    with psycopg.connect(pg_server.dsn, autocommit=True,
                         application_name="the holder") as holder:
        holder.execute("SELECT pg_advisory_lock(%s, 0)", (_key("ledger", pg_schema),))
        with pytest.raises(LedgerError) as error:
            ledger.reserve("adult", "r1", 0.5, 1.0)
    message = str(error.value)
    assert "the holder" in message and "PostgreSQL backend" in message
    assert "Nothing was spent" in message and "lock_timeout_seconds" in message
    assert lines and "waiting for the privacy ledger's lock" in lines[0]
    assert ledger.events() == []
    ledger.reserve("adult", "r1", 0.5, 1.0)  # free again
