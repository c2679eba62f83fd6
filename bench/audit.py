"""An empirical privacy audit of selection + measurement (issue 13): a lower bound on epsilon
from how often a distinguishing event happens on a table D and on a neighbour D' with one more,
adversarially chosen row.

The run: the default method `absyn` (`select` then `measure`, core functions, no Dagster) on a
tiny domain a, b in {0, 1, 2} at a run budget `rho` (charged through a recorder; the claimed
epsilon is `epsilon_from_rho(rho, delta)`). D: 40 rows on the diagonal (0, 0) and (1, 1), so the
pair (a, b) is strongly dependent and usually selected, and every cell with a = 2 or b = 2 is
empty. D' = D + the row (2, 2): the target lands in an empty cell of every marginal (1-way a,
1-way b and the pair), where it is most visible.

The event: the inverse-variance weighted sum of the published noisy counts of the target's cell
over every released measurement containing it, standardized by its published noise
(Z = sum_m x_m / sigma_m^2 / sqrt(sum_m 1 / sigma_m^2); under D its noise is N(0, 1) when the
mechanism is right), exceeds a threshold t. It is post-processing of public outputs only. t is
chosen on separate calibration runs (the one whose calibration frequencies predict the largest
bound), then fresh runs give the two frequencies. Clopper-Pearson bounds at confidence
1 - alpha / 2 each give p_hi_lower for D' and p_lo_upper for D, and

    epsilon_lb = ln((p_hi_lower - delta) / p_lo_upper),

which holds with probability >= 1 - alpha whenever the run is (epsilon, delta)-DP, so a bound
above the claimed epsilon refutes the claim. The same audit of a deliberately broken mechanism
(every Gaussian drawn with a scale 4x smaller than the one charged) shows the audit's power.

    python bench/audit.py                     # the committed run: bench/results/audit.json
    python bench/audit.py --trials 2000       # smaller

The end-to-end audit is blunt: with the CI test's 1000 runs per table no outcome can give a bound
above about 4.2 (all runs on one side of the threshold), so against a claim of 2.75 only a gross
noise error shows. `gaussian_audit` is the sharp one, gray-box: it audits the
mechanism every marginal is published through (`measure.measure_marginal`) on one cell whose
count is c in D and c + 1 in D' (a neighbour: one more row in that cell), with the optimal
tests. The noise of each cell of a marginal is an independent draw of the same discrete
Gaussian, added to the count (the gray-box fact it relies on), so one call on a count array of
`trials` cells, all c (or all c + 1), is `trials` independent runs of the mechanism on that cell.
The likelihood ratio of a shifted discrete Gaussian grows with the output, so the
Neyman-Pearson optimal events are the thresholds "noisy count >= c + k"; the audit takes every
k in 0..ceil(8 sigma) (K events), each bound at confidence 1 - alpha / (2K) per side (union
bound: the maximum over k holds with probability >= 1 - alpha). No calibration runs are needed.

    python bench/audit.py --gaussian          # bench/results/audit_gaussian.json
"""

import argparse
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS  # noqa: E402
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dp_synth_assets.core import measure as measure_module  # noqa: E402
from dp_synth_assets.core import privacy  # noqa: E402
from dp_synth_assets.core.config import SelectionSettings  # noqa: E402
from dp_synth_assets.core.select import METHODS, Budget, privsyn, select  # noqa: E402

DOMAIN = {"a": 3, "b": 3}
TARGET = {"a": 2, "b": 2}
METHOD = "absyn"


def table(with_target: bool) -> dict[str, np.ndarray]:
    rows = [(i % 2, i % 2) for i in range(40)]
    if with_target:
        rows.append((TARGET["a"], TARGET["b"]))
    return {a: np.array([r[i] for r in rows], dtype=np.int64) for i, a in enumerate(DOMAIN)}


def oracle_of(data: dict[str, np.ndarray]):
    def oracle(cliques):
        out = {}
        for clique in cliques:
            counts = np.zeros(tuple(DOMAIN[a] for a in clique), dtype=np.int64)
            np.add.at(counts, tuple(data[a] for a in clique), 1)
            out[tuple(clique)] = counts
        return out
    return oracle


def budget(rho: float) -> Budget:
    info = METHODS[METHOD]
    one_way, score = info.one_way_share * rho, info.score_share * rho
    return Budget(one_way, score, rho - one_way - score)


def statistic(measurements) -> float:
    """Z: the standardized inverse-variance weighted noisy count of the target's cell."""
    num = den = 0.0
    for m in measurements:
        cell = tuple(TARGET[a] for a in m.clique)
        num += float(m.noisy[cell]) / m.sigma ** 2
        den += 1.0 / m.sigma ** 2
    return num / math.sqrt(den)


