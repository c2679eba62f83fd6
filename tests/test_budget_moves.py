"""The budget belongs to the data wherever the project runs: the attacks that reset it by moving
things, each replayed in real Dagster runs at the limit (one run allowed, one spent).

- the whole project (warehouse, ledger, public zone) copied to another folder and run there;
- only the warehouse file copied, and the definitions pointed at the copy;
- the entry renamed (or the key prefix changed) and the ledger deleted with its head file;
- a notebook `Synthesizer` on the pipeline's ledger with a larger limit.
Each is refused before anything is spent, and the message says why.
"""

import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import yaml

from dp_synth_assets.api import Synthesizer
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.core.ledger import LimitNotGranted
from dp_synth_assets.definitions import build_definitions
from dp_synth_assets.factory import dp_synth_definitions
from dp_synth_assets.resources.ledger import PrivacyLedger, main as ledger_command
from tests.helpers import ledger_rows, make_project

# limit 1.1 with a run of 1.0: the first run fits, a second one on the same data cannot
PRIVACY = {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 1.1, "delta": 1e-9}}
ROWS = 800


def materialize(defs, instance):
    """Every asset, without the checks of `synthetic` (the budget is spent before them, and
    they spend nothing)."""
    return dg.materialize([*defs.assets, *(defs.asset_checks or [])], resources=defs.resources,
                          instance=instance, selection=dg.AssetSelection.all().without_checks(),
                          raise_on_error=False)


def failure_message(result) -> str:
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    return failure.event_specific_data.error.message


@pytest.fixture
def spent(tmp_path):
    """A project in `tmp_path/project` whose `example` has spent its one run, on `instance`."""
    project = make_project(tmp_path / "project", rows=ROWS, report=None, privacy=PRIVACY)
    instance = dg.DagsterInstance.ephemeral()
    assert materialize(project.defs_fn(), instance).success
    return project, instance


def test_the_project_copied_to_another_folder_keeps_its_spend(spent, tmp_path):
    project, _ = spent
    copy = tmp_path / "moved" / "project"
    shutil.copytree(project.datasets.parent, copy, symlinks=True)  # as `cp -a` copies
    defs = build_definitions(copy / "datasets.yaml", copy / "warehouse.duckdb",
                             copy / "ledger.sqlite", copy / "public")
    rows = ledger_rows(copy / "ledger.sqlite")
    result = materialize(defs, dg.DagsterInstance.ephemeral())  # a new instance, too
    assert not result.success
    assert "cannot cover this run" in failure_message(result), failure_message(result)
    assert ledger_rows(copy / "ledger.sqlite") == rows


def test_a_copy_of_the_warehouse_file_is_the_same_data(spent, tmp_path):
    project, instance = spent
    copy = tmp_path / "elsewhere" / "warehouse-copy.duckdb"
    copy.parent.mkdir()
    shutil.copyfile(project.warehouse, copy)
    rows = ledger_rows(project.ledger)
    defs = build_definitions(project.datasets, copy, project.ledger, project.public)
    result = materialize(defs, instance)
    assert not result.success
    assert "cannot cover this run" in failure_message(result), failure_message(result)
    assert ledger_rows(project.ledger) == rows
    # a warehouse the user names differently is other data: its own budget
    defs = build_definitions(project.datasets, copy, project.ledger, project.public,
                             warehouse_name="staging")
    assert materialize(defs, instance).success


def _delete_ledger(ledger: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".head"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)


def test_a_renamed_entry_with_its_ledger_deleted_is_refused_by_the_units_head(spent):
    """The materializations of `example` prove the spending, but a renamed entry has none: the
    head Dagster's instance keeps for the privacy unit refuses the empty ledger."""
    project, instance = spent
    entry = yaml.safe_load(project.datasets.read_text())["datasets"]["example"]
    project.datasets.write_text(yaml.safe_dump({"datasets": {"renamed": entry}}))
    _delete_ledger(project.ledger)
    result = materialize(project.defs_fn(), instance)
    assert not result.success
    message = failure_message(result)
    assert "Dagster's instance, for privacy unit table:default:main.example" in message, message
    assert "kept by dataset 'example'" in message and "does not exist" in message
    # an empty ledger put in its place: fewer rows than the kept head
    PrivacyLedger(project.ledger).events()
    result = materialize(project.defs_fn(), instance)
    assert not result.success and "does not extend the head" in failure_message(result)
    assert PrivacyLedger(project.ledger).events() == []


