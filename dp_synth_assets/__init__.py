"""dp-synth: differentially private synthetic twins of tables.

`Synthesizer` (dp_synth_assets.api) is the notebook API and needs no Dagster (with
`RelationalSynthesizer`, dp_synth_assets.relational_api, for a parent table and its children);
`dp_synth_definitions` (dp_synth_assets.factory) gives the Dagster definitions a host project
merges with its own. Names are imported on first use, so `from dp_synth_assets import
Synthesizer` loads neither Dagster, Great Expectations nor JAX.
"""

__all__ = ["Synthesizer", "RelationalSynthesizer", "Report", "dp_synth_definitions",
           "DpSynthComponent"]


def __getattr__(name: str):
    if name == "dp_synth_definitions":
        from .factory import dp_synth_definitions

        return dp_synth_definitions
    if name == "DpSynthComponent":  # the Component (dg's registry module is this package)
        from .component import DpSynthComponent

        return DpSynthComponent
    if name == "RelationalSynthesizer":
        from .relational_api import RelationalSynthesizer

        return RelationalSynthesizer
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too, so `dg list components` (which scans `dir()`) finds the Component."""
    return sorted({*globals(), *__all__})
