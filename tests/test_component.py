"""dp-synth as a Dagster Component (dp_synth_assets.component) in a dg project's defs folder.

The project has an asset of its own (`analytics/customers`, as a dbt model would) and a
`DpSynthComponent` instance whose `datasets` are datasets.yaml entries. The factory's run under a
host's configuration is tested in test_factory.py; here: what the YAML builds, that its entries
meet the registry's validator, and that `dg` scaffolds the component and checks its YAML. That `dg`
lists the component and `dg check defs` refuses a mistyped source asset (and passes the right
one) is tested from the installed wheel, in tests/test_wheel_component.py.
"""

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster.components.testing.utils import DefsFolderSandbox

from dp_synth_assets.component import GITIGNORE, DpSynthComponent
from dp_synth_assets.core.config import RegistryError, parse_registry
from tests.helpers import REPO, example_entry

TYPE = "dp_synth_assets.DpSynthComponent"
HOST_KEY = dg.AssetKey(["analytics", "customers"])
STAGES = ["preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]
HOST_ASSET = '''
import dagster as dg


@dg.asset(key=["analytics", "customers"], group_name="host")
def customers() -> None:
    """The host's table (never materialized here: only the graph is inspected)."""
'''


def dg_project(root: Path) -> DefsFolderSandbox:
    """An empty dg project at `root` (`src/<name>/defs`, its definitions module loading the defs
    folder, the host asset in `defs/host.py`), under a fresh module name."""
    name = "host_" + secrets.token_hex(4)
    package = root / "src" / name
    (package / "defs").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "defs" / "host.py").write_text(HOST_ASSET)
    (package / "definitions.py").write_text(textwrap.dedent("""
        from pathlib import Path

        import dagster as dg


        @dg.definitions
        def defs():
            return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
        """))
    (root / "pyproject.toml").write_text(textwrap.dedent(f"""
        [project]
        name = "{name}"
        version = "0.1.0"

        [tool.dg]
        directory_type = "project"

        [tool.dg.project]
        root_module = "{name}"
        """))
    return DefsFolderSandbox(project_root=root, defs_folder_path=package / "defs",
                             project_name=name)


def write_instance(sandbox: DefsFolderSandbox, attributes: dict, folder: str = "synth") -> Path:
    path = sandbox.defs_folder_path / folder
    path.mkdir(parents=True, exist_ok=True)
    (path / "defs.yaml").write_text(yaml.safe_dump({"type": TYPE, "attributes": attributes},
                                                   sort_keys=False))
    return path


def customers_entry(**overrides) -> dict:
    return example_entry(source={"asset": list(HOST_KEY.path), "table": "main.customers"},
                         on_source_change=None, report=None, **overrides)


def load_failure(sandbox: DefsFolderSandbox) -> str:
    """The messages of the error that building the sandbox's definitions raises, with every
    cause and context it chains."""
    with pytest.raises(Exception) as raised:
        with sandbox.build_component_tree() as tree:
            tree.build_defs()
    chain, error = [], raised.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(chain)


def test_the_yaml_instance_builds_the_stages_downstream_of_the_host_asset(tmp_path):
    sandbox = dg_project(tmp_path)
    folder = write_instance(sandbox, {
        "warehouse": "warehouse.duckdb", "ledger": ".dp_synth/ledger.sqlite",
        "public_dir": "{{ context.project_root }}/public",
        "key_prefix": ["dp"], "group_name": "privacy", "tags": {"team": "platform"},
        "owners": ["team:platform"], "automation_condition": "{{ dg.AutomationCondition.eager() }}",
        "warehouse_resource_key": "synth_wh",
        "datasets": {"customers": customers_entry()}})
    with sandbox.build_component_tree() as tree:
        component = tree.load_component(folder)
        defs = tree.build_defs()
    assert isinstance(component, DpSynthComponent)
    graph = defs.resolve_asset_graph()
    keys = graph.get_all_asset_keys()
    preprocessed = dg.AssetKey(["dp", "customers", "preprocessed"])
    assert graph.get(preprocessed).parent_keys == {HOST_KEY}
    assert graph.get(HOST_KEY).is_materializable  # the host's own asset, not dp-synth's source
    assert dg.AssetKey(["dp", "customers", "source"]) not in keys
    for stage in STAGES:
        node = graph.get(dg.AssetKey(["dp", "customers", stage]))
        assert node.group_name == "privacy" and node.owners == ["team:platform"]
        assert node.tags["team"] == "platform"
        assert node.automation_condition is not None
    # no executor; namespaced resource keys, the warehouse's as configured; relative paths are
    # the component folder's, templates are resolved
    assert defs.executor is None
    assert {"synth_wh", "dp_synth_ledger", "dp_synth_io_manager"} <= set(defs.resources)
    warehouse = defs.resources["synth_wh"]
    assert Path(warehouse.database) == (folder / "warehouse.duckdb").resolve()
    assert Path(warehouse.public_dir) == (tmp_path / "public").resolve()
    assert Path(defs.resources["dp_synth_ledger"].path) == (
        folder / ".dp_synth" / "ledger.sqlite").resolve()
    defs.resolve_all_job_defs()


