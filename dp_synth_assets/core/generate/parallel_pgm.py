"""The `parallel_pgm` engine: ABSyn's parallel private PGM (ABSyn section VII, Algorithm 4).

One maximum-entropy fit per maximal clique of the triangulated measurement graph (no belief
propagation between cliques), split into units that Dagster's executor runs in parallel, then
combined into a `CliqueTree` sampled conditioned on each separator. Reads only measurements
(post-processing). `estimate` calls a selection infeasible unless `separators_measured` holds,
so the separators agree. The steps and the cost model:
docs/decisions/0019-generators.md, "As implemented: parallel_pgm"."""

import os

import numpy as np

from ..domain import Clique
from ..measure import Measurement
from .. import extras
from .base import Estimate, budget_text, steps_at_once, within_budget
from .pgm import (BYTES_PER_CELL, FIT_OVERHEAD_SECONDS, JAX_BASE_MB,  # noqa: F401 (contract)
                  MODEL, SECONDS_PER_CELL_ITERATION, check, dumps, fit_seconds, iterations,
                  junction_cells, loads, sample_chunks)
from .tree import CliqueTree, junction_tree

PARALLEL_UNITS = True
WORKER_START_SECONDS = 8.0  # a step process imports Dagster, JAX and mbi


def separators_measured(domain: dict[str, int], measurements: list[Measurement]) -> bool:
    """True when every separator of the junction tree has each of its attributes and pairs
    inside some measurement contained in the separator: then both cliques that share it are
    fitted to the same (consistent) noisy marginals on it. Separators of three or more attributes
    are judged by their pairs: a 2-way selection cannot measure them whole."""
    cliques = [m.clique for m in measurements]
    _, separators, _ = junction_tree(domain, cliques)
    sets = [set(c) for c in cliques]
    for sep in separators:
        parts = [(a,) for a in sep] + [(a, b) for i, a in enumerate(sep) for b in sep[i + 1:]]
        for part in parts:
            if not any(set(part) <= s <= set(sep) for s in sets):
                return False
    return True


def assign(cliques: list[Clique], domain: dict[str, int], workers: int) -> list[list[int]]:
    """ABSyn section VII: largest domain first, each to the least loaded worker (by cells)."""
    sizes = [int(np.prod([domain[a] for a in c])) for c in cliques]
    cells = [0] * workers
    plan: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(len(cliques)), key=lambda i: -sizes[i]):
        w = int(np.argmin(cells))
        plan[w].append(i)
        cells[w] += sizes[i]
    return [p for p in plan if p]


def estimator() -> str:
    """Each clique's fit: mbi's ("mbi") when the `jax` extra is installed, else numpy's."""
    return "mbi" if extras.available("jax") else "numpy"


def fit_clique(domain: dict[str, int], clique: Clique, measurements: list[Measurement],
               noisy_total: float, iterations: int) -> np.ndarray:
    """The maximum-entropy distribution over `clique` given the measurements inside it
    (probabilities, axes in clique order), by `estimator`'s fit."""
    from . import mirror, pgm

    sub = {a: domain[a] for a in clique}
    inside = [m for m in measurements if set(m.clique) <= set(clique)]
    if estimator() == "mbi":
        model = pgm.fit(sub, inside, noisy_total, iterations)
        joint = pgm.model_marginals(model, [tuple(clique)])[tuple(clique)]
    else:
        _, calibrated = mirror.fit(sub, inside, noisy_total, iterations)
        joint = calibrated.project(tuple(clique))
    return np.clip(joint, 0.0, None) / joint.clip(0.0).sum()


def units(domain: dict[str, int], measurements: list[Measurement],
          workers: int | None) -> list[list[int]]:
    """The fit's units of work: the maximal cliques (indices into the junction tree's order)
    grouped by `assign` into at most `workers` units (default: the machine's cores). Each unit
    is one step of the `model` asset's graph, so Dagster's executor runs them in parallel."""
    order, _, _ = junction_tree(domain, [m.clique for m in measurements])
    return assign(order, domain, max(1, min(workers or os.cpu_count() or 1, len(order))))


def fit_cliques(domain: dict[str, int], unit: list[int], measurements: list[Measurement],
                noisy_total: float, iterations: int, log=None) -> dict[int, np.ndarray]:
    """The tables of one unit's cliques (Alg. 4 lines 4-6), by clique index."""
    order, _, _ = junction_tree(domain, [m.clique for m in measurements])
    tables = {}
    for i in unit:
        tables[i] = fit_clique(domain, order[i], measurements, noisy_total, iterations)
        if log:
            log(f"parallel_pgm: clique {list(order[i])} fitted")
    return tables


