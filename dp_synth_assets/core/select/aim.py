"""AIM: adaptive and iterative selection and measurement of marginals.

Implements McKenna, Mullins, Sheldon, Miklau, "AIM: An Adaptive and Iterative Mechanism for
Differentially Private Synthetic Data", VLDB 2022, Algorithm 1 and section 4 (the benchmark
paper's Table 7 for its settings), written from the paper; our changes (numpy refits, the
initialization, coarse candidates) and the steps as implemented: docs/decisions/0016-aim.md.

Guarantee: the data is read only by the 1-way marginals and, per round, one exponential
mechanism and one discrete Gaussian measurement (`measure.measure_marginal`), each charged with
its OpenDP map's answer right after its draw. Together they spend `budget.total` and never more;
the `model` stage fits the final model to every measurement."""

import itertools
import math
from typing import ClassVar, Literal

import numpy as np
from pydantic import ConfigDict, ValidationInfo, model_validator

from ..config import SelectionSettings
from ..measure import (Groups, Measurement, clique_size, coarsen, coarsened_size,
                       measure_marginal, noisy_total)
from ..privacy import Spend, exponential_mechanism
from . import Budget, Charge, Clique, Log, MarginalOracle, Selection, round_line
from .absyn import COARSE_MIN_CELLS, coarse_groupings
from .aim_fit import fit, model_mb
from .privsyn import measure_one_way


ROUNDS_PER_ATTRIBUTE = 16   # AIM's T = 16 d
MEASURE_SHARE = 0.9         # AIM's alpha: share of rho_t for the Gaussian measurement
MAX_CELLS = 10_000          # largest workload marginal (private-pgm AIM's max_cells)
COARSE_LEVELS = (16, 40)    # coarse versions: groups of 1/level of a large column's mass
FIT_ITERATIONS = 50         # accelerated steps (generate/mirror.py) of each round's refit
FIRST_FIT_ITERATIONS = 200  # the fit to the 1-way marginals, from the uniform distribution
SCORE_SENSITIVITY = 1.0     # L_inf sensitivity of the (normalized-weight) quality scores


# ------------------------------------------------------------------------------ settings

