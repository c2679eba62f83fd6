"""AIM's round-by-round estimator and its model-size limit: the numpy mirror-descent fit of a
graphical model on the junction tree of the measured cliques (`generate/mirror.py`),
warm-started between rounds, whose marginals on any clique AIM's quality scores and annealing
test read; and `model_mb`, the size test of a candidate.

The estimator (`fit`, `Calibrated`, `FitState`, `pool`) is `generate/mirror.py`, Private-PGM's
mirror descent in numpy, shared with the pgm engine.

Model size (`model_mb`): the junction tree's cells x 8 bytes in MB, with mbi's greedy elimination
order (the variable whose elimination clique has the fewest cells first, ties in domain order)
computed on sets rather than networkx graphs: the same number as mbi's
`hypothetical_model_size` (tests/test_select_aim.py compares them) in a fraction of its time.
"""

import math

from ..domain import Clique
from ..generate.mirror import Calibrated, FitState, fit, pool  # noqa: F401 (AIM's estimator)


# ------------------------------------------------------------------------------ model size

def elimination_cliques(domain: dict[str, int], cliques: list[Clique]) -> list[frozenset]:
    """The maximal cliques of the triangulation mbi's greedy elimination order makes of the
    graph of `cliques` (every attribute of `domain` included).

    mbi eliminates factor scopes; the union of the scopes holding an attribute is the attribute
    and its neighbours in the graph the scopes make, and eliminating it joins its neighbours, so
    this works on that graph: each attribute's neighbours as a bit mask."""
    names = list(domain)
    index = {a: i for i, a in enumerate(names)}
    neighbours = [0] * len(names)
    for c in cliques:
        mask = sum(1 << index[a] for a in set(c))
        for a in set(c):
            neighbours[index[a]] |= mask
    cost_of: dict[int, int] = {}

    def cost(mask: int) -> int:  # the cells of a set of attributes
        if mask not in cost_of:
            cost_of[mask] = math.prod(domain[names[i]] for i in range(len(names)) if mask >> i & 1)
        return cost_of[mask]

    unmarked = list(range(len(names)))  # ties go to the first attribute in domain order
    made: list[int] = []
    for _ in range(len(names)):
        best, best_cost = -1, -1
        for i in unmarked:
            c_cost = cost(neighbours[i] | 1 << i)
            if best < 0 or c_cost < best_cost:
                best, best_cost = i, c_cost
        variables = neighbours[best] | 1 << best
        unmarked.remove(best)
        for j in unmarked:
            if variables >> j & 1:
                neighbours[j] = (neighbours[j] | variables) & ~(1 << best)
        made.append(variables)
    maximal = [m for m in made if not any(m != o and m & o == m for o in made)]
    return [frozenset(names[i] for i in range(len(names)) if m >> i & 1) for m in maximal]


def model_mb(domain: dict[str, int], cliques: list[Clique]) -> float:
    """Size of the junction tree of `cliques` in MB of float64 cells (mbi's
    `hypothetical_model_size`)."""
    cells = sum(math.prod(domain[a] for a in c) for c in set(elimination_cliques(domain, cliques)))
    return cells * 8 / 2**20
