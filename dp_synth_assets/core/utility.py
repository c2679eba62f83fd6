"""The utility report: how well a synthetic table reproduces its private source (owner-only).

Everything here works on ENCODED tables (integer codes 0..k-1 per column, `domain` giving k), the
form every method and engine of the project sees, so numeric columns are compared on their bins.
Three tables take part: `train_real` (the source rows the synthesizer was fitted on, possibly a
sample), `test_real` (source rows it never saw, split off before synthesis) and `synthetic`.
The report reads the private source: it is for the data owner, never for the public zone.

The metrics are those of the benchmark paper, section 8.3 (benchmark-dp-tabular-synthesis.txt),
as corrected in SEED-NOTES ("Benchmark framework"):

- Fidelity (`pair_tvd`, `fidelity`): the total variation distance 1/2 * L1 between the normalized
  2-way marginals of two tables, for every pair of distinct columns (i < j; the paper's sum over
  i <= j would add the 1-way TVDs, SEED-NOTES excludes them), averaged (the paper writes a sum but
  reports averages).
- Query error (`triples`, `box_queries`, `query_error`): E_r |q_r(D_syn) - q_r(D_test)| over
  queries q_r on 3-way marginals, each the fraction of rows in a box: a range [lo, hi] on an
  ordered (binned numeric) column and a single value on a categorical one (§8.3). The paper does
  not say how queries are drawn. Ours: for each of the (fixed, seeded) triples, draw
  `queries_per_triple` queries, each column's part drawn uniformly from that column's query set
  (all k(k+1)/2 ranges of an ordered column, all k values of a categorical one), so the sample mean
  estimates the mean over every such box; `queries_per_triple=None` enumerates all boxes and gives
  that mean exactly. Uniform draws are data-independent (the workload does not depend on any
  table). Answers are fractions of each table's rows, so the error is on the [0, 1] scale. The
  paper averages over "the set of all 3-way marginals": `triples` returns all of them when there
  are at most `count` (200 by default: every triple of a 12-column table, 220 of 455 for 15), else
  a uniform sample of `count` distinct triples with a fixed seed. `query_error` also reports the
  mean 3-way marginal TVD over the same triples (the k-way TVD ABSyn section VIII reports).
- ML efficiency (`ml_efficiency`): the mean F1 of classifiers trained on synthetic data and tested
  on the held-out `test_real` (§8.3; the paper uses MLP, CatBoost, XGBoost and Random Forest).
  Ours are three sklearn models that train in seconds: logistic regression (a linear baseline;
  lbfgs, 300 iterations), random forest (in the paper's set; 30 trees, leaves of at least 5 rows)
  and histogram gradient boosting (sklearn's counterpart of XGBoost/CatBoost; 100 iterations,
  sklearn's early stopping above 10,000 rows). Each is trained once on `synthetic` and once on
  `train_real` (the paper's "Ground Truth" row of Table 2), at most `MAX_TRAIN_ROWS` rows each (a
  seeded uniform sample without replacement), tested on at most `MAX_TEST_ROWS` rows of
  `test_real`. F1 is macro-averaged over the classes present in the test labels or the
  predictions, for binary targets too: codes carry no "positive" class, and binary F1 would depend
  on the encoding. A class the synthetic data lacks is never predicted and scores F1 0, which is
  the point. A training table with a single target class gives a constant predictor (noted in the
  table). Features: the linear model sees
  one-hot categorical codes and each ordered column as its code scaled to [0, 1] (plus an
  indicator per trailing unordered code, e.g. a null code); the tree models see the raw codes,
  gradient boosting marking unordered columns of at most 255 codes as categorical.

Reference table. §8.3 compares the synthetic table with the TEST data ("we use the test dataset
instead of the training dataset for evaluation for this and the remaining metrics") and reports a
"Ground Truth" row comparing real data with test data (Table 2). `utility_report` follows it: with
at least `MIN_TEST_ROWS` test rows, fidelity, query error and 3-way TVD are against `test_real`, and
the same metrics for `train_real` against `test_real` are the baseline (the sampling floor a
perfect synthesizer would reach); with fewer test rows they are against `train_real` and there is
no baseline. Fidelity against `train_real` (what the synthesizer saw) is always reported too.

Ordered columns. `ordinal` names the columns whose codes are ordered; a mapping column -> o says
that only the first o codes are ordered (a nullable binned column: bins, then the null code), the
rest being treated as categorical values (point queries, one-hot indicators).

Cost (2 busy cores, 50,000 x 12 table, 10,000 test rows): 2-way TVDs 0.02 s, 200 triples x 64
queries 0.2 s, ML efficiency 3-5 s, the two figures 1.5-3 s; the whole report 4-7 s. The
classifiers run with n_jobs=1 and, while fitting and predicting, one OpenMP/BLAS thread
(threadpoolctl, restored afterwards): gradient boosting's OpenMP threads on a loaded machine made
it 5x slower, not faster.

Files (`write_owner_only`, `report_document`, `report_html`): the report is exact, not DP, so it
lives only in files the owner alone can read (0600 in 0700 folders): `report.json`, the two PNGs
and `report.html`, one self-contained page (summary, ML table, both figures inline).

Figures (`histograms_png`, `tvd_heatmap_png`) are drawn on a `matplotlib.figure.Figure` with an Agg
canvas, never through pyplot, so no global backend or figure registry is touched. Everything is
deterministic given `seed` (sklearn models run with n_jobs=1).
"""

