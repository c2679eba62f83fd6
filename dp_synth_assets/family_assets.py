"""The `synthetic` stage of a family's two datasets in Dagster (docs/relational.md): the parent's
draws the synthetic parents, with new keys and their `children` counts; the child's (the parent's
`synthetic` asset is its upstream) draws each synthetic parent's children from the child's model
given the parent's joined values (`core.family.draw_children`), then publishes BOTH tables in one
warehouse transaction: readers see both old tables or both new ones.

The parent's stage writes its rows (Parquet) and codes (`FAMILY_CODES`) to its run's folder,
both public; `synthetic.<parent>` is written by the child's stage (the warehouse tables are the
pair's commit point), whose set also holds the parent rows it drew for (`PAIR_PARQUET`): one
pointer publishes the Parquet pair. Post-processing of public records: no ledger, no private read.
"""

import functools
import shutil
import time

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dp_synth_assets.resources.warehouse import WarehouseResource

from .artifacts import artifacts, holding
from .core import family, stages
from .core.relational import CHILDREN, PARENT_PREFIX
from .core.sql import ident, literal, qualified, sql
from .core.synthesize import STAMP, decode_typed
from .dataset_context import DatasetContext
from .infra.store import PAIR_PARQUET, PARQUET
from .writes import warehouse_writes

# the parent's public codes the child's generation reads: <joined column> codes and `children`
FAMILY_CODES = "family_codes.npz"
FAMILY_RELATION = "dp_synth_family_rows"


def _concatenated(chunks) -> dict[str, np.ndarray]:
    chunks = list(chunks)
    return {a: np.concatenate([c[a] for c in chunks]) for a in chunks[0]}


def parent_synthetic(ctx: DatasetContext, context, warehouse: WarehouseResource,
                     ledger=None) -> dg.MaterializeResult:
    """The synthetic parents: drawn from the parent's model, decoded, keyed 1..n (new keys),
    written to the run's Parquet copy without `children`, their codes kept for the child's
    stage (module docstring)."""
    rel, spec = ctx.relation, ctx.spec
    with holding(context, warehouse, ctx.dataset, "synthetic", ctx.names):
        store = artifacts(warehouse, ctx.dataset, context)
        plan = store.plan_for(spec)
        store.require_consistent("measurements", "model")
        found, fitted = store.measurements(), store.model()
        draw = stages.sample(fitted, found.noisy_total, spec.rows, spec.model.chunk_rows,
                             seed=spec.seed, log=context.log.info)
        codes = _concatenated(draw.chunks)
        with warehouse.connect(read_only=True) as con:
            rows = decode_typed(con, plan, codes, draw.decode_rng, spec.declared_constraints)
        counts = np.clip(np.asarray(rows.column(CHILDREN).to_numpy(zero_copy_only=False),
                                    dtype=np.int64), 0, rel.spec.max_children)
        keys = family.synthetic_keys(len(counts))
        table = rows.drop_columns([CHILDREN]).add_column(0, rel.spec.key, pa.array(keys))
        with store.writing(PARQUET) as path:
            pq.write_table(table, str(path))
        with store.writing(FAMILY_CODES) as path, open(path, "wb") as f:
            np.savez(f, children=counts, children_code=codes[CHILDREN],
                     **{n: codes[n] for n in rel.joined})
        store.publish()
    histogram = np.bincount(counts, minlength=rel.spec.max_children + 1)
    context.log.info(f"drew {len(counts)} synthetic parents with {int(counts.sum())} children "
                     "in all; the child's synthetic stage publishes both tables")
    return dg.MaterializeResult(metadata={
        "table": ctx.synthetic, "rows": len(counts), "children": int(counts.sum()),
        "children_per_parent": dg.MetadataValue.json([int(v) for v in histogram]),
        "parquet": dg.MetadataValue.path(str(store.path(PARQUET))),
        "published_by": dg.MetadataValue.text(
            ctx.names.key(rel.child, "synthetic").to_user_string()),
    })


