"""The host's definitions: everything in its defs folder (its own asset and dp-synth's
Component instance)."""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
