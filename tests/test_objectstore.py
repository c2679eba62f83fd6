"""The public and private zones on object storage: the whole pipeline of the bundled example
against a local S3-compatible server (moto's server mode, started here from the Python package
on a free loopback port), with the public zone, the private zone's folder and the IO manager's
pickles all on s3://.

What must hold: the run succeeds and every check passes; the published plan and Parquet are
readable from the bucket through the pointer object `current`; nothing private is in the public
bucket (the leak scan of tests/test_leak_scan.py over its objects, and none of the private
zone's files); a failing run leaves the previous published set readable and its private log in
the private bucket; the run lock is a conditional write; a missing bucket, an unreachable
endpoint, a store without conditional writes or a missing extra is refused when the definitions
load, spending nothing.
"""

import importlib.util
import json
import socket
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from tests.helpers import EXAMPLE_REPORT, make_project, needs_extra, without_extra

pytestmark = [
    needs_extra("objectstore"),
    pytest.mark.skipif(importlib.util.find_spec("moto") is None,
                       reason="needs moto[server] (the `test` extra)"),
    pytest.mark.filterwarnings("ignore:Starting in dagster 1.11:UserWarning",
                               "ignore::dagster.BetaWarning"),
]

PUBLIC = "s3://dp-public/zone"
PRIVATE = "s3://dp-private/zone"
DATASET = "example"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_filesystems() -> None:
    """Forget fsspec's cached S3 clients (they keep the endpoint they were made with)."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on a free loopback port, this process's AWS settings pointing at it
    (fsspec finds its credentials and endpoint in the environment, as in a deployment), and
    the two buckets. Yields an s3fs file system."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # moto keeps its buckets per process, across servers: each module starts from none
    import requests

    requests.post(f"http://127.0.0.1:{port}/moto-api/reset", timeout=30).raise_for_status()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                            "AWS_DEFAULT_REGION": "us-east-1",
                            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}.items():
            mp.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            mp.delenv(name, raising=False)
        fresh_filesystems()
        import s3fs

        fs = s3fs.S3FileSystem(use_listings_cache=False)  # sees what the runs write
        for bucket in ("dp-public", "dp-private"):
            fs.mkdir(bucket)
        try:
            yield fs
        finally:
            fresh_filesystems()
            server.stop()


def s3_definitions(project, public: str = PUBLIC, private: str = PRIVATE):
    from dp_synth_assets.definitions import build_definitions

    return build_definitions(project.datasets, project.warehouse, project.ledger, public,
                             private_dir=private)


def materialize(defs, instance):
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=instance, raise_on_error=False)


def objects(fs, root: str) -> list[str]:
    return sorted(fs.find(root.removeprefix("s3://")))


@pytest.fixture(scope="module")
def s3run(s3, tmp_path_factory):
    """The example, with the leak scan's planted rows, run once with both zones on S3; its fit
    is parallel_pgm's graph of units, which pass between the graph's ops through dp-synth's IO
    manager (pickles on the bucket)."""
    from tests.test_leak_scan import PLANTED_ROWS
    from tests.helpers import run_sql

    project = make_project(tmp_path_factory.mktemp("s3"), rows=2400, report=EXAMPLE_REPORT,
                           privacy={"epsilon": 1.0, "delta": 1e-9,
                                    "limit": {"epsilon": 3.0, "delta": 1e-8}},
                           generator="parallel_pgm", model={"iterations": 100, "workers": 2})
    run_sql(project, *PLANTED_ROWS)
    instance = dg.DagsterInstance.ephemeral()
    temporary = tmp_path_factory.mktemp("temporary")  # where the run's local copies go
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(temporary))
        defs = s3_definitions(project)
        result = materialize(defs, instance)
    project.left_behind = sorted(p.name for p in temporary.iterdir()
                                 if p.name.startswith(".dp_synth."))
    return project, defs, instance, result


@pytest.mark.e2e
def test_the_whole_pipeline_runs_with_both_zones_and_the_pickles_on_s3(s3, s3run):
    import pyarrow.parquet as pq

    from dp_synth_assets.core.domain import EncodingPlan

    project, defs, instance, result = s3run
    assert result.success
    from dp_synth_assets.checks.suites import CHECKS

    checks = result.get_asset_check_evaluations()
    assert len(checks) == len(CHECKS) and all(c.passed for c in checks), \
        [(c.check_name, c.passed) for c in checks]
    # the published set, found through the pointer object
    run_id = s3.cat_file("dp-public/zone/example/current").decode()
    assert run_id == result.run_id
    run_folder = f"dp-public/zone/example/runs/{run_id}"
    plan = EncodingPlan.from_json(s3.cat_file(f"{run_folder}/plan.json").decode())
    assert plan.columns
    with s3.open(f"{run_folder}/synthetic.parquet", "rb") as f:
        table = pq.read_table(f)
    assert table.num_rows > 0 and set(table.column_names) == set(plan.columns)
    manifest = json.loads(s3.cat_file(f"{run_folder}/manifest.json"))
    assert manifest["stamps"]["synthetic"]["run"] == run_id
    # GX's results and Data Docs uploaded; the IO manager's pickles on the bucket
    names = objects(s3, PUBLIC)
    assert {f"{run_folder}/checks/{c.check_name}.json" for c in checks} <= set(names)
    assert "dp-public/zone/example/data_docs/index.html" in names
    assert any(n.startswith("dp-public/zone/.dp_synth_io/") for n in names)
    assert not any(".dp_synth-probe" in n for n in names)  # the load's probes are removed
    # the owner-only report in the private bucket; nothing of either zone on the local disk
    private = objects(s3, PRIVATE)
    assert any(n.endswith("/example/report.json") for n in private), private
    local = {p.name for p in Path(project.warehouse).parent.iterdir()}
    assert not local & {"public", "private", "zone"}, local
    # the local copies (the Parquet export, the checks' Parquet, the Data Docs) are removed
    assert project.left_behind == []
    # the lock object is gone once the run published
    assert "dp-public/zone/example/run.lock" not in names


@pytest.mark.e2e
def test_nothing_private_is_in_the_public_bucket(s3, s3run):
    """The leak scan of tests/test_leak_scan.py over every object of the public bucket (names,
    text, the Parquet's schema and metadata) and the run's events; and no file of the private
    zone (private log, utility report, change-detection key and state) in it."""
    import pyarrow.parquet as pq

    from dp_synth_assets.core.config import load_registry
    from tests.test_leak_scan import (NOISY_STATISTICS, assert_no_leak, noisy_of,
                                      published_texts, without_noisy)

    project, defs, instance, result = s3run
    spec = load_registry(project.datasets)[DATASET]
    channels = published_texts(instance, project, [result.run_id])
    bucket = channels.setdefault("the public bucket", [])
    for name in objects(s3, "s3://dp-public"):
        bucket.append(name)
        suffix = Path(name).suffix
        if suffix == ".html" or {"checks", "data_docs"} & set(Path(name).parts):
            channels[NOISY_STATISTICS].append(s3.cat_file(name).decode(errors="replace"))
        elif suffix == ".json":
            value = json.loads(s3.cat_file(name))
            bucket.append(json.dumps(without_noisy(value)))
            channels[NOISY_STATISTICS].append(json.dumps(noisy_of(value)))
        elif suffix in (".md", ".txt", ".csv", ".yaml", ""):
            bucket.append(s3.cat_file(name).decode(errors="replace"))
        elif suffix == ".parquet":
            with s3.open(name, "rb") as f:
                schema = pq.read_schema(f)
            bucket += [repr(schema), repr(schema.metadata)]
        private_names = ("private.log", "report.json", "report.html", "change_detection.key",
                         "change_state.json")
        assert Path(name).name not in private_names, name
    noisy = json.loads(s3.cat_file(
        f"dp-public/zone/example/runs/{result.run_id}/measurements.json"))["noisy_total"]
    assert_no_leak(channels, project, spec, noisy_total=noisy, public_zone=PUBLIC)


@pytest.mark.e2e
def test_a_failing_run_leaves_the_published_set_readable(s3, s3run, monkeypatch):
    """A run that fails in its measurements stage (an injected fault, after it wrote its plan
    and selection into its own run folder) publishes nothing: `current` still names the first
    run, whose plan and Parquet read as before; the dataset is free; the failure's details are
    in the private log in the private bucket, the public message names only where that log
    is."""
    from dp_synth_assets.core import stages

    project, defs, instance, first = s3run
    before = s3.cat_file(f"dp-public/zone/example/runs/{first.run_id}/synthetic.parquet")

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault quoting a private value")

    monkeypatch.setattr(stages, "measure", broken)
    result = materialize(s3_definitions(project), instance)
    assert not result.success
    assert s3.exists(f"dp-public/zone/example/runs/{result.run_id}/plan.json")
    assert s3.cat_file("dp-public/zone/example/current").decode() == first.run_id
    assert s3.cat_file(
        f"dp-public/zone/example/runs/{first.run_id}/synthetic.parquet") == before
    assert not s3.exists("dp-public/zone/example/run.lock")
    log = s3.cat_file("dp-private/zone/example/private.log").decode()
    assert "injected fault quoting a private value" in log and result.run_id in log
    failures = [e.event_specific_data.error.message for e in result.all_events
                if e.event_type_value == "STEP_FAILURE"]
    assert failures and all("injected" not in m for m in failures)
    assert any(f"{PRIVATE}/example/private.log" in m for m in failures), failures


def test_the_run_lock_on_s3_is_one_conditional_write(s3):
    """Two runs: one takes the dataset, the other finds it held and times out naming it; a lock
    whose run has finished is taken over; release frees it."""
    from dp_synth_assets.infra.runs import RunWaitTimeout, dataset_lock

    lock = dataset_lock(f"{PUBLIC}/locked", "locked")
    assert lock.acquire("run-a", owner="elsewhere:1:1", timeout=0)
    assert not lock.acquire("run-a", owner="elsewhere:1:1", timeout=0)  # re-entrant
    with pytest.raises(RunWaitTimeout, match="run run-a"):
        dataset_lock(f"{PUBLIC}/locked", "locked").acquire("run-b", timeout=0, poll=0)
    assert lock.acquire("run-c", timeout=0, finished=lambda run: run == "run-a")
    assert lock.holder()["run_id"] == "run-c"
    assert not lock.release("run-a") and lock.release("run-c")
    assert lock.holder() is None and not s3.exists("dp-public/zone/locked/run.lock")


def assert_spent_nothing(project) -> None:
    from tests.helpers import ledger_rows

    assert not project.ledger.exists() or ledger_rows(project.ledger) == 0


def test_a_missing_bucket_is_refused_at_load_spending_nothing(s3, tmp_path):
    from dp_synth_assets.infra.store import ZoneError

    project = make_project(tmp_path, rows=200)
    with pytest.raises(ZoneError, match="public zone s3://no-such-bucket/zone cannot be written"):
        s3_definitions(project, public="s3://no-such-bucket/zone")
    with pytest.raises(ZoneError, match="private zone s3://no-such-bucket/p cannot be written"):
        s3_definitions(project, private="s3://no-such-bucket/p")
    assert_spent_nothing(project)


def test_a_read_only_bucket_is_refused_at_load_spending_nothing(s3, tmp_path, monkeypatch):
    """Injected fault: the store answers every write with Access Denied (credentials that may
    only read). Each zone is refused when the definitions load, naming it and the fix."""
    import s3fs

    from dp_synth_assets.infra.store import ZoneError

    async def denied(self, path, data, *args, **kwargs):
        raise PermissionError(f"Access Denied: {path}")

    monkeypatch.setattr(s3fs.S3FileSystem, "_pipe_file", denied)
    project = make_project(tmp_path, rows=200)
    fresh_filesystems()  # a cached instance keeps the methods it was made with: the fault's
    try:
        with pytest.raises(ZoneError, match=r"public zone s3://dp-public/zone cannot be "
                           r"written.*PermissionError: Access Denied.*credentials"):
            s3_definitions(project)
    finally:
        fresh_filesystems()
    assert_spent_nothing(project)


def test_an_unreachable_endpoint_is_refused_at_load(s3, tmp_path, monkeypatch):
    from dp_synth_assets.infra.store import ZoneError

    project = make_project(tmp_path, rows=200)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    fresh_filesystems()
    try:
        with pytest.raises(ZoneError, match="endpoint is reachable.*nothing was run or spent"):
            s3_definitions(project)
    finally:
        fresh_filesystems()
    assert_spent_nothing(project)


def test_a_store_without_conditional_writes_is_refused_at_load(s3, tmp_path, monkeypatch):
    """Injected fault: the store ignores If-None-Match (overwrites), as some S3-compatible
    servers do; the run lock cannot hold there, so the definitions refuse to load."""
    import s3fs

    from dp_synth_assets.infra.store import ZoneError

    real = s3fs.S3FileSystem._pipe_file

    async def ignoring(self, path, data, *args, mode="overwrite", **kwargs):
        return await real(self, path, data, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_pipe_file", ignoring)
    project = make_project(tmp_path, rows=200)
    fresh_filesystems()  # a cached instance keeps the methods it was made with: the fault's
    try:
        with pytest.raises(ZoneError, match="ignores conditional writes"):
            s3_definitions(project)
    finally:
        fresh_filesystems()
    assert not [n for n in objects(s3, PUBLIC) if ".dp_synth-probe" in n]


def test_a_url_without_the_extra_names_the_pip_command(tmp_path, monkeypatch):
    from dp_synth_assets.infra.store import ZoneError

    project = make_project(tmp_path, rows=200)
    if importlib.util.find_spec("gcsfs") is None:  # another store: fsspec names its package
        with pytest.raises(ZoneError, match="gs://bucket/zone cannot be opened.*gcsfs"):
            s3_definitions(project, public="gs://bucket/zone", private=None)
    without_extra(monkeypatch, "objectstore")
    with pytest.raises(ZoneError, match=r"pip install 'dagster-dp-synth\[objectstore\]'"):
        s3_definitions(project, private=None)
    assert_spent_nothing(project)


@pytest.mark.e2e
def test_the_report_reads_the_published_set_through_the_pointer(s3, s3run, monkeypatch,
                                                                 capsys):
    """`python -m dp_synth_assets.report` with DP_SYNTH_PUBLIC and DP_SYNTH_PRIVATE at the
    buckets: the Parquet of the set `current` names, every check passed."""
    from dp_synth_assets import report

    project, defs, instance, first = s3run
    for name, value in {"DP_SYNTH_DATASETS": project.datasets, "DP_SYNTH_LEDGER": project.ledger,
                        "DP_SYNTH_WAREHOUSE": project.warehouse, "DP_SYNTH_PUBLIC": PUBLIC,
                        "DP_SYNTH_PRIVATE": PRIVATE}.items():
        monkeypatch.setenv(name, str(value))
    published = s3.cat_file("dp-public/zone/example/current").decode()
    assert report.main(DATASET) == 0
    out = capsys.readouterr().out
    assert f"{PUBLIC}/example/runs/{published}/synthetic.parquet" in out
    from dp_synth_assets.checks.suites import CHECKS

    assert out.count(" passed") == len(CHECKS)


def test_the_environment_sets_the_private_zone(tmp_path):
    from dp_synth_assets.definitions import environment_paths

    paths = environment_paths({"DP_SYNTH_PRIVATE": "s3://other-bucket/private"},
                              project_dir=tmp_path)
    assert paths["private_dir"] == "s3://other-bucket/private"
    assert environment_paths({}, project_dir=tmp_path)["private_dir"] is None


def test_racing_runs_take_the_lock_once(s3):
    """Eight runs try to take one dataset at once: the store's conditional write lets exactly
    one create the lock object; the others find it held."""
    from concurrent.futures import ThreadPoolExecutor

    from dp_synth_assets.infra.runs import RunWaitTimeout, dataset_lock

    def take(i: int) -> bool:
        try:
            return dataset_lock(f"{PUBLIC}/raced", "raced").acquire(
                f"run-{i}", owner="elsewhere:1:1", timeout=0, poll=0)
        except RunWaitTimeout:
            return False

    with ThreadPoolExecutor(8) as pool:
        taken = list(pool.map(take, range(8)))
    assert taken.count(True) == 1
    holder = dataset_lock(f"{PUBLIC}/raced", "raced").holder()["run_id"]
    assert holder == f"run-{taken.index(True)}"


@pytest.mark.e2e
def test_a_multiprocess_run_passes_its_units_through_the_bucket(s3, tmp_path):
    """The Dagster CLI runs the dataset's job (`generator: parallel_pgm`, `model.workers: 2`)
    on Dagster's multiprocess executor: the model's units of work are separate steps, in
    separate processes (no process pool of ours), whose tables make one model; the units'
    pickles pass between them through the public bucket, the set is published there; nothing of
    either zone on the local disk."""
    import subprocess
    import sys

    import duckdb

    from tests.helpers import REPO, dagster_env, example_entry

    columns = example_entry()["columns"]
    project = make_project(tmp_path / "project", rows=2000, generator="parallel_pgm",
                           model={"iterations": 100, "workers": 2}, report=None, columns={
                               c: columns[c] for c in ("age", "sex", "race", "education",
                                                       "occupation", "income", "newsletter")})
    public, private = "s3://dp-public/cli", "s3://dp-private/cli"
    env = {**dagster_env(project, tmp_path / "dagster_home"),
           "DP_SYNTH_PUBLIC": public, "DP_SYNTH_PRIVATE": private}
    done = subprocess.run([str(Path(sys.executable).parent / "dagster"), "job", "execute", "-f",
                           str(REPO / "definitions.py"), "-j", "example_synthesis"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        [record] = instance.get_runs()
        assert record.status == dg.DagsterRunStatus.SUCCESS
        units = {e.dagster_event.step_key: e.dagster_event.pid
                 for e in instance.all_logs(record.run_id)
                 if e.dagster_event and e.dagster_event.event_type_value == "STEP_START"
                 and "model_fit_unit" in e.dagster_event.step_key}
        assert len(units) == 2, units  # two units of maximal cliques, mapped steps
        assert len(set(units.values())) == 2  # each in its own process
        model = instance.get_latest_materialization_event(dg.AssetKey(["example", "model"]))
        metadata = model.asset_materialization.metadata
        assert metadata["generator"].value == "parallel_pgm" and metadata["units"].value == 2
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM synthetic.example").fetchone()[0] > 0
    finally:
        con.close()
    assert s3.cat_file("dp-public/cli/example/current").decode() == record.run_id
    pickles = [n for n in objects(s3, public) if n.startswith("dp-public/cli/.dp_synth_io/")]
    assert any("fit_unit" in n for n in pickles), pickles
    local = {p.name for p in Path(project.warehouse).parent.iterdir()}
    assert not local & {"public", "private"}, local


def test_a_staged_folder_is_synchronized_back_and_removed(s3):
    """What a library writes into the local copy of a folder (GX's Data Docs) reaches the
    bucket, what it removed is removed there, and the local copy is gone."""
    from dp_synth_assets.infra.store import staged_folder

    with staged_folder(f"{PUBLIC}/staged") as first:
        (first / "pages").mkdir()
        (first / "index.html").write_text("one")
        (first / "pages" / "old.html").write_text("old")
    with staged_folder(f"{PUBLIC}/staged") as second:
        assert (second / "pages" / "old.html").read_text() == "old"
        (second / "pages" / "old.html").unlink()
        (second / "pages" / "new.html").write_text("new")
    assert objects(s3, f"{PUBLIC}/staged") == ["dp-public/zone/staged/index.html",
                                               "dp-public/zone/staged/pages/new.html"]
    assert not first.exists() and not second.exists()


def test_a_stale_lock_is_taken_over_once_and_only_its_holder_frees_it(s3):
    """Over one stale lock, of two runs that judged it stale only the first replaces it (the
    second's replace-if-unchanged finds another version); a run's release never deletes a lock
    written after it read it."""
    from dp_synth_assets.infra.runs import dataset_lock

    root = f"{PUBLIC}/stale"
    assert dataset_lock(root, "stale").acquire("dead", owner="elsewhere:1:1", timeout=0)
    first, second = dataset_lock(root, "stale"), dataset_lock(root, "stale")
    assert first.holder()["run_id"] == second.holder()["run_id"] == "dead"  # both read it
    assert first._take_over(first.holder(), "one", "elsewhere:1:1")
    assert not second._take_over({"run_id": "dead"}, "two", "elsewhere:1:1")
    assert dataset_lock(root, "stale").holder()["run_id"] == "one"
    # "one" reads its lock, then another run replaces it (e.g. took it over as stale)
    reader = dataset_lock(root, "stale")
    assert reader.holder()["run_id"] == "one"
    assert dataset_lock(root, "stale").acquire("three", timeout=0, finished=lambda r: r == "one")
    from dp_synth_assets.infra.store import replace_object

    assert not replace_object(reader.path, None, reader._version)  # the old version is gone
    assert dataset_lock(root, "stale").holder()["run_id"] == "three"
    # a lock object that is not a lock (truncated, edited) is replaced, not waited on forever
    s3.pipe_file("dp-public/zone/stale/run.lock", b"not json")
    assert dataset_lock(root, "stale").acquire("four", timeout=0)


@pytest.mark.e2e
def test_a_family_publishes_its_parquet_pair_on_s3(s3, tmp_path):
    """The bundled relational example (customers and their orders) with both zones on S3: the
    run succeeds, and the child's published set, read through its pointer object, holds the
    Parquet pair (the children and the parent rows they were drawn for), every foreign key
    resolving in it."""
    import pyarrow.parquet as pq

    from tests.test_relational_dagster import assert_pair_resolves, project

    public, private = "s3://dp-public/family", "s3://dp-private/family"
    _, local = project(tmp_path)  # writes the tables and datasets.yaml; local zones unused
    from dp_synth_assets.definitions import build_definitions

    defs = build_definitions(tmp_path / "datasets.yaml", tmp_path / "w.duckdb",
                             tmp_path / "ledger.sqlite", public, private_dir=private)
    result = materialize(defs, dg.DagsterInstance.ephemeral())
    assert result.success
    root = public.removeprefix("s3://") + "/orders"
    run = s3.cat(f"{root}/current").decode().strip()
    with s3.open(f"{root}/runs/{run}/parent.parquet", "rb") as f:
        parents = pq.read_table(f)
    with s3.open(f"{root}/runs/{run}/synthetic.parquet", "rb") as f:
        children = pq.read_table(f)
    assert_pair_resolves(parents, children)
    manifest = json.loads(s3.cat(f"{root}/runs/{run}/manifest.json"))
    assert manifest["family"]["parent"] == "customers"
