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
from tests.helpers import REPO

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


def test_the_registry_reads_yaml_as_the_safe_loader_does_and_checks_keys_beside_a_merge():
    """The registry's own construction (strings, mappings and sequences built directly, other
    scalars by the safe constructor) gives what `yaml.safe_load` gives, anchors and merges
    included (but a plain number in exponent notation without a dot, which YAML 1.1 reads as
    text: see the next test); a key written twice beside a merge key is still refused."""
    from dp_synth_assets.core.config import DuplicateKey, parse_yaml

    documents = [
        (REPO / "datasets.yaml").read_text(),
        "a: 1\nb: [1, 2.5, true, null, ~, 2020-01-02, '3', 0x10, .inf, -0.5e+3, yes, 'no']\n",
        "base: &b {x: 1, y: [2, {z: 3}]}\nuse:\n  <<: *b\n  y: 3\nagain: *b\n",
        "- a\n- {k: v, 1: 2, 2.5: x, null: n}\n- !!str 12\n", "", "# only a comment\n",
    ]
    for text in documents:
        assert parse_yaml(text) == yaml.safe_load(text), text[:60]
    with pytest.raises(DuplicateKey, match="'y'.*line 4.*line 5"):
        parse_yaml("base: &b {x: 1}\nuse:\n  <<: *b\n  y: 1\n  y: 2\n")


def test_merges_build_as_the_safe_loader_builds_them():
    """YAML's merge rule, as `yaml.safe_load` applies it: own keys win, an earlier merged
    mapping wins over a later one, merged values are copies of the anchored ones."""
    from dp_synth_assets.core.config import parse_yaml

    for text in [
        "a: &a {x: 1, y: {z: 2}}\nb: &b {x: 3, w: 4}\nc:\n  <<: [*a, *b]\n  w: 5\n",
        "a: &a {x: 1}\nc: {<<: *a}\nd: {<<: [*a], x: 2}\n",
        "a: &a {x: {y: 1}}\nb: &b {<<: *a, z: 2}\nc: {<<: *b, q: 3}\n",
    ]:
        assert parse_yaml(text) == yaml.safe_load(text), text


@pytest.mark.parametrize("text,line", [
    # the case: a nested mapping beside a merge key, its `limit` written twice
    ("base: &base {a: 1}\nd:\n  <<: *base\n  privacy:\n    limit: {epsilon: 3}\n"
     "    limit: {epsilon: 3000}\n", 6),
    # a duplicate inside the anchored mapping that is merged
    ("base: &base\n  privacy:\n    limit: 3\n    limit: 3000\nd:\n  <<: *base\n", 4),
    # a duplicate inside one of a list of merged mappings
    ("a: &a {x: 1}\nb: &b\n  y: 1\n  y: 2\nd: {<<: [*a, *b]}\n", 4),
])
def test_a_key_written_twice_is_refused_in_every_construct_merges_included(text, line):
    from dp_synth_assets.core.config import DuplicateKey, parse_yaml

    with pytest.raises(DuplicateKey, match=f"line {line}"):
        parse_yaml(text)


def test_a_limit_written_twice_under_a_merge_key_refuses_the_registry(tmp_path):
    """A registry whose entry merges a base and writes its `privacy.limit` twice is refused
    when it loads, naming both lines; it does not reserve against either limit silently."""
    body = ("x-base: &base\n  source: {table: main.t}\n  columns: {b: {kind: boolean}}\n"
            "datasets:\n  t:\n    <<: *base\n    privacy:\n      epsilon: 1.0\n"
            "      delta: 1.0e-9\n      limit: {epsilon: 3.0, delta: 1.0e-8}\n"
            "      limit: {epsilon: 3000.0, delta: 1.0e-8}\n")
    message = refused(tmp_path, body)
    assert "'limit'" in message and "line 10" in message and "line 11" in message, message


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


# ------------------------------------------------------------------- the source's types and values

