"""Never worse than independent columns: every measured marginal must justify itself against the
independent model, on public quantities only, or it is folded into the 1-way marginals.

Applied once, to every method's measurements, by `stages.measure` before consistency. It spends
nothing: it reads only the noisy measurements and their sigmas (post-processing of charged
mechanisms).

Test of one measured clique C of k >= 2 columns, noisy array y (cells c, noise sigma per cell):
- The independent model C would otherwise get is the product of y's own 1-way projections at
  y's total, p = n_y prod_a (y_a / n_y). Its interaction part has
  dof = c - 1 - sum_a (d_a - 1) degrees of freedom (for a pair, (d_a - 1)(d_b - 1)).
- T = || y - p ||_2^2 / sigma^2. If the data were independent on C, T would be the noise alone,
  about chi-square with `dof` degrees of freedom (E T = dof); dependency delta adds
  || delta ||^2 / sigma^2. So T - dof estimates the dependency energy in noise units.
- Measuring C pays back only if the dependency it captures exceeds the noise it brings into
  the interaction part, dof sigma^2 (an l2 criterion: the model fits y's interaction with its
  noise). C is kept when T > dof + max(dof, Z sqrt(2 dof)), `Z` = 3: its estimated dependency
  exceeds its noise and is significant at 3 null standard deviations (a clique of independent
  columns is kept with probability below 2.5% for every dof).
- Kept cliques are returned unchanged. A dropped clique is not discarded: its 1-way projections
  (noise variance sigma^2 c / d_a per cell, the rho of an equally noisy direct measurement:
  rho_c d_a / c, at most what was charged) are merged by inverse variance into the 1-way
  measurement of each of its columns, so the budget it spent still sharpens the 1-way
  marginals the independent model is made of.
The guarantee is statistical, per clique: the model fits only marginals whose measured
dependency beats their own noise; when none does, it fits the noisy 1-way marginals alone (the
independent model, with every dropped clique's projections). Measurements that are not full
arrays over their clique's domain are kept unchanged.
"""

import math

import numpy as np

from ..measure import Measurement, merge

Z = 3.0  # null standard deviations a kept clique's statistic must clear


def statistic(m: Measurement) -> tuple[float, int]:
    """(T, dof) of one measured clique (module docstring); T = 0 when its total is not positive."""
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
    """True when the clique's measured dependency beats its noise (module docstring)."""
    t, dof = statistic(m)
    if dof <= 0:
        return True  # nothing to test: a column of one value
    return t > dof + max(dof, Z * math.sqrt(2 * dof))


def guard(measurements: list[Measurement],
          domain: dict[str, int]) -> tuple[list[Measurement], dict]:
    """The measurements the model may fit, and a public report {"kept": [...], "dropped":
    [...]} of the tested cliques (module docstring)."""
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
