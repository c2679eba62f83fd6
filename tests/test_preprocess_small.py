"""DP bounds on small tables (issue 16): the bucket histogram gets the task's whole rho when the
parts could not move a bound, a neighbour bucket joins the span at NEIGHBOUR_Z sigma, and the
bucket counts are the density. The noise is replaced by none (exact counts, the real scale) so
the post-processing is checked exactly."""

import numpy as np
import pytest

from dp_synth_assets.core import preprocess as pp
from dp_synth_assets.core.config import ColumnSpec
from dp_synth_assets.core.privacy import Spend, gaussian_scale

FLOAT = ColumnSpec(kind="float")


@pytest.fixture()
def noiseless(monkeypatch):
    """gaussian_counts without noise; records the shape of every histogram drawn."""
    shapes = []

    def exact(counts, rho):
        counts = np.asarray(counts)
        shapes.append(counts.shape)
        return counts.astype(float), Spend("gaussian_counts", rho, 0.0, 1.0, gaussian_scale(rho))

    monkeypatch.setattr(pp, "gaussian_counts", exact)
    return shapes


def part_histogram(rows: dict[float, int]) -> np.ndarray:
    """The exact (bucket x part) histogram of `exact_aggregates` with `rows[x]` rows at x, every
    row in the first part of its bucket (enough for the bucket counts)."""
    edges = pp.bucket_edges(FLOAT)
    hist = np.zeros((edges.size + 1, pp.BOUNDS_PARTS), dtype=np.int64)
    for x, n in rows.items():
        hist[int(np.searchsorted(edges, x, side="right")), 0] += n
    return hist.ravel()


class Charges(list):
    def __call__(self, spend, **params):
        self.append(spend)


# rho 0.01: sigma 10 per histogram at rho / 2, 10 / sqrt(2) for their mean; 18 rows in [16, 32)
# lie between 2 and 3 of the mean's sigma (and below 2 of one histogram's)
SMALL = {5.0: 300, 10.0: 300, 20.0: 18}


def test_small_table_detects_its_buckets_at_the_whole_rho_and_widens_at_two_sigma(noiseless):
    charges = Charges()
    (low, high), pieces = pp.bounds_and_density(part_histogram(SMALL), "fare", FLOAT, 0.01,
                                                charges)
    buckets = pp.bucket_edges(FLOAT).size + 1
    assert noiseless == [(buckets,), (buckets,)]  # the bucket histogram twice, no parts
    assert len(charges) == 1 and charges[0].rho == pytest.approx(0.01)
    assert charges[0].scale == pytest.approx(10.0)  # each histogram's own (OpenDP's map)
    assert (low, high) == (4.0, 32.0)  # [16, 32) joins: 18 > 2 sigma = 14.1


def test_small_table_density_is_the_noisy_bucket_counts(noiseless):
    _, pieces = pp.bounds_and_density(part_histogram(SMALL), "fare", FLOAT, 0.01, Charges())
    assert pieces == ((4.0, 8.0, 300.0), (8.0, 16.0, 300.0), (16.0, 32.0, 18.0))


def test_large_table_spends_half_its_rho_on_parts_that_tighten_the_bounds(noiseless):
    charges = Charges()
    (low, high), pieces = pp.bounds_and_density(part_histogram(SMALL), "fare", FLOAT, 100.0,
                                                charges)
    buckets = pp.bucket_edges(FLOAT).size + 1
    assert noiseless == [(buckets,), (buckets, pp.BOUNDS_PARTS)]
    assert charges[0].rho == pytest.approx(100.0)
    assert low == 4.0 and high == pytest.approx(16.5)  # every row of [16, 32) is in its first part
    assert len(pieces) > 3


def test_can_tighten_only_when_one_part_of_noise_fits_in_the_clamp_share():
    sigma = 10.0
    edge = pp.Z_TIGHTEN * sigma / pp.CLAMP_SHARE
    assert pp.can_tighten(edge, sigma) and not pp.can_tighten(edge * 0.99, sigma)
