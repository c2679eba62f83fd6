"""Private-PGM's estimator in numpy: an accelerated mirror-descent fit of a graphical model on the
junction tree of the measured cliques, warm-startable, and the fitted model's marginals.

Implements the model and loss of Private-PGM (McKenna, Sheldon, Miklau 2019; AIM section 4):
P(x) proportional to exp(sum_m theta_m(x_m)), fitted by minimizing
L(mu) = 1/2 sum_m ||Q_m mu_m - y_m||^2 / sigma_m^2 (mbi's objective up to a constant) with
Nesterov-accelerated mirror descent in theta and function restarts. The `pgm` engine runs it
instead of mbi's JAX program when it is estimated faster; AIM refits with it every round.
Reads only measurements (post-processing). The step-size search, the restarts, the marginals of
`Calibrated.project` and why: docs/decisions/0018-pgm-estimator.md, "As implemented: mirror"."""

import math
import time
from dataclasses import dataclass

import numpy as np

from ..domain import Clique
from ..measure import Measurement, coarsen, expand
from .tree import (CliqueTree, broadcast_to, calibrate, junction_tree, marginalize,
                   tree_children)

RESTART_SHRINK = 0.8  # the step size after a momentum restart
DEFAULT_ITERATIONS = 250  # `model.iterations` unset (docs/decisions/0018-pgm-estimator.md)


# ------------------------------------------------------------------------------ marginals

@dataclass(frozen=True)
class Calibrated:
    """A fitted model's junction tree with every clique's probability table and the total N."""

    domain: dict[str, int]
    cliques: tuple[Clique, ...]
    separators: tuple[Clique, ...]
    parents: tuple[int, ...]
    tables: tuple[np.ndarray, ...]
    total: float

    def clique_tree(self) -> CliqueTree:
        """The fitted distribution as a `CliqueTree` (the pgm engine's model): the same junction
        tree, its calibrated clique tables as the sampling tables."""
        return CliqueTree(dict(self.domain), self.cliques, self.separators, self.tables)

    def project(self, query: Clique) -> np.ndarray:
        """N times the model's marginal on `query` (axes in `query` order)."""
        query = tuple(query)
        inside = [i for i, c in enumerate(self.cliques) if set(query) <= set(c)]
        if inside:
            i = min(inside, key=lambda k: self.tables[k].size)
            return self.total * marginalize(self.tables[i], self.cliques[i], query)
        root_of = self._roots()
        parts: dict[int, list[str]] = {}
        for a in query:
            node = next(i for i, c in enumerate(self.cliques) if a in c)
            parts.setdefault(root_of[node], []).append(a)
        result, axes = np.ones(()), []
        for attrs in parts.values():
            result = np.multiply.outer(result, self._component_marginal(tuple(attrs)))
            axes += attrs
        return self.total * np.transpose(result, [axes.index(a) for a in query])

    def _roots(self) -> list[int]:
        roots = []
        for i, parent in enumerate(self.parents):
            roots.append(i if parent < 0 else roots[parent])
        return roots

    def _component_marginal(self, attrs: Clique) -> np.ndarray:
        """P on `attrs`, all in one connected component: einsum over the covering subtree."""
        inside = [i for i, c in enumerate(self.cliques) if set(attrs) <= set(c)]
        if inside:
            i = min(inside, key=lambda k: self.tables[k].size)
            return marginalize(self.tables[i], self.cliques[i], attrs)
        chosen = {next(i for i, c in enumerate(self.cliques) if a in c) for a in attrs}
        nodes: set[int] = set()
        for i in chosen:  # the paths from each chosen clique to the root
            while i >= 0 and i not in nodes:
                nodes.add(i)
                i = self.parents[i]
        children = tree_children(list(self.parents))
        top = min(nodes)  # the root (parents come first)
        while top not in chosen:  # drop the part above the subtree's own top
            below = [c for c in children[top] if c in nodes]
            if len(below) != 1:
                break
            nodes.discard(top)
            top = below[0]
        labels = {a: k for k, a in enumerate(sorted({a for i in nodes for a in self.cliques[i]},
                                                    key=list(self.domain).index))}
        operands: list = []
        for i in sorted(nodes):
            table = self.tables[i]
            if i != top:  # P(clique | separator): 1 / mass would overflow on a subnormal mass
                sep = self.separators[i]
                mass = broadcast_to(marginalize(table, self.cliques[i], sep), sep,
                                    self.cliques[i], self.domain)
                table = np.divide(table, mass, out=np.zeros_like(table), where=mass > 0)
            operands += [table, [labels[a] for a in self.cliques[i]]]
        return np.einsum(*operands, [labels[a] for a in attrs], optimize="greedy")


# ------------------------------------------------------------------------------ the fit

@dataclass(frozen=True)
class FitState:
    """Where a fit ended: the log-potential of each measured clique and Armijo's step size."""

    theta: dict
    alpha: float


def pool(measurements: list[Measurement]) -> dict[tuple, tuple[np.ndarray, float]]:
    """Per distinct (clique, groups) (in order of first appearance): the inverse-variance
    weighted mean of its measurements and the sum of their weights 1 / sigma^2."""
    sums: dict[tuple, list] = {}
    for m in measurements:
        w = 1.0 / m.sigma ** 2
        entry = sums.setdefault((tuple(m.clique), m.groups), [0.0, 0.0])
        entry[0] = entry[0] + w * np.asarray(m.noisy, dtype=np.float64)
        entry[1] += w
    return {key: (s / w, w) for key, (s, w) in sums.items()}


