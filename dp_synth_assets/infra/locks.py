"""Which process owns a ledger row or holds a lock, and waiting for a lock: process ownership
from the process table (/proc, else `os.kill(pid, 0)`), lock holders from /proc/locks, and the
report-then-refuse wait of the ledger's locks (`waiting`).
"""

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from ..core.ledger import LedgerError


# ---- owners: which process wrote a row, and is it still alive --------------------------------------


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a process from /proc/<pid>/stat (fields 3 and 22), or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may contain spaces and ')'
    return fields[0], fields[19]


def owner_id(pid: int | None = None) -> str:
    """'host:pid:start' of a process; the start time tells a reused pid from the original."""
    pid = os.getpid() if pid is None else pid
    stat = _proc_stat(pid)
    return f"{socket.gethostname()}:{pid}:{stat[1] if stat else ''}"


def owner_alive(owner: str) -> bool | None:
    """Whether the owner process still runs; None when this host cannot tell (another host)."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return None
    pid, start = int(parts[1]), parts[2]
    if pid <= 0:
        return None
    if os.path.isdir("/proc/self"):
        stat = _proc_stat(pid)
        if stat is None:
            return False
        state, current_start = stat
        return state not in ("Z", "X") and (not start or current_start == start)
    try:  # no /proc (macOS): the pid alone
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- lock waits: reported while they last, refused after the timeout --------------------------


def lock_holders(*paths: Path) -> list[int]:
    """The processes holding a lock (flock or POSIX) on any of `paths`, from /proc/locks
    (empty where the system has none, or when no lock is visible)."""
    inodes = set()
    for path in paths:
        try:
            inodes.add(os.stat(path).st_ino)
        except OSError:
            continue
    pids = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        try:
            i = fields.index("->") + 1 if "->" in fields else 0
            pid, where = int(fields[i + 4]), fields[i + 5]
            inode = int(where.rsplit(":", 1)[1])
        except (ValueError, IndexError):
            continue
        if inode in inodes and pid != os.getpid() and pid not in pids:
            pids.append(pid)
    return pids


def describe_processes(pids: list[int]) -> str:
    """'PID 123 (python -m dagster ...), PID 456' for a message; 'another process' if none."""
    if not pids:
        return "another process"
    shown = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace").strip()
        except OSError:
            command = ""
        shown.append(f"PID {pid}" + (f" ({command[:120]})" if command else ""))
    return ", ".join(shown)


def waiting(settings, name: str, what: str, holders: Callable[[], str]):
    """A function called on each failed attempt to take the lock `what` of the ledger `name`:
    it reports the wait through `settings.log` every `settings.lock_report_seconds` and raises
    LedgerError after `settings.lock_timeout_seconds`, naming the holders and the fix."""
    started = time.monotonic()
    reported = [started]

    def wait() -> None:
        now = time.monotonic()
        if now - started > settings.lock_timeout_seconds:
            raise LedgerError(
                f"The privacy ledger {name} is locked by {holders()} for over "
                f"{settings.lock_timeout_seconds:g} s ({what}). Nothing was spent by this "
                f"attempt. Wait for that process to finish (a run holds the lock for a "
                f"moment per ledger row), stop it if it is stuck, or raise the ledger's "
                f"`lock_timeout_seconds`.")
        if settings.log is not None and now - reported[0] >= settings.lock_report_seconds:
            reported[0] = now
            settings.log(f"waiting for the privacy ledger's lock on {what}, held by "
                         f"{holders()}: {now - started:.0f} s of "
                         f"{settings.lock_timeout_seconds:g} s")
    return wait
