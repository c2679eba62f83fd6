"""Never worse than independent columns: every measured marginal must justify itself against the
independent model, on public quantities only, or it is folded into the 1-way marginals.

Applied once, to every method's measurements, by `stages.measure` before consistency. It spends
nothing: it reads only the noisy measurements and their sigmas (post-processing). A clique is
kept when its chi-square statistic against its own independent projection exceeds
dof + max(dof, Z sqrt(2 dof)), `Z` = 3; a dropped clique's 1-way projections are merged by
inverse variance into its columns' 1-way measurements. The test and its guarantee:
docs/decisions/0012-selection-methods.md, "As implemented: the guard"."""

import math

import numpy as np

from ..measure import Measurement, merge

Z = 3.0  # null standard deviations a kept clique's statistic must clear


def statistic(m: Measurement) -> tuple[float, int]:
    """(T, dof) of one measured clique (0012-selection-methods.md); T = 0 when its total is not
    positive."""
    y = np.asarray(m.noisy, dtype=np.float64)
    k = y.ndim
    dof = y.size - 1 - sum(s - 1 for s in y.shape)
    total = float(y.sum())
    if total <= 0:
        return 0.0, dof
    p = np.full(y.shape, total)
    for axis in range(k):
        others = tuple(i for i in range(k) if i != axis)
        shape = [1] * k
        shape[axis] = -1
        p = p * (y.sum(axis=others) / total).reshape(shape)
    return float(((y - p) ** 2).sum() / m.sigma ** 2), dof


def justified(m: Measurement) -> bool:
    """True when the clique's measured dependency beats its noise (0012-selection-methods.md)."""
    t, dof = statistic(m)
    if dof <= 0:
        return True  # nothing to test: a column of one value
    return t > dof + max(dof, Z * math.sqrt(2 * dof))


def guard(measurements: list[Measurement],
          domain: dict[str, int]) -> tuple[list[Measurement], dict]:
    """The measurements the model may fit, and a public report {"kept": [...], "dropped":
    [...]} of the tested cliques (0012-selection-methods.md)."""
    kept, dropped = [], []
    for m in measurements:
        full = m.noisy.shape == tuple(domain[a] for a in m.clique)
        if len(m.clique) < 2 or not full or justified(m):
            kept.append(m)
        else:
            dropped.append(m)
    for m in dropped:
        for axis, attr in enumerate(m.clique):
            others = tuple(i for i in range(len(m.clique)) if i != axis)
            sigma = m.sigma * math.sqrt(m.cells / m.noisy.shape[axis])
            proj = Measurement((attr,), m.noisy.sum(axis=others), sigma, 1 / (2 * sigma ** 2))
            at = next((i for i, k in enumerate(kept) if k.clique == (attr,)), None)
            if at is None:
                kept.append(proj)
            else:
                kept[at] = merge(kept[at], proj)
    report = {"kept": [list(m.clique) for m in kept if len(m.clique) >= 2],
              "dropped": [list(m.clique) for m in dropped]}
    return kept, report
