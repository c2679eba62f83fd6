"""The checks of the synthetic table (public zone), Great Expectations 1.x suites.

Built from the declared spec, the dataset's plan and its noisy measurements only, they read the
synthetic table and never the source. `suites.CHECKS` lists them (one function each):

- `schema` (ERROR, blocking): the declared columns, in order, with their declared SQL types, in
  the warehouse table and in the Parquet copy.
- `domain` (ERROR, blocking): categorical values among the declared categories or the `other`
  label (discovered ones: the plan's, rare members included); numbers and dates inside the
  declared bounds (learned ones: the plan's); no NULL in a column not declared nullable.
- `row_count` (ERROR): the requested number of rows.
- `null_fraction` (WARN): each nullable column's NULL share within a tolerance of the noisy
  estimate from the measured 1-way marginal (`tolerances.tolerances`).
- `one_way_tvd` (WARN): each column's 1-way distribution within a TVD tolerance of its noisy
  measurement (`tolerances.tolerances`).
- `marginal_tvd` (WARN): every measured marginal of two or more columns within a TVD tolerance
  from that measurement's own noise scale (`tolerances.marginal_tolerance`).
- `duplicates` (WARN): the share of rows repeating an earlier row (on the encoded codes) below
  the bound the model implies (`tolerances.duplicate_bound`).

Modules: `gx` runs a suite (`outcomes` are its results, `gx_context` the process's GX context),
`data_docs` renders GX's Data Docs site, `tolerances` holds the bounds, `frames` reads the table
in bounded memory, `suites` the checks; `asset_checks`, the only module importing Dagster, wraps
them as Dagster asset checks. Its names are imported from here on first use, so importing the
package loads neither Dagster nor Great Expectations.
"""

from .suites import CHECKS

__all__ = ["CHECKS", "check_synthetic", "run_checks", "synthetic_check_specs"]


def __getattr__(name: str):
    if name in ("check_synthetic", "run_checks", "synthetic_check_specs"):
        from . import asset_checks

        return getattr(asset_checks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
