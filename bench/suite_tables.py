"""The development suite's tables beyond ../shared/datasets (issue 34): the shapes a default has to
survive, public tables that ship inside a package we install and generated ones whose structure
is known. No network and no private data: each function returns a frame, the same for a seed.

Discretized (integer codes 0..k-1 with a public domain, as adult):
- `digits`: UCI's optical handwritten digits as scikit-learn bundles them (`load_digits`), 1,797
  rows x 64 pixel intensities (codes 0..16) and the digit (0..9). The domain is the dataset's
  documented range, so many codes are never used (a third of the pixels are all or nearly all 0):
  a small discretized table with many unused codes;
- `binary_mix`: 16 binary columns, 6,000 rows, drawn from a mixture of 4 latent classes, each
  column's probability of 1 per class from Beta(0.5, 0.5): every pair depends on every other
  through the class (higher-order structure that no tree holds), and the pairs are small;
- `binary_xor`: 20 binary columns, 20,000 rows: x0..x9 a chain (each copies its predecessor with
  probability 0.8, else a biased coin), x10..x19 the exclusive or of two of x0..x9 flipped with
  probability 0.05: dependence a pair sees only partly (3-way structure).

Raw (only each column's kind declared: categories and bounds are learned with DP):
- `cancer`: the Wisconsin diagnostic breast cancer table as scikit-learn bundles it
  (`load_breast_cancer`), 569 rows x 30 strongly correlated measurements and the diagnosis: a
  small raw table;
- `orders`: 20,000 order lines: `product` (300 values, Zipf), its `department` (15, a function of
  the product), `store` (150 values), its `city` (25, a function of the store), `quantity`
  (integer, by department) and `unit_price` (float, by product): categoricals of 100-1,000 values;
- `trips`: 20,000 taxi-like trips of one month (March 2024): `pickup` and `dropoff` timestamps
  (dropoff after pickup by a lognormal time, declared as the constraint `dropoff >= pickup`),
  `passengers`, `payment`, `distance_km` (float, grows with the trip's duration): timestamps
  within a month and an order between columns;
- `sessions`: 20,000 web sessions over ten days (2024-05-06 to 2024-05-15): `started` and `ended`
  timestamps (declared `ended >= started`), `device` (3), `country` (60, Zipf), `pages` (integer,
  grows with the session's length): timestamps spanning days and a daily cycle.
"""

import numpy as np
import pandas as pd

DIGITS_CODES = 17  # load_digits: "each element is an integer in the range 0..16"


def digits() -> tuple[pd.DataFrame, dict[str, int]]:
    from sklearn.datasets import load_digits

    frame = load_digits(as_frame=True).frame.rename(columns={"target": "digit"}).astype(np.int64)
    domain = {c: (10 if c == "digit" else DIGITS_CODES) for c in frame.columns}
    return frame, domain


def binary_mix(rows: int = 6_000, seed: int = 0) -> tuple[pd.DataFrame, dict[str, int]]:
    rng = np.random.default_rng([seed, 34, 1])
    classes = rng.choice(4, size=rows, p=[0.4, 0.3, 0.2, 0.1])
    p = rng.beta(0.5, 0.5, size=(4, 16))
    bits = (rng.random((rows, 16)) < p[classes]).astype(np.int64)
    frame = pd.DataFrame(bits, columns=[f"b{j}" for j in range(16)])
    return frame, {c: 2 for c in frame.columns}


def binary_xor(rows: int = 20_000, seed: int = 0) -> tuple[pd.DataFrame, dict[str, int]]:
    rng = np.random.default_rng([seed, 34, 2])
    x = np.zeros((rows, 20), dtype=np.int64)
    x[:, 0] = rng.random(rows) < 0.5
    for j in range(1, 10):
        keep = rng.random(rows) < 0.8
        x[:, j] = np.where(keep, x[:, j - 1], rng.random(rows) < 0.3 + 0.04 * j)
    parents = [tuple(int(i) for i in rng.choice(10, 2, replace=False)) for _ in range(10)]
    for j, (a, b) in enumerate(parents, start=10):
        x[:, j] = x[:, a] ^ x[:, b] ^ (rng.random(rows) < 0.05)
    frame = pd.DataFrame(x, columns=[f"x{j}" for j in range(20)])
    return frame, {c: 2 for c in frame.columns}


def cancer() -> tuple[pd.DataFrame, dict[str, str]]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer(as_frame=True)
    frame = data.frame.rename(columns=lambda c: c.replace(" ", "_"))
    frame["target"] = np.asarray(data.target_names)[frame["target"]]
    frame = frame.rename(columns={"target": "diagnosis"})
    kinds = {c: ("categorical" if c == "diagnosis" else "float") for c in frame.columns}
    return frame, kinds


