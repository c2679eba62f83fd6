"""Generation engines behind one interface: `choose`, `fit`, `sample`, `dumps`, `loads`.

Engines (`generator:` in datasets.yaml):
- `pgm` (pgm.py): mbi's maximum-entropy estimation over the junction tree of all measurements;
  the most accurate, and its cost grows with the junction tree's cliques.
- `parallel_pgm` (parallel_pgm.py): ABSyn section VII, one fit per maximal clique, in units
  that Dagster's executor runs in parallel (`fit_units`, `fit_unit`, `assemble`).
- `gum` (gum.py): PrivSyn's gradual update of a synthetic table towards the marginals; its cost
  grows with rows x marginals, never with the joint domain, so every selection fits.
- `auto`: `choose` estimates each engine's peak memory and fitting time from the selection alone
  (junction-tree clique sizes, rows, marginals; nothing is allocated) and takes the first of pgm,
  parallel_pgm, gum that stays within `model.max_memory_mb` and `model.max_seconds`; the choice
  and the reason are published in the `model` asset's metadata.

The fitted model is a `CliqueTree` for both PGM engines (sampled by tree.py) and a `GumModel` for
gum (the consistent measurements and settings: GUM builds the rows when `sample` asks for them).
The cost constants below were measured on the 2-core reference machine with mbi 2.0 (float32):
about 5e-8 s per clique cell per mirror-descent iteration under load and about 64 bytes per
junction-tree cell at peak, plus a fixed ~400 MB for JAX; GUM about 2e-8 s per row per marginal
per iteration (measured 1.6e-8 on adult: bench/results/generators.md).
"""

import io
import json
import math
import os
from dataclasses import dataclass

import numpy as np

from ..config import ModelSettings
from ..measure import Measurement
from .tree import CliqueTree, junction_tree

ENGINES = ("pgm", "parallel_pgm", "gum")
SECONDS_PER_CELL_ITERATION = 5e-8
BYTES_PER_CELL = 64
JAX_BASE_MB = 400.0
FIT_OVERHEAD_SECONDS = 10.0  # JAX compilation of the fit
WORKER_START_SECONDS = 8.0  # a step process imports Dagster, JAX and mbi
GUM_SECONDS_PER_ROW_MARGINAL_ITERATION = 2e-8


@dataclass(frozen=True)
class Estimate:
    engine: str
    feasible: bool
    seconds: float
    memory_mb: float
    why: str

    def to_dict(self) -> dict:
        return {"engine": self.engine, "feasible": self.feasible,
                "seconds": round(self.seconds, 1), "memory_mb": round(self.memory_mb, 1),
                "why": self.why}


@dataclass(frozen=True)
class Choice:
    engine: str
    reason: str
    estimates: tuple[Estimate, ...]


@dataclass(frozen=True)
class GumModel:
    domain: dict[str, int]
    measurements: tuple[Measurement, ...]
    iterations: int


def _cells(clique, domain) -> int:
    return math.prod(domain[a] for a in clique)


