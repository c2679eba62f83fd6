"""Marginal selection: one `select(...)` signature for every method, one module per method.

A method receives the dataset's domain, a marginal oracle (clique list -> exact count arrays, read
from the private zone), its budget shares and a `charge(spend, **params)` callback that records
every mechanism invocation in the ledger as it happens. It returns a `Selection`: the public result
(noisy 1-way measurements, the chosen cliques and the rho each will be measured with).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..config import SelectionSettings
from ..measure import Measurement

Clique = tuple[str, ...]
MarginalOracle = Callable[[list[Clique]], dict[Clique, np.ndarray]]
Charge = Callable[..., None]


@dataclass(frozen=True)
class Budget:
    """rho of the run, split by stage."""

    one_way: float
    score: float
    measure: float

    @property
    def total(self) -> float:
        return self.one_way + self.score + self.measure


@dataclass(frozen=True)
class Selection:
    method: str
    one_way: tuple[Measurement, ...]
    cliques: tuple[Clique, ...]
    budgets: dict[Clique, float]
    scores: dict[Clique, float] = field(default_factory=dict)
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "one_way": [m.to_dict() for m in self.one_way],
            "cliques": [list(c) for c in self.cliques],
            "budgets": [[list(c), r] for c, r in self.budgets.items()],
            "scores": [[list(c), s] for c, s in self.scores.items()],
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Selection":
        return cls(
            method=d["method"],
            one_way=tuple(Measurement.from_dict(m) for m in d["one_way"]),
            cliques=tuple(tuple(c) for c in d["cliques"]),
            budgets={tuple(c): float(r) for c, r in d["budgets"]},
            scores={tuple(c): float(s) for c, s in d["scores"]},
            details=d.get("details", {}),
        )


def select(method: str, domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge) -> Selection:
    if method == "privsyn":
        from .privsyn import select_privsyn

        return select_privsyn(domain, oracle, budget, settings, charge)
    raise ValueError(f"unknown selection method {method!r}")
