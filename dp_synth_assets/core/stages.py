"""The stages of select-measure-generate, once: the notebook API (`api.PrivateRun`,
`Synthesizer`) and the Dagster assets (`pipeline.py`, `model.py`) both do each stage's work by
calling these, so the two produce the same records from the same inputs.

Private stages (they read the source; every mechanism reports its spend through `charge`):
`preprocess`, `marginals`, `select`, `measure` (its `Measurements` are the privacy boundary).
Public stages (post-processing of the plan and the measurements; they spend nothing):
`plan_fit`, `fit_unit`, `assemble` (or `fit`, all three in one process) and `sample`.
`oracle` arguments map a list of cliques to their exact counts: private, their answers must only
feed a charged mechanism. Each stage, and what surrounds them: docs/decisions/0007-asset-graph.md.
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
import numpy as np

from . import generate
from . import marginals as margs
from .budget import DatasetBudget, measurement_plan
from .config import (DatasetSpec, ModelSettings, SelectionSettings, plan_digest,
                     with_public_categories)
from .domain import Clique, EncodingPlan
from .measure import (Measurements, clique_size, coarsened_size, fine_columns,
                      make_consistent, merge_repeats, noisy_total, with_prior)
from .measure import measure as draw
from .preprocess import prepare_encoded_view
from .select import Selection, required_cliques
from .select.guard import guard
from .select import select as run_method
from .synthesize import requested_rows

Oracle = Callable[[list[Clique]], dict[Clique, np.ndarray]]


# ----------------------------------------------------------------------------- private stages


def preprocess(con: duckdb.DuckDBPyConnection, spec: DatasetSpec, dataset: str, base_dir: Path,
               view: str, budget: DatasetBudget, charge, note=None, log=None,
               public_lists: Mapping[str, list] | None = None) -> EncodingPlan:
    """Check the source's schema against the columns, learn what they leave undeclared (DP,
    with the preprocessing budget) and create the encoded view `view` (`prepare_encoded_view`;
    `note` gets the private counts of values that read as NULL or took a fallback code, `log`
    the progress lines of `preprocess.preprocess`); the plan records the digest of the spec it
    was made from (`config.plan_digest`). `public_lists`: the values read for each
    `categories: {from: ...}` column (`infra.public_lists.read_public_lists`), validated and
    used as declared lists (`config.with_public_categories`, refused before anything is
    charged); the plan names each one's public column (`Encoding.categories_from`)."""
    declared = with_public_categories(spec, public_lists or {})
    plan = prepare_encoded_view(con, declared, dataset, base_dir, view, budget.domains_rho,
                                budget.run_delta_extra, charge, budget.count, note, log=log)
    origins = {name: c.categories_from.name for name, c in spec.columns.items()
               if c.categories_from is not None}
    encodings = tuple(replace(e, categories_from=origins.get(e.column)) for e in plan.encodings)
    return replace(plan, encodings=encodings, spec_digest=plan_digest(spec))


@dataclass(frozen=True)
class Marginals:
    """The exact marginals of one scan (private): the table holding them, the cliques counted
    and their cells (both public: functions of the plan and the method's settings)."""

    table: str
    cliques: tuple[Clique, ...]
    cells: int


def marginals(con: duckdb.DuckDBPyConnection, method: str, selection: SelectionSettings,
              plan: EncodingPlan, view: str, table: str, log=None) -> Marginals:
    """Count, in one scan of `view`, every marginal the selection method `method` (with its
    `selection` settings) needs (`required_cliques`) into `table`; `log` gets the progress
    lines (`marginals.compute_marginals`)."""
    cliques = required_cliques(method, plan.domain, selection)
    written = margs.compute_marginals(con, view, table, plan.columns, cliques, plan.domain,
                                      log=log)
    return Marginals(written.table, tuple(cliques),
                     sum(clique_size(c, plan.domain) for c in cliques))


def oracle(con: duckdb.DuckDBPyConnection, plan: EncodingPlan, view: str,
           table: str) -> margs.MarginalStore:
    """The exact-count oracle over the counted marginals (counting on demand what is not)."""
    return margs.MarginalStore(con, view, table, plan.columns, plan.domain)


def select(method: str, selection: SelectionSettings, plan: EncodingPlan, oracle: Oracle,
           budget: DatasetBudget, charge, log=None) -> Selection:
    """The selection of the method `method` (with its `selection` settings) with the selection
    budget `budget.split`; `log` gets each round's public line (`select.round_line`) as it
    ends, for methods with rounds."""
    return run_method(method, plan.domain, oracle, budget.with_rows(plan.noisy_rows).split,
                      selection, charge, log)


def measure(plan: EncodingPlan, chosen: Selection, oracle: Oracle, budget: DatasetBudget,
            charge) -> Measurements:
    """Measure the cliques `chosen` left to measure with the measurement budget
    (`measurement_plan`'s per-clique rho; the oracle is not called when there is none), merge
    a marginal measured more than once into one (`merge_repeats`), then
    keep only the marginals that beat the independent model on their own noisy values (every
    method alike: `select.guard`, which spends nothing and folds a dropped marginal into the
    1-way ones), make the rest consistent (the selection's one-way and adaptive measurements
    included) and take the noisy row count they agree on."""
    rhos = measurement_plan(cover_columns(chosen, plan.domain), plan.domain,
                            budget.with_rows(plan.noisy_rows).stage_rho("measurements"))
    noisy = draw(oracle(list(rhos)), rhos, charge, chosen.coarse) if rhos else []
    priors = {e.column: e.prior for e in plan.encodings if e.prior}
    merged = [with_prior(m, priors.get(m.clique[0])) if len(m.clique) == 1 else m
              for m in merge_repeats(list(chosen.one_way) + list(chosen.measured) + noisy)]
    kept, _ = guard(merged, plan.domain)
    consistent = make_consistent(kept)
    return Measurements(tuple(consistent), noisy_total(consistent))


