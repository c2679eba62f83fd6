"""The checks of the synthetic table (public zone), Great Expectations 1.x suites.

Built from the declared spec, the dataset's plan and its noisy measurements only, they read the
synthetic table and never the source. `suites.CHECKS` lists them (one function each; what each
checks and its severity: docs/pipeline.md). Modules: `gx` runs a suite (`outcomes` are its
results, `gx_context` the process's GX context), `data_docs` renders GX's Data Docs site,
`tolerances` holds the bounds, `frames` reads the table in bounded memory, `suites` the checks;
`asset_checks`, the only module importing Dagster, wraps them as Dagster asset checks. Its names
are imported from here on first use, so importing the package loads neither Dagster nor Great
Expectations."""

from .suites import CHECKS

__all__ = ["CHECKS", "check_synthetic", "run_checks", "synthetic_check_specs"]


def __getattr__(name: str):
    if name in ("check_synthetic", "run_checks", "synthetic_check_specs"):
        from . import asset_checks

        return getattr(asset_checks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