def estimate(engine: str, domain: dict[str, int], measurements: list[Measurement], rows: int,
             settings: ModelSettings, cores: int | None = None) -> Estimate:
    """Peak memory and fitting time of `engine` on this selection, before anything is built."""
    budget = f"(budget {settings.max_seconds:g} s, {settings.max_memory_mb:g} MB)"
    if engine == "gum":
        multi = [m for m in measurements if len(m.clique) > 1]
        seconds = (GUM_SECONDS_PER_ROW_MARGINAL_ITERATION * rows * max(len(multi), 1)
                   * settings.gum_iterations)
        # measured: about 1 byte per row and attribute plus ~40 bytes per row of temporaries
        memory = (rows * (len(domain) + 64) + sum(m.cells for m in measurements) * 8 * 3) / 2**20
        return Estimate("gum", seconds <= settings.max_seconds and memory <= settings.max_memory_mb,
                        seconds, memory, f"{rows:,} rows x {len(multi)} marginals x "
                        f"{settings.gum_iterations} iterations {budget}")
    order, _, _ = junction_tree(domain, [m.clique for m in measurements])
    sizes = [_cells(c, domain) for c in order]
    largest = max(sizes)
    if engine == "pgm":
        seconds = FIT_OVERHEAD_SECONDS + sum(sizes) * settings.iterations * SECONDS_PER_CELL_ITERATION
        memory = JAX_BASE_MB + sum(sizes) * BYTES_PER_CELL / 2**20
        why = f"junction tree {sum(sizes):,} cells, largest clique {largest:,} {budget}"
        ok = largest <= settings.max_clique_cells
        if not ok:
            why += f"; largest clique above model.max_clique_cells {settings.max_clique_cells:,}"
    else:
        from .parallel_pgm import assign, separators_measured

        workers = max(1, min(settings.workers or cores or os.cpu_count() or 1, len(order)))
        plan = assign(order, domain, workers)
        at_once = concurrency("auto", settings, cores)
        unit_seconds = sorted((FIT_OVERHEAD_SECONDS * len(p) + sum(sizes[i] for i in p)
                               * settings.iterations * SECONDS_PER_CELL_ITERATION) for p in plan)
        lanes = [0.0] * min(at_once, len(plan))
        for t in reversed(unit_seconds):  # units start as earlier ones finish
            lanes[lanes.index(min(lanes))] += t
        seconds = max(lanes) + (WORKER_START_SECONDS if len(lanes) > 1 else 0.0)
        memory = len(lanes) * (JAX_BASE_MB + largest * BYTES_PER_CELL / 2**20)
        why = (f"{len(order)} maximal cliques in {len(plan)} unit(s), {len(lanes)} at a time, "
               f"largest clique {largest:,} {budget}")
        ok = largest <= settings.max_clique_cells
        if not ok:
            why += f"; largest clique above model.max_clique_cells {settings.max_clique_cells:,}"
        if not separators_measured(domain, measurements):
            ok = False
            why += "; a separator is not measured, so independent fits could disagree on it"
    feasible = ok and seconds <= settings.max_seconds and memory <= settings.max_memory_mb
    return Estimate(engine, feasible, seconds, memory, why)


def multiprocess(requested: str, settings: ModelSettings) -> bool:
    """Whether the dataset's job runs on Dagster's multiprocess executor (`model.executor`;
    auto: when the fit has units to run in parallel, i.e. parallel_pgm or `model.workers` > 1)."""
    if settings.executor != "auto":
        return settings.executor == "multiprocess"
    return requested == "parallel_pgm" or (settings.workers or 1) > 1


def concurrency(requested: str, settings: ModelSettings, cores: int | None = None) -> int:
    """How many steps, hence units of a fit, run at once: `model.workers` (default: the cores)
    under the multiprocess executor (`automation.build_job` sets it as `max_concurrent`), else 1
    (one process, unit after unit)."""
    if multiprocess(requested, settings):
        return settings.workers or cores or os.cpu_count() or 1
    return 1


def choose(requested: str, domain: dict[str, int], measurements: list[Measurement], rows: int,
           settings: ModelSettings, cores: int | None = None) -> Choice:
    """`requested` itself, or for `auto` the first feasible of pgm, parallel_pgm, gum."""
    if requested != "auto":
        return Choice(requested, f"generator: {requested} in datasets.yaml", ())
    estimates = []
    for engine in ENGINES:
        est = estimate(engine, domain, measurements, rows, settings, cores)
        estimates.append(est)
        if est.feasible:
            others = "; ".join(f"{e.engine} refused: {e.why}, est. {e.seconds:.0f} s, "
                               f"{e.memory_mb:.0f} MB" for e in estimates[:-1])
            return Choice(engine, (f"auto: {engine} fits the budget (est. {est.seconds:.0f} s, "
                                   f"{est.memory_mb:.0f} MB: {est.why})"
                                   + (f"; {others}" if others else "")), tuple(estimates))
    # nothing fits the stated budget: gum is the one whose cost does not grow with the domain
    return Choice("gum", "auto: no engine fits model.max_seconds / model.max_memory_mb; gum has "
                  "the smallest footprint for this selection: "
                  + "; ".join(f"{e.engine}: est. {e.seconds:.0f} s, {e.memory_mb:.0f} MB ({e.why})"
                              for e in estimates), tuple(estimates))


def fit_units(engine: str, domain: dict[str, int], measurements: list[Measurement],
              settings: ModelSettings) -> list[list[int]]:
    """The units of work of a fit, each runnable in its own process (a step of the `model`
    asset's graph): parallel_pgm's groups of maximal cliques; one unit for pgm and gum."""
    if engine == "parallel_pgm":
        from . import parallel_pgm

        return parallel_pgm.units(domain, measurements, settings.workers)
    if engine not in ENGINES:
        raise ValueError(f"unknown generator {engine!r}; choose one of {ENGINES} or auto")
    return [[0]]


