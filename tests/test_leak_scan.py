"""The leak scan of issue 13: everything one run publishes holds no exact statistic of the source
and none of the values planted in it, on success and on each kind of failure.

What is published, by channel: every event of the Dagster event log (messages, metadata,
failure messages and their error info), the run's tags, the data versions, the source-change
sensor's cursor, run keys and skip messages, Dagster's captured stdout and stderr of the run (the
compute logs of a persistent instance), every file of the public zone (its name; JSON, HTML of the
Data Docs, the Parquet file's schema and key/value metadata), and the synthetic table's schema.

What must not be in it (`secrets_of`): every exact count and statistic of the source, small
integers included: the row counts (of the source, the training rows and the held-out rows: 447),
the minimum, maximum, sum and mean of every numeric column (and of the two sides of the split),
every distinct value of a float column, the NULL count and the count beyond the bounds of every
column, the count of every value of every categorical column (71 rows of a planted secret
country among them), the values outside the declared domain and the outliers planted to make a
cast overflow. Numbers are compared as numbers (a float within 1e-9 relative), strings as
substrings.

Some numbers are public by design and can equal a small secret: `public_numbers` lists them,
each from a public fact (datasets.yaml, the plan and the selection the run published, the DP
row count and the measured cliques, the budget figures and the ledger's counts, the progress
lines' steps, the model's configured iterations, log levels, package versions);
a secret equal to one of them cannot be searched for, and the test asserts that the held-out
count and the planted country's count are not among them. Before numbers are read, the text
loses what states no value of the data: random ids (`without_random_ids`), the test's own
temporary folders, timestamps, durations, a traceback's line numbers and Dagster's storage ids.

Two kinds of public output are statistics of noisy or synthetic data, full of integers that can
equal a small exact count by chance: the noisy marginals (the `noisy` arrays of
measurements.json and selection.json) and the checks' results on the synthetic table (checks/
and the Data Docs). There only distinctive numbers are searched (not an integer, or an integer
of at least 1000 and above the synthetic table's rows, which any of its counts may equal by
chance: a run of 1953 training rows once drew a synthetic count of 1953); every other channel is searched for every secret that is not public.
The noisy total is searched nowhere within 2 of its value (it may round to the exact count).
`test_the_scan_catches_a_small_count_leaked_to_the_event_log_or_to_stdout` shows that the scan
finds the held-out count when a run logs it or prints it.
"""

import hashlib
import itertools
import json
import math
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from dagster._core.definitions.observe import observe  # not re-exported by dagster
from dagster._core.events import DagsterEventType
from dagster._serdes import serialize_value

from dp_synth_assets.core.budget import BudgetStatus, DatasetBudget
from dp_synth_assets.core import preprocess as pp
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.core.domain import EncodingPlan
from dp_synth_assets.core.marginals import _batches
from dp_synth_assets.infra.store import location
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import (EXAMPLE_REPORT, TEST_DEFAULTS, example_entry, make_project, run_sql,
                           without_random_ids)

pytestmark = pytest.mark.filterwarnings(
    "ignore:Starting in dagster 1.11:UserWarning", "ignore::dagster.BetaWarning")

DATASET = "example"
ROWS = 2400
HELD_OUT = 447  # the example's 2400 rows with the planted ones: the split holds out 447
OUTLIER_INCOME = 123456789012345.67   # 1.2e14 in a column whose bounds are [0, 400000]
OUTLIER_HOURS = 8_765_432_109_876_543  # near BIGINT's limit: overflows `(v - low) * bins`
SECRET_COUNTRY = "Zyzzogeton-Republic"  # outside the declared categories: encoded as `other`
SECRET_COUNTRY_ROWS = 71                # row 13 and rows 100..169: a small count to search for
LEFT_OUT_COUNTRY = "Holand-Netherlands"  # in the example's rows, left out of its categories
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")  # not inside a name: int64
# what states no value of the data: when (ISO and GX's compact timestamps, dates) and how long
NOT_VALUES = (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?",
              r"\b\d{8}T\d{6}(?:\.\d+)?Z?", r"\b\d{4}-\d\d-\d\d\b",
              r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ms|s)\b",
              r"\bline \d+",  # a traceback's line numbers: the code's
              # Dagster's row ids in its own event storage
              r"storage_id['\"]?[:=] ?\d+", r"input_event_pointer/[\w/]+['\"]: ['\"]\d+")
