"""Encoded tables, the common input of every owner-only metric.

Everything in the owner's report works on ENCODED tables: integer codes 0..k-1 per column, a
`domain` mapping each column to k (a pandas DataFrame or a mapping column -> codes). `ordinal`
names the columns whose codes are ordered; a mapping column -> o says only the first o codes are
ordered (a nullable binned column: bins, then the null code). Marginals up to `MAX_DENSE_CELLS`
cells are counted densely (`dense`), larger ones sparsely over the cells that occur."""

import math
from collections.abc import Collection, Mapping, Sequence

from typing import TYPE_CHECKING, Union

import numpy as np

if TYPE_CHECKING:  # a DataFrame works as it is: pandas loads only where one is made
    import pandas as pd

Table = Union["pd.DataFrame", Mapping[str, np.ndarray]]
Ordinal = Collection[str] | Mapping[str, int]

MAX_DENSE_CELLS = 1 << 22  # larger marginals are counted sparsely (np.unique)


def dense(attrs: Sequence[str], domain: Mapping[str, int]) -> bool:
    """Whether the marginal over `attrs` is small enough (`MAX_DENSE_CELLS`) to count densely."""
    return math.prod(domain[a] for a in attrs) <= MAX_DENSE_CELLS


def encoded(table: Table, domain: Mapping[str, int], name: str = "table") -> dict[str, np.ndarray]:
    """The domain's columns of `table` as int64 code arrays, checked to lie in 0..k-1."""
    out: dict[str, np.ndarray] = {}
    lengths = set()
    for column, k in domain.items():
        if column not in table:
            raise ValueError(f"{name} has no column {column!r} (its domain lists it)")
        values = np.asarray(table[column])
        if values.dtype.kind not in "iub":
            if values.dtype.kind == "f" and np.all(np.isfinite(values)) \
                    and np.all(values == np.round(values)):
                values = values.astype(np.int64)
            else:
                raise ValueError(f"{name}[{column!r}] must hold integer codes, not {values.dtype}")
        values = values.astype(np.int64, copy=False)
        if values.size and (values.min() < 0 or values.max() >= k):
            raise ValueError(f"{name}[{column!r}] has codes outside 0..{k - 1} "
                             f"(min {values.min()}, max {values.max()})")
        out[column] = values
        lengths.add(values.shape[0])
    if len(lengths) > 1:
        raise ValueError(f"{name}: columns of different lengths {sorted(lengths)}")
    return out

def rows_of(codes: Mapping[str, np.ndarray]) -> int:
    """The number of rows of an encoded table (0 without columns)."""
    return next(iter(codes.values())).shape[0] if codes else 0

def cell_index(codes: Mapping[str, np.ndarray], attrs: Sequence[str], domain: Mapping[str, int]) -> np.ndarray:
    """Row-major cell index of each row in the marginal over `attrs`."""
    if math.prod(domain[a] for a in attrs) >= 2**62:
        raise ValueError(f"marginal {list(attrs)} has too many cells to index")
    key = np.zeros(rows_of(codes), dtype=np.int64)
    for a in attrs:
        key = key * domain[a] + codes[a]
    return key

def distribution(codes: Mapping[str, np.ndarray], attrs: Sequence[str],
                 domain: Mapping[str, int]) -> np.ndarray:
    """Normalized marginal over `attrs`, shaped by their domain sizes."""
    shape = tuple(domain[a] for a in attrs)
    n = rows_of(codes)
    counts = np.bincount(cell_index(codes, attrs, domain), minlength=math.prod(shape))
    return (counts / n).reshape(shape)

def require_rows(codes: Mapping[str, np.ndarray], name: str) -> None:
    """Raise ValueError naming the table when it has no rows."""
    if rows_of(codes) == 0:
        raise ValueError(f"{name} has no rows")

def ordered_codes(ordinal: Ordinal, domain: Mapping[str, int]) -> dict[str, int]:
    """Column -> number of leading ordered codes (0 for categorical columns)."""
    unknown = [c for c in ordinal if c not in domain]
    if unknown:
        raise ValueError(f"ordinal names columns not in the domain: {unknown}")
    if isinstance(ordinal, Mapping):
        out = {c: int(ordinal.get(c, 0)) for c in domain}
    else:
        out = {c: (domain[c] if c in ordinal else 0) for c in domain}
    for c, o in out.items():
        if not 0 <= o <= domain[c]:
            raise ValueError(f"ordinal[{c!r}] = {o} is outside 0..{domain[c]}")
    return out

