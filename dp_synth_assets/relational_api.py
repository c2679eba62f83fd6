"""The notebook API of a relation: a parent table and its children synthesized together, a
parent with all its children being the unit of privacy (docs/relational.md).

`RelationalSynthesizer` fits two `Synthesizer`s through the same stages: the parent over the
parent view (its columns and its bounded children count), the child over the bounded child view
(its columns joined with its parent's, k children a family: `family.model_children`), the views
made in DuckDB from the two frames (`core.relational`), so rows never enter Python. One ledger
reservation and one accountant hold the family's budget (the child charged at d_in = k:
`core.family`). `sample` draws the parents, then each one's children given its values; keys are
new and every foreign key resolves.
Bad input is refused before anything is spent, quoting no private value."""

import math
import uuid
from collections.abc import Mapping

import duckdb
import numpy as np
from pydantic import ValidationError

from .api import (ARGUMENTS_ENTRY, DEFAULT_DATASET, Accountant, Charge, SpecError, Synthesizer,
                  _ledger, dataset_spec, private_run)
from .core import family, stages
from .core.budget import DatasetBudget
from .core.config import ParentSpec
from .core.privacy import epsilon_from_rho
from .core.relational import (CHILDREN, PARENT_PREFIX, bounded_children_sql, parents_sql,
                              unique_parents_sql)
from .core.sql import ident, sql
from .core.synthesize import decode_typed

# the names the frames and the relation's views get inside the fit's own DuckDB
PARENTS_SOURCE, CHILDREN_SOURCE = "dp_synth_parents_source", "dp_synth_children_source"
FAMILY_VIEW, BOUNDED_VIEW = "dp_synth_family", "dp_synth_bounded"
MODEL_VIEW = "dp_synth_modeled"
PARENTS_VIEW = "dp_synth_unique_parents"


class FamilySide:
    """One table's door to the family's accountant: its stages' charges, each tagged with the
    table, at d_in = `rows` (the children a family has in the view the child's stages read:
    `family.family_spend`), 1 on the parent side."""

    def __init__(self, accountant: Accountant, table: str, rows: int = 1, child: bool = False):
        self.accountant, self.table, self.rows, self.child = accountant, table, rows, child

    def stage(self, name: str):
        charge = self.accountant.stage(name)

        def tagged(spend, **params) -> None:
            charge(spend, table=self.table, **params)
        return family.side_charge(tagged, self.rows, child=self.child)


