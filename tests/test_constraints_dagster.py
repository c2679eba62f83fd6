"""Declared constraints in the Dagster layer, with no run: a bad constraint is refused when the
definitions load, naming the file the user has (datasets.yaml for the factory, the Component's
defs.yaml), the dataset, the problem and the fix, spending nothing. A materialized dataset
with constraints: tests/test_pipeline.py (its one run declares some)."""

import pytest

from dp_synth_assets.core.config import RegistryError
from tests.helpers import make_project
from tests.test_component import customers_entry, dg_project, load_failure, write_instance

BAD = "hours_per_week >= sex"


def test_the_factory_refuses_a_bad_constraint_naming_datasets_yaml(tmp_path):
    project = make_project(tmp_path, rows=200, constraints=["income >= 0", BAD])
    with pytest.raises(RegistryError) as refused:
        project.defs_fn()
    message = str(refused.value)
    assert f"{project.datasets} is invalid" in message
    assert f"dataset 'example', key 'constraints': constraint {BAD!r}" in message
    assert "compares a number column with a categorical column" in message
    assert "compare columns of comparable kinds" in message
    assert not project.ledger.exists()  # nothing reserved, nothing spent


def test_the_component_refuses_a_bad_constraint_naming_its_defs_yaml(tmp_path):
    sandbox = dg_project(tmp_path)
    folder = write_instance(sandbox, {
        "warehouse": "w.duckdb", "ledger": "l.sqlite", "public_dir": "public",
        "datasets": {"customers": customers_entry(constraints=["occupation < 'Sales'"])}})
    text = load_failure(sandbox)
    assert str(folder / "defs.yaml") in text and "attributes.datasets.customers" in text
    assert "constraint \"occupation < 'Sales'\": orders the categorical column 'occupation'" in text
    assert "a categorical column takes only == or !=" in text
    assert "datasets.yaml" not in text
    assert not (folder / "l.sqlite").exists()
