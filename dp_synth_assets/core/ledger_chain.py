"""The privacy ledger's hash chain, over plain rows (no I/O; the stores in `infra.ledger_store`
keep the rows, the chain's secret and the mirrored head).

Row i carries hash_i = sha256(hash_{i-1} "\n" canonical(row i)), where hash_0 (`genesis_hash`)
derives from a random secret drawn when the ledger is created, so the public head hash cannot
be tested against guessed row contents; a row hashes alike in every store. `verify` recomputes
the chain and requires it to extend the head the store mirrored: an edited, removed or inserted
row, a truncated ledger, an older copy or another ledger raise LedgerError.
"""

import hashlib
import json

from .ledger import LedgerError


def genesis_hash(secret: str) -> str:
    """hash_0 of a ledger whose chain secret is `secret` (hex text)."""
    return hashlib.sha256(f"dp-synth privacy ledger\n{secret}".encode()).hexdigest()


def canonical(row: dict) -> str:
    """A row's content as hashed: its columns in a fixed order, floats as exact reprs."""
    values = [row["id"], row["ts"], row["unit"], row["source"], row["dataset"], row["run_id"], row["stage"],
              row["mechanism"], row["kind"], float(row["rho"]), float(row["delta_extra"]),
              row["parameters"], row["owner"]]
    return json.dumps(values, separators=(",", ":"), ensure_ascii=True)


def link(previous: str, row: dict) -> str:
    """The hash of `row` after the row whose hash is `previous` (hash_0 for the first row)."""
    return hashlib.sha256(f"{previous}\n{canonical(row)}".encode()).hexdigest()


def verify(rows: list[dict], genesis: str, head: dict | None, *, name: str, mirror: str,
           restore_hint: str, adopt_command: str) -> None:
    """Refuse (LedgerError) unless the chain recomputes and the ledger extends the head.

    Args:
        rows: the ledger's rows in id order, each with its `hash`.
        genesis: hash_0 (`genesis_hash` of the ledger's secret).
        head: the mirrored head {rows, head, genesis}, or None when the store has none.
        name, mirror: how messages name the ledger and its mirror (a file, a table).
        restore_hint: what to do about a ledger that fails (the store's words).
        adopt_command: the command that records the head of a ledger whose mirror was lost.
    """
    previous = genesis
    for position, row in enumerate(rows, start=1):
        if row["id"] != position or link(previous, row) != row["hash"]:
            raise LedgerError(
                f"The privacy ledger {name} fails its hash chain at row {row['id']}: a "
                f"row was edited, removed or inserted. {restore_hint}")
        previous = row["hash"]
    if head is None:
        if rows:
            raise LedgerError(
                f"The privacy ledger {name} has {len(rows)} rows but no {mirror}, so a "
                f"truncated or swapped ledger cannot be ruled out. If you moved the ledger, "
                f"move its head with it. If this ledger is complete (compare with the "
                f"`privacy/ledger_head` metadata of the latest spending materialization), "
                f"record its head with `{adopt_command}`.")
        return
    if head["genesis"] != genesis:
        raise LedgerError(
            f"The privacy ledger {name} is not the ledger its {mirror} mirrors (it is "
            f"another ledger, or a new one: the ledger was swapped or deleted). "
            f"{restore_hint}")
    if len(rows) < head["rows"]:
        raise LedgerError(
            f"The privacy ledger {name} has {len(rows)} rows, but its {mirror} records "
            f"{head['rows']}: rows were removed (the ledger was truncated, or an older copy "
            f"was put in its place). {restore_hint}")
    if head["rows"] and rows[head["rows"] - 1]["hash"] != head["head"]:
        raise LedgerError(
            f"Row {head['rows']} of the privacy ledger {name} does not carry the head "
            f"hash its {mirror} records: the ledger was replaced or rewritten. "
            f"{restore_hint}")
