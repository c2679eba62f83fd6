"""The `pgm` engine: private-pgm maximum-entropy estimation from the measurements.

Implements McKenna et al., "Graphical-model based estimation and inference for differential
privacy", ICML 2019: the distribution of maximum entropy whose marginals on the measured cliques
best fit the noisy measurements, in the graphical model of the junction tree of those cliques,
fitted by mbi's JAX program (the `jax` extra) or the numpy fit of `mirror`, whichever is
estimated faster. `check` refuses (`ModelTooLarge`) a junction tree with a clique above
`model.max_clique_cells` before anything is allocated. Reads only measurements
(post-processing). The estimators, the guard and the cost model:
docs/decisions/0018-pgm-estimator.md, "As implemented: pgm"."""

import functools
import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from .. import extras
from ..measure import Measurement, refine
from . import mirror
from .base import Estimate, ModelTooLarge, budget_text, within_budget
from .tree import CliqueTree, elimination_cliques, junction_tree
from .tree import dumps, loads, sample_chunks  # noqa: F401 (engine contract)

MODEL = CliqueTree
COARSE_MEASUREMENTS = True  # mirror.fit fits coarse measurements (`estimator`)
MBI_ITERATIONS = 1500  # `model.iterations` unset: mbi's mirror-descent steps
SECONDS_PER_CELL_ITERATION = 5e-8  # one clique cell, one mirror-descent iteration, under load
BYTES_PER_CELL = 64                # junction-tree cell at the fit's peak
JAX_BASE_MB = 400.0                # JAX and mbi in the fitting process
FIT_OVERHEAD_SECONDS = 10.0        # JAX compilation of one fit
# the numpy estimator (mirror.fit), per step (one propagation), in the units of mbi's constants
# above (both estimators timed on the same trees at the same load: adult's 10.9k cells / 52
# cliques and 158k cells / 61 cliques, 1500 iterations): a Python-level cost per clique
# (junction-tree and measured) and a cost per junction-tree cell
NUMPY_SECONDS_PER_CLIQUE_ITERATION = 1.2e-5
NUMPY_SECONDS_PER_CELL_ITERATION = 4.4e-8
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",  # what JAX reports for one compile
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")


@dataclass(frozen=True)
class ModelSize:
    """A junction tree's size: its largest clique (attributes, cells) and its total cells."""

    largest_clique: tuple[str, ...]
    largest_clique_cells: int
    total_cells: int

    @property
    def megabytes(self) -> float:
        return self.total_cells * 8 / 2**20


def model_size(domain: dict[str, int], cliques: list[tuple[str, ...]]) -> ModelSize:
    """The junction tree's cells (`tree.elimination_cliques`) and its largest maximal clique
    (attributes in domain order; ties to the first in sorted order)."""
    position = {a: i for i, a in enumerate(domain)}
    maximal = sorted(tuple(sorted(c, key=position.__getitem__))
                     for c in elimination_cliques(domain, [tuple(c) for c in cliques]))
    sizes = [math.prod(domain[a] for a in c) for c in maximal]
    k = int(np.argmax(sizes))
    return ModelSize(maximal[k], int(sizes[k]), int(sum(sizes)))


def check_model_size(domain: dict[str, int], cliques: list[tuple[str, ...]], max_clique_cells: int,
                     dataset: str) -> ModelSize:
    """The size of the junction tree of `cliques`, computed by graph work only (nothing allocated).

    Raises:
        ModelTooLarge: its largest clique has more than `max_clique_cells` cells; the message
            names `dataset`, the clique and the fix.
    """
    size = model_size(domain, cliques)
    if size.largest_clique_cells > max_clique_cells:
        raise ModelTooLarge(
            f"dataset {dataset!r}: the model's largest clique {list(size.largest_clique)} has "
            f"{size.largest_clique_cells:,} cells, above model.max_clique_cells = "
            f"{max_clique_cells:,}; nothing was allocated. Select fewer or smaller marginals "
            "(lower selection.max_model_mb), use fewer bins, or raise model.max_clique_cells "
            "in the dataset's entry if the machine has the memory."
        )
    return size


