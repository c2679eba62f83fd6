"""Shared test helpers: a throwaway dp-synth project (warehouse, datasets.yaml, ledger, public dir)."""

import math
import os
import shutil
import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from dp_synth_assets.core import extras
from dp_synth_assets.example import write_example
from dp_synth_assets.definitions import build_definitions

REPO = Path(__file__).resolve().parents[1]
REPO_DATASETS = REPO / "datasets.yaml"
TEST_DEFAULTS = {"model": {"iterations": 200}}


def needs_extra(feature: str):
    """Skips a test that needs an optional feature (`core.extras.FEATURES`) when its extra is
    not installed."""
    why = f"needs the `{feature}` extra: {extras.install_command(feature)}"
    return pytest.mark.skipif(not extras.available(feature), reason=why)


def without_extra(monkeypatch, feature: str) -> None:
    """Injects the fault "`feature`'s extra is not installed" into this process: its modules are
    not importable (`extras.importable`), and for `jax` an import of mbi raises."""
    modules = set(extras.FEATURES[feature].modules)
    real = extras.importable
    monkeypatch.setattr(extras, "importable", lambda m: m not in modules and real(m))
    if feature == "jax":
        from dp_synth_assets.core.generate import pgm

        def refuse():
            raise ModuleNotFoundError("No module named 'mbi'", name="mbi")

        monkeypatch.setattr(pgm, "import_mbi", refuse)


def _bundled_report() -> dict | None:
    """The repository's example's own `report:` block (None without the `report` extra: the
    definitions would refuse it)."""
    if not extras.available("report"):
        return None
    return yaml.safe_load(REPO_DATASETS.read_text())["datasets"]["example"].get("report")


# the bundled example's `report:` block, for the tests that build the owner-only utility report
# (`make_project(..., report=EXAMPLE_REPORT)`); None without the `report` extra
EXAMPLE_REPORT = _bundled_report()


def example_entry(**dataset_overrides) -> dict:
    """The repository's `example` entry with `dataset_overrides` merged in (shallow: a nested
    dict such as `privacy` replaces the whole key; a value of None removes the key). The entry
    has no `report:` block unless an override gives one: the owner-only utility report costs
    about 10 s of a run (its classifiers and figures), so only the tests of the report, and of
    what a run does around it, build it (`report=EXAMPLE_REPORT`, the bundled block; None
    without the `report` extra, whose definitions would refuse the block)."""
    entry = dict(yaml.safe_load(REPO_DATASETS.read_text())["datasets"]["example"])
    entry.pop("report", None)
    for key, value in {**TEST_DEFAULTS, **dataset_overrides}.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    return entry


def make_project(tmp_path: Path, rows: int = 3000, **dataset_overrides) -> SimpleNamespace:
    """Write the bundled example table (`rows` rows) to `tmp_path/warehouse.duckdb` and a
    datasets.yaml with the repository's example entry (plus overrides) to `tmp_path`.

    `defs_fn()` builds fresh Definitions for these paths (ledger `tmp_path/ledger.sqlite`, public
    zone `tmp_path/public`).
    """
    write_example(Path(tmp_path) / "warehouse.duckdb", rows=rows)
    return registry_project(tmp_path, example_entry(**dataset_overrides))


def registry_project(tmp_path: Path, entry: dict) -> SimpleNamespace:
    """A datasets.yaml holding `entry` as dataset `example` in `tmp_path`, with the project's
    paths (`warehouse.duckdb`, `ledger.sqlite`, `public`) and `defs_fn()` building its
    Definitions."""
    tmp_path = Path(tmp_path)
    warehouse = tmp_path / "warehouse.duckdb"
    ledger = tmp_path / "ledger.sqlite"
    public = tmp_path / "public"
    datasets = tmp_path / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": {"example": entry}}, sort_keys=False))

    def defs_fn():
        return build_definitions(datasets, warehouse, ledger, public)

    return SimpleNamespace(datasets=datasets, warehouse=warehouse, ledger=ledger, public=public,
                           defs_fn=defs_fn)


def dagster_env(project: SimpleNamespace, home: Path,
                dagster_yaml: str = "telemetry:\n  enabled: false\n") -> dict:
    """Environment for a Dagster CLI or webserver process serving `project`: a fresh
    DAGSTER_HOME (`home`, created with `dagster_yaml`) and the DP_SYNTH_* paths."""
    import os

    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(dagster_yaml)
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DP_SYNTH_DATASETS": str(project.datasets),
        "DP_SYNTH_WAREHOUSE": str(project.warehouse),
        "DP_SYNTH_LEDGER": str(project.ledger),
        "DP_SYNTH_PUBLIC": str(project.public),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "JAX_ENABLE_COMPILATION_CACHE": "false",
    }


