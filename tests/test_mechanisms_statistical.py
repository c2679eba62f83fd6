"""The noise of the mechanisms has the distribution the privacy analysis assumes, checked by
sampling, with a stated false-failure rate and a check that a wrong scale would be caught.

- Exponential mechanism (`privacy.exponential_mechanism`: OpenDP's `make_noisy_max`, Gumbel
  noise, zCDP): index i is drawn with probability exp(epsilon q_i / (2 Delta)) / Z with
  epsilon = sqrt(8 rho), i.e. exp(q_i / scale) / Z. Chi-square goodness of fit on near-tied
  scores; each configuration's test has false-failure rate 5e-7 (1e-6 for the file's EM tests).
- PrivTree: a node at depth d with count c splits with probability P[Laplace(lambda) > theta - b],
  b = max(c - d delta, theta - delta), delta = lambda ln 2, lambda = 3 / epsilon (fanout 2,
  Zhang et al. Thm 1) and rho = epsilon^2 / 2 charged; per-node binomial tests, Bonferroni
  over the nodes to a false-failure rate of 1e-6 in total.
"""

import math

import numpy as np
import opendp.measurements as odp_measurements
import pytest
from scipy import stats

from dp_synth_assets.core import preprocess as pp
from dp_synth_assets.core.privacy import exponential_mechanism

from helpers import ChargeRecorder

# ------------------------------------------------------------------------- exponential mechanism

EM_ALPHA = 1e-6 / 2  # per configuration below
EM_DRAWS = 1200  # power >= 1 - 1e-6 against both wrong scales (asserted below) needs 1000
# (scores, rho, sensitivity): near-ties (equal and 0.05 scale apart) and one clear winner
EM_CASES = [
    (np.array([0.0, 0.25, 1.0, 1.0, 1.05, 2.0]), 0.5, 1.0),           # scale 1
    (np.array([0.0, 5.0, 20.0, 20.0, 21.0, 40.0]), 0.02, 4.0),        # scale 20, sensitivity 4
]


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def chi_square(counts: np.ndarray, p: np.ndarray) -> float:
    expected = counts.sum() * p
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("scores, rho, sensitivity", EM_CASES)
def test_exponential_mechanism_picks_with_probability_exp_epsilon_q_over_two_delta(
        scores, rho, sensitivity):
    """Empirical pick frequencies of `exponential_mechanism` match softmax(epsilon q / (2 Delta))
    (chi-square, false-failure rate 5e-7); the same draws reject the distributions of a scale
    2x too small and 2x too large, and the planned draw count has power >= 1 - 1e-6 against
    them (noncentral chi-square)."""
    epsilon = math.sqrt(8 * rho)
    claimed = softmax(epsilon * scores / (2 * sensitivity))
    picks = np.zeros(scores.size, dtype=np.int64)
    for _ in range(EM_DRAWS):
        index, spend = exponential_mechanism(scores, rho, sensitivity)
        picks[index] += 1
    # the scale is the one the spend reports, and the spend is rho
    assert math.isclose(spend.scale, sensitivity / math.sqrt(2 * rho), rel_tol=1e-12)
    assert spend.rho <= rho and math.isclose(spend.rho, rho, rel_tol=1e-12)
    assert np.allclose(claimed, softmax(scores / spend.scale))
    df = scores.size - 1
    critical = stats.chi2.ppf(1 - EM_ALPHA, df)
    assert chi_square(picks, claimed) < critical, (picks, EM_DRAWS * claimed)
    for wrong in (2.0, 0.5):  # noise scale 2x too small / too large
        alternative = softmax(wrong * epsilon * scores / (2 * sensitivity))
        noncentrality = EM_DRAWS * float(((alternative - claimed) ** 2 / claimed).sum())
        assert stats.ncx2.sf(critical, df, noncentrality) >= 1 - 1e-6
        assert chi_square(picks, alternative) > critical, wrong


# ------------------------------------------------------------------------------ PrivTree

PRIVTREE_RHO = 0.5
LEAF_CELLS = 64   # the tree over 2^6 cells, depth up to 6
MASS = 400        # in the node's sibling: every ancestor splits (P[not] < 1e-25)
# (count, depth) of the node [0, 64 / 2^depth): above, near and at the clamp theta - delta, and
# the trees built for each. OpenDP's exact Laplace sampler takes ~0.2-0.4 ms a draw and a tree
# 2-12 draws, so each node gets the fewest trees with which the wrong models it must catch are
# caught with power >= 1 - alpha (the band in the test; least trees: (3, 2) "scale / 2" 150,
# "no depth term" 90; (10, 3) "scale 2x" 70, "scale / 2" 250; (1, 3) "no clamp" 520),
# rounded up; the root (0, 0) splits with probability 1/2 under every model.
PRIVTREE_NODES = {(0, 0): 300, (3, 2): 200, (10, 3): 300, (1, 3): 650}
PRIVTREE_ALPHA = 1e-6 / len(PRIVTREE_NODES)


