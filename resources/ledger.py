"""The privacy ledger as a Dagster resource (docs/decisions/0004-privacy-ledger.md).

The ledger itself, an append-only, hash-chained table of budget events in a SQLite file or in a
schema of a PostgreSQL database, is `dp_synth_assets.infra.ledger` (no Dagster: the notebook API
uses it too); this module wraps it as `LedgerResource` and is its command line (`python -m
dp_synth_assets.resources.ledger adopt|migrate|raise-limit`). The ledger's names are re-exported
here for the code that imports them from this module. (This file must not postpone annotations with
a __future__ import: Dagster inspects them.)
"""

import os
from pathlib import Path

import dagster
from pydantic import Field

from dp_synth_assets.core.budget import REL_TOL  # noqa: F401 - re-exported
from dp_synth_assets.core.ledger import (  # noqa: F401 - re-exported
    KINDS,
    LedgerError,
    budget_message,
    BudgetExceeded,
    ChargeExceedsReservation,
    LimitNotGranted,
    Reservation,
    LedgerSummary,
)
from dp_synth_assets.infra.ledger import (  # noqa: F401 - re-exported
    BUSY_TIMEOUT_MS,
    LOCK_REPORT_SECONDS,
    DEFAULT_STALE_AFTER_SECONDS,
    PrivacyLedger,
)
from dp_synth_assets.infra.ledger_migrate import chained, migrate_chain, migrate_legacy  # noqa: F401
from dp_synth_assets.infra.ledger_store import (  # noqa: F401 - re-exported
    DEFAULT_SCHEMA,
    LEDGER_HEAD_SUFFIX,
    LEDGER_LOCK_SUFFIX,
    is_postgres,
)
from dp_synth_assets.infra.locks import owner_alive, owner_id  # noqa: F401 - re-exported


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
    aliases: dict[str, list[str]] = Field(
        default_factory=dict, description="Dataset name -> earlier names of its source (digests "
                                          "of its path-keyed names), whose rows count for its "
                                          "unit.")
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
                             schema=self.schema_name,
                             aliases={k: tuple(v) for k, v in self.aliases.items()})


def registry_ledger(path: str | None = None) -> tuple[PrivacyLedger, dict]:
    """The ledger and the registry as the project's definitions see them, from the variables
    and defaults of `definitions.environment_paths` in the working directory (DP_SYNTH_DATASETS,
    DP_SYNTH_WAREHOUSE, DP_SYNTH_WAREHOUSE_NAME, DP_SYNTH_LEDGER, DP_SYNTH_LEDGER_SCHEMA,
    DP_SYNTH_LEDGER_HEAD; `path` overrides the ledger), with each dataset's unit, source
    identity and aliases."""
    from dp_synth_assets.core.config import load_registry
    from dp_synth_assets.core.units import (DEFAULT_WAREHOUSE_NAME, aliases, privacy_units,
                                            source_identity)

    env = os.environ
    datasets = Path(env.get("DP_SYNTH_DATASETS", "datasets.yaml")).resolve()
    warehouse = env.get("DP_SYNTH_WAREHOUSE", "data/warehouse.duckdb")
    name = env.get("DP_SYNTH_WAREHOUSE_NAME") or DEFAULT_WAREHOUSE_NAME
    registry = load_registry(datasets)
    ledger = PrivacyLedger(
        path or env.get("DP_SYNTH_LEDGER", ".dp_synth/ledger.sqlite"),
        units=privacy_units(registry, datasets.parent, warehouse, name),
        sources={dataset: source_identity(spec, datasets.parent, warehouse, name)
                 for dataset, spec in registry.items()},
        aliases=aliases(registry, datasets.parent, warehouse, name),
        head_path=env.get("DP_SYNTH_LEDGER_HEAD") or None,
        entries={d: s.entry for d, s in registry.items()},
        schema=env.get("DP_SYNTH_LEDGER_SCHEMA") or DEFAULT_SCHEMA)
    return ledger, registry


