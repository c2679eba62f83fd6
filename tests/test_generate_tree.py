"""dp-synth's own junction tree (`generate/tree.py`: greedy elimination, maximal cliques of the
chordal graph, maximum-weight spanning tree), checked by brute force on random clique sets, and
compared with mbi's `make_junction_tree` when mbi is installed (the `jax` extra)."""

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from dp_synth_assets.core.generate import mirror, pgm
from dp_synth_assets.core.generate.tree import (calibrate, elimination_cliques, junction_tree,
                                                 model_cells)
from dp_synth_assets.core.select import aim_fit

CASES = 300


def random_case(rng: np.random.Generator) -> tuple[dict[str, int], list[tuple[str, ...]]]:
    n = int(rng.integers(1, 11))
    domain = {f"v{i}": int(k) for i, k in enumerate(rng.integers(1, 9, n))}
    names = list(domain)
    cliques = [tuple(str(a) for a in rng.choice(names, int(rng.integers(1, min(4, n) + 1)),
                                                 replace=False))
               for _ in range(int(rng.integers(0, 9)))]
    return domain, cliques


def tree_case(rng: np.random.Generator) -> tuple[dict[str, int], list[tuple[str, ...]]]:
    """A random tree (a connected acyclic graph) of pairs: chordal already, no fill-in."""
    n = int(rng.integers(2, 10))
    domain = {f"t{i}": int(k) for i, k in enumerate(rng.integers(1, 9, n))}
    names = list(domain)
    return domain, [(names[int(rng.integers(0, i))], names[i]) for i in range(1, n)]


