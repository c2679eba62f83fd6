"""The checks of `synthetic` as Dagster asset checks (public zone): the package's only Dagster
module.

Every check of `suites.CHECKS` runs against `[<dataset>, synthetic]`, with that check's severity,
blocking flag and description, inside the dataset's stage op (pipeline.py), and is reported as an
`AssetCheckResult` whose metadata links its stored result
(`<public_dir>/<dataset>/runs/<run_id>/checks/<name>.json`) and the Data Docs site
(`<public_dir>/<dataset>/data_docs/`). Which set is checked and how an object store is handled:
"As implemented: asset_checks.py" in docs/great_expectations.md.
"""

from pathlib import Path

import dagster as dg

from dp_synth_assets.resources.warehouse import WarehouseResource

from ..core.config import ColumnSpec
from ..core.domain import EncodingPlan
from ..core.measure import Measurement
from ..dataset_context import DatasetContext
from ..infra.store import PARQUET, is_remote, local_copy, staged_folder
from ..naming import Names
from .frames import CheckInputs
from .outcomes import json_safe
from .suites import CHECKS, CheckResult, publish, run_all


def data_docs_dir(warehouse: WarehouseResource, dataset: str):
    """GX Data Docs of the checks (a static site: open index.html): public/<dataset>/data_docs."""
    return warehouse.public_path(dataset, "data_docs/index.html").parent


def asset_check_result(result: CheckResult, warehouse: WarehouseResource,
                       dataset: str, checks_dir: Path | None = None, docs_dir=None
                       ) -> dg.AssetCheckResult:
    """Publish `result` (`suites.publish`) into `checks_dir` (default: the published set's) and
    the Data Docs site `docs_dir` (default: the dataset's; a local copy of it when the zone is on
    an object store, whose own location the metadata then names), and report it with its
    check's severity."""
    site = data_docs_dir(warehouse, dataset)
    metadata = publish(result, checks_dir or warehouse.public_path(dataset, "checks"),
                       docs_dir if docs_dir is not None else site)
    metadata["data_docs"] = site / "index.html"
    return dg.AssetCheckResult(
        asset_key=dg.AssetKey([dataset, "synthetic"]), check_name=result.name,
        passed=result.passed, severity=dg.AssetCheckSeverity[CHECKS[result.name].severity],
        metadata={k: _metadata_value(v) for k, v in metadata.items()})


def _metadata_value(value):
    if isinstance(value, Path) or is_remote(value):
        return dg.MetadataValue.path(str(value))
    # numbers as Python's own types: a numpy float64 is a float, but Dagster before 1.13 cannot
    # serialize it (in a JSON value either)
    if isinstance(value, (list, dict)):
        return dg.MetadataValue.json(json_safe(value))
    # numbers as typed values: the UI charts them over runs
    if isinstance(value, float):
        return dg.MetadataValue.float(float(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return dg.MetadataValue.int(int(value))
    return value


def run_checks(warehouse: WarehouseResource, dataset: str, columns: dict[str, ColumnSpec],
               plan: EncodingPlan, measurements: list[Measurement], noisy_total: float, rows: int,
               table: str, parquet: str, model=None, log=None,
               checks_dir: Path | None = None, docs_dir=None, constraints: tuple = ()):
    """Yield one AssetCheckResult per check of `CHECKS`, in order, as each finishes: the schema,
    types and domains the declared `columns` give, the rest against `plan` and the
    measurements (`log` gets `run_all`'s start and end lines; results stored in `checks_dir`
    and rendered in `docs_dir`, a local folder, see `asset_check_result`)."""
    docs = docs_dir if docs_dir is not None else data_docs_dir(warehouse, dataset)
    inputs = CheckInputs(dataset, dict(columns), plan, measurements, noisy_total, rows,
                         table, parquet, docs, model, tuple(constraints))
    for result in run_all(lambda: warehouse.connect(read_only=True), inputs, log):
        yield asset_check_result(result, warehouse, dataset, checks_dir, docs)


def synthetic_check_specs(dataset: str, names: Names = Names()) -> list[dg.AssetCheckSpec]:
    """One spec per check of `CHECKS` on `[<dataset>, synthetic]` (keys from `names`, a
    `naming.Names`), with its blocking flag and description. The specs belong to the dataset's
    stage op (pipeline.py), which runs them after `synthetic`, or alone when a run selects only
    the checks."""
    asset_key = names.key(dataset, "synthetic")
    # not `check`: Dagster 1.11.0 compiles a record's constructor on its first call with the
    # caller's local names, and a local `check` hides its own `check` module
    return [dg.AssetCheckSpec(name, asset=asset_key, blocking=entry.blocking,
                              description=entry.description)
            for name, entry in CHECKS.items()]


def check_synthetic(ctx: DatasetContext, context, warehouse: WarehouseResource):
    """Yield the result of each check of `CHECKS` on the synthetic table of the dataset of `ctx`
    (a `dataset_context.DatasetContext`), in order (docs/great_expectations.md): the run's own set
    when it wrote one, else the published set. The plan is read as it is: after `synthetic` in
    one run it is the one that stage verified (`store.ArtifactStore.plan_for`); in a run of the
    checks alone, a published table made from an older spec is judged against the loaded spec,
    and fails where it contradicts it."""
    from ..artifacts import artifacts
    from ..core.synthesize import requested_rows

    dataset, spec = ctx.dataset, ctx.spec
    asset_key = ctx.key("synthetic")
    store = artifacts(warehouse, dataset, context)
    plan, found = store.plan(), store.measurements()
    rows = requested_rows(spec.rows, found.noisy_total)
    model = store.model() if store.has("model") else None
    with local_copy(store.path(PARQUET)) as parquet, \
            staged_folder(data_docs_dir(warehouse, dataset)) as docs:
        for result in run_checks(warehouse, dataset, spec.columns, plan, list(found.measurements),
                                 found.noisy_total, rows, ctx.synthetic,
                                 str(parquet), model, log=context.log.info,
                                 checks_dir=store.folder / "checks", docs_dir=docs,
                                 constraints=spec.declared_constraints):
            yield result._replace(asset_key=asset_key)