def fit_unit(engine: str, unit: list[int], domain: dict[str, int],
             measurements: list[Measurement], noisy_total: float, settings: ModelSettings,
             log=None):
    """One unit's result: parallel_pgm's tables of its cliques, or the whole model."""
    if engine == "parallel_pgm":
        from . import parallel_pgm

        return parallel_pgm.fit_unit(domain, unit, measurements, noisy_total,
                                     settings.iterations, log)
    if engine == "pgm":
        from . import pgm

        return pgm.clique_tree(pgm.fit(domain, measurements, noisy_total, settings.iterations,
                                       log=log), domain)
    if engine == "gum":
        return GumModel(dict(domain), tuple(measurements), settings.gum_iterations)
    raise ValueError(f"unknown generator {engine!r}; choose one of {ENGINES} or auto")


def assemble(engine: str, domain: dict[str, int], measurements: list[Measurement], results: list):
    """The fitted model from its units' results (in any order)."""
    if engine == "parallel_pgm":
        from . import parallel_pgm

        return parallel_pgm.combine(domain, measurements,
                                    {i: t for tables in results for i, t in tables.items()})
    (model,) = results
    return model


def fit(engine: str, domain: dict[str, int], measurements: list[Measurement], noisy_total: float,
        settings: ModelSettings, log=None):
    """The fitted model of `engine` (see the module docstring), every unit in this process."""
    if engine == "parallel_pgm":
        from . import parallel_pgm

        return parallel_pgm.fit(domain, measurements, noisy_total, settings.iterations,
                                settings.workers, log)
    return assemble(engine, domain, measurements,
                    [fit_unit(engine, u, domain, measurements, noisy_total, settings, log)
                     for u in fit_units(engine, domain, measurements, settings)])


def sample(model, rows: int, seed: int | None, log=None) -> dict[str, np.ndarray]:
    """`rows` synthetic rows as code arrays per attribute."""
    if isinstance(model, CliqueTree):
        from .tree import sample as sample_tree

        return sample_tree(model, rows, np.random.default_rng(seed))
    from . import gum

    return gum.generate(model.domain, list(model.measurements), rows, seed,
                        gum.GumSettings(iterations=model.iterations), log=log)


def sample_chunks(model, rows: int, seed: int | None, chunk_rows: int, log=None):
    """`rows` rows in chunks of at most `chunk_rows` (code arrays per attribute), one chunk in
    memory at a time for a clique tree: each chunk is drawn from the same seeded generator in
    turn (systematic counts per chunk). GUM builds its whole table at once (its updates move rows
    across the table) and hands it out in slices."""
    if isinstance(model, CliqueTree):
        from .tree import sample as sample_tree

        rng = np.random.default_rng(seed)
        done = 0
        while done < rows:
            n = min(chunk_rows, rows - done)
            yield sample_tree(model, n, rng)
            done += n
            if log and rows > chunk_rows:
                log(f"sampled {done:,} of {rows:,} rows")
        return
    codes = sample(model, rows, seed, log)
    for start in range(0, rows, chunk_rows):
        yield {a: v[start:start + chunk_rows] for a, v in codes.items()}


def dumps(model) -> bytes:
    """The fitted model as the bytes of one .npz file (a clique tree's tables, or GUM's
    consistent measurements and settings), for the artifact store to write."""
    if isinstance(model, CliqueTree):
        return model.to_bytes()
    meta = {"engine": "gum", "domain": model.domain, "iterations": model.iterations,
            "measurements": [{k: v for k, v in m.to_dict().items() if k != "noisy"}
                             for m in model.measurements]}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, meta=np.array(json.dumps(meta)),
                        **{f"noisy_{i}": m.noisy for i, m in enumerate(model.measurements)})
    return buffer.getvalue()


def loads(data: bytes):
    """The model `dumps` wrote."""
    with np.load(io.BytesIO(data)) as arrays:
        meta = json.loads(str(arrays["meta"]))
        if meta.get("engine") != "gum":
            return CliqueTree.from_bytes(data)
        measurements = tuple(Measurement(tuple(m["clique"]), arrays[f"noisy_{i}"], m["sigma"],
                                         m["rho"]) for i, m in enumerate(meta["measurements"]))
    return GumModel({a: int(k) for a, k in meta["domain"].items()}, measurements,
                    int(meta["iterations"]))


def load(path: str):
    with open(path, "rb") as f:
        return loads(f.read())