def child_synthetic(ctx: DatasetContext, context, warehouse: WarehouseResource,
                    ledger=None) -> dg.MaterializeResult:
    """Each synthetic parent's children (`family.draw_children`), their foreign keys the
    parent's new keys; then both tables published in one transaction (module docstring)."""
    rel, spec = ctx.relation, ctx.spec
    seed = spec.seed
    with holding(context, warehouse, ctx.dataset, "synthetic", ctx.names):
        started = time.perf_counter()
        parents = artifacts(warehouse, rel.parent, context)
        if not parents.has(FAMILY_CODES):
            raise dg.Failure(description=(
                f"the synthetic parents of {rel.parent!r} are missing: materialize "
                f"{ctx.names.key(rel.parent, 'synthetic').to_user_string()} first"))
        with parents.path(FAMILY_CODES).open("rb") as f, np.load(f) as kept:  # file or URL
            parent_codes = {n: kept[n] for n in kept.files}
        parent_plan = parents.plan()
        store = artifacts(warehouse, ctx.dataset, context)
        plan = store.plan_for(spec)
        store.require_consistent("measurements", "model")
        found, fitted = store.measurements(), store.model()
        join = [(n, PARENT_PREFIX + n) for n in rel.joined]
        sizes = [parent_plan.domain[n] for n in rel.joined]
        if [plan.domain[c] for _, c in join] != sizes:
            raise dg.Failure(description=(
                f"the child's encoding of a joined parent column differs from the parent's: "
                f"materialize both datasets' stages again ({rel.parent!r}, {rel.child!r})"))

        def pool(rows: int, round_: int):
            pool_seed = (None if seed is None else
                         int(np.random.SeedSequence([seed, 1, round_]).generate_state(1)[0]))
            return _concatenated(stages.sample(fitted, found.noisy_total, "same",
                                               spec.model.chunk_rows, rows, pool_seed).chunks)

        counts = parent_codes.pop("children")
        parent_codes.pop("children_code")
        rng = np.random.default_rng(None if seed is None else [seed, 2])
        codes, owner = family.draw_children(parent_codes, counts, join, sizes, pool, rng)
        with warehouse_writes(warehouse, ctx.dataset, "the synthetic tables of a family"), \
                warehouse.connect() as con:
            children = decode_typed(con, plan, codes,
                                    np.random.default_rng(None if seed is None else [seed, 3]),
                                    spec.declared_constraints)
            children = children.select(list(rel.sources[rel.child].columns)).add_column(
                0, rel.spec.foreign_key, pa.array(family.synthetic_keys(len(counts))[owner]))
            with store.writing(PARQUET) as path:
                pq.write_table(children, str(path))
            # the pair in the child's set: one pointer switches both copies (module docstring);
            # the parent's Parquet (a file or an object-store URL) is read once, from the copy
            with store.writing(PAIR_PARQUET) as path:
                with parents.path(PARQUET).open("rb") as f, open(path, "wb") as copy:
                    shutil.copyfileobj(f, copy)
                parent_rows = pq.read_table(path)
            store.note("family", {"parent": rel.parent, "parent_run": parents.set_run})
            # each table stamped with the run whose set holds its Parquet (the parent's may be
            # an earlier run's): what `infra.store.reconcile_synthetic` compares
            publish_family(con, {rel.parent: parent_rows, rel.child: children},
                           {rel.parent: f"synthetic.{rel.parent}", rel.child: ctx.synthetic},
                           {rel.parent: parents.set_run or context.run_id,
                            rel.child: context.run_id})
        store.publish()
    seconds = time.perf_counter() - started
    context.log.info(f"drew and published {children.num_rows} children of {len(counts)} "
                     f"parents in {seconds:.1f}s")
    return dg.MaterializeResult(metadata={
        "table": ctx.synthetic, "parent_table": f"synthetic.{rel.parent}",
        "rows": children.num_rows, "parents": len(counts),
        "dagster/row_count": dg.MetadataValue.int(children.num_rows),
        "dagster/table_name": dg.MetadataValue.text(ctx.synthetic),
        "parquet": dg.MetadataValue.path(str(store.path(PARQUET))),
        "parent_parquet": dg.MetadataValue.path(str(store.path(PAIR_PARQUET))),
        "sample_and_write_seconds": dg.MetadataValue.float(round(seconds, 2)),
    })


def family_checks(ctx: DatasetContext) -> tuple:
    """The check specs of a family dataset's `synthetic` asset and the function that runs them
    (`dataset_context.Stage`): the child's carries the family's checks (checks/relational.py);
    the parent's table is published, and so checked, by the child's stage."""
    rel = ctx.relation
    if rel.role(ctx.dataset) == "parent":
        return ()
    from .checks.relational import FAMILY_CHECKS, description

    key = ctx.key("synthetic")
    specs = tuple(dg.AssetCheckSpec(name, asset=key, description=description(name))
                  for name in FAMILY_CHECKS)
    return specs, functools.partial(check_family, ctx)


def check_family(ctx: DatasetContext, context, warehouse: WarehouseResource):
    """Yield the family's checks on its published synthetic tables (checks/relational.py)."""
    from .checks import relational as checks

    rel = ctx.relation
    parents = artifacts(warehouse, rel.parent, context)
    found = parents.measurements()
    with parents.path(FAMILY_CODES).open("rb") as f, np.load(f) as kept:  # file or URL
        values, codes = kept["children"], kept["children_code"]
    code_of_value = np.zeros(rel.spec.max_children + 1, dtype=np.int64)
    code_of_value[values] = codes
    parent_table = f"synthetic.{rel.parent}"
    with warehouse.connect(read_only=True) as con:
        results = [
            checks.referential_integrity(con, parent_table, ctx.synthetic, rel.spec.key,
                                         rel.spec.foreign_key),
            checks.children_per_parent(
                checks.children_histogram(con, parent_table, ctx.synthetic, rel.spec.key,
                                          rel.spec.foreign_key, rel.spec.max_children),
                code_of_value, checks.children_measurement(list(found.measurements), CHILDREN),
                found.noisy_total)]
    for r in results:
        yield dg.AssetCheckResult(
            asset_key=ctx.key("synthetic"), check_name=r.name, passed=r.passed,
            severity=dg.AssetCheckSeverity[checks.FAMILY_CHECKS[r.name]],
            metadata={k: dg.MetadataValue.json(v) if isinstance(v, (list, dict)) else v
                      for k, v in r.metadata.items()})


def publish_family(con, rows: dict, tables: dict[str, str], stamps: dict[str, str]) -> None:
    """Replace each table of `tables` (dataset -> `schema.name`) by its rows (`rows`, dataset ->
    an Arrow table or record batch reader: what its run's Parquet copy holds), stamped with its
    run id (`stamps`), in ONE transaction: a reader sees every old table or every new one, never
    a mix; a failure leaves the old ones."""
    relations = {dataset: f"{FAMILY_RELATION}_{i}" for i, dataset in enumerate(tables)}
    for table in tables.values():
        con.execute(sql("create_schema", schema=qualified(table.rsplit(".", 1)[0])))
    for dataset, relation in relations.items():
        con.register(relation, rows[dataset])
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            for dataset, table in tables.items():
                con.execute(sql("write_table", table=qualified(table),
                                relation=ident(relations[dataset])))
                con.execute(sql("comment_table", table=qualified(table),
                                comment=literal(STAMP + stamps[dataset])))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:  # outside the transaction: an aborted one refuses even this
        for relation in relations.values():
            con.unregister(relation)