def test_a_new_key_prefix_with_its_ledger_deleted_is_refused_by_the_units_head(spent):
    project, instance = spent
    _delete_ledger(project.ledger)
    defs = dp_synth_definitions(project.datasets, project.warehouse, project.ledger,
                                project.public, key_prefix=["moved"])
    result = materialize(defs, instance)
    assert not result.success
    assert "for privacy unit table:default:main.example" in failure_message(result)


def test_a_notebook_cannot_raise_the_limit_of_the_pipelines_unit(spent):
    project, _ = spent
    spec = load_registry(project.datasets)["example"]
    columns = {name: column.model_dump(exclude_defaults=True)
               for name, column in spec.columns.items()}
    rows = ledger_rows(project.ledger)
    synth = Synthesizer(columns, epsilon=1.0, delta=1e-9, limit={"epsilon": 50, "delta": 1e-9},
                        ledger=str(project.ledger), dataset="example")
    with pytest.raises(LimitNotGranted, match="raise-limit example"):
        synth.fit(pd.DataFrame({name: [] for name in columns}))
    assert ledger_rows(project.ledger) == rows


def test_raise_limit_is_the_explicit_way_and_then_the_run_fits(spent, monkeypatch, capsys):
    project, instance = spent
    entry = yaml.safe_load(project.datasets.read_text())["datasets"]["example"]
    entry["privacy"]["limit"]["epsilon"] = 3.0
    project.datasets.write_text(yaml.safe_dump({"datasets": {"example": entry}}))
    result = materialize(project.defs_fn(), instance)
    assert not result.success and "raise-limit example" in failure_message(result)
    monkeypatch.setenv("DP_SYNTH_DATASETS", str(project.datasets))
    monkeypatch.setenv("DP_SYNTH_WAREHOUSE", str(project.warehouse))
    monkeypatch.setenv("DP_SYNTH_LEDGER", str(project.ledger))
    ledger_command(["raise-limit", "example", "--reason", "owner approved 3.0"])
    assert "is now epsilon 3 at delta 1e-09" in capsys.readouterr().out
    assert materialize(project.defs_fn(), instance).success
    limits = [e for e in PrivacyLedger(project.ledger).events() if e["kind"] == "limit"]
    assert [e["parameters"]["reason"] for e in limits] == ["owner approved 3.0"]


def test_spend_recorded_under_the_earlier_path_keyed_unit_still_counts(tmp_path):
    """A ledger written before units had warehouse names (`duckdb:/abs/path:main.example`):
    upgrading keeps its spend, through the source's alias in the ledger resource."""
    from dp_synth_assets.core.budget import DatasetBudget
    from dp_synth_assets.core.privacy import Spend
    from dp_synth_assets.core.units import path_identity

    project = make_project(tmp_path, rows=ROWS, report=None, privacy=PRIVACY)
    spec = load_registry(project.datasets)["example"]
    old = path_identity(spec, project.datasets.parent, project.warehouse)
    assert old.startswith("duckdb:/")
    budget = DatasetBudget.of(spec)
    earlier = PrivacyLedger(project.ledger, units={"example": old}, sources={"example": old})
    earlier.reserve("example", "before", budget.run_rho, budget.limit_rho, delta=budget.delta)
    earlier.charge("example", "before", "measurements", Spend("gaussian", budget.run_rho, 0.0,
                                                              1.0, 1.0))
    earlier.release("example", "before")
    rows = ledger_rows(project.ledger)
    result = materialize(project.defs_fn(), dg.DagsterInstance.ephemeral())
    assert not result.success
    assert "cannot cover this run" in failure_message(result), failure_message(result)
    assert ledger_rows(project.ledger) == rows
