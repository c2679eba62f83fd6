"""The built wheel in a fresh virtual environment, as a host platform installs it: shared by
tests/test_wheel.py (a host project with its own DuckDB asset, automation) and
tests/test_wheel_component.py (a `dg` project with a Parquet asset and the Component).

The wheel is built with `pip wheel --no-deps` from a copy of the sources (the checkout gets no
build/ folder) and installed into a fresh virtual environment. Its dependencies come one of two
ways, chosen by DP_SYNTH_WHEEL_DEPS:
- `layered` (the default, for `make test`): the wheel is installed with `--no-deps` into a venv
  that sees the test environment's site-packages through a .pth file (their .pth files, the
  editable install's finder among them, are not run, so the source tree stays invisible), and
  each of the wheel's requirements is checked against the version the venv imports.
- `resolve`: pip resolves and installs the whole dependency set from the package index into the
  fresh venv (pip's cache is reused), as a platform's `pip install` does.
- `floors`: the same, constrained to the lowest version the wheel declares for each requirement
  (`floors`), with the extras named in DP_SYNTH_WHEEL_EXTRAS (comma-separated).
DP_SYNTH_WHEEL_DAGSTER=<version> then installs that Dagster (and its webserver) into the venv, to
run the host projects at either end of the supported range.
"""

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEPS = os.environ.get("DP_SYNTH_WHEEL_DEPS", "layered")
DAGSTER = os.environ.get("DP_SYNTH_WHEEL_DAGSTER")
# what a wheel build reads: the project file, the README it names, the package (with its links
# to resources/ and sql/) and the two linked folders
SOURCES = ("pyproject.toml", "README.md", "dp_synth_assets", "resources", "sql")

# each runtime requirement of the installed distribution that the venv's packages do not meet
UNMET = """
from importlib.metadata import requires, version
from packaging.requirements import Requirement
for text in requires("dagster-dp-synth"):
    req = Requirement(text)
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        found = version(req.name)
        if not req.specifier.contains(found, prereleases=True):
            print(f"{req} but {req.name} {found} is installed")
"""


def run(args: list, cwd: Path, env: dict | None = None, timeout: float = 900):
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


def build_wheel(workdir: Path) -> Path:
    source, out = workdir / "source", workdir / "dist"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", out, source], source)
    [built] = out.glob("*.whl")
    return built


def requirements(wheel: Path, extras: tuple[str, ...] = ()) -> list:
    """The wheel's declared requirements (packaging Requirements) that apply to an install with
    `extras`, on this interpreter; the wheel's references to its own extras are left out."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode())
    found = []
    for text in metadata.get_all("Requires-Dist") or []:
        req = Requirement(text)
        if req.name == metadata["Name"]:
            continue
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            found.append(req)
    return found


def floors(wheel: Path, extras: tuple[str, ...] = ()) -> dict[str, str]:
    """name -> the lowest version the wheel declares for it (its `>=` bound; the highest of them
    where the default and an extra both bound it): the lowest end of the supported range."""
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    found: dict[str, str] = {}
    for req in requirements(wheel, extras):
        for spec in req.specifier:
            if spec.operator in (">=", "==", "~="):
                name = canonicalize_name(req.name)
                if name not in found or Version(spec.version) > Version(found[name]):
                    found[name] = spec.version
    return found


def install(wheel: Path, env_dir: Path) -> Path:
    """A fresh venv at `env_dir` with the wheel installed; its python."""
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    if DEPS == "layered":
        purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                      env_dir).stdout.strip()
        # the test environment's installed packages (its venv may live inside the checkout, as
        # `make`'s .venv does; the source tree itself is never a site-packages folder, and the
        # editable install's finder is not loaded: a .pth line adds a path, not its .pth files)
        outer = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")
                 and Path(p).is_dir()]
        (Path(purelib) / "zz_test_environment.pth").write_text("\n".join(outer) + "\n")
        run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--ignore-installed", wheel],
            env_dir)
    elif DEPS == "floors":
        extras = tuple(e for e in os.environ.get("DP_SYNTH_WHEEL_EXTRAS", "").split(",") if e)
        constraints = env_dir / "floors.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in floors(wheel, extras).items()))
        spec = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
        run([python, "-m", "pip", "install", "--quiet", "--constraint", constraints, spec],
            env_dir, timeout=1800)
    else:
        run([python, "-m", "pip", "install", "--quiet", wheel], env_dir, timeout=1800)
    if DAGSTER:
        run([python, "-m", "pip", "install", "--quiet", f"dagster=={DAGSTER}",
             f"dagster-webserver=={DAGSTER}"], env_dir)
    unmet = run([python, "-c", UNMET], env_dir).stdout.strip()
    assert not unmet, unmet
    return python


def host_env(home: Path, **extra: str) -> dict:
    """The environment a host's commands run in: its own DAGSTER_HOME (telemetry off), none of the
    test run's PYTHONPATH or DP_SYNTH_ settings."""
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME")
           and not k.startswith("DP_SYNTH_")}
    env.update(DAGSTER_HOME=str(home), JAX_ENABLE_COMPILATION_CACHE="false", **extra)
    return env