def cases():
    rng = np.random.default_rng(20261127)
    return [random_case(rng) for _ in range(CASES)] + [tree_case(rng) for _ in range(CASES // 3)]


def graph_of(domain, cliques) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(domain)
    for c in cliques:
        graph.add_edges_from(itertools.combinations(c, 2))
    return graph


def chordal_by_elimination(graph: nx.Graph) -> bool:
    """Brute force: a graph is chordal iff removing simplicial vertices (whose neighbours are
    all joined) one after another empties it."""
    g = nx.Graph(graph)
    while g.number_of_nodes():
        simplicial = next((v for v in g if all(g.has_edge(a, b) for a, b in
                                               itertools.combinations(g[v], 2))), None)
        if simplicial is None:
            return False
        g.remove_node(simplicial)
    return True


def test_the_junction_tree_has_its_properties_on_random_clique_sets():
    for domain, cliques in cases():
        order, separators, parents = junction_tree(domain, cliques)
        sets = [set(c) for c in order]
        # every input clique, and every attribute, lies inside some maximal clique
        for c in cliques + [(a,) for a in domain]:
            assert any(set(c) <= s for s in sets), (domain, cliques, order)
        # no clique inside another, and no attribute twice in one
        assert all(len(set(c)) == len(c) for c in order)
        assert not any(i != j and sets[i] <= sets[j] for i in range(len(sets))
                       for j in range(len(sets)))
        # the cliques' graph is chordal, contains the input graph, and its maximal cliques are
        # exactly the output (found by networkx's clique search, independently)
        triangulated = graph_of(domain, order)
        assert chordal_by_elimination(triangulated), (domain, cliques, order)
        assert set(graph_of(domain, cliques).edges) <= {tuple(e) for e in triangulated.edges} | {
            tuple(reversed(e)) for e in triangulated.edges}
        assert {frozenset(c) for c in nx.find_cliques(triangulated)} == {frozenset(c)
                                                                        for c in order}
        # a forest: every parent comes first, one tree per connected component of the graph
        tree = nx.Graph()
        tree.add_nodes_from(range(len(order)))
        for i, (parent, sep) in enumerate(zip(parents, separators)):
            assert parent < i
            if parent >= 0:
                tree.add_edge(i, parent)
                assert set(sep) == sets[i] & sets[parent]
                assert tuple(sep) == tuple(a for a in order[i] if a in sets[parent])
            else:
                assert sep == ()
        assert nx.is_forest(tree)
        components = nx.number_connected_components(graph_of(domain, cliques))
        assert nx.number_connected_components(tree) == components == parents.count(-1)
        # running intersection: what two cliques share is in every clique on the path between
        for i, j in itertools.combinations(range(len(order)), 2):
            shared = sets[i] & sets[j]
            if not shared:
                continue
            assert nx.has_path(tree, i, j)
            assert all(shared <= sets[k] for k in nx.shortest_path(tree, i, j)), (order, i, j)
        # attributes inside each clique in domain order; the sizes agree with each other
        position = list(domain)
        assert all(list(c) == sorted(c, key=position.index) for c in order)
        cells = sum(math.prod(domain[a] for a in c) for c in order)
        assert model_cells(domain, cliques + [(a,) for a in domain]) == cells
        assert aim_fit.model_mb(domain, cliques) == pytest.approx(cells * 8 / 2 ** 20)
        if cliques:
            size = pgm.model_size(domain, cliques)
            assert size.total_cells == cells
            assert size.largest_clique_cells == max(math.prod(domain[a] for a in c)
                                                    for c in order)


def test_a_tree_graph_is_not_filled_in():
    # a path whose greedy elimination would eliminate the cheap middle vertex c first (2 x 2 x
    # 1000 cells < 1000 x 1000 and 2 x 5000) and add the fill-in edge b-d; a tree is chordal
    # already, so its maximal cliques are its edges
    domain = {"a": 1000, "b": 1000, "c": 2, "d": 2, "e": 5000}
    cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]
    assert {frozenset(c) for c in elimination_cliques(domain, cliques)} == {
        frozenset(c) for c in cliques}
    # with a cycle the greedy order triangulates it
    cycle = cliques + [("e", "a")]
    made = elimination_cliques(domain, cycle)
    assert len(made) == 3 and all(len(c) == 3 for c in made)


def test_attributes_in_no_clique_are_singleton_roots():
    domain = {"a": 2, "b": 3, "c": 4, "d": 5}
    order, separators, parents = junction_tree(domain, [("a", "b")])
    assert order == [("a", "b"), ("d",), ("c",)]
    assert separators == [(), (), ()] and parents == [-1, -1, -1]


def test_the_maximal_cliques_and_the_tree_are_mbi_s():
    pytest.importorskip("mbi")
    from mbi import Domain
    from mbi.junction_tree import hypothetical_model_size, make_junction_tree

    for domain, cliques in cases():
        mbi_domain = Domain(list(domain), list(domain.values()))
        covered = {a for c in cliques for a in c}
        full = cliques + [(a,) for a in domain if a not in covered]
        jtree, _ = make_junction_tree(mbi_domain, full)
        order, _, parents = junction_tree(domain, cliques)
        assert set(order) == set(jtree.nodes), (domain, cliques)
        ours = {frozenset((order[i], order[p])) for i, p in enumerate(parents) if p >= 0}
        assert ours == {frozenset(e) for e in jtree.edges}, (domain, cliques)
        if cliques:
            assert aim_fit.model_mb(domain, cliques) == pytest.approx(
                hypothetical_model_size(mbi_domain, cliques), rel=1e-12)


def brute_marginal(domain, cliques, potentials, keep) -> np.ndarray:
    """The marginal on `keep` of P(x) proportional to exp(sum_i potentials[i](x_i)), from the
    whole joint table in log space (the largest log-weight subtracted before exponentiating)."""
    names = list(domain)
    log_joint = np.zeros([domain[a] for a in names])
    for clique, values in zip(cliques, potentials):
        present = sorted(clique, key=names.index)
        moved = np.transpose(values, [clique.index(a) for a in present])
        log_joint = log_joint + moved.reshape([domain[a] if a in clique else 1 for a in names])
    joint = np.exp(log_joint - log_joint.max())
    joint /= joint.sum()
    out = joint.sum(axis=tuple(i for i, a in enumerate(names) if a not in keep))
    present = [a for a in names if a in keep]
    return np.transpose(out, [present.index(a) for a in keep])


def test_calibrate_gives_the_exact_clique_marginals_on_random_trees():
    rng = np.random.default_rng(7)
    for _ in range(40):
        domain, cliques = random_case(rng)
        order, separators, parents = junction_tree(domain, cliques)
        potentials = [rng.normal(0, 3, [domain[a] for a in c]) for c in order]
        tables = calibrate(domain, order, separators, parents, potentials)
        for clique, table in zip(order, tables):
            np.testing.assert_allclose(table, brute_marginal(domain, order, potentials, clique),
                                       rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("parent,child", [(710.0, -737.0), (800.0, -800.0)])
def test_calibrate_stays_exact_where_probability_space_underflows(parent, child):
    """The parent (a, b) adds `parent` to its log potential at b = 1, the child (b, c) `child`.
    (710, -737): in the child's own normalization b = 1 falls to ~1e-320 (subnormal) while its
    true marginal is exp(-27) = 2e-12, and the parent's separator marginal divided by the
    child's, 2e-12 / 1e-320, overflows to inf (then inf * 0 to NaN: a ppsyn run failed in CI so,
    its refits having measured a sparse 3-way marginal 20 times). (800, -800): each side alone
    puts exp(-800) = 0 on one value of b, so the product of the two normalized tables is 0
    everywhere, while the true marginal of b is (1/2, 1/2). Both must come out finite and exact."""
    domain = {"a": 2, "b": 2, "c": 2}
    order, separators, parents = junction_tree(domain, [("a", "b"), ("b", "c")])
    assert len(order) == 2 and list(separators[1]) == ["b"]
    potentials = []
    for clique in order:
        values = np.zeros([domain[a] for a in clique])
        index = [slice(None)] * len(clique)
        index[clique.index("b")] = 1
        values[tuple(index)] = parent if "a" in clique else child
        potentials.append(values)
    tables = calibrate(domain, order, separators, parents, potentials)
    for clique, table in zip(order, tables):
        assert np.isfinite(table).all()
        np.testing.assert_allclose(table, brute_marginal(domain, order, potentials, clique),
                                   rtol=1e-9, atol=1e-15)


def test_a_projection_across_cliques_stays_exact_where_a_separator_mass_is_subnormal():
    """(a, c) spans the cliques (a, b) and (b, c): `Calibrated.project` joins them through
    P(b), which is exp(-726) / (1 + exp(-726)) = 1e-315 at b = 1 here (subnormal). Its inverse,
    1e315, overflows; the projection must stay finite and equal the brute-force marginal."""
    domain = {"a": 2, "b": 2, "c": 3}
    order, separators, parents = junction_tree(domain, [("a", "b"), ("b", "c")])
    rng = np.random.default_rng(3)
    potentials = []
    for clique in order:
        values = rng.normal(0, 1, [domain[a] for a in clique])
        index = [slice(None)] * len(clique)
        index[clique.index("b")] = 1
        values[tuple(index)] -= 363.0
        potentials.append(values)
    tables = calibrate(domain, order, separators, parents, potentials)
    model = mirror.Calibrated(domain, tuple(order), tuple(separators), tuple(parents),
                              tuple(tables), 1.0)
    projected = model.project(("a", "c"))
    assert np.isfinite(projected).all()
    np.testing.assert_allclose(projected, brute_marginal(domain, order, potentials, ("a", "c")),
                               rtol=1e-9, atol=1e-15)