class RelationalSynthesizer:
    """A differentially private synthesizer of a parent table and its children that keeps
    the join.

    Args:
        parent_columns: the parent's `columns:` block (never its key).
        child_columns: the child's `columns:` block (never its foreign key).
        key: the parent's key column (one row per key is kept: `unique_parents_sql`).
        foreign_key: the child's column holding its parent's key.
        max_children: the public bound on the children kept per parent (1..10000); children
            beyond it are dropped by a rule that never reads their values.
        epsilon, delta: the budget of one `fit`, for the family (both tables).
        limit: the lifetime limit a ledger enforces (an epsilon or {epsilon, delta}).
        child_share: the share of the family's rho the child table gets.
        method, generator: as `Synthesizer`'s, for both tables.
        seed: seeds the bounding draw and sampling.
        ledger: a `PrivacyLedger` or its path; one dataset (`dataset`) for the family.

    Example:

        >>> from dp_synth_assets import RelationalSynthesizer
        >>> from dp_synth_assets.relational_example import RELATIONAL_DATASETS as D
        >>> from dp_synth_assets.relational_example import generate_relational_example
        >>> customers, orders = generate_relational_example(1_000, seed=3)
        >>> synth = RelationalSynthesizer(D["customers"]["columns"], D["orders"]["columns"],
        ...     key="id", foreign_key="customer_id", max_children=20, epsilon=5.0, seed=1)
        >>> parents, children = synth.fit(customers, orders).sample()
        >>> set(children["customer_id"].to_pylist()) <= set(parents["id"].to_pylist())
        True
    """

    def __init__(self, parent_columns: Mapping, child_columns: Mapping, *, key: str,
                 foreign_key: str, max_children: int, epsilon: float, delta: float = 1e-9,
                 limit: float | Mapping | None = None, child_share: float = family.CHILD_SHARE,
                 method: str = "auto", generator: str = "auto", seed: int | None = None,
                 ledger=None, dataset: str = DEFAULT_DATASET):
        try:
            self.relation = ParentSpec(dataset="parents", foreign_key=foreign_key, key=key,
                                       max_children=max_children)
        except ValidationError as e:
            raise SpecError("RelationalSynthesizer arguments are invalid: " + "; ".join(
                f"argument {'.'.join(map(str, err['loc']))!r}: {err['msg']}"
                for err in e.errors())) from None
        if not (isinstance(child_share, (int, float)) and 0 < child_share < 1):
            raise SpecError(f"argument 'child_share': a share in (0, 1), got {child_share!r}")
        problems = []
        if key in parent_columns:
            problems.append(f"argument 'parent_columns': the key column {key!r} is listed; key "
                            "columns are named only by `key` / `foreign_key` and never measured: "
                            f"remove {key!r}")
        if foreign_key in child_columns:
            problems.append(f"argument 'child_columns': the foreign key column {foreign_key!r} "
                            "is listed; key columns are named only by `key` / `foreign_key` and "
                            f"never measured: remove {foreign_key!r}")
        if CHILDREN in parent_columns:
            problems.append(f"argument 'parent_columns': a parent gets the attribute "
                            f"{CHILDREN!r} (its children count); leave {CHILDREN!r} out")
        if problems:
            raise SpecError("RelationalSynthesizer arguments are invalid:\n  "
                            + "\n  ".join(problems))
        settings = dict(epsilon=epsilon, delta=delta, limit=limit, method=method,
                        generator=generator, seed=seed)
        parent = _spec({**parent_columns, CHILDREN: family.children_column(max_children)},
                       "parent_columns", settings)
        joined = family.joined_columns({n: c for n, c in parent.columns.items() if n != CHILDREN})
        child = _spec({**child_columns, **joined}, "child_columns", settings)
        problems = family.child_problems(
            {n: child.columns[n] for n in child_columns}, parent.columns)
        if problems:
            raise SpecError("RelationalSynthesizer arguments are invalid:\n  argument "
                            "'child_columns': " + "\n  argument 'child_columns': ".join(problems))
        self.joined = [n[len(PARENT_PREFIX):] for n in joined]
        self.child_columns = list(child_columns)
        self.max_children = int(max_children)
        self.child_share = float(child_share)
        self.seed = seed
        self.dataset = dataset
        self.ledger = _ledger(ledger, {dataset: ARGUMENTS_ENTRY})
        self.budget = DatasetBudget.of(parent)  # the family's: its run rho pays for both tables
        self.parent_synthesizer = Synthesizer.from_spec(parent, dataset=dataset)
        self.child_synthesizer = Synthesizer.from_spec(child, dataset=dataset)
        self._charges: tuple[Charge, ...] = ()
        # children per family the child's stages read (`family.model_children`), set by fit
        self.model_children: int | None = None

    # -- the private side

    def fit(self, parents, children) -> "RelationalSynthesizer":
        """Spend the family's budget on the two frames (pandas, Polars or Arrow) and fit both
        models. The parent's stages run first; the child's then read `model_children` children
        a family (`family.model_children`, from the parent's noisy children counts and public
        facts), each child mechanism at d_in = `model_children`.

        Raises:
            SpecError: a key column is missing, a frame is of no kind it reads, the parents
                have a `children` column; nothing is spent. Parent rows that share a key are
                one family's: one of them is kept (`unique_parents_sql`), never refused.
            BudgetExceeded: the ledger cannot cover the family's run; nothing is read or spent.
        """
        rel = self.relation
        con = duckdb.connect(":memory:")
        try:
            _register(con, PARENTS_SOURCE, parents, "parents")
            _register(con, CHILDREN_SOURCE, children, "children")
            self._check_frames(con)
            con.execute(unique_parents_sql(ident(PARENTS_SOURCE), rel.key, self.seed or 0,
                                           PARENTS_VIEW))
            con.execute(bounded_children_sql(
                ident(CHILDREN_SOURCE), ident(PARENTS_VIEW), rel.foreign_key, rel.key,
                rel.max_children, self.seed or 0, BOUNDED_VIEW, self.joined))
            con.execute(parents_sql(ident(PARENTS_VIEW), rel.foreign_key, rel.key,
                                    FAMILY_VIEW, BOUNDED_VIEW))
            found = self._spend(con)
        finally:
            con.close()
        for synth, (plan, chosen, measured) in zip((self.parent_synthesizer, self.child_synthesizer), found):
            synth.store.write_selection(chosen)
            synth.store.write_measurements(measured)
            synth.fit_model(plan, measured)
        return self

    def _check_frames(self, con: duckdb.DuckDBPyConnection) -> None:
        """Refuse frames that cannot hold the relation, by their column names (read before the
        reservation: no row is read)."""
        rel = self.relation
        problems = []
        parent_names = con.table(PARENTS_SOURCE).columns
        child_names = con.table(CHILDREN_SOURCE).columns
        if rel.key not in parent_names:
            problems.append(f"argument 'parents': the key column {rel.key!r} is missing; pass "
                            "a frame that holds it, or name its key column in `key`")
        if rel.foreign_key not in child_names:
            problems.append(f"argument 'children': the foreign key column {rel.foreign_key!r} "
                            "is missing; pass a frame that holds it, or name it in "
                            "`foreign_key`")
        if CHILDREN in parent_names:
            problems.append(f"argument 'parents': the frame has a column {CHILDREN!r}, the "
                            "attribute a parent gets (its children count): rename or drop it")
        if problems:
            raise SpecError("RelationalSynthesizer.fit: " + "\n  ".join(problems))

    def _spend(self, con: duckdb.DuckDBPyConnection) -> list[tuple]:
        """The private stages of both tables under one reservation of the family's run rho;
        each side's (plan, selection, measurements)."""
        run_id = f"api-{uuid.uuid4().hex}"
        family_budget = self.budget
        if self.ledger is not None:
            self.ledger.reserve(self.dataset, run_id, family_budget.run_rho,
                                family_budget.limit_rho, family_budget.run_delta_extra,
                                family_budget.limit_delta_extra, delta=family_budget.delta)
        accountant = Accountant(family_budget, self.ledger, self.dataset, run_id)
        reason = "failed"
        found = []
        try:
            parent = self.parent_synthesizer
            found.append(self._side(con, parent, FAMILY_VIEW, FamilySide(accountant, "parents"),
                                    family.split_budget(family_budget, parent.budget,
                                                        1 - self.child_share)))
            self.model_children = self._model_children(found[0][2])
            rel = self.relation
            con.execute(bounded_children_sql(
                ident(CHILDREN_SOURCE), ident(PARENTS_VIEW), rel.foreign_key, rel.key,
                self.model_children, self.seed or 0, MODEL_VIEW, self.joined))
            child = self.child_synthesizer
            found.append(self._side(con, child, MODEL_VIEW,
                                    FamilySide(accountant, "children", self.model_children,
                                               child=True),
                                    family.split_budget(family_budget, child.budget,
                                                        self.child_share, self.model_children,
                                                        child=True)))
            reason = "run finished"
        finally:
            self._charges = tuple(accountant.charges)
            if self.ledger is not None:
                self.ledger.release(self.dataset, run_id, reason=reason)
        return found

    def _side(self, con: duckdb.DuckDBPyConnection, synth: Synthesizer, view: str,
              side: "FamilySide", budget: DatasetBudget) -> tuple:
        """One table's private stages on `view`: its (plan, selection, measurements)."""
        with private_run(synth.spec, budget, view, con, None, side, self.dataset) as run:
            plan = run.preprocess()
            oracle = run.marginals(plan)
            chosen = run.select(plan, oracle)
            return plan, chosen, run.measure(plan, chosen, oracle)

    def _model_children(self, measured) -> int:
        """`family.children_to_read` from the parent's consistent measurements and public
        facts: the child's share of the family's rho and its model's declared domain."""
        return family.children_to_read(measured.measurements, self.max_children,
                                       self.budget.run_rho * self.child_share,
                                       self.child_synthesizer.spec.columns)

    # -- the public side

    @property
    def charges(self) -> tuple[Charge, ...]:
        """Every charge of the last fit, each at its table's d_in (`parameters['table']`)."""
        return self._charges

    @property
    def rho(self) -> float:
        """The family's run rho: what one fit spends for both tables together."""
        return self.budget.run_rho

    @property
    def rho_spent(self) -> float:
        return math.fsum(c.rho for c in self._charges)

    @property
    def epsilon_spent(self) -> float:
        return epsilon_from_rho(self.rho_spent, self.budget.delta)

    def sample(self, n: int | None = None, seed: int | None = None):
        """Synthetic parents and their children; spends nothing.

        Args:
            n: the number of parents; default the parent's noisy row count.
            seed: default the synthesizer's.

        Returns:
            (parents, children): pyarrow Tables. The parents carry the key column (new keys
            1..n) and their columns; the children the foreign key (a synthetic parent's key)
            and their columns. Each parent has the children count its model drew (0..max_children).

        Raises:
            RuntimeError: nothing was fitted yet.
        """
        import pyarrow as pa

        if self.parent_synthesizer.model is None or self.child_synthesizer.model is None:
            raise RuntimeError("call fit(parents, children) before sample()")
        seed = self.seed if seed is None else seed
        parent, child = self.parent_synthesizer, self.child_synthesizer
        draw = stages.sample(parent.model, parent.noisy_total, parent.spec.rows,
                             parent.spec.model.chunk_rows, n, seed)
        codes = _concatenated(draw.chunks)
        con = duckdb.connect(":memory:")
        try:
            parents = decode_typed(con, parent.plan, codes, draw.decode_rng,
                                   parent.spec.declared_constraints)
            counts = np.clip(np.asarray(parents.column(CHILDREN).to_numpy(zero_copy_only=False),
                                        dtype=np.int64), 0, self.max_children)
            join = [(name, PARENT_PREFIX + name) for name in self.joined]
            sizes = [parent.plan.domain[name] for name in self.joined]
            if [child.plan.domain[c] for _, c in join] != sizes:
                raise RuntimeError("the child's encoding of a joined parent column differs from "
                                   "the parent's; refit both")

            def pool(rows: int, round_: int):
                pool_seed = (None if seed is None
                             else int(np.random.SeedSequence([seed, 1, round_]).generate_state(1)[0]))
                return _concatenated(stages.sample(child.model, child.noisy_total, "same",
                                                   child.spec.model.chunk_rows, rows,
                                                   pool_seed).chunks)

            rng = np.random.default_rng(None if seed is None else [seed, 2])
            child_codes, owner = family.draw_children(codes, counts, join, sizes, pool, rng)
            children = decode_typed(con, child.plan, child_codes,
                                    np.random.default_rng(None if seed is None else [seed, 3]),
                                    child.spec.declared_constraints)
        finally:
            con.close()
        rel = self.relation
        parents = parents.drop_columns([CHILDREN])
        parents = parents.add_column(0, rel.key, pa.array(family.synthetic_keys(len(counts))))
        children = children.select(self.child_columns)
        children = children.add_column(0, rel.foreign_key,
                                       pa.array(family.synthetic_keys(len(counts))[owner]))
        return parents, children


def _spec(columns: dict, argument: str, settings: dict):
    """`api.dataset_spec` of one side; an error names `argument` for the columns."""
    try:
        return dataset_spec(columns, **settings)
    except SpecError as e:
        raise SpecError(str(e).replace("argument 'columns'", f"argument {argument!r}")) from None


def _register(con: duckdb.DuckDBPyConnection, name: str, frame, argument: str) -> None:
    """Register a pandas, Polars or Arrow table on `con` under `name` (no copy)."""
    module = type(frame).__module__.split(".")[0]
    if module not in ("pandas", "pyarrow", "polars"):
        raise SpecError(f"argument {argument!r}: expected a pandas, Polars or Arrow table, got "
                        f"{type(frame).__name__}")
    if module == "polars" and hasattr(frame, "collect"):
        frame = frame.collect()
    con.register(name, frame)


def _concatenated(chunks) -> dict[str, np.ndarray]:
    """The code arrays of every chunk, joined."""
    chunks = list(chunks)
    return {a: np.concatenate([c[a] for c in chunks]) for a in chunks[0]}
