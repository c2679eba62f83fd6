"""dp-synth's junction tree (`core/generate/tree.py`) against mbi's `make_junction_tree` and
`hypothetical_model_size`: the same maximal cliques and tree (checked on every case), and the
time of each on random pair selections (needs the `jax` extra for mbi).

    python bench/junction_tree.py   # prints a JSON line per size; bench/results/junction_tree.md
    python bench/junction_tree.py --sizes 15:30 --repeats 1
"""

import argparse
import json
import time

import numpy as np

from dp_synth_assets.core.generate.pgm import import_mbi
from dp_synth_assets.core.generate.tree import junction_tree, model_cells

SIZES = [(15, 30), (40, 80), (100, 150)]  # (attributes, random pairs)
REPEATS = 5


def timed(fn, repeats: int = REPEATS) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=[f"{n}:{k}" for n, k in SIZES],
                        help="attributes:pairs")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in s.split(":")) for s in args.sizes]
    r = args.repeats
    import_mbi()
    from mbi import Domain
    from mbi.junction_tree import hypothetical_model_size, make_junction_tree

    rng = np.random.default_rng(1)
    for n, k in sizes:
        domain = {f"c{i}": int(x) for i, x in enumerate(rng.integers(2, 30, n))}
        names = list(domain)
        pairs = [tuple(str(a) for a in rng.choice(names, 2, replace=False)) for _ in range(k)]
        mbi_domain = Domain(names, list(domain.values()))
        full = pairs + [(a,) for a in names]
        order, _, parents = junction_tree(domain, pairs)
        jtree, _ = make_junction_tree(mbi_domain, full)
        same = (set(order) == set(jtree.nodes) and
                {frozenset((order[i], order[p])) for i, p in enumerate(parents) if p >= 0}
                == {frozenset(e) for e in jtree.edges})
        print(json.dumps({
            "attributes": n, "pairs": k, "same_tree_as_mbi": same,
            "junction_tree_ms": round(1e3 * timed(lambda: junction_tree(domain, pairs), r), 1),
            "mbi_make_junction_tree_ms": round(1e3 * timed(
                lambda: make_junction_tree(mbi_domain, full), r), 1),
            "model_cells_ms": round(1e3 * timed(lambda: model_cells(domain, pairs), r), 2),
            "mbi_hypothetical_model_size_ms": round(1e3 * timed(
                lambda: hypothetical_model_size(mbi_domain, pairs), r), 1)}))


if __name__ == "__main__":
    main()
