"""MST's marginal selection: a private maximum spanning tree over the attributes.

Implements R. McKenna, G. Miklau, D. Sheldon, "Winning the NIST Contest: A scalable and general
approach to differentially private synthetic data", Journal of Privacy and Confidentiality 11(3),
2021, section 4 (MST): rho/3 for the 1-way marginals, rho/3 for selection (Kruskal with the
exponential mechanism, OpenDP's `make_noisy_max`, sensitivity 1 on the L1 scores against the
product of the noisy 1-way marginals), rho/3 for the tree's 2-way marginals. Each mechanism is
charged with its OpenDP map's answer; the exact scores stay private. Steps and deviations:
docs/decisions/0012-selection-methods.md, "As implemented: mst"."""

import itertools

import numpy as np

from ..config import SelectionSettings
from ..measure import Measurement, noisy_total
from ..privacy import exponential_mechanism
from . import Budget, Charge, Clique, Log, MarginalOracle, Selection, round_line
from .privsyn import measure_one_way


SCORE_SENSITIVITY = 1.0  # the L1 error of a fixed estimate against one exact marginal


def one_way_probabilities(one_way: tuple[Measurement, ...]) -> dict[str, np.ndarray]:
    """Each noisy 1-way marginal clipped at 0 and normalized (uniform when nothing is left)."""
    out = {}
    for m in one_way:
        p = np.clip(m.noisy, 0.0, None)
        total = p.sum()
        out[m.clique[0]] = p / total if total > 0 else np.full(p.shape, 1.0 / p.size)
    return out


def independence_errors(pairs: list[Clique], exact: dict[Clique, np.ndarray],
                        one_way: tuple[Measurement, ...]) -> np.ndarray:
    """w_ab = || M_ab - noisy_total p_a (x) p_b ||_1 for each pair (private: exact counts go in)."""
    p = one_way_probabilities(one_way)
    total = max(noisy_total(list(one_way)), 0.0)
    scores = np.empty(len(pairs), dtype=np.float64)
    for i, (a, b) in enumerate(pairs):
        estimate = total * np.outer(p[a], p[b])
        scores[i] = np.abs(np.asarray(exact[(a, b)], dtype=np.float64) - estimate).sum()
    return scores


class _Components:
    """Union-find over attribute names (Kruskal's connected components)."""

    def __init__(self, items):
        self.parent = {x: x for x in items}

    def find(self, x):
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b) -> None:
        self.parent[self.find(a)] = self.find(b)


def private_spanning_tree(attrs: list[str], pairs: list[Clique], scores: np.ndarray, rho: float,
                          charge: Charge, log: Log | None = None) -> tuple[list[Clique], list[dict]]:
    """MST's selection loop: len(attrs) - 1 exponential-mechanism rounds, rho split evenly;
    `log`, if given, gets each round's `round_line`."""
    rounds = len(attrs) - 1
    if rounds < 1:
        return [], []
    components = _Components(attrs)
    tree, trace = [], []
    for r in range(rounds):
        candidates = [i for i, (a, b) in enumerate(pairs) if components.find(a) != components.find(b)]
        picked, spend = exponential_mechanism(scores[candidates], rho / rounds, SCORE_SENSITIVITY)
        charge(spend, purpose="MST spanning-tree round", round=r + 1, candidates=len(candidates))
        a, b = pairs[candidates[picked]]
        components.union(a, b)
        tree.append((a, b))
        trace.append({"round": r + 1, "pair": [a, b], "candidates": len(candidates)})
        if log is not None:
            log(round_line("mst", r + 1, (a, b), spend.rho))
    return tree, trace


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    """MST: 1-way marginals, then a private maximum spanning tree (`select_after`).

    Args: those of `select.select` (core/select/__init__.py), but `method`.

    Returns:
        The tree's d - 1 edges as `cliques`, `budget.measure` split evenly over them.

    Raises:
        ValueError: a negative measurement budget (the shares add up to 1 or more).
    """
    attrs = list(domain)
    if budget.measure < 0:
        raise ValueError(f"MST needs a measurement budget >= 0, got rho {budget.measure!r}: "
                         "selection.one_way_share + selection.score_share must stay below 1")
    return select_after(domain, oracle, budget, charge,
                        measure_one_way(domain, oracle, budget.one_way, charge), log)


def select_after(domain: dict[str, int], oracle: MarginalOracle, budget: Budget, charge: Charge,
                 one_way: tuple, log: Log | None = None) -> Selection:
    """Steps 2-4 on 1-way marginals already measured (`auto` measures them first)."""
    attrs = list(domain)
    pairs = list(itertools.combinations(attrs, 2))
    tree, trace = [], []
    if pairs:
        scores = independence_errors(pairs, oracle(pairs), one_way)
        tree, trace = private_spanning_tree(attrs, pairs, scores, budget.score, charge, log)
        del scores  # private
    return Selection(
        method="mst",
        one_way=one_way,
        cliques=tuple(tree),
        budgets={edge: budget.measure / len(tree) for edge in tree},
        details={"rounds": trace,
                 "score_rho_per_round": budget.score / len(tree) if tree else 0.0},
    )