def test_a_malformed_entry_fails_naming_the_defs_yaml_line_and_the_key(tmp_path):
    """`datasets:` is typed by the registry's model, so Dagster validates each entry when it
    reads the YAML: the error names the key under `attributes.datasets`, the file and the line,
    with the registry's own words for the rule."""
    bad = customers_entry(privacy={"epsilon": 2.0, "delta": 1e-9,
                                   "limit": {"epsilon": 1.0, "delta": 1e-8}})
    with pytest.raises(RegistryError) as expected:
        parse_registry({"datasets": {"customers": bad}})
    assert "run epsilon 2.0 is above the dataset's limit epsilon 1.0" in str(expected.value)
    sandbox = dg_project(tmp_path)
    folder = write_instance(sandbox, {"warehouse": "w.duckdb", "ledger": "l.sqlite",
                                      "public_dir": "public", "datasets": {"customers": bad}})
    lines = (folder / "defs.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.strip() == "privacy:")
    text = load_failure(sandbox)
    assert f"attributes.datasets.customers.privacy at {folder / 'defs.yaml'}:{line}" in text
    assert "run epsilon 2.0 is above the dataset's limit epsilon 1.0" in text


def test_a_limit_written_twice_in_defs_yaml_fails_the_load_naming_both_lines(tmp_path):
    """Dagster's YAML loader keeps the second of two equal keys; the component refuses the
    defs.yaml instead (with the registry's checked constructor: merge keys included)."""
    sandbox = dg_project(tmp_path)
    folder = write_instance(sandbox, {"warehouse": "w.duckdb", "ledger": "l.sqlite",
                                      "public_dir": "public", "datasets": {}})
    body = (folder / "defs.yaml").read_text().replace(
        "datasets: {}", "datasets:\n" + textwrap.indent(
            yaml.safe_dump({"customers": customers_entry()}, sort_keys=False), "    "))
    lines = body.splitlines()
    at = next(i for i, text in enumerate(lines, 1) if text.strip().startswith("limit:"))
    lines[at + 2:at + 2] = lines[at - 1:at + 2]  # `limit:` and its two keys, written again
    (folder / "defs.yaml").write_text("\n".join(lines) + "\n")
    text = load_failure(sandbox)
    assert f"{folder / 'defs.yaml'}: key 'limit' is written twice" in text, text
    assert f"line {at} and on line {at + 3}" in text, text


def test_a_relative_file_source_is_read_from_the_component_folder(tmp_path):
    """An optional `parquet:` source is skipped while its file is absent from the component's
    folder, and built once it is there (not in the working directory)."""
    sandbox = dg_project(tmp_path)
    entry = example_entry(source={"parquet": "customers.parquet"}, optional=True,
                          on_source_change=None, report=None)
    folder = write_instance(sandbox, {"warehouse": "w.duckdb", "ledger": "l.sqlite",
                                      "public_dir": "public", "datasets": {"customers": entry}})
    synthetic = dg.AssetKey(["customers", "synthetic"])
    with sandbox.build_component_tree() as tree:
        assert synthetic not in tree.build_defs().resolve_asset_graph().get_all_asset_keys()
    (folder / "customers.parquet").write_bytes(b"")  # only its presence is checked at load
    with sandbox.build_component_tree() as tree:
        assert synthetic in tree.build_defs().resolve_asset_graph().get_all_asset_keys()


# ---- the dg CLI -------------------------------------------------------------------------------

def dg_cli() -> str:
    pytest.importorskip("dagster_dg_cli", reason="dagster-dg-cli is in the test extra")
    found = Path(sys.executable).parent / "dg"
    return str(found) if found.exists() else (shutil.which("dg") or pytest.skip("no dg"))


def run_dg(project: Path, *args: str, ok: bool = True) -> str:
    """`dg args` in `project`: its stdout, asserting it succeeded (or, `ok=False`, its stdout and
    stderr, asserting it failed)."""
    home = project / ".dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "VIRTUAL_ENV": sys.prefix,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
           "PYTHONPATH": os.pathsep.join([str(REPO), str(project / "src")])}
    done = subprocess.run([dg_cli(), *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=180)
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done.stdout if ok else done.stdout + done.stderr


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory) -> tuple[DefsFolderSandbox, Path, str]:
    """A dg project where `dg scaffold defs` made the component instance `my_synth`: the sandbox,
    the project's folder and the defs.yaml the command wrote (read before any test edits it)."""
    root = tmp_path_factory.mktemp("scaffolded")
    sandbox = dg_project(root)
    run_dg(root, "scaffold", "defs", TYPE, "my_synth")
    return sandbox, root, (sandbox.defs_folder_path / "my_synth" / "defs.yaml").read_text()


