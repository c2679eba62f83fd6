"""Query error: the benchmark paper's 3-way range queries, on encoded tables (`tables`).

Implements Chen et al., section 8.3: E_r |q_r(D_syn) - q_r(D_ref)| over queries q_r on 3-way
marginals, each the fraction of rows in a box (a range on an ordered column, a single value on a
categorical one), so the error is on the [0, 1] scale. `query_error` also reports the mean 3-way
marginal TVD over the same triples (ABSyn section VIII). The draws of triples and boxes are
data-independent. The choices where the paper is silent:
docs/decisions/0022-evaluation-metrics.md, "As implemented: query error"."""

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .fidelity import table_tvd, tvd
from .tables import (Ordinal, Table, dense, distribution, encoded, ordered_codes, require_rows,
                     rows_of)

Triple = tuple[str, str, str]

DEFAULT_TRIPLES = 200
DEFAULT_QUERIES_PER_TRIPLE = 64
MAX_EXHAUSTIVE_QUERIES = 1_000_000   # boxes per triple when queries_per_triple=None


def triples(domain: Mapping[str, int], count: int = DEFAULT_TRIPLES, seed: int = 0) -> list[Triple]:
    """All triples of distinct columns (domain order within a triple) when there are at most
    `count`, else `count` distinct ones drawn uniformly with `np.random.default_rng(seed)`; sorted
    by column position."""
    columns = list(domain)
    d = len(columns)
    total = math.comb(d, 3)
    if total <= count:
        return [tuple(t) for t in itertools.combinations(columns, 3)]
    rng = np.random.default_rng(seed)
    if total <= 4 * count:
        every = list(itertools.combinations(range(d), 3))
        chosen = sorted(every[i] for i in rng.choice(total, size=count, replace=False))
    else:  # rejection: each draw is a new triple with probability >= 3/4
        seen: set[tuple[int, ...]] = set()
        while len(seen) < count:
            seen.add(tuple(sorted(int(i) for i in rng.choice(d, size=3, replace=False))))
        chosen = sorted(seen)
    return [tuple(columns[i] for i in t) for t in chosen]



