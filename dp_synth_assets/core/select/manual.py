"""`manual`: measure exactly the marginals the user declares, with no selection mechanism.

For owners who know which relationships matter, or who want every pair (`selection.marginals:
all_pairs`), as the NIST-challenge entries measured hand-picked marginals (PrivSyn section 6.1).
Budget: `one_way_share` (default 0.1) for the noisy 1-way marginals split evenly (ABSyn section
VI.B), nothing for scores (config refuses `selection.score_share`), and the rest for the declared
marginals, split by ABSyn Eq. 11 and measured in the `measurements` stage (with no declared
marginal, it goes to the 1-way marginals: `budget.measurement_plan`). Guarantee: only the 1-way
marginals are drawn here, each charged as drawn; the declared list is public configuration. A
declared marginal of one column is already a 1-way measurement and is not measured twice."""

import itertools
from typing import ClassVar, Literal

from pydantic import ConfigDict, ValidationInfo, model_validator

from ..config import SelectionSettings
from ..measure import clique_size, optimal_split
from . import Budget, Charge, Clique, MarginalOracle, Selection
from .privsyn import measure_one_way


class Settings(SelectionSettings):
    """Method manual's `selection:` block: `marginals`, the marginals to measure (`all_pairs`
    or a list of column lists), required, and no `score_share` (there are no scores)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # the marginals to measure: `all_pairs` or a list of column lists (required)
    marginals: Literal["all_pairs"] | list[list[str]] | None = None
    # the message of another method whose block sets `marginals`
    OWNED: ClassVar[str] = ("selection.marginals is for method manual; method {name} selects its "
                            "own marginals (remove it, or set method: manual)")

    @model_validator(mode="after")
    def _declared(self, info: ValidationInfo) -> "Settings":
        if self.marginals is None:
            raise ValueError("method manual measures the marginals you declare: set "
                             "selection.marginals to all_pairs or a list like "
                             "[[age, income], [sex, occupation]]")
        if self.score_share is not None:
            raise ValueError("method manual has no selection scores: remove "
                             "selection.score_share")
        columns = (info.context or {}).get("columns")
        unknown = sorted({a for c in (self.marginals if isinstance(self.marginals, list)
                                      else []) for a in c if a not in columns}) if columns else []
        if unknown:
            raise ValueError(f"selection.marginals names {unknown}, which are not declared "
                             f"columns ({sorted(columns)})")
        return self


def declared(domain: dict[str, int], settings: SelectionSettings) -> list[Clique]:
    """The declared marginals of two or more columns, in domain order, without repeats."""
    marginals = getattr(settings, "marginals", None)
    if marginals == "all_pairs":
        return [tuple(p) for p in itertools.combinations(domain, 2)]
    missing = sorted({a for c in marginals or [] for a in c if a not in domain})
    if missing:
        raise ValueError(f"selection.marginals names {missing}, which are not encoded columns "
                         f"({sorted(domain)}); fix the names in the dataset's entry")
    order = {a: i for i, a in enumerate(domain)}
    cliques = [tuple(sorted(set(c), key=order.get)) for c in marginals or []]
    return list(dict.fromkeys(c for c in cliques if len(c) >= 2))


def needed_cliques(domain: dict[str, int], settings: SelectionSettings | None = None) -> list[Clique]:
    """The declared marginals (and no other pair), which `marginals` computes in its scan."""
    return declared(domain, settings or SelectionSettings())


def select(domain: dict[str, int], oracle: MarginalOracle, budget: Budget,
           settings: SelectionSettings, charge: Charge) -> Selection:
    """The declared marginals, split by ABSyn Eq. 11, after the 1-way marginals.

    Args:
        domain: attribute -> number of codes, in the encoding plan's order.
        oracle: the exact marginals (private); read only by the 1-way measurements.
        budget: the run's selection budget (`one_way`, `score` = 0, `measure`).
        settings: the dataset's `selection:` block (`marginals`).
        charge: records each mechanism's spend in the ledger as it is drawn.

    Returns:
        The declared cliques with their rho, measured by the `measurements` stage.
    """
    one_way = measure_one_way(domain, oracle, budget.one_way, charge)
    cliques = declared(domain, settings)
    rhos = optimal_split(budget.measure + budget.score, [clique_size(c, domain) for c in cliques]) \
        if cliques else []
    return Selection("manual", one_way, tuple(cliques), dict(zip(cliques, rhos)),
                     details={"declared": [list(c) for c in cliques]})