# the outputs made of noisy or synthetic statistics: only distinctive numbers are searched there
NOISY_STATISTICS = "noisy marginals and checks of the synthetic table"


PLANTED_ROWS = (
    f"UPDATE main.example SET income = {OUTLIER_INCOME} WHERE rowid = 11",
    "ALTER TABLE main.example ALTER hours_per_week TYPE BIGINT",
    f"UPDATE main.example SET hours_per_week = {OUTLIER_HOURS} WHERE rowid = 12",
    f"UPDATE main.example SET country = '{SECRET_COUNTRY}' WHERE rowid = 13",
    f"UPDATE main.example SET country = '{SECRET_COUNTRY}' WHERE rowid BETWEEN 100 AND 169",
    f"UPDATE main.example SET country = '{LEFT_OUT_COUNTRY}' WHERE rowid = 14",
)


def secrets_of(project, spec) -> dict[float, str]:
    """Every exact count and statistic of the source (and of both sides of the holdout split),
    each with what it is; small integers included."""
    numbers: dict[float, str] = {}

    def add(value, what):
        if value is not None and math.isfinite(float(value)):
            numbers.setdefault(float(value), what)

    con = duckdb.connect(str(project.warehouse), read_only=True)
    relations = {"source": "main.example"}
    if spec.report is not None and spec.report.holdout > 0:  # the split's two sides
        from dp_synth_assets.core.source import holdout_relation, training_relation
        base = Path(project.datasets).parent
        relations["training rows"] = training_relation(spec, base, DATASET)
        relations["held-out rows"] = holdout_relation(spec, base, DATASET)
    try:
        for side, relation in relations.items():
            add(con.execute(f"SELECT count(*) FROM {relation}").fetchone()[0],
                f"row count of the {side}")
            for name, column in spec.columns.items():
                add(con.execute(f'SELECT count(*) FILTER (WHERE "{name}" IS NULL) '
                                f"FROM {relation}").fetchone()[0], f"NULLs of {name} ({side})")
                if column.kind in ("integer", "float"):
                    stats = con.execute(
                        f'SELECT min("{name}"), max("{name}"), sum("{name}"), avg("{name}") '
                        f"FROM {relation}").fetchone()
                    for what, value in zip(("min", "max", "sum", "mean"), stats):
                        add(value, f"{what} of {name} ({side})")
                    if column.bounds:
                        low, high = column.bounds
                        add(con.execute(f'SELECT count(*) FILTER (WHERE "{name}" < {low} OR '
                                        f'"{name}" > {high}) FROM {relation}').fetchone()[0],
                            f"values of {name} beyond its bounds ({side})")
                if column.kind == "float":  # every distinct value: floats with many digits
                    for (v,) in con.execute(f'SELECT DISTINCT "{name}" FROM {relation} '
                                            f'WHERE "{name}" IS NOT NULL').fetchall():
                        add(v, f"a value of {name}")
                if column.kind == "categorical":
                    for value, count in con.execute(
                            f'SELECT "{name}", count(*) FROM {relation} GROUP BY ALL').fetchall():
                        add(count, f"rows with {name} = {value!r} ({side})")
    finally:
        con.close()
    add(OUTLIER_INCOME, "a planted income")
    add(float(OUTLIER_HOURS), "a planted hours_per_week")
    return numbers


STRINGS = {SECRET_COUNTRY, LEFT_OUT_COUNTRY, "123456789012345", "8765432109876543",
           "1.2345678901234567e+14", "8.765432109876543e+18"}


