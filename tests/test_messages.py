"""Messages that name their cause and their fix (issue 32, item 6): each case below once failed
with a message that blamed something else, or with another library's own error. Each is now
refused when the definitions load (or handled), naming the entry, the key or column, the bad
value when it is public (the spec, the schema) and what to write instead, spending nothing and
quoting no value of the data."""

import dagster as dg
import duckdb
import pytest
import yaml

from dp_synth_assets.core.config import RegistryError
from dp_synth_assets.definitions import build_definitions
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import example_entry, make_project


def load_failure(tmp_path, text: str) -> str:
    """The RegistryError of loading the definitions of a datasets.yaml holding `text`."""
    path = tmp_path / "datasets.yaml"
    path.write_text(text)
    with pytest.raises(RegistryError) as caught:
        build_definitions(path, tmp_path / "w.duckdb", tmp_path / "l.sqlite", tmp_path / "p")
    assert not (tmp_path / "l.sqlite").exists()  # refused before the ledger was opened
    return str(caught.value)


def registry(entry: dict) -> str:
    return yaml.safe_dump({"datasets": {"example": entry}}, sort_keys=False)


# ---------------------------------------------------------------- bounds whose span is no float


def test_bounds_whose_span_overflows_a_float_are_refused_at_load_naming_the_column():
    """±1e308 are finite, but high - low is not: the density grid's arithmetic overflowed
    after the run had reserved its budget, and the failure blamed the source's values."""
    import tempfile
    from pathlib import Path

    columns = dict(example_entry()["columns"])
    columns["income"] = {"kind": "float", "bounds": [-1e308, 1e308], "nullable": True}
    with tempfile.TemporaryDirectory() as folder:
        message = load_failure(Path(folder), registry(example_entry(columns=columns)))
    assert "dataset 'example', key 'columns.income'" in message, message
    assert "[-1e+308, 1e+308]" in message and "high - low" in message, message
    assert "at most 1e+300" in message, message  # the limit, said


def test_bounds_at_the_limit_load_and_their_grid_and_bins_are_finite(tmp_path):
    """The limit the message states is one the bins' arithmetic meets: bounds whose span is
    the limit load, and their density grid and uniform bins are finite (a span near the
    largest float, 1.8e308, overflowed the grid's cell count)."""
    import math

    import numpy as np

    from dp_synth_assets.core.config import MAX_BOUNDS_SPAN, load_registry
    from dp_synth_assets.core.preprocess import density_grid, uniform_bin_edges

    half = MAX_BOUNDS_SPAN / 2
    columns = dict(example_entry()["columns"])
    columns["income"] = {"kind": "float", "bounds": [-half, half], "bins": 4096,
                         "nullable": True}
    (tmp_path / "datasets.yaml").write_text(registry(example_entry(columns=columns)))
    spec = load_registry(tmp_path / "datasets.yaml")["example"].columns["income"]
    low, high = spec.numeric_bounds()
    start, width, cells = density_grid(low, high, False)
    assert all(map(math.isfinite, (start, width))) and 1 <= cells <= 1024
    assert np.isfinite(uniform_bin_edges(spec, low, high)).all()
