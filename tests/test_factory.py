"""dp-synth inside a host's code location: the factory's definitions merged with a host's own.

The host has an asset writing a DuckDB table (as a dbt model would), its own `warehouse`
resource, its own executor and a default IO manager; dp-synth must compose with all of them,
take the host's asset as its source, and run without the host's IO manager.
"""

import math

import dagster as dg
import pytest
import yaml

from dp_synth_assets.budget import DatasetBudget
from dp_synth_assets.core.config import RegistryError, load_registry
from dp_synth_assets.example import write_example
from dp_synth_assets.factory import dp_synth_definitions
from dp_synth_assets.naming import names
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import example_entry

HOST_KEY = dg.AssetKey(["analytics", "customers"])
PREFIX = ["dp"]
STAGES = ["preprocessed", "marginals", "selection", "measurements", "model", "synthetic"]


class RaisingIOManager(dg.IOManager):
    """A host's default IO manager that no dp-synth step may use."""

    def handle_output(self, context, obj):
        raise RuntimeError(f"host io_manager asked to store {context.asset_key or context.name}")

    def load_input(self, context):
        raise RuntimeError(f"host io_manager asked to load {context.asset_key or context.name}")


class HostWarehouse(dg.ConfigurableResource):
    """A resource of the host under the generic key `warehouse`."""

    url: str = "postgres://host"


def host_project(tmp_path, source: dict | None = None, entry: dict | None = None, **factory_args):
    """The host's definitions (an asset writing main.customers into the DuckDB file, a
    `warehouse` resource of its own, the multiprocess executor, a raising default IO manager)
    merged with dp-synth's, whose `customers` dataset reads that asset's table (its entry
    updated with `entry`)."""
    database = tmp_path / "warehouse.duckdb"

    @dg.asset(key=HOST_KEY, kinds={"duckdb"})
    def customers(warehouse: HostWarehouse) -> dg.MaterializeResult:
        write_example(database, table="main.customers", rows=2000)
        return dg.MaterializeResult(metadata={"table": "main.customers"})

    host = dg.Definitions(assets=[customers],
                          resources={"warehouse": HostWarehouse(), "io_manager": RaisingIOManager()},
                          executor=dg.multiprocess_executor)
    entry = example_entry(source=source or {"asset": list(HOST_KEY.path), "table": "main.customers"},
                          on_source_change=None, report=None, **(entry or {}))
    datasets = tmp_path / "datasets.yaml"
    datasets.write_text(yaml.safe_dump({"datasets": {"customers": entry}}, sort_keys=False))
    ours = dp_synth_definitions(datasets=datasets, warehouse=database,
                                ledger=tmp_path / "ledger.sqlite", public_dir=tmp_path / "public",
                                **factory_args)
    return host, ours, dg.Definitions.merge(host, ours)


def test_the_host_asset_is_the_source_and_the_lineage_runs_from_it(tmp_path):
    host, ours, defs = host_project(tmp_path, key_prefix=PREFIX, group_name="privacy",
                                    tags={"team": "platform"}, owners=["team:platform"],
                                    dataset_jobs=True)
    graph = defs.resolve_asset_graph()
    keys = graph.get_all_asset_keys()
    preprocessed = dg.AssetKey([*PREFIX, "customers", "preprocessed"])
    assert HOST_KEY in graph.get(preprocessed).parent_keys
    assert dg.AssetKey([*PREFIX, "customers", "source"]) not in keys
    assert dg.AssetKey(["customers", "source"]) not in keys
    assert {dg.AssetKey([*PREFIX, "customers", s]) for s in STAGES} <= keys
    for stage in STAGES:
        node = graph.get(dg.AssetKey([*PREFIX, "customers", stage]))
        assert node.group_name == "privacy"
        assert node.tags["team"] == "platform" and node.tags["privacy"] in ("private", "public")
        assert node.owners == ["team:platform"]
    # the dataset's job runs the stages, not the host's asset
    job = defs.resolve_job_def("dp__customers_synthesis")
    assert HOST_KEY not in job.asset_layer.selected_asset_keys
    assert preprocessed in job.asset_layer.selected_asset_keys


