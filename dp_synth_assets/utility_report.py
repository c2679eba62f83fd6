"""The owner-only `utility_report` asset (private zone): the synthetic table against the source.

A thin Dagster wrapper over `dp_synth_assets.evaluation.report`: it reads at most
`report.max_rows` encoded rows of the training rows, the held-out rows and the synthetic table
and writes the report's files under the private folder, readable by the owner only. Nothing in
the report is DP, so nothing computed here reaches the public event log: the metadata holds the
files' paths, the log lines where they are and which classifier runs. Whether a run succeeds
does not depend on the rows. The asset exists only when the dataset has a `report:` block.
The files and the failure cases: "As implemented: the asset" in
docs/decisions/0022-evaluation-metrics.md.
"""

import json

import dagster as dg
import numpy as np

from dp_synth_assets.resources.warehouse import WarehouseResource

from .infra.store import PARQUET, atomic_write, is_remote, local_copy
from .core.sql import sql
from .artifacts import artifacts
from .dataset_context import PRIVATE, DatasetContext, Stage, bind
from .source_access import source_connection


def build_utility_report(ctx: DatasetContext) -> Stage:
    """The `[<dataset>, utility_report]` stage, downstream of `synthetic` (see the module
    docstring; keys and resource key from `ctx.names`), run after it in the dataset's stage op
    under `private_step`."""
    asset_spec = ctx.asset_spec(
        "utility_report", PRIVATE, deps=[ctx.key("synthetic")], kinds={"python"},
        description="Owner-only: fidelity, 3-way query error, ML efficiency and plots of the "
                    "synthetic table against the source, written to files in the private zone "
                    "(not DP; the metadata holds only their paths).")
    return Stage(asset_spec, bind(ctx, "utility_report", utility_report, private=True))


def utility_report(ctx: DatasetContext, context: dg.AssetExecutionContext,
                   warehouse: WarehouseResource, ledger=None) -> dg.MaterializeResult:
    """The stage function of `utility_report` (module docstring)."""
    from .core.domain import encoded_columns
    from .core.sql import literal, qualified
    from .evaluation import report as evaluation
    from .evaluation.ml import CLASSIFIERS, classifier_line

    dataset, spec, report_spec = ctx.dataset, ctx.spec, ctx.spec.report
    store = artifacts(warehouse, dataset, context)  # the run's own set, or the published one
    plan = store.plan_for(spec)
    cap = report_spec.max_rows
    seed = spec.seed if spec.seed is not None else 0
    expressions = encoded_columns(plan)
    with local_copy(store.path(PARQUET)) as local, \
            source_connection(warehouse, spec, dataset, read_only=True) as con:
        parquet = literal(str(local))

        def rows(relation: str) -> dict:
            return con.execute(sql("sample_rows", relation=relation, rows=int(cap),
                                   seed=int(seed))).fetchnumpy()
        train = rows(qualified(ctx.view))
        test = rows(qualified(ctx.view + "_holdout")) if report_spec.holdout > 0 \
            else {c: np.zeros(0, dtype=np.int64) for c in plan.columns}
        synth = rows(sql("encoded_relation", expressions=expressions,
                         source=f"read_parquet({parquet})"))
    ordinal = {e.column: e.bins for e in plan.encodings
               if e.kind in ("integer", "float", "datetime") and e.bins}
    said = []

    def progress(line: str) -> None:
        said.append(line)
        context.log.info(line)

    names = evaluation.REPORT_FILES
    try:
        report = evaluation.utility_report(
            {c: np.asarray(v, dtype=np.int64) for c, v in train.items()},
            {c: np.asarray(v, dtype=np.int64) for c, v in test.items()},
            {c: np.asarray(v, dtype=np.int64) for c, v in synth.items()},
            plan.domain, target=report_spec.target, ordinal=ordinal, seed=seed,
            triples_count=report_spec.triples, labels=evaluation.code_labels(plan),
            log=progress)
        files = {
            names["json"]: json.dumps(evaluation.report_document(report)).encode(),
            names["html"]: evaluation.report_html(
                report, f"Utility report of {dataset!r} (owner-only)").encode(),
            names["histograms"]: report.histograms_png,
            names["heatmap"]: report.tvd_heatmap_png,
        }
    except Exception as e:  # noqa: BLE001 - the rows (an empty source...) decided it
        # whether the report could be made depends on the rows: the run goes on as if it
        # had been, with the same public lines, and the owner reads why in the files
        for line in (classifier_line(n) for n in CLASSIFIERS):
            if line not in said:
                context.log.info(line)
        files = failed_report(dataset, e, names)
    del train, test, synth
    folder = warehouse.private_path(dataset, names["json"]).parent
    if is_remote(folder):  # the private bucket's permissions keep them owner-only
        paths = {name: str(folder / name) for name in files}
        for name, content in files.items():
            atomic_write(folder / name, content)
    else:
        paths = evaluation.write_owner_only(folder, files, root=folder.parent)
    context.log.info(f"utility report written to {paths[names['html']]} (private zone, "
                     "owner-only; not shown here)")
    return dg.MaterializeResult(metadata={
        "report_html": dg.MetadataValue.path(paths[names["html"]]),
        "report_json": dg.MetadataValue.path(paths[names["json"]]),
        "histograms_png": dg.MetadataValue.path(paths[names["histograms"]]),
        "tvd_heatmap_png": dg.MetadataValue.path(paths[names["heatmap"]]),
    })


def failed_report(dataset: str, error: BaseException, names: dict) -> dict[str, bytes]:
    """The report's files when it could not be computed from the rows: the JSON and HTML say
    why (the exception, which may quote a value: these files are owner-only), the PNGs are
    empty."""
    import html
    import traceback

    text = "".join(traceback.format_exception(error))
    return {
        names["json"]: json.dumps({"error": text}).encode(),
        names["html"]: (f"<!doctype html><title>Utility report of {html.escape(dataset)}"
                        "</title><h1>The utility report could not be computed</h1>"
                        f"<pre>{html.escape(text)}</pre>").encode(),
        names["histograms"]: b"",
        names["heatmap"]: b"",
    }
