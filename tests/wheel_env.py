"""The built wheel in a fresh virtual environment, as a host platform installs it: shared by
tests/test_wheel.py (a host project with its own DuckDB asset, automation) and
tests/test_wheel_component.py (a `dg` project with a Parquet asset and the Component), and the
wheel also by tests/test_install_ends.py. The wheel and that venv are made once per test session
(`shared_wheel`, `shared_install`), whichever module asks first, on whichever xdist worker: a
file lock in the session's temporary folder lets the other workers wait for them and reuse them.

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

import fcntl
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Callable
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


def pip(python: Path, *args) -> list:
    """A pip command line for the venv of `python`: the test environment's pip, run by that
    interpreter (`pip --python`), so a venv needs no pip of its own."""
    return [sys.executable, "-m", "pip", "--python", python, *args]


def install(wheel: Path, env_dir: Path) -> Path:
    """A fresh venv at `env_dir` with the wheel installed; its python. Nothing is byte-compiled
    at install (`--no-compile`): Python compiles, once, only the modules a command imports."""
    venv.create(env_dir, with_pip=False)
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
        run(pip(python, "install", "--quiet", "--no-deps", "--ignore-installed", wheel), env_dir)
    elif DEPS == "floors":
        extras = tuple(e for e in os.environ.get("DP_SYNTH_WHEEL_EXTRAS", "").split(",") if e)
        constraints = env_dir / "floors.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in floors(wheel, extras).items()))
        spec = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
        run(pip(python, "install", "--quiet", "--no-compile", "--constraint", constraints, spec),
            env_dir, timeout=1800)
    else:
        run(pip(python, "install", "--quiet", "--no-compile", wheel), env_dir, timeout=1800)
    if DAGSTER:
        run(pip(python, "install", "--quiet", "--no-compile", f"dagster=={DAGSTER}",
                f"dagster-webserver=={DAGSTER}"), env_dir)
    unmet = run([python, "-c", UNMET], env_dir).stdout.strip()
    assert not unmet, unmet
    return python


def session_folder(tmp_path_factory) -> Path:
    """The temporary folder of the whole test session: under xdist, the one above each worker's
    own (`popen-gw0`, `popen-gw1`), which every worker of the run shares."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(tmp_path_factory, name: str, make: Callable[[Path], Path]) -> Path:
    """`make(folder)` run once per session for `name`, in an empty folder of the session's
    temporary folder, under a file lock: the first caller makes it, the others (another module,
    another worker) wait and get the same path. A failed `make` leaves nothing recorded, so the
    next caller tries again (and fails with its own message)."""
    root = session_folder(tmp_path_factory) / "dp_synth_shared"
    root.mkdir(exist_ok=True)
    made = root / f"{name}.path"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if made.exists():
            return Path(made.read_text())
        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        result = make(folder)
        made.write_text(str(result))
        return result


def shared_wheel(tmp_path_factory) -> Path:
    """The wheel built from this checkout, once per session."""
    return once(tmp_path_factory, "wheel", build_wheel)


def shared_install(tmp_path_factory) -> Path:
    """The python of a venv with the session's wheel installed (`install`), once per session."""
    wheel = shared_wheel(tmp_path_factory)
    return once(tmp_path_factory, f"venv-{DEPS}", lambda folder: install(wheel, folder / "venv"))


def host_env(home: Path, **extra: str) -> dict:
    """The environment a host's commands run in: its own DAGSTER_HOME (telemetry off), none of the
    test run's PYTHONPATH or DP_SYNTH_ settings."""
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME")
           and not k.startswith("DP_SYNTH_")}
    env.update(DAGSTER_HOME=str(home), JAX_ENABLE_COMPILATION_CACHE="false", **extra)
    return env
