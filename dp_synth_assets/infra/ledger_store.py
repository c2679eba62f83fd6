"""Where the privacy ledger's rows live: the storage under `infra.ledger.PrivacyLedger`.

A store only keeps rows (the ledger's logic is `core.ledger`, `core.ledger_chain` and
`infra.ledger`). `SqliteStore`: an embedded SQLite file, writes in `BEGIN IMMEDIATE` under an
flock, head mirrored to `<ledger>.head`. `PostgresStore`: one schema of a PostgreSQL database,
writes under a transaction-level advisory lock, triggers refusing UPDATE, DELETE and TRUNCATE,
head mirrored to `ledger_head` in the same transaction, and dead owners told by session-level
advisory locks. psycopg is imported only for PostgreSQL; messages never show a password. What
each mirror can and cannot see: docs/decisions/0004-privacy-ledger.md,
"As implemented: infra/ledger_store.py"."""

import fcntl
import hashlib
import json
import os
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ..core.ledger import LedgerError
from ..core.ledger_chain import genesis_hash
from ..core.sql import ident, sql
from .locks import describe_processes, lock_holders, owner_id, waiting

DEFAULT_SCHEMA = "dp_synth"
POSTGRES_SCHEMES = ("postgresql", "postgres")
COLUMNS = ("id", "ts", "unit", "source", "dataset", "run_id", "stage", "mechanism", "kind", "rho",
           "delta_extra", "parameters", "owner")
LEDGER_HEAD_SUFFIX = ".head"
LEDGER_LOCK_SUFFIX = ".lock"
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def is_postgres(location) -> bool:
    """Whether a ledger setting names a PostgreSQL database (a postgresql:// or postgres://
    URL) rather than a SQLite file."""
    return isinstance(location, str) and location.split("://", 1)[0].lower() in POSTGRES_SCHEMES \
        and "://" in location


