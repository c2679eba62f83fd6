"""The leak scan of issue 13: everything one run publishes holds no exact statistic of the source
and none of the values planted in it, on success and on each kind of failure.

What is published: every event of the Dagster event log (messages, metadata, failure messages
and their error info, tags of the run, data versions), the source-change sensor's cursor, run
keys and skip messages, every file of the public zone (JSON, HTML of the Data Docs, the Parquet
file's schema and key/value metadata), and the synthetic table's schema. What must not be in it:
the exact row count (of the whole source, the training rows and the held-out rows), the exact
minimum, maximum, sum and mean of every numeric column, the values outside the declared domain
(a category left out of the declared list, a planted secret category), and the outliers planted
to make a cast overflow. Numbers are compared as numbers (a float within 1e-9 relative), strings
as substrings.

A number can collide with a noisy release by chance (the noisy row count rounds to the exact one
with a probability of a few percent): a secret is only searched for where a collision with a DP
output is impossible (it is never within 2 of the noisy total, and floats are searched with 12
significant digits).
"""

import json
import re
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from dagster._core.definitions.observe import observe  # not re-exported by dagster
from dagster._serdes import serialize_value

from dp_synth_assets.core.config import load_registry
from tests.helpers import example_entry, make_project, run_sql, without_random_ids

pytestmark = pytest.mark.filterwarnings(
    "ignore:Starting in dagster 1.11:UserWarning", "ignore::dagster.BetaWarning")

DATASET = "example"
ROWS = 2400
OUTLIER_INCOME = 123456789012345.67   # 1.2e14 in a column whose bounds are [0, 400000]
OUTLIER_HOURS = 8_765_432_109_876_543  # near BIGINT's limit: overflows `(v - low) * bins`
SECRET_COUNTRY = "Zyzzogeton-Republic"  # outside the declared categories: encoded as `other`
LEFT_OUT_COUNTRY = "Holand-Netherlands"  # in the example's rows, left out of its categories
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")



PLANTED_ROWS = (
    f"UPDATE main.example SET income = {OUTLIER_INCOME} WHERE rowid = 11",
    "ALTER TABLE main.example ALTER hours_per_week TYPE BIGINT",
    f"UPDATE main.example SET hours_per_week = {OUTLIER_HOURS} WHERE rowid = 12",
    f"UPDATE main.example SET country = '{SECRET_COUNTRY}' WHERE rowid = 13",
    f"UPDATE main.example SET country = '{LEFT_OUT_COUNTRY}' WHERE rowid = 14",
)


def secrets_of(project, spec) -> tuple[set[float], set[str]]:
    """The exact statistics (numbers) and the out-of-domain values (strings) of the source."""
    public = set()
    for column in spec.columns.values():  # the spec is public: its bounds may equal a min/max
        for bound in column.bounds or ():
            try:
                public.add(float(bound))
            except (TypeError, ValueError):
                pass
    con = duckdb.connect(str(project.warehouse), read_only=True)
    try:
        numbers = {float(con.execute("SELECT count(*) FROM main.example").fetchone()[0])}
        for name, column in spec.columns.items():
            if column.kind not in ("integer", "float"):
                continue
            numbers |= {float(v) for v in con.execute(
                f'SELECT min("{name}"), max("{name}"), sum("{name}"), avg("{name}") '
                f"FROM main.example").fetchone() if v is not None}
            if column.kind == "float":  # every distinct value: floats with many digits
                numbers |= {float(v) for (v,) in con.execute(
                    f'SELECT DISTINCT "{name}" FROM main.example WHERE "{name}" IS NOT NULL'
                ).fetchall()}
        if spec.report is not None and spec.report.holdout > 0:  # the split's two sides
            from dp_synth_assets.core.source import holdout_relation, training_relation
            base = Path(project.datasets).parent
            for relation in (training_relation(spec, base, DATASET),
                             holdout_relation(spec, base, DATASET)):
                numbers.add(float(con.execute(f"SELECT count(*) FROM {relation}").fetchone()[0]))
                numbers |= {float(v) for v in con.execute(
                    f"SELECT sum(income), avg(income), sum(age) FROM {relation}").fetchone()
                    if v is not None}
    finally:
        con.close()
    numbers |= {OUTLIER_INCOME, float(OUTLIER_HOURS)}
    # small integers (a min age of 17, a max of 8 per household) are everywhere in public
    # outputs by design (bins, codes); only distinctive numbers can be searched for
    numbers = {n for n in numbers if n not in public and (abs(n) >= 1000 or n != int(n))}
    strings = {SECRET_COUNTRY, LEFT_OUT_COUNTRY, "123456789012345", "8765432109876543",
               "1.2345678901234567e+14", "8.765432109876543e+18"}
    return numbers, strings


