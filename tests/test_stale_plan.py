"""A plan made from another spec is refused, and the checks judge the table against the spec.

The scenario of issue 32, item 3, with real Dagster runs: the whole dataset is materialized,
then datasets.yaml is edited (a category dropped, bounds narrowed, a type changed, a column
renamed, as the source's column was) and only the later stages are materialized. Each such run is
refused before it reserves or spends budget or publishes anything, naming the entry and the
stages to rerun; a run of the checks alone fails the schema and domain checks of the published
table, which contradicts the edited spec; the whole dataset then materializes a table that
follows it. The tests run in file order on one project.
"""

import hashlib
import json
import os

import dagster as dg
import duckdb
import pytest
import yaml

from dp_synth_assets.core.config import load_registry, parse_registry, plan_digest
from dp_synth_assets.core.domain import EncodingPlan
from dp_synth_assets.infra.store import MemoryStore, StalePlan
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import example_entry, make_project, run_sql

LATER = ["marginals", "selection", "measurements", "model", "synthetic"]


def materialize(defs, instance, stages=None, checks_only=False, checks: bool = True):
    """`stages` (default: every asset) with the checks of `synthetic` or without them
    (`checks`), or the checks alone."""
    if checks_only:
        selection = dg.AssetSelection.checks_for_assets(dg.AssetKey(["example", "synthetic"]))
    else:
        selection = dg.AssetSelection.all() if stages is None else dg.AssetSelection.assets(
            *(dg.AssetKey(["example", s]) for s in stages))
        if not checks:
            selection = selection.without_checks()
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=instance, selection=selection, raise_on_error=False)


def failure_message(result) -> str:
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    return failure.event_specific_data.error.message


def edited(entry: dict) -> dict:
    """The issue's edits: a category dropped, bounds narrowed, a type changed, a column renamed."""
    entry = json.loads(json.dumps(entry))
    columns = entry["columns"]
    columns["race"]["categories"] = [c for c in columns["race"]["categories"] if c != "Black"]
    columns["age"]["bounds"] = [20, 60]
    columns["household_size"]["type"] = "SMALLINT"
    columns = {("subscribed" if k == "newsletter" else k): v for k, v in columns.items()}
    return {**entry, "columns": columns}


def write_entry(project, entry: dict) -> None:
    project.datasets.write_text(yaml.safe_dump({"datasets": {"example": entry}}, sort_keys=False))


def rename_source_column(project) -> None:
    """The source's column `newsletter` renamed `subscribed`, as the edited entry declares it."""
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        names = [r[0] for r in con.execute("DESCRIBE main.example").fetchall()]
    finally:
        con.close()
    if "newsletter" in names:
        run_sql(project, "ALTER TABLE main.example RENAME COLUMN newsletter TO subscribed")


def public_state(project) -> dict:
    """Every public output of the dataset: the bytes of each file under public/example (the
    run lock aside: it says who holds the dataset), the links, and the synthetic table's rows."""
    state = {}
    for root, dirs, files in os.walk(project.public / "example"):
        for name in dirs + files:
            path = os.path.join(root, name)
            if name == "run.lock":
                continue
            if os.path.islink(path):
                state[path] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    state[path] = hashlib.sha256(f.read()).hexdigest()
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        rows = con.execute("SELECT * FROM synthetic.example").fetchall()
        described = con.execute("DESCRIBE synthetic.example").fetchall()
    finally:
        con.close()
    state["table"] = (hashlib.sha256(repr(sorted(map(repr, rows))).encode()).hexdigest(),
                      [tuple(r[:2]) for r in described])
    return state


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("stale_plan"), rows=1500)
    project.entry = example_entry()
    project.instance = dg.DagsterInstance.ephemeral()
    result = materialize(project.defs_fn(), project.instance, checks=False)  # the published set
    assert result.success
    return project


def test_the_plan_records_the_digest_of_its_spec(project):
    plan = EncodingPlan.from_json((project.public / "example" / "plan.json").read_text())
    spec = load_registry(project.datasets)["example"]
    assert plan.spec_digest == plan_digest(spec)
    assert len(plan.spec_digest) == 16


@pytest.mark.parametrize("stages", [["synthetic"], ["model", "synthetic"], LATER[2:], LATER[1:],
                                    LATER], ids=lambda s: "+".join(s))
def test_later_stages_refuse_a_plan_made_from_another_spec(project, stages):
    write_entry(project, edited(project.entry))
    rename_source_column(project)
    ledger = PrivacyLedger(project.ledger)
    events, before = ledger.events("example"), public_state(project)
    result = materialize(project.defs_fn(), project.instance, stages)
    assert not result.success
    message = failure_message(result)
    for part in ("dataset 'example'", str(project.datasets), "another version",
                 "'preprocessed' stage ran", "Materialize the whole dataset",
                 "preprocessed, marginals, selection, measurements, model and synthetic",
                 "before spending or publishing anything"):
        assert part in message, (part, message)
    # refused before the run's reservation: the ledger has no new row at all
    assert ledger.events("example") == events
    assert public_state(project) == before
    assert not result.get_asset_materialization_events()
    assert not result.get_asset_check_evaluations()


def test_edits_that_leave_the_plan_as_it_was_do_not_refuse_it(project):
    entry = json.loads(json.dumps(project.entry))
    entry.update(description="edited", min_interval="2h", seed=8, schedule="0 3 * * *",
                 on_source_change="ignore")
    entry["privacy"] = {**entry["privacy"], "epsilon": 0.9}
    entry["columns"]["age"] = {**entry["columns"]["age"], "type": "BIGINT", "nullable": False}
    write_entry(project, entry)
    assert plan_digest(load_registry(project.datasets)["example"]) == EncodingPlan.from_json(
        (project.public / "example" / "plan.json").read_text()).spec_digest
    spent = PrivacyLedger(project.ledger).summary("example").spent_rho
    result = materialize(project.defs_fn(), project.instance, ["model", "synthetic"],
                         checks=False)
    assert result.success
    assert PrivacyLedger(project.ledger).summary("example").spent_rho == spent


