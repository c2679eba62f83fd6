"""The benchmark scripts of the bundled example under concurrent runs and kills, and on object
storage, each on a tiny input (tests/bench_cases.py)."""

import pytest

from tests.bench_cases import CASES, check

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tmp_path_factory.mktemp("bench")


@pytest.mark.parametrize("case", [c for c in CASES if c.group == "ops"], ids=lambda c: c.id)
def test_script_runs(case, base):
    check(case, base)
