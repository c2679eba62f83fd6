"""The selection methods: each one's module under `select/`, its default budget shares and whether
it spends the measurement budget inside selection.

A leaf module (it imports nothing of the package): `config` validates a dataset's method and
shares against it and `select` dispatches through it, without importing each other, and without
importing every method module (they pull in mbi, JAX, networkx and scipy). Adding a method is one
module plus one line here (`MethodInfo`)."""

from dataclasses import dataclass

PACKAGE = "dp_synth_assets.core.select"
SHARED = "dp_synth_assets.core.config:SharedSelection"  # the settings of a method without keys


@dataclass(frozen=True)
class MethodInfo:
    """One selection method's registry line: its declaration, not its module.

    The module defines `select(domain, oracle, budget, settings, charge) -> Selection` and,
    optionally, `needed_cliques(domain, settings)` (the marginals the `marginals` stage counts up
    front; default: every pair). `module` names it: a module of `dp_synth_assets.core.select`, or
    a dotted path for a method that lives elsewhere. The settings model is named, not imported:
    a class of the method's module (`Settings`, a subclass of `config.SelectionSettings`
    declaring the method's own keys of the `selection:` block) or `module:Class`; a method with
    no key of its own names `SHARED`. Validating a dataset imports only the module of the method
    it names (`config.method_settings`).
    """

    module: str                  # <module> of select/, or a dotted path: its select(...)
    one_way_share: float         # default share of rho for the noisy 1-way marginals
    score_share: float           # default share for selection mechanisms
    measures_in_selection: bool  # spends the rest inside selection too
    settings: str = SHARED       # its settings model (a class of the module, or module:Class)


METHODS = {
    "privsyn": MethodInfo("privsyn", 0.1, 0.1, False),
    "absyn": MethodInfo("absyn", 0.1, 0.1, False),
    "mst": MethodInfo("mst", 1 / 3, 1 / 3, False),
    "aim": MethodInfo("aim", 0.3, 0.1, True, "Settings"),
    "ppsyn": MethodInfo("ppsyn", 0.1, 0.1, True),
    "manual": MethodInfo("manual", 0.1, 0.0, False, "Settings"),
    "auto": MethodInfo("auto", 0.3, 0.1, False, "Settings"),
}