def junction_cells(domain: dict[str, int], measurements: list[Measurement]) -> list[int]:
    """Cells of each maximal clique of the measurements' junction tree (tree.junction_tree)."""
    order, _, _ = junction_tree(domain, [m.clique for m in measurements])
    return [math.prod(domain[a] for a in c) for c in order]


def estimate(domain: dict[str, int], measurements: list[Measurement], rows: int, settings,
             cores: int | None = None) -> Estimate:
    """One fit over the whole junction tree (0018-pgm-estimator.md); infeasible as well when
    the largest clique is above `model.max_clique_cells` (the guard would refuse it)."""
    sizes = junction_cells(domain, measurements)
    times = fit_seconds(domain, measurements, settings.iterations)
    seconds = times[_faster(measurements, times)]
    memory = JAX_BASE_MB + sum(sizes) * BYTES_PER_CELL / 2**20
    why = f"junction tree {sum(sizes):,} cells, largest clique {max(sizes):,} {budget_text(settings)}"
    ok = max(sizes) <= settings.max_clique_cells
    if not ok:
        why += f"; largest clique above model.max_clique_cells {settings.max_clique_cells:,}"
    return Estimate("pgm", ok and within_budget(seconds, memory, settings), seconds, memory, why)


def check(domain: dict[str, int], measurements: list[Measurement], settings,
          dataset: str) -> dict:
    """`check_model_size` on the measured cliques; the size facts the `model` asset publishes."""
    size = check_model_size(domain, [m.clique for m in measurements], settings.max_clique_cells,
                            dataset)
    return {"largest_clique": list(size.largest_clique),
            "largest_clique_cells": size.largest_clique_cells,
            "model_mb": round(size.megabytes, 4)}


def iterations(setting: int | None, which: str) -> int:
    """The steps of one fit by estimator `which`: `model.iterations` if set, else the
    estimator's own default (numpy: mirror.DEFAULT_ITERATIONS accelerated steps; mbi:
    MBI_ITERATIONS mirror-descent steps, which converge several times slower)."""
    if setting is not None:
        return setting
    return mirror.DEFAULT_ITERATIONS if which == "numpy" else MBI_ITERATIONS


def fit_seconds(domain: dict[str, int], measurements: list[Measurement],
                setting: int | None) -> dict[str, float]:
    """Estimated seconds of one fit on the measurements' junction tree, per estimator, each with
    its `iterations` (0018-pgm-estimator.md)."""
    sizes = junction_cells(domain, measurements)
    cliques = len(sizes) + len({tuple(m.clique) for m in measurements})
    return {"mbi": FIT_OVERHEAD_SECONDS
            + sum(sizes) * iterations(setting, "mbi") * SECONDS_PER_CELL_ITERATION,
            "numpy": iterations(setting, "numpy")
            * (cliques * NUMPY_SECONDS_PER_CLIQUE_ITERATION
               + sum(sizes) * NUMPY_SECONDS_PER_CELL_ITERATION)}


def estimator(domain: dict[str, int], measurements: list[Measurement],
              setting: int | None) -> str:
    """The estimator with the smaller `fit_seconds` (numpy on a tie); numpy whenever a
    measurement is coarse (`Measurement.groups`: mirror.fit fits its linear map) and whenever
    the `jax` extra (mbi, jax, jaxlib) is not installed."""
    return _faster(measurements, fit_seconds(domain, measurements, setting))


def _faster(measurements: list[Measurement], seconds: dict[str, float]) -> str:
    if any(m.groups is not None for m in measurements) or not extras.available("jax"):
        return "numpy"
    return "numpy" if seconds["numpy"] <= seconds["mbi"] else "mbi"


def import_mbi():
    """mbi, imported for the JAX estimator (the `jax` extra). mbi warns when it is imported
    into a JAX without float64 ("JAX is running in float32 mode"): its fits run in float32 by
    choice (the constants above were measured so), so that one warning is ignored around this
    import, and nothing else; JAX's persistent compilation cache (which mbi also warns about)
    is off unless the environment says otherwise."""
    os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="JAX is running in float32 mode",
                                category=UserWarning)
        import mbi
    return mbi


