"""The OpenDP constructors we use, imported without `opendp.prelude`.

`opendp.prelude` also imports `opendp.extras` (scikit-learn and SciPy) in every process that
loads the code location (its cost: docs/decisions/0002-zcdp-accounting.md, "As implemented: the
OpenDP imports"). Use it as `from .opendp_api import dp`, then `dp.m.make_gaussian(...)` as with
the prelude."""

from types import SimpleNamespace

from opendp import combinators, measurements
from opendp.domains import atom_domain, map_domain, vector_domain
from opendp.measures import zero_concentrated_divergence
from opendp.metrics import absolute_distance, l02inf_distance, l2_distance, linf_distance
from opendp.mod import enable_features

dp = SimpleNamespace(
    c=combinators, m=measurements, atom_domain=atom_domain, map_domain=map_domain,
    vector_domain=vector_domain, zero_concentrated_divergence=zero_concentrated_divergence,
    absolute_distance=absolute_distance, l02inf_distance=l02inf_distance,
    l2_distance=l2_distance, linf_distance=linf_distance, enable_features=enable_features)