def run_sql(project: SimpleNamespace, *statements: str) -> None:
    """Run statements on the project's warehouse file (as an upstream load or a test's fault)."""
    import duckdb

    con = duckdb.connect(str(project.warehouse))
    try:
        for statement in statements:
            con.execute(statement)
    finally:
        con.close()


def pre_chain_ledger(path: Path, rows: list[tuple]) -> None:
    """A ledger file as dp-synth wrote it before the hash chain and privacy units: one run
    `r1` of dataset `adult`, `rows` being (stage, kind, rho, parameters JSON)."""
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE privacy_ledger (id INTEGER PRIMARY KEY, ts TEXT NOT NULL, dataset"
                 " TEXT NOT NULL, run_id TEXT NOT NULL, stage TEXT, mechanism TEXT, kind TEXT NOT"
                 " NULL, rho REAL NOT NULL, delta_extra REAL NOT NULL DEFAULT 0, parameters TEXT"
                 " NOT NULL DEFAULT '{}', owner TEXT NOT NULL)")
    conn.executemany("INSERT INTO privacy_ledger (ts, dataset, run_id, stage, kind, rho, "
                     "parameters, owner) VALUES ('2024-01-01T00:00:00+00:00', 'adult', 'r1', ?, ?,"
                     " ?, ?, 'host:1:1')", rows)
    conn.commit()
    conn.close()


def ledger_rows(path: Path) -> int:
    """Rows in a ledger file, read with plain sqlite3 (no verification, no creation)."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM privacy_ledger").fetchone()[0]
    finally:
        conn.close()


class ChargeRecorder:
    """A fake `charge(spend, **params)` for selection methods: keeps every call, in order."""

    def __init__(self):
        self.calls = []

    def __call__(self, spend, **params):
        assert spend.rho > 0, "a mechanism was charged nothing"
        self.calls.append((spend, params))

    @property
    def rho(self) -> float:
        return math.fsum(s.rho for s, _ in self.calls)


def counting_oracle(data: dict, domain: dict[str, int], max_order: int | None = None):
    """A marginal oracle over in-memory code arrays (what the warehouse serves in the pipeline);
    cliques above `max_order` raise KeyError, as for marginals the stage did not compute."""
    import numpy as np

    def oracle(cliques):
        out = {}
        for clique in cliques:
            if max_order is not None and len(clique) > max_order:
                raise KeyError(f"cliques [{clique}] were not computed by the marginals stage")
            counts = np.zeros(tuple(domain[a] for a in clique), dtype=np.int64)
            np.add.at(counts, tuple(data[a] for a in clique), 1)
            out[tuple(clique)] = counts
        return out
    return oracle


def method_budget(method: str, rho: float):
    """A method's default split of `rho` (dp_synth_assets.core.select.METHODS)."""
    from dp_synth_assets.core.select import METHODS, Budget

    info = METHODS[method]
    one_way, score = info.one_way_share * rho, info.score_share * rho
    return Budget(one_way, score, rho - one_way - score)


_RANDOM_IDS = (
    # UUIDs (run ids, GX's ids), with or without dashes, with a letter within their 36
    # characters (a lookahead bounded by the UUID's length: unbounded, it read to the end of every
    # run of dashes from each of its characters, quadratic in a log's ruled lines)
    r"(?<![0-9a-z])(?=[0-9a-f-]{0,35}[a-f])[0-9a-f]{8}(?:-?[0-9a-f]{4}){3}-?[0-9a-f]{12}"
    r"(?![0-9a-z])",
    # hex digests (data versions) and tokens (the 12-hex suffix of GX's asset names): 8 or more
    # hex characters with a letter other than e, so a float's mantissa and exponent
    # ("2345678901234567e+14") are never taken for one
    r"(?<![0-9a-z])(?=[0-9a-f]*[a-df])[0-9a-f]{8,}(?![0-9a-z])",
)


def without_random_ids(text: str) -> str:
    """`text` (lower-cased by the caller or not) with random identifiers blanked out: a leak
    scan looks for the digits of an exact statistic, and the digits inside a random hex id
    (a UUID's `9e18`, `3002`; a data version's "4062795494e4", read as 4.06e13) are not a
    statement of any value. Runs of hex with a letter other than e only, so a planted run of
    digits, or a float written with an exponent, is never removed."""
    import re

    for pattern in _RANDOM_IDS:
        text = re.sub(pattern, " ", text, flags=re.IGNORECASE)
    return text


