"""AIM's round-by-round estimator and its model-size limit.

The estimator (`fit`, `Calibrated`, `FitState`, `pool`) is `generate/mirror.py`, Private-PGM's
mirror descent in numpy, shared with the pgm engine, warm-started between rounds. `model_mb` is
the junction tree's cells x 8 bytes in MB, over the maximal cliques of `generate/tree.py`'s
greedy elimination (fewest cells first, ties in domain order), computed on bit masks: the same
number as mbi's `hypothetical_model_size` (tests/test_select_aim.py compares them)."""

from ..domain import Clique
from ..generate.mirror import Calibrated, FitState, fit, pool  # noqa: F401 (AIM's estimator)
from ..generate.tree import model_cells


# ------------------------------------------------------------------------------ model size

def model_mb(domain: dict[str, int], cliques: list[Clique]) -> float:
    """Size of the junction tree of `cliques` in MB of float64 cells (`tree.model_cells`; the
    same number as mbi's `hypothetical_model_size`)."""
    return model_cells(domain, cliques) * 8 / 2**20
