"""The artifact store: the one place the core reads and writes files.

The public artifacts of a dataset (`plan`, `selection`, `measurements`, `model`), typed, each
written by one stage, behind `ArtifactStore`: `FolderStore` (one file per artifact, atomic
writes), `RunStore` (one run's set, published by switching one pointer) and `MemoryStore` (the
notebook API's records). Every other file the core writes goes through `atomic_write`,
`atomic_target` or `exclusive_lock` (tests/test_architecture.py holds the core to that). A
folder is a local path or an object-store URL (fsspec). The table of artifacts and the rules on
object storage: docs/where-data-lives.md, "The artifact store"."""

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core import extras, generate
from ..core.config import DatasetSpec, plan_digest
from ..core.domain import EncodingPlan
from ..core.measure import Measurements
from ..core.select import Selection


# ------------------------------------------------------------ locations: folders or object stores


class ZoneError(ValueError):
    """A zone's location cannot be used: its extra is not installed, or the store refuses what
    the zone needs (the message names the location, the problem and the fix)."""


def is_url(where) -> bool:
    """Whether `where` is an object-store URL (`<scheme>://...`, any scheme but `file`)."""
    text = str(where)
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.isidentifier() and scheme.lower() != "file"


def location(where):
    """The folder or file `where` names: a `pathlib.Path` for a plain path or a `file://` URL,
    a `upath.UPath` for an object-store URL (refused with the pip command when the
    `objectstore` extra is missing). A `Path` or a `UPath` is returned as it is."""
    if is_remote(where) or isinstance(where, Path):
        return where
    text = os.fspath(where) if isinstance(where, os.PathLike) else str(where)
    if text.startswith("file://"):
        return Path(text[len("file://"):])
    if not is_url(text):
        return Path(text)
    scheme = text.partition("://")[0].lower()
    refused = extras.refusal("objectstore") if scheme in ("s3", "s3a") else None
    if refused:
        raise ZoneError(f"the location {text}: {refused}")
    import fsspec
    from upath import UPath

    try:
        fsspec.get_filesystem_class(scheme)
    except (ImportError, ValueError) as e:  # fsspec's message names the package to install
        raise ZoneError(f"the location {text} cannot be opened: {e}") from None
    # no listings cache: another process's objects (a run lock, a published pointer) must be
    # seen as soon as they exist, not after this process's cached listing of their folder
    return UPath(text, use_listings_cache=False)


def is_remote(path) -> bool:
    """Whether `path` is on an object store (a `UPath` that is not a local file system's; a
    `UPath` of universal_pathlib 0.2 is a `pathlib.Path` too, so its protocol decides)."""
    return hasattr(path, "fs") and getattr(path, "protocol", "") not in ("", "file", "local")


def _temporary_local(name: str) -> Path:
    """A fresh path in the local temporary folder (never in a zone) for a file named `name`."""
    fd, tmp = tempfile.mkstemp(prefix=".dp_synth.", suffix=f".{name}")
    os.close(fd)
    return Path(tmp)


@contextmanager
def local_copy(path) -> Iterator[Path]:
    """`path` as a local file for a reader outside Python's file calls (DuckDB's read_parquet):
    the path itself when it is local, else a temporary local copy removed after the block."""
    path = location(path)
    if not is_remote(path):
        yield path
        return
    tmp = _temporary_local(path.name)
    try:
        path.fs.get_file(path.path, str(tmp))
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def staged_folder(folder) -> Iterator[Path]:
    """`folder` as a local folder for a writer outside Python's file calls (GX's Data Docs): the
    folder itself when it is local; else a temporary local folder holding the folder's objects,
    synchronized back when the block ends normally (what the writer removed is removed from
    the store too), removed in any case."""
    folder = location(folder)
    if not is_remote(folder):
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    tmp = Path(tempfile.mkdtemp(prefix=".dp_synth."))
    remote = folder.path.rstrip("/")
    try:
        before = folder.fs.find(remote) if folder.fs.isdir(remote) else []
        if before:
            folder.fs.get(remote + "/", str(tmp) + "/", recursive=True)
        yield tmp
        folder.fs.put(str(tmp) + "/", remote + "/", recursive=True)
        gone = [name for name in before
                if not (tmp / name[len(remote) + 1:]).is_file()]
        if gone:
            folder.fs.rm(gone)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def make_folder(path, mode: int | None = None):
    """`path` as a folder (with `mode` when it is created): object stores have no folders."""
    path = location(path)
    if not is_remote(path):
        path.mkdir(parents=True, exist_ok=True, **({"mode": mode} if mode is not None else {}))
    return path