def test_the_factory_claims_no_executor_and_no_generic_resource_key(tmp_path):
    host, ours, defs = host_project(tmp_path)
    assert ours.executor is None
    assert set(ours.resources) == {"dp_synth_warehouse", "dp_synth_ledger", "dp_synth_io_manager"}
    # the merge keeps the host's executor, its `warehouse` and its default IO manager
    assert defs.executor is dg.multiprocess_executor
    assert isinstance(defs.resources["warehouse"], HostWarehouse)
    assert isinstance(defs.resources["io_manager"], RaisingIOManager)
    defs.resolve_all_job_defs()  # every job resolves: all resource keys are provided
    # a dataset that needs no job of its own (its source is a host asset, its fit one process)
    # runs in the implicit asset job; asked for one, the job declares its own executor
    assert not list(ours.jobs or [])
    (tmp_path / "jobs").mkdir()
    _, asked, _ = host_project(tmp_path / "jobs", dataset_jobs=True)
    [job] = asked.jobs
    assert job.name == "customers_synthesis" and job.executor_def is dg.in_process_executor


def test_a_job_is_built_where_a_schedule_or_a_multiprocess_fit_needs_one(tmp_path):
    external = {"table": "main.customers"}
    cases = {"host asset, one process": ({}, None, False),
             "external table, schedule": ({"schedule": "0 3 * * *"}, external, True),
             # the sensor targets the dataset's assets (the implicit asset job), not a job
             "external table, sensor": ({"on_source_change": "resynthesize"}, external, False),
             "external table, neither": ({}, external, False),
             "host asset, parallel fit": ({"generator": "parallel_pgm",
                                           "model": {"iterations": 50, "workers": 2}}, None, True)}
    for case, (entry, source, expected) in cases.items():
        folder = tmp_path / case.replace(" ", "_").replace(",", "")
        folder.mkdir()
        datasets = folder / "datasets.yaml"
        spec = example_entry(**{"source": source or {"asset": list(HOST_KEY.path),
                                                      "table": "main.customers"},
                                "on_source_change": None, "report": None, **entry})
        datasets.write_text(yaml.safe_dump({"datasets": {"customers": spec}}, sort_keys=False))
        ours = dp_synth_definitions(datasets=datasets, warehouse=folder / "w.duckdb",
                                    ledger=folder / "l.sqlite", public_dir=folder / "public")
        assert [j.name for j in ours.jobs or []] == (["customers_synthesis"] if expected else []), case