# one table with every source type the attack found costly: a boolean stored as text in many
# spellings, a TINYINT and a DECIMAL(4,2) under bounds wider than their types, an ENUM under
# categories with an `other` code, and a DOUBLE with NaN, +-inf and +-1e308 under learned bounds
SOURCE = """
CREATE TYPE letter AS ENUM ('x', 'y', 'z');
CREATE TABLE t AS SELECT
  ['true', ' Yes', 'T', 'y', '1', 'FALSE', 'no ', 'f', 'N', '0'][i % 10 + 1] AS flag,
  (i % 100)::TINYINT AS small,
  ((i % 97) / 10)::DECIMAL(4, 2) AS price,
  (['x', 'y', 'z'][i % 3 + 1])::letter AS letter,
  CASE i WHEN 0 THEN 'nan'::DOUBLE WHEN 1 THEN 'inf'::DOUBLE WHEN 2 THEN '-inf'::DOUBLE
         WHEN 3 THEN 1e308 WHEN 4 THEN -1e308 ELSE (i % 50)::DOUBLE END AS amount
FROM range(3000) r(i);
"""
SOURCE_COLUMNS = {
    "flag": {"kind": "boolean"},
    "small": {"kind": "integer", "bounds": [0, 1000], "bins": 10},
    "price": {"kind": "float", "bounds": [0, 1000], "bins": 10},
    "letter": {"kind": "categorical", "categories": ["x", "y"]},
    "amount": {"kind": "float", "nullable": True, "bins": 8},
}


def run_entry(tmp, columns, **overrides):
    """Materialize every asset and check of one dataset `t`; (result, ledger, outputs)."""
    path = tmp / "datasets.yaml"
    spec = {"source": {"table": "main.t"}, "columns": columns, "privacy": PRIVACY,
            "model": {"iterations": 200}, "seed": 3, **overrides}
    path.write_text(yaml.safe_dump({"datasets": {"t": spec}}))
    defs = build_definitions(path, tmp / "warehouse.duckdb", tmp / "ledger.sqlite", tmp / "public")
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    return result


def outputs(tmp) -> dict:
    files = {p: p.read_bytes() for p in (tmp / "public").rglob("*") if p.is_file()}
    con = duckdb.connect(str(tmp / "warehouse.duckdb"), read_only=True)
    try:
        files["table"] = con.execute("SELECT * FROM synthetic.t ORDER BY ALL").fetchall()
    finally:
        con.close()
    return files


def charged(tmp) -> float:
    return math.fsum(e["rho"] for e in PrivacyLedger(tmp / "ledger.sqlite").events()
                     if e["kind"] == "charge")


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("typed_source")
    con = duckdb.connect(str(tmp / "warehouse.duckdb"))
    con.execute(SOURCE)
    con.close()
    result = run_entry(tmp, SOURCE_COLUMNS)
    return tmp, result