def cover_columns(chosen: Selection, domain: dict[str, int]) -> Selection:
    """`chosen` with the 1-way marginal of every column that no clique to measure contains
    (or that every clique holding it measures only on groups) added to its cliques, each
    weighted as ABSyn Eq. 11 weighs a clique (c^(2/3), on the scale
    of the selection's own per-c^(2/3) budget): otherwise such a column keeps only its share of
    the 1-way budget (0.1 rho for most methods), far less than the independent model gives it.
    Nothing changes when no clique is left to measure (`measurement_plan` then spends the
    budget on the 1-way marginals) or every column is covered."""
    if not chosen.cliques or sum(chosen.budgets.values()) <= 0:
        return chosen
    # a column measured only on groups (`chosen.coarse`) needs its own codes measured too
    covered = fine_columns(chosen.cliques, chosen.coarse)
    missing = [(a,) for a in domain if a not in covered]
    if not missing:
        return chosen
    unit = sum(chosen.budgets.values()) / sum(
        coarsened_size(c, domain, chosen.coarse.get(c)) ** (2 / 3) for c in chosen.cliques)
    budgets = {**chosen.budgets, **{c: unit * domain[c[0]] ** (2 / 3) for c in missing}}
    return replace(chosen, cliques=chosen.cliques + tuple(missing), budgets=budgets)


# ------------------------------------------------------------------------------ public stages


@dataclass(frozen=True)
class FitPlan:
    """The engine `generate.choose` picked (with its reason and estimates), the units of work of
    its fit, and the size facts of the engine's pre-fit check (`generate.check`: for the PGM
    engines the largest clique and the model's megabytes; None for an engine without one)."""

    choice: generate.Choice
    units: tuple
    size: dict | None = None

    @property
    def engine(self) -> str:
        return self.choice.engine


def plan_fit(spec: DatasetSpec, plan: EncodingPlan, found: Measurements,
             dataset: str) -> FitPlan:
    """Choose the engine for the requested rows (`requested_rows`), run its pre-fit check
    (`generate.check`, which raises `generate.ModelTooLarge`, e.g. a PGM clique above
    `model.max_clique_cells`) and split the fit into units (`generate.fit_units`)."""
    measurements = list(found.measurements)
    rows = requested_rows(spec.rows, found.noisy_total)
    choice = generate.choose(spec.generator, plan.domain, measurements, rows, spec.model)
    size = generate.check(choice.engine, plan.domain, measurements, spec.model, dataset)
    units = generate.fit_units(choice.engine, plan.domain, measurements, spec.model)
    return FitPlan(choice, tuple(units), size)


def fit_unit(settings: ModelSettings, plan: EncodingPlan, found: Measurements, engine: str,
             unit, log=None):
    """One unit's result (`generate.fit_unit`) under the `model:` settings `settings`."""
    return generate.fit_unit(engine, unit, plan.domain, list(found.measurements),
                             found.noisy_total, settings, log=log)


def assemble(plan: EncodingPlan, found: Measurements, engine: str, results: list):
    """The fitted model from its units' results (`generate.assemble`)."""
    return generate.assemble(engine, plan.domain, list(found.measurements), results)


def fit(spec: DatasetSpec, plan: EncodingPlan, found: Measurements, dataset: str,
        log=None) -> tuple[FitPlan, object]:
    """`plan_fit`, every unit, `assemble`, in this process: the fit plan and the fitted model."""
    fit_plan = plan_fit(spec, plan, found, dataset)
    results = [fit_unit(spec.model, plan, found, fit_plan.engine, unit, log)
               for unit in fit_plan.units]
    return fit_plan, assemble(plan, found, fit_plan.engine, results)


@dataclass(frozen=True)
class Draw:
    """Rows drawn from a fitted model: how many, their codes in chunks of at most
    `model.chunk_rows` (drawn lazily, a few chunks in memory at a time), and the random stream the
    decoder uses (values inside bins, rare members). The decoder's stream is seeded apart from
    the sampler's (`[seed, 1]`), which would otherwise replay the sampler's uniforms."""

    rows: int
    chunks: Iterator[dict[str, np.ndarray]]
    decode_rng: np.random.Generator


def sample(model, total: float, rows: int | str, chunk_rows: int, n: int | None = None,
           seed: int | None = None, log=None) -> Draw:
    """`n` rows (default: the `rows:` setting `rows`, `same` being the noisy row count
    `total`) from `model`, in chunks of at most `chunk_rows` (`model.chunk_rows`), with `seed`
    (None: unseeded)."""
    rows = requested_rows(rows, total) if n is None else int(n)
    return Draw(rows, generate.sample_chunks(model, rows, seed, chunk_rows, log=log),
                np.random.default_rng(None if seed is None else [seed, 1]))