def public_numbers(project, spec, public_zone=None) -> dict[float, str]:
    """The numbers public by design, each with the public fact it comes from: what a small
    secret may equal without being a leak. `public_zone` is where the runs published (the
    project's folder unless given: an object-store URL when the zone is a bucket)."""
    allowed: dict[float, str] = {}

    def add(values, why):
        for v in values:
            allowed.setdefault(float(v), why)

    add(NUMBER.findall(Path(project.datasets).read_text()), "datasets.yaml")
    add(range(0, TEST_DEFAULTS["model"]["iterations"] + 1, 20),
        "the model's configured iterations and its progress lines (every 20)")
    add((10, 20, 30, 40, 50), "log levels")
    add((len(spec.columns), math.comb(len(spec.columns), 2)),
        "the spec's column count and its pairs of columns")
    add(range(3), "counts of datasets, stages and attempts")
    versions = []
    for module in ("dagster", "duckdb", "great_expectations", "pyarrow", "numpy"):
        try:
            versions += NUMBER.findall(__import__(module).__version__)
        except ImportError:
            pass
    versions += [str(sys.version_info.major), str(sys.version_info.minor)]
    add(versions, "package versions")
    add([len(spec.columns) + math.comb(len(spec.columns), 2)],
        "the 1-way and 2-way marginals the selection counts")
    public = location(public_zone or project.public) / DATASET  # runs, and `current`
    for name in ("plan.json", "selection.json"):  # the spec's domain, DP preprocessing, selection
        for path in public.rglob(name):
            add(NUMBER.findall(json.dumps(without_noisy(json.loads(path.read_text())))),
                f"{name} (the spec and the run's DP releases)")
    tasks = len(pp.all_tasks(spec.columns))
    add(range(1, tasks + 1), "preprocessing's mechanisms (its progress lines)")
    for path in public.rglob("plan.json"):  # the marginals' progress: queries of the plan's
        columns = EncodingPlan.from_json(path.read_text()).columns  # 1- and 2-way cliques
        batches = _batches(columns, [(c,) for c in columns]
                           + list(itertools.combinations(columns, 2)))
        add(np.cumsum([len(b) for b in batches]), "the marginals' progress lines")
        add([len(batches)], "the marginals' progress lines")
    for path in public.rglob("measurements.json"):
        from dp_synth_assets.core.generate.pgm import junction_cells

        released = json.loads(path.read_text())
        total = released["noisy_total"]
        add(range(math.floor(total) - 2, math.ceil(total) + 3), "the noisy total, rounded")
        add([len(released["measurements"])], "the number of measurements")
        domain = EncodingPlan.from_json((path.parent / "plan.json").read_text()).domain
        cliques = [SimpleNamespace(clique=tuple(m["clique"])) for m in released["measurements"]]
        sizes = junction_cells(domain, cliques)
        add([sum(sizes), *sizes], "the model's junction tree (from the measured cliques)")
    for path in public.rglob("synthetic.parquet"):
        with path.open("rb") as f:
            rows = pq.read_metadata(f).num_rows
        add([rows], "the synthetic table's rows (the noisy total)")
    if Path(project.ledger).exists():
        ledger = PrivacyLedger(project.ledger)
        summary = ledger.summary(DATASET)
        add([v for v in vars(summary).values() if isinstance(v, (int, float))
             and not isinstance(v, bool)], "budget figures")
        status = BudgetStatus.of(summary, DatasetBudget.of(spec))
        add([status.runs_left or 0, status.remaining_rho, status.remaining_epsilon],
            "budget figures (runs left, remaining)")
        charges = sum(e["kind"] == "charge" for e in ledger.events(DATASET))
        add(range(1, charges + 1), "the charges' sequence numbers (the ledger's count)")
        add(range(1, ledger.head()[0] + 1), "the ledger's row count (its published head)")
    return allowed


def without_noisy(value):
    """A JSON value with its noisy arrays (`noisy` keys: DP marginals) left out."""
    if isinstance(value, dict):
        return {k: "<noisy>" if k == "noisy" else without_noisy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_noisy(v) for v in value]
    return value


def noisy_of(value) -> list:
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in ([v] if k == "noisy" else noisy_of(v))]
    if isinstance(value, list):
        return [x for v in value for x in noisy_of(v)]
    return []


@contextmanager
def persistent_instance(tmp_path: Path):
    """A Dagster instance on disk, whose compute log manager captures the run's stdout and
    stderr (an ephemeral instance captures nothing)."""
    home = Path(tmp_path) / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    with dg.DagsterInstance.local_temp(str(home)) as instance:
        yield instance


def captured_output(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """Dagster's captured stdout and stderr of a run (its compute logs)."""
    texts = []
    manager = instance.compute_log_manager
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.LOGS_CAPTURED):
        file_key = entry.dagster_event.event_specific_data.file_key
        data = manager.get_log_data(manager.build_log_key_for_run(run_id, file_key))
        texts += [(data.stdout or b"").decode(errors="replace"),
                  (data.stderr or b"").decode(errors="replace")]
    return texts


