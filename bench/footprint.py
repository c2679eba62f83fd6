"""What dagster-dp-synth adds to a Dagster project's environment, in site-packages megabytes.

Builds the wheel, then three fresh venvs of the same Python, each in one pip resolution (pip's
cache is reused):
- base: dagster + dagster-dg-cli, what a project scaffolded by create-dagster starts with;
- default: the same plus the wheel, no extras;
- extras: the same plus the wheel with the jax, report and postgres extras.
Each venv's site-packages is measured whole (every file, as `du` counts bytes) and per
distribution (the files its RECORD lists). The default's cost is its total minus the base's;
each extra's is the distributions that only its requirements bring in (their closure in the
extras venv, less what the default already has). spark is not measured: PyPI ships pyspark as a
source distribution of about 450 MB that takes minutes to build.

Usage: python3 bench/footprint.py [--python python3.11] [--markdown-only]
Writes bench/results/footprint.json and bench/results/footprint.md (--markdown-only: rewrites the
Markdown from the JSON, measuring nothing).
"""

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS  # noqa: E402
BASE = ["dagster", "dagster-dg-cli"]
# what a host that writes its tables with dagster-duckdb-pandas has already
DUCKDB_PANDAS_HOST = ["pandas", "numpy", "duckdb", "python-dateutil", "tzdata"]
EXTRAS = ["jax", "report", "postgres"]
MB = 1e6

# run by each venv's python: every distribution's size, requirements and provided extras
INVENTORY = r"""
import json, sysconfig
from importlib.metadata import distributions
from pathlib import Path
site = Path(sysconfig.get_paths()["purelib"])
total = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())
dists = {}
for d in distributions():
    size = 0
    for f in d.files or []:
        path = Path(d.locate_file(f))
        if path.is_file() and not path.is_symlink():
            size += path.stat().st_size
    dists[d.metadata["Name"].lower().replace("_", "-")] = {
        "version": d.version, "bytes": size, "requires": d.requires or []}
print(json.dumps({"site_packages": str(site), "total": total, "dists": dists}))
"""


def sh(args, **kw) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if done.returncode:
        sys.exit(f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def build_wheel(out: Path) -> Path:
    source = out / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv*", ".git", "data", "public", ".dagster_home", ".dp_synth", "bench", "tests",
        "build", "dist", "__pycache__", "*.egg-info"))
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", out / "dist", source])
    [wheel] = (out / "dist").glob("*.whl")
    return wheel


def venv_inventory(python: str, where: Path, packages: list) -> dict:
    sh([python, "-m", "venv", where])
    py = where / "bin" / "python"
    sh([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    sh([py, "-m", "pip", "install", "--quiet", *packages])
    return json.loads(sh([py, "-c", INVENTORY]))


def closure(dists: dict, roots: list) -> set:
    """The installed distributions that `roots` (requirement strings) need, transitively."""
    from packaging.requirements import Requirement

    seen, todo = set(), [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if name not in dists or (name, tuple(sorted(req.extras))) in seen:
            continue
        seen.add((name, tuple(sorted(req.extras))))
        for text in dists[name]["requires"]:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e})
                                         for e in ("", *req.extras)):
                todo.append(sub)
    return {name for name, _ in seen}