def published_texts(instance: dg.DagsterInstance, project, run_ids: list[str]) -> list[str]:
    """Everything a run published, as text: its events, its tags, the public files, the
    Parquet file's schema and key/value metadata, the synthetic table's schema."""
    texts = []
    for run_id in run_ids:
        for entry in instance.all_logs(run_id):
            texts.append(serialize_value(entry))  # message, metadata, error info, tags
        run = instance.get_run_by_id(run_id)
        texts.append(json.dumps(dict(run.tags)))
    for key in instance.get_asset_keys():
        record = instance.get_latest_data_version_record(key)
        texts.append(repr(record))
        texts.append(repr(instance.get_latest_materialization_event(key)))
    for path in sorted(Path(project.public).rglob("*")):
        if path.is_dir():
            continue
        texts.append(str(path))  # file names are published too
        if path.suffix in (".json", ".html", ".md", ".txt", ".csv", ".yaml"):
            texts.append(path.read_text(errors="replace"))
        elif path.suffix == ".parquet":
            schema = pq.read_schema(path)
            texts.append(repr(schema))
            texts.append(repr(schema.metadata))
    if Path(project.warehouse).exists():
        con = duckdb.connect(str(project.warehouse), read_only=True)
        try:
            texts.append(repr(con.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'synthetic'").fetchall()))
        finally:
            con.close()
    return texts


def assert_no_leak(texts: list[str], numbers: set[float], strings: set[str],
                   noisy_total: float | None = None) -> None:
    blob = without_random_ids("\n".join(texts))  # a UUID's digits state no value
    for s in strings:
        assert s not in blob, f"published: {s!r}"
    found = np.unique([float(t) for t in NUMBER.findall(blob)])
    found = found[np.isfinite(found)]
    for n in sorted(numbers):
        if noisy_total is not None and n == int(n) and abs(n - noisy_total) < 2:
            continue  # the noisy total may round to the exact count: a DP output, not a leak
        i = np.searchsorted(found, n)
        near = found[max(i - 1, 0):i + 1]
        assert not np.any(np.abs(near - n) <= 1e-9 * abs(n)), \
            f"published the exact statistic {n!r}"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("leak"), rows=ROWS,
                           privacy={"epsilon": 1.0, "delta": 1e-9,
                                    "limit": {"epsilon": 3.0, "delta": 1e-8}})
    run_sql(project, *PLANTED_ROWS)
    return project


def test_a_successful_run_publishes_nothing_derived_from_the_source(planted):
    """The whole pipeline with the owner-only report, the source observed, the sensor ticked
    twice around a change: no exact statistic and no planted value anywhere public."""
    project = planted
    spec = load_registry(project.datasets)[DATASET]
    numbers, strings = secrets_of(project, spec)
    instance = dg.DagsterInstance.ephemeral()
    defs = project.defs_fn()
    source = next(a for a in defs.assets
                  if getattr(a, "key", None) == dg.AssetKey([DATASET, "source"]))
    observed = observe([source], instance=instance, resources=defs.resources)
    assert observed.success
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=instance, raise_on_error=False)
    assert result.success
    sensor = defs.get_sensor_def(f"{DATASET}_source_change")
    texts = []
    with dg.build_sensor_context(instance=instance, resources=defs.resources,
                                 definitions=defs) as context:
        first = sensor.evaluate_tick(context)
    run_sql(project, "INSERT INTO main.example SELECT * FROM main.example LIMIT 1")
    with dg.build_sensor_context(instance=instance, resources=defs.resources,
                                 cursor=first.cursor, definitions=defs) as context:
        second = sensor.evaluate_tick(context)
    for tick in (first, second):
        texts += [repr(tick.cursor), repr(tick.skip_message),
                  repr([(r.run_key, r.tags) for r in tick.run_requests or []])]
    measurements = json.loads((project.public / DATASET / "measurements.json").read_text())
    texts += published_texts(instance, project, [observed.run_id, result.run_id])
    assert_no_leak(texts, numbers, strings, noisy_total=measurements["noisy_total"])


@pytest.mark.parametrize("what, statements", [
    ("a NULL in a column not declared nullable",
     ("UPDATE main.example SET sex = NULL WHERE rowid = 5",)),
    ("a value outside categories declared exhaustive", ()),
    ("an empty source", ("DELETE FROM main.example",)),
])
def test_a_run_on_rows_a_column_cannot_represent_succeeds_and_publishes_nothing_of_them(
        tmp_path, what, statements):
    overrides = {}
    if what.startswith("a value outside"):
        columns = {name: dict(column) for name, column in example_entry()["columns"].items()}
        columns["country"]["other"] = False  # the planted countries are outside the list
        overrides["columns"] = columns
    project = make_project(tmp_path, rows=ROWS, **overrides)
    run_sql(project, *PLANTED_ROWS, *statements)
    spec = load_registry(project.datasets)[DATASET]
    numbers, strings = secrets_of(project, spec) if statements != ("DELETE FROM main.example",) \
        else ({OUTLIER_INCOME}, {SECRET_COUNTRY})
    instance = dg.DagsterInstance.ephemeral()
    defs = project.defs_fn()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=instance, raise_on_error=False)
    assert result.success, what  # no row decides whether a run succeeds
    measurements = json.loads((project.public / DATASET / "measurements.json").read_text())
    assert_no_leak(published_texts(instance, project, [result.run_id]), numbers, strings,
                   noisy_total=measurements["noisy_total"])


def test_an_exception_quoting_private_values_is_published_generically(tmp_path, monkeypatch):
    """A fault inside a private stage whose message quotes a value, as DuckDB's errors do: the
    public failure says what failed and where the private log is, never the message."""
    from dp_synth_assets.core import marginals as margs

    project = make_project(tmp_path, rows=ROWS)
    run_sql(project, *PLANTED_ROWS)
    spec = load_registry(project.datasets)[DATASET]
    numbers, strings = secrets_of(project, spec)

    def fault(*args, **kwargs):
        raise duckdb.ConversionException(
            f'Conversion Error: Could not convert string "{SECRET_COUNTRY}" to DOUBLE '
            f"(value {OUTLIER_INCOME!r})")

    monkeypatch.setattr(margs, "compute_marginals", fault)
    instance = dg.DagsterInstance.ephemeral()
    defs = project.defs_fn()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=instance, raise_on_error=False)
    assert not result.success
    assert_no_leak(published_texts(instance, project, [result.run_id]), numbers, strings)
