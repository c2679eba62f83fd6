"""The optional features and the extras that install them: one place that says which modules
each feature imports and which extra of the distribution brings them.

The default install (`pip install dagster-dp-synth`) runs every dataset that uses none of these
features. A dataset that uses one whose modules are not importable is refused when the
definitions load (`config.DatasetSpec`, through `refusal`), before anything is spent, with the
command that installs the extra. Availability is read with `importlib.util.find_spec`, which
finds a module without importing it, so loading the definitions imports none of them. A leaf
module: it imports nothing of the package.
"""

import importlib.util
from dataclasses import dataclass

DISTRIBUTION = "dagster-dp-synth"


@dataclass(frozen=True)
class Feature:
    """An optional feature: the extra that installs it and the modules it imports."""

    extra: str  # the distribution's extra that installs `modules`
    modules: tuple[str, ...]  # top-level modules the feature imports
    what: str  # the feature, as the user declares it


FEATURES = {
    # the pgm engine's JAX estimator (mbi's MirrorDescent); without it every fit is numpy's
    "jax": Feature("jax", ("mbi", "jax", "jaxlib"), "the JAX estimator of the pgm engine"),
    "report": Feature("report", ("sklearn", "matplotlib"),
                      "the owner-only utility report (`report:`)"),
    "postgres": Feature("postgres", ("psycopg", "sqlglot"), "`engine: {type: postgres}`"),
    "spark": Feature("spark", ("pyspark", "sqlglot"), "`engine: {type: spark}`"),
    # a zone at an s3:// URL: s3fs (universal_pathlib and fsspec come with Dagster itself);
    # another store's fsspec package (gcsfs for gs://, adlfs for az://) is the user's to install
    "objectstore": Feature("objectstore", ("s3fs",), "a zone on S3 (an `s3://` location)"),
}


def importable(module: str) -> bool:
    """Whether `module` can be imported, without importing it (a finder that refuses it counts
    as not installed)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(feature: str) -> list[str]:
    """The modules of `feature` that are not importable."""
    return [m for m in FEATURES[feature].modules if not importable(m)]


def available(feature: str) -> bool:
    """Whether every module of `feature` (a key of `FEATURES`) can be imported."""
    return not missing(feature)


def install_command(feature: str) -> str:
    """The pip command that installs `feature`'s extra, for a refusal's message."""
    return f"pip install '{DISTRIBUTION}[{FEATURES[feature].extra}]'"


def refusal(feature: str) -> str | None:
    """None when `feature` is installed; else the sentence that refuses a dataset using it:
    the feature, the extra, the missing modules and the command that installs them."""
    gone = missing(feature)
    if not gone:
        return None
    spec = FEATURES[feature]
    return (f"{spec.what} needs the `{spec.extra}` extra, which is not installed (no "
            f"{', '.join(gone)} in this environment): run {install_command(feature)} "
            f"(or add {DISTRIBUTION}[{spec.extra}] to your project's dependencies)")