import io
import itertools
import math
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

Table = pd.DataFrame | Mapping[str, np.ndarray]
Triple = tuple[str, str, str]
Ordinal = Collection[str] | Mapping[str, int]

MIN_TEST_ROWS = 20              # fewer held-out rows: no ML efficiency, metrics against train_real
MAX_TRAIN_ROWS = 20_000         # per training table for the classifiers (seeded sample above)
MAX_TEST_ROWS = 100_000         # rows of test_real the classifiers are scored on
DEFAULT_TRIPLES = 200
DEFAULT_QUERIES_PER_TRIPLE = 64
MAX_EXHAUSTIVE_QUERIES = 1_000_000   # boxes per triple when queries_per_triple=None
MAX_DENSE_CELLS = 1 << 22            # larger marginals are counted sparsely (np.unique)
CLASSIFIERS = ("logistic_regression", "random_forest", "hist_gradient_boosting")

DPI = 100
HIST_COLUMNS = 4                # panels per row of the histogram grid
HIST_PANEL_INCHES = (3.6, 2.5)  # width, height of one panel
HIST_LEGEND_INCHES = 0.5        # strip on top for the title and legend
HIST_MAX_TICK_LABELS = 12       # label every code up to this many codes, else a few code ticks
REAL_COLOUR, SYNTHETIC_COLOUR = "#4c72b0", "#dd8452"


# ---------------------------------------------------------------------------------------------
# Tables and marginals


def encoded(table: Table, domain: Mapping[str, int], name: str = "table") -> dict[str, np.ndarray]:
    """The domain's columns of `table` as int64 code arrays, checked to lie in 0..k-1."""
    out: dict[str, np.ndarray] = {}
    lengths = set()
    for column, k in domain.items():
        if column not in table:
            raise ValueError(f"{name} has no column {column!r} (its domain lists it)")
        values = np.asarray(table[column])
        if values.dtype.kind not in "iub":
            if values.dtype.kind == "f" and np.all(np.isfinite(values)) \
                    and np.all(values == np.round(values)):
                values = values.astype(np.int64)
            else:
                raise ValueError(f"{name}[{column!r}] must hold integer codes, not {values.dtype}")
        values = values.astype(np.int64, copy=False)
        if values.size and (values.min() < 0 or values.max() >= k):
            raise ValueError(f"{name}[{column!r}] has codes outside 0..{k - 1} "
                             f"(min {values.min()}, max {values.max()})")
        out[column] = values
        lengths.add(values.shape[0])
    if len(lengths) > 1:
        raise ValueError(f"{name}: columns of different lengths {sorted(lengths)}")
    return out


def _rows(codes: Mapping[str, np.ndarray]) -> int:
    return next(iter(codes.values())).shape[0] if codes else 0


def _keys(codes: Mapping[str, np.ndarray], attrs: Sequence[str], domain: Mapping[str, int]) -> np.ndarray:
    """Row-major cell index of each row in the marginal over `attrs`."""
    if math.prod(domain[a] for a in attrs) >= 2**62:
        raise ValueError(f"marginal {list(attrs)} has too many cells to index")
    key = np.zeros(_rows(codes), dtype=np.int64)
    for a in attrs:
        key = key * domain[a] + codes[a]
    return key


def _distribution(codes: Mapping[str, np.ndarray], attrs: Sequence[str],
                  domain: Mapping[str, int]) -> np.ndarray:
    """Normalized marginal over `attrs`, shaped by their domain sizes."""
    shape = tuple(domain[a] for a in attrs)
    n = _rows(codes)
    counts = np.bincount(_keys(codes, attrs, domain), minlength=math.prod(shape))
    return (counts / n).reshape(shape)


def _tvd(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], attrs: Sequence[str],
         domain: Mapping[str, int]) -> float:
    """1/2 * L1 between the normalized marginals over `attrs` of two tables."""
    if math.prod(domain[x] for x in attrs) <= MAX_DENSE_CELLS:
        return 0.5 * float(np.abs(_distribution(a, attrs, domain)
                                  - _distribution(b, attrs, domain)).sum())
    ka, kb = _keys(a, attrs, domain), _keys(b, attrs, domain)
    cells, inverse = np.unique(np.concatenate([ka, kb]), return_inverse=True)
    pa = np.bincount(inverse[:ka.size], minlength=cells.size) / ka.size
    pb = np.bincount(inverse[ka.size:], minlength=cells.size) / kb.size
    return 0.5 * float(np.abs(pa - pb).sum())


def _nonempty(codes: Mapping[str, np.ndarray], name: str) -> None:
    if _rows(codes) == 0:
        raise ValueError(f"{name} has no rows")


