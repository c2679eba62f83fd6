"""The privacy ledger as a Dagster resource (DESIGN.md section 5).

The ledger itself, an append-only, hash-chained table of budget events in a SQLite file or in a
schema of a PostgreSQL database, is `dp_synth_assets.core.ledger` (no Dagster: the notebook API
uses it too); this module wraps it as `LedgerResource` and is its command line
(`python -m dp_synth_assets.resources.ledger adopt|migrate`). The ledger's names are re-exported
here for the code that imports them from this module.
(This file must not postpone annotations with a __future__ import: Dagster inspects them.)
"""

import os
from pathlib import Path

import dagster
from pydantic import Field

from dp_synth_assets.core.ledger import (  # noqa: F401 - re-exported
    KINDS,
    REL_TOL,
    BUSY_TIMEOUT_MS,
    LOCK_REPORT_SECONDS,
    DEFAULT_STALE_AFTER_SECONDS,
    DEFAULT_SCHEMA,
    LEDGER_HEAD_SUFFIX,
    LEDGER_LOCK_SUFFIX,
    LedgerError,
    budget_message,
    BudgetExceeded,
    ChargeExceedsReservation,
    Reservation,
    LedgerSummary,
    owner_id,
    owner_alive,
    PrivacyLedger,
    migrate_legacy,
    migrate_chain,
    chained,
    is_postgres,
)


# ---- Dagster ----------------------------------------------------------------------------------------


class LedgerResource(dagster.ConfigurableResource):
    """The privacy ledger as a Dagster resource: where it lives (a SQLite file and its mirrored
    head, or a schema of a PostgreSQL database), which privacy unit each dataset spends, when
    runs go stale."""

    path: str = Field(description="Path of the ledger's SQLite database file, or a "
                                  "postgresql:// URL of the database that holds it (keep the "
                                  "password out of it: PGPASSWORD or a .pgpass file).")
    schema_name: str = Field(
        default=DEFAULT_SCHEMA, description="The PostgreSQL schema of the ledger's tables "
                                            "(a PostgreSQL ledger only).")
    head_path: str | None = Field(
        default=None, description="The mirrored head file of a SQLite ledger (default: the "
                                  "ledger's path + '.head').")
    units: dict[str, str] = Field(
        default_factory=dict, description="Dataset name -> privacy unit (budget owner).")
    sources: dict[str, str] = Field(
        default_factory=dict, description="Dataset name -> normalized source identity.")
    entries: dict[str, str] = Field(
        default_factory=dict, description="Dataset name -> where its entry is written (the "
                                          "file the user edits), named by a budget refusal.")
    stale_after_seconds: float = Field(
        default=DEFAULT_STALE_AFTER_SECONDS,
        description="An open reservation with no ledger activity for this long is released.",
    )
    lock_timeout_seconds: float = Field(
        default=BUSY_TIMEOUT_MS / 1000, gt=0,
        description="How long a write waits for the ledger's lock before failing, naming the "
                    "process that holds it.")
    lock_report_seconds: float = Field(
        default=LOCK_REPORT_SECONDS, gt=0,
        description="While a write waits for the ledger's lock, a log line every this many s.")

    def ledger(self) -> PrivacyLedger:
        """The ledger at `path`; lock waits are logged to Dagster's logger (the step's log
        during a run)."""
        return PrivacyLedger(self.path, self.stale_after_seconds, units=self.units,
                             head_path=self.head_path, sources=self.sources,
                             lock_timeout_seconds=self.lock_timeout_seconds,
                             lock_report_seconds=self.lock_report_seconds,
                             log=dagster.get_dagster_logger().warning, entries=self.entries,
                             schema=self.schema_name)


def main(argv: list[str] | None = None) -> None:
    """`python -m dp_synth_assets.resources.ledger adopt LEDGER [--schema S]`: record the head of
    a ledger whose head (file, or rows of its head table) was lost, after checking its chain.
    `python -m dp_synth_assets.resources.ledger migrate OLD NEW [--schema S]`: with OLD a chained
    SQLite ledger and NEW a postgresql:// URL, copy it into that empty PostgreSQL ledger (schema
    S) with its chain intact (same ids, hashes and secret; verified after the copy); with OLD a
    ledger from before the hash chain, copy it into a new chained ledger (a file that does not
    exist, or an empty PostgreSQL ledger), with the privacy units of the registry that
    DP_SYNTH_DATASETS and DP_SYNTH_WAREHOUSE name (defaults as in definitions.py)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m dp_synth_assets.resources.ledger")
    commands = parser.add_subparsers(dest="command", required=True)
    adopt = commands.add_parser("adopt", help="record the head of a complete ledger")
    adopt.add_argument("ledger")
    adopt.add_argument("--schema", default=DEFAULT_SCHEMA,
                       help="the schema of a PostgreSQL ledger (default: %(default)s)")
    migrate = commands.add_parser(
        "migrate", help="copy a chained SQLite ledger into PostgreSQL, or a pre-chain ledger "
                        "into a new one")
    migrate.add_argument("old")
    migrate.add_argument("new")
    migrate.add_argument("--schema", default=DEFAULT_SCHEMA,
                         help="the schema of a PostgreSQL target (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.command == "adopt":
        ledger = PrivacyLedger(args.ledger, schema=args.schema)
        rows, head = ledger.adopt()
        print(f"{ledger.path}: {rows} rows, head {head}")
        return
    if chained(args.old):
        rows, head = migrate_chain(args.old, args.new, args.schema)
        print(f"{PrivacyLedger(args.new, schema=args.schema).path} (schema {args.schema}): "
              f"{rows} rows copied from {args.old} with their hash chain, head {head}")
        return
    from dp_synth_assets.core.config import load_registry
    from dp_synth_assets.core.units import privacy_units, source_identity

    datasets = Path(os.environ.get("DP_SYNTH_DATASETS", "datasets.yaml")).resolve()
    warehouse = os.environ.get("DP_SYNTH_WAREHOUSE", "data/warehouse.duckdb")
    registry = load_registry(datasets)
    units = privacy_units(registry, datasets.parent, warehouse)
    sources = {name: source_identity(spec, datasets.parent, warehouse)
               for name, spec in registry.items()}
    count = migrate_legacy(args.old, args.new, units, sources, schema=args.schema)
    print(f"{PrivacyLedger(args.new, schema=args.schema).path}: {count} rows migrated from "
          f"{args.old}")


if __name__ == "__main__":
    main()
