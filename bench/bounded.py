"""One benchmark run in a process of its own, bounded in time, measured alone (shared by
bench/compare_methods.py and bench/suite.py)."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_bounded(cmd: list[str], log: Path, timeout_s: float, env: dict | None = None) -> dict:
    """Run `cmd` from the repository's root in its own process group, stdout+stderr to `log`,
    killing the group at `timeout_s`. Returns the parsed `RESULT {json}` line (or None), the exit
    code, whether it timed out, its wall seconds, its maximum RSS in MB (from wait4: this child's
    own) and the highest 1-minute load average seen while it ran (`max_load1`: above ~1 per core,
    other work competed for the CPU and its time is inflated)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load = os.getloadavg()[0]
    timed_out = False
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                start_new_session=True)
        try:
            while True:
                load = max(load, os.getloadavg()[0])
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() - started > timeout_s:
                    timed_out = True
                    os.killpg(proc.pid, signal.SIGKILL)
                    pid, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.5)
        except BaseException:  # Ctrl-C or any error here: do not leave the run behind
            os.killpg(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            raise
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    result = None
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    return {"result": result, "code": proc.returncode, "timed_out": timed_out,
            "wall": time.perf_counter() - started, "maxrss_mb": usage.ru_maxrss / 1024.0,
            "max_load1": round(load, 2)}


def log_tail(log: Path, lines: int = 3, width: int = 200) -> str:
    """The last `lines` lines of `log`, each cut at `width` characters, joined by ' | '."""
    text = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return " | ".join(line.strip()[:width] for line in text[-lines:])