def laplace_exceeds(threshold: float, scale: float) -> float:
    """P[Laplace(scale) > threshold]."""
    if threshold >= 0:
        return 0.5 * math.exp(-threshold / scale)
    return 1 - 0.5 * math.exp(threshold / scale)


def split_probability(count: float, depth: int, scale: float, theta: float = pp.PRIVTREE_THETA,
                      with_depth_term: bool = True, with_clamp: bool = True) -> float:
    delta = scale * math.log(pp.PRIVTREE_FANOUT)
    biased = count - depth * delta if with_depth_term else count
    if with_clamp:
        biased = max(biased, theta - delta)
    return laplace_exceeds(theta - biased, scale)


@pytest.fixture(scope="module")
def privtree_noise():
    """The Laplace measurement `privtree_edges` builds for PRIVTREE_RHO, and its Spend."""
    built = []

    def capture(*args, **kwargs):
        meas = real(*args, **kwargs)
        built.append(meas)
        return meas

    real = odp_measurements.make_laplace
    odp_measurements.make_laplace = capture
    try:
        rec = ChargeRecorder()
        cells = np.zeros(pp.PRIVTREE_CELLS, dtype=np.int64)
        pp.privtree_edges(cells, "x", pp.ColumnSpec(kind="float", bounds=[0, 1],
                                                    binning="privtree"),
                          0.0, 1.0, PRIVTREE_RHO, rec)
    finally:
        odp_measurements.make_laplace = real
    assert len(built) == 1 and len(rec.calls) == 1
    return built[0], rec.calls[0][0]


def test_privtree_scale_and_charge_follow_zhang_et_al_for_the_rho_given(privtree_noise):
    """lambda = (2 beta - 1) / ((beta - 1) epsilon) with epsilon = sqrt(2 rho), and the charge
    is epsilon^2 / 2 = rho for that lambda; the captured OpenDP measurement has that scale
    (its map at sensitivity 1 is 1 / lambda)."""
    noise, spend = privtree_noise
    epsilon = math.sqrt(2 * PRIVTREE_RHO)
    assert math.isclose(spend.scale, 3.0 / epsilon, rel_tol=1e-12)
    assert math.isclose(spend.rho, PRIVTREE_RHO, rel_tol=1e-12)
    assert math.isclose(spend.rho, pp.privtree_epsilon(spend.scale) ** 2 / 2, rel_tol=1e-12)
    assert spend.sensitivity == 1.0
    assert math.isclose(noise.map(1.0), 1.0 / spend.scale, rel_tol=1e-9)


def test_privtree_node_splits_with_probability_laplace_exceeds_theta_minus_biased_count(
        privtree_noise):
    """For each (count, depth): the node [0, 64 / 2^depth) holds `count` rows (in its first cell)
    and its sibling MASS rows, so every ancestor splits; the tree stops one level below the
    node (max_depth = depth + 1) to keep runs short; over the node's PRIVTREE_NODES trees built by
    `privtree_split_decisions` with the Laplace measurement `privtree_edges` uses, the node's
    split frequency matches P[Laplace(lambda) > theta - b] (binomial, two-sided, Bonferroni).
    The acceptance intervals exclude, with margin, what a 2x noise scale, a biased count without
    the depth term or without the clamp would give, so those errors would fail this test."""
    noise, spend = privtree_noise
    scale = spend.scale
    wrong_models = {
        "scale 2x": lambda c, d: split_probability(c, d, 2 * scale),
        "scale / 2": lambda c, d: split_probability(c, d, scale / 2),
        "no depth term": lambda c, d: split_probability(c, d, scale, with_depth_term=False),
        "no clamp": lambda c, d: split_probability(c, d, scale, with_clamp=False),
    }
    z = stats.norm.isf(PRIVTREE_ALPHA / 2)
    caught = {name: False for name in wrong_models}
    for (count, depth), runs in PRIVTREE_NODES.items():
        width = LEAF_CELLS >> depth
        cells = np.zeros(LEAF_CELLS, dtype=np.int64)
        cells[0] = count
        if depth:
            cells[width] = MASS
        reached = split = 0
        for _ in range(runs):
            leaves = pp.privtree_split_decisions(cells, scale, pp.PRIVTREE_THETA, None, depth + 1,
                                                 noise)
            first_leaf = leaves[0]
            if first_leaf.stop <= width:
                reached += 1
                split += first_leaf.stop < width
        assert reached == runs
        p = split_probability(count, depth, scale)
        low, high = stats.binomtest(split, reached).proportion_ci(1 - PRIVTREE_ALPHA, "exact")
        assert low <= p <= high, (count, depth, split / reached, p)
        for name, model in wrong_models.items():
            q = model(count, depth)
            # q outside the band p +- (z sd(p) + z sd(q)): the test rejects q with power
            # >= 1 - alpha (normal approximation)
            sd = math.sqrt(p * (1 - p) / reached) + math.sqrt(q * (1 - q) / reached)
            caught[name] |= abs(q - p) > z * sd
    assert all(caught.values()), caught
