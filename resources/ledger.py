"""The privacy ledger as a Dagster resource (DESIGN.md section 5).

The ledger itself, an append-only, hash-chained SQLite table of budget events, is
`dp_synth_assets.core.ledger` (no Dagster: the notebook API uses it too); this module wraps it as
`LedgerResource` and is its command line
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
)


# ---- Dagster ----------------------------------------------------------------------------------------


class LedgerResource(dagster.ConfigurableResource):
    """The privacy ledger as a Dagster resource: where its SQLite file and its mirrored head live,
    which privacy unit each dataset spends, when runs go stale."""

    path: str = Field(description="Path of the ledger's SQLite database file.")
    head_path: str | None = Field(
        default=None, description="The mirrored head file (default: the ledger's path + '.head').")
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
                             log=dagster.get_dagster_logger().warning, entries=self.entries)


def main(argv: list[str] | None = None) -> None:
    """`python -m dp_synth_assets.resources.ledger adopt LEDGER`: record the head of a ledger whose
    head file was lost, after checking its chain.
    `python -m dp_synth_assets.resources.ledger migrate OLD NEW`: copy a ledger from before the
    hash chain into a new one, with the privacy units of the registry that DP_SYNTH_DATASETS and
    DP_SYNTH_WAREHOUSE name (defaults as in definitions.py)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m dp_synth_assets.resources.ledger")
    commands = parser.add_subparsers(dest="command", required=True)
    adopt = commands.add_parser("adopt", help="record the head of a complete ledger")
    adopt.add_argument("ledger")
    migrate = commands.add_parser("migrate", help="copy a pre-chain ledger into a new one")
    migrate.add_argument("old")
    migrate.add_argument("new")
    args = parser.parse_args(argv)
    if args.command == "adopt":
        rows, head = PrivacyLedger(args.ledger).adopt()
        print(f"{args.ledger}: {rows} rows, head {head}")
        return
    from dp_synth_assets.core.config import load_registry
    from dp_synth_assets.core.units import privacy_units, source_identity

    datasets = Path(os.environ.get("DP_SYNTH_DATASETS", "datasets.yaml")).resolve()
    warehouse = os.environ.get("DP_SYNTH_WAREHOUSE", "data/warehouse.duckdb")
    registry = load_registry(datasets)
    units = privacy_units(registry, datasets.parent, warehouse)
    sources = {name: source_identity(spec, datasets.parent, warehouse)
               for name, spec in registry.items()}
    count = migrate_legacy(args.old, args.new, units, sources)
    print(f"{args.new}: {count} rows migrated from {args.old}")


if __name__ == "__main__":
    main()
