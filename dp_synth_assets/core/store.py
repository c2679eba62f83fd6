"""The artifact store: the one place the core reads and writes files.

The public artifacts of a dataset, typed, each written by one stage:

| artifact       | record                   | file            | written by stage |
|----------------|--------------------------|-----------------|------------------|
| `plan`         | `domain.EncodingPlan`    | plan.json       | preprocessed     |
| `selection`    | `select.Selection`       | selection.json  | selection        |
| `measurements` | `measure.Measurements`   | measurements.json | measurements   |
| `model`        | a fitted generator       | model.npz       | model            |

Two stores implement `ArtifactStore`:
- `FolderStore(folder, dataset)`: the pipeline's `<public_dir>/<dataset>/`, one file per
  artifact (JSON as `json.dumps(record.to_dict())`; the model as `generate.dumps` bytes). Every
  write is atomic (`atomic_write`: a temporary file beside the target, then `os.replace`), so a
  reader sees the previous artifact or the new one, never part of one. A parsed artifact is kept
  per store instance until that instance writes it again, so a step that builds one store parses
  each file at most once. A missing artifact raises `MissingArtifact`, naming the stage to
  materialize.
- `MemoryStore(dataset)`: the records themselves, no serialization (the notebook API).

Every other file the core writes goes through `atomic_write` (owner-only files with
`mode=0o600`), `atomic_target` (a file a library writes, such as DuckDB's Parquet export) or
`exclusive_lock`; tests/test_architecture.py holds the core to that.
"""

import json
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import generate
from .domain import EncodingPlan
from .measure import Measurements
from .select import Selection


class MissingArtifact(LookupError):
    """An artifact was read before the stage that writes it ran (the message names the stage)."""


@dataclass(frozen=True)
class Artifact:
    """One kind of public artifact: its file name, the stage that writes it, and its codec."""

    name: str
    file: str
    stage: str
    encode: Callable[[object], bytes]
    decode: Callable[[bytes], object]


def _json(to_dict: Callable[[object], object]) -> Callable[[object], bytes]:
    return lambda record: json.dumps(to_dict(record), default=str).encode()


ARTIFACTS = {a.name: a for a in (
    Artifact("plan", "plan.json", "preprocessed", _json(lambda p: json.loads(p.to_json())),
             lambda data: EncodingPlan.from_json(data.decode())),
    Artifact("selection", "selection.json", "selection", _json(Selection.to_dict),
             lambda data: Selection.from_dict(json.loads(data))),
    Artifact("measurements", "measurements.json", "measurements", _json(Measurements.to_dict),
             lambda data: Measurements.from_dict(json.loads(data))),
    Artifact("model", "model.npz", "model", generate.dumps, generate.loads),
)}


class ArtifactStore:
    """Typed reads and writes of one dataset's public artifacts (module docstring). A write
    returns where the artifact went (a path, or `memory:<name>`), for the stage's metadata."""

    dataset: str

    def plan(self) -> EncodingPlan:
        return self._read("plan")

    def write_plan(self, plan: EncodingPlan) -> str:
        return self._write("plan", plan)

    def selection(self) -> Selection:
        return self._read("selection")

    def write_selection(self, selection: Selection) -> str:
        return self._write("selection", selection)

    def measurements(self) -> Measurements:
        return self._read("measurements")

    def write_measurements(self, measurements: Measurements) -> str:
        return self._write("measurements", measurements)

    def model(self):
        """The fitted generator (`generate.CliqueTree` or `generate.GumModel`)."""
        return self._read("model")

    def write_model(self, model) -> str:
        return self._write("model", model)

    def has(self, name: str) -> bool:
        raise NotImplementedError

    def _read(self, name: str):
        raise NotImplementedError

    def _write(self, name: str, record) -> str:
        raise NotImplementedError

    def _missing(self, name: str, where: str) -> MissingArtifact:
        artifact = ARTIFACTS[name]
        return MissingArtifact(
            f"dataset {self.dataset!r}: the {name} ({where}) is missing; materialize the "
            f"{artifact.stage!r} stage of this dataset (and the stages upstream of it) first")


class FolderStore(ArtifactStore):
    """The artifacts as files in `folder` (the pipeline's `<public_dir>/<dataset>/`)."""

    def __init__(self, folder: str | os.PathLike, dataset: str):
        self.folder, self.dataset = Path(folder), dataset
        self._parsed: dict[str, object] = {}

    def path(self, name: str) -> Path:
        """Where the artifact `name` (or another file of the folder, e.g. synthetic.parquet) is."""
        return self.folder / (ARTIFACTS[name].file if name in ARTIFACTS else name)

    def has(self, name: str) -> bool:
        return self.path(name).exists()

    def _read(self, name: str):
        if name not in self._parsed:
            path = self.path(name)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise self._missing(name, str(path)) from None
            self._parsed[name] = ARTIFACTS[name].decode(data)
        return self._parsed[name]

    def _write(self, name: str, record) -> str:
        path = self.path(name)
        self._parsed.pop(name, None)  # the next read parses what was written
        atomic_write(path, ARTIFACTS[name].encode(record))
        return str(path)

    @contextmanager
    def writing(self, name: str) -> Iterator[Path]:
        """A temporary path for a file of the folder that a library writes itself (DuckDB's
        Parquet export of the synthetic table): renamed to `name` when the block ends normally,
        removed when it raises (`atomic_target`)."""
        with atomic_target(self.path(name)) as tmp:
            yield tmp


class MemoryStore(ArtifactStore):
    """The artifacts as records in memory (the notebook API): nothing is serialized."""

    def __init__(self, dataset: str = "notebook"):
        self.dataset = dataset
        self._records: dict[str, object] = {}

    def has(self, name: str) -> bool:
        return name in self._records

    def _read(self, name: str):
        try:
            return self._records[name]
        except KeyError:
            raise self._missing(name, "in memory") from None

    def _write(self, name: str, record) -> str:
        ARTIFACTS[name]  # an unknown artifact is a KeyError, as in a folder store
        self._records[name] = record
        return f"memory:{name}"


# ---------------------------------------------------------------------------- writing one file


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")


def atomic_write(path: str | os.PathLike, data: bytes, mode: int | None = None, *,
                 keep_existing: bool = False) -> bool:
    """Write `data` to `path` atomically: a fresh temporary file beside it (created with `mode`,
    e.g. 0o600 for owner-only files; default 0o666 less the umask), flushed to disk, then
    renamed over `path`. A reader sees the old content or the new one, never a partial file or
    a wider mode; a failure removes the temporary file and leaves `path` as it was. With
    `keep_existing`, the file is linked into place only if `path` does not exist yet (two
    writers racing end up with one content); returns whether this call wrote `path`. Parent
    folders are created (with `mode`'s owner bits as 0o700 when `mode` is given)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, **({"mode": 0o700} if mode is not None else {}))
    tmp = _temporary(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if not keep_existing:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # atomic, and fails if another writer got there first
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)  # gone after os.replace; the spare link otherwise


@contextmanager
def atomic_target(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` for a writer outside Python's file calls (DuckDB's COPY):
    renamed to `path` when the block ends normally, removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def exclusive_lock(path: str | os.PathLike, mode: int = 0o600) -> Iterator[None]:
    """An exclusive advisory lock (flock) on the lock file `path` (created empty with `mode`),
    held for the block; without fcntl (not POSIX), none."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: a lone writer is assumed
        yield
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
