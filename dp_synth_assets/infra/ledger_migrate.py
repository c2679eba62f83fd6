"""Moving a privacy ledger: `migrate_legacy` copies a ledger written before the hash chain into a
new chained one, `migrate_chain` a chained SQLite ledger into PostgreSQL, `chained` tells the two
kinds of SQLite file apart (the command line's `migrate`, `dp_synth_assets.resources.ledger`).
"""

import json
import sqlite3
from pathlib import Path

from ..core.ledger import LedgerError
from ..core.sql import sql
from .ledger import PrivacyLedger
from .ledger_store import DEFAULT_SCHEMA, is_postgres

# What `migrate_legacy` reads of a ledger from before the hash chain (sql/ledger_legacy_rows.sql).
_LEGACY_SELECT = sql("ledger_legacy_rows")


def migrate_legacy(old: str | Path, new: str | Path, units: dict[str, str],
                   sources: dict[str, str] | None = None, schema: str = DEFAULT_SCHEMA) -> int:
    """Copy the rows of a ledger written before the hash chain (keyed by dataset name), in order
    and unchanged, into a new chained ledger at `new` (a file, or a PostgreSQL URL and `schema`);
    each row's unit is its dataset's unit in `units` (its dataset name for an entry no longer
    registered). Returns the number of rows. The old file is only read; a new file must not
    exist, a PostgreSQL ledger must hold no rows."""
    if not is_postgres(str(new)) and Path(new).exists():
        raise LedgerError(f"{new} exists; migrate into a new file")
    source = sqlite3.connect(f"file:{Path(old).resolve()}?mode=ro", uri=True)
    source.row_factory = sqlite3.Row
    try:
        rows = [dict(row) for row in source.execute(_LEGACY_SELECT)]
    finally:
        source.close()
    sources = sources or {}
    ledger = PrivacyLedger(new, units=units, sources=sources, schema=schema)
    with ledger._transaction() as tx:
        if tx.rows:
            raise LedgerError(f"The privacy ledger {ledger._store.name} already holds "
                              f"{len(tx.rows)} rows; migrate into an empty ledger. Nothing was "
                              f"copied.")
        for r in rows:
            unit = units.get(r["dataset"], r["dataset"])
            ledger._insert(tx, (unit, sources.get(r["dataset"], unit)), r["dataset"], r["run_id"],
                           r["kind"], r["rho"], r["delta_extra"], r["stage"], r["mechanism"],
                           json.loads(r["parameters"]), ts=r["ts"], owner=r["owner"])
    return len(rows)


def chained(path: str | Path) -> bool:
    """Whether the SQLite file at `path` is a ledger with the hash chain (else one from before
    it, which `migrate_legacy` copies); reads the file only."""
    source = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        return "hash" in {row[0] for row in source.execute(sql("ledger_columns"))}
    except sqlite3.Error as e:
        raise LedgerError(f"{path} is not a readable SQLite ledger ({e}); nothing was "
                          f"copied.") from None
    finally:
        source.close()


def migrate_chain(old: str | Path, new: str, schema: str = DEFAULT_SCHEMA,
                  old_head: str | Path | None = None) -> tuple[int, str]:
    """Copy a chained SQLite ledger (`old`, verified against its head file `old_head`, default
    `<old>.head`) into the empty PostgreSQL ledger at the URL `new`, schema `schema`: the same
    ids, rows, hashes and chain secret, in one transaction, then verified by reading it back
    through its own store. Returns (rows, head hash). The old file is only read; a target
    that already holds rows is refused and nothing is copied."""
    if not is_postgres(str(new)):
        raise LedgerError(
            f"{new} is not a postgresql:// URL: a chained SQLite ledger moves to another file "
            f"by copying it with its head file (`sqlite3 {old} \".backup <file>\"`, then the "
            f".head), not by migrate.")
    source = PrivacyLedger(old, head_path=old_head)
    rows, genesis = source._snapshot()
    target = PrivacyLedger(new, schema=schema)
    target._store.import_chain(source._store.secret(), rows)
    copied, copied_genesis = target._snapshot()
    if copied != rows or copied_genesis != genesis:
        raise LedgerError(f"The copy in {target._store.name} does not read back as the rows of "
                          f"{old}; do not use it.")
    return len(copied), copied[-1]["hash"] if copied else copied_genesis
