"""dp-synth: differentially private synthetic twins of tables.

`Synthesizer` (dp_synth_assets.api) is the notebook API and needs no Dagster; the Dagster
definitions live in dp_synth_assets.definitions. Names are imported on first use, so
`from dp_synth_assets import Synthesizer` loads neither Dagster, Great Expectations nor JAX.
"""

__all__ = ["Synthesizer", "Report"]


def __getattr__(name: str):
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