def test_dg_scaffolds_a_defs_yaml_that_loads_and_whose_example_entry_is_valid(scaffolded):
    sandbox, _, text = scaffolded
    folder = sandbox.defs_folder_path / "my_synth"
    assert (folder / "defs.yaml").read_text() == text  # as `dg scaffold defs` wrote it
    assert text.startswith(f"type: {TYPE}\n")
    with sandbox.build_component_tree() as tree:
        assert isinstance(tree.load_component(folder), DpSynthComponent)
        assert tree.build_defs().resolve_asset_graph().get_all_asset_keys() == {HOST_KEY}
    # the commented example entry: uncommented, it is a valid entry reading the host asset
    uncommented = re.sub(r"^  # (datasets:|  .*)$", r"  \1", text.replace("  datasets: {}\n", ""),
                         flags=re.M)
    assert uncommented != text
    (folder / "defs.yaml").write_text(uncommented)
    with sandbox.build_component_tree() as tree:
        graph = tree.build_defs().resolve_asset_graph()
    synthetic = dg.AssetKey(["dp_synth", "customers", "synthetic"])
    assert synthetic in graph.get_all_asset_keys()
    assert graph.get(dg.AssetKey(["dp_synth", "customers", "preprocessed"])).parent_keys == {
        HOST_KEY}


def test_dg_check_yaml_names_the_line_of_a_wrong_kind(tmp_path):
    sandbox = dg_project(tmp_path)
    entry = customers_entry()
    entry["columns"] = {**entry["columns"], "age": {**entry["columns"]["age"], "kind": "integr"}}
    folder = write_instance(sandbox, {"warehouse": "w.duckdb", "ledger": "l.sqlite",
                                      "public_dir": "public", "datasets": {"customers": entry}})
    lines = (folder / "defs.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.strip() == "kind: integr")
    for command in ("yaml", "defs"):
        out = run_dg(tmp_path, "check", command, ok=False)
        assert f"{folder / 'defs.yaml'}:{line}" in out, out
        assert "attributes.datasets.customers.columns.age.kind" in out
        assert "'integr' is not one of" in out


def test_the_budget_refusal_names_the_component_entry_to_edit(tmp_path):
    """A run refused by the ledger tells a Component user what to raise where they declared it:
    the key under `attributes.datasets` and the component's defs.yaml, not a datasets.yaml."""
    from dp_synth_assets.core.budget import DatasetBudget
    from dp_synth_assets.core.privacy import Spend

    sandbox = dg_project(tmp_path)
    entry = customers_entry(privacy={"epsilon": 1.0, "delta": 1e-9,
                                     "limit": {"epsilon": 1.0, "delta": 1e-9}})
    folder = write_instance(sandbox, {"warehouse": "w.duckdb", "ledger": "l.sqlite",
                                      "public_dir": "public", "datasets": {"customers": entry}})
    with sandbox.build_component_tree() as tree:
        defs = tree.build_defs()
    ledger = defs.resources["dp_synth_ledger"].ledger()
    budget = DatasetBudget.of(parse_registry({"datasets": {"customers": entry}})["customers"])
    ledger.reserve("customers", "earlier", budget.limit_rho, budget.limit_rho)
    ledger.charge("customers", "earlier", "selection", Spend("gaussian", budget.limit_rho))
    ledger.release("customers", "earlier")
    result = dg.materialize(list(defs.assets), resources=defs.resources,
                            selection=[dg.AssetKey(["customers", "preprocessed"])],
                            raise_on_error=False)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert "cannot cover this run" in message
    assert (f"raise `privacy.limit.epsilon` of `attributes.datasets.customers` in "
            f"{folder / 'defs.yaml'}") in message
    assert "datasets.yaml" not in message


def test_the_scaffolded_gitignore_lines_keep_every_generated_path_out_of_git(scaffolded):
    """The lines the scaffolded defs.yaml asks for, in the project's .gitignore, ignore what the
    default paths hold (git itself decides), and nothing of the project's code."""
    git = shutil.which("git") or pytest.skip("no git")
    sandbox, tmp_path, text = scaffolded
    lines = re.findall(r"^  # (/\S+)$", text, flags=re.M)
    assert lines == list(GITIGNORE)
    (tmp_path / ".gitignore").write_text("\n".join(lines) + "\n")
    subprocess.run([git, "init", "-q"], cwd=tmp_path, check=True)
    generated = ["warehouse.duckdb", "warehouse.duckdb.wal", ".dp_synth/ledger.sqlite",
                 ".dp_synth/ledger.sqlite.head", ".dp_synth/ledger.sqlite.lock",
                 "public/customers/synthetic.parquet", "public/.dp_synth_io/x",
                 "private/customers/change_state.json", "private/change_detection.key"]
    kept = [str((sandbox.defs_folder_path / "my_synth" / "defs.yaml").relative_to(tmp_path)),
            "pyproject.toml", "src/public.py"]

    def ignored(path: str) -> bool:
        return subprocess.run([git, "check-ignore", "-q", "--no-index", path],
                              cwd=tmp_path).returncode == 0

    assert [p for p in generated if not ignored(p)] == []
    assert [p for p in kept if ignored(p)] == []
