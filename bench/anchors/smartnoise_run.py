"""One anchor run: smartnoise-synth's MST or AIM on a discretized table, in its own process.

Runs inside bench/.venv-smartnoise (smartnoise-synth 1.0.8 needs mbi<2, which cannot share our
environment); `bench/compare_methods.py` creates that venv and starts this script as a subprocess,
one process per (synthesizer, epsilon, seed), so the peak RSS printed is that run's alone.

    python bench/anchors/smartnoise_run.py --synth mst --data adult.csv --domain adult-domain.json \
        --epsilon 1 --delta 1e-9 --seed 0 --out synth.csv.gz [--max-model-mb 10 --rounds 100]

The public domain is given to smartnoise, so it spends nothing on preprocessing: every column gets
a `LabelTransformer` fitted on the public list of categories 0..k-1 (from the domain file, not
from the data), and the already-fitted `TableTransformer` goes to `fit(transformer=...,
preprocessor_eps=0.0)`, which then neither infers categories from the data nor spends epsilon.

It samples as many rows as the source has (as ours does with `rows: same`), writes them to --out
(CSV; a `.gz` suffix compresses) and prints one line `RESULT {json}` last, with
`seconds` (fit + sample, excluding reading the CSV and writing the output), `peak_mb` (this
process's maximum RSS from resource.getrusage), the rho smartnoise derives from (epsilon, delta),
and the settings used. Anything smartnoise prints itself goes before that line.

What smartnoise 1.0.8 does with the budget (read from its source, not changed here):
- (epsilon, delta) -> rho by `snsynth.utils.cdp_rho`: a binary search over OpenDP's
  `make_zCDP_to_approxDP` profile of a Gaussian, i.e. the tight conversion, the same as ours.
- MST: rho/3 for the 1-way marginals, rho/3 for the spanning-tree selection, rho/3 for the tree's
  2-way marginals; the model is fitted with `known_total=len(data)`, the exact row count (not DP
  under add/remove neighbours, a known trap; reported as shipped). Samples with mbi 1.1.
- AIM: defaults max_model_size=80 (MB), max_cells=10000, rounds=16*d (which sets the initial
  per-round budget; the loop ends when the budget is spent, with annealing); mbi re-estimation with
  1000 iterations after every round.
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd


def public_transformer(domain: dict[str, int]):
    """A fitted smartnoise TableTransformer whose categories come from the public domain only."""
    from snsynth.transform.label import LabelTransformer
    from snsynth.transform.table import TableTransformer

    transformers = []
    for size in domain.values():
        t = LabelTransformer(nullable=False)
        t.fit(list(range(int(size))))  # public: the categories 0..k-1, each once
        transformers.append(t)
    table = TableTransformer(transformers)
    assert table.fit_complete and table.cardinality == [int(k) for k in domain.values()]
    return table


def make_synthesizer(args):
    """smartnoise's MST or AIM with the run's epsilon and delta (and AIM's size settings)."""
    if args.synth == "mst":
        from snsynth.mst import MSTSynthesizer

        return MSTSynthesizer(epsilon=args.epsilon, delta=args.delta)
    from snsynth.aim import AIMSynthesizer

    kwargs = {}
    if args.max_model_mb is not None:
        kwargs["max_model_size"] = args.max_model_mb
    if args.rounds is not None:
        kwargs["rounds"] = args.rounds
    # verbose: one line per round ("Selected ... Budget Used ..."), so a log shows its progress
    return AIMSynthesizer(epsilon=args.epsilon, delta=args.delta, verbose=True, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synth", choices=("mst", "aim"), required=True)
    parser.add_argument("--data", type=Path, required=True, help="discretized CSV (ints 0..k-1)")
    parser.add_argument("--domain", type=Path, required=True, help="JSON {column: size}")
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--delta", type=float, default=1e-9)
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds numpy's global generator (smartnoise's selection and sampling); "
                             "the measurement noise comes from OpenDP and takes no seed")
    parser.add_argument("--out", type=Path, required=True, help="CSV path for the synthetic rows")
    parser.add_argument("--max-model-mb", type=float, default=None, help="AIM max_model_size (MB)")
    parser.add_argument("--rounds", type=int, default=None, help="AIM rounds (default 16*d)")
    args = parser.parse_args()

    domain = json.loads(args.domain.read_text())
    data = pd.read_csv(args.data)[list(domain)]
    np.random.seed(args.seed)

    from snsynth.utils import cdp_rho

    started = time.perf_counter()
    synth = make_synthesizer(args)
    synth.fit(data, transformer=public_transformer(domain), preprocessor_eps=0.0)
    fitted = time.perf_counter()
    sample = synth.sample(len(data))
    seconds = time.perf_counter() - started
    sample = pd.DataFrame(sample)
    sample.columns = list(domain)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    sample.to_csv(args.out, index=False)
    result = {
        "synth": args.synth,
        "epsilon": args.epsilon,
        "delta": args.delta,
        "seed": args.seed,
        "rho": float(cdp_rho(args.epsilon, args.delta)),
        "accounting": "tight",
        "seconds": seconds,
        "fit_seconds": fitted - started,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "rows": len(sample),
        "max_model_mb": getattr(synth, "max_model_size", None),
        "rounds": getattr(synth, "rounds", None) or (16 * len(domain) if args.synth == "aim" else None),
    }
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
