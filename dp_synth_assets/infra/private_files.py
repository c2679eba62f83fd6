"""Change detection of a private source without publishing anything computed from its content.

Three pieces, all in the private zone except the last:

- the installation's secret: 32 random bytes, from an environment variable that a secret store
  fills (`secret_from_hex`: a container run has no file to keep), else in one owner-only file
  (mode 0600) of the private zone, created on first use (`load_or_create_secret`);
- the change signal's MAC: HMAC-SHA256 under that secret of a summary of the source (its content
  summary for tables, its files' names, sizes and modification times for Parquet/CSV), kept in a
  per-dataset state file (`observe`), never published;
- the public version: an opaque random id (`mint_version`), minted when the MAC differs from the
  stored one and repeated while it does not (`advance`). It says "changed since last time" and
  nothing else: it is not a function of the content (two installations holding the same table get
  unrelated ids, and a table that returns to an earlier content gets a new id), so an adversary who
  knows every row but one has nothing to test candidates against.

`observe` serializes concurrent observers (the sensor and an observation of the `source` asset)
with an exclusive lock on a file beside the state, and replaces the state atomically, so they
agree on one id per change. Every file is written through `store.atomic_write` (0600).
"""

import hashlib
import hmac
import json
import os
import secrets
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from .store import atomic_write, exclusive_lock, is_remote, location, make_folder

SECRET_BYTES = 32
OWNER_ONLY = 0o600


class ChangeDetectionError(Exception):
    """The change-detection secret or state cannot be used (unreadable, wrong size)."""


@dataclass(frozen=True)
class ChangeState:
    """What one dataset's change detection remembers (private): the MAC of the last signal
    seen, the public id minted for it and when (UTC, ISO 8601)."""

    mac: str
    version: str
    changed_at: str


def make_private_dir(path):
    """`path` as a directory, created owner-only (0700) if it does not exist yet (an object
    store has no folders: its bucket's permissions keep it private)."""
    return make_folder(path, mode=0o700)


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically as a 0600 file (`store.atomic_write`): a reader sees
    the old content or the new one, never a partial file, and never a wider mode."""
    atomic_write(path, data, OWNER_ONLY)


def load_or_create_secret(path: Path) -> bytes:
    """The installation's secret at `path`, created on first use: 32 bytes from the OS's CSPRNG
    written to a fresh 0600 file (O_CREAT | O_EXCL) and linked into place, so that two processes
    creating it at once end up with the same one and nobody ever reads a half-written file. An
    existing file with group or other permission bits is narrowed to 0600."""
    path = location(path)
    if not path.exists():
        make_private_dir(path.parent)
        # linked into place only if absent: two processes creating it at once keep one secret
        atomic_write(path, secrets.token_bytes(SECRET_BYTES), OWNER_ONLY, keep_existing=True)
    if not is_remote(path) and path.stat().st_mode & 0o077:
        os.chmod(path, OWNER_ONLY)
    secret = path.read_bytes()
    if len(secret) != SECRET_BYTES:
        raise ChangeDetectionError(
            f"the change-detection secret {path} is not {SECRET_BYTES} bytes long; delete it to "
            "create a new one (the next observation of each source then counts as a change)")
    return secret


def secret_from_hex(text: str, where: str) -> bytes:
    """The installation's secret given as 64 hexadecimal digits (32 bytes) by `where` (an
    environment variable a secret store fills: a container has no secret file), or a
    ChangeDetectionError that names `where` and never quotes the value."""
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        secret = b""
    if len(secret) != SECRET_BYTES:
        raise ChangeDetectionError(
            f"{where} does not hold a change-detection secret: it must be {2 * SECRET_BYTES} "
            f"hexadecimal digits ({SECRET_BYTES} random bytes), e.g. the output of `python -c "
            f"\"import secrets; print(secrets.token_hex({SECRET_BYTES}))\"`; keep the same value "
            f"in every deployment (a new one makes the next observation of each source a change)")
    return secret


def change_mac(secret: bytes, signal: str) -> str:
    """HMAC-SHA256 of a change signal under the installation's secret (hex)."""
    return hmac.new(secret, signal.encode(), hashlib.sha256).hexdigest()


def mint_version() -> str:
    """A fresh public version id: 128 random bits, independent of any data."""
    return secrets.token_hex(16)


def advance(state: ChangeState | None, mac: str, mint: Callable[[], str] = mint_version,
            now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> ChangeState:
    """The state after seeing a signal whose MAC is `mac`: unchanged (same public id) when the MAC
    equals the stored one, otherwise a new id minted now. Comparison is constant-time."""
    if state is not None and hmac.compare_digest(state.mac, mac):
        return state
    return ChangeState(mac=mac, version=mint(), changed_at=now().isoformat())


def read_state(state_path: Path) -> ChangeState | None:
    try:
        data = json.loads(location(state_path).read_text())
        return ChangeState(**data)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return None  # an unreadable state is a change: the next observation mints a new id


def observe(state_path: Path, mac: str, mint: Callable[[], str] = mint_version) -> str:
    """Record a signal's MAC in the private state file at `state_path` and return the public
    version id: the stored one when the MAC has not changed, a new one otherwise. Concurrent
    observers serialize on `<state>.lock`; the state is replaced atomically."""
    state_path = location(state_path)
    make_private_dir(state_path.parent)
    # an object store has no lock: two observers at once may mint two ids for one change
    guard = nullcontext() if is_remote(state_path) else exclusive_lock(
        state_path.with_name(state_path.name + ".lock"), OWNER_ONLY)
    with guard:
        before = read_state(state_path)
        after = advance(before, mac, mint)
        if after != before:
            write_private(state_path, json.dumps(asdict(after)).encode())
    return after.version
