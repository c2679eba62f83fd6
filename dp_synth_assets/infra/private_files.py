"""The private zone's files: owner-only folders and files (`make_private_dir`,
`write_private`), the installation's change-detection secret (`load_or_create_secret`) and each
dataset's change state (`observe`); what they compute is `core.change`.

`observe` serializes concurrent observers (the sensor and an observation of the `source` asset)
with an exclusive lock on a file beside the state, and replaces the state atomically, so they
agree on one id per change. Every file is written through `store.atomic_write` (0600).
"""

import json
import os
import secrets
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from ..core.change import (SECRET_BYTES, ChangeDetectionError, ChangeState, advance,
                           mint_version)
from .store import atomic_write, exclusive_lock, is_remote, location, make_folder

OWNER_ONLY = 0o600


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


def read_state(state_path: Path) -> ChangeState | None:
    """The change state kept at `state_path`, or None when there is none or it cannot be read (then
    the next observation mints a new version)."""
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