def zipf(rng: np.random.Generator, k: int, rows: int, s: float = 1.1) -> np.ndarray:
    w = 1.0 / np.arange(1, k + 1) ** s
    return rng.choice(k, size=rows, p=w / w.sum())


def orders(rows: int = 20_000, seed: int = 0) -> tuple[pd.DataFrame, dict[str, str]]:
    rng = np.random.default_rng([seed, 34, 3])
    product = zipf(rng, 300, rows)
    department_of = rng.integers(0, 15, size=300)
    price_of = rng.lognormal(np.log(20), 0.9, size=300)
    store = rng.choice(150, size=rows, p=rng.dirichlet(np.full(150, 2.0)))
    city_of = rng.integers(0, 25, size=150)
    department = department_of[product]
    quantity = 1 + rng.poisson(0.5 + 0.3 * (department % 5), size=rows)
    price = np.round(price_of[product] * rng.lognormal(0, 0.05, size=rows), 2)
    frame = pd.DataFrame({
        "product": [f"P{p:04d}" for p in product],
        "department": [f"dept_{d:02d}" for d in department],
        "store": [f"S{s:03d}" for s in store],
        "city": [f"city_{c:02d}" for c in city_of[store]],
        "quantity": quantity.astype(np.int64), "unit_price": price})
    kinds = {"product": "categorical", "department": "categorical", "store": "categorical",
             "city": "categorical", "quantity": "integer", "unit_price": "float"}
    return frame, kinds


def hour_weights() -> np.ndarray:
    """A daily cycle: low at night, peaks at 8h and 18h."""
    h = np.arange(24)
    return 0.2 + np.exp(-((h - 8) ** 2) / 4) + 1.3 * np.exp(-((h - 18) ** 2) / 6)


def instants(rng: np.random.Generator, first: str, days: int, rows: int) -> np.ndarray:
    start = pd.date_range(first, periods=days, freq="D")
    day_w = np.where(start.dayofweek >= 5, 0.6, 1.0)
    day = rng.choice(days, size=rows, p=day_w / day_w.sum())
    hw = hour_weights()
    hour = rng.choice(24, size=rows, p=hw / hw.sum())
    return (start.values[day] + hour.astype("timedelta64[h]")
            + rng.integers(0, 3600, size=rows).astype("timedelta64[s]"))


def trips(rows: int = 20_000, seed: int = 0) -> tuple[pd.DataFrame, dict[str, str]]:
    rng = np.random.default_rng([seed, 34, 4])
    pickup = instants(rng, "2024-03-01", 31, rows)
    seconds = np.clip(rng.lognormal(np.log(12 * 60), 0.6, size=rows), 60, 3 * 3600).astype(int)
    frame = pd.DataFrame({
        "pickup": pd.to_datetime(pickup),
        "dropoff": pd.to_datetime(pickup + seconds.astype("timedelta64[s]")),
        "passengers": rng.choice([1, 2, 3, 4, 5], size=rows, p=[0.7, 0.15, 0.07, 0.05, 0.03]),
        "payment": rng.choice(["card", "cash", "other"], size=rows, p=[0.7, 0.27, 0.03]),
        "distance_km": np.round(seconds / 60 * rng.lognormal(np.log(0.45), 0.25, size=rows), 2)})
    kinds = {"pickup": "datetime", "dropoff": "datetime", "passengers": "integer",
             "payment": "categorical", "distance_km": "float"}
    return frame, kinds


def sessions(rows: int = 20_000, seed: int = 0) -> tuple[pd.DataFrame, dict[str, str]]:
    rng = np.random.default_rng([seed, 34, 5])
    started = instants(rng, "2024-05-06", 10, rows)
    device = rng.choice(["mobile", "desktop", "tablet"], size=rows, p=[0.6, 0.3, 0.1])
    scale = np.where(device == "desktop", 9 * 60, np.where(device == "tablet", 6 * 60, 3 * 60))
    seconds = np.clip(rng.exponential(scale), 5, 4 * 3600).astype(int)
    pages = 1 + rng.poisson(seconds / 90)
    frame = pd.DataFrame({
        "started": pd.to_datetime(started),
        "ended": pd.to_datetime(started + seconds.astype("timedelta64[s]")),
        "device": device,
        "country": [f"C{c:02d}" for c in zipf(rng, 60, rows, 1.3)],
        "pages": pages.astype(np.int64)})
    kinds = {"started": "datetime", "ended": "datetime", "device": "categorical",
             "country": "categorical", "pages": "integer"}
    return frame, kinds


# name -> (function, discretized?, declared constraints)
TABLES = {
    "digits": (digits, True, []),
    "binary_mix": (binary_mix, True, []),
    "binary_xor": (binary_xor, True, []),
    "cancer": (cancer, False, []),
    "orders": (orders, False, []),
    "trips": (trips, False, ["dropoff >= pickup"]),
    "sessions": (sessions, False, ["ended >= started"]),
}
