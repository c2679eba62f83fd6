"""Synthesis of a relation that keeps the join (docs/relational.md, "Synthesis that keeps the
join"): the parent is synthesized with its bounded children count (`children_column`), the child
over its columns joined with its parent's declared ones (`joined_columns`), reading k children a
family (`model_children`, decision 0024), and each synthetic parent's children are drawn from
the child's model given its values (`draw_children`).
One budget pays for the family (`split_budget`): parent-side counts are at d_in = 1, child-side
ones at d_in = k, each mechanism calibrated at d_in = 1 on the child's share over k squared and
charged its map at d_in = k (`family_spend`: zCDP group privacy, which for a Gaussian is
OpenDP's map at that d_in). Pure: numpy and frozen records."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from .budget import DatasetBudget
from .config import DEFAULT_BINS, ColumnSpec
from .preprocess import mechanisms
from .privacy import Spend
from .relational import CHILDREN, PARENT_PREFIX, family_sensitivity
from .select import Budget

# the children count gets one bin per value up to this many values, else this many bins
CHILDREN_BINS = 32
# the share of the family's run rho the child table gets by default
CHILD_SHARE = 0.5
# conditional draws: rounds of rejection, and the pool drawn per round per child row still needed
DRAW_ROUNDS = 8
OVERSAMPLE = 2.0


def children_column(max_children: int) -> dict:
    """The spec of the parent attribute `children` (its bounded children count): an integer on
    the public domain 0..`max_children`, one bin per value up to CHILDREN_BINS values, else
    CHILDREN_BINS bins."""
    return {"kind": "integer", "bounds": [0, int(max_children)],
            "bins": min(int(max_children) + 1, CHILDREN_BINS)}


def joined_columns(parent_columns: Mapping[str, ColumnSpec]) -> dict[str, ColumnSpec]:
    """The parent columns the child table is joined with, named as in the bounded child view
    (`parent_<column>`): those whose domain is declared (no preprocessing mechanism), so the
    child's encoding of each is the parent's and generation can match a child's parent values
    to a synthetic parent's codes. A column whose domain is learned (undeclared categories or
    bounds, PrivTree bins, density histograms) is not joined."""
    return {PARENT_PREFIX + name: spec for name, spec in parent_columns.items()
            if not mechanisms(name, spec)}


def child_problems(child_columns: Mapping[str, ColumnSpec], parent_columns: Mapping) -> list[str]:
    """What the child's columns break, one message per problem with its fix; empty when none:
    a column whose categories are discovered (a thresholded histogram, with an extra delta that
    the family charge does not scale), and a column named like a joined parent column."""
    problems = []
    for name, spec in child_columns.items():
        if any(t.mechanism == "discover" for t in mechanisms(name, spec)):
            problems.append(f"child column {name!r}: its categories would be discovered, which a "
                            "child table does not support yet: declare `categories:`")
        if name.startswith(PARENT_PREFIX) and name[len(PARENT_PREFIX):] in parent_columns:
            problems.append(f"child column {name!r} has the name the joined parent column "
                            f"{name[len(PARENT_PREFIX):]!r} takes: rename it in the source")
    return problems


def split_budget(family: DatasetBudget, side: DatasetBudget, share: float,
                 d_in: int = 1, *, child: bool = False) -> DatasetBudget:
    """The budget one side's stages run with: `side` (its own `DatasetBudget.of`, for the
    method's split between the stages) retargeted to `share` of the `family` run rho, divided by
    `family_sensitivity(d_in)` squared (1 on the parent side; on the child side `d_in` is the
    rows a family has in the view the child's stages read, `model_children`), so that every
    mechanism, calibrated at d_in = 1, adds the noise of that d_in at the charge `family_spend`
    makes. The family's extra delta (thresholding) goes to the parent side only (`child`
    False)."""
    if not 0 < share <= 1:
        raise ValueError(f"share must lie in (0, 1], got {share!r}")
    scale = family_sensitivity(d_in) ** 2
    run_rho = family.run_rho * share / scale
    f = run_rho / side.run_rho
    extra = 0.0 if child else family.run_delta_extra
    return replace(side, run_rho=run_rho, limit_rho=family.limit_rho, delta=family.delta,
                   run_delta_extra=extra, limit_delta_extra=family.limit_delta_extra,
                   preprocess=side.preprocess * f, count=side.count * f,
                   split=Budget(side.split.one_way * f, side.split.score * f,
                                side.split.measure * f))


def family_spend(spend: Spend, rows: int) -> Spend:
    """The charge of a mechanism run on a child view holding at most `rows` children a family
    (max_children, or k: `model_children`), whose `spend` its privacy map gave at d_in = 1: its
    map at d_in = `rows` (the rho times the square of `family_sensitivity(rows)`, the
    sensitivity scaled likewise). Refuses a spend with an extra delta (thresholding), whose
    delta does not scale so."""
    if spend.delta_extra > 0:
        raise ValueError(f"mechanism {spend.mechanism!r} spends an extra delta; a child table "
                         "does not support it")
    d_in = family_sensitivity(rows)
    return replace(spend, rho=spend.rho * d_in ** 2, sensitivity=spend.sensitivity * d_in)


def side_charge(charge: Callable, rows: int = 1, *, child: bool = False) -> Callable:
    """`charge(spend, **params)` for one side of a family: on the child side (`child`) each
    spend is charged its map at d_in = `rows`, the children a family has in the view its stages
    read (`family_spend`, which also refuses an extra delta, even at one child a family); on the
    parent side as it is. Both the notebook (`relational_api.FamilySide`) and the Dagster stages
    charge through it."""
    if not child:
        return charge

    def child_side(spend: Spend, **params) -> None:
        charge(family_spend(spend, rows), **params)
    return child_side


def ledger_budget(family: DatasetBudget, side: DatasetBudget, share: float, *,
                  child: bool = False) -> DatasetBudget:
    """What one side's stages reserve and charge in a ledger: `split_budget` at d_in = 1
    (its mechanisms, calibrated on `split_budget(..., d_in)`, are charged their map at that
    d_in by `family_spend`, which is exactly this, whatever the d_in). The family's extra delta
    stays on the parent side."""
    return split_budget(family, side, share, child=child)


def children_values(codes: int, max_children: int) -> np.ndarray:
    """The children count each code of the parent attribute `children` (`children_column`)
    stands for: the value itself with one bin per value, else the middle of its bin."""
    bins = min(int(max_children) + 1, CHILDREN_BINS)
    if bins == max_children + 1:
        values = np.arange(bins, dtype=float)
    else:
        width = max_children / bins
        values = (np.arange(bins) + 0.5) * width
    out = np.full(int(codes), float(max_children))  # a code past the bins: the bound
    out[:min(codes, bins)] = values[:min(codes, bins)]
    return out


def model_children(children: np.ndarray, max_children: int, rho: float,
                   sizes: Sequence[int]) -> int:
    """How many children of each family the child's stages read (k, 1..max_children): the k
    that minimizes the expected error of a child marginal under a stated model, from public
    facts only (docs/relational.md, "Children per family in the child's model").

    A child's mechanisms run at d_in = k: a Gaussian count of a marginal of m cells then has
    sigma = k sigma_1 in each cell (sigma_1 = sqrt(J / (2 rho)), the child's rho spread over J
    marginals at d_in = 1), over the n_k = sum over parents of min(children, k) rows read. Its
    expected L1 error as a share of n_k is about m k sigma_1 / n_k (noise) plus
    sqrt(m (1/n_k - 1/n_max)) (reading n_k of the n_max bounded children: sampling, with the
    finite-population correction; zero at k = max_children). Small k wins when the noise
    dominates (small rho, large max_children), k = max_children when the data are plentiful.

    Args:
        children: the noisy count of parents at each code of `children` (the parent's
            consistent measurements: charged already, so this is post-processing).
        max_children: the public bound.
        rho: the child's share of the family's run rho (at d_in = 1).
        sizes: the domain size of each attribute of the child's model (its columns and the
            joined parent columns): J is their number, m the median cells of their pairs.

    Returns:
        k; 1 when the counts show no child at all.
    """
    counts = np.clip(np.asarray(children, dtype=float), 0.0, None)
    values = children_values(counts.size, max_children)
    sizes = [int(s) for s in sizes]
    if len(sizes) >= 2:
        m = float(np.median([a * b for i, a in enumerate(sizes) for b in sizes[i + 1:]]))
    else:
        m = float(sizes[0]) if sizes else 1.0
    sigma_1 = np.sqrt(max(len(sizes), 1) / (2.0 * rho)) if rho > 0 else np.inf
    n_max = float(counts @ np.minimum(values, max_children))
    if n_max <= 0 or not np.isfinite(sigma_1):
        return 1
    best, best_error = 1, np.inf
    for k in range(1, int(max_children) + 1):
        n_k = float(counts @ np.minimum(values, k))
        if n_k <= 0:
            continue
        error = m * k * sigma_1 / n_k + np.sqrt(max(m * (1.0 / n_k - 1.0 / n_max), 0.0))
        if error < best_error - 1e-12:
            best, best_error = k, error
    return best


def model_sizes(columns: Mapping[str, ColumnSpec]) -> list[int]:
    """Each column's domain size as its declaration gives it, before any data is read (the
    input `model_children` needs): a categorical's listed values and one more code (other or
    NULL), a boolean's three codes, a binned column's `bins` (its default when unset)."""
    sizes = []
    for spec in columns.values():
        if spec.kind == "categorical" and isinstance(spec.categories, list):
            sizes.append(len(spec.categories) + 1)
        elif spec.kind == "boolean":
            sizes.append(3)
        else:
            sizes.append(int(spec.bins or DEFAULT_BINS))
    return sizes


def children_to_read(measurements: Sequence, max_children: int, rho: float,
                     columns: Mapping[str, ColumnSpec]) -> int:
    """`model_children` for a child whose model has `columns` (`model_sizes`) and `rho` (its
    share of the family's run rho), from the parent's consistent `measurements` (the noisy
    histogram of `children`: post-processing); `max_children` when they hold none."""
    histogram = children_histogram(measurements, CHILDREN)
    if histogram is None:
        return int(max_children)
    return model_children(histogram, max_children, rho, model_sizes(columns))


def children_histogram(measurements: Sequence, attribute: str) -> np.ndarray | None:
    """The noisy count at each code of `attribute` from a side's consistent measurements: its
    1-way marginal, else a clique holding it summed over the others; None when none holds it
    at full resolution."""
    holding = [m for m in measurements if attribute in m.clique and m.groups is None]
    if not holding:
        return None
    found = min(holding, key=lambda m: len(m.clique))
    axis = found.clique.index(attribute)
    others = tuple(i for i in range(found.noisy.ndim) if i != axis)
    return np.asarray(found.noisy, dtype=float).sum(axis=others) if others else np.asarray(
        found.noisy, dtype=float)


def draw_children(parents: Mapping[str, np.ndarray], counts: np.ndarray,
                  join: Sequence[tuple[str, str]], sizes: Sequence[int],
                  draw: Callable[[int, int], Mapping[str, np.ndarray]],
                  rng: np.random.Generator,
                  rounds: int = DRAW_ROUNDS) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Exactly `counts[i]` child rows for each synthetic parent i, drawn from the child's model
    given parent i's joined values, by rejection: the child's model has no conditional
    sampler, so rows are drawn from its joint distribution (`draw(n, round)`: n rows of codes)
    and a row is kept for a parent whose joined codes equal the row's (an exact draw from the
    conditional distribution). Rounds repeat, each drawing OVERSAMPLE rows per row still
    needed, until every parent has its children or `rounds` have run; the children still
    missing then (a combination of parent values the child's model gives almost no mass) are
    rows of the last round whatever their joined values (the approximation: the child's marginal
    instead of its conditional), and every child's joined codes are set to its parent's.

    Args:
        parents: the synthetic parents' codes (at least the parent side of `join`).
        counts: each parent's children count (integers >= 0).
        join: (parent attribute, child attribute holding it) pairs.
        sizes: the domain size of each joined attribute, in `join` order.
        draw: n, round -> n rows of the child's codes (every child attribute).
        rng: picks the rows that fill missing children.

    Returns:
        The child rows' codes, grouped by parent in parent order, and each row's parent index.
    """
    counts = np.asarray(counts, dtype=np.int64)
    n_parents = counts.size
    owner = np.repeat(np.arange(n_parents), counts)
    dims = tuple(int(s) for s in sizes) or (1,)
    cells = int(np.prod(dims))

    def key(codes: Mapping[str, np.ndarray], names: list[str], n: int) -> np.ndarray:
        if not names:
            return np.zeros(n, dtype=np.int64)
        return np.ravel_multi_index(tuple(np.asarray(codes[a], dtype=np.int64) for a in names),
                                    dims)

    parent_key = key(parents, [p for p, _ in join], n_parents)
    need = np.bincount(parent_key[owner], minlength=cells) if owner.size else np.zeros(
        cells, dtype=np.int64)
    kept: list[dict[str, np.ndarray]] = []
    kept_keys: list[np.ndarray] = []
    last = None
    for r in range(rounds):
        left = int(need.sum())
        if left == 0:
            break
        pool = {a: np.asarray(v) for a, v in draw(int(OVERSAMPLE * left) + 16, r).items()}
        last = pool
        pool_key = key(pool, [c for _, c in join], len(next(iter(pool.values()))))
        order = np.argsort(pool_key, kind="stable")
        sorted_key = pool_key[order]
        first = np.searchsorted(sorted_key, sorted_key, side="left")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size) - first
        take = rank < need[pool_key]
        kept.append({a: v[take] for a, v in pool.items()})
        kept_keys.append(pool_key[take])
        need -= np.bincount(pool_key[take], minlength=cells)
    if need.sum() > 0:  # the approximation: the child's marginal for the rest
        if last is None:
            last = {a: np.asarray(v) for a, v in draw(int(need.sum()), rounds).items()}
        size = len(next(iter(last.values())))
        pick = rng.integers(0, size, int(need.sum()))
        kept.append({a: v[pick] for a, v in last.items()})
        kept_keys.append(np.repeat(np.arange(cells), need))
    if not kept:  # no child at all: the attributes, with no row
        return {a: np.asarray(v)[:0] for a, v in draw(1, 0).items()}, owner
    rows = {a: np.concatenate([k[a] for k in kept]) for a in kept[0]}
    rows_key = np.concatenate(kept_keys)
    # the i-th row of a cell goes to the i-th child slot of that cell, slots in parent order
    slots = np.argsort(parent_key[owner], kind="stable")
    by_key = np.argsort(rows_key, kind="stable")
    placed = np.empty(owner.size, dtype=np.int64)
    placed[slots] = by_key
    children = {a: v[placed] for a, v in rows.items()}
    for p, c in join:  # a child's joined values are its parent's
        children[c] = np.asarray(parents[p])[owner].astype(children[c].dtype, copy=False)
    return children, owner


def synthetic_keys(n: int) -> np.ndarray:
    """New keys 1..n for n synthetic rows: no real key is ever published."""
    return np.arange(1, int(n) + 1, dtype=np.int64)