def redact(url: str) -> str:
    """The URL with its password (in the authority or a `password=` parameter) replaced by
    `***`: what every message shows of a PostgreSQL ledger."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a PostgreSQL URL that cannot be parsed>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = re.sub(r"(^|&)password=[^&]*", r"\1password=***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _hide(text: str, url: str) -> str:
    """`text` (a driver's message) with the URL's password removed, wherever it appears."""
    try:
        parts = urlsplit(url)
        secrets_in_url = [parts.password] + re.findall(r"(?:^|&)password=([^&]*)", parts.query)
    except ValueError:
        secrets_in_url = []
    text = text.replace(url, redact(url))
    for secret in filter(None, secrets_in_url):
        text = text.replace(secret, "***")
    return text


@dataclass
class StoreTx:
    """An open, serialized write transaction of a store: the rows (unverified) and the chain's
    starting hash as read under the lock, the mirrored head (None when there is none), and
    `insert(row)`, which appends one row (with its hash) in the transaction. The ledger appends
    each inserted row to `rows`; the store mirrors the head of `rows` when it commits."""

    rows: list[dict]
    genesis: str
    head: dict | None
    insert: Callable[[dict], None]
    gone: Callable[[set[str]], set[str]]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def open_store(location, settings, head_path=None, schema: str = DEFAULT_SCHEMA):
    """The store of a ledger setting: a PostgreSQL URL, else the path of a SQLite file.
    `settings`: the ledger (its lock_timeout_seconds, lock_report_seconds and log)."""
    if is_postgres(str(location)):
        if head_path:
            raise LedgerError(
                f"The privacy ledger {redact(str(location))} is in PostgreSQL, whose head is "
                f"mirrored in the table {schema}.ledger_head: a head file ({head_path}) does not "
                f"apply. Unset DP_SYNTH_LEDGER_HEAD (the ledger resource's `head_path`).")
        return PostgresStore(str(location), settings, schema)
    return SqliteStore(location, settings, head_path)


# ---- SQLite -----------------------------------------------------------------------------------


_SQLITE_SCHEMA = (
    sql("ledger_create_events"),
    sql("ledger_create_index"),
    *(sql("ledger_append_only", table="privacy_ledger", event=event,
          name=f"privacy_ledger_append_only_{event[0].lower()}") for event in ("UPDATE", "DELETE")),
    sql("ledger_create_meta"),
    *(sql("ledger_append_only", table="ledger_meta", event=event,
          name=f"ledger_meta_append_only_{event[0].lower()}") for event in ("UPDATE", "DELETE")),
)
_SQLITE_INSERT = sql("ledger_insert")
_SQLITE_SELECT = sql("ledger_rows", columns=", ".join(COLUMNS))


def _is_locked(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


def _enable_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the database to WAL mode (persistent), retrying while another process holds it.

    SQLite answers a journal-mode change with "database is locked" at once, without waiting for
    the busy timeout, when another connection is creating the database at the same moment.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if conn.execute(sql("ledger_journal_wal")).fetchone()[0].lower() == "wal":
                return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("could not switch the privacy ledger to WAL mode")
        time.sleep(0.01)


class SqliteStore:
    """The ledger in the SQLite file `path` (created on first use), its head mirrored in the
    file `head_path` (default `<path>.head`), its writes serialized by an flock of
    `<path>.lock`."""

    database = None  # no database server: the run lock stays a file (infra/runs.py)

    def __init__(self, path, settings, head_path=None):
        self.path = Path(path)
        self.head_path = (Path(head_path) if head_path
                          else self.path.with_name(self.path.name + LEDGER_HEAD_SUFFIX))
        self.lock_path = self.path.with_name(self.path.name + LEDGER_LOCK_SUFFIX)
        self.settings = settings
        self.name = str(self.path)
        self.head_name = f"head file {self.head_path}"
        self._ready = False

    def restore_hint(self) -> str:
        return (
            f"Nothing was spent. Restore the ledger file {self.path} from a backup that contains "
            f"the mirrored head (take backups with `sqlite3 {self.path} \".backup <file>\"`; the "
            f"file is in WAL mode), or point DP_SYNTH_LEDGER at the right file. The head is "
            f"mirrored in {self.head_path} and in the `privacy/ledger_rows` and "
            f"`privacy/ledger_head` metadata of the latest spending materializations."
        )

    def adopt_command(self) -> str:
        return f"python -m dp_synth_assets.resources.ledger adopt {self.path}"

    def exists(self) -> bool:
        return self.path.exists()

    def gone_owners(self, owners: set[str]) -> set[str]:
        return set()  # a file cannot tell: the host's process table does (`owner_alive`)

    # -- the head file

    def _head(self) -> dict | None:
        """The mirrored head {rows, head, genesis}, or None when there is no head file."""
        try:
            text = self.head_path.read_text()
        except FileNotFoundError:
            return None
        try:
            head = json.loads(text)
            head = {"rows": int(head["rows"]), "head": str(head["head"]),
                    "genesis": str(head["genesis"])}
        except (ValueError, KeyError, TypeError):
            raise LedgerError(f"The privacy ledger's head file {self.head_path} is unreadable; "
                              f"restore it from a backup. {self.restore_hint()}") from None
        return head

    def _write_head(self, rows: list[dict], genesis: str) -> None:
        """Mirror the head atomically (`store.atomic_write`: a complete temporary file, then
        os.replace)."""
        from .store import atomic_write

        head = {"ledger": str(self.path.resolve()), "rows": len(rows),
                "head": rows[-1]["hash"] if rows else genesis, "genesis": genesis}
        atomic_write(self.head_path, json.dumps(head).encode())

    # -- connections and errors

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """The cross-process lock around a write: SQLite transaction plus head update."""
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise LedgerError(self._unusable(self.lock_path, e)) from None
        try:
            wait = self._waiting(self.lock_path)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    wait()
                    time.sleep(0.005)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _waiting(self, path: Path, *others: Path):
        return waiting(self.settings, self.name, str(path),
                        lambda: describe_processes(lock_holders(path, *others)))

    def _unusable(self, path: Path, error: BaseException) -> str:
        """The message for a ledger file that cannot be opened, read or written."""
        text = str(error)
        if "not a database" in text or "malformed" in text or "disk image" in text:
            what, fix = ("is not a SQLite database (it is corrupt, truncated or another file)",
                         "Restore it from a backup (with its .head file)")
        elif "readonly" in text or "read-only" in text or isinstance(error, PermissionError):
            what, fix = ("cannot be written (a read-only file or folder)",
                         "Make the file, its folder and its -wal/-shm/.lock files writable by "
                         "this user")
        else:
            what, fix = (f"cannot be opened ({text})",
                         "Check that the path is a file in a folder this user can write, or "
                         "point DP_SYNTH_LEDGER (the ledger resource's `path`) at the ledger")
        return (f"The privacy ledger {self.path} {what}: {path}. Nothing was spent. {fix}; "
                f"never start a new, empty ledger in its place, which would forget what was "
                f"spent.")

    @contextmanager
    def _file_errors(self) -> Iterator[None]:
        """SQLite's and the file system's errors (not a lock wait: `_waiting`) as a LedgerError
        naming the file and the fix (`_unusable`)."""
        try:
            yield
        except sqlite3.OperationalError as e:
            if _is_locked(e):
                raise LedgerError(
                    f"The privacy ledger {self.path} stayed locked by "
                    f"{describe_processes(lock_holders(self.path))}: {e}. Nothing was spent by "
                    f"this attempt; retry when that process is done, or raise the ledger's "
                    f"`lock_timeout_seconds`.") from None
            self._ready = False
            raise LedgerError(self._unusable(self.path, e)) from None
        except (sqlite3.Error, OSError) as e:
            self._ready = False
            raise LedgerError(self._unusable(self.path, e)) from None

    def _begin(self, conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE, waiting for SQLite's write lock as `_waiting` says."""
        wait = self._waiting(self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                if not _is_locked(e):
                    raise
                wait()

    def _connect(self, locked: bool = False) -> sqlite3.Connection:
        if not self.path.exists():
            self._ready = False
            head = self._head()
            if head is not None and head["rows"] > 0:
                raise LedgerError(
                    f"The privacy ledger {self.path} does not exist, but its head file "
                    f"{self.head_path} records {head['rows']} rows: the ledger was deleted or "
                    f"moved. {self.restore_hint()}")
        if self.path.is_dir():
            raise LedgerError(self._unusable(self.path, IsADirectoryError("it is a folder")))
        # SQLite waits at most this long inside one statement; `_begin` retries and reports
        s = self.settings
        step = max(0.001, min(s.lock_report_seconds, s.lock_timeout_seconds) / 5)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=step, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute(sql("ledger_busy_timeout", milliseconds=int(step * 1000)))
        except (OSError, sqlite3.Error) as e:
            raise LedgerError(self._unusable(self.path, e)) from None
        if not self._ready:
            try:
                if locked:
                    self._setup(conn)
                else:
                    with self._lock():
                        self._setup(conn)
            except BaseException:
                conn.close()
                raise
            self._ready = True
        return conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        """Create the tables and the chain's secret on first use; refuse a pre-chain ledger."""
        _enable_wal(conn, self.settings.lock_timeout_seconds)
        self._begin(conn)
        try:
            columns = {row[0] for row in conn.execute(sql("ledger_columns"))}
            if columns and "hash" not in columns:
                raise LedgerError(
                    f"The privacy ledger {self.path} was written by an earlier dp-synth, without "
                    f"hash chain and privacy units. Migrate it into a new file: `python -m "
                    f"dp_synth_assets.resources.ledger migrate {self.path} <new ledger>` (run "
                    f"from the project folder, with DP_SYNTH_DATASETS and DP_SYNTH_WAREHOUSE set "
                    f"as for Dagster), then point DP_SYNTH_LEDGER at the new file (or move it to "
                    f"the default .dp_synth/ledger.sqlite, with its .head file).")
            self._upgrade_kinds(conn)
            for statement in _SQLITE_SCHEMA:
                conn.execute(statement)
            if conn.execute(sql("ledger_genesis")).fetchone() is None:
                conn.execute(sql("ledger_insert_genesis"), (secrets.token_hex(32),))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if self._head() is None:
            rows, genesis = self._load(conn)
            if not rows:
                self._write_head(rows, genesis)

    @staticmethod
    def _upgrade_kinds(conn: sqlite3.Connection) -> None:
        """Inside `_setup`'s transaction: a ledger whose events table predates the `limit` kind
        (its CHECK constraint refuses it) gets the current table, its rows copied unchanged,
        so the hash chain is the same."""
        found = conn.execute(sql("ledger_events_schema")).fetchone()
        if found is None or "'limit'" in found[0]:
            return
        conn.execute(sql("ledger_upgrade_rename"))
        conn.execute(_SQLITE_SCHEMA[0])
        conn.execute(sql("ledger_upgrade_copy"))
        conn.execute(sql("ledger_upgrade_drop"))

    def _secret(self, conn: sqlite3.Connection) -> str:
        secret = conn.execute(sql("ledger_genesis")).fetchone()
        if secret is None:
            raise LedgerError(f"The privacy ledger {self.path} has lost its chain secret "
                              f"(table ledger_meta). {self.restore_hint()}")
        return secret[0]

    def _load(self, conn: sqlite3.Connection) -> tuple[list[dict], str]:
        """All rows in id order and the chain's starting hash, unverified."""
        genesis = genesis_hash(self._secret(conn))
        return [dict(row) for row in conn.execute(_SQLITE_SELECT)], genesis

    # -- what the ledger asks

    @contextmanager
    def transaction(self) -> Iterator[StoreTx]:
        """One write under the lock: a BEGIN IMMEDIATE transaction, committed on success (then
        the head is mirrored), rolled back on any exception."""
        with self._lock(), self._file_errors():
            head = self._head()
            conn = self._connect(locked=True)
            try:
                self._begin(conn)
                try:
                    rows, genesis = self._load(conn)
                    before = len(rows)

                    def insert(row: dict) -> None:
                        conn.execute(_SQLITE_INSERT, (*(row[c] for c in COLUMNS), row["hash"]))

                    tx = StoreTx(rows, genesis, head, insert, self.gone_owners)
                    yield tx
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            finally:
                conn.close()
            if len(tx.rows) != before:
                self._write_head(tx.rows, tx.genesis)

    def snapshot(self) -> tuple[list[dict], str, dict | None]:
        """(rows, chain start, mirrored head), unverified. The head is read first: it only
        advances after a commit, so the rows read next extend it unless the ledger was tampered
        with."""
        with self._file_errors():
            head = self._head()
            conn = self._connect()
            try:
                rows, genesis = self._load(conn)
            finally:
                conn.close()
        return rows, genesis, head

    def secret(self) -> str:
        """The chain's secret (what `migrate` copies into another store)."""
        with self._file_errors():
            conn = self._connect()
            try:
                return self._secret(conn)
            finally:
                conn.close()

    def adopt(self, check: Callable[[list[dict], str], None]) -> tuple[list[dict], str]:
        """Under the lock: the rows and chain start, `check`ed, then mirrored as the head."""
        with self._lock(), self._file_errors():
            conn = self._connect(locked=True)
            try:
                rows, genesis = self._load(conn)
            finally:
                conn.close()
            check(rows, genesis)
            self._write_head(rows, genesis)
        return rows, genesis


# ---- PostgreSQL -------------------------------------------------------------------------------


def _key(*parts: str) -> int:
    """A non-negative int4 advisory-lock key of `parts` (pg_locks shows it unchanged)."""
    digest = hashlib.sha256("\n".join(("dp-synth",) + parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def _psycopg(name: str):
    """psycopg, or a LedgerError saying which extra installs it."""
    try:
        import psycopg
    except ImportError:
        from ..core.extras import install_command

        raise LedgerError(
            f"The privacy ledger {name} is a PostgreSQL database, which needs psycopg (the "
            f"`postgres` extra), not installed in this environment: run "
            f"{install_command('postgres')}.") from None
    return psycopg


# this process's presence connections, by (url, schema): (the pid that opened it, connection)
_PRESENCE: dict[tuple[str, str], tuple[int, object]] = {}
_INHERITED: list = []  # a forked child's copies of its parent's: kept, never used nor closed


@dataclass(frozen=True)
class PostgresDatabase:
    """A schema of a PostgreSQL database: its URL, the schema, and connections to it with
    errors as LedgerErrors (shared by the ledger's store and the run lock of infra/runs.py)."""

    url: str
    schema: str = DEFAULT_SCHEMA

    @property
    def name(self) -> str:
        return f"{redact(self.url)} (schema {self.schema})"

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"

    @property
    def quoted(self) -> str:
        """The schema as an SQL identifier, for the templates' {schema}."""
        return ident(self.schema)

    def fix(self, error) -> str:
        """What to do about a driver error, by its kind."""
        sqlstate = getattr(error, "sqlstate", None) or ""
        if sqlstate == "42501":  # insufficient_privilege
            return (f"The database user lacks a permission the ledger needs. Grant it, as the "
                    f"schema's owner: CREATE on the database (to create the schema "
                    f"{self.schema} once), or USAGE and CREATE on schema {self.schema} and "
                    f"SELECT and INSERT on its tables (DELETE too on {self.schema}.run_locks)")
        if sqlstate.startswith("08") or sqlstate in ("", "57P01", "57P03", "3D000", "28P01",
                                                        "28000"):
            return ("Check that the PostgreSQL server is running and reachable from this "
                    "host, that the database exists and that the URL's user and password are "
                    "right (DP_SYNTH_LEDGER, the ledger resource's `path`)")
        return "Check the database and its schema; restore the schema from a backup if it is damaged"

    def error(self, error) -> LedgerError:
        text = _hide(str(error).strip().splitlines()[0] if str(error).strip() else
                     type(error).__name__, self.url)
        return LedgerError(f"The privacy ledger {self.name} cannot be used: {text}. Nothing "
                           f"was spent. {self.fix(error)}; never start a new, empty ledger in "
                           f"its place, which would forget what was spent.")

    def connect(self, application: str = "dp-synth ledger"):
        psycopg = _psycopg(self.name)
        if not _SCHEMA_NAME.match(self.schema):
            raise LedgerError(
                f"The ledger schema {self.schema!r} is not a plain PostgreSQL name (letters, "
                f"digits and underscores, not starting with a digit): set DP_SYNTH_LEDGER_SCHEMA "
                f"(the ledger resource's `schema`) to one.")
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                                   application_name=f"{application} {owner_id()}"[:63])
        except psycopg.Error as e:
            raise self.error(e) from None

    @contextmanager
    def errors(self) -> Iterator[None]:
        psycopg = _psycopg(self.name)
        try:
            yield
        except psycopg.Error as e:
            raise self.error(e) from None

    def holders(self, conn, classid: int, objid: int) -> str:
        """The sessions holding an advisory lock, for a message."""
        try:
            found = conn.execute(sql("ledger_pg_lock_holders"), (classid, objid, 2)).fetchall()
        except Exception:  # noqa: BLE001 - a message, whatever the database allows us to see
            found = []
        if not found:
            return "another session"
        return ", ".join(f"PostgreSQL backend {pid} (client {client}, {app or 'no name'})"
                         for pid, client, app in found)


class PostgresStore:
    """The ledger in the schema `schema` of the PostgreSQL database at `url` (module
    docstring): tables privacy_ledger, ledger_meta, ledger_head (the mirrored head) and
    ledger_owners, append-only by trigger, created on first use; run_locks holds the datasets'
    run locks."""

    def __init__(self, url: str, settings, schema: str = DEFAULT_SCHEMA):
        self.database = PostgresDatabase(url, schema)
        self.settings = settings
        self.path = redact(url)  # what a message may show
        self.head_path = None
        self.name = self.database.name
        self.head_name = f"head table {schema}.ledger_head"
        self._write_key = _key("ledger", schema)
        self._presence_key = _key("presence", schema)
        self._ready = False

    def restore_hint(self) -> str:
        db = self.database
        return (
            f"Nothing was spent. Restore the schema {db.schema} (all its tables, taken together "
            f"with `pg_dump --schema={db.schema}`) from a backup, or point DP_SYNTH_LEDGER and "
            f"DP_SYNTH_LEDGER_SCHEMA at the right database and schema. The head is mirrored in "
            f"{db.table('ledger_head')} and in the `privacy/ledger_rows` and "
            f"`privacy/ledger_head` metadata of the latest spending materializations.")

    def adopt_command(self) -> str:
        return (f"python -m dp_synth_assets.resources.ledger adopt '{self.path}' --schema "
                f"{self.database.schema}")

    # -- connections

    def _exists(self, conn) -> bool:
        return bool(conn.execute(sql("ledger_pg_exists"),
                                 (self.database.schema, "privacy_ledger")).fetchone()[0])

    def exists(self) -> bool:
        db = self.database
        conn = db.connect()
        try:
            with db.errors():
                return self._exists(conn)
        finally:
            conn.close()

    def _lock(self, conn) -> None:
        """Take the schema's transaction-level advisory lock, waiting as `_waiting` says."""
        wait = waiting(self.settings, self.name, f"the advisory lock of schema "
                        f"{self.database.schema}",
                        lambda: self.database.holders(conn, self._write_key, 0))
        while not conn.execute(sql("ledger_pg_lock"), (self._write_key, 0)).fetchone()[0]:
            wait()
            time.sleep(0.005)

    @contextmanager
    def _tx(self, conn) -> Iterator[None]:
        with conn.transaction():
            self._lock(conn)
            yield

    def _create(self, conn, secret: str | None) -> None:
        """Create the schema's tables and triggers and record the chain's secret (under the
        lock, in the caller's transaction)."""
        db = self.database
        q = db.quoted
        for statement in (sql("ledger_pg_create_schema", schema=q),
                          sql("ledger_pg_create_events", schema=q),
                          sql("ledger_pg_create_index", schema=q),
                          sql("ledger_pg_create_meta", schema=q),
                          sql("ledger_pg_create_head", schema=q),
                          sql("ledger_pg_create_owners", schema=q),
                          sql("ledger_pg_create_run_locks", schema=q),
                          sql("ledger_pg_append_only_function", schema=q),
                          *(sql("ledger_pg_append_only", schema=q, table=table,
                                name=f"{table}_append_only")
                            for table in ("privacy_ledger", "ledger_meta", "ledger_head",
                                          "ledger_owners"))):
            conn.execute(statement)
        conn.execute(sql("ledger_pg_insert_genesis", schema=db.quoted), (1, secret or secrets.token_hex(32)))

    def _setup(self, conn) -> None:
        if self._ready:
            return
        if not self._exists(conn):
            with self._tx(conn):
                if not self._exists(conn):
                    self._create(conn, None)
        self._ready = True

    def _secret(self, conn) -> tuple[str, int]:
        found = conn.execute(sql("ledger_pg_genesis", schema=self.database.quoted)).fetchone()
        if found is None:
            raise LedgerError(f"The privacy ledger {self.name} has lost its chain secret "
                              f"(table {self.database.table('ledger_meta')}). "
                              f"{self.restore_hint()}")
        return found[0], found[1]

    def _load(self, conn) -> tuple[list[dict], str, dict | None]:
        db = self.database
        genesis = genesis_hash(self._secret(conn)[0])
        cursor = conn.execute(sql("ledger_pg_rows", schema=db.quoted, columns=", ".join(COLUMNS)))
        names = [c.name for c in cursor.description]
        rows = [dict(zip(names, values)) for values in cursor.fetchall()]
        head = conn.execute(sql("ledger_pg_head", schema=db.quoted)).fetchone()
        head = None if head is None else {"rows": int(head[0]), "head": head[1], "genesis": head[2]}
        return rows, genesis, head

    def _present(self, conn, owner: str) -> None:
        """Hold this process's presence lock for `owner` (its own id) on a connection of its
        own from now until the process ends, and record the owner (in the caller's
        transaction, before the rows it owns are committed)."""
        slot = (self.database.url, self.database.schema)
        held = _PRESENCE.get(slot)
        if held is not None and held[0] != os.getpid():  # a fork: the parent's, not ours
            _INHERITED.append(_PRESENCE.pop(slot))
            held = None
        if held is not None and (held[1].closed or held[1].broken):
            _PRESENCE.pop(slot)
            held = None
        if held is None:
            presence = self.database.connect("dp-synth presence")
            with self.database.errors():
                presence.execute(sql("ledger_pg_presence_lock"),
                                 (self._presence_key, _key("owner", owner)))
            _PRESENCE[slot] = (os.getpid(), presence)
        conn.execute(sql("ledger_pg_register_owner", schema=self.database.quoted), (owner, _now(), owner))

    def gone_owners(self, owners: set[str], conn=None) -> set[str]:
        """Of `owners`, those that held a presence lock and whose lock no session holds now:
        their process is gone, whatever host it ran on."""
        if not owners:
            return set()
        if conn is None:
            conn = self.database.connect()
            try:
                with self.database.errors():
                    self._setup(conn)
                    return self.gone_owners(owners, conn)
            finally:
                conn.close()
        asked = sorted(owners)
        with self.database.errors():
            found = conn.execute(sql("ledger_pg_gone_owners", schema=self.database.quoted), (
                asked, [_key("owner", o) for o in asked], self._presence_key)).fetchall()
        return {owner for (owner,) in found}

    # -- what the ledger asks

    @contextmanager
    def transaction(self) -> Iterator[StoreTx]:
        """One write: a transaction that takes the schema's advisory lock first, reads the
        rows and the head, lets the caller insert, mirrors the new head in ledger_head and
        commits; rolled back on any exception."""
        db = self.database
        conn = db.connect()
        try:
            with db.errors():
                self._setup(conn)
                with self._tx(conn):
                    rows, genesis, head = self._load(conn)
                    before = len(rows)
                    insert_row = sql("ledger_pg_insert", schema=db.quoted)
                    me = owner_id()

                    def insert(row: dict) -> None:
                        if row["owner"] == me:
                            self._present(conn, me)
                        conn.execute(insert_row, (*(row[c] for c in COLUMNS), row["hash"]))

                    tx = StoreTx(rows, genesis, head, insert,
                                 lambda owners: self.gone_owners(owners, conn))
                    yield tx
                    if len(tx.rows) != before:
                        conn.execute(sql("ledger_pg_insert_head", schema=db.quoted), (
                            len(tx.rows), tx.rows[-1]["hash"], genesis, _now()))
        finally:
            conn.close()

    def snapshot(self) -> tuple[list[dict], str, dict | None]:
        """(rows, chain start, mirrored head), unverified, from one consistent snapshot."""
        conn = self.database.connect()
        try:
            with self.database.errors():
                self._setup(conn)
                conn.isolation_level = _psycopg(self.name).IsolationLevel.REPEATABLE_READ
                with conn.transaction():
                    return self._load(conn)
        finally:
            conn.close()

    def adopt(self, check: Callable[[list[dict], str], None]) -> tuple[list[dict], str]:
        """Under the lock: the rows and chain start, `check`ed, then recorded as the head."""
        conn = self.database.connect()
        try:
            with self.database.errors():
                self._setup(conn)
                with self._tx(conn):
                    rows, genesis, head = self._load(conn)
                    check(rows, genesis)
                    if rows and (head is None or head["rows"] != len(rows)):
                        conn.execute(sql("ledger_pg_insert_head", schema=self.database.quoted), (
                            len(rows), rows[-1]["hash"], genesis, _now()))
        finally:
            conn.close()
        return rows, genesis

    def import_chain(self, secret: str, rows: list[dict]) -> None:
        """Copy a verified chain (its secret and rows, hashes included) into this ledger, which
        must hold no event: one transaction under the lock; the chain secret is recorded anew
        (a ledger without events has nothing its old secret protects)."""
        db = self.database
        conn = db.connect()
        try:
            with db.errors():
                with self._tx(conn):
                    if not self._exists(conn):
                        self._create(conn, secret)
                    else:
                        present, _, _ = self._load(conn)
                        if present:
                            raise LedgerError(
                                f"The privacy ledger {self.name} already holds {len(present)} "
                                f"rows; migrate into an empty ledger (another schema: "
                                f"--schema). Nothing was copied.")
                        conn.execute(sql("ledger_pg_insert_genesis", schema=db.quoted),
                                     (self._secret(conn)[1] + 1, secret))
                    insert_row = sql("ledger_pg_insert", schema=db.quoted)
                    for row in rows:
                        conn.execute(insert_row, (*(row[c] for c in COLUMNS), row["hash"]))
                    if rows:
                        conn.execute(sql("ledger_pg_insert_head", schema=db.quoted), (
                            len(rows), rows[-1]["hash"], genesis_hash(secret), _now()))
        finally:
            conn.close()
        self._ready = False