def published_texts(instance: dg.DagsterInstance, project, run_ids: list[str]
                    ) -> dict[str, list[str]]:
    """Everything the runs published, as text, by channel."""
    out: dict[str, list[str]] = {"event log": [], "run tags": [], "data versions": [],
                                 "captured stdout and stderr": [], "public files": [],
                                 "Parquet schema and metadata": [], "synthetic schema": [],
                                 NOISY_STATISTICS: []}
    for run_id in run_ids:
        out["event log"] += [serialize_value(e) for e in instance.all_logs(run_id)]
        out["run tags"].append(json.dumps(dict(instance.get_run_by_id(run_id).tags)))
        out["captured stdout and stderr"] += captured_output(instance, run_id)
    for key in instance.get_asset_keys():
        out["data versions"] += [repr(instance.get_latest_data_version_record(key)),
                                 repr(instance.get_latest_materialization_event(key))]
    for path in sorted(Path(project.public).rglob("*")):
        if path.is_dir():
            continue
        out["public files"].append(str(path.relative_to(project.public)))  # names are public
        if path.suffix == ".html" or {"checks", "data_docs"} & set(path.parts):
            # the checks' results on the synthetic table, and their Data Docs
            out[NOISY_STATISTICS].append(path.read_text(errors="replace"))
        elif path.suffix == ".json":
            value = json.loads(path.read_text())
            out["public files"].append(json.dumps(without_noisy(value)))
            out[NOISY_STATISTICS].append(json.dumps(noisy_of(value)))
        elif path.suffix in (".md", ".txt", ".csv", ".yaml"):
            out["public files"].append(path.read_text(errors="replace"))
        elif path.suffix == ".parquet":
            schema = pq.read_schema(path)
            out["Parquet schema and metadata"] += [repr(schema), repr(schema.metadata)]
    if Path(project.warehouse).exists():
        con = duckdb.connect(str(project.warehouse), read_only=True)
        try:
            out["synthetic schema"].append(repr(con.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'synthetic'").fetchall()))
        finally:
            con.close()
    return out


_NUMBERS: dict[tuple[bytes, tuple[str, ...]], np.ndarray] = {}


def numbers_published(texts: list[str], folders: list[Path]) -> np.ndarray:
    """The numbers in `texts`, sorted, once random ids, the test's folders, timestamps and
    durations are blanked. Remembered per text and folders: a run's event log is megabytes,
    which the scans of one run's channels (the control's, with a line added to one channel)
    would otherwise blank again for every channel they did not change."""
    blob = "\n".join(texts)
    # keyed by the text's digest, so the megabytes of text are not kept
    key = (hashlib.blake2b(blob.encode()).digest(), tuple(sorted(str(f) for f in folders)))
    if key not in _NUMBERS:
        _NUMBERS[key] = _numbers(blob, folders)
    return _NUMBERS[key]


def _numbers(blob: str, folders: list[Path]) -> np.ndarray:
    for folder in sorted({str(f) for f in folders}, key=len, reverse=True):
        blob = blob.replace(folder, "<folder>")
    blob = without_random_ids(blob)  # a UUID's digits state no value
    for pattern in NOT_VALUES:
        blob = re.sub(pattern, " ", blob)
    found = np.unique([float(t) for t in NUMBER.findall(blob)])
    return found[np.isfinite(found)]


def searched(secrets: dict[float, str], allowed: dict[float, str],
             noisy_total: float | None) -> dict[float, str]:
    """The secrets a scan looks for: those no public fact explains, and none within 2 of the
    noisy total."""
    return {n: what for n, what in secrets.items() if n not in allowed
            and not (noisy_total is not None and abs(n - noisy_total) < 2)}


def leaks(channels: dict[str, list[str]], secrets: dict[float, str], strings: set[str],
          folders: list[Path], allowed: dict[float, str],
          noisy_total: float | None = None) -> list[str]:
    """What of the secrets the channels publish: each as 'channel: what (value)'."""
    found_leaks = []
    targets = searched(secrets, allowed, noisy_total)
    for channel, texts in channels.items():
        raw = "\n".join(texts)
        found_leaks += [f"{channel}: {s!r}" for s in strings if s in raw]
        found = numbers_published(texts, folders)
        # a count of the synthetic table may be any integer up to its rows (the noisy total)
        chance = max(1000, math.ceil(noisy_total) + 3 if noisy_total is not None else 0)
        for n, what in sorted(targets.items()):
            if channel == NOISY_STATISTICS and n == int(n) and abs(n) < chance:
                continue  # integers of noisy or synthetic statistics: chance, not a leak
            i = np.searchsorted(found, n)
            near = found[max(i - 1, 0):i + 1]
            if np.any(np.abs(near - n) <= 1e-9 * abs(n)):
                found_leaks.append(f"{channel}: {what} ({n!r})")
    return found_leaks


def assert_no_leak(channels, project, spec, instance_home: Path | None = None,
                   noisy_total: float | None = None, secrets=None, strings=STRINGS,
                   public_zone=None) -> None:
    secrets = secrets_of(project, spec) if secrets is None else secrets
    folders = [Path(project.datasets).parent] + ([instance_home] if instance_home else [])
    found = leaks(channels, secrets, strings, folders,
                  public_numbers(project, spec, public_zone), noisy_total)
    assert not found, "published: " + "; ".join(found)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("leak"), rows=ROWS, report=EXAMPLE_REPORT,
                           privacy={"epsilon": 1.0, "delta": 1e-9,
                                    "limit": {"epsilon": 3.0, "delta": 1e-8}})
    run_sql(project, *PLANTED_ROWS)
    return project


@pytest.fixture(scope="module")
def planted_run(planted, tmp_path_factory):
    """The whole pipeline with the owner-only report on a persistent instance, the source
    observed, the sensor ticked twice around a change: (channels, secrets, noisy total, home)."""
    project = planted
    spec = load_registry(project.datasets)[DATASET]
    secrets = secrets_of(project, spec)
    home = tmp_path_factory.mktemp("instance")
    with persistent_instance(home) as instance:
        defs = project.defs_fn()
        source = next(a for a in defs.assets
                      if getattr(a, "key", None) == dg.AssetKey([DATASET, "source"]))
        observed = observe([source], instance=instance, resources=defs.resources)
        assert observed.success
        result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                                instance=instance, raise_on_error=False)
        assert result.success
        sensor = defs.get_sensor_def(f"{DATASET}_source_change")
        with dg.build_sensor_context(instance=instance, resources=defs.resources,
                                     definitions=defs) as context:
            first = sensor.evaluate_tick(context)
        run_sql(project, "INSERT INTO main.example SELECT * FROM main.example LIMIT 1")
        with dg.build_sensor_context(instance=instance, resources=defs.resources,
                                     cursor=first.cursor, definitions=defs) as context:
            second = sensor.evaluate_tick(context)
        channels = published_texts(instance, project, [observed.run_id, result.run_id])
    channels["sensor ticks"] = [
        text for tick in (first, second) for text in (
            repr(tick.cursor), repr(tick.skip_message),
            repr([(r.run_key, r.tags) for r in tick.run_requests or []]))]
    measurements = json.loads((project.public / DATASET / "measurements.json").read_text())
    return channels, secrets, measurements["noisy_total"], home