def fit(domain: dict[str, int], measurements: list[Measurement], total: float, iterations: int,
        warm: FitState | None = None, log=None) -> tuple[FitState, Calibrated]:
    """`iterations` mirror-descent steps (0018-pgm-estimator.md) from `warm` (or from the uniform
    distribution); the state to warm-start the next fit from and the calibrated model."""
    total = max(float(total), 1.0)
    pooled = pool(measurements)
    cliques = list(dict.fromkeys(c for c, _ in pooled))
    order, separators, parents = junction_tree(domain, cliques)
    host = {m: min((i for i, c in enumerate(order) if set(m) <= set(c)),
                   key=lambda i: math.prod(domain[a] for a in order[i])) for m in cliques}
    # each measured marginal is summed from the smallest larger one of the same host already
    # summed (None: from the host's table), largest first: adult's 1-way marginals come from
    # 2-way ones, not from 3- and 4-way junction-tree tables
    sources: list[tuple[Clique, Clique | None]] = []
    for m in sorted(cliques, key=lambda m: (host[m], -math.prod(domain[a] for a in m))):
        larger = [s for s, _ in sources if host[s] == host[m] and set(m) < set(s)]
        sources.append((m, min(larger, key=lambda s: math.prod(domain[a] for a in s))
                        if larger else None))
    theta = {m: (warm.theta[m] if warm is not None and m in warm.theta
                 else np.zeros([domain[a] for a in m])) for m in cliques}
    lipschitz = [0.0] * len(order)
    for (m, groups), (y, w) in pooled.items():
        # a coarse measurement's map sums at most (fine / coarse cells) cells into one
        size = math.prod(domain[a] for a in order[host[m]])
        lipschitz[host[m]] += w * size / y.size
    alpha = 2.0 / (max(lipschitz) * total)
    if warm is not None:  # a step that converged fits shrink alpha: never start below 2 / (L N)
        alpha = max(alpha, warm.alpha)

    def marginals(theta):
        psi = [np.zeros([domain[a] for a in c]) for c in order]
        for m, values in theta.items():
            psi[host[m]] += broadcast_to(values, m, order[host[m]], domain)
        tables = calibrate(domain, order, separators, parents, psi)
        mu = {}
        for m, source in sources:
            mu[m] = (total * marginalize(tables[host[m]], order[host[m]], m) if source is None
                     else marginalize(mu[source], source, m))
        return mu, tables

    def loss(mu):
        return 0.5 * sum(w * float(((coarsen(mu[m], g) - y) ** 2).sum())
                         for (m, g), (y, w) in pooled.items())

    def gradient(mu):  # d loss / d mu_m: each measurement's residual through the map's adjoint
        grad = {m: np.zeros_like(mu[m]) for m in cliques}
        for (m, g), (y, w) in pooled.items():
            grad[m] = grad[m] + expand(w * (coarsen(mu[m], g) - y), g)
        return grad

    mu, tables = marginals(theta)
    current = loss(mu)
    started, every = time.perf_counter(), max(1, iterations // 10)
    if log is not None:
        log(f"pgm: {iterations} iterations on {len(measurements)} measurements (numpy)")
    searching = warm is None  # phase 1: find the step size
    best, last = (theta, mu, tables, current), current
    k, previous = 0, theta
    for step in range(iterations):
        if searching:  # an Armijo step; alpha doubles until the first refused step
            grad = gradient(mu)
            trial = {m: theta[m] - alpha * grad[m] for m in cliques}
            mu2, tables2 = marginals(trial)
            loss2 = loss(mu2)
            decrease = 0.5 * sum(float((grad[m] * (mu[m] - mu2[m])).sum()) for m in cliques)
            if current - loss2 >= decrease and loss2 < current:  # (a zero gradient ends it)
                theta, mu, tables, current = trial, mu2, tables2, loss2
                alpha *= 2.0
            else:
                alpha *= 0.5
                searching, previous = False, theta
                best, last = (theta, mu, tables, current), current
        else:  # phase 2: a Nesterov step from the extrapolated point v
            k += 1
            if k == 1:  # no momentum: theta is the best point, already evaluated
                v, mu_v, tables_v, loss_v = best
            else:
                beta = (k - 1) / (k + 2)
                v = {m: theta[m] + beta * (theta[m] - previous[m]) for m in cliques}
                mu_v, tables_v = marginals(v)
                loss_v = loss(mu_v)
                if loss_v < best[3]:
                    best = (v, mu_v, tables_v, loss_v)
            if not loss_v <= last:  # overshot (or overflowed): restart from the best point
                k, alpha = 0, alpha * RESTART_SHRINK
                theta = previous = best[0]
                last = best[3]
            else:
                last = loss_v
                grad = gradient(mu_v)
                previous, theta = theta, {m: v[m] - alpha * grad[m] for m in cliques}
        if log is not None and ((step + 1) % every == 0 or step + 1 == iterations):
            log(f"pgm: iteration {step + 1}/{iterations}, "
                f"{time.perf_counter() - started:.1f}s fitting")
    if not searching:  # the best point evaluated (the last step's theta was not)
        theta, mu, tables, current = best
    calibrated = Calibrated(dict(domain), tuple(order), tuple(separators), tuple(parents),
                            tuple(tables), total)
    return FitState(theta, alpha), calibrated