def combine(domain: dict[str, int], measurements: list[Measurement],
            tables: dict[int, np.ndarray]) -> CliqueTree:
    """Alg. 4 line 7: the cliques' tables as one CliqueTree in junction-tree order."""
    order, separators, _ = junction_tree(domain, [m.clique for m in measurements])
    missing = [list(order[i]) for i in range(len(order)) if i not in tables]
    if missing:
        raise ValueError(f"parallel_pgm: no table for the cliques {missing}")
    return CliqueTree(dict(domain), tuple(order), tuple(separators),
                      tuple(np.asarray(tables[i], dtype=np.float64) for i in range(len(order))))


def fit(domain: dict[str, int], measurements: list[Measurement], noisy_total: float,
        iterations: int, workers: int | None = None, log=None) -> CliqueTree:
    """Algorithm 4 in this process, unit after unit. The pipeline runs the units as separate
    steps instead (`generate.fit_units`), so they run in parallel under Dagster's executor."""
    plan = units(domain, measurements, workers)
    if log:
        order, _, _ = junction_tree(domain, [m.clique for m in measurements])
        sizes = [int(np.prod([domain[a] for a in c])) for c in order]
        log(f"parallel_pgm: {len(order)} maximal cliques (largest {max(sizes):,} cells, "
            f"{sum(sizes):,} in all) in {len(plan)} unit(s); cells per unit "
            f"{[sum(sizes[i] for i in p) for p in plan]}")
    tables: dict[int, np.ndarray] = {}
    for unit in plan:
        tables.update(fit_cliques(domain, unit, measurements, noisy_total, iterations, log))
    return combine(domain, measurements, tables)


# ---- the engine contract (see `generate`)


def estimate(domain: dict[str, int], measurements: list[Measurement], rows: int, settings,
             cores: int | None = None) -> Estimate:
    """The units' fits scheduled on the steps that run at once (0019-generators.md);
    infeasible as well above `model.max_clique_cells` or when a separator is not measured."""
    order, _, _ = junction_tree(domain, [m.clique for m in measurements])
    sizes = junction_cells(domain, measurements)
    largest = max(sizes)
    workers = max(1, min(settings.workers or cores or os.cpu_count() or 1, len(order)))
    plan = assign(order, domain, workers)
    # the job's executor is set from the requested generator, `auto` when auto chose this engine
    at_once = steps_at_once(False, settings, cores)
    which = estimator()
    if which == "mbi":
        unit_seconds = sorted((FIT_OVERHEAD_SECONDS * len(p) + sum(sizes[i] for i in p)
                               * iterations(settings.iterations, "mbi")
                               * SECONDS_PER_CELL_ITERATION) for p in plan)
    else:
        clique_seconds = [fit_seconds({a: domain[a] for a in c}, [
            m for m in measurements if set(m.clique) <= set(c)], settings.iterations)["numpy"]
            for c in order]
        unit_seconds = sorted(sum(clique_seconds[i] for i in p) for p in plan)
    lanes = [0.0] * min(at_once, len(plan))
    for t in reversed(unit_seconds):  # units start as earlier ones finish
        lanes[lanes.index(min(lanes))] += t
    seconds = max(lanes) + (WORKER_START_SECONDS if len(lanes) > 1 else 0.0)
    memory = len(lanes) * (JAX_BASE_MB + largest * BYTES_PER_CELL / 2**20)
    why = (f"{len(order)} maximal cliques in {len(plan)} unit(s), {len(lanes)} at a time, "
           f"largest clique {largest:,} {budget_text(settings)}")
    ok = largest <= settings.max_clique_cells
    if not ok:
        why += f"; largest clique above model.max_clique_cells {settings.max_clique_cells:,}"
    if not separators_measured(domain, measurements):
        ok = False
        why += "; a separator is not measured, so independent fits could disagree on it"
    return Estimate("parallel_pgm", ok and within_budget(seconds, memory, settings), seconds,
                    memory, why)


def fit_units(domain: dict[str, int], measurements: list[Measurement],
              settings) -> list[list[int]]:
    """The engine contract's `fit_units`: the maximal cliques split into at most
    `model.workers` units, largest domain first, each to the unit with the fewest cells so far."""
    return units(domain, measurements, settings.workers)


def fit_unit(unit: list[int], domain: dict[str, int], measurements: list[Measurement],
             noisy_total: float, settings, log=None) -> dict[int, np.ndarray]:
    """The engine contract's `fit_unit`: one probability table per maximal clique of `unit`,
    each fitted to the measurements inside it."""
    return fit_cliques(domain, unit, measurements, noisy_total,
                       iterations(settings.iterations, estimator()), log)


def assemble(domain: dict[str, int], measurements: list[Measurement],
             results: list[dict[int, np.ndarray]]) -> CliqueTree:
    """The engine contract's `assemble`: the units' tables, in any order, as one `CliqueTree`."""
    return combine(domain, measurements, {i: t for tables in results for i, t in tables.items()})
