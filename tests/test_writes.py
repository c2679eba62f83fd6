"""A run checks its writes before it reserves budget, and names the volume of a write that fails
after (dp_synth_assets/writes.py, core/volumes.py).

Real runs on real DuckDB files and real Dagster instances. The faults: a zone whose path runs
through a regular file (every write there fails with NotADirectoryError, even for root, who
writes read-only folders), a full volume (`shutil.disk_usage` reporting little free space) and
a write that raises ENOSPC or DuckDB's IOException after budget is spent.
"""

import errno
import shutil
from collections import namedtuple
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from dp_synth_assets.core import volumes
from dp_synth_assets.infra import store
from dp_synth_assets.infra.store import published_run
from dp_synth_assets.core.synthesize import table_stamp
from dp_synth_assets.definitions import build_definitions
from dp_synth_assets.resources.ledger import PrivacyLedger
from dp_synth_assets.example import write_example
from tests.helpers import example_entry, ledger_rows, make_project, registry_project
from tests.test_perimeter import assert_spent_only_what_was_charged

DATASET = "example"
CANARY = "SECRET_CANARY_4242"
Usage = namedtuple("Usage", "total used free")


def materialize(defs, instance=None):
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=instance or dg.DagsterInstance.ephemeral(),
                          raise_on_error=False)


def failure_messages(result) -> list[str]:
    return [e.event_specific_data.error.message for e in result.all_events
            if e.event_type_value == "STEP_FAILURE"]


def failure_errors(result) -> list:
    return [e.event_specific_data.error for e in result.all_events
            if e.event_type_value == "STEP_FAILURE"]


def outputs(project) -> tuple:
    """What a run publishes: the pointer of the published set, its files, the synthetic table's
    stamp, and the ledger's rows."""
    root = project.public / DATASET
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        stamp = table_stamp(con, f"synthetic.{DATASET}")
    files = sorted((p.name, p.stat().st_size) for p in (root / "current").iterdir()) \
        if (root / "current").exists() else []
    return published_run(root), files, stamp, ledger_rows(project.ledger)


def project_with_a_run(tmp_path, **overrides):
    """The example (800 source rows, no report) with `overrides`, after one successful run."""
    write_example(tmp_path / "warehouse.duckdb", rows=800)
    project = registry_project(tmp_path, example_entry(report=None, **overrides))
    result = materialize(project.defs_fn())
    assert result.success
    return project


def assert_charged_only(project, run_id: str) -> float:
    """Nothing stays reserved and the spend is this run's charges; the charged rho."""
    assert_spent_only_what_was_charged(project, run_id)
    return sum(e["rho"] for e in PrivacyLedger(project.ledger).events(DATASET)
               if e["run_id"] == run_id and e["kind"] == "charge")


@pytest.mark.parametrize("zone", ["public", "private"])
def test_an_unwritable_zone_is_refused_before_anything_is_spent(tmp_path, zone):
    """A zone that cannot be written (its path runs through a file) refuses the run before its
    budget is reserved: the message names the zone's path, the write's error and the fix; the
    ledger and the previous run's outputs are untouched. Before the check, an unwritable
    private zone let the run spend (its log is written only on failure) and an unwritable public
    zone was reported as "the source or the warehouse could not be read"."""
    project = project_with_a_run(tmp_path)
    before = outputs(project)
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where a folder should be\n")
    public, private = project.public, None
    if zone == "public":
        public = blocker / "public"
        where = public / DATASET
    else:
        private = where = blocker / "private"
    defs = build_definitions(project.datasets, project.warehouse, project.ledger, public,
                             private_dir=private)
    result = materialize(defs)
    assert not result.success
    [message] = failure_messages(result)
    assert f"the {zone} zone {where} cannot be written (NotADirectoryError: Not a directory)" \
        in message, message
    assert "Nothing was reserved or spent" in message and f"{zone}_dir" in message
    assert "could not be read" not in message
    assert outputs(project) == before  # the ledger has no new row: not even a reservation


def test_a_full_volume_is_refused_before_anything_is_spent(tmp_path, monkeypatch):
    """A volume with too little room for the run's estimated outputs (here 5 MB free, a fault
    injected into `shutil.disk_usage`) refuses the run before it reserves anything: the
    message names the zones on that volume, the free and the needed megabytes and how the need
    was estimated. Before the check the run spent its budget, then wrote."""
    project = project_with_a_run(tmp_path, rows=1000)
    before = outputs(project)
    real = shutil.disk_usage

    def full(path):
        usage = real(path)
        if Path(path).resolve().is_relative_to(tmp_path.resolve()):
            return Usage(usage.total, usage.total - 5 * volumes.MB, 5 * volumes.MB)
        return usage

    monkeypatch.setattr(shutil, "disk_usage", full)
    result = materialize(project.defs_fn())
    assert not result.success
    [message] = failure_messages(result)
    assert f"the public zone {project.public / DATASET}" in message, message
    assert f"the warehouse {project.warehouse}" in message
    assert "has 5 MB free" in message and "Nothing was reserved or spent" in message
    # 1000 rows x 12 columns x 8 bytes x 2, twice, and the floor of each of the three zones
    needed = (2 * 1000 * 12 * volumes.BYTES_PER_VALUE * volumes.MARGIN
              + 3 * volumes.FLOOR_BYTES) // volumes.MB
    assert f"need about {needed} MB there" in message
    assert "1000 rows x 12 columns x 8 bytes x 2" in message
    assert outputs(project) == before


