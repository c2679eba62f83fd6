"""A `source.asset` that no asset of the merged definitions defines is refused when the code
location loads (dp_synth_assets/source_check.py): with the factory, by Dagster's own load
(`dagster definitions validate` on a host file), and in process; a source marked
`asset_elsewhere: true` (an asset of another code location) is not checked. The Component's
case, through `dg check defs`, is in test_component.py."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest
import yaml

from dp_synth_assets import dp_synth_definitions
from dp_synth_assets.core.config import RegistryError, entry_location
from dp_synth_assets.source_check import SourceAssetError
from tests.helpers import REPO, example_entry

HOST = '''
from pathlib import Path

import dagster as dg

from dp_synth_assets import dp_synth_definitions

HERE = Path(__file__).resolve().parent


@dg.asset(key=["analytics", "customers"], group_name="host")
def customers() -> None:
    """The host's table (never materialized here)."""


defs = dg.Definitions.merge(
    dg.Definitions(assets=[customers]),
    dp_synth_definitions(HERE / "datasets.yaml", warehouse=HERE / "w.duckdb",
                         ledger=HERE / "l.sqlite", public_dir=HERE / "public"))
'''


def entry(asset, **source) -> dict:
    return example_entry(source={"asset": asset, "table": "main.customers", **source},
                         on_source_change=None, report=None)


def write_host(folder: Path, asset, **source) -> Path:
    (folder / "host.py").write_text(textwrap.dedent(HOST))
    datasets = folder / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": {"customers": entry(asset, **source)}},
                                       sort_keys=False))
    return datasets


def validate(folder: Path) -> subprocess.CompletedProcess:
    """`dagster definitions validate -f host.py`, as a host's CI would run it."""
    home = folder / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-f",
                           "host.py"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.e2e
def test_dagster_refuses_a_factory_host_whose_source_asset_is_mistyped(tmp_path):
    datasets = write_host(tmp_path, ["analytics", "custmers"])
    done = validate(tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "SourceAssetError: dp-synth source assets not found" in out
    assert (f"dataset 'customers' in {datasets}: `source.asset` analytics/custmers is not an "
            "asset of these definitions; nearest asset keys: analytics/customers") in out
    write_host(tmp_path, ["analytics", "customers"])
    done = validate(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def merged(tmp_path, asset, host=(dg.AssetKey(["analytics", "customers"]),), **source):
    ours = dp_synth_definitions({"customers": entry(asset, **source)},
                                warehouse=tmp_path / "w.duckdb", ledger=tmp_path / "l.sqlite",
                                public_dir=tmp_path / "public", origin="datasets.yaml")
    return dg.Definitions.merge(dg.Definitions(assets=[dg.AssetSpec(k) for k in host]), ours)


def test_the_check_sees_the_merged_graph_and_names_the_nearest_keys(tmp_path):
    host = [dg.AssetKey(["analytics", "customers"]), dg.AssetKey(["analytics", "orders"]),
            dg.AssetKey(["raw", "customers"]), dg.AssetKey(["zebra"])]
    with pytest.raises(SourceAssetError) as refused:
        merged(tmp_path, "analytics/customer", host=host).get_repository_def()
    message = str(refused.value)
    nearest = message.split("nearest asset keys: ")[1].split("\n")[0].split(", ")
    assert nearest[0] == "analytics/customers" and "raw/customers" in nearest
    assert "zebra" not in nearest
    assert isinstance(refused.value, RegistryError)
    # nothing close: said so; the placeholder Dagster makes of the typo is not a defined key
    with pytest.raises(SourceAssetError, match="qqq is not an asset of these definitions; no "
                                               "asset key is close to it"):
        merged(tmp_path, ["qqq"]).get_repository_def()
    # a host declaration (an external asset, as a dbt source is) defines its key
    merged(tmp_path, ["analytics", "customers"]).get_repository_def()


def test_a_source_asset_of_another_code_location_is_declared_and_not_checked(tmp_path):
    graph = merged(tmp_path, ["elsewhere", "customers"], host=(),
                   asset_elsewhere=True).resolve_asset_graph()
    first = dg.AssetKey(["customers", "preprocessed"])
    assert graph.get(first).parent_keys == {dg.AssetKey(["elsewhere", "customers"])}
    with pytest.raises(RegistryError, match="`asset_elsewhere` applies to a source with"):
        dp_synth_definitions({"customers": example_entry(
            source={"table": "main.customers", "asset_elsewhere": True})},
            warehouse=tmp_path / "w.duckdb", ledger=tmp_path / "l.sqlite",
            public_dir=tmp_path / "public")


def test_entry_location_names_the_file_the_user_has():
    assert entry_location("/p/datasets.yaml", "people") == "dataset 'people' in /p/datasets.yaml"
    assert entry_location("/p/a (b)/defs.yaml (attributes.datasets)", "people") == (
        "`attributes.datasets.people` in /p/a (b)/defs.yaml")