class Settings(SelectionSettings):
    """Method aim's `selection:` block: `workload`, the marginals AIM's selection serves:
    `all_triples` (unset: every 3-way marginal of at most MAX_CELLS cells, and the pairs in none
    of them), `all_pairs`, or a list of column lists, e.g. [[age, income], [sex, occupation,
    income]]."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # the marginals AIM's selection serves: `all_triples` (unset: every 3-way marginal of at
    # most 10^4 cells, and the pairs in none of them), `all_pairs`, or a list of column lists
    workload: Literal["all_triples", "all_pairs"] | list[list[str]] | None = None
    # the message of another method whose block sets `workload`
    OWNED: ClassVar[str] = ("selection.workload is for method aim; method {name} has no workload "
                            "(remove it, or set method: aim)")

    @model_validator(mode="after")
    def _workload(self, info: ValidationInfo) -> "Settings":
        if isinstance(self.workload, list):
            if not self.workload or any(not c for c in self.workload):
                raise ValueError("selection.workload lists the marginals AIM should serve: give "
                                 "at least one, each a list of one or more columns, e.g. "
                                 "[[age, income], [sex, occupation, income]]")
            columns = (info.context or {}).get("columns")
            unknown = sorted({a for c in self.workload for a in c
                              if a not in columns}) if columns else []
            if unknown:
                raise ValueError(f"selection.workload names {unknown}, which are not declared "
                                 f"columns ({sorted(columns)})")
        return self


# ------------------------------------------------------------------------------ workload

def workload(domain: dict[str, int], max_cells: int = MAX_CELLS,
             declared: str | list[list[str]] | None = None) -> list[Clique]:
    """W (0016-aim.md, step 1): `declared` is `settings.workload` (None: `all_triples`).
    The generated workloads: the 3-way marginals within `max_cells`, then the pairs within
    `max_cells` that no kept triple contains (`all_pairs`: every pair within `max_cells`); the
    1-way marginal with one attribute. A declared list: its marginals, columns in domain order,
    repeats dropped."""
    attributes = list(domain)
    if isinstance(declared, list):
        missing = sorted({a for c in declared for a in c if a not in domain})
        if missing:
            raise ValueError(f"selection.workload names {missing}, which are not encoded columns "
                             f"({sorted(domain)}); fix the names in the dataset's entry")
        order = {a: i for i, a in enumerate(attributes)}
        return list(dict.fromkeys(tuple(sorted(set(c), key=order.get)) for c in declared if c))
    if len(attributes) < 2:
        return [(a,) for a in attributes]
    if declared == "all_pairs":
        return [p for p in itertools.combinations(attributes, 2)
                if clique_size(p, domain) <= max_cells]
    triples = [t for t in itertools.combinations(attributes, 3)
               if clique_size(t, domain) <= max_cells]
    covered = {p for t in triples for p in itertools.combinations(t, 2)}
    pairs = [p for p in itertools.combinations(attributes, 2)
             if p not in covered and clique_size(p, domain) <= max_cells]
    return triples + pairs


def candidate_weights(work: list[Clique], domain: dict[str, int] | None = None,
                      max_cells: int = MAX_CELLS) -> dict[Clique, float]:
    """AIM's weights w_r = sum_{s in W} |r & s| over W's downward closure (with `domain`: less
    the marginals of two or more attributes and more than `max_cells` cells), divided by the
    largest (so the largest is 1)."""
    closure = {sub for s in work for k in range(1, len(s) + 1)
               for sub in itertools.combinations(s, k)
               if domain is None or k == 1 or clique_size(sub, domain) <= max_cells}
    order = {c: i for i, c in enumerate(sorted(closure, key=lambda c: (len(c), c)))}
    raw = {r: float(sum(len(set(r) & set(s)) for s in work)) for r in sorted(closure, key=order.get)}
    top = max(raw.values())
    return {r: w / top for r, w in raw.items()}


def needed_cliques(domain: dict[str, int], settings: SelectionSettings) -> list[Clique]:
    """The candidates of more than one attribute: the marginals the `marginals` stage counts."""
    work = workload(domain, declared=getattr(settings, "workload", None))
    return [r for r in candidate_weights(work, domain) if len(r) > 1]


def describe(declared: str | list[list[str]] | None, max_cells: int) -> str:
    """The workload in words, for the selection's details."""
    if isinstance(declared, list):
        return (f"the {len(declared)} declared marginals (selection.workload); candidates of at "
                f"most {max_cells:,} cells")
    if declared == "all_pairs":
        return f"all pairs of at most {max_cells:,} cells"
    return (f"all 3-way marginals of at most {max_cells:,} cells, and the pairs of at most that "
            "many cells in none of them")


# ------------------------------------------------------------------------------ budget rules

def round_parameters(rho: float) -> tuple[float, float]:
    """(sigma, epsilon) of a round that spends `rho`: alpha rho on the measurement, the rest on
    the exponential mechanism."""
    return (math.sqrt(1.0 / (2.0 * MEASURE_SHARE * rho)),
            math.sqrt(8.0 * (1.0 - MEASURE_SHARE) * rho))


def round_rho(sigma: float, epsilon: float) -> float:
    """1 / (2 sigma^2) + epsilon^2 / 8."""
    return 1.0 / (2.0 * sigma ** 2) + epsilon ** 2 / 8.0


def anneal(sigma: float, epsilon: float, moved: float, cells: int) -> tuple[float, float, bool]:
    """AIM's annealing: (sigma / 2, 2 epsilon, True) when the chosen marginal's estimate moved by
    at most sqrt(2/pi) sigma cells in l1 (the expected l1 norm of its noise), else unchanged."""
    if moved <= math.sqrt(2.0 / math.pi) * sigma * cells:
        return sigma / 2.0, 2.0 * epsilon, True
    return sigma, epsilon, False