def main(argv: list[str] | None = None) -> None:
    """`python -m dp_synth_assets.resources.ledger adopt LEDGER [--schema S]`: record the head of
    a ledger whose head (file, or rows of its head table) was lost, after checking its chain.
    `python -m dp_synth_assets.resources.ledger migrate OLD NEW [--schema S]`: with OLD a chained
    SQLite ledger and NEW a postgresql:// URL, copy it into that empty PostgreSQL ledger (schema
    S) with its chain intact (same ids, hashes and secret; verified after the copy); with OLD a
    ledger from before the hash chain, copy it into a new chained ledger (a file that does not
    exist, or an empty PostgreSQL ledger), with the privacy units of the registry that
    DP_SYNTH_DATASETS and DP_SYNTH_WAREHOUSE name (defaults as in definitions.py).
    `python -m dp_synth_assets.resources.ledger raise-limit DATASET --reason WHY`: record the
    limit the dataset's entry now declares as its privacy unit's limit (the ledger keeps the
    limit a unit was first given; only this raises it), with the reason, the user and the
    time; run from the project folder, with the DP_SYNTH_* variables set as for Dagster."""
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
    raise_limit = commands.add_parser(
        "raise-limit", help="record the limit a dataset's entry declares as its unit's limit")
    raise_limit.add_argument("dataset")
    raise_limit.add_argument("--reason", required=True, help="why (kept in the ledger)")
    raise_limit.add_argument("--ledger", help="the ledger (default: as the definitions use it)")
    args = parser.parse_args(argv)
    if args.command == "adopt":
        ledger = PrivacyLedger(args.ledger, schema=args.schema)
        rows, head = ledger.adopt()
        print(f"{ledger.path}: {rows} rows, head {head}")
        return
    if args.command == "raise-limit":
        from dp_synth_assets.core.budget import DatasetBudget

        ledger, registry = registry_ledger(args.ledger)
        if args.dataset not in registry:
            parser.error(f"no dataset {args.dataset!r} in the registry "
                         f"({', '.join(sorted(registry)) or 'none'})")
        spec = registry[args.dataset]
        budget = DatasetBudget.of(spec)
        before = ledger.limit(args.dataset)
        ledger.set_limit(args.dataset, budget.limit_rho, budget.limit_delta_extra,
                         reason=args.reason, delta=budget.delta)
        was = "none" if before is None else f"rho {before[0]:.6g}"
        print(f"{ledger.path}: the limit of dataset {args.dataset!r} (privacy unit "
              f"{ledger.units[args.dataset]}) is now epsilon {spec.privacy.limit.epsilon:g} at "
              f"delta {spec.privacy.limit.delta:g} (rho {budget.limit_rho:.6g}; was {was})")
        return
    if chained(args.old):
        rows, head = migrate_chain(args.old, args.new, args.schema)
        print(f"{PrivacyLedger(args.new, schema=args.schema).path} (schema {args.schema}): "
              f"{rows} rows copied from {args.old} with their hash chain, head {head}")
        return
    from dp_synth_assets.core.config import load_registry
    from dp_synth_assets.core.units import DEFAULT_WAREHOUSE_NAME, privacy_units, source_identity

    datasets = Path(os.environ.get("DP_SYNTH_DATASETS", "datasets.yaml")).resolve()
    warehouse = os.environ.get("DP_SYNTH_WAREHOUSE", "data/warehouse.duckdb")
    name = os.environ.get("DP_SYNTH_WAREHOUSE_NAME") or DEFAULT_WAREHOUSE_NAME
    registry = load_registry(datasets)
    units = privacy_units(registry, datasets.parent, warehouse, name)
    sources = {dataset: source_identity(spec, datasets.parent, warehouse, name)
               for dataset, spec in registry.items()}
    count = migrate_legacy(args.old, args.new, units, sources, schema=args.schema)
    print(f"{PrivacyLedger(args.new, schema=args.schema).path}: {count} rows migrated from "
          f"{args.old}")


if __name__ == "__main__":
    main()
