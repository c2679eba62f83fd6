"""Measurements: noisy marginals, the optimal budget split, and the consistency step.

A `Measurement` is one noisy marginal: the clique, the noisy count array (shaped by the clique's
domain) and the Gaussian noise scale sigma that produced it (and its rho). Measurements are public:
everything downstream of them is post-processing.

- `optimal_split` is ABSyn Eq. 10-11 (PrivSyn section 4.2): minimizing the expected l1 noise error
  sum_i c_i sqrt(1 / (pi rho_i)) subject to sum_i rho_i = rho gives rho_i = rho c_i^(2/3) / sum c^(2/3).
- `measure_marginal` is the one mechanism site of a noisy marginal: every selection method and
  the `measurements` stage draw through it (`measure` is it over a plan of cliques).
- `make_consistent` is ABSyn section VI.A.2.b: first a common total (inverse-variance weighted mean
  of every measurement's total), then, per attribute, the inverse-variance weighted combination of
  every measurement's projection onto it, pushed back into each measurement by spreading the
  difference evenly over the cells that project to each value. With a common total, adjusting one
  attribute leaves every other attribute's projections unchanged, so one pass makes all
  measurements agree on every shared attribute. Negative cells are kept (mbi's least-squares fit
  handles them; clipping would bias the estimate). Sigma is kept as drawn: it is the conservative
  scale for the estimator.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from .domain import Clique
from .privacy import gaussian_counts


@dataclass(frozen=True)
class Measurement:
    clique: Clique
    noisy: np.ndarray = field(repr=False)
    sigma: float
    rho: float

    @property
    def cells(self) -> int:
        return int(self.noisy.size)

    def to_dict(self) -> dict:
        return {"clique": list(self.clique), "shape": list(self.noisy.shape), "sigma": self.sigma,
                "rho": self.rho, "noisy": self.noisy.ravel().round(6).tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> "Measurement":
        noisy = np.asarray(d["noisy"], dtype=np.float64).reshape(d["shape"])
        return cls(tuple(d["clique"]), noisy, float(d["sigma"]), float(d["rho"]))


def clique_size(clique: Clique, domain: dict[str, int]) -> int:
    return math.prod(domain[a] for a in clique)


def optimal_split(rho: float, sizes: list[int]) -> list[float]:
    """ABSyn Eq. 11: rho_i = rho c_i^(2/3) / sum_j c_j^(2/3)."""
    weights = np.asarray(sizes, dtype=np.float64) ** (2.0 / 3.0)
    return (rho * weights / weights.sum()).tolist()


def expected_noise_error(rho: float, sizes: list[int]) -> float:
    """ABSyn Eq. 10 at the optimum: sum_i c_i sqrt(1/(pi rho_i)) = (sum c^(2/3))^(3/2) / sqrt(pi rho)."""
    if not sizes:
        return 0.0
    s = float(np.sum(np.asarray(sizes, dtype=np.float64) ** (2.0 / 3.0)))
    return s ** 1.5 / math.sqrt(math.pi * rho)


def measure_marginal(exact: np.ndarray, clique: Clique, rho: float, charge,
                     **params) -> Measurement:
    """One noisy marginal: the discrete Gaussian mechanism at `rho` (`privacy.gaussian_counts`,
    an OpenDP measurement at L2 sensitivity 1: under add/remove-one-row neighbours a count array
    changes by 1 in one cell, DESIGN.md section 3), then `charge(spend, clique=[...], **params)`
    with the rho its privacy map reports, before anything is returned, then the `Measurement`.

    Guarantee: the returned measurement is rho-zCDP (sigma = 1 / sqrt(2 rho)) in `exact` and its
    `rho` is exactly what was charged. `exact` may be any integer count array over the clique's
    cells whose every row counts in one cell (ppsyn passes its partition-cell sums); its shape is
    kept. Every mechanism site that publishes a `Measurement` calls this; the preprocessing
    stage's category counts and DP-bounds histogram, which are not marginals of the encoded
    domain, call `gaussian_counts` directly (tests/test_measure_marginal.py checks both)."""
    noisy, spend = gaussian_counts(exact, rho)
    charge(spend, clique=list(clique), **params)
    return Measurement(tuple(clique), noisy, spend.scale, spend.rho)


def measure(exact: dict[Clique, np.ndarray], rhos: dict[Clique, float],
            charge) -> list[Measurement]:
    """The noisy marginal of each clique of `rhos` at its rho (`measure_marginal`), charged in
    the plan's order, each right after its draw."""
    return [measure_marginal(exact[clique], clique, rho, charge) for clique, rho in rhos.items()]


def noisy_total(measurements: list[Measurement]) -> float:
    """Inverse-variance weighted mean of the measurements' totals (each total has variance
    cells * sigma^2): the noisy row count."""
    weights = np.array([1.0 / (m.cells * m.sigma ** 2) for m in measurements])
    totals = np.array([m.noisy.sum() for m in measurements])
    return float((weights * totals).sum() / weights.sum())


def make_consistent(measurements: list[Measurement]) -> list[Measurement]:
    """ABSyn section VI.A.2.b consistency (see the module docstring)."""
    if not measurements:
        return []
    total = noisy_total(measurements)
    arrays = [m.noisy + (total - m.noisy.sum()) / m.cells for m in measurements]
    attributes = sorted({a for m in measurements for a in m.clique})
    for attr in attributes:
        members = [i for i, m in enumerate(measurements) if attr in m.clique]
        if len(members) < 2:
            continue
        projections, weights = [], []
        for i in members:
            m = measurements[i]
            axis = m.clique.index(attr)
            others = tuple(k for k in range(len(m.clique)) if k != axis)
            projections.append(arrays[i].sum(axis=others) if others else arrays[i])
            # per-cell variance of the projection: sigma^2 times the cells summed into each value
            weights.append(1.0 / (m.sigma ** 2 * (m.cells // m.noisy.shape[axis])))
        weights = np.asarray(weights)
        combined = np.tensordot(weights, np.stack(projections), axes=1) / weights.sum()
        for i, proj in zip(members, projections):
            m = measurements[i]
            axis = m.clique.index(attr)
            spread = m.cells // m.noisy.shape[axis]
            shape = [1] * len(m.clique)
            shape[axis] = -1
            arrays[i] = arrays[i] + ((combined - proj) / spread).reshape(shape)
    return [Measurement(m.clique, a, m.sigma, m.rho) for m, a in zip(measurements, arrays)]



@dataclass(frozen=True)
class Measurements:
    """The measure stage's public output and the fit's input: the consistent measurements
    (`make_consistent`) and the noisy row count they agree on (`noisy_total` of them). Stored as
    measurements.json: `{"noisy_total": ..., "measurements": [Measurement.to_dict(), ...]}`
    (noisy counts rounded to 6 decimals)."""

    measurements: tuple[Measurement, ...]
    noisy_total: float

    def to_dict(self) -> dict:
        return {"noisy_total": self.noisy_total,
                "measurements": [m.to_dict() for m in self.measurements]}

    @classmethod
    def from_dict(cls, d: dict) -> "Measurements":
        return cls(tuple(Measurement.from_dict(m) for m in d["measurements"]),
                   float(d["noisy_total"]))
