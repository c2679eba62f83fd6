"""The budget belongs to the data, in a real Dagster project: entries on one source, renames,
the mirrored ledger head, a tampered ledger, and `make clean`."""

import shutil
import sqlite3
import subprocess
from pathlib import Path

import dagster as dg
import pytest
import yaml

from dp_synth_assets.core.budget import DatasetBudget
from dp_synth_assets.core.config import RegistryError, load_registry
from dp_synth_assets.definitions import environment_paths
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import REPO, ledger_rows, make_project

# limit 1.1 with a run of 1.0: the first run fits, a second one on the same data cannot
PRIVACY = {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 1.1, "delta": 1e-9}}


def materialize(defs, instance):
    """Every asset, without the checks of `synthetic` (the budget is spent before them, and
    they spend nothing)."""
    return dg.materialize([*defs.assets, *(defs.asset_checks or [])], resources=defs.resources,
                          instance=instance, selection=dg.AssetSelection.all().without_checks(),
                          raise_on_error=False)


def failure_message(result) -> str:
    """The step failure's message: a ledger refusal is published as the failure itself, with
    no chained cause."""
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    error = failure.event_specific_data.error
    assert error.cause is None and error.context is None
    return error.message


def write_entries(project, **entries) -> None:
    project.datasets.write_text(yaml.safe_dump({"datasets": entries}, sort_keys=False))



@pytest.fixture(scope="module")
def spent(tmp_path_factory):
    """A project whose `example` entry has spent one run of its limit (a second cannot fit)."""
    project = make_project(tmp_path_factory.mktemp("unit"), privacy=PRIVACY)
    entry = yaml.safe_load(project.datasets.read_text())["datasets"]["example"]
    instance = dg.DagsterInstance.ephemeral()
    result = materialize(project.defs_fn(), instance)
    assert result.success
    return project, entry, instance


def test_spending_assets_mirror_the_ledger_head(spent):
    project, _, instance = spent
    ledger = project.defs_fn().resources["ledger"].ledger()
    events = ledger.events()
    for stage in ("selection", "measurements"):
        materialization = instance.get_latest_materialization_event(
            dg.AssetKey(["example", stage])).asset_materialization
        rows = materialization.metadata["privacy/ledger_rows"].value
        head = materialization.metadata["privacy/ledger_head"].value
        assert 0 < rows <= len(events) and events[rows - 1]["hash"] == head
    assert (ledger.head()[0], ledger.head()[1]) == (len(events), events[-1]["hash"])


def test_two_entries_on_one_table_are_refused_when_the_definitions_load(spent):
    project, entry, _ = spent
    try:
        write_entries(project, example=entry,
                      copy={**entry, "source": {"table": "EXAMPLE"}})
        with pytest.raises(RegistryError) as error:
            project.defs_fn()
        assert "'example'" in str(error.value) and "'copy'" in str(error.value)
        assert "budget_group" in str(error.value)
    finally:
        write_entries(project, example=entry)


