"""Check before you spend (issue 17): what the spec, the config and the source's schema can tell
is refused at load or before the first charge, with a clear message; nothing is spent and the
earlier outputs stay as they were. What the source's values can tell (text booleans, NaN and
infinities under learned bounds) is read by a documented rule and never ends in a cast error
after budget was spent."""

import math

import dagster as dg
import duckdb
import pytest
import yaml

from dp_synth_assets.core.config import (MAX_TOTAL_SD, RegistryError, load_registry,
                                         noisy_total_sd_bound, parse_registry)
from dp_synth_assets.core.privacy import rho_from_epsilon_delta
from dp_synth_assets.definitions import build_definitions
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import example_entry

PRIVACY = {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 10.0, "delta": 1e-8}}
COLUMNS = {"a": {"kind": "integer", "bounds": [0, 9]}, "b": {"kind": "boolean"}}


def entry(**overrides) -> dict:
    return {"source": {"table": "main.t"}, "columns": COLUMNS, "privacy": PRIVACY, **overrides}


def refused(tmp_path, text: str) -> str:
    path = tmp_path / "datasets.yaml"
    path.write_text(text)
    with pytest.raises(RegistryError) as caught:
        load_registry(path)
    return str(caught.value)


# ------------------------------------------------------------------------------------ at load


def test_a_second_limit_key_is_refused_naming_the_key_and_both_lines(tmp_path):
    text = """datasets:
  t:
    source: {table: main.t}
    columns: {a: {kind: integer, bounds: [0, 9]}, b: {kind: boolean}}
    privacy:
      epsilon: 1.0
      delta: 1.0e-9
      limit: {epsilon: 2.0, delta: 1.0e-8}
      limit: {epsilon: 50.0, delta: 1.0e-8}
"""
    message = refused(tmp_path, text)
    assert "'limit'" in message and "line 8" in message and "line 9" in message, message


def test_two_entries_of_one_name_are_refused(tmp_path):
    body = ("{source: {table: main.t}, columns: {a: {kind: integer, bounds: [0, 9]}, "
            "b: {kind: boolean}}, privacy: {epsilon: 1.0, delta: 1.0e-9, "
            "limit: {epsilon: 2.0, delta: 1.0e-8}}}")
    message = refused(tmp_path, f"datasets:\n  t: {body}\n  t: {body}\n")
    assert "'t'" in message and "line 2" in message and "line 3" in message, message


@pytest.mark.parametrize("key,value", [
    ("epsilon", True), ("epsilon", "1"), ("delta", False), ("delta", "1e-9"),
])
def test_an_epsilon_or_delta_that_is_not_a_number_is_refused(key, value):
    privacy = {**PRIVACY, key: value}
    with pytest.raises(RegistryError, match=rf"privacy\.{key}.*expected a number"):
        parse_registry({"datasets": {"t": entry(privacy=privacy)}})


def test_a_limit_epsilon_too_large_for_the_accountant_is_a_clear_error():
    privacy = {**PRIVACY, "limit": {"epsilon": 1e300, "delta": 1e-8}}
    with pytest.raises(RegistryError, match=r"privacy\.limit\.epsilon.*largest whose rho"):
        parse_registry({"datasets": {"t": entry(privacy=privacy)}})


@pytest.mark.parametrize("seed", [-1, True, 2 ** 64, "7"])
def test_a_seed_numpy_cannot_take_is_refused_at_load(seed):
    with pytest.raises(RegistryError, match="'seed'"):
        parse_registry({"datasets": {"t": entry(seed=seed)}})


def test_an_epsilon_too_small_for_rows_same_is_refused_and_accepted_with_declared_rows():
    privacy = {**PRIVACY, "epsilon": 1e-300}
    with pytest.raises(RegistryError, match=r"too small for `rows: same`.*declare the number"):
        parse_registry({"datasets": {"t": entry(privacy=privacy)}})
    assert parse_registry({"datasets": {"t": entry(privacy=privacy, rows=100)}})["t"].rows == 100


def test_the_rows_same_rule_is_the_gaussian_total_bound_at_the_run_rho():
    # sd >= sqrt(1 / (2 rho)): one count of sensitivity 1 measured with the whole run's rho
    for epsilon in (1e-6, 1e-5, 1.0):
        rho = rho_from_epsilon_delta(epsilon, 1e-9)
        assert noisy_total_sd_bound(epsilon, 1e-9) == pytest.approx(math.sqrt(1 / (2 * rho)))
    assert noisy_total_sd_bound(1e-6, 1e-9) > MAX_TOTAL_SD > noisy_total_sd_bound(1e-5, 1e-9)
    parse_registry({"datasets": {"t": entry(privacy={**PRIVACY, "epsilon": 1e-5})}})
    with pytest.raises(RegistryError):
        parse_registry({"datasets": {"t": entry(privacy={**PRIVACY, "epsilon": 1e-6})}})