def column_query_set(k: int, ordered: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of every query part on one column: each range [lo, hi] of its first `ordered` codes,
    then each later code as a point [v, v]. A categorical column (ordered = 0) has k points."""
    lo, hi = np.triu_indices(ordered)
    points = np.arange(ordered, k)
    return (np.concatenate([lo, points]).astype(np.int64),
            np.concatenate([hi, points]).astype(np.int64))


@dataclass(frozen=True, eq=False)
class TripleQueries:
    """Box queries on one 3-way marginal: row i counts the rows with lo[i, j] <= code_j <= hi[i, j]
    for the three columns j of `attrs` (bounds inclusive)."""

    attrs: Triple
    lo: np.ndarray  # (queries, 3) int64
    hi: np.ndarray


def box_queries(domain: Mapping[str, int], triples: Sequence[Triple], ordinal: Ordinal = (),
                queries_per_triple: int | None = DEFAULT_QUERIES_PER_TRIPLE,
                seed: int = 0) -> list[TripleQueries]:
    """The query workload: per triple, `queries_per_triple` boxes, each column's part uniform
    over its query set (`column_query_set`); None enumerates every box."""
    ordered = ordered_codes(ordinal, domain)
    sets = {c: column_query_set(domain[c], ordered[c]) for c in {a for t in triples for a in t}}
    rng = np.random.default_rng(seed)
    out = []
    for t in triples:
        parts = [sets[a] for a in t]
        if queries_per_triple is None:
            size = math.prod(p[0].size for p in parts)
            if size > MAX_EXHAUSTIVE_QUERIES:
                raise ValueError(f"triple {t} has {size:,} boxes, above {MAX_EXHAUSTIVE_QUERIES:,}:"
                                 " sample them (queries_per_triple=N)")
            grid = np.meshgrid(*[np.arange(p[0].size) for p in parts], indexing="ij")
            picks = [g.ravel() for g in grid]
        else:
            picks = [rng.integers(0, p[0].size, size=queries_per_triple) for p in parts]
        lo = np.stack([p[0][i] for p, i in zip(parts, picks)], axis=1)
        hi = np.stack([p[1][i] for p, i in zip(parts, picks)], axis=1)
        out.append(TripleQueries(tuple(t), lo, hi))
    return out


def _box_sums(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sum of a 3-d array over each box [lo, hi] (inclusive), by 3-d prefix sums."""
    prefix = np.zeros(tuple(s + 1 for s in values.shape))
    prefix[1:, 1:, 1:] = values.cumsum(0).cumsum(1).cumsum(2)
    total = np.zeros(lo.shape[0])
    for corner in itertools.product((0, 1), repeat=3):
        index = tuple(np.where(c, hi[:, j] + 1, lo[:, j]) for j, c in enumerate(corner))
        total += (-1) ** (3 - sum(corner)) * prefix[index]
    return total


def answer_queries(table: Table, domain: Mapping[str, int], queries: TripleQueries) -> np.ndarray:
    """The fraction of `table`'s rows inside each box of `queries`."""
    codes = encoded(table, domain)
    require_rows(codes, "table")
    return _answers(codes, domain, queries)


def _answers(codes: Mapping[str, np.ndarray], domain: Mapping[str, int],
             queries: TripleQueries) -> np.ndarray:
    if dense(queries.attrs, domain):
        return _box_sums(distribution(codes, queries.attrs, domain), queries.lo, queries.hi)
    inside = np.ones((queries.lo.shape[0], rows_of(codes)), dtype=bool)  # huge marginal: row masks
    for j, a in enumerate(queries.attrs):
        x = codes[a][None, :]
        inside &= (x >= queries.lo[:, j:j + 1]) & (x <= queries.hi[:, j:j + 1])
    return inside.mean(axis=1)


@dataclass(frozen=True)
class QueryError:
    """3-way metrics of a synthetic table against a reference table."""

    query_error: float                 # mean |q(synthetic) - q(reference)| over all queries
    tvd3: float                        # mean 3-way marginal TVD over the triples
    queries: int                       # number of queries answered
    per_triple: dict[Triple, tuple[float, float]]  # triple -> (mean query error, TVD)


def query_error(real: Table, synthetic: Table, domain: Mapping[str, int], triples: Sequence[Triple],
                queries_per_triple: int | None = DEFAULT_QUERIES_PER_TRIPLE, seed: int = 0, *,
                ordinal: Ordinal = ()) -> QueryError:
    """The paper's query error (§8.3) of `synthetic` against `real` on the workload
    `box_queries(domain, triples, ordinal, queries_per_triple, seed)`, and the mean 3-way TVD."""
    if not triples:
        raise ValueError("no triples: the query error needs at least three columns")
    r, s = encoded(real, domain, "real"), encoded(synthetic, domain, "synthetic")
    require_rows(r, "real")
    require_rows(s, "synthetic")
    workload = box_queries(domain, triples, ordinal, queries_per_triple, seed)
    per_triple: dict[Triple, tuple[float, float]] = {}
    errors = []
    for q in workload:
        if dense(q.attrs, domain):
            p, p_real = distribution(s, q.attrs, domain), distribution(r, q.attrs, domain)
            err = np.abs(_box_sums(p - p_real, q.lo, q.hi))
            distance = tvd(p, p_real)
        else:
            err = np.abs(_answers(s, domain, q) - _answers(r, domain, q))
            distance = table_tvd(s, r, q.attrs, domain)
        errors.append(err)
        per_triple[q.attrs] = (float(err.mean()), distance)
    every = np.concatenate(errors)
    return QueryError(float(every.mean()), float(np.mean([v[1] for v in per_triple.values()])),
                      int(every.size), per_triple)
