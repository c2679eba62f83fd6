"""The current privacy budget of each dataset in the Dagster UI, without a synthesis.

Each dataset has an external asset `[*key_prefix, <dataset>, budget]` (`budget_asset`: never
materialized) and the factory one sensor, `<label>_budget` (`build_budget_sensor`), that reads
the ledger on each tick and records an `AssetObservation` of each dataset whose figures changed:
`budget.budget_metadata`'s figures (spent, limit, runs left, ...), public by design. The sensor
reads and never charges; a ledger that fails its tamper checks fails the tick with the ledger's
message (paths, row counts and hashes, no private value)."""

import hashlib
import json
from collections.abc import Sequence

import dagster as dg

from dp_synth_assets.resources.ledger import LedgerResource

from .budget import budget_metadata
from .dataset_context import PUBLIC, DatasetContext
from .naming import Names

STAGE = "budget"
# A budget changes only when a run spends or the location reloads with another limit: a read a
# minute is enough (one read of the ledger per tick, `PrivacyLedger.summaries`).
MINIMUM_INTERVAL_SECONDS = 60


def budget_asset(dataset: str, names: Names) -> dg.AssetSpec:
    """The external asset whose observations carry the current budget of `dataset`."""
    return dg.AssetSpec(
        key=names.key(dataset, STAGE), group_name=names.group, tags={**names.tags, **PUBLIC},
        owners=list(names.owners), kinds={"sqlite"},
        description=f"The privacy budget of {dataset!r} as the ledger holds it now (spent, "
                    f"limit, runs left), observed by the sensor {names.sensor_name(STAGE)} "
                    f"when it changes, without a run: its metadata charts the budget over time.")


def fingerprint(figures: dict) -> str:
    """A short digest of the figures' values (public), so the cursor stays small."""
    values = json.dumps({k: v.value for k, v in figures.items()}, sort_keys=True)
    return hashlib.sha256(values.encode()).hexdigest()[:16]


def build_budget_sensor(contexts: Sequence[DatasetContext],
                        names: Names) -> dg.SensorDefinition:
    """The sensor that observes the budget asset of every dataset of `contexts` (module
    docstring). On by default: a tick only reads the ledger. Cursor: {dataset: `fingerprint`
    of its last observed figures}; a tick observes the datasets whose fingerprint differs."""

    @dg.sensor(name=names.sensor_name(STAGE), minimum_interval_seconds=MINIMUM_INTERVAL_SECONDS,
               default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys=names.resource_keys("ledger"),
               description="Observe the current privacy budget of dp-synth's datasets (spent, "
                           "limit, runs left) when it changes, with no run.")
    @names.bind("ledger")
    def _sensor(context: dg.SensorEvaluationContext, ledger: LedgerResource):
        last = json.loads(context.cursor) if context.cursor else {}
        # raises LedgerError: the tick fails
        summaries = ledger.ledger().summaries([ctx.dataset for ctx in contexts])
        observed, events = {}, []
        for ctx in contexts:
            dataset, privacy = ctx.dataset, ctx.spec.privacy
            figures = budget_metadata(summaries[dataset], ctx.unit_budget, privacy.epsilon,
                                      privacy.delta)
            observed[dataset] = fingerprint(figures)
            if observed[dataset] != last.get(dataset):
                events.append(dg.AssetObservation(names.key(dataset, STAGE), metadata=figures))
        if not events:
            return dg.SensorResult(skip_reason="no budget changed since its last observation")
        changed = ", ".join(e.asset_key.to_user_string() for e in events)
        return dg.SensorResult(asset_events=events, cursor=json.dumps(observed, sort_keys=True),
                               skip_reason=f"observed {changed}")

    return _sensor