def test_the_checks_alone_judge_the_published_table_against_the_edited_spec(project):
    write_entry(project, edited(project.entry))
    result = materialize(project.defs_fn(), project.instance, checks_only=True)
    verdicts = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not verdicts["schema"].passed and not verdicts["domain"].passed
    # the columns whose values fall outside the edited spec's domain, with their counts
    outside = verdicts["domain"].metadata["outside"].value
    assert outside.get("race", 0) > 0 and outside.get("age", 0) > 0, outside
    types = {t["column"]: t for t in verdicts["schema"].metadata["types"].value}
    assert types["household_size"]["expected"] == "SMALLINT"
    assert types["household_size"]["warehouse"] == "INTEGER"
    assert types["subscribed"]["warehouse"] == "missing"


def test_the_whole_dataset_then_publishes_a_table_that_follows_the_spec(project):
    write_entry(project, edited(project.entry))
    rename_source_column(project)
    result = materialize(project.defs_fn(), project.instance)
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        described = dict(r[:2] for r in con.execute("DESCRIBE synthetic.example").fetchall())
        races = {r[0] for r in con.execute("SELECT DISTINCT race FROM synthetic.example").fetchall()}
        ages = con.execute("SELECT min(age), max(age) FROM synthetic.example").fetchone()
    finally:
        con.close()
    assert "newsletter" not in described and described["subscribed"] == "BOOLEAN"
    assert described["household_size"] == "SMALLINT"
    assert "Black" not in races
    assert 20 <= ages[0] <= ages[1] <= 60


def test_a_plan_without_a_digest_is_refused(project):
    """A plan written before plans carried their spec's digest cannot say what it was made from."""
    spec = load_registry(project.datasets)["example"]
    store = MemoryStore("example")
    plan = EncodingPlan.from_json((project.public / "example" / "plan.json").read_text())
    store.write_plan(EncodingPlan(plan.encodings, plan.noisy_rows))
    with pytest.raises(StalePlan, match="earlier version of dp-synth"):
        store.plan_for(spec)
    store.write_plan(plan)
    assert store.plan_for(spec) == plan


def test_the_refusal_names_the_components_defs_yaml():
    origin = "/project/defs/synth/defs.yaml (attributes.datasets)"
    spec = parse_registry({"datasets": {"example": example_entry()}}, origin)["example"]
    store = MemoryStore("example")
    store.write_plan(EncodingPlan((), spec_digest="0" * 16))
    with pytest.raises(StalePlan) as refused:
        store.plan_for(spec)
    assert "`attributes.datasets.example` in /project/defs/synth/defs.yaml" in str(refused.value)


# ------------------------------------------------------------------ what the digest depends on


def digest(entry: dict) -> str:
    return plan_digest(parse_registry({"datasets": {"example": entry}})["example"])


def test_the_digest_follows_what_the_plan_is_made_from():
    base = example_entry()
    columns = base["columns"]
    changed = [
        {**base, "columns": edited(base)["columns"]},
        {**base, "columns": {**columns, "sex": {**columns["sex"], "categories": ["Male", "Female"]}}},
        {**base, "columns": {**columns, "income": {**columns["income"], "bins": 30}}},
        {**base, "columns": {**columns, "newsletter": {**columns["newsletter"], "nullable": True}}},
        {**base, "columns": {**columns, "sex": {**columns["sex"], "fallback": "Male"}}},
        {**base, "columns": dict(reversed(list(columns.items())))},
        {**base, "source": {"table": "main.other"}},
        {**base, "engine": {"type": "duckdb", "schema": "elsewhere"}},
        {**base, "report": {"holdout": 0.3}},
    ]
    assert len({digest(base), *map(digest, changed)}) == len(changed) + 1


def test_the_digest_ignores_what_the_plan_is_not_made_from():
    base = example_entry()
    columns = base["columns"]
    same = [
        {**base, "privacy": {"epsilon": 2.0, "delta": 1e-9,
                             "limit": {"epsilon": 20.0, "delta": 1e-8}}},
        {**base, "method": "mst", "generator": "gum", "rows": 500, "seed": 1,
         "model": {"iterations": 5}, "schedule": "0 * * * *", "min_interval": "5m",
         "on_source_change": "ignore", "description": "another"},
        {**base, "source": {"table": "main.example", "asset": "upstream/example"}},
        # defaults written out
        {**base, "columns": {**columns, "age": {**columns["age"], "type": "BIGINT",
                                                "nullable": False, "binning": "uniform"},
                             "sex": {**columns["sex"], "theta": 0.002, "other": True,
                                     "other_label": "other", "missing": []}}},
    ]
    assert {digest(entry) for entry in same} == {digest(base)}


def test_the_digest_reads_the_source_as_the_rows_are_read_and_never_a_password():
    base = example_entry()
    csv = {"csv": "data/example.csv"}
    assert digest({**base, "source": csv}) == digest(
        {**base, "source": {**csv, "delimiter": ",", "header": True}})
    assert digest({**base, "source": csv}) != digest({**base, "source": {**csv, "delimiter": ";"}})
    server = {"attach": "host=db user=owner password=one", "type": "postgres", "table": "main.t"}
    assert digest({**base, "source": server}) == digest(
        {**base, "source": {**server, "attach": "host=db user=owner password=two"}})
    assert digest({**base, "source": server}) != digest(
        {**base, "source": {**server, "table": "main.u"}})
