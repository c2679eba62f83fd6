"""The checks of a family's two synthetic tables (docs/relational.md), read from the warehouse
(public: both tables are synthetic); `family_assets.py` reports them as Dagster asset checks of
the child's `synthetic` asset.

- `referential_integrity`: every synthetic foreign key resolves to exactly one synthetic parent.
- `children_per_parent`: the distribution of the children count per synthetic parent within a
  TVD tolerance of the parent's noisy measurement of its `children` attribute (public figures
  only: the noisy measurement and the synthetic tables).
"""

from dataclasses import dataclass

import numpy as np

from ..core.measure import Measurement
from ..core.sql import ident, qualified, sql
from ..evaluation.fidelity import noisy_distribution, tvd
from .tolerances import marginal_tolerance


# the registry: each family check's severity ("ERROR" or "WARN"); its description is the first
# line of its function's docstring. Adding one is its function here plus one line.
FAMILY_CHECKS = {
    "referential_integrity": "ERROR",
    "children_per_parent": "WARN",
}


def description(name: str) -> str:
    """The first line of the family check `name`'s docstring."""
    return (globals()[name].__doc__ or "").strip().splitlines()[0]


@dataclass(frozen=True)
class FamilyCheck:
    """One check's verdict and the figures it publishes."""

    name: str
    passed: bool
    metadata: dict


def referential_integrity(con, parents: str, children: str, key: str,
                          foreign_key: str) -> FamilyCheck:
    """Every synthetic foreign key resolves to exactly one synthetic parent.

    Counts the child rows whose foreign key is NULL or names no parent, and the repeated (or
    NULL) parent keys; both must be 0."""
    orphans, repeated = con.execute(sql(
        "check_orphan_keys", parents=qualified(parents), children=qualified(children),
        key=ident(key), fk=ident(foreign_key))).fetchone()
    return FamilyCheck("referential_integrity", bool(orphans == 0 and repeated == 0),
                       {"orphan_children": int(orphans), "repeated_parent_keys": int(repeated)})


def children_histogram(con, parents: str, children: str, key: str, foreign_key: str,
                       max_children: int) -> np.ndarray:
    """How many synthetic parents have 0..max_children children (a count above the bound is
    counted at the bound)."""
    found = np.zeros(max_children + 1, dtype=np.int64)
    for n, count in con.execute(sql(
            "check_children_counts", parents=qualified(parents), children=qualified(children),
            key=ident(key), fk=ident(foreign_key))).fetchall():
        found[min(int(n), max_children)] += int(count)
    return found


def children_measurement(measurements: list[Measurement], attribute: str) -> Measurement | None:
    """The parent's noisy 1-way measurement of `attribute`: its own, else summed out of the first
    (fine) measurement that holds it; None when none does."""
    for m in measurements:
        if m.clique == (attribute,) and m.groups is None:
            return m
    for m in measurements:
        if attribute in m.clique and m.groups is None:
            axis = tuple(i for i, a in enumerate(m.clique) if a != attribute)
            return Measurement((attribute,), m.noisy.sum(axis=axis), m.sigma, m.rho)
    return None


def children_per_parent(histogram: np.ndarray, code_of_value: np.ndarray,
                        measured: Measurement | None, noisy_total: float) -> FamilyCheck:
    """The children count per synthetic parent within a TVD tolerance of its noisy measurement.

    `histogram` counts the parents over values 0..max_children, `code_of_value` gives each
    value's code in the parent's encoding; the tolerance is `tolerances.marginal_tolerance`."""
    if measured is None:
        return FamilyCheck("children_per_parent", True, {"measured": False})
    counts = np.zeros(measured.noisy.size)
    np.add.at(counts, code_of_value, histogram)
    rows = int(histogram.sum())
    shares = counts / rows if rows else counts
    found = tvd(shares, noisy_distribution(measured))
    tolerance = marginal_tolerance(measured, noisy_total, rows)
    return FamilyCheck("children_per_parent", bool(found <= tolerance),
                       {"tvd": round(float(found), 5), "tolerance": round(float(tolerance), 5),
                        "synthetic_parents_by_children": [int(v) for v in histogram]})