def fit_unit(unit: list[int], domain: dict[str, int], measurements: list[Measurement],
             noisy_total: float, settings, log=None) -> CliqueTree:
    """The whole fit (pgm has one unit) by `estimator`'s choice, then its clique tree."""
    which = estimator(domain, measurements, settings.iterations)
    steps = iterations(settings.iterations, which)
    if which == "numpy":
        _, calibrated = mirror.fit(domain, measurements, noisy_total, steps, log=log)
        return calibrated.clique_tree()
    return clique_tree(fit(domain, measurements, noisy_total, steps, log=log), domain)


def fit(domain: dict[str, int], measurements: list[Measurement], noisy_total: float,
        iterations: int, warm_start=None, log=None, lines: int = 10):
    """A mbi MarkovRandomField fitted to the measurements (optionally warm-started from an
    earlier model, as adaptive selection methods do between rounds).

    `log`, if given, gets the JAX compile time of the fit when the first block of iterations is
    done, then a progress line about every `lines`-th of the iterations, each when those
    iterations are done. mbi calls back after every block of `CALLBACK_EVERY` steps, but JAX
    dispatches the blocks asynchronously, so the callback waits for the block it is given
    (`jax.block_until_ready`) before it logs; otherwise every line would come at the end. The
    optimization itself is one `estimate` call whether `log` is given or not: the fitted model
    does not depend on it (mbi's Armijo step size lives in the estimator's state, so a fit in
    separately started chunks would not be the same fit). The compile time is what JAX reports
    to `jax.monitoring` for tracing, lowering and compiling while the fit runs (in this process:
    a compile on another thread at that moment would count too)."""
    import time

    import_mbi()
    from mbi import Domain, LinearMeasurement
    from mbi.estimation import CALLBACK_EVERY, MirrorDescent

    mbi_domain = Domain(list(domain), [domain[a] for a in domain])
    measurements = refine(measurements)  # fine marginals only on this path
    linear = [LinearMeasurement(m.noisy.ravel(), tuple(m.clique), stddev=m.sigma)
              for m in measurements]
    estimate = functools.partial(MirrorDescent().estimate, mbi_domain, linear,
                                 known_total=max(noisy_total, 1.0), iters=iterations,
                                 warm_start=warm_start)
    if log is None:
        return estimate()
    import jax

    blocks = math.ceil(iterations / CALLBACK_EVERY)
    every = max(1, blocks // max(lines, 1))
    done, compiled = [0], [0.0]

    log(f"pgm: {iterations} iterations on {len(measurements)} measurements; JAX compiles the "
        "fit first")

    def progress(marginals) -> None:
        jax.block_until_ready(marginals)
        done[0] += 1
        fitting = time.perf_counter() - started - compiled[0]
        if done[0] == 1:
            log(f"pgm: JAX compiled the fit in {compiled[0]:.1f}s")
        if done[0] % every == 0 or done[0] == blocks:
            log(f"pgm: iteration {min(done[0] * CALLBACK_EVERY, iterations)}/{iterations}, "
                f"{fitting:.1f}s fitting")

    def count(event: str, seconds: float, **_) -> None:
        if event in _COMPILE_EVENTS:
            compiled[0] += seconds

    jax.monitoring.register_event_duration_secs_listener(count)
    started = time.perf_counter()
    try:
        return estimate(callback_fn=progress)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)