def test_a_successful_run_publishes_nothing_derived_from_the_source(planted, planted_run):
    """No exact statistic and no planted value in any channel, the compute logs included; the
    held-out count and the planted country's count are among the numbers searched for, in
    every channel but the noisy statistics."""
    channels, secrets, noisy_total, home = planted_run
    spec = load_registry(planted.datasets)[DATASET]
    targets = searched(secrets, public_numbers(planted, spec), noisy_total)
    assert targets.get(float(HELD_OUT)) == "row count of the held-out rows"
    assert targets.get(float(SECRET_COUNTRY_ROWS), "").startswith(
        f"rows with country = {SECRET_COUNTRY!r}")
    assert sum(n == int(n) and abs(n) < 1000 for n in targets) >= 20, targets  # small ones too
    assert any(channels["captured stdout and stderr"]), "the run's stdout/stderr was captured"
    assert_no_leak(channels, planted, spec, home, noisy_total, secrets)


def test_the_scan_catches_a_small_count_leaked_to_the_event_log_or_to_stdout(planted,
                                                                           planted_run):
    """The control: the same scan over the same run's channels, with one line added where a
    careless stage would write it (a log message in the event log, a print in the captured
    stdout), finds the held-out count there and only there."""
    channels, secrets, noisy_total, home = planted_run
    spec = load_registry(planted.datasets)[DATASET]
    allowed = public_numbers(planted, spec)
    folders = [Path(planted.datasets).parent, home]
    assert not leaks(channels, secrets, STRINGS, folders, allowed, noisy_total)
    for channel, line in (("event log", f'"user_message": "held out {HELD_OUT} rows"'),
                          ("captured stdout and stderr", f"rows held out: {HELD_OUT}\n")):
        leaked = {**channels, channel: channels[channel] + [line]}
        assert leaks(leaked, secrets, STRINGS, folders, allowed, noisy_total) == [
            f"{channel}: row count of the held-out rows ({float(HELD_OUT)!r})"]
    # in the noisy statistics a small integer is chance (a synthetic count may equal it)
    leaked = {**channels, NOISY_STATISTICS: channels[NOISY_STATISTICS] + [f"[{HELD_OUT}.0]"]}
    assert not leaks(leaked, secrets, STRINGS, folders, allowed, noisy_total)


