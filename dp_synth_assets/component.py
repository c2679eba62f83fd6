"""dp-synth as a Dagster Component (`DpSynthComponent`): one YAML instance (`defs.yaml`) builds the
definitions that `factory.dp_synth_definitions` builds from Python.

`dg scaffold defs dp_synth_assets.DpSynthComponent my_synth` writes `defs/my_synth/defs.yaml`.
Its `datasets` attribute is the registry's model (`core.config.DatasetSpec`), so `dg check yaml`
names a malformed entry's key, file and line, and every later message names
`attributes.datasets.<name>` in that file; paths are relative to the component's folder; the
other attributes are the factory's settings with its defaults. Like the factory, the component
sets no executor and claims only its namespaced resource keys. Each attribute:
docs/add-to-dagster.md, "Component attributes"."""

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

import dagster as dg
from dagster.components.scaffold.scaffold import scaffold_with
from pydantic import BaseModel, BeforeValidator, Field, create_model

from .core.config import DatasetSpec, check_unique_keys, text_keys
from .infra.ledger_store import DEFAULT_SCHEMA, is_postgres
from .infra.store import is_url
from .core.units import DEFAULT_WAREHOUSE_NAME
from .factory import dp_synth_definitions
from .naming import Names

# The scaffolded defs.yaml. The example entry is commented out so the instance loads as written
# (no dataset yet); uncommenting it (removing "  # " from each line of the block) gives a valid
# entry that reads the host asset `analytics/customers`.
DEFS_YAML = """\
type: {type_name}

attributes:
  # Paths: absolute, relative to this folder, or under the project's root as below.
  # Keep what they hold out of git: with these paths, add these lines to the project's
  # .gitignore:
{gitignore}\
  warehouse: "{{{{ context.project_root }}}}/warehouse.duckdb"  # private zone: read and written
  ledger: "{{{{ context.project_root }}}}/.dp_synth/ledger.sqlite"  # privacy ledger (private)
  public_dir: "{{{{ context.project_root }}}}/public"  # public zone
  # The warehouse's stable name (its tables' privacy units): set it once, never change it.
  warehouse_name: default
  key_prefix: dp_synth
  # group_name: privacy
  # tags: {{team: data-platform}}
  # owners: ["team:data-platform"]
  # automation_condition: "{{{{ dg.AutomationCondition.eager() }}}}"
  # One entry per table, each exactly a datasets.yaml entry (dp-synth docs: add-a-table.md).
  datasets: {{}}
  # datasets:
  #   customers:
  #     description: The host's customers table
  #     source: {{asset: [analytics, customers], table: main.customers}}
  #     columns:
  #       age: {{kind: integer, bounds: [18, 90], bins: 24}}
  #       plan: {{kind: categorical, categories: [basic, plus, pro]}}
  #       active: {{kind: boolean}}
  #     privacy: {{epsilon: 1.0, delta: 1.0e-9, limit: {{epsilon: 10.0, delta: 1.0e-8}}}}
  #     min_interval: 1h
"""


# The .gitignore lines (relative to the project's root) for the scaffolded paths: the warehouse
# file and its write-ahead log, the private zone dp-synth keeps beside it (`private/`: owner-only
# logs, change-detection state), the ledger's folder (the ledger is private: back it up
# elsewhere) and the public zone (rebuilt by a run).
GITIGNORE = ("/warehouse.duckdb", "/warehouse.duckdb.wal", "/private/", "/.dp_synth/", "/public/")


def _doc(description: str) -> dg.Resolver:
    """An attribute's description in the component's schema (`dg utils inspect-component`)."""
    return dg.Resolver.default(description=description)


@functools.cache
def _typed_model(derived: type[BaseModel]) -> type[BaseModel]:
    """Dagster's model of the component's attributes with `datasets:` typed as the mapping of
    `DatasetSpec` entries alone. Dagster lets every attribute be a template string too
    (`<type> | str`), and a value that fails a union is reported at the attribute's first line,
    with the string branch's error beside it; typed alone, a wrong entry is reported at its own
    key and line, by `dg check yaml` (the JSON schema) and by `dg check defs` (pydantic)."""
    field = derived.model_fields["datasets"]
    # a dataset name YAML reads as no text (`yes:`) is refused saying to quote it
    datasets = Annotated[dict[str, DatasetSpec], BeforeValidator(text_keys("dataset"))]
    return create_model(derived.__name__, __base__=derived, __module__=derived.__module__,
                        datasets=(datasets, Field(
                            default=field.default, description=field.description)))


def _entries(context: dg.ResolutionContext, datasets: dict[str, DatasetSpec]) -> dict[str, dict]:
    """The `datasets:` entries, which Dagster validated with `DatasetSpec` (its schema is the
    attribute's, so `dg check yaml` and editors check each entry's keys and values, and an error
    names the line), as mappings with their templates rendered; the factory validates them
    again, rendered, naming this component's defs.yaml."""
    return {name: context.at_path(name).resolve_value(
        spec.model_dump(mode="json", by_alias=True, exclude_unset=True))
        for name, spec in datasets.items()}


