"""A preprocessing mechanism that lives outside the package, for tests/test_plugins.py: the
noisy counts of a column's declared categories (the `rare` task), drawn with the package's
Gaussian mechanism on the exact value counts and charged right after the draw, as the contract
of `core.preprocess` asks; it charges under its own purpose and notes the column in `RELEASED`,
so a test sees it ran."""

import numpy as np

from dp_synth_assets.core.domain import sql_text
from dp_synth_assets.core.preprocess import MechanismCall
from dp_synth_assets.core.privacy import gaussian_counts

PURPOSE = "declared-category counts (plug-in)"
RELEASED: list[str] = []  # the columns released, in order (public: the spec's names)


def release(call: MechanismCall) -> tuple[dict[str, float], float]:
    """The noisy count of each declared category and the noise's standard deviation."""
    labels = [sql_text(c) for c in call.spec.categories]
    exact = np.array([call.exact.get(label, 0) for label in labels], dtype=np.int64)
    noisy, spend = gaussian_counts(exact, call.rho)
    call.charge(spend, column=call.column, purpose=PURPOSE)
    RELEASED.append(call.column)
    return dict(zip(labels, noisy.tolist())), spend.scale