def test_a_write_failing_after_the_spend_names_the_volume(tmp_path, monkeypatch):
    """The public volume fills up after the run has spent (a fault: the selection's write raises
    ENOSPC): the failure names the public zone and the error, not a read, and the ledger keeps
    what the run charged, with nothing left reserved."""
    project = make_project(tmp_path, rows=800, report=None)
    real = store.atomic_write

    def full(path, data, *args, **kwargs):
        if str(path).endswith("selection.json"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data, *args, **kwargs)

    monkeypatch.setattr(store, "atomic_write", full)
    result = materialize(project.defs_fn())
    assert not result.success
    [message] = failure_messages(result)
    assert (f"writing selection.json to the public zone {project.public / DATASET} failed "
            "(OSError: No space left on device)") in message, message
    assert "could not be read" not in message and "stays charged" in message
    [error] = failure_errors(result)
    assert error.cause is None and error.context is None
    assert assert_charged_only(project, result.run_id) > 0


@pytest.mark.parametrize("fault", ["parquet", "table"])
def test_the_synthetic_write_failing_names_its_volume_and_no_engine_text(tmp_path, monkeypatch,
                                                                          fault):
    """DuckDB's IOException while the synthetic Parquet (public zone) or the synthetic table
    (warehouse) is written: the failure names that volume and the exception type only, never
    DuckDB's text, and chains nothing; the budget the run charged stays charged."""
    from dp_synth_assets.core import synthesize

    project = make_project(tmp_path, rows=800, report=None)

    def broken(*args, **kwargs):
        raise duckdb.IOException(f'Could not write file "{CANARY}": No space left on device')

    monkeypatch.setattr(synthesize, "export_parquet" if fault == "parquet" else "decode", broken)
    result = materialize(project.defs_fn())
    assert not result.success
    [message] = failure_messages(result)
    volume = (f"synthetic.parquet to the public zone {project.public / DATASET}"
              if fault == "parquet" else
              f"the synthetic table to the warehouse {project.warehouse}")
    assert f"writing {volume} failed (IOException)" in message, message
    assert CANARY not in message and "No space" not in message
    [error] = failure_errors(result)
    assert error.cause is None and error.context is None
    assert assert_charged_only(project, result.run_id) > 0


def test_a_warehouse_filling_up_in_a_private_stage_is_named_as_a_write(tmp_path, monkeypatch):
    """The warehouse's volume fills while `marginals` writes its table (faults: DuckDB's
    IOException, and the volume reporting 0 bytes free from then on): the public failure says
    that the write to the warehouse failed and why, not that the source could not be read."""
    from dp_synth_assets.core import stages

    project = make_project(tmp_path, rows=800, report=None)
    real, filled = shutil.disk_usage, []

    def usage(path):
        found = real(path)
        return Usage(found.total, found.total, 0) if filled else found

    def broken(*args, **kwargs):
        filled.append(True)
        raise duckdb.IOException(f'Could not write file "{CANARY}": No space left on device')

    monkeypatch.setattr(shutil, "disk_usage", usage)
    monkeypatch.setattr(stages, "marginals", broken)
    result = materialize(project.defs_fn())
    assert not result.success
    [message] = failure_messages(result)
    assert "failed (IOException; its volume has 0 MB free)" in message, message
    assert f"writing to the warehouse {project.warehouse} failed" in message
    assert "could not be read" not in message and CANARY not in message
    assert "stays charged" in message


def test_the_estimate_adds_up_zones_on_one_volume():
    out = volumes.estimate(rows=1000, columns=10, synthetic=True)
    table = 1000 * 10 * volumes.BYTES_PER_VALUE * volumes.MARGIN
    assert out.needs == {volumes.PUBLIC: volumes.FLOOR_BYTES + table,
                         volumes.PRIVATE: volumes.FLOOR_BYTES,
                         volumes.WAREHOUSE: volumes.FLOOR_BYTES + table}
    assert volumes.estimate(None, 10, True).needs[volumes.PUBLIC] == volumes.FLOOR_BYTES
    assert volumes.estimate(1000, 10, False).needs[volumes.WAREHOUSE] == volumes.FLOOR_BYTES
    places = {z: f"/{z}" for z in out.needs}
    need = sum(out.needs.values())
    one = {z: (1, need) for z in out.needs}  # one device: the three needs add up, and fit
    assert volumes.shortfalls(out.needs, places, one) == []
    [short] = volumes.shortfalls(out.needs, places, {z: (1, need - 1) for z in out.needs})
    assert short.needed == need and short.free == need - 1 and len(short.zones) == 3
    apart = {volumes.PUBLIC: (1, need - 1), volumes.PRIVATE: None, volumes.WAREHOUSE: (2, need)}
    assert volumes.shortfalls(out.needs, places, apart) == []  # each fits on its own device


def test_rows_same_is_estimated_from_the_published_noisy_count(tmp_path, monkeypatch):
    """With `rows: same`, the estimate reads the noisy row count of the published measurements
    (public), never the source."""
    from dp_synth_assets.infra.store import RunStore

    project = project_with_a_run(tmp_path)
    noisy = RunStore(project.public / DATASET, DATASET).measurements().noisy_total
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10 * volumes.MB, 0, volumes.MB))
    result = materialize(project.defs_fn())
    [message] = failure_messages(result)
    assert f"{max(round(noisy), 0)} rows x 12 columns x 8 bytes x 2" in message, message
