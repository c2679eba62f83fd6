"""A generation engine that lives outside the package, for tests/test_engine_plugins.py: independent
columns, each drawn from its consistent noisy 1-way measurement clipped at 0 and normalized (the
no-correlation baseline). It implements only the required part of the engine contract
(`dp_synth_assets.core.generate`): MODEL, estimate, fit_unit, sample, dumps, loads."""

import io
import json
from dataclasses import dataclass

import numpy as np

from dp_synth_assets.core.generate.base import Estimate, budget_text, within_budget


@dataclass(frozen=True)
class Independent:
    probabilities: dict[str, np.ndarray]  # per attribute, over its codes


MODEL = Independent


def estimate(domain, measurements, rows, settings, cores=None) -> Estimate:
    seconds, memory = 0.0, rows * len(domain) * 8 / 2**20
    return Estimate("independent", within_budget(seconds, memory, settings), seconds, memory,
                    f"{rows:,} rows x {len(domain)} columns {budget_text(settings)}")


def fit_unit(unit, domain, measurements, noisy_total, settings, log=None) -> Independent:
    probabilities = {}
    for a, size in domain.items():
        counts = next((np.clip(np.asarray(m.noisy, dtype=float), 0.0, None)
                       for m in measurements if tuple(m.clique) == (a,)), np.ones(size))
        probabilities[a] = (counts / counts.sum() if counts.sum() > 0
                            else np.full(size, 1.0 / size))
    return Independent(probabilities)


def sample(model: Independent, rows: int, seed, log=None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {a: rng.choice(p.size, size=rows, p=p) for a, p in model.probabilities.items()}


def dumps(model: Independent) -> bytes:
    buffer = io.BytesIO()
    names = list(model.probabilities)
    np.savez(buffer, names=np.array(json.dumps(names)),
             **{f"p{i}": model.probabilities[a] for i, a in enumerate(names)})
    return buffer.getvalue()


def loads(data: bytes) -> Independent:
    with np.load(io.BytesIO(data)) as arrays:
        names = json.loads(str(arrays["names"]))
        return Independent({a: arrays[f"p{i}"] for i, a in enumerate(names)})
