"""The pipeline's artifact store: `artifacts(warehouse, dataset)` is the dataset's
`core.store.FolderStore` over `<public_dir>/<dataset>/` (plan.json, selection.json,
measurements.json, model.npz, and the Parquet copy of the synthetic table).

Every asset, op and check reads and writes the public artifacts through it: typed records, atomic
writes, each file parsed once per store (build one store per step). A missing artifact fails the
step with a `dagster.Failure` naming the stage to materialize; the message holds a path and a
stage name only, so it is public as it is.
"""

from pathlib import Path

import dagster as dg

from dp_synth_assets.resources.warehouse import WarehouseResource

from .core.store import FolderStore, MissingArtifact


class PublicArtifacts(FolderStore):
    """A `FolderStore` whose missing artifact is a `dagster.Failure` (public, passed unchanged by
    `private_log.private_step`)."""

    def _read(self, name: str):
        try:
            return super()._read(name)
        except MissingArtifact as e:
            raise dg.Failure(description=str(e)) from None


def artifacts(warehouse: WarehouseResource, dataset: str) -> PublicArtifacts:
    """The artifact store of `dataset` in the warehouse's public folder."""
    return PublicArtifacts(Path(warehouse.public_dir) / dataset, dataset)