def test_a_renamed_entry_or_a_grouped_copy_cannot_spend_the_same_budget_again(spent):
    project, entry, _ = spent
    ledger = PrivacyLedger(project.ledger)
    spent_rho, rows = ledger.summary("example").spent_rho, ledger_rows(project.ledger)
    grouped = {**entry, "privacy": {**PRIVACY, "budget_group": "census"}}
    try:
        for entries, name in (({"example_renamed": entry}, "example_renamed"),
                              ({"example": grouped, "copy": {**grouped, "source":
                                                             {"table": "main.example"}}}, "copy")):
            write_entries(project, **entries)
            defs = project.defs_fn()
            result = dg.materialize([a for a in defs.assets if dataset_of(a) == name],
                                    resources=defs.resources,
                                    instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
            assert not result.success
            message = failure_message(result)
            assert f"The privacy budget of dataset '{name}'" in message, message
            assert ("budget group 'census'" in message) == (name == "copy"), message
            assert ledger_rows(project.ledger) == rows  # refused before anything was written
    finally:
        write_entries(project, example=entry)
    assert PrivacyLedger(project.ledger).summary("example").spent_rho == spent_rho


def test_a_deleted_ledger_refuses_the_next_run_until_restored(spent, tmp_path):
    project, entry, _ = spent
    backup = tmp_path / "backup.sqlite"
    source, target = sqlite3.connect(project.ledger), sqlite3.connect(backup)
    source.backup(target)
    source.close()
    target.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{project.ledger}{suffix}").unlink(missing_ok=True)
    try:
        result = materialize(project.defs_fn(), dg.DagsterInstance.ephemeral())
        assert not result.success
        message = failure_message(result)
        assert "does not exist" in message and "Restore the ledger file" in message, message
        assert not project.ledger.exists()
    finally:
        shutil.copyfile(backup, project.ledger)
    assert PrivacyLedger(project.ledger).summary("example").spent_rho > 0


def test_a_ledger_deleted_with_its_head_file_is_refused_by_the_published_head(spent, tmp_path):
    """The head file gone too (the whole ledger folder deleted, or another empty ledger put in
    place): the metadata the dataset's spending assets published still proves the spending, so
    the next run on the same Dagster instance is refused and writes no ledger."""
    project, _, instance = spent
    saved = {}
    for suffix in ("", "-wal", "-shm", ".head"):
        path = Path(f"{project.ledger}{suffix}")
        if path.exists():
            saved[path] = tmp_path / path.name
            shutil.copyfile(path, saved[path])
            path.unlink()
    try:
        result = materialize(project.defs_fn(), instance)
        assert not result.success
        message = failure_message(result)
        assert "does not exist" in message and "example/measurements" in message, message
        assert not project.ledger.exists()
        # another, empty ledger in its place: fewer rows than the published head
        PrivacyLedger(project.ledger).events()
        result = materialize(project.defs_fn(), instance)
        assert not result.success
        assert "does not extend the head" in failure_message(result)
        assert PrivacyLedger(project.ledger).events() == []
    finally:
        for suffix in ("", "-wal", "-shm", ".head"):
            Path(f"{project.ledger}{suffix}").unlink(missing_ok=True)
        for path, copy in saved.items():
            shutil.copyfile(copy, path)
    assert PrivacyLedger(project.ledger).summary("example").spent_rho > 0


def test_make_clean_keeps_the_ledger(tmp_path):
    dry_run = subprocess.run(["make", "-n", "clean"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout
    assert "rm" in dry_run and ".dp_synth" not in dry_run
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    for path in ("data/warehouse.duckdb", "public/x.json", ".dp_synth/ledger.sqlite",
                 ".dp_synth/ledger.sqlite.head"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    subprocess.run(["make", "clean"], cwd=tmp_path, capture_output=True, check=True)
    assert not (tmp_path / "data").exists() and not (tmp_path / "public").exists()
    assert (tmp_path / ".dp_synth/ledger.sqlite").exists()
    assert (tmp_path / ".dp_synth/ledger.sqlite.head").exists()
    defaults = environment_paths({}, project_dir=tmp_path)  # what definitions.py passes
    assert Path(defaults["ledger"]) == tmp_path / ".dp_synth" / "ledger.sqlite"


def test_an_in_process_subset_reserves_only_its_own_stages_and_leaves_nothing_open(tmp_path):
    """`materialize(selection=...)` runs a subset in process, where the run's asset selection is
    empty: the stages come from the job's executable keys, so a run of `preprocessed` and
    `marginals` reserves the preprocessing share only (the example's declared numeric bins get
    DP densities; `marginals` spends nothing), spends it, and no reservation outlives the run."""
    project = make_project(tmp_path, rows=800, report=None)
    defs = project.defs_fn()
    result = dg.materialize(defs.assets, resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(),
                            selection=[dg.AssetKey(["example", s])
                                       for s in ("preprocessed", "marginals")])
    assert result.success
    budget = DatasetBudget.of(load_registry(project.datasets)["example"])
    assert 0 < budget.preprocess < budget.run_rho
    summary = PrivacyLedger(project.ledger).summary("example")
    assert summary.reserved_rho == 0
    assert summary.spent_rho == pytest.approx(budget.preprocess, rel=1e-9)
    reserves = [e for e in PrivacyLedger(project.ledger).events("example")
                if e["kind"] == "reserve"]
    assert [e["rho"] for e in reserves] == [pytest.approx(budget.preprocess, rel=1e-9)]


def dataset_of(assets_def) -> str:
    """The dataset of a dp-synth asset definition (its keys are `[<dataset>, <stage>]`)."""
    keys = assets_def.keys if isinstance(assets_def, dg.AssetsDefinition) else [assets_def.key]
    return next(iter(keys)).path[0]
