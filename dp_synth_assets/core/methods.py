"""The selection methods: each one's module under `select/`, its default budget shares and whether
it spends the measurement budget inside selection.

A leaf module (it imports nothing of the package): `config` validates a dataset's method and
shares against it and `select` dispatches through it, without importing each other.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodInfo:
    module: str                  # dp_synth_assets.core.select.<module>.select(...)
    one_way_share: float         # default share of rho for the noisy 1-way marginals
    score_share: float           # default share for selection mechanisms
    measures_in_selection: bool  # spends the rest inside selection too


METHODS = {
    "privsyn": MethodInfo("privsyn", 0.1, 0.1, False),
    "absyn": MethodInfo("absyn", 0.1, 0.1, False),
    "mst": MethodInfo("mst", 1 / 3, 1 / 3, False),
    "aim": MethodInfo("aim", 0.1, 0.1, True),
    "ppsyn": MethodInfo("ppsyn", 0.1, 0.1, True),
    "manual": MethodInfo("manual", 0.1, 0.0, False),
}
