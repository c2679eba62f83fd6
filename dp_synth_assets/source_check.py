"""The load-time check that every `source.asset` is an asset of the definitions dp-synth joins.

dp-synth's definitions are built before the host merges them with its own, so the check runs
when Dagster builds the merged code location: dp-synth's automation sensor targets
`CheckedSources`, a selection that first compares the sources with the location's whole asset
graph (a key nothing defines appears there as a placeholder asset marked
`dagster/auto_created_stub_asset`) and then selects the sensor's assets. A failed check raises
`SourceAssetError` with `core.config.unknown_source_assets`'s message: the load fails (`dg check
defs`, `dagster definitions validate`, the webserver's code location) before anything runs. A
source marked `asset_elsewhere: true` is not checked."""

from collections.abc import Iterable

import dagster as dg

from .core.config import DatasetSpec, RegistryError, unknown_source_assets

# the metadata key of the placeholder asset Dagster creates for a dependency nothing defines
STUB_MARK = "dagster/auto_created_stub_asset"


class SourceAssetError(RegistryError):
    """A `source.asset` names no asset of the merged definitions (the message says which)."""


def checked_sources(registry: dict[str, DatasetSpec]) -> dict[str, tuple[str, ...]]:
    """Dataset -> the asset key its source names, for every source to check."""
    return {name: spec.source.asset for name, spec in registry.items()
            if spec.source.asset is not None and not spec.source.asset_elsewhere}


def defined_keys(asset_graph) -> set[tuple[str, ...]]:
    """The asset keys something defines in `asset_graph` (Dagster's placeholders left out)."""
    return {tuple(key.path) for key in asset_graph.get_all_asset_keys()
            if not asset_graph.get(key).metadata.get(STUB_MARK)}


class CheckedSources(dg.AssetSelection):
    """`keys`, once `sources` (dataset -> asset key) are all defined in the graph it is resolved
    against; else `SourceAssetError` (module docstring). `origin`: the registry's, to name the
    entries (`core.config.entry_location`)."""

    def __init__(self, keys: Iterable[dg.AssetKey], sources: dict[str, tuple[str, ...]],
                 origin: str):
        self.keys, self.sources, self.origin = tuple(keys), dict(sources), origin

    def resolve_inner(self, asset_graph, allow_missing: bool):
        problem = unknown_source_assets(self.sources, defined_keys(asset_graph), self.origin)
        if problem is not None:
            raise SourceAssetError(problem)
        return dg.AssetSelection.assets(*self.keys).resolve_inner(asset_graph, allow_missing)
