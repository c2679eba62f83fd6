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
    graph of `cliques` (every attribute of `domain` included)."""
    current = {frozenset(c) for c in cliques if c}
    unmarked = list(domain)
    made: list[frozenset] = []
    for _ in range(len(unmarked)):
        best, best_cost, best_vars = None, None, None
        for a in unmarked:
            variables = frozenset({a}).union(*[c for c in current if a in c])
            cost = math.prod(domain[v] for v in variables)
            if best_cost is None or cost < best_cost:
                best, best_cost, best_vars = a, cost, variables
        unmarked.remove(best)
        current = {c for c in current if best not in c}
        rest = best_vars - {best}
        if rest:
            current.add(rest)
        made.append(best_vars)
    return [c for c in made if not any(c < other for other in made)]


def model_mb(domain: dict[str, int], cliques: list[Clique]) -> float:
    """Size of the junction tree of `cliques` in MB of float64 cells (mbi's
    `hypothetical_model_size`)."""
    cells = sum(math.prod(domain[a] for a in c) for c in set(elimination_cliques(domain, cliques)))
    return cells * 8 / 2**20
