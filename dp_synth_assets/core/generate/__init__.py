"""Generation engines behind one facade: `choose`, `check`, `fit_units`, `fit_unit`, `assemble`,
`fit`, `sample`, `sample_chunks`, `dumps`, `loads`.

The engines are registered in `dp_synth_assets.core.engines.ENGINES` (`generator:` in
datasets.yaml names one, or `auto`: `choose` takes the first whose `Estimate` of peak memory and
fitting time is within `model.max_memory_mb` and `model.max_seconds`). Every function receives
the public inputs of the generation stage only (domain, consistent noisy measurements, noisy
total, `ModelSettings`), so whatever it computes is post-processing
(docs/decisions/0019-generators.md). The engine contract, which a plug-in engine module
implements: docs/generators.md, "The engine contract"."""

import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..config import ModelSettings
from ..engines import ENGINES
from ..plugins import plugin_module
from ..measure import Measurement, refine
from .base import Estimate, ModelTooLarge, multiprocess_executor  # noqa: F401 (re-exported)
from .gum import GumModel  # noqa: F401 (re-exported: the pipeline names it)
from .tree import CliqueTree  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class Choice:
    """The engine `choose` picked, why (published on the `model` asset) and every engine's
    `Estimate` it compared."""

    engine: str
    reason: str
    estimates: tuple[Estimate, ...]


def engine_module(engine: str):
    """The module of `engine` (a key of ENGINES; `plugins.plugin_module`)."""
    return plugin_module(ENGINES, engine, __name__, "generator", " or auto")


def for_engine(engine: str, measurements: list[Measurement]) -> list[Measurement]:
    """The measurements as `engine` takes them: coarse ones made fine (`measure.refine`) unless
    the engine declares `COARSE_MEASUREMENTS`."""
    if getattr(engine_module(engine), "COARSE_MEASUREMENTS", False):
        return list(measurements)
    return refine(list(measurements))


def auto_order() -> list[str]:
    """The engines `auto` tries, in their registered preference order."""
    placed = [(info.auto, name) for name, info in ENGINES.items() if info.auto is not None]
    return [name for _, name in sorted(placed)]


def engine_of(model) -> str:
    """The first registered engine whose `MODEL` the model is."""
    for engine in ENGINES:
        if isinstance(model, engine_module(engine).MODEL):
            return engine
    raise ValueError(f"no registered engine fits models of type {type(model).__name__}")


def estimate(engine: str, domain: dict[str, int], measurements: list[Measurement], rows: int,
             settings: ModelSettings, cores: int | None = None) -> Estimate:
    """Peak memory and fitting time of `engine` on this selection, before anything is built
    (under the engine's registered name)."""
    est = engine_module(engine).estimate(domain, for_engine(engine, measurements), rows,
                                          settings, cores)
    return replace(est, engine=engine)


def multiprocess(requested: str, settings: ModelSettings) -> bool:
    """Whether the dataset's job runs on Dagster's multiprocess executor (`model.executor`;
    auto: when the requested engine's units run in parallel, or `model.workers` > 1)."""
    parallel = requested != "auto" and getattr(engine_module(requested), "PARALLEL_UNITS", False)
    return multiprocess_executor(parallel, settings)


def concurrency(requested: str, settings: ModelSettings, cores: int | None = None) -> int:
    """How many steps, hence units of a fit, run at once: `model.workers` (default: the cores)
    under the multiprocess executor (`automation.build_job` sets it as `max_concurrent`), else 1
    (one process, unit after unit)."""
    if multiprocess(requested, settings):
        return settings.workers or cores or os.cpu_count() or 1
    return 1


def choose(requested: str, domain: dict[str, int], measurements: list[Measurement], rows: int,
           settings: ModelSettings, cores: int | None = None) -> Choice:
    """The generation engine of a fit, from public inputs only.

    Args:
        requested: an engine's name, or `auto`.
        domain: attribute -> number of codes.
        measurements: the consistent noisy measurements.
        rows: the rows to sample.
        settings: the dataset's `model:` block (`max_memory_mb`, `max_seconds`).
        cores: the cores a parallel engine may use; default the machine's.

    Returns:
        `requested` itself, or for `auto` the first feasible engine of `auto_order()`, else the
        last of that order; the reason names every engine refused and its estimate.
    """
    if requested != "auto":
        return Choice(requested, f"generator: {requested}, as declared", ())
    order = auto_order()
    estimates = []
    for engine in order:
        est = estimate(engine, domain, measurements, rows, settings, cores)
        estimates.append(est)
        if est.feasible:
            others = "; ".join(f"{e.engine} refused: {e.why}, est. {e.seconds:.0f} s, "
                               f"{e.memory_mb:.0f} MB" for e in estimates[:-1])
            return Choice(engine, (f"auto: {engine} fits the budget (est. {est.seconds:.0f} s, "
                                   f"{est.memory_mb:.0f} MB: {est.why})"
                                   + (f"; {others}" if others else "")), tuple(estimates))
    # nothing fits the stated budget: the last resort is the engine whose cost does not grow
    # with the domain
    last = order[-1]
    return Choice(last, f"auto: no engine fits model.max_seconds / model.max_memory_mb; {last} "
                  "has the smallest footprint for this selection: "
                  + "; ".join(f"{e.engine}: est. {e.seconds:.0f} s, {e.memory_mb:.0f} MB ({e.why})"
                              for e in estimates), tuple(estimates))