def record_fetches(monkeypatch, engine_class, methods=("fetchnumpy", "fetchone")) -> list[int]:
    """The number of rows each query of a scan engine (`engine_class`, core/scans.py) returns
    while the test runs: a list the caller reads after the scans (`fetchone`: one row)."""
    fetched: list[int] = []
    for method in methods:
        original = getattr(engine_class, method)

        def recording(self, statement, params=None, _original=original):
            out = _original(self, statement, params)
            fetched.append(max((len(v) for v in out.values()), default=0)
                           if isinstance(out, dict) else 1)
            return out
        monkeypatch.setattr(engine_class, method, recording)
    return fetched


def counted_cells(spec, domain: dict[str, int]) -> int:
    """The cells of every marginal the spec's method counts over `domain`: a bound on the rows
    of any aggregate query, set by the domain alone (never by the source's rows)."""
    from dp_synth_assets.core.measure import clique_size
    from dp_synth_assets.core.select import required_cliques

    return sum(clique_size(c, domain) for c in required_cliques(spec.method, domain,
                                                                 spec.selection))


def stage_logs(instance, run_id: str, dataset: str, stage: str) -> list:
    """The event-log records of one stage of `dataset` in a run: those of its stage op
    (`<dataset>_stages...`) from the line that opens the stage to the line that opens the next."""
    import re

    import dagster as dg

    from dp_synth_assets.pipeline import stage_started

    records, inside = [], False
    for record in instance.all_logs(run_id):
        if not (record.step_key or "").startswith(f"{dataset}_stages"):
            continue
        if record.dagster_event is None and re.fullmatch(r"stage \w+ started",
                                                         record.user_message or ""):
            inside = record.user_message == stage_started(dg.AssetKey([dataset, stage]))
            continue
        if inside:
            records.append(record)
    return records


# ---- a throwaway PostgreSQL server ----------------------------------------------------------------

PG_BIN = Path(os.environ.get("DP_SYNTH_PG_BIN", "/usr/lib/postgresql/15/bin"))


class NoPostgres(RuntimeError):
    """The PostgreSQL server binaries (or a way to run them) are missing: the message says which."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server(skip: bool = True):
    """A PostgreSQL server of its own: initdb into a temporary directory, started by pg_ctl on a
    free loopback port (as the `postgres` user when the tests run as root), stopped after.
    Yields `.dsn` (libpq key words), `.url` (postgresql://...) and `.data` (its directory).
    Without the binaries (DP_SYNTH_PG_BIN, default Debian's; `.ci/install-postgres` installs
    them) the test skips, saying so (`skip=False`: raises NoPostgres, for bench/)."""
    why = None
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        why = f"PostgreSQL binaries not found in {PG_BIN} (set DP_SYNTH_PG_BIN)"
    as_user = []
    if why is None and os.geteuid() == 0:
        if shutil.which("runuser") is None:
            why = "running as root without runuser: cannot start PostgreSQL"
        as_user = ["runuser", "-u", "postgres", "--"]
    if why is not None:
        if skip:
            pytest.skip(why)
        raise NoPostgres(why)
    base = Path(f"/tmp/dp_synth_pg_{os.getpid()}_{free_port()}")
    base.mkdir(mode=0o700)
    if as_user:
        shutil.chown(base, "postgres", "postgres")
    data, port = base / "data", free_port()
    subprocess.run(as_user + [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres",
                              "--auth=trust", "--no-sync", "-E", "UTF8"],
                   check=True, capture_output=True)
    subprocess.run(as_user + [str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(base / "log"),
                              "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1 "
                                    "-c fsync=off -c max_connections=200", "-w", "start"],
                   check=True, capture_output=True)
    server = SimpleNamespace(dsn=f"host=127.0.0.1 port={port} user=postgres dbname=postgres",
                             url=f"postgresql://postgres@127.0.0.1:{port}/postgres",
                             port=port, data=data)
    try:
        yield server
    finally:
        subprocess.run(as_user + [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate",
                                  "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def without_consistency():
    """Preprocessing with `consistent_counts` replaced by the finest level's own noisy counts
    (the density before consistency), to compare the two on the same exact aggregates."""
    from dp_synth_assets.core import preprocess

    original = preprocess.consistent_counts
    preprocess.consistent_counts = lambda levels: levels[-1][1]
    try:
        yield
    finally:
        preprocess.consistent_counts = original