def pair_tvd(real: Table, synthetic: Table, domain: Mapping[str, int]) -> dict[tuple[str, str], float]:
    """TVD of the 2-way marginal of every pair of distinct columns (i < j in domain order)."""
    r, s = encoded(real, domain, "real"), encoded(synthetic, domain, "synthetic")
    _nonempty(r, "real")
    _nonempty(s, "synthetic")
    return {(a, b): _tvd(r, s, (a, b), domain) for a, b in itertools.combinations(domain, 2)}


def fidelity(real: Table, synthetic: Table, domain: Mapping[str, int]) -> float:
    """The paper's fidelity error (§8.3): the mean 2-way TVD over all pairs of distinct columns."""
    if len(domain) < 2:
        raise ValueError("fidelity needs at least two columns")
    return float(np.mean(list(pair_tvd(real, synthetic, domain).values())))


def column_comparison(real: Table, synthetic: Table, domain: Mapping[str, int]) -> list[dict]:
    """Per column: its 1-way TVD and both normalized distributions (JSON-safe lists)."""
    r, s = encoded(real, domain, "real"), encoded(synthetic, domain, "synthetic")
    _nonempty(r, "real")
    _nonempty(s, "synthetic")
    out = []
    for column, k in domain.items():
        p = _distribution(r, (column,), domain)
        q = _distribution(s, (column,), domain)
        out.append({"column": column, "codes": int(k), "tvd": 0.5 * float(np.abs(p - q).sum()),
                    "real": [float(x) for x in p], "synthetic": [float(x) for x in q]})
    return out


# ---------------------------------------------------------------------------------------------
# 3-way triples and queries


def triples(domain: Mapping[str, int], count: int = DEFAULT_TRIPLES, seed: int = 0) -> list[Triple]:
    """All triples of distinct columns (domain order within a triple) when there are at most
    `count`, else `count` distinct ones drawn uniformly with `np.random.default_rng(seed)`; sorted
    by column position."""
    columns = list(domain)
    d = len(columns)
    total = math.comb(d, 3)
    if total <= count:
        return [tuple(t) for t in itertools.combinations(columns, 3)]
    rng = np.random.default_rng(seed)
    if total <= 4 * count:
        every = list(itertools.combinations(range(d), 3))
        chosen = sorted(every[i] for i in rng.choice(total, size=count, replace=False))
    else:  # rejection: each draw is a new triple with probability >= 3/4
        seen: set[tuple[int, ...]] = set()
        while len(seen) < count:
            seen.add(tuple(sorted(int(i) for i in rng.choice(d, size=3, replace=False))))
        chosen = sorted(seen)
    return [tuple(columns[i] for i in t) for t in chosen]


def ordered_codes(ordinal: Ordinal, domain: Mapping[str, int]) -> dict[str, int]:
    """Column -> number of leading ordered codes (0 for categorical columns)."""
    unknown = [c for c in ordinal if c not in domain]
    if unknown:
        raise ValueError(f"ordinal names columns not in the domain: {unknown}")
    if isinstance(ordinal, Mapping):
        out = {c: int(ordinal.get(c, 0)) for c in domain}
    else:
        out = {c: (domain[c] if c in ordinal else 0) for c in domain}
    for c, o in out.items():
        if not 0 <= o <= domain[c]:
            raise ValueError(f"ordinal[{c!r}] = {o} is outside 0..{domain[c]}")
    return out