@pytest.mark.e2e
def test_a_typed_source_synthesizes_with_every_check_passing_and_one_run_spent(typed):
    tmp, result = typed
    assert result.success
    checks = [e.event_specific_data for e in result.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert checks and all(c.passed for c in checks), [c.check_name for c in checks if not c.passed]
    ledger = PrivacyLedger(tmp / "ledger.sqlite")
    s = ledger.summary("t")
    from dp_synth_assets.core.budget import DatasetBudget
    spec = load_registry(tmp / "datasets.yaml")["t"]
    assert s.spent_rho == pytest.approx(DatasetBudget.of(spec).run_rho) and s.reserved_rho == 0


@pytest.mark.e2e
def test_a_boolean_stored_as_text_reads_its_spellings_case_insensitively(typed):
    tmp, _ = typed
    con = duckdb.connect(str(tmp / "warehouse.duckdb"), read_only=True)
    try:
        # the encoded view (private) reads 5 true and 5 false spellings: half the rows true
        codes = dict(con.execute("SELECT flag, count(*) FROM private.t_encoded GROUP BY flag")
                     .fetchall())
        share = con.execute("SELECT avg(flag::INTEGER) FROM synthetic.t").fetchone()[0]
        types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_schema = 'synthetic' AND table_name = 't'").fetchall())
    finally:
        con.close()
    assert codes == {0: 1500, 1: 1500}
    assert abs(share - 0.5) < 0.1, share
    assert types["flag"] == "BOOLEAN" and types["small"] == "BIGINT"


@pytest.mark.e2e
def test_learned_bounds_read_nan_as_null_and_clamp_infinities_without_a_cast_error(typed):
    tmp, _ = typed
    con = duckdb.connect(str(tmp / "warehouse.duckdb"), read_only=True)
    try:
        low, high = con.execute("SELECT min(amount), max(amount) FROM synthetic.t").fetchone()
    finally:
        con.close()
    assert math.isfinite(low) and math.isfinite(high) and high < 1e6


@pytest.mark.e2e
def test_a_text_that_reads_as_no_boolean_takes_the_fallback_and_the_run_goes_on(typed):
    """Half the flags read 'maybe': the column is not nullable, so they take its declared
    fallback (true); the run succeeds, publishes nothing of 'maybe', and the private log counts
    them."""
    tmp, _ = typed
    spent = charged(tmp)
    con = duckdb.connect(str(tmp / "warehouse.duckdb"))
    con.execute("CREATE OR REPLACE TABLE bad AS SELECT * REPLACE (CASE WHEN small % 2 = 0 "
                "THEN 'false' ELSE 'maybe' END AS flag) FROM t")
    con.close()
    columns = {**SOURCE_COLUMNS, "flag": {**SOURCE_COLUMNS["flag"], "fallback": True}}
    result = run_entry(tmp, columns, source={"table": "main.bad"})
    assert result.success
    for event in result.all_events:
        assert "maybe" not in str(event), event
    log = (tmp / "private" / "t" / "private.log").read_text()
    assert "'flag': 1500 values that do not read as booleans took the fallback code" in log, log
    assert charged(tmp) > spent
    con = duckdb.connect(str(tmp / "warehouse.duckdb"), read_only=True)
    try:
        share = con.execute("SELECT avg(CAST(flag AS INTEGER)) FROM synthetic.t").fetchone()[0]
    finally:
        con.close()
    assert 0.35 < share < 0.65, share  # about half read true: the fallback, not NULL or false


@pytest.mark.parametrize("column,refused", [
    ({"kind": "categorical", "categories": ["a", "other"]}, True),
    ({"kind": "categorical", "categories": ["a", "Other"], "other_label": "Other"}, True),
    ({"kind": "categorical", "categories": ["a", "other"], "other_label": "else"}, False),
    ({"kind": "categorical", "categories": ["a", "other"], "other": False}, False),
])
def test_a_category_named_like_the_other_code_is_refused_at_load(column, refused):
    """A declared category equal to the other code's label would merge with the values outside
    the list in the synthetic table (the audit counted 333 `other` rows against 167 real ones)."""
    registry = {"datasets": {"t": entry(columns={"c": column, "b": {"kind": "boolean"}})}}
    if not refused:
        parse_registry(registry)
        return
    with pytest.raises(RegistryError, match="also the label of the other code"):
        parse_registry(registry)


def test_a_plain_exponent_reads_as_a_number_and_a_quoted_one_says_how_to_write_it(tmp_path):
    """YAML 1.1 (PyYAML, Dagster's loader) reads a plain `1e-9` as text: datasets.yaml's loader
    reads it as the number; text in exponent notation (quoted, or from a Component's YAML) is
    refused naming how to write it."""
    from dp_synth_assets.core.config import parse_yaml

    assert parse_yaml("a: 1e-9\nb: -2E+3\nc: '1e-9'\nd: 1e\ne: x1e9\nf: -.5e3\n") == {
        "a": 1e-9, "b": -2000.0, "c": "1e-9", "d": "1e", "e": "x1e9", "f": -500.0}
    body = ("datasets:\n  t:\n    source: {table: main.t}\n"
            "    columns: {a: {kind: boolean}, b: {kind: boolean}}\n"
            "    privacy: {epsilon: 1, delta: 1e-9, limit: {epsilon: 2, delta: 1e-8}}\n")
    (tmp_path / "datasets.yaml").write_text(body)
    spec = load_registry(tmp_path / "datasets.yaml")["t"]
    assert spec.privacy.delta == 1e-9 and spec.privacy.limit.delta == 1e-8
    message = refused(tmp_path, body.replace("delta: 1e-9", "delta: '1e-9'"))
    assert "privacy.delta" in message and "write 1.0e-9" in message, message


@pytest.mark.parametrize("text,says", [
    # a recursive alias: a mapping that contains itself
    ("a: &x\n  b: *x\n", "recursive alias"),
    ("a: &x [1, *x]\n", "recursive alias"),
    # nested aliases, ten times more values per level (a billion at the last)
    ("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9)),
     "more than 1,000,000 values"),
])
def test_recursive_and_exploding_aliases_are_refused_at_once(tmp_path, text, says):
    message = refused(tmp_path, text)
    assert "is not valid YAML" in message and says in message, message
