"""A wide table drawn from a known Bayesian network: 26 binary and low-cardinality columns.

The network is fixed (the same for every seed); only its conditional probability tables and the
rows depend on `seed`, through one numpy Generator. Each line below is a node and its parents:

    a0 (3)                          root
    a1 (2) <- a0                    a chain a0 -> a1 -> ... -> a5 (strong links)
    a2 (2) <- a1
    a3 (3) <- a2
    a4 (2) <- a3
    a5 (2) <- a4
    b0 (4)                          root of a tree: b1, b2, b3 are b0's children
    b1 (2) <- b0
    b2 (3) <- b0
    b3 (2) <- b0
    b4 (2) <- b1, b2                two parents (a v-structure: b1 and b2 dependent given b4)
    b5 (2) <- b4
    c0 (2), c1 (2)                  roots
    c2 (3) <- c0, c1
    c3 (2) <- c2
    c4 (2) <- c2, a0                joins the c-component to the a-chain
    c5 (2) <- c3
    d0 (2) .. d7 (2 or 3)           eight columns with no parent and no child (independent)

So the dependent pairs are the edges and the paths through them; the d-columns are independent
of every other column (their true pairwise mutual information is 0). The CPTs are drawn per
parent configuration from a Dirichlet(0.3) (concentrated rows: strong dependencies); roots get
a Dirichlet(2) (no category vanishingly rare). `generate` samples row by row in topological
order, vectorized over rows.

    python bench/wide_table.py --rows 30000 --seed 0 --out wide.csv   # also writes wide-domain.json
"""

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

# (name, cardinality, parents), in topological order
NETWORK: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("a0", 3, ()), ("a1", 2, ("a0",)), ("a2", 2, ("a1",)), ("a3", 3, ("a2",)),
    ("a4", 2, ("a3",)), ("a5", 2, ("a4",)),
    ("b0", 4, ()), ("b1", 2, ("b0",)), ("b2", 3, ("b0",)), ("b3", 2, ("b0",)),
    ("b4", 2, ("b1", "b2")), ("b5", 2, ("b4",)),
    ("c0", 2, ()), ("c1", 2, ()), ("c2", 3, ("c0", "c1")), ("c3", 2, ("c2",)),
    ("c4", 2, ("c2", "a0")), ("c5", 2, ("c3",)),
    ("d0", 2, ()), ("d1", 2, ()), ("d2", 3, ()), ("d3", 2, ()), ("d4", 2, ()), ("d5", 3, ()),
    ("d6", 2, ()), ("d7", 2, ()),
)
DOMAIN: dict[str, int] = {name: k for name, k, _ in NETWORK}
EDGES: tuple[tuple[str, str], ...] = tuple((p, name) for name, _, parents in NETWORK
                                          for p in parents)
INDEPENDENT: tuple[str, ...] = tuple(name for name, _, _ in NETWORK if name.startswith("d"))
DEFAULT_ROWS = 30_000


def cpts(seed: int) -> dict[str, np.ndarray]:
    """Each node's conditional probability table, shape (*parent sizes, own size)."""
    rng = np.random.default_rng([seed, 1])
    tables = {}
    for name, k, parents in NETWORK:
        shape = tuple(DOMAIN[p] for p in parents)
        alpha = 0.3 if parents else 2.0
        tables[name] = rng.dirichlet(np.full(k, alpha), size=shape or None)
    return tables


def generate(rows: int = DEFAULT_ROWS, seed: int = 0) -> pd.DataFrame:
    """`rows` rows of the network with the CPTs of `seed` (integer codes 0..k-1 per column)."""
    tables = cpts(seed)
    rng = np.random.default_rng([seed, 2])
    data: dict[str, np.ndarray] = {}
    for name, _, parents in NETWORK:
        probs = tables[name][tuple(data[p] for p in parents)] if parents else \
            np.broadcast_to(tables[name], (rows, DOMAIN[name]))
        cumulative = np.cumsum(probs, axis=1)
        u = rng.random((rows, 1))
        data[name] = np.minimum((u > cumulative).sum(axis=1), DOMAIN[name] - 1).astype(np.int64)
    return pd.DataFrame(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="CSV; the domain goes beside it")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    generate(args.rows, args.seed).to_csv(args.out, index=False)
    domain_path = args.out.with_name(args.out.stem + "-domain.json")
    domain_path.write_text(json.dumps(DOMAIN))
    print(f"wrote {args.out} ({args.rows} rows x {len(DOMAIN)} columns) and {domain_path}")


if __name__ == "__main__":
    main()
