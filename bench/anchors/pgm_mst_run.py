"""One anchor run: MST (McKenna, Miklau, Sheldon 2021) on mbi 2.0, in its own process.

private-pgm's MST as the paper describes it, written against the mbi 2.0 API (the `mbi` package
has no `mechanisms/` module; the algorithm is re-stated here from the paper, not copied):

1. rho/3: every 1-way marginal with Gaussian noise, sigma = sqrt(d / (2 rho/3)).
2. Domain compression: the values of a column whose noisy count is below 3 sigma are merged
   into one cell (post-processing of step 1); decoding draws uniformly among the merged values.
3. rho/3: the spanning tree. A model fitted to the 1-way measurements gives every pair's score
   ||M_ij(data) - M_ij(model)||_1 (sensitivity 1); d-1 rounds of the exponential mechanism, each
   at epsilon sqrt(8 (rho/3) / (d-1)) (epsilon^2/8-zCDP), pick the heaviest edge that joins two
   components (Kruskal with a private choice).
4. rho/3: the d-1 chosen pairs with Gaussian noise, sigma = sqrt((d-1) / (2 rho/3)).
5. mbi's MirrorDescent on all measurements; `synthetic_data(n)` ("round") with n the model's
   estimated total.

    python bench/anchors/pgm_mst_run.py --data codes.csv --domain domain.json --epsilon 1 \
        --delta 1e-9 --seed 0 --out synth.csv.gz

rho from (epsilon, delta): our tight conversion (`core.privacy.rho_from_epsilon_delta`, OpenDP's
zCDP -> approxDP profile). Prints `RESULT {json}` last (seconds: fit + sample; peak_mb: this
process's maximum RSS).
"""

import argparse
import itertools
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
ROOT = Path(__file__).resolve().parents[2]
STARTED = time.perf_counter()
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def mst(data: dict[str, np.ndarray], sizes: dict[str, int], rho: float, rng: np.random.Generator,
        iters: int) -> tuple[dict[str, np.ndarray], int, list]:
    """Synthetic columns (codes in the original domain), the rows drawn, the chosen pairs."""
    from mbi import Dataset, Domain, LinearMeasurement
    from mbi.estimation import MirrorDescent

    cols = list(sizes)
    d = len(cols)
    # 1. one-way marginals
    sigma1 = np.sqrt(d / (2 * rho / 3))
    noisy1 = {c: np.bincount(data[c], minlength=sizes[c]) + rng.normal(0, sigma1, sizes[c])
              for c in cols}
    # 2. compression: values below 3 sigma share one cell (last index)
    mapping, compressed, kept = {}, {}, {}
    for c in cols:
        keep = noisy1[c] >= 3 * sigma1
        if keep.all() or not keep.any():
            keep = np.ones(sizes[c], dtype=bool)
        kept[c] = np.flatnonzero(keep)
        mapping[c] = np.where(keep, np.cumsum(keep) - 1, keep.sum())
        compressed[c] = len(kept[c]) + (0 if keep.all() else 1)
    domain = Domain(cols, [compressed[c] for c in cols])
    cdata = Dataset({c: mapping[c][data[c]] for c in cols}, domain)
    measurements = []
    for c in cols:
        y = np.zeros(compressed[c])
        np.add.at(y, mapping[c], noisy1[c])  # merged cells: the sum of their noisy counts
        scale = sigma1 * np.sqrt(np.bincount(mapping[c], minlength=compressed[c]))
        # a merged cell's noise is the sum of its members': report the larger stddev per clique
        measurements.append(LinearMeasurement(y, (c,), stddev=float(scale.max())))
    estimator = MirrorDescent()
    model = estimator.estimate(domain, measurements, iters=iters)
    print(f"1-way model fitted at {time.perf_counter() - STARTED:.1f} s", flush=True)
    # 3. the spanning tree by the exponential mechanism
    pairs = list(itertools.combinations(cols, 2))
    one_way = {c: np.asarray(model.project((c,)).datavector()) for c in cols}
    # the model of step 1 is a product of its 1-way marginals: a pair's projection is their
    # outer product over the total
    total = float(one_way[cols[0]].sum())
    scores = np.array([float(np.abs(cdata.project(p).datavector()
                                    - np.outer(one_way[p[0]], one_way[p[1]]).ravel() / total).sum())
                       for p in pairs])
    eps_round = np.sqrt(8 * (rho / 3) / (d - 1))
    parent = {c: c for c in cols}

    def root(c):
        while parent[c] != c:
            c = parent[c]
        return c

    chosen = []
    for _ in range(d - 1):
        open_ = [i for i, (a, b) in enumerate(pairs) if root(a) != root(b)]
        logits = eps_round / 2 * scores[open_]
        p = np.exp(logits - logits.max())
        i = open_[rng.choice(len(open_), p=p / p.sum())]
        chosen.append(pairs[i])
        parent[root(pairs[i][0])] = root(pairs[i][1])
    print(f"tree chosen at {time.perf_counter() - STARTED:.1f} s", flush=True)
    # 4. the chosen pairs
    sigma2 = np.sqrt((d - 1) / (2 * rho / 3))
    for p in chosen:
        x = cdata.project(p).datavector()
        measurements.append(LinearMeasurement(x + rng.normal(0, sigma2, x.size), p, stddev=sigma2))
    # 5. fit and sample, then undo the compression
    model = estimator.estimate(domain, measurements, iters=iters, warm_start=model)
    print(f"model fitted at {time.perf_counter() - STARTED:.1f} s", flush=True)
    synth = model.synthetic_data().to_dict()
    rows = len(next(iter(synth.values())))
    out = {}
    for c in cols:
        codes = np.asarray(synth[c])
        merged = np.flatnonzero(~np.isin(np.arange(sizes[c]), kept[c]))
        out[c] = kept[c][np.minimum(codes, len(kept[c]) - 1)]
        if len(merged):
            rest = codes == len(kept[c])
            out[c][rest] = rng.choice(merged, rest.sum())
    return out, rows, chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="CSV of codes 0..k-1")
    parser.add_argument("--domain", type=Path, required=True, help="JSON {column: size}")
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--delta", type=float, default=1e-9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iters", type=int, default=1000, help="mirror-descent iterations per fit")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    from dp_synth_assets.core.privacy import rho_from_epsilon_delta

    sizes = {c: int(k) for c, k in json.loads(args.domain.read_text()).items()}
    frame = pd.read_csv(args.data)[list(sizes)]
    data = {c: frame[c].to_numpy(np.int64) for c in sizes}
    rho = rho_from_epsilon_delta(args.epsilon, args.delta)
    started = time.perf_counter()
    synth, rows, chosen = mst(data, sizes, rho, np.random.default_rng(args.seed), args.iters)
    seconds = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(synth).to_csv(args.out, index=False)
    print("RESULT " + json.dumps({
        "status": "ok", "seconds": seconds, "rho": rho, "rows": rows,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "selected": len(chosen)}), flush=True)


if __name__ == "__main__":
    main()