def column_query_set(k: int, ordered: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of every query part on one column: each range [lo, hi] of its first `ordered`
    codes, then each later code as a point [v, v]. A categorical column (ordered = 0) has k points."""
    lo, hi = np.triu_indices(ordered)
    points = np.arange(ordered, k)
    return (np.concatenate([lo, points]).astype(np.int64),
            np.concatenate([hi, points]).astype(np.int64))


@dataclass(frozen=True, eq=False)
class TripleQueries:
    """Box queries on one 3-way marginal: row i counts the rows with lo[i, j] <= code_j <= hi[i, j]
    for the three columns j of `attrs` (bounds inclusive)."""

    attrs: Triple
    lo: np.ndarray  # (queries, 3) int64
    hi: np.ndarray


def box_queries(domain: Mapping[str, int], triples: Sequence[Triple], ordinal: Ordinal = (),
                queries_per_triple: int | None = DEFAULT_QUERIES_PER_TRIPLE,
                seed: int = 0) -> list[TripleQueries]:
    """The query workload (see the module docstring): per triple, `queries_per_triple` boxes, each
    column's part uniform over its query set; None enumerates every box."""
    ordered = ordered_codes(ordinal, domain)
    sets = {c: column_query_set(domain[c], ordered[c]) for c in {a for t in triples for a in t}}
    rng = np.random.default_rng(seed)
    out = []
    for t in triples:
        parts = [sets[a] for a in t]
        if queries_per_triple is None:
            size = math.prod(p[0].size for p in parts)
            if size > MAX_EXHAUSTIVE_QUERIES:
                raise ValueError(f"triple {t} has {size:,} boxes, above {MAX_EXHAUSTIVE_QUERIES:,}:"
                                 " sample them (queries_per_triple=N)")
            grid = np.meshgrid(*[np.arange(p[0].size) for p in parts], indexing="ij")
            picks = [g.ravel() for g in grid]
        else:
            picks = [rng.integers(0, p[0].size, size=queries_per_triple) for p in parts]
        lo = np.stack([p[0][i] for p, i in zip(parts, picks)], axis=1)
        hi = np.stack([p[1][i] for p, i in zip(parts, picks)], axis=1)
        out.append(TripleQueries(tuple(t), lo, hi))
    return out


def _box_sums(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sum of a 3-d array over each box [lo, hi] (inclusive), by 3-d prefix sums."""
    prefix = np.zeros(tuple(s + 1 for s in values.shape))
    prefix[1:, 1:, 1:] = values.cumsum(0).cumsum(1).cumsum(2)
    total = np.zeros(lo.shape[0])
    for corner in itertools.product((0, 1), repeat=3):
        index = tuple(np.where(c, hi[:, j] + 1, lo[:, j]) for j, c in enumerate(corner))
        total += (-1) ** (3 - sum(corner)) * prefix[index]
    return total


def answer_queries(table: Table, domain: Mapping[str, int], queries: TripleQueries) -> np.ndarray:
    """The fraction of `table`'s rows inside each box of `queries`."""
    codes = encoded(table, domain)
    _nonempty(codes, "table")
    return _answers(codes, domain, queries)


def _answers(codes: Mapping[str, np.ndarray], domain: Mapping[str, int],
             queries: TripleQueries) -> np.ndarray:
    if math.prod(domain[a] for a in queries.attrs) <= MAX_DENSE_CELLS:
        return _box_sums(_distribution(codes, queries.attrs, domain), queries.lo, queries.hi)
    inside = np.ones((queries.lo.shape[0], _rows(codes)), dtype=bool)  # huge marginal: row masks
    for j, a in enumerate(queries.attrs):
        x = codes[a][None, :]
        inside &= (x >= queries.lo[:, j:j + 1]) & (x <= queries.hi[:, j:j + 1])
    return inside.mean(axis=1)


@dataclass(frozen=True)
class QueryError:
    """3-way metrics of a synthetic table against a reference table."""

    query_error: float                 # mean |q(synthetic) - q(reference)| over all queries
    tvd3: float                        # mean 3-way marginal TVD over the triples
    queries: int                       # number of queries answered
    per_triple: dict[Triple, tuple[float, float]]  # triple -> (mean query error, TVD)


def query_error(real: Table, synthetic: Table, domain: Mapping[str, int], triples: Sequence[Triple],
                queries_per_triple: int | None = DEFAULT_QUERIES_PER_TRIPLE, seed: int = 0, *,
                ordinal: Ordinal = ()) -> QueryError:
    """The paper's query error (§8.3) of `synthetic` against `real` on the workload
    `box_queries(domain, triples, ordinal, queries_per_triple, seed)`, and the mean 3-way TVD."""
    if not triples:
        raise ValueError("no triples: the query error needs at least three columns")
    r, s = encoded(real, domain, "real"), encoded(synthetic, domain, "synthetic")
    _nonempty(r, "real")
    _nonempty(s, "synthetic")
    workload = box_queries(domain, triples, ordinal, queries_per_triple, seed)
    per_triple: dict[Triple, tuple[float, float]] = {}
    errors = []
    for q in workload:
        if math.prod(domain[a] for a in q.attrs) <= MAX_DENSE_CELLS:
            diff = _distribution(s, q.attrs, domain) - _distribution(r, q.attrs, domain)
            err = np.abs(_box_sums(diff, q.lo, q.hi))
            tvd = 0.5 * float(np.abs(diff).sum())
        else:
            err = np.abs(_answers(s, domain, q) - _answers(r, domain, q))
            tvd = _tvd(s, r, q.attrs, domain)
        errors.append(err)
        per_triple[q.attrs] = (float(err.mean()), tvd)
    every = np.concatenate(errors)
    return QueryError(float(every.mean()), float(np.mean([v[1] for v in per_triple.values()])),
                      int(every.size), per_triple)


# ---------------------------------------------------------------------------------------------
# ML efficiency


def _sample(n: int, cap: int, rng: np.random.Generator) -> np.ndarray:
    return np.arange(n) if n <= cap else np.sort(rng.choice(n, size=cap, replace=False))


def _linear_features(codes: Mapping[str, np.ndarray], features: Sequence[str],
                     domain: Mapping[str, int], ordered: Mapping[str, int]):
    """Sparse design for the linear model: per column, the scaled code of its ordered part, and a
    one-hot indicator per unordered code."""
    from scipy import sparse

    n = _rows(codes)
    blocks = []
    for c in features:
        k, o, x = domain[c], ordered[c], codes[c]
        if o > 0:
            scaled = np.where(x < o, x / max(o - 1, 1), 0.0)
            blocks.append(sparse.csr_matrix(scaled.reshape(-1, 1)))
        if k > o:
            hit = x >= o
            rows = np.flatnonzero(hit)
            blocks.append(sparse.csr_matrix((np.ones(rows.size), (rows, x[hit] - o)),
                                            shape=(n, k - o)))
    return sparse.hstack(blocks, format="csr") if blocks else sparse.csr_matrix((n, 1))


def _tree_features(codes: Mapping[str, np.ndarray], features: Sequence[str]) -> np.ndarray:
    if not features:
        return np.zeros((_rows(codes), 1), dtype=np.float32)
    return np.stack([codes[c] for c in features], axis=1).astype(np.float32)


def _make_classifier(name: str, features: Sequence[str], domain: Mapping[str, int],
                     ordered: Mapping[str, int], seed: int):
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    if name == "logistic_regression":
        return LogisticRegression(max_iter=300)
    if name == "random_forest":
        return RandomForestClassifier(n_estimators=30, min_samples_leaf=5, n_jobs=1,
                                      random_state=seed)
    if name == "hist_gradient_boosting":
        categorical = [ordered[c] < domain[c] and domain[c] <= 255 for c in features] or [False]
        return HistGradientBoostingClassifier(max_iter=100, categorical_features=categorical,
                                              random_state=seed)
    raise ValueError(f"unknown classifier {name!r}; known: {CLASSIFIERS}")


def ml_skip_reason(test_rows: int, target: str | None, domain: Mapping[str, int]) -> str | None:
    """Why ML efficiency cannot be measured, or None when it can."""
    if target is None:
        return "no target column given"
    if target not in domain:
        return f"target {target!r} is not a column of the domain"
    if domain[target] < 2:
        return f"target {target!r} has a single code"
    if test_rows < MIN_TEST_ROWS:
        return (f"test_real has {test_rows} row(s), fewer than {MIN_TEST_ROWS}: "
                "too few held-out rows to score a classifier")
    return None


def ml_efficiency(train_real: Table, test_real: Table, synthetic: Table, target: str,
                  domain: Mapping[str, int], seed: int = 0, ordinal: Ordinal = ()) -> pd.DataFrame:
    """Accuracy and macro F1 on `test_real` of each classifier of `CLASSIFIERS` trained on
    `synthetic` and on `train_real`: one row per classifier, then a "mean" row. Columns:
    classifier, f1_synthetic, f1_real, accuracy_synthetic, accuracy_real, note. A training table
    without rows gives NaN scores (noted); one with a single target class a constant predictor."""
    from sklearn.metrics import accuracy_score, f1_score
    from threadpoolctl import threadpool_limits

    test = encoded(test_real, domain, "test_real")
    reason = ml_skip_reason(_rows(test), target, domain)
    if reason is not None:
        raise ValueError(reason)
    ordered = ordered_codes(ordinal, domain)
    features = [c for c in domain if c != target]
    rng = np.random.default_rng([seed, 17])
    test = {c: v[_sample(_rows(test), MAX_TEST_ROWS, rng)] for c, v in test.items()}
    y_test = test[target]
    designs_test = {"linear": _linear_features(test, features, domain, ordered),
                    "tree": _tree_features(test, features)}
    trains = {}
    for label, table in (("synthetic", synthetic), ("real", train_real)):
        codes = encoded(table, domain, "synthetic" if label == "synthetic" else "train_real")
        keep = _sample(_rows(codes), MAX_TRAIN_ROWS, rng)
        codes = {c: v[keep] for c, v in codes.items()}
        trains[label] = (codes, {"linear": _linear_features(codes, features, domain, ordered),
                                 "tree": _tree_features(codes, features)})
    records = []
    for name in CLASSIFIERS:
        record: dict = {"classifier": name}
        notes = []
        for label, (codes, designs) in trains.items():
            y = codes[target]
            if y.size == 0:
                record[f"f1_{label}"] = record[f"accuracy_{label}"] = math.nan
                notes.append(f"{label}: no training rows")
                continue
            classes = np.unique(y)
            if classes.size == 1:
                prediction = np.full(y_test.shape, classes[0])
                notes.append(f"{label}: single target class {int(classes[0])}, constant prediction")
            else:
                design = "linear" if name == "logistic_regression" else "tree"
                model = _make_classifier(name, features, domain, ordered, seed)
                with warnings.catch_warnings(), threadpool_limits(1):
                    warnings.simplefilter("ignore")  # convergence notices on degenerate designs
                    model.fit(designs[design], y)
                    prediction = model.predict(designs_test[design])
            record[f"f1_{label}"] = float(f1_score(y_test, prediction, average="macro",
                                                   zero_division=0))
            record[f"accuracy_{label}"] = float(accuracy_score(y_test, prediction))
        record["note"] = "; ".join(notes)
        records.append(record)
    frame = pd.DataFrame(records, columns=["classifier", "f1_synthetic", "f1_real",
                                           "accuracy_synthetic", "accuracy_real", "note"])
    means = frame[["f1_synthetic", "f1_real", "accuracy_synthetic", "accuracy_real"]].mean()
    frame.loc[len(frame)] = {"classifier": "mean", **means.to_dict(), "note": ""}
    return frame


# ---------------------------------------------------------------------------------------------
# Figures


def _figure(width: float, height: float, constrained: bool = True):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained" if constrained else None)
    FigureCanvasAgg(figure)
    return figure


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def histogram_grid(n_columns: int) -> tuple[int, int]:
    """(rows, columns) of panels in `histograms_png` for `n_columns` table columns."""
    cols = max(1, min(HIST_COLUMNS, n_columns))
    return max(1, math.ceil(n_columns / cols)), cols


def histogram_figsize(n_columns: int) -> tuple[float, float]:
    """Size in inches (width, height) of `histograms_png`'s figure; pixels = inches * DPI."""
    rows, cols = histogram_grid(n_columns)
    return cols * HIST_PANEL_INCHES[0], rows * HIST_PANEL_INCHES[1] + HIST_LEGEND_INCHES


def _short(text: str, limit: int = 14) -> str:
    """`text` cut in the middle to at most `limit` characters (names sharing a prefix stay apart)."""
    text = str(text)
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2 + (limit - 1) % 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def _bars(ax, centres: np.ndarray, heights: Sequence[float], width: float, colour: str) -> None:
    """Bars as one PolyCollection (one artist instead of a patch per bar: a 100-code column
    draws as fast as a binary one)."""
    from matplotlib.collections import PolyCollection

    h = np.asarray(heights, dtype=float)
    left, right = centres - width / 2, centres + width / 2
    verts = np.stack([np.stack([left, np.zeros_like(h)], 1), np.stack([left, h], 1),
                      np.stack([right, h], 1), np.stack([right, np.zeros_like(h)], 1)], axis=1)
    ax.add_collection(PolyCollection(verts, facecolors=colour, edgecolors="none"))


def histograms_png(real: Table, synthetic: Table, domain: Mapping[str, int],
                   labels: Mapping[str, Sequence[str]] | None = None) -> bytes:
    """One PNG: a grid of per-column histograms (shares of rows per code), real and synthetic bars
    side by side, each panel titled with the column and its 1-way TVD. `labels[column][code]`
    names the ticks of columns with at most `HIST_MAX_TICK_LABELS` codes (others show a few code
    numbers). Size: `histogram_figsize(len(domain))` inches at `DPI`."""
    from matplotlib.patches import Patch

    comparison = column_comparison(real, synthetic, domain)
    width, height = histogram_figsize(len(comparison))
    figure = _figure(width, height, constrained=False)
    rows, cols = histogram_grid(len(comparison))
    axes = figure.subplots(rows, cols, squeeze=False, gridspec_kw={
        "left": 0.45 / width, "right": 1 - 0.15 / width, "bottom": 0.75 / height,
        "top": 1 - (HIST_LEGEND_INCHES + 0.3) / height, "wspace": 0.3,
        "hspace": 1.05 / HIST_PANEL_INCHES[1]})
    for ax, entry in itertools.zip_longest(axes.ravel(), comparison):
        if entry is None:
            ax.set_axis_off()
            continue
        k = entry["codes"]
        x = np.arange(k)
        _bars(ax, x - 0.2, entry["real"], 0.4, REAL_COLOUR)
        _bars(ax, x + 0.2, entry["synthetic"], 0.4, SYNTHETIC_COLOUR)
        top = max(max(entry["real"]), max(entry["synthetic"]))
        ax.set_xlim(-0.7, k - 0.3)
        ax.set_ylim(0, top * 1.08 if top > 0 else 1)
        ax.set_title(f"{_short(entry['column'], 28)}  (TVD {entry['tvd']:.3f})", fontsize=9)
        ax.tick_params(labelsize=7)
        names = (labels or {}).get(entry["column"])
        if k <= HIST_MAX_TICK_LABELS:
            ax.set_xticks(x)
            if names is not None:
                names = [_short(n) for n in list(names)[:k]] + [str(i) for i in range(len(names), k)]
                ax.set_xticklabels(names, rotation=30 if k > 3 else 0,
                                   ha="right" if k > 3 else "center")
        else:
            ax.set_xticks(np.unique(np.linspace(0, k - 1, 6).round().astype(int)))
    figure.legend([Patch(color=REAL_COLOUR), Patch(color=SYNTHETIC_COLOUR)], ["real", "synthetic"],
                  loc="upper center", ncols=2, fontsize=9, frameon=False,
                  bbox_to_anchor=(0.5, 1 - 0.05 / height))
    figure.text(0.5, 0.12 / height, "code (share of rows per code)", ha="center", fontsize=8)
    return _png(figure)


def heatmap_figsize(n_columns: int) -> tuple[float, float]:
    """Size in inches (width, height) of `tvd_heatmap_png`'s figure; pixels = inches * DPI."""
    side = max(4.0, 0.5 * n_columns + 2.5)
    return side + 1.0, side


def tvd_heatmap_png(pair_tvds: Mapping[tuple[str, str], float], columns: Sequence[str]) -> bytes:
    """One PNG: the symmetric matrix of 2-way TVDs (diagonal blank), values written in the cells
    when there are at most 16 columns, with a labelled colour bar."""
    n = len(columns)
    index = {c: i for i, c in enumerate(columns)}
    matrix = np.full((n, n), np.nan)
    for (a, b), value in pair_tvds.items():
        if a in index and b in index and a != b:
            matrix[index[a], index[b]] = matrix[index[b], index[a]] = value
    figure = _figure(*heatmap_figsize(n))
    ax = figure.subplots()
    finite = matrix[np.isfinite(matrix)]
    top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    from matplotlib import colormaps

    cmap = colormaps["viridis"].with_extremes(bad="white")
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap=cmap, vmin=0.0, vmax=top)
    ax.set_xticks(np.arange(n), [_short(c, 18) for c in columns], rotation=45, ha="right",
                  fontsize=8)
    ax.set_yticks(np.arange(n), [_short(c, 18) for c in columns], fontsize=8)
    if n <= 16:
        for i, j in zip(*np.nonzero(np.isfinite(matrix))):
            value = matrix[i, j]
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                    color="black" if value > 0.6 * top else "white")
    bar = figure.colorbar(image, ax=ax, shrink=0.8)
    bar.set_label("2-way TVD (1/2 L1 between normalized marginals)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    mean = float(finite.mean()) if finite.size else math.nan
    ax.set_title(f"2-way marginal TVD per pair (mean {mean:.3f})", fontsize=10)
    return _png(figure)


# ---------------------------------------------------------------------------------------------
# The report


@dataclass(frozen=True, eq=False)
class UtilityReport:
    """Everything the owner sees about one synthetic table. Metrics named without a suffix are
    against `reference` ("test_real" or "train_real", see the module docstring); `*_baseline`
    are train_real against test_real (None when reference is train_real)."""

    reference: str
    rows: dict[str, int]                      # train_real, test_real, synthetic
    fidelity: float | None                    # mean 2-way TVD (None with fewer than 2 columns)
    pair_tvds: dict[tuple[str, str], float]
    fidelity_train: float | None              # against train_real, whatever the reference
    fidelity_baseline: float | None
    query_error: float | None                 # None with fewer than 3 columns
    tvd3: float | None
    query_error_baseline: float | None
    tvd3_baseline: float | None
    triples: tuple[Triple, ...]
    queries: int
    ml: pd.DataFrame | None
    ml_reason: str | None                     # why `ml` is None
    columns: list[dict]                       # column_comparison against the reference
    histograms_png: bytes
    tvd_heatmap_png: bytes

    def summary(self) -> dict:
        """Headline numbers, JSON-safe (floats rounded to 6 places, NaN as None)."""

        def num(x):
            return None if x is None or not math.isfinite(x) else round(float(x), 6)

        worst = sorted(self.pair_tvds.items(), key=lambda kv: -kv[1])[:5]
        out = {
            "reference": self.reference, "rows": dict(self.rows),
            "fidelity": num(self.fidelity), "fidelity_train": num(self.fidelity_train),
            "fidelity_baseline": num(self.fidelity_baseline),
            "query_error": num(self.query_error), "query_error_baseline": num(self.query_error_baseline),
            "tvd3": num(self.tvd3), "tvd3_baseline": num(self.tvd3_baseline),
            "pairs": len(self.pair_tvds), "triples": len(self.triples), "queries": self.queries,
            "worst_pairs": [{"pair": list(p), "tvd": num(v)} for p, v in worst],
            "worst_columns": [{"column": c["column"], "tvd": num(c["tvd"])}
                              for c in sorted(self.columns, key=lambda c: -c["tvd"])[:3]],
            "ml_reason": self.ml_reason,
        }
        if self.ml is not None:
            mean = self.ml.set_index("classifier").loc["mean"]
            out.update({f"ml_{k}": num(mean[k]) for k in
                        ("f1_synthetic", "f1_real", "accuracy_synthetic", "accuracy_real")})
        return out


def utility_report(train_real: Table, test_real: Table | None, synthetic: Table,
                   domain: Mapping[str, int], target: str | None = None, ordinal: Ordinal = (),
                   seed: int = 0, triples_count: int = DEFAULT_TRIPLES,
                   queries_per_triple: int | None = DEFAULT_QUERIES_PER_TRIPLE,
                   labels: Mapping[str, Sequence[str]] | None = None) -> UtilityReport:
    """The full report (see the module docstring for every choice). `test_real` may be None or
    empty: metrics are then against `train_real` and ML efficiency is None with its reason."""
    domain = dict(domain)
    train = encoded(train_real, domain, "train_real")
    synth = encoded(synthetic, domain, "synthetic")
    test = encoded(test_real, domain, "test_real") if test_real is not None else \
        {c: np.zeros(0, dtype=np.int64) for c in domain}
    _nonempty(train, "train_real")
    _nonempty(synth, "synthetic")
    ordered_codes(ordinal, domain)  # validate early
    has_test = _rows(test) >= MIN_TEST_ROWS
    reference = test if has_test else train
    columns = list(domain)

    pairs = pair_tvd(reference, synth, domain)
    fid = float(np.mean(list(pairs.values()))) if pairs else None
    fid_train = (float(np.mean(list(pair_tvd(train, synth, domain).values())))
                 if has_test else fid) if pairs else None
    fid_base = float(np.mean(list(pair_tvd(train, test, domain).values()))) \
        if has_test and pairs else None

    chosen = triples(domain, triples_count, seed)
    qe = tv3 = qe_base = tv3_base = None
    n_queries = 0
    if chosen:
        result = query_error(reference, synth, domain, chosen, queries_per_triple, seed,
                             ordinal=ordinal)
        qe, tv3, n_queries = result.query_error, result.tvd3, result.queries
        if has_test:
            base = query_error(test, train, domain, chosen, queries_per_triple, seed,
                               ordinal=ordinal)
            qe_base, tv3_base = base.query_error, base.tvd3

    reason = ml_skip_reason(_rows(test), target, domain)
    ml = None if reason is not None else ml_efficiency(train, test, synth, target, domain, seed,
                                                       ordinal)
    comparison = column_comparison(reference, synth, domain)
    return UtilityReport(
        reference="test_real" if has_test else "train_real",
        rows={"train_real": _rows(train), "test_real": _rows(test), "synthetic": _rows(synth)},
        fidelity=fid, pair_tvds=pairs, fidelity_train=fid_train, fidelity_baseline=fid_base,
        query_error=qe, tvd3=tv3, query_error_baseline=qe_base, tvd3_baseline=tv3_base,
        triples=tuple(chosen), queries=n_queries, ml=ml, ml_reason=reason, columns=comparison,
        histograms_png=histograms_png(reference, synth, domain, labels),
        tvd_heatmap_png=tvd_heatmap_png(pairs, columns),
    )


# ---------------------------------------------------------------------------------------------
# Files for the owner


REPORT_FILES = {"json": "report.json", "html": "report.html",
                "histograms": "report_histograms.png", "heatmap": "report_tvd_heatmap.png"}


def report_document(report: UtilityReport) -> dict:
    """The whole report as JSON-safe data (`report.json`)."""
    import json

    return json.loads(json.dumps({
        "summary": report.summary(),
        "pair_tvd": {" x ".join(p): t for p, t in report.pair_tvds.items()},
        "columns": report.columns,
        "ml": None if report.ml is None else report.ml.to_dict(orient="records"),
        "ml_reason": report.ml_reason}, default=str))


def report_html(report: UtilityReport, title: str) -> str:
    """One self-contained page: the summary, the ML-efficiency table and both figures (inline
    PNGs), so the owner has a single file to open."""
    import base64
    import json
    from html import escape

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.4f}" if math.isfinite(value) else ""
        if isinstance(value, (list, dict)):
            return escape(json.dumps(value))
        return escape("" if value is None else str(value))

    def table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
        head = "".join(f"<th>{escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>"
                       for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def image(alt: str, png: bytes) -> str:
        return (f'<img alt="{escape(alt)}" '
                f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')

    summary = report.summary()
    if report.ml is not None:
        columns = ["classifier", "f1_synthetic", "f1_real", "accuracy_synthetic", "accuracy_real",
                   "note"]
        ml = table(columns, report.ml[columns].itertuples(index=False, name=None))
    else:
        ml = f"<p>not computed: {escape(str(report.ml_reason))}</p>"
    return "\n".join([
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>',
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}img{max-width:100%}"
        "</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        "<p><strong>Owner-only, exact, not differentially private:</strong> computed against "
        "the source rows. Keep this file in the private zone.</p>",
        "<h2>Summary</h2>", table(["figure", "value"], list(summary.items())),
        "<h2>ML efficiency</h2>", ml,
        "<h2>Per-column histograms, source vs synthetic</h2>",
        image("per-column histograms", report.histograms_png),
        "<h2>2-way TVD per pair</h2>", image("2-way TVD per pair", report.tvd_heatmap_png),
        "</body></html>", ""])


def write_owner_only(directory, files: Mapping[str, bytes], root=None) -> dict[str, str]:
    """Write `files` (name -> content) into `directory` readable by the owner only: every folder
    from `root` (default: `directory` itself) down to `directory` is made 0700, each file is
    created 0600 under a temporary name and renamed over the old one (a reader never sees half
    a file, nor an old file's wider permissions). Returns name -> path."""
    import os
    from pathlib import Path

    directory = Path(directory).resolve()
    root = directory if root is None else Path(root).resolve()
    if root != directory and root not in directory.parents:
        raise ValueError(f"{root} does not contain {directory}")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for folder in [directory, *directory.parents]:
        os.chmod(folder, 0o700)
        if folder == root:
            break
    out = {}
    for name, content in files.items():
        path = directory / name
        tmp = directory / f".{name}.tmp"
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
                os.fchmod(f.fileno(), 0o600)  # an old temporary file keeps its mode on O_CREAT
                f.write(content)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, path)
        out[name] = str(path)
    return out