def _remove_tree(path) -> None:
    if is_remote(path):
        try:
            path.fs.rm(path.path, recursive=True)
        except FileNotFoundError:
            pass
    else:
        shutil.rmtree(path, ignore_errors=True)


def append_bytes(path, data: bytes, mode: int = 0o600) -> None:
    """Append `data` to the file `path` (created with `mode`): one O_APPEND write on a local
    disk; on an object store (no append), the object rewritten with `data` after its content."""
    path = location(path)
    if is_remote(path):
        try:
            before = path.read_bytes()
        except FileNotFoundError:
            before = b""
        atomic_write(path, before + data)
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def object_version(path) -> str | None:
    """The version tag of the object `path` (its ETag), None when it is absent or the store
    gives none; read before its content, it guards a later `replace_object`."""
    try:
        info = path.fs.info(path.path)
    except FileNotFoundError:
        return None
    return info.get("ETag") or None


def replace_object(path, data: bytes | None, version: str | None) -> bool:
    """Overwrite the object `path` with `data` (None: delete it) only if it is still at
    `version` (`object_version`): on S3 one conditional request (If-Match), so of two writers
    replacing one version only one succeeds; returns whether this call did. A store without
    such requests (or a missing version) gets an unconditional delete, then a create-if-absent:
    two writers may then both replace it."""
    if version is not None and path.protocol in ("s3", "s3a"):
        import errno

        bucket, key, _ = path.fs.split_path(path.path)
        try:
            if data is None:
                path.fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=version)
            else:
                path.fs.pipe_file(path.path, data, IfMatch=version)
        except (FileNotFoundError, FileExistsError):
            return False  # gone, or replaced by another writer
        except OSError as e:
            if e.errno == errno.EINVAL and "condition" in str(e).lower():
                return False  # s3fs's PreconditionFailed: another version by now
            raise
        finally:
            path.fs.invalidate_cache(path.path)
        return True
    path.unlink(missing_ok=True)
    return data is None or atomic_write(path, data, keep_existing=True)


PROBE = ".dp_synth-probe"


def probe_write(where, mode: int | None = None) -> None:
    """Write a small probe file `<where>/.dp_synth-probe.<hex>` and remove it, creating the
    folder `where` first (with `mode` when it is created; an object store has no folders): a
    real write, so a read-only, unreachable or full volume raises what the write raised
    (`OSError` and its kinds on a local disk, the store's error on an object store)."""
    folder = make_folder(where, mode)
    probe = folder / f"{PROBE}.{secrets.token_hex(8)}"
    try:
        atomic_write(probe, b"dp-synth write probe\n", mode)
    finally:
        try:
            probe.unlink()
        except (OSError, ValueError):  # never written, or removed already
            pass


def volume_of(where) -> tuple[int, int] | None:
    """(device id, free bytes) of the local volume that holds `where` (its nearest existing
    folder), or None on an object store (no volume to measure). Free bytes are what an
    unprivileged writer may use (`shutil.disk_usage`)."""
    path = location(where)
    if is_remote(path):
        return None
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir():  # a file where a folder is wanted: its own folder's volume
        path = path.parent
    return os.stat(path).st_dev, shutil.disk_usage(path).free


def check_zone(where, zone: str, setting: str, conditional: bool = False) -> None:
    """Refuse (`ZoneError`) an object-store zone that this process cannot write, read and
    delete in (a missing or read-only bucket, wrong credentials, an unreachable endpoint), or,
    with `conditional`, whose store ignores a create-if-absent write (the run lock needs one).
    A probe object `<where>/.dp_synth-probe.<hex>` is written and removed. `zone` and `setting`
    name the zone and where its location is set, for the message. A local folder passes."""
    root = location(where)
    if not is_remote(root):
        return
    probe = root / f"{PROBE}.{secrets.token_hex(8)}"
    try:
        try:
            if not atomic_write(probe, b"probe", keep_existing=True):
                raise OSError("a fresh probe object exists already")
            if conditional and atomic_write(probe, b"again", keep_existing=True):
                raise ZoneError(
                    f"the {zone} {where} is on a store that ignores conditional writes "
                    "(create-if-absent: S3's If-None-Match): the run lock of each dataset "
                    "needs one there. Use a store that supports them (AWS S3 does), or keep "
                    f"the ledger in PostgreSQL, whose database then holds the run lock ({setting})")
            probe.fs.rm_file(probe.path)
        except ZoneError:
            raise
        except Exception as e:  # noqa: BLE001 - any store error: the zone is unusable
            raise ZoneError(
                f"the {zone} {where} cannot be written, read and deleted in by this process "
                f"({type(e).__name__}: {e}). Check that the bucket exists, that the endpoint is "
                "reachable and that the credentials fsspec finds (environment variables, the "
                f"store's config files) allow writing there, or set another location "
                f"({setting}); nothing was run or spent") from None
    finally:
        try:
            probe.fs.rm_file(probe.path)
        except Exception:  # noqa: BLE001, S110 - removed already, or never written
            pass