def test_a_parallel_fit_s_job_forks_its_steps_from_a_server_with_dagster_and_dp_synth_imported(
        tmp_path):
    """The multiprocess executor of a parallel fit starts each step by `forkserver` from a server
    that preloaded Dagster and dp-synth's factory, not by `spawn` (a fresh interpreter importing
    them per step); every preloaded module imports in a fresh interpreter (the fork server skips
    one that fails, silently) and none of them imports JAX, so no step is forked from a process
    that holds the fit's library."""
    import subprocess
    import sys

    from dp_synth_assets.automation import PRELOAD

    datasets = tmp_path / "datasets.yaml"
    spec = example_entry(source={"table": "main.customers"}, on_source_change=None, report=None,
                         generator="parallel_pgm", model={"iterations": 50, "workers": 2})
    datasets.write_text(yaml.safe_dump({"datasets": {"customers": spec}}, sort_keys=False))
    ours = dp_synth_definitions(datasets=datasets, warehouse=tmp_path / "w.duckdb",
                                ledger=tmp_path / "l.sqlite", public_dir=tmp_path / "public")
    [job] = ours.jobs
    config = job.executor_def.config_schema.resolve_config({}).value["config"]
    assert config["max_concurrent"] == 2
    assert config["start_method"] == {"forkserver": {"preload_modules": list(PRELOAD)}}
    assert {"dagster", "dp_synth_assets.factory"} <= set(PRELOAD)
    probe = ("import importlib, sys\n"
             f"for name in {list(PRELOAD)!r}: importlib.import_module(name)\n"
             "print(sorted(m for m in ('jax', 'mbi') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_resource_keys_are_configurable(tmp_path):
    _, ours, defs = host_project(tmp_path, warehouse_resource_key="synth_wh",
                                 ledger_resource_key="synth_ledger", io_manager_key="synth_io")
    assert set(ours.resources) == {"synth_wh", "synth_ledger", "synth_io"}
    graph = defs.resolve_asset_graph()
    required = set()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        if node.is_materializable and key != HOST_KEY:
            required |= node.assets_def.required_resource_keys
    assert required >= {"synth_wh", "synth_ledger", "synth_io"}
    assert not required & {"dp_synth_warehouse", "dp_synth_ledger", "dp_synth_io_manager",
                           "ledger"}
    defs.resolve_all_job_defs()
    with pytest.raises(ValueError, match="must differ"):
        names(warehouse="same", ledger="same")


def test_every_op_output_is_nothing_or_goes_through_dp_synths_io_manager(tmp_path):
    """Statically, over every op of every dp-synth asset (the model graph's inner ops included)
    and every job the factory builds: an output either carries no value (Nothing: the stage
    stored it through the artifact store and returned a MaterializeResult) or names dp-synth's
    own IO manager key, so the host's `io_manager` is never asked to store or load anything."""
    _, ours, defs = host_project(tmp_path, io_manager_key="synth_io")
    outputs = []
    # an asset check's output is its evaluation, which Dagster records as an event (no IO
    # manager): the checks of `synthetic` are outputs of the dataset's stage op
    check_outputs = {(a.node_def.name, name) for a in ours.assets
                     if isinstance(a, dg.AssetsDefinition) for name in a.check_specs_by_output_name}
    assert check_outputs

    def collect(node_def, where):
        if isinstance(node_def, dg.GraphDefinition):
            for inner in node_def.node_defs:
                collect(inner, f"{where}/{inner.name}")
        else:
            outputs.extend((f"{where}:{o.name}", o) for o in node_def.output_defs
                           if (node_def.name, o.name) not in check_outputs)

    for assets_def in ours.assets:
        if isinstance(assets_def, dg.AssetsDefinition) and assets_def.is_executable:
            collect(assets_def.node_def, assets_def.node_def.name)
    assert any("model" in where for where, _ in outputs)  # the graph's units are in the list
    wrong = [where for where, o in outputs
             if not o.dagster_type.is_nothing and o.io_manager_key != "synth_io"]
    assert not wrong, f"outputs the host's IO manager would store: {wrong}"
    assert "synth_io" in {o.io_manager_key for _, o in outputs}
    for job in defs.resolve_all_job_defs():
        for node in job.graph.node_defs:
            collect(node, f"{job.name}/{node.name}")
    wrong = [where for where, o in outputs
             if not o.dagster_type.is_nothing and o.io_manager_key != "synth_io"
             and not where.startswith(("__ASSET_JOB", "analytics"))]
    assert not wrong, f"job outputs the host's IO manager would store: {wrong}"


@pytest.mark.e2e
def test_the_pipeline_runs_under_a_raising_host_io_manager_and_spends_one_run(tmp_path):
    """Every dp-synth output either returns a MaterializeResult (stored by the artifact store) or
    goes through dp-synth's IO manager: with a host IO manager that raises on any call, the host's
    asset and every stage materialize, and the ledger holds exactly one run's spend (nothing
    after the spending stages failed on the host's configuration). The fit is parallel_pgm's, so
    its units are steps of the model graph, passed between them by an IO manager."""
    _, _, defs = host_project(tmp_path, key_prefix=PREFIX, entry={"generator": "parallel_pgm"})
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=instance, raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    materialized = {e.asset_key for e in result.get_asset_materialization_events()}
    assert HOST_KEY in materialized
    assert {dg.AssetKey([*PREFIX, "customers", s]) for s in STAGES} <= materialized
    # the model graph's units went through dp-synth's IO manager, under its own folder
    assert any((tmp_path / "public" / ".dp_synth_io").rglob("*"))
    spec = load_registry(tmp_path / "datasets.yaml")["customers"]
    spent = PrivacyLedger(tmp_path / "ledger.sqlite").summary("customers").spent_rho
    assert math.isclose(spent, DatasetBudget.of(spec).run_rho, rel_tol=1e-9)
    checks = list(result.get_asset_check_evaluations())
    assert checks and all(c.asset_key == dg.AssetKey([*PREFIX, "customers", "synthetic"])
                          for c in checks)


def test_an_asset_source_is_validated_like_the_others(tmp_path):
    for bad in ({"asset": [], "table": "main.customers"},
                {"asset": ["analytics", ""], "table": "main.customers"},
                {"asset": "analytics/customers"}):
        datasets = tmp_path / "datasets.yaml"
        datasets.write_text(yaml.safe_dump({"datasets": {"customers": example_entry(source=bad)}}))
        with pytest.raises(RegistryError, match="customers"):
            load_registry(datasets)
    datasets.write_text(yaml.safe_dump({"datasets": {"customers": example_entry(
        source={"asset": "analytics/customers", "parquet": "customers.parquet"})}}))
    assert load_registry(datasets)["customers"].source.asset == ("analytics", "customers")
