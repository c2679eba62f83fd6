"""Exact marginals of the encoded view, counted inside the dataset's scan engine (private zone).

The counts run where the rows are (DuckDB, or another scan engine: core/scans.py, whose store is the
DuckDB connection holding the marginal tables) and return aggregates: marginal count vectors, never
rows. `compute_marginals` computes many marginals in a few GROUPING SETS queries over one copy of
the codes and stores them in a private-zone table whose column names are all bookkeeping names
(`MarginalTable`), so no user column name (`n`, `gid`, `c0`, ...) can be confused with them;
`MarginalStore` reads them back as dense numpy count arrays shaped by each clique's domain (counting
missing ones on demand); `count_marginals` and `repeated_rows` count an encoded relation without
storing it.
"""

from contextlib import contextmanager
from dataclasses import dataclass

import duckdb
import numpy as np

from .domain import Clique
from .progress import due
from .scans import as_engine, store_of
from .sql import bookkeeping, ident, qualified, sql


BLOCK = 8


@dataclass(frozen=True)
class MarginalTable:
    """Where a set of exact marginals is stored, and how to find each clique in it.

    The table's columns are bookkeeping names only, never a user's: `c<i>` holds the code of
    `columns[i]` (NULL in the rows of a marginal without it), `gid` the clique's key (`key`),
    `n` the cell's count. A source column named `n`, `gid` or `c0` is just `columns[i]`."""

    table: str
    columns: tuple[str, ...]
    cliques: tuple[Clique, ...]

    def key(self, clique: Clique) -> str:
        """The clique's key in the `gid` column: the positions of its columns in `columns`,
        ascending, joined by commas (`"3,17"`; any order of the same columns, one key)."""
        return _key(self.columns, clique)


def _key(columns: tuple[str, ...] | list[str], clique: Clique) -> str:
    position = {c: i for i, c in enumerate(columns)}
    return ",".join(str(i) for i in sorted(position[c] for c in clique))