class MissingArtifact(LookupError):
    """An artifact was read before the stage that writes it ran (the message names the stage)."""


# the stages that remake a plan and everything made from it, in one run
REMAKE = "preprocessed, marginals, selection, measurements, model and synthetic"


class StalePlan(ValueError):
    """The plan was made from another spec than the loaded one (`ArtifactStore.plan_for`); the
    message names the entry, the stage that made the plan and the stages to rerun."""


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
    """Typed reads and writes of one dataset's public artifacts (docs/where-data-lives.md). A write
    returns where the artifact went (a path, or `memory:<name>`), for the stage's metadata."""

    dataset: str

    def plan(self) -> EncodingPlan:
        return self._read("plan")

    def write_plan(self, plan: EncodingPlan) -> str:
        return self._write("plan", plan)

    def plan_for(self, spec: DatasetSpec) -> EncodingPlan:
        """The plan, when it was made from `spec`: its `spec_digest` is `config.plan_digest(spec)`
        (what that digest covers is said there). Else `StalePlan`: the columns, source, engine or
        report holdout of the entry changed since the `preprocessed` stage made it, and a later
        stage would publish a table that contradicts the entry. A plan without a digest (written
        before plans carried one) is refused too: nothing tells what it was made from. Every stage
        after `preprocessed` reads its plan through this, before it spends or writes anything."""
        plan = self.plan()
        if plan.spec_digest == plan_digest(spec):
            return plan
        made = f"its encoding plan (plan.json{self._plan_origin()})"
        if plan.spec_digest is None:
            why = (f"{made} was written by an earlier version of dp-synth, which did not record "
                   f"the spec it was made from, so it may not match {spec.entry}")
        else:
            why = (f"{made} was made from another version of {spec.entry}: its columns, "
                   f"source, engine or report.holdout changed since the 'preprocessed' stage "
                   f"ran, so the later stages would publish a table that contradicts it")
        raise StalePlan(
            f"dataset {self.dataset!r}: {why}. Materialize the whole dataset in one run "
            f"({REMAKE}) to remake the plan and everything made from it; this stage stopped "
            f"before spending or publishing anything")

    def _plan_origin(self) -> str:
        """Where the plan came from, for a message (a store of runs names the run)."""
        return ""

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
        self.folder, self.dataset = location(folder), dataset
        self._parsed: dict[str, object] = {}

    def path(self, name: str):
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
    folders are created (with `mode`'s owner bits as 0o700 when `mode` is given). On an object
    store, one whole object is written (`mode` is the bucket's business), `keep_existing` as a
    conditional write (create-if-absent)."""
    path = location(path)
    if is_remote(path):
        try:
            path.fs.pipe_file(path.path, data, mode="create" if keep_existing else "overwrite")
        except FileExistsError:
            return False
        return True
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
    renamed to `path` when the block ends normally, removed when it raises. On an object store:
    a local temporary file (never in a zone), uploaded to `path`, removed in any case."""
    path = location(path)
    if is_remote(path):
        tmp = _temporary_local(path.name)
        try:
            yield tmp
            path.fs.put_file(str(tmp), path.path)
        finally:
            tmp.unlink(missing_ok=True)
        return
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
#   run.lock                the run holding the dataset (infra/runs.py)

RUNS = "runs"
POINTER = "current"
MANIFEST = "manifest.json"
PARQUET = "synthetic.parquet"
# a child dataset's copy of the parent table its synthetic table was drawn for: the family's
# Parquet pair, switched with the child's set by one pointer (family_assets.child_synthetic)
PAIR_PARQUET = "parent.parquet"
CHECKS = "checks"
KEEP_RUNS = 5  # run folders kept after a publish, the published one included
SET_FILES = tuple(a.file for a in ARTIFACTS.values()) + (PARQUET, PAIR_PARQUET, MANIFEST)
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
    """The run whose set `<root>/current` names, or None before the first publish (on an object
    store, `current` is an object holding the run id)."""
    root = location(root)
    if is_remote(root):
        try:
            run = (root / POINTER).read_text().strip()
        except FileNotFoundError:
            return None
        return run if run and "/" not in run and not run.startswith(".") else None
    try:
        target = os.readlink(root / POINTER)
    except OSError:
        return None
    return Path(target).name


def published_folder(root: str | os.PathLike):
    """The folder of the published set: `runs/<run_id>` of the pointer, else `root` itself (a
    dataset folder from before per-run artifacts, with its files at the top)."""
    root = location(root)
    run = published_run(root)
    return root / RUNS / run if run else root


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
        self.root, self.run_id = location(root), run_id
        self.own = self.root / RUNS / run_id if run_id else None
        base = next((self.root / RUNS / p for p in parents
                     if p and p != run_id and (self.root / RUNS / p).is_dir()), None)
        self.base = base if base is not None else published_folder(self.root)
        super().__init__(self.own if self.own is not None and self.own.is_dir() else self.base,
                         dataset)

    def _plan_origin(self) -> str:
        run = self.manifest().get("stamps", {}).get("plan", {}).get("run")
        return f", written by run {run}" if run else ""

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
        if is_remote(self.own):
            self._seed_objects()
            return
        tmp = self.own.with_name(f".{self.own.name}.{secrets.token_hex(4)}.tmp")
        tmp.mkdir(parents=True, mode=0o755)
        for name in SET_FILES:
            source = self.base / name
            if source.is_file():
                try:
                    os.link(source, tmp / name)
                except OSError:
                    shutil.copy2(source, tmp / name)
        manifest = self.manifest()
        manifest.update(run_id=self.own.name, seeded_from=self.set_run)
        atomic_write(tmp / MANIFEST, json.dumps(manifest).encode())
        try:
            os.rename(tmp, self.own)
        except OSError:  # another step of this run seeded it first
            shutil.rmtree(tmp, ignore_errors=True)
        self.folder = self.own
        self._parsed.clear()

    def _seed_objects(self) -> None:
        """`_seed` on an object store: the base set's objects copied (within the store), the
        manifest written last with the time its run started writing (the pruning order)."""
        import time

        for name in SET_FILES:
            source = self.base / name
            if name != MANIFEST and source.is_file():
                source.fs.copy(source.path, (self.own / name).path)
        manifest = self.manifest()
        manifest.update(run_id=self.own.name, seeded_from=self.set_run, seeded_at=time.time())
        atomic_write(self.own / MANIFEST, json.dumps(manifest).encode())
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

    def note(self, key: str, value) -> None:
        """Record `value` under `key` in this run's manifest (public facts about the set)."""
        self._seed()
        manifest = self.manifest()
        manifest[key] = value
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
    root = location(root)
    if is_remote(root):
        _publish_objects(root, run_id, keep)
        return
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


def reconcile_synthetic(con, table: str, root, log=None) -> str | None:
    """Finish the publish of a run killed between its table commit and its pointer switch: when
    `table`'s stamp (`synthesize.table_stamp`; `con` a DuckDB connection to the warehouse) names
    another run than the one whose Parquet the published set holds
    (`published_synthetic_run`), and that run's folder under `<root>/runs/` has its
    Parquet, publish that run's set (the table commit is the commit point). Call it holding the
    dataset (`runs.DatasetLock`). Returns the run published, if any."""
    from ..core.synthesize import table_stamp

    written = table_stamp(con, table)
    if written is None or written == published_synthetic_run(root):
        return None
    if not (location(root) / RUNS / written / PARQUET).is_file():
        if log:
            log(f"{table} was written by run {written}, whose artifacts are gone; the next "
                "synthetic run replaces it")
        return None
    publish_run(root, written)
    if log:
        log(f"{table} was committed by run {written}, killed before it published its artifacts: "
            "published them now")
    return written


def _publish_objects(root, run_id: str, keep: int) -> None:
    """`publish_run` on an object store: the pointer object `current` (the run id) written last,
    one whole object, so readers see the old set or the new one; no stable links. Old run folders
    are pruned in the order their runs started writing (`seeded_at` of their manifests)."""
    atomic_write(root / POINTER, run_id.encode())

    def started(folder) -> float:
        try:
            return float(json.loads((folder / MANIFEST).read_text()).get("seeded_at", 0.0))
        except (OSError, ValueError, TypeError):
            return 0.0

    runs_folder = root / RUNS
    folders = [p for p in runs_folder.iterdir() if not p.name.startswith(".")] \
        if runs_folder.exists() else []
    runs = sorted(folders, key=started, reverse=True)
    kept = [p for p in runs if p.name == run_id] + [p for p in runs if p.name != run_id]
    for old in kept[max(keep, 1):]:
        _remove_tree(old)


def remove_temporaries(root: str | os.PathLike) -> list[Path]:
    """Remove what a killed writer left in the dataset folder: temporary files and links
    (`.<name>.<hex>.tmp`) and half-seeded run folders; call it holding the dataset
    (`runs.DatasetLock`). Returns what was removed. An object store has none: its temporary
    files are local (`atomic_target`) and its run folders are seeded in place."""
    root = location(root)
    if is_remote(root):
        return []
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
