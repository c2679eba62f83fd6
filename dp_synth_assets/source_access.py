"""How the Dagster layer reaches a dataset's private source and tells when it changed: the
source connection every private stage reads through, and the change detection behind the
`source` asset's data version and the source sensor (docs/decisions/0003-privacy-perimeter.md).

- `source_connection`: a warehouse connection that reads the source (attached first for an
  `attach:` source), or the dataset's scan engine over it.
- `fingerprint`: the source's private change MAC; `source_version`: the public, content-free
  version id made from it (kept in `change_state_path`, keyed by `change_secret`).
"""

import json
import os
from contextlib import contextmanager
from pathlib import Path

from dp_synth_assets.resources.warehouse import WarehouseResource

from .core import change
from .core import scans
from .core.config import AttachSource, DatasetSpec, TableSource
from .core.source import attach_source, describe_source, source_path, source_relation
from .infra import private_files
from .infra.engines import open_engine
from .private_log import private_dir


@contextmanager
def source_connection(warehouse: WarehouseResource, spec: DatasetSpec, dataset: str,
                      read_only: bool = False, lock_timeout_seconds: float | None = None):
    """A warehouse connection that can read the dataset's source and its encoded view: with an
    `attach:` source, the source database is attached to it first (`source.attach_source`,
    whose `SourceError` the stage's `private_errors` turns into a public failure). With an
    `engine:` other than duckdb, the dataset's scan engine over it (core/scans.py)."""
    # a table source lives in the warehouse: a missing warehouse is an error, never created;
    # another engine's store only receives counts: writable, created on first use
    elsewhere = spec.engine.type != "duckdb"
    with warehouse.connect(read_only=read_only and not elsewhere,
                           lock_timeout_seconds=lock_timeout_seconds,
                           create=not isinstance(spec.source, TableSource) or elsewhere) as con:
        attach_source(con, spec, Path(warehouse.base_dir), dataset)
        if spec.engine.type == "duckdb":
            yield con
            return
        with open_engine(spec.engine, con) as engine:
            yield engine


def secret_path(warehouse: WarehouseResource) -> Path:
    """The installation's change-detection secret:
    `<folder of database>/private/change_detection.key`."""
    return private_dir(warehouse) / "change_detection.key"


def change_secret(warehouse: WarehouseResource) -> bytes:
    """The installation's change-detection secret: the environment variable the warehouse
    resource's `change_secret_env` names (DP_SYNTH_CHANGE_SECRET by default), when set, else
    the file `secret_path`, created on first use."""
    text = os.environ.get(warehouse.change_secret_env) if warehouse.change_secret_env else None
    if text:
        return change.secret_from_hex(text, f"the environment variable {warehouse.change_secret_env}")
    return private_files.load_or_create_secret(secret_path(warehouse))


def change_state_path(warehouse: WarehouseResource, dataset: str) -> Path:
    """The private file that keeps the dataset's last change MAC and its version id."""
    return private_dir(warehouse, dataset) / "change_state.json"


def fingerprint(warehouse: WarehouseResource, spec: DatasetSpec,
                lock_timeout_seconds: float | None = None, dataset: str = "") -> str:
    """The private MAC of the source's change signal, HMAC-SHA256 under the installation's
    secret (`core/change.py`). The signal: for a table (local, in an attached database or in
    the dataset's scan engine) or Parquet at a URI (object storage), its schema and the
    engine's content summary, an order-independent aggregate of per-row digests computed where
    the rows are (`ScanEngine.content_summary`, one scan); for local Parquet/CSV files, their
    names, sizes and modification times (no scan). Private: it is kept in the private zone and
    never published; `source_version` turns it into the public, content-free version id."""
    if isinstance(spec.source, (TableSource, AttachSource)) or source_path(
            spec, Path(warehouse.base_dir)) is None:  # a table, or Parquet at a URI
        with source_connection(warehouse, spec, dataset, read_only=True,
                               lock_timeout_seconds=lock_timeout_seconds) as con:
            engine = scans.as_engine(con)
            relation = source_relation(spec, Path(warehouse.base_dir))
            schema = describe_source(engine, relation, dataset, spec.entry)
            summary = engine.content_summary(relation)
        signal = json.dumps({"schema": schema, "content": summary})
    else:
        path = source_path(spec, Path(warehouse.base_dir))
        files = sorted(path.parent.glob(path.name))
        signal = json.dumps([[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files])
    return change.change_mac(change_secret(warehouse), signal)


def source_version(warehouse: WarehouseResource, spec: DatasetSpec, dataset: str,
                   lock_timeout_seconds: float | None = None) -> str:
    """The source's public version: an opaque random id, the same while the source's private
    MAC (`fingerprint`) is unchanged and a new one whenever it changes (`private_files.observe`,
    shared by the sensor and the `source` observation). It is the `source` asset's data version
    and the sensor's cursor; it says only "changed since last time"."""
    mac = fingerprint(warehouse, spec, lock_timeout_seconds, dataset)
    return private_files.observe(change_state_path(warehouse, dataset), mac)