def next_round(remaining: float, sigma: float, epsilon: float) -> tuple[float, float, bool]:
    """(sigma, epsilon, last) of the next round given the rho `remaining`: when it is at most
    twice what a round at (sigma, epsilon) costs (up to the float error of a sum of charges,
    1e-9 relative), the next round is the last and spends it all."""
    if remaining <= 2.0 * round_rho(sigma, epsilon) * (1.0 + 1e-9):
        return (*round_parameters(remaining), True)
    return sigma, epsilon, False


def versions(cliques: list[Clique], domain: dict[str, int],
             one_way: list[Measurement]) -> list[tuple[Clique, Groups | None]]:
    """The candidates of the exponential mechanism (0016-aim.md, step 1): each clique on its
    codes (groups None), and each one of `COARSE_MIN_CELLS` cells or more on every distinct
    grouping of `COARSE_LEVELS` (`absyn.coarse_groupings`: a column of at least 2g codes in
    runs of adjacent codes of about 1/g of its noisy 1-way mass; public) that groups at least
    one of its attributes."""
    groupings = coarse_groupings(domain, tuple(one_way), COARSE_LEVELS)
    out: list[tuple[Clique, Groups | None]] = []
    for r in cliques:
        out.append((r, None))
        if len(r) < 2 or clique_size(r, domain) < COARSE_MIN_CELLS:
            continue
        seen: set = set()
        for level in groupings.values():
            groups = tuple(level.get(a) for a in r)
            if any(g is not None for g in groups) and groups not in seen:
                seen.add(groups)
                out.append((r, groups))
    return out


def allowed(domain: dict[str, int], candidates: list[Clique], measured: list[Clique],
            tree_cliques: list[Clique], limit_mb: float) -> list[Clique]:
    """The candidates whose addition keeps the junction tree of `measured` within `limit_mb`;
    one inside a clique of the current tree (`tree_cliques`) always (it changes nothing)."""
    inside = [set(c) for c in tree_cliques]
    return [r for r in candidates
            if any(set(r) <= c for c in inside) or model_mb(domain, measured + [r]) <= limit_mb]


# ------------------------------------------------------------------------------ AIM

