"""Fidelity: the total variation distance between distributions over the cells of a marginal.

`tvd(p, q) = 1/2 * sum_x |p(x) - q(x)|`, applied two ways. Public (`fidelity_summary`,
`MarginalCounter`, the `one_way_tvd` and `marginal_tvd` checks): the synthetic table against the
noisy measurements (clipped at 0 and normalized, `noisy_distribution`), DP by post-processing.
Owner-only (`pair_tvd`, `fidelity`, `column_comparison`, in the utility report): an encoded
synthetic table against encoded source rows, the benchmark paper's fidelity error (Chen et al.,
section 8.3): the mean 2-way TVD over pairs of distinct columns. Details:
docs/decisions/0022-evaluation-metrics.md, "As implemented: fidelity"."""

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..core.domain import Clique
from ..core.measure import Measurement, coarsen
from .tables import Table, cell_index, dense, distribution, encoded, require_rows


def tvd(p: np.ndarray, q: np.ndarray) -> float:
    """1/2 * L1 between two distributions over the same cells (arrays of one shape)."""
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def noisy_distribution(m: Measurement) -> np.ndarray:
    """A measured marginal as a distribution: negatives clipped, normalized (uniform if empty)."""
    p = np.clip(m.noisy, 0, None)
    return p / p.sum() if p.sum() > 0 else np.full(p.shape, 1.0 / p.size)


def marginal_tvd(counts: np.ndarray, m: Measurement) -> float:
    """1/2 * L1 between the shares of `counts` (the synthetic table's counts over `m.clique`,
    one axis per attribute) and `noisy_distribution(m)`, on the cells `m` measured: a coarse
    measurement's groups (`coarsen`); counts of an empty table are all zero."""
    found = np.asarray(counts, dtype=np.float64)
    if m.groups is not None:
        found = coarsen(found, m.groups)
    found = found.ravel()
    return tvd(found / max(found.sum(), 1), noisy_distribution(m).ravel())


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
    """The TVD of each measurement whose clique has counts in `counts`: the last 1-way
    measurement of each column, every measurement of two or more columns."""
    one_way = {m.clique[0]: m for m in measurements if len(m.clique) == 1}
    marginals = {m.clique: m for m in measurements if len(m.clique) >= 2}
    return FidelitySummary(
        one_way={c: marginal_tvd(counts[(c,)], m) for c, m in one_way.items() if (c,) in counts},
        marginals={c: marginal_tvd(counts[c], m) for c, m in marginals.items() if c in counts})


def table_tvd(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], attrs: Sequence[str],
              domain: Mapping[str, int]) -> float:
    """TVD between the normalized marginals over `attrs` of two encoded tables (over every cell,
    or over the cells either table occupies when the marginal is too large to count densely)."""
    if dense(attrs, domain):
        return tvd(distribution(a, attrs, domain), distribution(b, attrs, domain))
    ka, kb = cell_index(a, attrs, domain), cell_index(b, attrs, domain)
    cells, inverse = np.unique(np.concatenate([ka, kb]), return_inverse=True)
    pa = np.bincount(inverse[:ka.size], minlength=cells.size) / ka.size
    pb = np.bincount(inverse[ka.size:], minlength=cells.size) / kb.size
    return tvd(pa, pb)


def pair_tvd(real: Table, synthetic: Table, domain: Mapping[str, int]) -> dict[tuple[str, str], float]:
    """TVD of the 2-way marginal of every pair of distinct columns (i < j in domain order)."""
    r, s = encoded(real, domain, "real"), encoded(synthetic, domain, "synthetic")
    require_rows(r, "real")
    require_rows(s, "synthetic")
    return {(a, b): table_tvd(r, s, (a, b), domain) for a, b in itertools.combinations(domain, 2)}


def fidelity(real: Table, synthetic: Table, domain: Mapping[str, int]) -> float:
    """The paper's fidelity error (§8.3): the mean 2-way TVD over all pairs of distinct
    columns."""
    if len(domain) < 2:
        raise ValueError("fidelity needs at least two columns")
    return float(np.mean(list(pair_tvd(real, synthetic, domain).values())))


def column_comparison(real: Table, synthetic: Table, domain: Mapping[str, int]) -> list[dict]:
    """Per column: its 1-way TVD and both normalized distributions (JSON-safe lists)."""
    r, s = encoded(real, domain, "real"), encoded(synthetic, domain, "synthetic")
    require_rows(r, "real")
    require_rows(s, "synthetic")
    out = []
    for column, k in domain.items():
        p = distribution(r, (column,), domain)
        q = distribution(s, (column,), domain)
        out.append({"column": column, "codes": int(k), "tvd": tvd(p, q),
                    "real": [float(x) for x in p], "synthetic": [float(x) for x in q]})
    return out
