"""absyn in process with paired noise, for A/B tests of the selection (issue 16).

The table: adult, or with --data a suite table's codes (bench/work/suite/data/<table>).

Per epsilon and seed: absyn's selection, the measurement stage as `stages.measure` runs it
(measurement plan, cover_columns, guard, consistency), the numpy mirror-descent fit
(`generate.mirror.fit`, `--iters`), and the exact average 2-way TVD of the fitted model over all
column pairs (no sampling: the suite's number adds the sampling error of n rows on top). Also
printed: that TVD split between the pairs inside a measured clique ("in") and the others ("out"),
beside the out pairs' independence TVD ("out-indep"), i.e. how much of an unmeasured pair's
dependency the model recovers through paths.

BENCH ONLY, NOT PRIVATE: unless --real-noise, the OpenDP draws are replaced by numpy Gaussian
noise keyed by (seed, the marginal's counts) and (seed, "scores"), so two variants of the code
at the same seed see the same noise on the same marginal (paired comparisons; OpenDP's noise
cannot be seeded). Variants: --fns (FIT_NOISE_SHARE), --one/--score (budget shares), --lam (the
share of the path weight R_tilde the CR-score subtracts; 1 = the paper), --nocoarse, --raw-price
(no fit shrink, step 4), --absolute (the fitted error itself, not over independence's); --trace
prints the greedy's rounds (pair, coarse cells, E); --pairs the fit's error on each measured pair
beside step 4's model of it.

    nice .venv/bin/python bench/absyn_paired.py --eps 1 --seeds 0 1 2 3 4 5 --tag base
"""
import argparse
import itertools
import json
import math
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import DATASETS  # noqa: E402
sys.path.insert(0, str(ROOT))

import dp_synth_assets.core.measure as M  # noqa: E402
import dp_synth_assets.core.select.absyn as A  # noqa: E402
from dp_synth_assets.core.budget import measurement_plan  # noqa: E402
from dp_synth_assets.core.config import SelectionSettings  # noqa: E402
from dp_synth_assets.core.generate import mirror  # noqa: E402
from dp_synth_assets.core.measure import make_consistent, noisy_total  # noqa: E402
from dp_synth_assets.core.privacy import Spend, gaussian_scale, rho_from_epsilon_delta  # noqa: E402
from dp_synth_assets.core.select import METHODS, Budget, select  # noqa: E402
from dp_synth_assets.core.select.guard import guard  # noqa: E402
from dp_synth_assets.core.stages import cover_columns, draw  # noqa: E402
from dp_synth_assets.core.select.privsyn import indif  # noqa: E402
from tests.helpers import counting_oracle  # noqa: E402

D = DATASETS / "adult"
SEED = [0]


def noop(*args, **kwargs) -> None:
    return None


def key(*parts) -> int:
    """A seed for one draw: the run's seed and what identifies the draw."""
    return zlib.crc32(repr((SEED[0],) + parts).encode())


def fake_counts(counts, rho):
    """Seeded Gaussian counts at the scale OpenDP would use (bench only, not private)."""
    counts = np.asarray(counts)
    scale = gaussian_scale(rho)
    ident = ("counts", counts.shape, int(counts.sum() % 997), counts.ravel()[:3].tolist())
    z = np.random.default_rng(key(*ident)).standard_normal(counts.shape)
    return counts + scale * z, Spend("gaussian_counts", rho, sensitivity=1.0, scale=scale)