def _batches(columns: list[str], cliques: list[Clique]) -> list[list[Clique]]:
    """The cliques grouped for counting: one GROUPING SETS query per group, the group of a
    clique being the blocks of `BLOCK` consecutive columns it touches, so each query reads and
    groups few columns (all pairs of d columns: about (d / BLOCK)^2 / 2 queries of at most
    2 * BLOCK columns). DuckDB's cost of a grouping set grows with the width of the query,
    which made one query over every column slower than these batches, and GROUPING_ID's limit
    of 63 columns never applies (the key is built from one GROUPING flag a column)."""
    position = {c: i for i, c in enumerate(columns)}
    groups: dict[tuple[int, ...], list[Clique]] = {}
    for clique in dict.fromkeys(tuple(c) for c in cliques):
        blocks = tuple(sorted({position[c] // BLOCK for c in clique}))
        groups.setdefault(blocks, []).append(clique)
    return list(groups.values())


def _count_query(relation: str, columns: list[str], cliques: list[Clique]) -> str:
    """The GROUPING SETS query counting `cliques` of `relation` (user column names), its result
    in bookkeeping names only: `c<i>` (the codes of `columns[i]`), `gid` (the clique's key:
    the positions whose GROUPING flag is 0) and `n`."""
    position = {c: i for i, c in enumerate(columns)}
    used = sorted({position[c] for clique in cliques for c in clique})
    renames = ", ".join(f"{ident(columns[i])} AS c{i}" for i in used) or "NULL AS c"
    key = ("concat_ws(',', " + ", ".join(f"CASE WHEN GROUPING(c{i}) = 0 THEN '{i}' END"
                                          for i in used) + ")") if used else "''"
    sets = ", ".join("(" + ", ".join(f"c{position[c]}" for c in clique) + ")"
                     for clique in cliques)
    return sql("count_marginals", columns="".join(f"c{i}, " for i in used), key=key,
               renames=renames, source=relation, grouping_sets=sets)


def compute_marginals(con: duckdb.DuckDBPyConnection, view: str, table: str,
                      columns: list[str], cliques: list[Clique],
                      domain: dict[str, int] | None = None, log=None) -> MarginalTable:
    """Count the marginals of the encoded view, from one copy of its codes (`narrow_codes`), in
    a few GROUPING SETS queries (`_batches`), where the rows are.

    Args:
        con: the store's connection, or a scan engine over it.
        view: the encoded view (`encode_view_sql`).
        table: the private-zone table the counts are stored in (created).
        columns: the encoded columns, in the plan's order.
        cliques: the marginals to count.
        domain: attribute -> number of codes, for the narrowest code types (None: UINTEGER).
        log: a line when the counting starts and about ten as the queries end
            (`progress.due`): counts of marginals and queries only (the plan's), never a time.

    Returns:
        The stored table (`MarginalTable`), read by `MarginalStore`.
    """
    definitions = ", ".join(f"c{i} {_code_type((domain or {}).get(c))}"
                            for i, c in enumerate(columns))
    engine, store = as_engine(con), store_of(con)
    store.execute(sql("create_schema", schema=qualified(table.rsplit(".", 1)[0])))
    store.execute(sql("marginals", table=qualified(table), columns=definitions))
    batches = _batches(columns, cliques)
    total = sum(map(len, batches))
    say = log or (lambda line: None)
    say(f"marginals: counting {total} marginals in {len(batches)} queries")

    def count(relation: str) -> None:
        done = 0
        for k, batch in enumerate(batches, start=1):
            engine.append_counts(table, _count_query(relation, columns, batch))
            done += len(batch)
            if due(k, len(batches)):
                say(f"marginals: {done}/{total} marginals counted ({k}/{len(batches)} queries)")

    if not engine.copies:  # the engine groups the view in place (core/scans.py)
        count(engine.relation(view))
    else:
        with narrow_codes(store, qualified(view), columns, domain) as codes:
            count(codes)
    return MarginalTable(table, tuple(columns), tuple(tuple(cl) for cl in cliques))


@contextmanager
def narrow_codes(con: duckdb.DuckDBPyConnection, relation: str, columns: list[str],
                 domain: dict[str, int] | None):
    """The codes of an encoded relation copied once into a temporary table of the narrowest
    integer types (one byte a code for domains up to 256; spilled to disk by DuckDB under memory
    pressure); yields its quoted name and drops it afterwards (it never leaves the connection).
    Its columns keep the relation's names (it holds nothing else); its name is a bookkeeping
    name (`sql.bookkeeping`). GROUPING SETS run over it rather than over the encoding
    expressions, which DuckDB would evaluate once per set (docs/decisions/0007-asset-graph.md,
    "As implemented: counting the marginals")."""
    codes = ident(bookkeeping("codes"))
    casts = ", ".join(f"CAST({ident(c)} AS {_code_type((domain or {}).get(c))}) AS {ident(c)}"
                      for c in columns)
    con.execute(sql("encoded_codes", codes=codes, casts=casts, view=relation))
    try:
        yield codes
    finally:
        con.execute(sql("drop_table", table=codes))


def _code_type(size: int | None) -> str:
    """The narrowest unsigned integer type holding codes 0..size-1 (size unknown: UINTEGER)."""
    if size is not None and size <= 2 ** 8:
        return "UTINYINT"
    if size is not None and size <= 2 ** 16:
        return "USMALLINT"
    return "UINTEGER"


def _read_stored(con, marginals: MarginalTable, cliques: list[Clique],
                 domain: dict[str, int]) -> dict[Clique, np.ndarray]:
    """Dense count arrays of stored cliques (shape: domain[a] for a in clique), in one query
    reading only the columns they use."""
    position = {c: i for i, c in enumerate(marginals.columns)}
    used = sorted({position[c] for clique in cliques for c in clique})
    rows = con.execute(sql("read_marginals", columns="".join(f"c{i}, " for i in used),
                           table=qualified(marginals.table)),
                       [list(dict.fromkeys(marginals.key(cl) for cl in cliques))]).fetchnumpy()
    return _dense(rows, marginals.columns, cliques, domain)


class MarginalStore:
    """The marginal oracle of the selection and measurement stages: exact marginals of the
    encoded view, read from the table the `marginals` stage wrote. Cliques the table lacks (an
    adaptive method asking for a marginal outside what `required_cliques` precomputed) are
    counted on demand, all missing cliques of a request in one scan a batch (`_batches`), and
    appended to the table, so later requests and the `measurements` stage reuse them.
    `on_demand` lists them (public: clique names only)."""

    def __init__(self, con, view: str, table: str, columns: list[str],
                 domain: dict[str, int]):
        # `con`: a DuckDB connection or a scan engine (core/scans.py), whose store keeps `table`
        self.engine, self.con, self.view, self.domain = as_engine(con), store_of(con), view, domain
        self.table = MarginalTable(table, tuple(columns), ())
        self.stored = {str(g) for (g,) in self.con.execute(sql(
            "stored_marginals", table=qualified(table))).fetchall()}
        self.on_demand: list[Clique] = []

    def __call__(self, cliques: list[Clique]) -> dict[Clique, np.ndarray]:
        cliques = [tuple(c) for c in cliques]
        missing, keys = [], set()
        for c in dict.fromkeys(cliques):
            key = self.table.key(c)
            if key not in self.stored and key not in keys:
                missing.append(c)
                keys.add(key)
        if missing:
            columns = list(self.table.columns)
            for batch in _batches(columns, missing):
                self.engine.append_counts(self.table.table, _count_query(
                    self.engine.relation(self.view), columns, batch))
            self.stored |= keys
            self.on_demand += missing
        return _read_stored(self.con, self.table, cliques, self.domain)


def count_marginals(con: duckdb.DuckDBPyConnection, relation: str, columns: list[str],
                    cliques: list[Clique], domain: dict[str, int]) -> dict[Clique, np.ndarray]:
    """Dense count arrays of `cliques` of an encoded relation (a quoted table or view name or a
    subquery, its columns named `columns`), counted in a few GROUPING SETS scans (`_batches`)
    and returned without storing them (the checks count the synthetic table this way)."""
    cliques = [tuple(c) for c in cliques]
    out: dict[Clique, np.ndarray] = {}
    for batch in _batches(columns, cliques):
        rows = con.execute(_count_query(relation, columns, batch)).fetchnumpy()
        out.update(_dense(rows, tuple(columns), batch, domain))
    return {c: out[c] for c in cliques}


def _dense(rows: dict, columns: tuple[str, ...], cliques: list[Clique],
           domain: dict[str, int]) -> dict[Clique, np.ndarray]:
    """Scatter (c<i>..., gid, n) result rows into one dense count array per clique, its axes in
    the clique's order."""
    position = {c: i for i, c in enumerate(columns)}
    gid = np.asarray(rows["gid"]).astype(str)
    out = {}
    for clique in dict.fromkeys(cliques):
        mask = gid == _key(columns, clique)
        counts = np.zeros(tuple(domain[c] for c in clique), dtype=np.int64)
        index = tuple(np.asarray(rows[f"c{position[c]}"][mask], dtype=np.int64) for c in clique)
        np.add.at(counts, index, np.asarray(rows["n"][mask], dtype=np.int64))
        out[clique] = counts
    return out


def repeated_rows(con: duckdb.DuckDBPyConnection, relation: str, domain: dict[str, int]) -> int:
    """How many rows of an encoded relation repeat an earlier row (rows minus distinct rows),
    exactly, counted by DuckDB by sorting one key per row (`row_key`; sql/repeated_rows.sql):
    the sort spills to disk, so the count runs within the connection's memory_limit at any row
    count, where the count(DISTINCT) it replaces held a hash table that could not (100 million
    rows under a 1 GB limit ran out of memory). With the hashed key of a huge domain, two
    distinct rows of n share a hash with probability about n^2 / 2^65 (3e-6 at ten million
    rows)."""
    query = sql("repeated_rows", key=row_key(domain), source=relation)
    return int(con.execute(query).fetchone()[0])


def row_key(domain: dict[str, int]) -> str:
    """The SQL expression of one integer per row of encoded codes: the codes packed exactly
    (mixed radix, a BIGINT) while the domain has fewer than 2^63 cells, else their 64-bit hash."""
    cells = 1
    for size in domain.values():
        cells *= size
    if cells >= 2 ** 63:
        return "hash(" + ", ".join(ident(c) for c in domain) + ")"
    terms, stride = [], 1
    for column in reversed(list(domain)):
        terms.append(f"CAST({ident(column)} AS BIGINT) * {stride}")
        stride *= domain[column]
    return " + ".join(terms)
