"""Public fidelity: how far the synthetic table is from the noisy measurements.

Both inputs are public: the synthetic rows (post-processing of the measurements) and the noisy
measurements themselves, so every figure here is DP by post-processing and may be published.
It says how well the generator reproduced what was measured, not how close the synthetic table is
to the source (that is the owner-only utility report, `core.utility`).

- A measurement as a distribution (`noisy_distribution`): its noisy counts with negatives clipped
  to 0, divided by their sum (uniform when nothing is left).
- The TVD of one marginal (`marginal_tvd`): 1/2 * L1 between the synthetic table's shares over
  the marginal's cells and that distribution. The `one_way_tvd` and `marginal_tvd` checks use it
  too.
- `fidelity_summary`: the TVD of every 1-way measurement (the last one of a column when there are
  several, as the checks do) and of every measurement of two or more columns, with their means
  and maxima.

Counting (`MarginalCounter`) reads the synthetic codes chunk by chunk as they are sampled, one
`np.bincount` over the row-major cell index per measured clique and chunk, so the summary costs
no second pass over the table.
"""

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .domain import Clique
from .measure import Measurement


def noisy_distribution(m: Measurement) -> np.ndarray:
    """A measured marginal as a distribution: negatives clipped, normalized (uniform if empty)."""
    p = np.clip(m.noisy, 0, None)
    return p / p.sum() if p.sum() > 0 else np.full(p.shape, 1.0 / p.size)


def marginal_tvd(counts: np.ndarray, m: Measurement) -> float:
    """1/2 * L1 between the shares of `counts` (the synthetic table's counts over `m.clique`,
    shaped like `m.noisy`) and `noisy_distribution(m)`; counts of an empty table are all zero."""
    found = np.asarray(counts, dtype=np.float64).ravel()
    return 0.5 * float(np.abs(found / max(found.sum(), 1) - noisy_distribution(m).ravel()).sum())


def count_marginal(codes: Mapping[str, np.ndarray], clique: Sequence[str],
                   domain: Mapping[str, int]) -> np.ndarray:
    """Counts of the rows of `codes` in each cell of the marginal over `clique` (shape: the
    clique's domain sizes), by one bincount over the row-major cell index."""
    shape = tuple(int(domain[a]) for a in clique)
    index = np.ravel_multi_index(tuple(np.asarray(codes[a], dtype=np.int64) for a in clique), shape)
    return np.bincount(index.ravel(), minlength=math.prod(shape)).reshape(shape)


@dataclass
class MarginalCounter:
    """Running counts of the synthetic table over `cliques`, fed chunk by chunk (`add`) or by
    passing the chunks through (`counting`)."""

    cliques: tuple[Clique, ...]
    domain: dict[str, int]
    counts: dict[Clique, np.ndarray] = field(init=False)

    def __post_init__(self):
        self.cliques = tuple(dict.fromkeys(tuple(c) for c in self.cliques))
        self.counts = {c: np.zeros(tuple(self.domain[a] for a in c), dtype=np.int64)
                       for c in self.cliques}

    @classmethod
    def of(cls, measurements: Iterable[Measurement], domain: Mapping[str, int]) -> "MarginalCounter":
        """A counter over the cliques of `measurements`."""
        return cls(tuple(m.clique for m in measurements), dict(domain))

    def add(self, codes: Mapping[str, np.ndarray]) -> None:
        used = {a for clique in self.cliques for a in clique}
        codes = {a: np.asarray(codes[a], dtype=np.int64) for a in used}  # cast once per chunk
        for clique in self.cliques:
            self.counts[clique] += count_marginal(codes, clique, self.domain)

    def counting(self, chunks: Iterable[Mapping[str, np.ndarray]]) -> Iterator:
        """The chunks unchanged, each counted before it is handed on."""
        for codes in chunks:
            self.add(codes)
            yield codes


@dataclass(frozen=True)
class FidelitySummary:
    """TVD to the noisy measurements: per column (1-way) and per marginal of 2+ columns."""

    one_way: dict[str, float]
    marginals: dict[Clique, float]

    @staticmethod
    def _stats(values) -> tuple[float | None, float | None]:
        values = list(values)
        return (math.fsum(values) / len(values), max(values)) if values else (None, None)

    @property
    def one_way_mean(self) -> float | None:
        return self._stats(self.one_way.values())[0]

    @property
    def one_way_max(self) -> float | None:
        return self._stats(self.one_way.values())[1]

    @property
    def marginal_mean(self) -> float | None:
        return self._stats(self.marginals.values())[0]

    @property
    def marginal_max(self) -> float | None:
        return self._stats(self.marginals.values())[1]

    def to_dict(self, digits: int = 6) -> dict:
        """JSON-safe: the per-column and per-marginal TVDs, rounded."""
        return {"one_way": [{"column": c, "tvd": round(t, digits)} for c, t in self.one_way.items()],
                "marginals": [{"marginal": " x ".join(c), "tvd": round(t, digits)}
                              for c, t in self.marginals.items()]}


def fidelity_summary(counts: Mapping[Clique, np.ndarray],
                     measurements: Sequence[Measurement]) -> FidelitySummary:
    """The TVD of each measurement whose clique has counts in `counts` (see the module
    docstring)."""
    one_way = {m.clique[0]: m for m in measurements if len(m.clique) == 1}
    marginals = {m.clique: m for m in measurements if len(m.clique) >= 2}
    return FidelitySummary(
        one_way={c: marginal_tvd(counts[(c,)], m) for c, m in one_way.items() if (c,) in counts},
        marginals={c: marginal_tvd(counts[c], m) for c, m in marginals.items() if c in counts})