def clique_tree(model, domain: dict[str, int]) -> CliqueTree:
    """The fitted model as a `CliqueTree` over the junction tree of its measured cliques: every
    maximal clique's exact marginal from belief propagation (Shafer-Shenoy, in log space, numpy)
    over that junction tree, one pass up and one down, so sampling the tree draws from the
    model's joint distribution (see tree.py). Each potential of the model goes to the first
    maximal clique that holds it. Choice: numpy rather than mbi's JAX message passing (the
    same tables, test_generate checks it, without a JAX compile per model), and messages along
    the tree rather than one np.einsum over all potentials per clique (whose intermediates can
    grow with the whole domain)."""
    potentials = model.potentials
    order, separators, parents = junction_tree(domain, [tuple(c) for c in model.cliques])
    psi = [np.zeros([domain[a] for a in c]) for c in order]
    for clique in potentials.cliques:
        factor = potentials[clique]
        attrs = tuple(factor.domain.attributes)
        host = next(i for i, c in enumerate(order) if set(attrs) <= set(c))
        psi[host] = psi[host] + _expand(np.asarray(factor.values, dtype=np.float64), attrs,
                                        order[host], domain)
    children: list[list[int]] = [[] for _ in order]
    for i, parent in enumerate(parents):
        if parent >= 0:
            children[parent].append(i)
    up: dict[int, np.ndarray] = {}  # message from clique i to its parent, over separators[i]
    for i in reversed(range(len(order))):  # breadth-first order: children come after parents
        belief = psi[i] + sum((_expand(up[c], separators[c], order[i], domain)
                               for c in children[i]), np.zeros(()))
        if parents[i] >= 0:
            up[i] = _log_marginal(belief, order[i], separators[i])
    tables, down = [], {}
    for i, clique in enumerate(order):
        belief = psi[i] + sum((_expand(up[c], separators[c], clique, domain)
                               for c in children[i]), np.zeros(()))
        if parents[i] >= 0:
            belief = belief + _expand(down[i], separators[i], clique, domain)
        for c in children[i]:  # what clique i tells child c: all but c's own message
            down[c] = _log_marginal(belief - _expand(up[c], separators[c], clique, domain),
                                    clique, separators[c])
        values = np.exp(belief - belief.max())
        tables.append(values / values.sum())
    return CliqueTree(dict(domain), tuple(order), tuple(separators), tuple(tables))


def _expand(values: np.ndarray, attrs: tuple, target: tuple, domain: dict[str, int]) -> np.ndarray:
    """`values` (axes in `attrs` order) broadcastable over `target`'s axes."""
    present = [a for a in target if a in attrs]
    moved = np.transpose(values, [attrs.index(a) for a in present])
    return moved.reshape([domain[a] if a in attrs else 1 for a in target])


def _log_marginal(values: np.ndarray, attrs: tuple, keep: tuple) -> np.ndarray:
    """log sum exp of `values` over the axes not in `keep`; axes in `keep` order."""
    axes = tuple(i for i, a in enumerate(attrs) if a not in keep)
    top = values.max(axis=axes, keepdims=True) if axes else values
    summed = np.log(np.exp(values - top).sum(axis=axes, keepdims=True)) + top if axes else values
    rest = [a for a in attrs if a in keep]
    squeezed = summed.reshape([s for i, s in enumerate(summed.shape) if i not in axes])
    return np.transpose(squeezed, [rest.index(a) for a in keep])


def model_marginals(model, cliques: list[tuple[str, ...]]) -> dict[tuple[str, ...], np.ndarray]:
    """p_hat_w for each clique: the model's marginals, computed in numpy by contracting its
    potentials (np.einsum with a greedy contraction order is variable elimination) and scaling to
    the model's total. Same numbers as `model.project` (float32 rounding aside) without the JAX
    compile that mbi pays for each new clique."""
    potentials = model.potentials
    index = {a: i for i, a in enumerate(potentials.domain)}
    operands: list = []
    for clique in potentials.cliques:
        factor = potentials[clique]
        values = np.asarray(factor.values, dtype=np.float64)
        operands += [np.exp(values - values.max()), [index[a] for a in factor.domain]]
    for a, i in index.items():  # an attribute in no potential is uniform
        if not any(a in c for c in potentials.cliques):
            operands += [np.ones(potentials.domain[a]), [i]]
    total = float(model.total)
    out = {}
    for clique in cliques:
        values = np.einsum(*operands, [index[a] for a in clique], optimize="greedy")
        mass = values.sum()
        if not (math.isfinite(mass) and mass > 0):  # underflow: let mbi do it in log space
            # (an mbi model: the `jax` extra is installed)
            values = np.asarray(model.project(clique).datavector(flatten=False), dtype=np.float64)
            mass = values.sum() if values.sum() > 0 else 1.0
        out[tuple(clique)] = values * (total / mass)
    return out

