"""Shared test helpers: a throwaway dp-synth project (warehouse, datasets.yaml, ledger, public dir)."""

from pathlib import Path
from types import SimpleNamespace

import yaml

from dp_synth_assets.core.example import write_example
from dp_synth_assets.definitions import build_definitions

REPO = Path(__file__).resolve().parents[1]
REPO_DATASETS = REPO / "datasets.yaml"
TEST_DEFAULTS = {"model": {"iterations": 200}}


def example_entry(**dataset_overrides) -> dict:
    """The repository's `example` entry with `dataset_overrides` merged in (shallow: a nested
    dict such as `privacy` replaces the whole key; a value of None removes the key)."""
    entry = dict(yaml.safe_load(REPO_DATASETS.read_text())["datasets"]["example"])
    for key, value in {**TEST_DEFAULTS, **dataset_overrides}.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    return entry


def make_project(tmp_path: Path, rows: int = 3000, **dataset_overrides) -> SimpleNamespace:
    """Write the bundled example table (`rows` rows) to `tmp_path/warehouse.duckdb` and a
    datasets.yaml with the repository's example entry (plus overrides) to `tmp_path`.

    `defs_fn()` builds fresh Definitions for these paths (ledger `tmp_path/ledger.sqlite`, public
    zone `tmp_path/public`).
    """
    tmp_path = Path(tmp_path)
    warehouse = tmp_path / "warehouse.duckdb"
    ledger = tmp_path / "ledger.sqlite"
    public = tmp_path / "public"
    datasets = tmp_path / "datasets.yaml"
    write_example(warehouse, rows=rows)
    datasets.write_text(yaml.safe_dump({"datasets": {"example": example_entry(**dataset_overrides)}},
                                       sort_keys=False))

    def defs_fn():
        return build_definitions(datasets, warehouse, ledger, public)

    return SimpleNamespace(datasets=datasets, warehouse=warehouse, ledger=ledger, public=public,
                           defs_fn=defs_fn)
