"""ML efficiency: the mean macro-F1 of classifiers trained on synthetic rows and tested on held-out
source rows, on encoded tables (`tables`).

Implements the benchmark paper of Chen et al., section 8.3, with three sklearn classifiers
(`CLASSIFIERS`: logistic regression, random forest, histogram gradient boosting), each trained
once on `synthetic` and once on `train_real` (the paper's "Ground Truth" row of Table 2), at
most `MAX_TRAIN_ROWS` rows each, tested on at most `MAX_TEST_ROWS` rows of `test_real`;
deterministic given `seed`. The classifiers' settings, the F1 and the features:
docs/decisions/0022-evaluation-metrics.md, "As implemented: ML efficiency"."""

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .tables import Ordinal, Table, encoded, ordered_codes, rows_of

MIN_TEST_ROWS = 20              # fewer held-out rows: no ML efficiency, metrics against train_real
MAX_TRAIN_ROWS = 20_000         # per training table for the classifiers (seeded sample above)
MAX_TEST_ROWS = 100_000         # rows of test_real the classifiers are scored on
CLASSIFIERS = ("logistic_regression", "random_forest", "hist_gradient_boosting")


def _sample(n: int, cap: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices: all `n`, or `cap` of them drawn uniformly without replacement, sorted."""
    return np.arange(n) if n <= cap else np.sort(rng.choice(n, size=cap, replace=False))


def _linear_features(codes: Mapping[str, np.ndarray], features: Sequence[str],
                     domain: Mapping[str, int], ordered: Mapping[str, int]):
    """Sparse design for the linear model: per column, the scaled code of its ordered part, and a
    one-hot indicator per unordered code."""
    from scipy import sparse

    n = rows_of(codes)
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
    """Design for the tree models: the raw codes of `features` (a zero column without any)."""
    if not features:
        return np.zeros((rows_of(codes), 1), dtype=np.float32)
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


def classifier_line(name: str) -> str:
    """The progress line of a classifier's turn: its name only. The report runs on private rows
    and the asset's log is public, so no score, row count or duration goes with it."""
    return f"utility report: classifier {name}"


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
                  domain: Mapping[str, int], seed: int = 0, ordinal: Ordinal = (),
                  log=None) -> pd.DataFrame:
    """Accuracy and macro F1 on `test_real` of each classifier of `CLASSIFIERS` trained on
    `synthetic` and on `train_real`: one row per classifier, then a "mean" row. Columns:
    classifier, f1_synthetic, f1_real, accuracy_synthetic, accuracy_real, note. A training table
    without rows gives NaN scores (noted); one with a single target class a constant predictor.
    `log`, if given, gets `classifier_line(name)` as each classifier's turn starts."""
    from sklearn.metrics import accuracy_score, f1_score
    from threadpoolctl import threadpool_limits

    test = encoded(test_real, domain, "test_real")
    reason = ml_skip_reason(rows_of(test), target, domain)
    if reason is not None:
        raise ValueError(reason)
    ordered = ordered_codes(ordinal, domain)
    features = [c for c in domain if c != target]
    rng = np.random.default_rng([seed, 17])
    test = {c: v[_sample(rows_of(test), MAX_TEST_ROWS, rng)] for c, v in test.items()}
    y_test = test[target]
    designs_test = {"linear": _linear_features(test, features, domain, ordered),
                    "tree": _tree_features(test, features)}
    trains = {}
    for label, table in (("synthetic", synthetic), ("real", train_real)):
        codes = encoded(table, domain, "synthetic" if label == "synthetic" else "train_real")
        keep = _sample(rows_of(codes), MAX_TRAIN_ROWS, rng)
        codes = {c: v[keep] for c, v in codes.items()}
        trains[label] = (codes, {"linear": _linear_features(codes, features, domain, ordered),
                                 "tree": _tree_features(codes, features)})
    records = []
    for name in CLASSIFIERS:
        if log is not None:
            log(classifier_line(name))
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

