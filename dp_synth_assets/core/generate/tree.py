"""Junction trees of clique distributions (`CliqueTree`), and vectorized sampling from them.

Both PGM engines end in a `CliqueTree`: the maximal cliques of a triangulated graph in sampling
order, each with its separator and a probability table. `sample` draws a root clique from its
table and every other clique's new attributes conditioned on the separator values already drawn
(exact forward sampling for a PGM; the combination step for independently fitted cliques).
Draws are systematic within each separator group and stratified by earlier attributes; why and
how: docs/decisions/0020-sampling.md. `sample_chunks`, `dumps` and `loads` serve both engines'
contract (see `generate`)."""

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..domain import Clique

STRATA = 16  # attributes drawn earlier that order the rows of a separator group (0020-sampling.md)
TIE_BITS = 20  # random low bits of the rows' sort key (ties between equal strata at random)
KEY_LIMIT = 2 ** (62 - TIE_BITS)  # the group and the strata's codes share one int64 key below


@dataclass(frozen=True)
class CliqueTree:
    """Maximal cliques in sampling order, each with its separator and its probability table."""

    domain: dict[str, int]
    cliques: tuple[Clique, ...]  # sampling order: every clique after its parent
    separators: tuple[Clique, ...]  # shared with the parent (empty: a root)
    tables: tuple[np.ndarray, ...]  # probabilities over each clique (axes in clique order)

    def to_bytes(self) -> bytes:
        """The model as one compressed .npz (its tables and a JSON header)."""
        import io
        import json

        arrays = {f"table_{i}": t for i, t in enumerate(self.tables)}
        meta = {"domain": self.domain, "cliques": [list(c) for c in self.cliques],
                "separators": [list(s) for s in self.separators]}
        buffer = io.BytesIO()
        np.savez_compressed(buffer, meta=np.array(json.dumps(meta)), **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> "CliqueTree":
        import io
        import json

        with np.load(io.BytesIO(data)) as arrays:
            meta = json.loads(str(arrays["meta"]))
            tables = tuple(arrays[f"table_{i}"] for i in range(len(meta["cliques"])))
        return cls({a: int(k) for a, k in meta["domain"].items()},
                   tuple(tuple(c) for c in meta["cliques"]),
                   tuple(tuple(s) for s in meta["separators"]), tables)

    @property
    def cells(self) -> int:
        return int(sum(t.size for t in self.tables))


def elimination_cliques(domain: dict[str, int], cliques: list[Clique]) -> list[frozenset]:
    """The maximal cliques of the chordal graph that greedy elimination makes of the graph of
    `cliques` (every attribute of `domain` a vertex, every clique's attributes joined).

    Greedy order: at each step the vertex whose elimination clique (itself and its remaining
    neighbours) has the fewest cells goes next, ties to the first in domain order; eliminating
    it joins its remaining neighbours (the triangulation's fill-in). When the graph is already a
    tree (connected, acyclic) nothing is eliminated: it is chordal, its edges are its maximal
    cliques. Of a graph triangulated by an elimination order, the maximal cliques are exactly
    the elimination cliques contained in no other one, so no clique search is needed. Works on
    sets: each vertex's neighbours as a bit mask."""
    names = list(domain)
    index = {a: i for i, a in enumerate(names)}
    neighbours = [0] * len(names)
    edges = 0
    for c in cliques:
        mask = sum(1 << index[a] for a in set(c))
        for a in set(c):
            neighbours[index[a]] |= mask
    for i in range(len(names)):
        neighbours[i] &= ~(1 << i)
        edges += neighbours[i].bit_count()
    edges //= 2
    if names and edges == len(names) - 1 and edges > 0 and _connected(neighbours):
        return [frozenset((names[i], names[j])) for i in range(len(names))
                for j in range(i + 1, len(names)) if neighbours[i] >> j & 1]
    cost_of: dict[int, int] = {}

    def cost(mask: int) -> int:  # the cells of a set of attributes
        if mask not in cost_of:
            cost_of[mask] = math.prod(domain[names[i]] for i in range(len(names)) if mask >> i & 1)
        return cost_of[mask]

    unmarked = list(range(len(names)))  # ties go to the first attribute in domain order
    made: list[int] = []
    for _ in range(len(names)):
        best = min(unmarked, key=lambda i: cost(neighbours[i] | 1 << i))
        variables = neighbours[best] | 1 << best
        unmarked.remove(best)
        for j in unmarked:
            if variables >> j & 1:
                neighbours[j] = (neighbours[j] | variables) & ~(1 << best) & ~(1 << j)
        made.append(variables)
    maximal = [m for m in made if not any(m != o and m & o == m for o in made)]
    return [frozenset(names[i] for i in range(len(names)) if m >> i & 1)
            for m in dict.fromkeys(maximal)]


def _connected(neighbours: list[int]) -> bool:
    """Whether the graph of the bit-mask adjacency lists is connected."""
    seen, frontier = 1, 1
    while frontier:
        reach = 0
        for i in range(len(neighbours)):
            if frontier >> i & 1:
                reach |= neighbours[i]
        frontier = reach & ~seen
        seen |= frontier
    return seen == (1 << len(neighbours)) - 1


def model_cells(domain: dict[str, int], cliques: list[Clique]) -> int:
    """The cells of the junction tree of `cliques` (all its maximal cliques)."""
    return sum(math.prod(domain[a] for a in c) for c in elimination_cliques(domain, cliques))


def junction_tree(domain: dict[str, int], cliques: list[Clique]
                  ) -> tuple[list[Clique], list[Clique], list[int]]:
    """The junction tree of `cliques`: the maximal cliques of their triangulated graph
    (`elimination_cliques`, attributes in domain order), joined by a maximum-weight spanning
    tree of the graph whose edges link cliques sharing attributes, weighted by how many they
    share (Kruskal's, networkx: ties to the pair of cliques first in sorted order), which
    satisfies the running intersection property because the graph is chordal. Returned in
    breadth-first order from the largest clique of each connected component (ties to the
    smaller tuple), with each clique's separator (the attributes it shares with its parent,
    in its own order) and parent index (-1 for a root). Attributes in no clique become
    singleton roots. Pure: numpy and networkx."""
    import networkx as nx

    position = {a: i for i, a in enumerate(domain)}
    covered = {a for c in cliques for a in c}
    full = [tuple(c) for c in cliques] + [(a,) for a in domain if a not in covered]
    maximal = sorted(tuple(sorted(c, key=position.__getitem__))
                     for c in elimination_cliques(domain, full))
    graph = nx.Graph()
    graph.add_nodes_from(maximal)
    for i, c1 in enumerate(maximal):
        for c2 in maximal[i + 1:]:
            shared = len(set(c1) & set(c2))
            if shared:
                graph.add_edge(c1, c2, weight=shared)
    jtree = nx.maximum_spanning_tree(graph)
    size = lambda c: math.prod(domain[a] for a in c)  # noqa: E731
    order, separators, parents = [], [], []
    seen: set = set()
    for root in sorted(jtree.nodes, key=lambda c: (-size(c), c)):
        if root in seen:
            continue
        seen.add(root)
        queue = deque([(root, -1)])
        while queue:
            node, parent = queue.popleft()
            index = len(order)
            order.append(tuple(node))
            parents.append(parent)
            separators.append(() if parent < 0 else
                              tuple(a for a in node if a in set(order[parent])))
            for child in sorted(jtree.neighbors(node), key=lambda c: (-size(c), c)):
                if child not in seen:
                    seen.add(child)
                    queue.append((child, index))
    return order, separators, parents


def bit_reversed_ranks(position: np.ndarray, size: np.ndarray) -> np.ndarray:
    """For rows sorted by group (`position`: each row's index within its group, `size`: the
    size m of its group), each row's rank within its group by the bit-reversed (van der Corput)
    value of its position: a permutation of 0..m-1 per group under which every run of
    consecutive positions gets points spread evenly over the group's range.

    No sort: position q comes before p exactly when, at the lowest bit where they differ, q has
    0 and p has 1; for each bit j set in p, the q < m sharing p's bits below j and having 0 at
    j number ((m - 1 - (p mod 2^j)) >> (j + 1)) + 1, and the rank is their sum over j."""
    bits = max(int(position.max()).bit_length(), 1) if position.size else 1
    dtype = np.int32 if int(size.max(initial=0)) < 2 ** 31 else np.int64
    p, last = position.astype(dtype), size.astype(dtype) - 1
    ranks = np.zeros(p.size, dtype=dtype)
    term = np.empty_like(p)
    for j in range(bits):
        np.bitwise_and(p, (1 << j) - 1, out=term)  # p mod 2^j
        np.subtract(last, term, out=term)
        np.right_shift(term, j + 1, out=term)
        term += 1
        term *= (p >> j) & 1  # only the bits set in p count
        ranks += term
    return ranks


def conditional_draw(table: np.ndarray, group: np.ndarray, rng: np.random.Generator,
                     strata: list[np.ndarray] | None = None) -> np.ndarray:
    """For each row, a column index of `table` (shape groups x choices, rows of non-negative
    weights) drawn from that row's distribution given the row's `group`, systematically within
    each group and stratified by `strata` (code arrays of the rows, the first the main key; see
    the 0020-sampling.md). A group whose weights are all zero draws from the column totals."""
    groups, choices = table.shape
    n = group.size
    mass = table.sum(axis=1, keepdims=True)
    fallback = table.sum(axis=0)
    fallback = fallback / fallback.sum() if fallback.sum() > 0 else np.full(choices, 1.0 / choices)
    cond = np.where(mass > 0, table / np.where(mass > 0, mass, 1.0), fallback[None, :])
    cdf = np.cumsum(cond, axis=1)
    cdf /= cdf[:, -1:]  # exactly 1 at the end of every row
    # one increasing array: group g's cdf shifted by g, so a single searchsorted serves all groups
    shifted = (cdf + np.arange(groups, dtype=np.float64)[:, None]).ravel()
    sizes = np.bincount(group, minlength=groups)
    starts = np.cumsum(sizes) - sizes
    if strata:
        # by group, then by the strata (the first the main key) while their codes fit one int64
        # key with the group's, ties at random
        key, span = group.astype(np.int64), max(groups, 1)
        for codes in strata:
            size = int(codes.max()) + 1 if codes.size else 1
            if span * size >= KEY_LIMIT:
                break
            key, span = key * size + codes, span * size
        # ties at random: TIE_BITS random low bits (one int64 argsort, 5x faster than lexsort)
        order = np.argsort((key << TIE_BITS) | rng.integers(0, 1 << TIE_BITS, n))
        g_sorted = group[order]
        size_sorted = sizes[g_sorted]
        point = bit_reversed_ranks(np.arange(n) - starts[g_sorted], size_sorted)
        # a random cyclic shift per group: every row's point is uniform over its group's points
        point += rng.integers(0, np.maximum(sizes, 1))[g_sorted]
        point -= size_sorted * (point >= size_sorted)  # mod the size (the sum is below twice it)
    else:
        # by group, random within a group: one float sort key (group + U[0,1)) sorts 6x faster
        # than np.lexsort on two keys; groups stay below 2^31, so U keeps 21 bits of resolution
        order = np.argsort(group + rng.random(n))
        g_sorted = group[order]
        size_sorted = sizes[g_sorted]
        point = np.arange(n) - starts[g_sorted]
    u = point + rng.random(groups)[g_sorted]
    u /= size_sorted
    u += g_sorted
    pick = np.searchsorted(shifted, u, side="right")
    pick -= g_sorted * choices
    out = np.empty(n, dtype=np.int64)
    out[order] = np.clip(pick, 0, choices - 1)
    return out


def strata_keys(codes: dict[str, np.ndarray], separator: tuple, rng: np.random.Generator
                ) -> list[np.ndarray]:
    """The rows' codes of at most `STRATA` attributes drawn so far and not in `separator`, in a
    random order (0020-sampling.md)."""
    drawn = [a for a in codes if a not in separator]
    return [codes[drawn[i]] for i in rng.permutation(len(drawn))[:STRATA]]


def sample(tree: CliqueTree, rows: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """`rows` rows as code arrays per attribute (in the tree's domain order)."""
    codes: dict[str, np.ndarray] = {}
    for clique, separator, table in zip(tree.cliques, tree.separators, tree.tables):
        new = [a for a in clique if a not in separator]
        if not new:
            continue
        axes = [clique.index(a) for a in (*separator, *new)]
        sep_shape = [tree.domain[a] for a in separator]
        new_shape = [tree.domain[a] for a in new]
        flat = np.transpose(np.asarray(table, dtype=np.float64), axes).reshape(
            int(np.prod(sep_shape)) if separator else 1, int(np.prod(new_shape)))
        group = (np.ravel_multi_index([codes[a] for a in separator], sep_shape) if separator
                 else np.zeros(rows, dtype=np.int64))
        drawn = conditional_draw(np.clip(flat, 0.0, None), group, rng,
                                 strata_keys(codes, separator, rng))
        for a, values in zip(new, np.unravel_index(drawn, new_shape)):
            codes[a] = values.astype(np.min_scalar_type(tree.domain[a]))
    return {a: codes[a] for a in tree.domain}


SAMPLER_THREADS = 2  # chunks drawn at once (numpy's sorts and searches release the GIL)


def sample_chunks(tree: CliqueTree, rows: int, seed: int | None, chunk_rows: int, log=None,
                  threads: int | None = None):
    """`rows` rows in chunks of at most `chunk_rows` (at least one chunk), in order. Chunk k is
    drawn with a generator of its own, the k-th child of `SeedSequence(seed)`, so a seed fixes
    the rows whatever draws them: `threads` chunks (default `SAMPLER_THREADS`, at most the
    cores) are drawn at once in threads while the last one drawn is handed out, so memory holds
    `threads` + 1 chunks whatever `rows` is (systematic counts per chunk)."""
    import os
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    parent = np.random.SeedSequence(seed)
    sizes = iter([min(chunk_rows, rows - start) for start in range(0, rows, chunk_rows)] or [0])
    threads = max(1, min(threads or SAMPLER_THREADS, os.cpu_count() or 1))
    pending: deque = deque()  # (rows, future) of the chunks being drawn, in order
    done = 0
    with ThreadPoolExecutor(threads, thread_name_prefix="dp-synth-sample") as pool:

        def submit() -> None:
            n = next(sizes, None)
            if n is not None:  # chunk k's generator: the k-th child, whatever thread draws it
                rng = np.random.default_rng(parent.spawn(1)[0])
                pending.append((n, pool.submit(sample, tree, n, rng)))

        try:
            for _ in range(threads):
                submit()
            while pending:
                n, future = pending.popleft()
                chunk = future.result()
                submit()  # `threads` chunks are drawn while this one is handed out
                yield chunk
                done += n
                if log and rows > chunk_rows:
                    log(f"sampled {done:,} of {rows:,} rows")
        finally:
            for _, future in pending:  # the consumer stopped early: drop what is not started
                future.cancel()


def dumps(tree: CliqueTree) -> bytes:
    """The tree's own bytes (`CliqueTree.to_bytes`)."""
    return tree.to_bytes()


def loads(data: bytes) -> CliqueTree:
    """The tree `dumps` wrote."""
    return CliqueTree.from_bytes(data)


def collision_probability(tree: CliqueTree) -> float:
    """q = sum_x P(x)^2 of the tree's distribution P(x) = T_root(x) prod_child T_c(x_c) /
    T_c(x_sep): the chance that two independent rows are equal. Computed by passing the squared
    factors from the leaves to the roots (variable elimination along the tree), never over the
    full domain."""
    n = len(tree.cliques)
    children: list[list[int]] = [[] for _ in range(n)]
    # each clique's message goes to the first earlier clique containing its separator (its tree
    # parent or an ancestor-side clique holding the same separator): every variable summed out
    # there appears, by the running intersection property, only in cliques processed before it
    parents = []
    for i, sep in enumerate(tree.separators):
        parent = -1
        if sep:
            parent = next(j for j in range(i) if set(sep) <= set(tree.cliques[j]))
            children[parent].append(i)
        parents.append(parent)
    messages: dict[int, np.ndarray] = {}
    total = 1.0
    for i in reversed(range(n)):
        clique, sep = tree.cliques[i], tree.separators[i]
        table = np.clip(np.asarray(tree.tables[i], dtype=np.float64), 0.0, None)
        table = table / max(table.sum(), 1e-300)
        if sep:
            sep_axes = tuple(k for k, a in enumerate(clique) if a not in sep)
            denom = table.sum(axis=sep_axes, keepdims=True)
            table = np.divide(table, denom, out=np.zeros_like(table), where=denom > 0)
        factor = table ** 2
        for c in children[i]:
            shape = [tree.domain[a] if a in tree.separators[c] else 1 for a in clique]
            order = [a for a in clique if a in tree.separators[c]]
            msg = np.transpose(messages.pop(c), [tree.separators[c].index(a) for a in order])
            factor = factor * msg.reshape(shape)
        if parents[i] < 0:
            total *= float(factor.sum())
        else:
            keep = [a for a in clique if a in sep]
            summed = factor.sum(axis=tuple(k for k, a in enumerate(clique) if a not in sep))
            messages[i] = np.transpose(summed.reshape([tree.domain[a] for a in keep]),
                                       [keep.index(a) for a in sep])
    return total


def tree_children(parents: list[int]) -> list[list[int]]:
    """Each clique's children in a junction tree given by its parent indices (-1: a root)."""
    children: list[list[int]] = [[] for _ in parents]
    for i, parent in enumerate(parents):
        if parent >= 0:
            children[parent].append(i)
    return children


def broadcast_to(values: np.ndarray, attrs: tuple, target: tuple,
                 domain: dict[str, int]) -> np.ndarray:
    """`values` (axes in `attrs` order, attrs a subset of `target`) reshaped to broadcast over
    `target`'s axes."""
    present = [a for a in target if a in attrs]
    moved = np.transpose(values, [attrs.index(a) for a in present])
    return moved.reshape([domain[a] if a in attrs else 1 for a in target])


def marginalize(table: np.ndarray, attrs: tuple, keep: tuple) -> np.ndarray:
    """The sum of `table` (axes in `attrs` order) over the axes not in `keep`, axes in `keep`
    order."""
    if tuple(keep) == tuple(attrs):
        return table
    # einsum's one-pass reduction: 1.5-3x faster than ndarray.sum over strided axes
    return np.einsum(table, list(range(len(attrs))), [attrs.index(a) for a in keep])


UNDERFLOW = 1e-200  # a slice mass below it is recomputed with its own shift (`calibrate`)


def calibrate(domain: dict[str, int], cliques: list[Clique], separators: list[Clique],
              parents: list[int], log_potentials: list[np.ndarray]) -> list[np.ndarray]:
    """The marginal of every clique of a junction tree (`junction_tree`'s order, separators and
    parents) under the distribution P(x) proportional to exp(sum_i log_potentials[i](x_i)): belief
    propagation with one pass from the leaves to the roots and one back. Upward, each clique adds
    its children's log messages to its potential, exponentiates it after subtracting its maximum
    and sends its parent the log of its mass on each separator value. Downward, a child's table
    is divided by that mass and multiplied by its parent's final marginal on the separator.
    Where a separator value's mass would underflow (below `UNDERFLOW`: a fit's log potentials
    reach +-1,000 on sparse marginals), the child exponentiates each separator value's slice
    after subtracting that slice's own maximum, keeps its conditional given the separator and
    sends the exact log mass: messages stay in log space, so no division overflows and no
    clique's mass underflows whole however extreme the potentials.
    Returns one probability table per clique (axes in clique order, each summing to 1); the
    tables agree on every separator, and by the running intersection property they are the
    exact clique marginals of P."""
    children = tree_children(parents)
    beliefs: list[np.ndarray] = [np.empty(0)] * len(cliques)
    below: dict[int, np.ndarray] = {}  # what divides a child's table on the way down
    log_up: dict[int, np.ndarray] = {}
    for i in reversed(range(len(cliques))):  # every child comes after its parent
        values = np.asarray(log_potentials[i], dtype=np.float64)
        for c in children[i]:
            values = values + broadcast_to(log_up[c], separators[c], cliques[i], domain)
        table = np.exp(values - values.max())
        if parents[i] < 0:
            beliefs[i] = table / table.sum()
            continue
        sep = separators[i]
        mass = marginalize(table, cliques[i], sep)
        if mass.min() < UNDERFLOW:  # a separator value's slice underflowed: shift each slice
            summed = tuple(k for k, a in enumerate(cliques[i]) if a not in sep)
            top = values.max(axis=summed, keepdims=True)
            table = np.exp(values - top)
            sums = table.sum(axis=summed, keepdims=True)  # each at least 1 (its maximum's term)
            table /= sums  # P(clique | separator)
            kept = [a for a in cliques[i] if a in sep]
            message = (top + np.log(sums)).reshape([domain[a] for a in kept])
            log_up[i] = np.transpose(message, [kept.index(a) for a in sep])
            below[i] = np.ones_like(mass)
        else:
            log_up[i], below[i] = np.log(mass), mass
        log_up[i] = log_up[i] - log_up[i].max()
        beliefs[i] = table
    for i in range(len(cliques)):  # beliefs[i] is now final: send it down to its children
        for c in children[i]:
            sep = separators[c]
            ratio = marginalize(beliefs[i], cliques[i], sep) / below[c]
            beliefs[c] *= broadcast_to(ratio, sep, cliques[c], domain)
            beliefs[c] /= beliefs[c].sum()
    return beliefs