def check(engine: str, domain: dict[str, int], measurements: list[Measurement],
          settings: ModelSettings, dataset: str) -> dict | None:
    """The engine's pre-fit guard.

    Returns:
        The size facts to publish (JSON-able), or None when the engine has no guard.

    Raises:
        ModelTooLarge: the model would exceed the `model:` limits; nothing was allocated.
    """
    module = engine_module(engine)
    if not hasattr(module, "check"):
        return None
    return module.check(domain, for_engine(engine, measurements), settings, dataset)


def fit_units(engine: str, domain: dict[str, int], measurements: list[Measurement],
              settings: ModelSettings) -> list[list[int]]:
    """The units of work of a fit, each runnable in its own process (a step of the `model`
    asset's graph): parallel_pgm's groups of maximal cliques; one unit for pgm and gum."""
    module = engine_module(engine)
    if not hasattr(module, "fit_units"):
        return [[0]]
    return module.fit_units(domain, for_engine(engine, measurements), settings)


def fit_unit(engine: str, unit: list[int], domain: dict[str, int],
             measurements: list[Measurement], noisy_total: float, settings: ModelSettings,
             log=None):
    """One unit's result: parallel_pgm's tables of its cliques, or the whole model."""
    return engine_module(engine).fit_unit(unit, domain, for_engine(engine, measurements),
                                          noisy_total, settings, log)


def assemble(engine: str, domain: dict[str, int], measurements: list[Measurement], results: list):
    """The fitted model from its units' results (in any order)."""
    module = engine_module(engine)
    if hasattr(module, "assemble"):
        return module.assemble(domain, for_engine(engine, measurements), results)
    (model,) = results
    return model


def fit(engine: str, domain: dict[str, int], measurements: list[Measurement], noisy_total: float,
        settings: ModelSettings, log=None):
    """The fitted model of `engine`, every unit in this process, one after the other."""
    return assemble(engine, domain, measurements,
                    [fit_unit(engine, u, domain, measurements, noisy_total, settings, log)
                     for u in fit_units(engine, domain, measurements, settings)])


def sample(model, rows: int, seed: int | None, log=None) -> dict[str, np.ndarray]:
    """`rows` synthetic rows as code arrays per attribute (the engine's `sample`, else its
    chunks joined)."""
    module = engine_module(engine_of(model))
    if hasattr(module, "sample"):
        return module.sample(model, rows, seed, log)
    chunks = list(module.sample_chunks(model, rows, seed, max(rows, 1), log))
    if len(chunks) == 1:
        return chunks[0]
    return {a: np.concatenate([c[a] for c in chunks]) for a in chunks[0]}


def sample_chunks(model, rows: int, seed: int | None, chunk_rows: int,
                  log=None) -> Iterator[dict[str, np.ndarray]]:
    """`rows` rows in chunks of at most `chunk_rows` (code arrays per attribute): the engine's
    `sample_chunks` (a clique tree keeps one chunk in memory at a time), else its `sample` handed
    out in slices (GUM builds its whole table at once: its updates move rows across the table)."""
    module = engine_module(engine_of(model))
    if hasattr(module, "sample_chunks"):
        yield from module.sample_chunks(model, rows, seed, chunk_rows, log)
        return
    codes = module.sample(model, rows, seed, log)
    for start in range(0, rows, chunk_rows):
        yield {a: v[start:start + chunk_rows] for a, v in codes.items()}


def dumps(model) -> bytes:
    """The fitted model as the bytes of one .npz file: the engine's name and the engine's own
    bytes, for the artifact store to write."""
    engine = engine_of(model)
    buffer = io.BytesIO()
    np.savez(buffer, engine=np.array(engine),
             model=np.frombuffer(engine_module(engine).dumps(model), dtype=np.uint8))
    return buffer.getvalue()


def loads(data: bytes):
    """The model `dumps` wrote, read by the engine it names (which must be registered)."""
    with np.load(io.BytesIO(data)) as arrays:
        if "engine" in arrays.files:
            engine, payload = str(arrays["engine"]), arrays["model"].tobytes()
        else:  # a bare engine file: its header names the engine
            engine, payload = json.loads(str(arrays["meta"])).get("engine", "pgm"), data
    if engine not in ENGINES:
        raise ValueError(f"the model was written by generator {engine!r}, which is not "
                         f"registered; registered: {sorted(ENGINES)}")
    return engine_module(engine).loads(payload)