def extra_requirements(dists: dict, extra: str) -> list:
    from packaging.requirements import Requirement

    found = []
    for text in dists["dagster-dp-synth"]["requires"]:
        req = Requirement(text)
        if req.marker is not None and req.marker.evaluate({"extra": extra}) \
                and not req.marker.evaluate({"extra": ""}):
            found.append(text.split(";")[0])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default="python3.11")
    parser.add_argument("--markdown-only", action="store_true")
    args = parser.parse_args()
    if args.markdown_only:
        result = json.loads((RESULTS / "footprint.json").read_text())
        (RESULTS / "footprint.md").write_text(markdown(result))
        print(markdown(result))
        return
    with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
        tmp = Path(tmp)
        wheel = build_wheel(tmp)
        base = venv_inventory(args.python, tmp / "base", BASE)
        default = venv_inventory(args.python, tmp / "default", [*BASE, wheel])
        extras = venv_inventory(args.python, tmp / "extras",
                                [*BASE, f"{wheel}[{','.join(EXTRAS)}]"])
        version = sh([tmp / "base" / "bin" / "python", "-c",
                      "import platform; print(platform.python_version())"]).strip()

    added = {name: d for name, d in default["dists"].items()
             if name not in base["dists"] and name != "dagster-dp-synth"}
    ours = default["dists"]["dagster-dp-synth"]
    in_default = set(default["dists"])
    per_extra = {}
    for extra in EXTRAS:
        names = closure(extras["dists"], extra_requirements(extras["dists"], extra)) - in_default
        per_extra[extra] = {
            "requires": extra_requirements(extras["dists"], extra),
            "mb": round(sum(extras["dists"][n]["bytes"] for n in names) / MB, 1),
            "packages": {n: round(extras["dists"][n]["bytes"] / MB, 1)
                         for n in sorted(names, key=lambda n: -extras["dists"][n]["bytes"])}}
    result = {
        "machine": {"python": version, "platform": platform.platform(),
                    "processor": platform.machine()},
        "base": {"packages": BASE, "mb": round(base["total"] / MB, 1),
                 "versions": {n: base["dists"][n]["version"] for n in BASE}},
        "default": {"mb": round(default["total"] / MB, 1),
                    "above_base_mb": round((default["total"] - base["total"]) / MB, 1),
                    "dagster_dp_synth_mb": round(ours["bytes"] / MB, 1),
                    "added": {n: {"version": d["version"], "mb": round(d["bytes"] / MB, 1)}
                              for n, d in sorted(added.items(), key=lambda x: -x[1]["bytes"])}},
        "extras_venv_mb": round(extras["total"] / MB, 1),
        "extras": per_extra,
        "goal_above_base_mb": 400,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "footprint.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "footprint.md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    d = r["default"]
    host_mb = round(d["above_base_mb"] - sum(
        a["mb"] for n, a in d["added"].items() if n in DUCKDB_PANDAS_HOST), 1)
    lines = [
        "# Footprint: site-packages that dagster-dp-synth adds",
        "",
        f"Measured by bench/footprint.py on Python {r['machine']['python']}, "
        f"{r['machine']['platform']} ({r['machine']['processor']}); MB = 10^6 bytes, every "
        "file of site-packages counted.",
        "",
        "| venv | site-packages MB |",
        "| --- | ---: |",
        f"| base: {' + '.join(r['base']['packages'])} "
        f"({r['base']['versions']['dagster']}) | {r['base']['mb']} |",
        f"| base + the wheel (default install) | {d['mb']} |",
        f"| base + the wheel[{','.join(r['extras'])}] | {r['extras_venv_mb']} |",
        "",
        f"**The default install adds {d['above_base_mb']} MB** above the base "
        f"(goal: at most {r['goal_above_base_mb']} MB); dagster-dp-synth itself is "
        f"{d['dagster_dp_synth_mb']} MB. What it adds, largest first:",
        "",
        "| distribution | version | MB |",
        "| --- | --- | ---: |",
        *[f"| {n} | {a['version']} | {a['mb']} |" for n, a in d["added"].items() if a["mb"] >= 1],
        f"| (the {sum(1 for a in d['added'].values() if a['mb'] < 1)} others, under 1 MB each) "
        f"| | {round(sum(a['mb'] for a in d['added'].values() if a['mb'] < 1), 1)} |",
        "",
        f"A host that writes its tables with dagster-duckdb-pandas has pandas, numpy and duckdb "
        f"already: above such a host the default adds {host_mb} MB. The goal is not met: "
        f"OpenDP's native library (every DP mechanism and its privacy map), pyarrow (the Arrow "
        f"exchange with DuckDB), scipy (a requirement of Great Expectations, which runs the "
        f"checks), pandas, numpy and DuckDB are what the default needs.",
        "",
        "Each extra, above the default install (the distributions only it brings in):",
        "",
        "| extra | requires | adds MB | largest |",
        "| --- | --- | ---: | --- |",
        *[f"| {e} | {', '.join(x['requires'])} | {x['mb']} | "
          + ", ".join(f"{n} {mb}" for n, mb in list(x["packages"].items())[:4]) + " |"
          for e, x in r["extras"].items()],
        "| spark | pyspark[connect], sqlglot | not measured | pyspark is a ~450 MB source "
        "distribution |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