@pytest.mark.parametrize("what, statements", [
    ("a NULL in a column not declared nullable",
     ("UPDATE main.example SET sex = NULL WHERE rowid = 5",)),
    ("a value outside categories declared exhaustive", ()),
    ("an empty source", ("DELETE FROM main.example",)),
])
def test_a_run_on_rows_a_column_cannot_represent_succeeds_and_publishes_nothing_of_them(
        tmp_path, what, statements):
    """No row decides whether a run succeeds (a value a column cannot represent takes its
    fallback), and nothing of the source is published; the planted values and counts are
    searched in every channel. Without the owner-only report, whose public side (the paths of
    its files) the planted run above scans."""
    overrides = {}
    if what.startswith("a value outside"):
        columns = {name: dict(column) for name, column in example_entry()["columns"].items()}
        columns["country"]["other"] = False  # the planted countries are outside the list
        overrides["columns"] = columns
    project = make_project(tmp_path / "project", rows=ROWS, report=None, **overrides)
    spec = load_registry(project.datasets)[DATASET]
    run_sql(project, *PLANTED_ROWS)
    secrets = secrets_of(project, spec)  # an empty source: those of the rows it had
    run_sql(project, *statements)
    with persistent_instance(tmp_path / "instance") as instance:
        defs = project.defs_fn()
        result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                                instance=instance, raise_on_error=False)
        assert result.success, what  # no row decides whether a run succeeds
        channels = published_texts(instance, project, [result.run_id])
    measurements = json.loads((project.public / DATASET / "measurements.json").read_text())
    assert_no_leak(channels, project, spec, tmp_path / "instance",
                   measurements["noisy_total"], secrets)


def test_an_exception_quoting_private_values_is_published_generically(tmp_path, monkeypatch):
    """A fault inside a private stage whose message quotes values, as DuckDB's errors do (here
    the held-out count too): the public failure says what failed and where the private log is,
    never the message, in the event log or in the captured stderr."""
    from dp_synth_assets.core import marginals as margs

    project = make_project(tmp_path / "project", rows=ROWS, report=EXAMPLE_REPORT)
    run_sql(project, *PLANTED_ROWS)
    spec = load_registry(project.datasets)[DATASET]

    def fault(*args, **kwargs):
        raise duckdb.ConversionException(
            f'Conversion Error: Could not convert string "{SECRET_COUNTRY}" to DOUBLE '
            f"(value {OUTLIER_INCOME!r}, {HELD_OUT} rows)")

    monkeypatch.setattr(margs, "compute_marginals", fault)
    with persistent_instance(tmp_path / "instance") as instance:
        defs = project.defs_fn()
        result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                                instance=instance, raise_on_error=False)
        assert not result.success
        channels = published_texts(instance, project, [result.run_id])
    assert any(channels["captured stdout and stderr"])
    assert_no_leak(channels, project, spec, tmp_path / "instance")
