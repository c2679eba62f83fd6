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
- `RunStore(root, dataset, run_id)`: a `FolderStore` over one run's set under
  `<public_dir>/<dataset>/runs/<run_id>/` (the pipeline's): a run reads one whole set (its own,
  its parent run's, or the published one), writes only into its own folder, stamps each
  artifact with the hashes of its inputs and publishes its set by switching one pointer
  (`current`, a symlink replaced atomically); stable links `<root>/plan.json`, ... follow it.
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


# ------------------------------------------------------------------- the runs of one dataset
#
# <public_dir>/<dataset>/
#   runs/<run_id>/          one run's artifacts (plan.json ... synthetic.parquet, checks/, manifest)
#   current                 the pointer: a symlink to runs/<run_id>, the published set
#   plan.json, ..., checks  stable links through `current` (current/plan.json, ...)
#   run.lock                the run holding the dataset (core/runs.py)

RUNS = "runs"
POINTER = "current"
MANIFEST = "manifest.json"
PARQUET = "synthetic.parquet"
CHECKS = "checks"
KEEP_RUNS = 5  # run folders kept after a publish, the published one included
SET_FILES = tuple(a.file for a in ARTIFACTS.values()) + (PARQUET, MANIFEST)
LINKED = tuple(a.file for a in ARTIFACTS.values()) + (PARQUET, CHECKS)
# the stage whose re-materialization replaces an artifact made from other inputs than its own
REDO = {"selection": "marginals", "measurements": "marginals", "model": "model",
        "synthetic": "synthetic"}


class InconsistentArtifacts(ValueError):
    """Two artifacts of one set come from different runs (their stamps disagree); the message
    names the stage to re-materialize."""


def content_hash(data: bytes) -> str:
    """The stamp of an artifact's content: the first 16 hex digits of its SHA-256."""
    import hashlib

    return hashlib.sha256(data).hexdigest()[:16]


def published_run(root: str | os.PathLike) -> str | None:
    """The run whose set `<root>/current` names, or None before the first publish."""
    try:
        target = os.readlink(Path(root) / POINTER)
    except OSError:
        return None
    return Path(target).name


def published_folder(root: str | os.PathLike) -> Path:
    """The folder of the published set: `runs/<run_id>` of the pointer, else `root` itself (a
    dataset folder from before per-run artifacts, with its files at the top)."""
    run = published_run(root)
    return Path(root) / RUNS / run if run else Path(root)


def published_synthetic_run(root: str | os.PathLike) -> str | None:
    """The run whose synthetic table the published set's Parquet is (its manifest's stamp;
    a set that only re-published an older Parquet names that older run), or None."""
    try:
        manifest = json.loads((published_folder(root) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest.get("stamps", {}).get("synthetic", {}).get("run")


class RunStore(FolderStore):
    """A `FolderStore` over one run's set of `<root>` = `<public_dir>/<dataset>/`.

    Reads come from the run's own folder `runs/<run_id>` once it exists, else from its base set:
    the folder of a parent run (a Dagster re-execution continues its parent's set) or the
    published set (`current`). The first write of a run creates its folder seeded with the base
    set (hard links), so the run always reads one whole set and replaces artifacts in its own
    copy; nobody else sees them until `publish` switches the pointer. Without a `run_id` the store
    reads the published set and cannot write.

    Every write stamps the artifact in the folder's manifest with the content hashes of its
    inputs (selection and measurements: the plan; model: the plan and the measurements; the
    Parquet: the plan and the model), and `require_consistent` refuses a set whose stamps
    disagree with the artifacts beside them (`InconsistentArtifacts`, naming the stage to
    re-materialize)."""

    INPUTS = {"selection": ("plan",), "measurements": ("plan",), "model": ("plan", "measurements"),
              "synthetic": ("plan", "model")}

    def __init__(self, root: str | os.PathLike, dataset: str, run_id: str | None = None,
                 parents: tuple[str, ...] = ()):
        self.root, self.run_id = Path(root), run_id
        self.own = self.root / RUNS / run_id if run_id else None
        base = next((self.root / RUNS / p for p in parents
                     if p and p != run_id and (self.root / RUNS / p).is_dir()), None)
        self.base = base if base is not None else published_folder(self.root)
        super().__init__(self.own if self.own is not None and self.own.is_dir() else self.base,
                         dataset)

    @property
    def set_run(self) -> str | None:
        """The run whose set this store reads (None: a folder from before per-run artifacts)."""
        return self.folder.name if self.folder.parent.name == RUNS else None

    def manifest(self) -> dict:
        try:
            return json.loads((self.folder / MANIFEST).read_text())
        except (OSError, ValueError):
            return {}

    def _seed(self) -> None:
        """Create the run's own folder from its base set (once)."""
        if self.own is None:
            raise RuntimeError(f"dataset {self.dataset!r}: a store without a run cannot write")
        if self.folder == self.own:
            return
        tmp = self.own.with_name(f".{self.own.name}.{secrets.token_hex(4)}.tmp")
        tmp.mkdir(parents=True, mode=0o755)
        for name in SET_FILES:
            source = self.base / name
            if source.is_file():
                try:
                    os.link(source, tmp / name)
                except OSError:
                    import shutil

                    shutil.copy2(source, tmp / name)
        manifest = self.manifest()
        manifest.update(run_id=self.own.name, seeded_from=self.set_run)
        atomic_write(tmp / MANIFEST, json.dumps(manifest).encode())
        try:
            os.rename(tmp, self.own)
        except OSError:  # another step of this run seeded it first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        self.folder = self.own
        self._parsed.clear()

    def _hash(self, name: str) -> str | None:
        file = ARTIFACTS[name].file if name in ARTIFACTS else name
        try:
            return content_hash((self.folder / file).read_bytes())
        except FileNotFoundError:
            return None

    def stamp(self, name: str) -> None:
        """Record in the manifest what `name` (an artifact, or `synthetic`) was made from."""
        inputs = {i: self._hash(i) for i in self.INPUTS.get(name, ())}
        manifest = self.manifest()
        manifest.setdefault("stamps", {})[name] = {"run": self.folder.name, **inputs}
        manifest["run_id"] = self.folder.name
        atomic_write(self.folder / MANIFEST, json.dumps(manifest).encode())

    def require_consistent(self, *names: str) -> None:
        """Raise `InconsistentArtifacts` when an artifact of `names` was made from other inputs
        than those of this set (a set from before stamps passes)."""
        stamps = self.manifest().get("stamps", {})
        for name in names:
            for source, expected in stamps.get(name, {}).items():
                if source == "run" or expected is None:
                    continue
                if self._hash(source) != expected:
                    made_in = stamps[name].get("run", "?")
                    source_run = stamps.get(source, {}).get("run", "?")
                    file, other = (ARTIFACTS[n].file if n in ARTIFACTS else PARQUET
                                   for n in (name, source))
                    raise InconsistentArtifacts(
                        f"dataset {self.dataset!r}: {file} (written by run {made_in}) was made "
                        f"from another {other} than the {other} beside it (written by run "
                        f"{source_run}) in {self.folder}; re-materialize the {REDO[name]!r} "
                        f"stage of this dataset and the stages downstream of it")

    def _write(self, name: str, record) -> str:
        self._seed()
        path = super()._write(name, record)
        self.stamp(name)
        return path

    @contextmanager
    def writing(self, name: str) -> Iterator[Path]:
        """As `FolderStore.writing`, in the run's own folder; the Parquet copy is stamped."""
        self._seed()
        with super().writing(name) as tmp:
            yield tmp
        if name == PARQUET:
            self.stamp("synthetic")

    def publish(self, keep: int = KEEP_RUNS) -> str:
        """Make this run's set the published one: switch the pointer `current` to it (one atomic
        rename), keep the stable links `<root>/plan.json` ... through it, and prune old run
        folders (the `keep` most recent kept, the published one always). Returns its folder."""
        if self.own is None or not self.own.is_dir():
            raise RuntimeError(f"dataset {self.dataset!r}: run {self.run_id} wrote nothing")
        publish_run(self.root, self.own.name, keep)
        return str(self.own)


def _replace_link(link: Path, target: str) -> None:
    tmp = _temporary(link)
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    finally:
        if tmp.is_symlink():
            tmp.unlink()


def publish_run(root: str | os.PathLike, run_id: str, keep: int = KEEP_RUNS) -> None:
    """Switch `<root>/current` to `runs/<run_id>` (see `RunStore.publish`)."""
    import shutil

    root = Path(root)
    (root / RUNS / run_id / CHECKS).mkdir(exist_ok=True)
    _replace_link(root / POINTER, f"{RUNS}/{run_id}")
    for name in LINKED:
        link, target = root / name, f"{POINTER}/{name}"
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.is_dir() and not link.is_symlink():  # a folder from before per-run artifacts
            shutil.rmtree(link)
        _replace_link(link, target)
    runs = sorted((p for p in (root / RUNS).iterdir() if p.is_dir() and not p.name.startswith(".")),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    kept = [p for p in runs if p.name == run_id] + [p for p in runs if p.name != run_id]
    for old in kept[max(keep, 1):]:
        shutil.rmtree(old, ignore_errors=True)


def remove_temporaries(root: str | os.PathLike) -> list[Path]:
    """Remove what a killed writer left in the dataset folder: temporary files and links
    (`.<name>.<hex>.tmp`) and half-seeded run folders; call it holding the dataset
    (`runs.DatasetLock`). Returns what was removed."""
    import shutil

    root = Path(root)
    removed = []
    for folder in [root, root / RUNS, root / CHECKS,
                   *((root / RUNS).iterdir() if (root / RUNS).is_dir() else [])]:
        if not folder.is_dir() or folder.is_symlink():
            continue
        for path in folder.glob(".*.tmp"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed
