"""The notebook API: select-measure-generate on a table in memory or on disk, without Dagster.

`Synthesizer` takes a datasets.yaml entry's keys as arguments (validated by the same
`DatasetSpec`, so every rule and message is the registry's; an error names the argument), fits
with the stage functions of `core/stages.py` that the pipeline's assets call, and keeps the
public records in an `infra.store.MemoryStore`. Guarantees: rows never enter Python (only the
pipeline's aggregate queries read them, and a caller's connection is never written to); one
`fit` spends exactly the run budget the pipeline spends for the same entry, through the ledger
when one is given (reserved before any private read, refused with `BudgetExceeded` spending
nothing); with `public_dir=` a fit holds the dataset's run lock as a pipeline run does;
`sample` reads only public records and costs nothing. Details: docs/notebook.md, "Guarantees"."""

import logging
import math
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
from pydantic import ValidationError

from .core import generate
from .core import marginals as margs
from .infra.engines import open_engine
from .infra.public_lists import read_public_lists
from .core import stages
from .core.budget import PRIVATE_STAGES, DatasetBudget
from .core.config import (CsvSource, DatasetSpec, ParquetSource, RegistryError, TableSource,
                          is_uri)
from .core.constraints import ConstraintError
from .core.domain import Clique, EncodingPlan
from .core.measure import Measurements
from .core.privacy import Spend, epsilon_from_rho
from .core.select import Selection
from .core.sql import ident, sql
from .infra.runs import (DEFAULT_RUN_WAIT_SECONDS, DatasetLock, RunWaitTimeout,  # noqa: F401
                        dataset_lock)
from .infra.store import MemoryStore, location
from .core.synthesize import decode_typed

# the name a registered in-memory source gets inside the embedded connection
SOURCE_VIEW = "dp_synth_source"
_STREAM = "dp_synth_stream"
# what the privacy ledger calls the API's spend when no `dataset` is given
DEFAULT_DATASET = "notebook"
# where a refusal (the budget's) tells a notebook user to change the settings
ARGUMENTS_ENTRY = "the Synthesizer's arguments (its `limit`)"
# datasets.yaml keys that are `Synthesizer` arguments of another name
_PRIVACY_ARGUMENTS = {"epsilon": "epsilon", "delta": "delta", "limit": "limit"}


class SpecError(RegistryError):
    """A `Synthesizer` argument breaks a datasets.yaml rule; the message names the argument."""


class BudgetError(RuntimeError):
    """A mechanism charged more than the run's rho (a stage called twice in one run)."""


def dataset_spec(columns: Mapping, *, epsilon: float, delta: float = 1e-9,
                 limit: float | Mapping | None = None, method: str = "auto",
                 generator: str = "auto", rows: int | str = "same", seed: int | None = None,
                 selection: Mapping | None = None, model: Mapping | None = None,
                 constraints: Sequence[str] | str | None = ()) -> DatasetSpec:
    """The datasets.yaml entry these arguments spell, validated by `DatasetSpec` (its source is
    a placeholder: `fit` sets the real one). `limit`: an epsilon (at `delta`), a mapping
    {epsilon, delta}, or None for one run's (epsilon, delta). `constraints`: datasets.yaml's
    `constraints:` list (core/constraints.py); a bad one is refused naming the argument."""
    if limit is None:
        limit = {"epsilon": epsilon, "delta": delta}
    elif not isinstance(limit, Mapping):
        limit = {"epsilon": limit, "delta": delta}
    entry = {"source": {"table": SOURCE_VIEW}, "columns": columns,
             "privacy": {"epsilon": epsilon, "delta": delta, "limit": dict(limit)},
             "method": method, "generator": generator, "rows": rows, "seed": seed,
             "selection": dict(selection or {}), "model": dict(model or {}),
             "constraints": ([constraints] if isinstance(constraints, str)
                             else list(constraints or ()))}
    try:
        spec = DatasetSpec.model_validate(entry)
    except ValidationError as e:
        problems: dict[str, list[str]] = {}
        for err in e.errors():
            where = _argument([str(p) for p in err["loc"]])
            msg = err["msg"]
            if isinstance(err.get("ctx", {}).get("error"), ConstraintError):
                where, msg = "argument 'constraints'", str(err["ctx"]["error"])
            problems.setdefault(where, [])
            if msg not in problems[where]:
                problems[where].append(msg)
        raise SpecError("Synthesizer arguments are invalid:\n  " + "\n  ".join(
            f"{where}: {' or '.join(msgs)}" for where, msgs in problems.items())) from None
    spec._entry = ARGUMENTS_ENTRY  # a refusal asks to change the arguments, not a file
    return spec


def _argument(loc: list[str]) -> str:
    """`argument 'columns', key 'age.bounds'` from a pydantic location in the entry (union-member
    tags such as `literal[...]` are not keys and are dropped)."""
    keys = [p for p in loc if not p.startswith(("literal[", "constrained-", "function-"))]
    if not keys:
        return "arguments"
    if keys[0] == "privacy":
        if len(keys) == 1:
            return "argument 'epsilon' / 'delta' / 'limit'"
        keys = [_PRIVACY_ARGUMENTS.get(keys[1], keys[1]), *keys[2:]]
    rest = ".".join(keys[1:])
    return f"argument {keys[0]!r}" + (f", key {rest!r}" if rest else "")


# ------------------------------------------------------------------------------------ the spend


@dataclass(frozen=True)
class Charge:
    """One mechanism's spend, as its OpenDP privacy map reported it."""

    stage: str
    mechanism: str
    rho: float
    delta_extra: float
    scale: float
    parameters: dict = field(default_factory=dict)


class Accountant:
    """The `charge(spend, **params)` callback of one run: keeps every charge, refuses one beyond
    the run's rho (or delta_extra), and forwards each to the ledger when there is one."""

    def __init__(self, budget: DatasetBudget, ledger=None, dataset: str = DEFAULT_DATASET,
                 run_id: str = ""):
        self.budget, self.ledger, self.dataset, self.run_id = budget, ledger, dataset, run_id
        self.charges: list[Charge] = []

    @property
    def rho(self) -> float:
        return math.fsum(c.rho for c in self.charges)

    def stage(self, name: str):
        """The callback a stage's mechanisms call."""
        def charge(spend: Spend, **params) -> None:
            rho = self.rho + spend.rho
            extra = math.fsum(c.delta_extra for c in self.charges) + spend.delta_extra
            if (rho > self.budget.run_rho * (1 + 1e-12)
                    or extra > self.budget.run_delta_extra * (1 + 1e-12)):
                raise BudgetError(
                    f"stage {name!r} would spend rho {rho:.6g} in all, above the run's "
                    f"rho {self.budget.run_rho:.6g}: each stage runs once per fit")
            if self.ledger is not None:
                self.ledger.charge(self.dataset, self.run_id, name, spend, params)
            self.charges.append(Charge(name, spend.mechanism, spend.rho, spend.delta_extra,
                                       spend.scale, dict(params)))
        return charge


@dataclass(frozen=True)
class Report:
    """What a fit spent and produced, all of it public: the budget (epsilon, delta) and its rho,
    the rho spent (by stage and per mechanism) with the epsilon it implies (at the delta the
    run's rho was converted at: `delta` less the share set aside for thresholding, so that with
    `delta_extra_spent` the fit is (epsilon_spent, delta)-DP;
    docs/decisions/0002-zcdp-accounting.md), the selected cliques, each measurement's noise
    scale and rho, the noisy row count, and the
    generator with the reason it was chosen."""

    epsilon: float
    delta: float
    rho: float                     # the run's budget
    rho_spent: float
    epsilon_spent: float           # at delta - the run's reserved delta_extra (see above)
    delta_extra_spent: float
    rho_by_stage: dict[str, float]
    charges: tuple[Charge, ...]
    method: str
    selected: tuple[Clique, ...]
    measurements: tuple[dict, ...]  # {clique, sigma, rho} after consistency
    noisy_total: float
    generator: str
    generator_reason: str

    def to_dict(self) -> dict:
        return {
            "epsilon": self.epsilon, "delta": self.delta, "rho": self.rho,
            "rho_spent": self.rho_spent, "epsilon_spent": self.epsilon_spent,
            "delta_extra_spent": self.delta_extra_spent, "rho_by_stage": self.rho_by_stage,
            "charges": [{"stage": c.stage, "mechanism": c.mechanism, "rho": c.rho,
                         "delta_extra": c.delta_extra, "scale": c.scale, **c.parameters}
                        for c in self.charges],
            "method": self.method, "selected": [list(c) for c in self.selected],
            "measurements": [dict(m, clique=list(m["clique"])) for m in self.measurements],
            "noisy_total": self.noisy_total, "generator": self.generator,
            "generator_reason": self.generator_reason,
        }

    def __str__(self) -> str:
        stages = ", ".join(f"{s} {r:.4g}" for s, r in self.rho_by_stage.items())
        return (f"spent rho {self.rho_spent:.6g} of {self.rho:.6g} (epsilon "
                f"{self.epsilon_spent:.4g} at delta {self.delta:g}; {stages}); {self.method} "
                f"selected {len(self.selected)} marginals; {len(self.measurements)} measurements; "
                f"noisy rows {self.noisy_total:.1f}; generator {self.generator} "
                f"({self.generator_reason})")


# ----------------------------------------------------------------------------------- the source


@contextmanager
def open_source(spec: DatasetSpec, source, connection: duckdb.DuckDBPyConnection | None = None,
                csv: Mapping | None = None) -> Iterator[tuple[duckdb.DuckDBPyConnection, DatasetSpec, Path]]:
    """A connection that reads `source`, the spec naming it, and the folder relative paths are
    resolved against. In-memory frames are registered into a new in-memory DuckDB (no copy); a
    DuckDB relation is streamed into a table of one (Arrow batches, no Python rows); a table
    name is read on `connection`; a path is a Parquet or CSV source (`csv`: the options of
    datasets.yaml's `source: {csv: ...}`)."""
    base_dir = Path.cwd()
    if spec.engine.type != "duckdb":  # a table of the scan engine; the store is in memory
        if not isinstance(source, str):
            raise SpecError(f"argument 'source': engine {spec.engine.type} reads a table of its "
                            "database: pass its name ('schema.table')")
        # Spark also reads Parquet itself: a .parquet path or glob, or a URI (s3a://...)
        files = spec.engine.type == "spark" and (is_uri(source)
                                                 or source.lower().endswith(".parquet"))
        con = duckdb.connect(":memory:")
        try:
            yield con, spec.model_copy(update={"source": _validated(
                ParquetSource, {"parquet": source}, "source") if files else _validated(
                TableSource, {"table": source}, "source")}), base_dir
        finally:
            con.close()
        return
    if isinstance(source, (str, Path)) and connection is not None:
        src = _validated(TableSource, {"table": str(source)}, "source")
        yield connection, spec.model_copy(update={"source": src}), base_dir
        return
    con = duckdb.connect(":memory:")
    try:
        if isinstance(source, (str, Path)):
            text = str(source)
            if csv is not None or text.lower().endswith((".csv", ".tsv", ".csv.gz")):
                src = _validated(CsvSource, {"csv": text, **dict(csv or {})}, "csv")
            elif text.lower().endswith(".parquet"):
                src = ParquetSource(parquet=text)
            else:
                raise SpecError(f"argument 'source': {text!r} is neither a .parquet nor a .csv "
                                "path; a table name needs `connection=` (a DuckDB connection), "
                                "and a CSV of another extension `csv={}`")
            yield con, spec.model_copy(update={"source": src}), base_dir
            return
        if isinstance(source, duckdb.DuckDBPyRelation):
            con.register(_STREAM, source.to_arrow_reader())
            con.execute(sql("write_table", table=ident(SOURCE_VIEW), relation=_STREAM))
            con.unregister(_STREAM)
        else:
            module = type(source).__module__.split(".")[0]
            if module not in ("pandas", "pyarrow", "polars"):
                raise SpecError("argument 'source': expected a pandas, Polars or Arrow table, a "
                                "DuckDB relation, a table name with `connection=`, or a "
                                f"Parquet/CSV path; got {type(source).__name__}")
            if module == "polars" and hasattr(source, "collect"):
                source = source.collect()
            con.register(SOURCE_VIEW, source)
        yield con, spec.model_copy(update={"source": TableSource(table=SOURCE_VIEW)}), base_dir
    finally:
        con.close()