def run(domain: dict[str, int], oracle: MarginalOracle, budget: Budget, charge: Charge, *,
        max_model_mb: float = 4.0, max_rounds: int | None = None,
        fit_iterations: int = FIT_ITERATIONS, max_cells: int = MAX_CELLS,
        declared: str | list[list[str]] | None = None, log: Log | None = None) -> Selection:
    """AIM as described in the 0016-aim.md; `select` calls it with the dataset's settings.
    `log`, if given, gets each round's `round_line` when its refit is done."""
    if max_rounds is not None and max_rounds < 1:
        raise ValueError(f"max_rounds must be at least 1, got {max_rounds!r}")
    attributes = list(domain)
    spent = 0.0

    def pay(spend: Spend, **params) -> None:
        nonlocal spent
        charge(spend, **params)
        spent += spend.rho

    one_way = list(measure_one_way(domain, oracle, budget.one_way, pay, by_cells=True))
    work = workload(domain, max_cells, declared)
    weights = candidate_weights(work, domain, max_cells)
    candidates = versions(list(weights), domain, one_way)
    exact = oracle(list(weights))  # private: only the quality scores and the measurements read it

    horizon = ROUNDS_PER_ATTRIBUTE * len(attributes)
    sigma, epsilon = round_parameters((budget.total - spent) / horizon)
    state, model = fit(domain, one_way, noisy_total(one_way), FIRST_FIT_ITERATIONS)
    measured: list[Measurement] = []
    trace: list[dict] = []
    t, last = 0, False
    while not last and budget.total - spent > 0:
        t += 1
        sigma, epsilon, last = next_round(budget.total - spent, sigma, epsilon)
        last = last or (max_rounds is not None and t >= max_rounds)
        if last:
            sigma, epsilon = round_parameters(budget.total - spent)
        rho_t = round_rho(sigma, epsilon)

        # a. candidates that keep the model small (AIM's limit grows with the budget spent)
        limit = max_model_mb * min((spent + rho_t) / budget.total, 1.0)
        cliques = [m.clique for m in one_way + measured]
        fits = allowed(domain, list(weights), cliques, list(model.cliques), limit)
        small = set(fits)
        kept = [(r, g) for r, g in candidates if r in small]

        # b. quality scores (a coarse version's error and noise on its groups) and the
        # exponential mechanism
        estimates = {r: model.project(r) for r in fits}
        bias = math.sqrt(2.0 / math.pi) * sigma
        scores = np.array([weights[r] * (np.abs(coarsen(exact[r] - estimates[r], g)).sum()
                                         - bias * coarsened_size(r, domain, g))
                           for r, g in kept])
        index, em_spend = exponential_mechanism(scores, epsilon ** 2 / 8.0, SCORE_SENSITIVITY)
        chosen, groups = kept[index]
        pay(em_spend, purpose="AIM selection (exponential mechanism)", round=t,
            candidates=len(kept))

        # c. the Gaussian measurement (the last round takes exactly what is left)
        rho_m = budget.total - spent if last else 1.0 / (2.0 * sigma ** 2)
        measurement = measure_marginal(exact[chosen], chosen, rho_m, pay, groups,
                                       purpose="AIM measurement", round=t)
        measured.append(measurement)

        # d. refit, warm-started (the trace's last refit is for `moved` only)
        everything = one_way + measured
        state, model = fit(domain, everything, noisy_total(everything), fit_iterations, state)
        moved = float(np.abs(coarsen(model.project(chosen) - estimates[chosen], groups)).sum())
        entry = {"round": t, "clique": list(chosen), "rho": em_spend.rho + measurement.rho,
                 "sigma": measurement.sigma, "epsilon_em": math.sqrt(8.0 * em_spend.rho),
                 "candidates": len(kept), "model_mb_limit": float(limit),
                 "moved_l1": round(moved, 3)}
        if groups is not None:
            entry["groups"] = [None if g is None else list(g) for g in groups]
        # e. annealing: a measurement that barely changed the model asks for less noise
        sigma, epsilon, annealed = anneal(sigma, epsilon, moved,
                                          coarsened_size(chosen, domain, groups))
        if annealed and not last:
            entry["annealed"] = True
        trace.append(entry)
        if log is not None:
            log(round_line("aim", t, chosen, em_spend.rho + measurement.rho))
    del exact
    final_cliques = [m.clique for m in one_way + measured]
    return Selection(
        method="aim",
        one_way=tuple(one_way),
        cliques=(),
        budgets={},
        measured=tuple(measured),
        details={"rounds": trace,
                 "workload": describe(declared, max_cells),
                 "workload_size": len(work),
                 "horizon": horizon,
                 "fit_iterations": fit_iterations,
                 "coarse_measured": sum(1 for m in measured if m.groups is not None),
                 "model_mb": float(model_mb(domain, final_cliques))},
    )


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge, log: Log | None = None) -> Selection:
    """AIM (`run`) with the dataset's `max_model_mb`, `max_rounds` and `workload`.

    Args: those of `select.select` (core/select/__init__.py), but `method`.

    Returns:
        Every measurement in `measured` (AIM spends the whole budget inside selection); `cliques`
        is empty.
    """
    return run(domain, oracle, budget, charge, max_model_mb=settings.max_model_mb,
               max_rounds=settings.max_rounds, declared=getattr(settings, "workload", None),
               log=log)