class DpSynthScaffolder(dg.Scaffolder):
    """Writes a defs.yaml that loads as written, with a commented example entry."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        if request.scaffold_format != "yaml":
            dg.scaffold_component(request, {})
            return
        Path(request.target_path).mkdir(parents=True, exist_ok=True)
        (Path(request.target_path) / "defs.yaml").write_text(
            DEFS_YAML.format(type_name=request.type_name,
                             gitignore="".join(f"  # {line}\n" for line in GITIGNORE)))


@scaffold_with(DpSynthScaffolder)
@dataclass
class DpSynthComponent(dg.Component, dg.Resolvable):
    """Differentially private synthetic twins of warehouse tables, one per datasets.yaml entry.

    Per dataset: the stages from its source (a host asset or an external table) to `synthetic`,
    their checks, job and schedule (docs/add-to-dagster.md, "Component attributes")."""

    warehouse: Annotated[str, _doc(
        "The private zone's DuckDB file: `table:` sources are read and synthetic tables written "
        "there. Relative to this component's folder.")]
    ledger: Annotated[str, _doc("The privacy ledger's SQLite file (private; back it up), "
                                "relative to this component's folder; or a postgresql:// URL "
                                "of the database that holds it (`ledger_schema`).")]
    public_dir: Annotated[str, _doc("The public-zone folder: relative to this component's "
                                    "folder, or an object-store URL (s3://bucket/prefix).")]
    warehouse_name: Annotated[str, _doc(
        "The warehouse's stable name: its tables' privacy units are `table:<name>:<schema."
        "table>`, never the file's path, so moving or copying the project keeps the spend. "
        "Give two warehouses that share one ledger different names; never change it.")] = (
        DEFAULT_WAREHOUSE_NAME)
    datasets: Annotated[dict[str, dict[str, Any]], dg.Resolver(
        _entries, model_field_type=dict[str, DatasetSpec],
        description="Dataset name -> a datasets.yaml entry (source, columns, privacy, ...), "
                    "typed by dp-synth's registry model (`core.config.DatasetSpec`).")] = field(
        default_factory=dict)
    private_dir: Annotated[str | None, _doc(
        "The private zone's folder (private log, utility report, change-detection secret): "
        "relative to this component's folder, or an object-store URL (default: `private` "
        "beside the warehouse file).")] = None
    ledger_head: Annotated[str | None, _doc(
        "The ledger's mirrored head file (default: the ledger's path + '.head').")] = None
    ledger_schema: Annotated[str, _doc(
        "The schema of a PostgreSQL ledger's tables (default: dp_synth).")] = DEFAULT_SCHEMA
    key_prefix: Annotated[str | list[str] | None, _doc(
        "Prepended to every asset key: [*key_prefix, <dataset>, <stage>].")] = None
    group_name: Annotated[str | None, _doc(
        "One group for every dp-synth asset (default: the key prefix, or dp_synth).")] = None
    tags: Annotated[dict[str, str], _doc("Added to every dp-synth asset.")] = field(
        default_factory=dict)
    owners: Annotated[list[str], _doc("Added to every dp-synth asset.")] = field(
        default_factory=list)
    automation_condition: Annotated[
        dg.AutomationCondition | None,
        dg.Resolver.default(
            model_field_type=Optional[str],  # noqa: UP045
            description="Set on every materializable dp-synth asset, as a template, e.g. "
                        "\"{{ dg.AutomationCondition.eager() }}\"."),
    ] = None
    warehouse_resource_key: Annotated[str, _doc("Resource key of the warehouse.")] = (
        Names.warehouse)
    ledger_resource_key: Annotated[str, _doc("Resource key of the ledger.")] = Names.ledger
    io_manager_key: Annotated[str, _doc(
        "Resource key of the IO manager of the model's units (dp-synth's own).")] = (
        Names.io_manager)
    pool: Annotated[str | None, _doc(
        "Concurrency pool of the steps that open the warehouse (null: none).")] = Names.pool

    dataset_jobs: Annotated[bool, _doc(
        "A job `<dataset>_synthesis` for every dataset (default: only where a schedule or a "
        "multiprocess fit needs one).")] = False

    @classmethod
    def model(cls) -> type[BaseModel]:
        return _typed_model(super().model())

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        folder = Path(context.path)
        folder = folder if folder.is_dir() else folder.parent

        def path(value: str) -> Path:
            return (folder / value).resolve()

        def zone(value: str) -> str | Path:
            return value if is_url(value) else path(value)

        defs_yaml = folder / "defs.yaml"
        if defs_yaml.is_file():  # Dagster's loader keeps a key written twice silently
            check_unique_keys(defs_yaml.read_text(), str(defs_yaml))

        return dp_synth_definitions(
            self.datasets, warehouse=path(self.warehouse),
            ledger=self.ledger if is_postgres(self.ledger) else path(self.ledger),
            ledger_schema=self.ledger_schema,
            public_dir=zone(self.public_dir), base_dir=folder,
            private_dir=zone(self.private_dir) if self.private_dir else None,
            origin=f"{folder / 'defs.yaml'} (attributes.datasets)",
            ledger_head=path(self.ledger_head) if self.ledger_head else None,
            key_prefix=self.key_prefix, group_name=self.group_name, tags=self.tags,
            owners=self.owners, automation_condition=self.automation_condition,
            warehouse_resource_key=self.warehouse_resource_key,
            ledger_resource_key=self.ledger_resource_key, io_manager_key=self.io_manager_key,
            pool=self.pool, dataset_jobs=self.dataset_jobs, warehouse_name=self.warehouse_name)


__all__ = ["DpSynthComponent", "DpSynthScaffolder"]
