"""How long pip takes to resolve dagster-dp-synth into a new Dagster project beside the usual host
libraries, and whether it had to backtrack.

Builds the wheel, makes a fresh venv of the given Python (the newest supported end by default),
upgrades its pip, then times `pip install --dry-run --no-cache-dir` of the host set (dagster,
dagster-dg-cli, dagster-dbt, dagster-duckdb-pandas) twice: alone, then with the wheel. The cache is
off so each resolution downloads every candidate's metadata, as a first install on a new machine
does. Backtracking shows in pip's log as a requirement "is being downloaded" at more than one
version; the script counts the distributions that happened to.

Usage: python3 bench/resolution.py [--python ~/.pyenv/versions/3.13.0/bin/python] [--repeat 2]
Writes bench/results/resolution.json.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS  # noqa: E402

HOST = ["dagster", "dagster-dg-cli", "dagster-dbt", "dagster-duckdb-pandas"]
REPORTED = ("dagster", "dagster-dbt", "dagster-duckdb-pandas", "dagster-dg-cli", "pandas", "numpy",
            "duckdb", "opendp", "great-expectations", "pyarrow")
COLLECTING = re.compile(r"^\s*(?:Collecting|Downloading) ([A-Za-z0-9_.\-]+?)-(\d[^-\s]*?)"
                        r"(?:-py|-cp|\.tar|\.whl|\.zip|-\d)", re.M)


def sh(args, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if done.returncode:
        sys.exit(f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def versions_tried(log: str) -> dict[str, set[str]]:
    """The versions of each distribution whose files pip fetched, from its verbose log."""
    tried: dict[str, set[str]] = defaultdict(set)
    for name, version in COLLECTING.findall(log):
        tried[name.lower().replace("_", "-")].add(version)
    return tried


def resolve(python: Path, requirements: list[str], report: Path) -> dict:
    """One timed dry-run resolution in the venv of `python`."""
    started = time.perf_counter()
    done = sh([python, "-m", "pip", "install", "--dry-run", "--no-cache-dir", "-v",
               "--report", report, *requirements])
    seconds = time.perf_counter() - started
    installed = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
                 for i in json.loads(report.read_text())["install"]}
    backtracked = sorted(n for n, v in versions_tried(done.stdout + done.stderr).items()
                         if len(v) > 1)
    return {"seconds": round(seconds, 1), "distributions": len(installed),
            "backtracked": backtracked,
            "versions": {k: installed[k] for k in REPORTED if k in installed}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=str(Path.home() / ".pyenv/versions/3.13.0/bin/python"))
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dp_synth_resolution.") as tmp:
        tmp = Path(tmp)
        sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", REPO])
        wheel = next((tmp / "dist").glob("*.whl"))
        sh([args.python, "-m", "venv", tmp / "venv"])
        python = tmp / "venv" / "bin" / "python"
        sh([python, "-m", "pip", "install", "-q", "-U", "pip"])
        pip_version = sh([python, "-m", "pip", "--version"]).stdout.split()[1]
        runs = []
        for i in range(args.repeat):
            load = os.getloadavg()[0]
            alone = resolve(python, HOST, tmp / f"alone{i}.json")
            with_wheel = resolve(python, [*HOST, str(wheel)], tmp / f"wheel{i}.json")
            runs.append({"load_1min": round(load, 2), "host_alone": alone,
                         "host_and_wheel": with_wheel})
            print(f"run {i + 1}: host alone {alone['seconds']} s, with the wheel "
                  f"{with_wheel['seconds']} s ({with_wheel['distributions']} distributions, "
                  f"backtracked: {with_wheel['backtracked'] or 'none'}), load {load:.2f}")
    python_version = sh([args.python, "-c", "import platform; print(platform.python_version())"]
                        ).stdout.strip()
    result = {"python": python_version, "pip": pip_version, "platform": platform.platform(),
              "host": HOST, "cache": "off (--no-cache-dir)", "runs": runs}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "resolution.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