def fake_scores(scores, rho, sensitivity):
    """Seeded Gaussian scores at the scale OpenDP would use (bench only, not private)."""
    scores = np.asarray(scores, dtype=float).ravel()
    scale = gaussian_scale(rho, sensitivity * math.sqrt(scores.size))
    z = np.random.default_rng(key("scores")).standard_normal(scores.size)
    return scores + scale * z, Spend("gaussian_scores", rho, sensitivity=sensitivity, scale=scale)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    ap.add_argument("--iters", type=int, default=1500)
    ap.add_argument("--tag", default="")
    ap.add_argument("--real-noise", action="store_true")
    ap.add_argument("--fns", type=float)
    ap.add_argument("--lam", type=float)
    ap.add_argument("--nocoarse", action="store_true")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--one", type=float)
    ap.add_argument("--score", type=float)
    ap.add_argument("--data", type=Path,
                    help="a folder with domain.json and codes.csv (or one other CSV of codes), "
                         "e.g. bench/work/suite/data/orders; default: adult")
    ap.add_argument("--raw-price", action="store_true",
                    help="price each pair's noise at its raw l1 (no fit shrink, step 4)")
    ap.add_argument("--absolute", action="store_true",
                    help="price each pair at FIT_NOISE_SHARE times its proxy's fitted error (no "
                         "division by the independent product's)")
    ap.add_argument("--pairs", action="store_true",
                    help="per measured pair: the fitted model's l1 error on it (count scale) and "
                         "step 4's model of it (measure.fitted_noise_error) on its exact counts, "
                         "on support_proxy of its exact margins and score, and on their product")
    args = ap.parse_args()
    if args.data is None:
        frame = pd.read_csv(D / "adult.csv")
        domain = json.loads((D / "adult-domain.json").read_text())
    else:
        domain = json.loads((args.data / "domain.json").read_text())
        csv = args.data / "codes.csv"
        if not csv.exists():
            csv = next(f for f in args.data.glob("*.csv"))
        frame = pd.read_csv(csv)[list(domain)]
    data = {c: frame[c].to_numpy() for c in domain}
    n = len(frame)
    pairs = list(itertools.combinations(domain, 2))
    real = {}
    for a, b in pairs:
        t = np.zeros((domain[a], domain[b]))
        np.add.at(t, (data[a], data[b]), 1)
        real[(a, b)] = t / n
    if args.nocoarse:
        A.COARSE_LEVELS = ()
        _cg = A.coarse_groupings
        A.select_after.__globals__["coarse_groupings"] = lambda d, o, levels=(): _cg(d, o, ())
    if args.lam is not None:
        _cr = A.cr_scores
        def cr_lam(index, pairs, r_bar, edges, edge_r=None):
            cr = _cr(index, pairs, r_bar, edges, edge_r)
            return r_bar - args.lam * (r_bar - cr)
        A.cr_scores = cr_lam
    if args.raw_price:
        A.shrink_curve = lambda expected, sigma_0: np.ones(A.SIGMA_GRID.size)
    if args.absolute:
        def absolute(one_a, one_b, score, sigma_0):
            curve = A.shrink_curve(A.support_proxy(one_a, one_b, score), sigma_0)
            return tuple(curve.tolist())
        A.fit_shrink = absolute
    if args.fns is not None:
        A.FIT_NOISE_SHARE = args.fns
    if not args.real_noise:
        M.gaussian_counts = fake_counts
        A.gaussian_scores = fake_scores
    for eps in args.eps:
        rho = rho_from_epsilon_delta(eps, 1e-9)
        res = []
        for seed in args.seeds:
            SEED[0] = seed
            t0 = time.time()
            info = METHODS["absyn"]
            one = (args.one if args.one is not None else info.one_way_share) * rho
            sc = (args.score if args.score is not None else info.score_share) * rho
            budget = Budget(one, sc, rho - one - sc)
            oracle = counting_oracle(data, domain)
            chosen = select("absyn", domain, oracle, budget, SelectionSettings(), noop)
            rhos = measurement_plan(cover_columns(chosen, domain), domain, budget.measure)
            noisy = draw(oracle(list(rhos)), rhos, noop, chosen.coarse) if rhos else []
            kept, rep = guard(list(chosen.one_way) + list(chosen.measured) + noisy, domain)
            cons = make_consistent(kept)
            tot = noisy_total(cons)
            t1 = time.time()
            _, model = mirror.fit(domain, cons, tot, args.iters)
            per = {p: 0.5 * np.abs(real[p] - model.project(p) / model.project(p).sum()).sum() for p in pairs}
            tv = float(np.mean(list(per.values())))
            meas = [set(m.clique) for m in cons if len(m.clique) > 1]
            inside = [p for p in pairs if any(set(p) <= c for c in meas)]
            ind = {p: 0.5 * np.abs(real[p] - np.outer(real[p].sum(1), real[p].sum(0))).sum() for p in pairs}
            print("   in", len(inside), round(sum(per[p] for p in inside) / len(pairs), 5),
                  "out", len(pairs) - len(inside), round(sum(per[p] for p in pairs if p not in inside) / len(pairs), 5),
                  "out-indep", round(sum(ind[p] for p in pairs if p not in inside) / len(pairs), 5), flush=True)
            res.append(tv)
            if args.pairs:
                for m in cons:
                    if len(m.clique) != 2:
                        continue
                    p = tuple(m.clique)
                    fitted = model.project(p)
                    fitted = fitted / fitted.sum() * n
                    truth = real[p] * n if p in real else real[p[::-1]].T * n
                    if m.groups is not None:
                        fitted, truth = M.coarsen(fitted, m.groups), M.coarsen(truth, m.groups)
                    raw = np.abs(m.noisy - truth).sum()
                    proxy = A.support_proxy(truth.sum(axis=1), truth.sum(axis=0),
                                            indif(truth))
                    print("   pair", p, "cells", truth.size, "support", int((truth > 0).sum()),
                          "sigma", round(m.sigma, 2), "consistent_l1", round(raw, 1),
                          "fit_l1", round(float(np.abs(fitted - truth).sum()), 1),
                          "model_counts", round(M.fitted_noise_error(truth, m.sigma), 1),
                          "model_proxy", round(M.fitted_noise_error(proxy, m.sigma), 1),
                          "model_independent", round(M.fitted_noise_error(
                              A.support_proxy(truth.sum(axis=1), truth.sum(axis=0), 0.0),
                              m.sigma), 1), flush=True)
            print(json.dumps({"tag": args.tag, "eps": eps, "seed": seed, "tvd2": round(tv, 5),
                              "sel": len(chosen.cliques), "coarse": len(chosen.coarse),
                              "dropped": len(rep.get("dropped", [])), "sel_s": round(t1 - t0, 1),
                              "fit_s": round(time.time() - t1, 1)}), flush=True)
            if args.trace:
                print("   rounds", [(tuple(r["pair"]), r.get("cells"), round(r["total_error"])) for r in chosen.details["rounds"]], flush=True)
        print(f"## {args.tag} eps {eps}: mean {np.mean(res):.5f} range {min(res):.5f}-{max(res):.5f}", flush=True)


if __name__ == "__main__":
    main()
