"""Every benchmark script of bench/ runs on the current code: the light scripts here, the Dagster
runs in tests/test_bench_runs.py, the tables in tests/test_bench_tables.py, the example under
concurrency and kills and on S3 in tests/test_bench_ops.py; each on a tiny input, in a temporary
folder (tests/bench_cases.py)."""

from pathlib import Path

import pytest

from tests.bench_cases import BENCH, CASES, LIBRARIES, NOT_RUN, OWN_TEST, smoke_test



def test_every_script_has_a_smoke_run():
    """A new script of bench/ comes with its case (or says why it has none)."""
    scripts = {p.name for p in BENCH.glob("*.py")}
    covered = {c.script for c in CASES} | set(LIBRARIES) | set(NOT_RUN) | set(OWN_TEST)
    assert scripts - covered == set(), f"no smoke run for {sorted(scripts - covered)}"
    assert {c.script for c in CASES} <= scripts


@pytest.fixture(scope="module")
def bench_base(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("bench")
    # footprint.py --markdown-only renders the committed record
    (base / "results").mkdir()
    (base / "results" / "footprint.json").write_text(
        (BENCH / "results" / "footprint.json").read_text())
    return base


test_script_runs = smoke_test("light")
