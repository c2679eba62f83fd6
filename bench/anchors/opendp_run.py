"""One anchor run: OpenDP 0.16's `contingency_table` with `dp.mbi.AIM()` or `dp.mbi.MST()`.

Runs in its own venv (/work/venv-opendp or `--python` of bench/suite.py): OpenDP 0.16's `mbi`
extra pins mbi==1.1.0 and polars==1.36.1, and its code does not run on mbi 2.0 (its default
estimator imports `mbi.estimation.mirror_descent`, and MST reads `Domain.attrs`, both gone in
mbi 2.0), so it cannot share our environment. Set up with:

    python3.11 -m venv /work/venv-opendp && /work/venv-opendp/bin/pip install 'opendp[mbi]==0.16.0' pandas

    python bench/anchors/opendp_run.py --algorithm mst --data codes.csv --domain domain.json \
        --rho 0.0149731 --seed 0 --out synth.csv.gz

The public domain is given as `keys` (the codes 0..k-1 of every column), so OpenDP discovers no
keys and the release is rho-zCDP (delta must then be 0: OpenDP refuses a delta when keys span
every column); rho is the run's budget computed by bench/suite.py with the tight conversion of
(epsilon, delta). Privacy unit: one row (`contributions=1`). Rows: `synthesize()` with its
default, about the noisy total. Numpy's global generator is seeded (mbi's sampling); OpenDP's
noise takes no seed.

MST's floating-point edge: `MST` can fail with "insufficient budget for query: 0.00074999... >
0.00074999..." (rho 0.015 on a 9-column table). Its selection stage (`_mst._make_mst_select`)
gives each of its d-1 exponential-mechanism rounds `prior(d_select / (d-1))` (one ulp below the
even share) and composes them adaptively; OpenDP adds privacy losses rounding up, so the d-1
shares can sum a few ulps above `d_select`, and the enclosing composition refuses the selection
query. It is systematic, not an unlucky rho: lowering the rho passed by a relative 1e-12 up to
1e-7 fails the same way. Workaround here: on that error, the run is repeated once with
`_make_mst_select` wrapped to receive its `d_out` lowered by a relative 1e-9 (the selection then
spends a hair less than its share; nothing else changes); the record's `note` says so.

Prints `RESULT {json}` last.
"""

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd


def release(frame, domain: dict[str, int], rho: float, algorithm: str):
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    keys = {c: list(range(k)) for c, k in domain.items()}
    context = dp.Context.compositor(data=pl.from_pandas(frame).lazy(),
                                    privacy_unit=dp.unit_of(contributions=1),
                                    privacy_loss=dp.loss_of(rho=rho))
    algo = dp.mbi.MST() if algorithm == "mst" else dp.mbi.AIM()
    return context.query(rho=rho).contingency_table(keys=keys, algorithm=algo).release()


def patch_mst_selection() -> None:
    """Wrap OpenDP's MST selection so that its rounds' shares sum below its budget (docstring)."""
    from opendp.extras.mbi import _mst

    original = _mst._make_mst_select

    def select(*args, d_out, **kwargs):
        return original(*args, d_out=d_out * (1 - 1e-9), **kwargs)

    _mst._make_mst_select = select


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", choices=("aim", "mst"), required=True)
    parser.add_argument("--data", type=Path, required=True, help="CSV of codes 0..k-1")
    parser.add_argument("--domain", type=Path, required=True, help="JSON {column: size}")
    parser.add_argument("--rho", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    from opendp.mod import OpenDPException

    domain = {c: int(k) for c, k in json.loads(args.domain.read_text()).items()}
    frame = pd.read_csv(args.data)[list(domain)].astype(np.int64)
    np.random.seed(args.seed)
    started = time.perf_counter()
    note = ""
    try:
        table = release(frame, domain, args.rho, args.algorithm)
    except OpenDPException as e:
        if args.algorithm != "mst" or "insufficient budget for query" not in str(e):
            raise
        refusal = str(e)[str(e).index("insufficient budget"):].split('"')[0].split("\n")[0]
        patch_mst_selection()
        table = release(frame, domain, args.rho, args.algorithm)
        note = (f"OpenDP MST float edge ({refusal.strip()}); rerun with the selection's d_out "
                f"lowered by a relative 1e-9")
    synth = table.synthesize().to_pandas()
    seconds = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    synth[list(domain)].to_csv(args.out, index=False)
    print("RESULT " + json.dumps({
        "status": "ok", "seconds": seconds, "rho": args.rho, "rows": len(synth),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "note": note}),
        flush=True)


if __name__ == "__main__":
    main()
