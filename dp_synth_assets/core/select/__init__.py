"""Marginal selection: one `select(...)` signature for every method, one module per method.

A method receives the dataset's domain, a marginal oracle (clique list -> exact count arrays), its
`Budget` and a `charge(spend, **params)` callback, and returns a `Selection`, the public result.
Contract: it reads the data only through mechanisms of `core.privacy` and
`measure.measure_marginal`, charging each with its privacy map's answer right after the draw; it
spends at most `budget.total` (at most `one_way + score` unless it measures in selection);
everything it returns is computed from noisy values and public configuration. `METHODS`
(`core.methods`, re-exported here) registers each method."""

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..domain import Clique
from ..config import SelectionSettings
from ..measure import Measurement
from ..methods import METHODS
from ..plugins import plugin_module

MarginalOracle = Callable[[list[Clique]], dict[Clique, np.ndarray]]
Charge = Callable[..., None]
Log = Callable[[str], None]


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
    """What a selection method returns, all public: the noisy 1-way measurements, the cliques left
    to measure with their rho (`budgets`; only their ratios matter), the marginals measured during
    selection, the coarse groupings, and the published scores and details."""

    method: str
    one_way: tuple[Measurement, ...]
    cliques: tuple[Clique, ...]          # still to measure, in `measurements`
    budgets: dict[Clique, float]         # rho of each of those
    scores: dict[Clique, float] = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    measured: tuple[Measurement, ...] = ()  # measured during selection (adaptive methods)
    # cliques of `cliques` measured coarse: their `Measurement.groups` (public groupings)
    coarse: dict[Clique, tuple] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "one_way": [m.to_dict() for m in self.one_way],
            "cliques": [list(c) for c in self.cliques],
            "budgets": [[list(c), r] for c, r in self.budgets.items()],
            "scores": [[list(c), s] for c, s in self.scores.items()],
            "details": self.details,
            "measured": [m.to_dict() for m in self.measured],
            "coarse": [[list(c), [None if g is None else list(g) for g in groups]]
                       for c, groups in self.coarse.items()],
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
            measured=tuple(Measurement.from_dict(m) for m in d.get("measured", [])),
            coarse={tuple(c): tuple(None if g is None else tuple(g) for g in groups)
                    for c, groups in d.get("coarse", [])},
        )


def required_cliques(method: str, domain: dict[str, int],
                     settings: SelectionSettings | None = None) -> list[Clique]:
    """The exact marginals the `marginals` stage computes up front for `method`, in one scan:
    every 1-way clique plus what the method's module lists in `needed_cliques(domain,
    settings)`, by default every 2-way clique (the methods that score all pairs: absyn,
    privsyn, mst, aim). ppsyn needs its 3-way workload and manual its declared marginals
    instead of all pairs. A method may still ask its oracle for other cliques: the pipeline's
    oracle (`marginals.MarginalStore`) counts those on demand and keeps them."""
    module = method_module(method)
    needed = getattr(module, "needed_cliques", None)
    wanted = needed(domain, settings or SelectionSettings()) if needed else [
        tuple(p) for p in itertools.combinations(domain, 2)]
    return [(a,) for a in domain] + list(dict.fromkeys(tuple(c) for c in wanted if len(c) > 1))


def select(method: str, domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    """Run the selection method `method`, a key of `METHODS`.

    Its module defines `select(domain, oracle, budget, settings, charge) -> Selection` and may
    take `log=`: a method with rounds then calls `log(round_line(...))` as each round ends. A
    module whose `select` has no `log` parameter (e.g. a plugin's) is called without it.

    Args:
        method: the registered method's name.
        domain: attribute -> number of codes, in the encoding plan's order.
        oracle: the exact marginals (private); read only through charged mechanisms.
        budget: the run's selection budget (`one_way`, `score`, `measure`).
        settings: the dataset's `selection:` block, validated by the method's settings model.
        charge: records each mechanism's spend in the ledger as it is drawn.
        log: progress lines (`round_line`: public facts only), or None.

    Returns:
        The method's `Selection`: public, computed from noisy values and configuration only.
    """
    import inspect

    run = method_module(method).select
    if log is not None and "log" in inspect.signature(run).parameters:
        return run(domain, oracle, budget, settings, charge, log=log)
    return run(domain, oracle, budget, settings, charge)


def round_line(method: str, round: int, clique: Clique, rho: float) -> str:
    """The progress line of one selection round: its number, the clique it chose and the rho it
    charged (0 for a greedy round that post-processes scores released earlier). These are
    public: the clique is the output of a charged mechanism (or of post-processing of one) and
    rho is the privacy map's answer for public parameters. Nothing else of a round is logged:
    no score, count or duration (a round's time is private work,
    docs/decisions/0003-privacy-perimeter.md)."""
    return f"{method}: round {round}: chose {list(clique)}, rho {rho:.4g} charged"


def method_module(method: str):
    """The module of `method` (a key of METHODS; `plugins.plugin_module`)."""
    return plugin_module(METHODS, method, __name__, "selection method")