def run_once(data, rho: float) -> tuple[float, float, int]:
    """One selection + measurement run: (Z, rho charged, cliques measured)."""
    spent = []
    oracle = oracle_of(data)

    def charge(spend, **params):
        spent.append(spend.rho)

    selection = select(METHOD, DOMAIN, oracle, budget(rho), SelectionSettings(), charge)
    measured = measure_module.measure(oracle(list(selection.cliques)), selection.budgets, charge)
    released = list(selection.one_way) + list(selection.measured) + measured
    return statistic(released), math.fsum(spent), len(selection.cliques)


@contextmanager
def broken_noise(factor: float = 4.0):
    """Every Gaussian of the run drawn with a scale `factor` times smaller than the one charged
    and reported (the deliberately broken mechanism; `factor` 1 / 0.7: sigma 0.7 of the correct
    value)."""
    real_counts, real_scores = privacy.gaussian_counts, privacy.gaussian_scores

    def counts(values, rho):
        noisy, _ = real_counts(values, rho * factor ** 2)
        return noisy, privacy.Spend("gaussian_counts", rho, sensitivity=1.0,
                                    scale=privacy.gaussian_scale(rho))

    def scores(values, rho, sensitivity):
        noisy, spend = real_scores(values, rho * factor ** 2, sensitivity)
        return noisy, privacy.Spend("gaussian_scores", rho, sensitivity=sensitivity,
                                    scale=spend.scale * factor)

    patched = [(privsyn, "gaussian_scores", scores),
               (measure_module, "gaussian_counts", counts)]  # every marginal: measure_marginal
    saved = [(module, name, getattr(module, name)) for module, name, _ in patched]
    try:
        for module, name, fn in patched:
            setattr(module, name, fn)
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds, each holding with probability >= 1 - alpha."""
    lower = stats.beta.ppf(alpha, k, n - k + 1) if k > 0 else 0.0
    upper = stats.beta.ppf(1 - alpha, k + 1, n - k) if k < n else 1.0
    return float(lower), float(upper)


def epsilon_lower_bound(k_hi: int, k_lo: int, n: int, delta: float, alpha: float) -> float:
    """ln((p_hi_lower - delta) / p_lo_upper), each bound at confidence 1 - alpha / 2."""
    p_hi_lower, _ = clopper_pearson(k_hi, n, alpha / 2)
    _, p_lo_upper = clopper_pearson(k_lo, n, alpha / 2)
    if p_hi_lower - delta <= 0:
        return -math.inf
    return math.log((p_hi_lower - delta) / p_lo_upper)


def sample(trials: int, rho: float) -> tuple[dict[str, np.ndarray], list[float], int]:
    """Z over `trials` runs on D and on D' (and the rho each run charged, and how many runs
    measured the pair)."""
    samples, charged, selected = {}, [], 0
    for name, with_target in (("D", False), ("D_prime", True)):
        data = table(with_target)
        z = np.empty(trials)
        for i in range(trials):
            z[i], spent, cliques = run_once(data, rho)
            charged.append(spent)
            selected += cliques > 0
        samples[name] = z
    return samples, charged, selected


def choose_threshold(calibration: dict[str, np.ndarray], trials: int, delta: float,
                     alpha: float) -> float:
    """The threshold whose calibration frequencies (for D: or a normal fitted to them, where it is
    larger), taken as the truth, predict the largest
    lower bound with `trials` fresh runs per table (candidates: every calibration value; the
    noisy counts are integers, so Z has atoms and `Z > t` at an atom excludes it)."""
    lo, hi = calibration["D"], calibration["D_prime"]
    best, best_value = float(np.median(hi)), -math.inf
    for t in np.unique(np.concatenate([lo, hi])):
        # beyond the calibration's reach, D's tail from a normal fitted to its calibration runs
        p_lo = max((lo > t).mean(), stats.norm.sf(t, lo.mean(), lo.std()), 1e-12)
        p_hi = (hi > t).sum() / hi.size
        value = epsilon_lower_bound(round(p_hi * trials), round(p_lo * trials), trials, delta,
                                    alpha)
        if value > best_value:
            best, best_value = float(t), value
    return best


def audit(trials: int, rho: float, delta: float, alpha: float, calibration_trials: int,
          broken: bool = False) -> dict:
    """The audit: `calibration_trials` runs per table choose the threshold, `trials` fresh runs
    per table give the frequencies and the bound (confidence 1 - alpha)."""
    started = time.perf_counter()
    with broken_noise() if broken else _nothing():
        calibration, _, _ = sample(calibration_trials, rho)
        threshold = choose_threshold(calibration, trials, delta, alpha)
        samples, charged, selected = sample(trials, rho)
    k_lo, k_hi = int((samples["D"] > threshold).sum()), int((samples["D_prime"] > threshold).sum())
    return {
        "mechanism": "broken (Gaussian scale 4x too small)" if broken else "as implemented",
        "method": METHOD, "domain": DOMAIN, "rows_D": 40, "target_row": TARGET,
        "calibration_trials_per_table": calibration_trials, "trials_per_table": trials,
        "rho": rho, "delta": delta, "claimed_epsilon": privacy.epsilon_from_rho(rho, delta),
        "charged_rho_max": max(charged), "runs_measuring_the_pair": selected / (2 * trials),
        "event": "Z > threshold, Z = sum_m x_m / sigma_m^2 / sqrt(sum_m 1 / sigma_m^2) over the "
                 "released measurements containing the target cell (sigma_m as published)",
        "threshold": threshold, "count_D": k_lo, "count_D_prime": k_hi,
        "frequency_D": k_lo / trials, "frequency_D_prime": k_hi / trials,
        "confidence": 1 - alpha,
        "epsilon_lower_bound": epsilon_lower_bound(k_hi, k_lo, trials, delta, alpha),
        "seconds": round(time.perf_counter() - started, 1),
    }


@contextmanager
def _nothing():
    yield


GAUSSIAN_COUNT = 40  # the target cell's count in D (D' has one more row in it)


def gaussian_audit(trials: int, rho: float, delta: float, alpha: float,
                   sigma_factor: float = 1.0) -> dict:
    """The gray-box audit of `measure.measure_marginal` at `rho` (see the module docstring):
    `trials` runs on D and `trials` on D', the lower bound on epsilon at `delta` with confidence
    1 - alpha from the best threshold event. With `sigma_factor` < 1 the mechanism draws with
    sigma times `sigma_factor` while charging `rho` (the deliberately broken mechanism)."""
    started = time.perf_counter()
    charged = []

    def charge(spend, **params):
        charged.append(spend.rho)

    noisy = {}
    with broken_noise(1 / sigma_factor) if sigma_factor != 1 else _nothing():
        for name, count in (("D", GAUSSIAN_COUNT), ("D_prime", GAUSSIAN_COUNT + 1)):
            exact = np.full(trials, count, dtype=np.int64)
            noisy[name] = measure_module.measure_marginal(exact, ("a",), rho, charge).noisy
    sigma = privacy.gaussian_scale(rho)
    offsets = range(int(math.ceil(8 * sigma)) + 1)
    events = []
    for k in offsets:
        k_lo = int((noisy["D"] >= GAUSSIAN_COUNT + k).sum())
        k_hi = int((noisy["D_prime"] >= GAUSSIAN_COUNT + k).sum())
        events.append({"threshold": GAUSSIAN_COUNT + k, "count_D": k_lo, "count_D_prime": k_hi,
                       "epsilon_lower_bound": epsilon_lower_bound(
                           k_hi, k_lo, trials, delta, alpha / len(offsets))})
    best = max(events, key=lambda e: e["epsilon_lower_bound"])
    return {
        "mechanism": "as implemented" if sigma_factor == 1 else
                     f"broken (sigma {sigma_factor} of the charged value)",
        "audited": "measure.measure_marginal, one cell: count 40 in D, 41 in D'",
        "trials_per_table": trials, "rho": rho, "delta": delta, "confidence": 1 - alpha,
        "charged_rho_max": max(charged),
        "claimed_epsilon": privacy.epsilon_from_rho(rho, delta),
        "event": "noisy count >= threshold, the best of " + str(len(offsets)) + " thresholds",
        "threshold": best["threshold"], "count_D": best["count_D"],
        "count_D_prime": best["count_D_prime"],
        "epsilon_lower_bound": best["epsilon_lower_bound"],
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=12000, help="runs per table")
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--delta", type=float, default=1e-3)
    parser.add_argument("--alpha", type=float, default=1e-6)
    parser.add_argument("--calibration-trials", type=int, default=2000, help="runs per table")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--gaussian", action="store_true",
                        help="the gray-box audit of the Gaussian mechanism (gaussian_audit)")
    parser.add_argument("--gaussian-trials", type=int, default=400_000, help="runs per table")
    args = parser.parse_args()
    load_before = os.getloadavg()
    if args.gaussian:
        results = [gaussian_audit(args.gaussian_trials, args.rho, args.delta, args.alpha, factor)
                   for factor in (1.0, 0.7)]
        out = args.out or RESULTS / "audit_gaussian.json"
        out.write_text(json.dumps({"audits": results, "load_average_before": load_before,
                                   "cpus": os.cpu_count()}, indent=1) + "\n")
        for r in results:
            print(f"{r['mechanism']}: epsilon lower bound {r['epsilon_lower_bound']:.3f} "
                  f"(claimed {r['claimed_epsilon']:.3f}, delta {r['delta']}, "
                  f"{r['trials_per_table']} trials per table, {r['seconds']} s)")
        return
    args.out = args.out or RESULTS / "audit.json"
    results = [audit(args.trials, args.rho, args.delta, args.alpha, args.calibration_trials,
                     broken=b) for b in (False, True)]
    record = {"audits": results, "load_average_before": load_before,
              "load_average_after": os.getloadavg(), "cpus": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for r in results:
        print(f"{r['mechanism']}: epsilon lower bound {r['epsilon_lower_bound']:.3f} "
              f"(claimed {r['claimed_epsilon']:.3f}, delta {r['delta']}, {r['trials_per_table']} "
              f"trials per table, {r['seconds']} s)")


if __name__ == "__main__":
    main()
