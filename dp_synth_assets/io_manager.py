"""dp-synth's IO manager for the model's units when the public zone is on an object store.

The model graph's units (model.py) pass between its ops through dp-synth's own IO manager
(`Names.io_manager`). With a local public zone that is Dagster's `FilesystemIOManager` under
`<public_dir>/.dp_synth_io`; with the public zone at a URL (`s3://...`), a run's steps may run in
separate containers that share no disk, so the pickles go to `<public_dir>/.dp_synth_io` on the
object store: `PickleIOManager`, a `dagster.UPathIOManager` (one object per output, written
whole). The units are public (post-processing of the noisy measurements), as the zone is. A host
can pass its own `io_manager` to the factory instead.
"""

import pickle

import dagster as dg


class PickleIOManager(dg.UPathIOManager):
    """Each output pickled into one object under `base_path` (a `upath.UPath`)."""

    extension = ".pickle"

    def dump_to_path(self, context: dg.OutputContext, obj, path) -> None:
        path.write_bytes(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))

    def load_from_path(self, context: dg.InputContext, path):
        return pickle.loads(path.read_bytes())

    def make_directory(self, path) -> None:
        """An object store has no folders: nothing to make."""


class ObjectStoreIOManager(dg.ConfigurableIOManagerFactory):
    """`PickleIOManager` under `base_dir`, an object-store URL (credentials: fsspec's own,
    from the environment or the store's config files)."""

    base_dir: str

    def create_io_manager(self, context) -> PickleIOManager:
        from .infra.store import location

        return PickleIOManager(base_path=location(self.base_dir))