def _validated(model, data: dict, argument: str):
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise SpecError(f"argument {argument!r}: " + "; ".join(
            f"{'.'.join(map(str, err['loc'])) or argument}: {err['msg']}"
            for err in e.errors())) from None


# ------------------------------------------------------------------------------ the private run


class PrivateRun:
    """The private stages of one fit over one source, callable one by one; each takes and
    returns the core's records. Obtained from `Synthesizer.reading(source)`, which reserves the
    run's budget first and releases it when the `with` block ends."""

    def __init__(self, spec: DatasetSpec, budget: DatasetBudget, con: duckdb.DuckDBPyConnection,
                 base_dir: Path, accountant: Accountant, dataset: str, schema: str):
        self.spec, self.budget, self.con, self.base_dir = spec, budget, con, base_dir
        self.accountant, self.dataset = accountant, dataset
        self.view, self.table = f"{schema}.encoded", f"{schema}.marginals"

    def preprocess(self) -> EncodingPlan:
        """Check the source against the columns, learn what they leave undeclared with DP and
        create the encoded view (`stages.preprocess`). A `categories: {from: ...}` list is read
        on the run's connection (`connection=` of `reading`/`fit`) before anything is
        charged."""
        lists = (read_public_lists(self.con, self.spec)
                 if any(c.categories_from is not None for c in self.spec.columns.values())
                 else None)
        return stages.preprocess(self.con, self.spec, self.dataset, self.base_dir, self.view,
                                 self.budget, self.accountant.stage("preprocessed"),
                                 log=logging.getLogger("dp_synth").info, public_lists=lists)

    def marginals(self, plan: EncodingPlan) -> margs.MarginalStore:
        """The exact marginals the method needs, counted in one scan (`stages.marginals`), as
        the oracle the selection and measurement read (private: never return its answers to a
        user)."""
        stages.marginals(self.con, self.spec.method, self.spec.selection, plan, self.view,
                         self.table, log=logging.getLogger("dp_synth").info)
        return stages.oracle(self.con, plan, self.view, self.table)

    def select(self, plan: EncodingPlan, oracle) -> Selection:
        return stages.select(self.spec.method, self.spec.selection, plan, oracle, self.budget,
                             self.accountant.stage("selection"))

    def measure(self, plan: EncodingPlan, chosen: Selection, oracle) -> Measurements:
        """The consistent measurements (the selection's and this stage's noisy marginals) and
        the noisy row count they agree on (`stages.measure`)."""
        return stages.measure(plan, chosen, oracle, self.budget,
                              self.accountant.stage("measurements"))


@contextmanager
def private_run(spec: DatasetSpec, budget: DatasetBudget, source, connection, csv,
                accountant, dataset: str) -> Iterator[PrivateRun]:
    """The private stages over `source` (`open_source`) with `budget`, every charge going to
    `accountant` (its `stage(name)` callbacks); the encoded view and the marginals live in an
    in-memory database of their own, detached when the block ends. Reserves nothing: the
    caller reserves the run's budget in the ledger first."""
    with open_source(spec, source, connection, csv) as (con, spec, base_dir), \
            open_engine(spec.engine, con, drop_views=True) as engine:
        catalog = f"dp_synth_{uuid.uuid4().hex[:12]}"
        con.execute(sql("attach_memory", catalog=ident(catalog)))
        try:
            yield PrivateRun(spec, budget, engine if engine.name != "duckdb" else con,
                             base_dir, accountant, dataset, f"{catalog}.main")
        finally:
            con.execute(sql("detach_database", catalog=ident(catalog)))


# ---------------------------------------------------------------------------------- the API


class Synthesizer:
    """A differentially private synthesizer of one table (the guarantees: module docstring).

    Args:
        columns: datasets.yaml's `columns:` block: column name -> its spec (a dict or a
            `ColumnSpec`).
        epsilon: the budget of one `fit`, with `delta`.
        delta: the budget of one `fit`, with `epsilon`.
        limit: the lifetime limit a ledger enforces: an epsilon or {epsilon, delta}; default
            one run's.
        method: the selection method (auto, absyn, privsyn, mst, aim, ppsyn, manual).
        generator: the generation engine (auto, pgm, parallel_pgm, gum).
        rows: `sample()`'s default: `same` (the noisy row count) or a number.
        seed: seeds sampling; selection and noise draws are never seeded.
        selection: datasets.yaml's `selection:` block.
        model: datasets.yaml's `model:` block.
        constraints: datasets.yaml's `constraints:` list, e.g. ["dropoff >= pickup"]: public
            rules every row `sample()` returns satisfies (docs/generators.md).
        ledger: a `PrivacyLedger`, its path or a postgresql:// URL; None spends without one.
        dataset: the name the ledger records the spend under.
        public_dir: the pipeline's public folder: a fit then holds the dataset's run lock.
        run_wait_seconds: how long a fit waits for that lock.

    Raises:
        SpecError: an argument breaks a rule of datasets.yaml; the message names the argument.

    Example (the bundled example's columns; run as a doctest by tests/test_doctests.py):

        >>> from dp_synth_assets import Synthesizer
        >>> from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example
        >>> synth = Synthesizer(columns=EXAMPLE_COLUMNS, epsilon=1.0, delta=1e-9, seed=7)
        >>> synth = synth.fit(generate_example(2_000))   # spends one run's budget
        >>> table = synth.sample(500)                     # free: a pyarrow Table
        >>> table.num_rows, table.column_names == list(EXAMPLE_COLUMNS)
        (500, True)
        >>> report = synth.report                         # a fit spends its whole budget
        >>> round(report.rho_spent / report.rho, 6), round(report.epsilon_spent, 6)
        (1.0, 1.0)
    """

    def __init__(self, columns: Mapping, *, epsilon: float, delta: float = 1e-9,
                 limit: float | Mapping | None = None, method: str = "auto",
                 generator: str = "auto", rows: int | str = "same", seed: int | None = None,
                 selection: Mapping | None = None, model: Mapping | None = None,
                 constraints: Sequence[str] | str | None = (), ledger=None,
                 dataset: str = DEFAULT_DATASET,
                 public_dir: str | Path | None = None,
                 run_wait_seconds: float = DEFAULT_RUN_WAIT_SECONDS):
        spec = dataset_spec(columns, epsilon=epsilon, delta=delta, limit=limit, method=method,
                            generator=generator, rows=rows, seed=seed, selection=selection,
                            model=model, constraints=constraints)
        self._init(spec, ledger, dataset, public_dir, run_wait_seconds)

    @classmethod
    def from_spec(cls, spec: DatasetSpec, *, ledger=None, dataset: str = DEFAULT_DATASET,
                  public_dir: str | Path | None = None,
                  run_wait_seconds: float = DEFAULT_RUN_WAIT_SECONDS) -> "Synthesizer":
        """A synthesizer with a datasets.yaml entry's settings (`config.load_registry(path)[name]`);
        its `source` is ignored: `fit` takes the source."""
        synth = cls.__new__(cls)
        synth._init(spec, ledger, dataset, public_dir, run_wait_seconds)
        return synth

    def _init(self, spec: DatasetSpec, ledger, dataset: str, public_dir=None,
              run_wait_seconds: float = DEFAULT_RUN_WAIT_SECONDS) -> None:
        if spec.report is not None:
            spec = spec.model_copy(update={"report": None})  # no holdout: every row trains
        self.spec = spec
        self.budget = DatasetBudget.of(spec)
        self.ledger = _ledger(ledger, {dataset: spec.entry})
        self.dataset = dataset
        self.lock = (dataset_lock(location(public_dir) / dataset, dataset,
                                  getattr(self.ledger, "database", None))
                     if public_dir is not None else None)
        self.run_wait_seconds = run_wait_seconds
        self.store = MemoryStore(dataset)
        self.choice: generate.Choice | None = None
        self._charges: tuple[Charge, ...] = ()

    def _stored(self, name: str):
        return getattr(self.store, name)() if self.store.has(name) else None

    @property
    def plan(self) -> EncodingPlan | None:
        """The last fit's encoding plan (public)."""
        return self._stored("plan")

    @property
    def selection(self) -> Selection | None:
        return self._stored("selection")

    @property
    def measurements(self) -> Measurements | None:
        """The consistent measurements the model is fitted on, with their noisy row count."""
        return self._stored("measurements")

    @property
    def noisy_total(self) -> float | None:
        found = self.measurements
        return None if found is None else found.noisy_total

    @property
    def model(self):
        return self._stored("model")

    # -- the private side

    @contextmanager
    def reading(self, source, *, connection: duckdb.DuckDBPyConnection | None = None,
                csv: Mapping | None = None) -> Iterator[PrivateRun]:
        """The private stages over `source`, one by one. The run's rho is reserved in the
        ledger (if any) before the source is opened, and released when the block ends; with a
        `public_dir`, the dataset's run lock is held around both."""
        run_id = f"api-{uuid.uuid4().hex}"
        with self._holding(run_id):
            with self._reserved(run_id, source, connection, csv) as run:
                yield run

    @contextmanager
    def _holding(self, run_id: str):
        """The dataset's run lock for `run_id`, when there is a `public_dir`."""
        if self.lock is None:
            yield
            return
        self.lock.acquire(run_id, timeout=self.run_wait_seconds,
                          log=logging.getLogger("dp_synth").warning,
                          wait_setting="Synthesizer(run_wait_seconds=...)")
        try:
            yield
        finally:
            self.lock.release(run_id)

    @contextmanager
    def _reserved(self, run_id: str, source, connection, csv) -> Iterator[PrivateRun]:
        accountant = Accountant(self.budget, self.ledger, self.dataset, run_id)
        if self.ledger is not None:
            self.ledger.reserve(
                self.dataset, run_id, sum(self.budget.stage_rho(s) for s in PRIVATE_STAGES),
                self.budget.limit_rho,
                sum(self.budget.stage_delta_extra(s) for s in PRIVATE_STAGES),
                self.budget.limit_delta_extra, delta=self.budget.delta)
        reason = "failed"
        try:
            with private_run(self.spec, self.budget, source, connection, csv, accountant,
                             self.dataset) as run:
                yield run
            reason = "run finished"
        finally:
            self._charges = tuple(accountant.charges)
            if self.ledger is not None:
                self.ledger.release(self.dataset, run_id, reason=reason)

    def fit(self, source, *, connection: duckdb.DuckDBPyConnection | None = None,
            csv: Mapping | None = None) -> "Synthesizer":
        """Spend one run's budget on `source` and fit the generator on the noisy measurements.

        Args:
            source: a pandas, Polars or Arrow table, a DuckDB relation, a table name (read on
                `connection`), or a Parquet/CSV path or glob.
            connection: the DuckDB connection holding a named table; it may be read-only.
            csv: the options of datasets.yaml's `source: {csv: ...}` for a CSV path.

        Returns:
            The synthesizer, fitted.

        Raises:
            SpecError: `source` is of no kind it reads (the message names the argument).
            BudgetExceeded: the ledger cannot cover the run; nothing is read or spent.
            LimitNotGranted: `limit` is above the limit the ledger keeps for the dataset.
            RunWaitTimeout: the dataset's run lock stayed held for `run_wait_seconds`.
        """
        with self.reading(source, connection=connection, csv=csv) as run:
            plan = run.preprocess()
            oracle = run.marginals(plan)
            chosen = run.select(plan, oracle)
            found = run.measure(plan, chosen, oracle)
        # kept before the fit, so a failed fit can be retried (`fit_model`) without spending
        self.store.write_plan(plan)
        self.store.write_selection(chosen)
        self.store.write_measurements(found)
        self.fit_model(plan, found)
        return self

    # -- the public side: post-processing of the plan and the measurements

    def fit_model(self, plan: EncodingPlan, measurements: Measurements):
        """Fit the generator on public records (an encoding plan and consistent measurements,
        e.g. the pipeline's, read through `infra.store.FolderStore(public_dir / dataset,
        dataset)`): the engine `generate.choose` picks, fitted unit by unit as the pipeline's
        model graph does (`stages.fit`). Spends nothing; the synthesizer then samples from it.
        Returns the fitted model."""
        fit_plan, model = stages.fit(self.spec, plan, measurements, self.dataset)
        self.store.write_plan(plan)
        self.store.write_measurements(measurements)
        self.store.write_model(model)
        self.choice = fit_plan.choice
        return model

    def sample(self, n: int | None = None, seed: int | None = None):
        """Synthetic rows, decoded and cast as the pipeline's synthetic table is; spends nothing.

        Args:
            n: the number of rows; default `rows` (`same`: the noisy row count).
            seed: default the synthesizer's; the same model, n and seed give the same table as
                the pipeline's `synthetic` stage.

        Returns:
            A pyarrow Table with the declared column names, order and SQL types.

        Raises:
            RuntimeError: nothing was fitted yet.
            ValueError: `n` asks for no row.
        """
        import pyarrow as pa

        if self.model is None:
            raise RuntimeError("call fit(source) (or fit_model) before sample()")
        seed = self.spec.seed if seed is None else seed
        draw = stages.sample(self.model, self.noisy_total, self.spec.rows,
                             self.spec.model.chunk_rows, n, seed)
        if draw.rows < 1:
            raise ValueError(f"argument 'n': sample at least one row, got {n!r}")
        plan = self.plan
        con = duckdb.connect(":memory:")
        try:
            chunks = [decode_typed(con, plan, codes, draw.decode_rng,
                                   self.spec.declared_constraints) for codes in draw.chunks]
        finally:
            con.close()
        return pa.concat_tables(chunks)

    @property
    def report(self) -> Report:
        """What the last fit spent and selected (`Report`).

        Raises:
            RuntimeError: nothing was fitted yet.
        """
        if self.measurements is None:
            raise RuntimeError("nothing to report: call fit(source) first")
        by_stage: dict[str, float] = {}
        for c in self._charges:
            by_stage[c.stage] = by_stage.get(c.stage, 0.0) + c.rho
        spent = math.fsum(c.rho for c in self._charges)
        extra = math.fsum(c.delta_extra for c in self._charges)
        delta = self.spec.privacy.delta
        chosen = self.selection
        found = self.measurements
        selected = (tuple(m.clique for m in chosen.measured) + tuple(chosen.cliques)
                    if chosen is not None else tuple(m.clique for m in found.measurements))
        return Report(
            epsilon=self.spec.privacy.epsilon, delta=delta, rho=self.budget.run_rho,
            rho_spent=spent, epsilon_spent=epsilon_from_rho(spent, delta - self.budget.run_delta_extra),
            delta_extra_spent=extra, rho_by_stage=by_stage, charges=self._charges,
            method=self.spec.method, selected=selected,
            measurements=tuple({"clique": m.clique, "sigma": m.sigma, "rho": m.rho}
                               for m in found.measurements),
            noisy_total=found.noisy_total,
            generator=self.choice.engine if self.choice else "",
            generator_reason=self.choice.reason if self.choice else "not fitted yet")


def _ledger(ledger, entries: dict[str, str]):
    """A PrivacyLedger from a path (the ledger module is loaded only when asked); `entries`:
    where each dataset's settings are written, for its budget refusal."""
    if ledger is None or not isinstance(ledger, (str, Path)):
        return ledger
    from .infra.ledger import PrivacyLedger

    return PrivacyLedger(ledger, entries=entries)
