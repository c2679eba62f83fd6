"""The Dagster-layer perimeter (issue 13): change detection publishes no content digest, and a
private stage's failure publishes nothing about the data.

Both attacks of the issue are replayed: the one-row search against the source's fingerprint
(an adversary knowing every row but one tries candidates for the last value) and an outlier
whose value an error message used to quote. "Public" is everything the Dagster instance stores
(every event of every run, serialized whole: messages, metadata, tags, data versions, error
info), the sensor's cursor and run keys, and the public folder.
"""

import base64
import hashlib
import hmac
import json
import math
import os
import re
import threading
from concurrent.futures import ProcessPoolExecutor

from types import SimpleNamespace

import dagster as dg
import duckdb
import pytest
from dagster._core.definitions.observe import observe  # not re-exported by dagster
from dagster._serdes import serialize_value

from dp_synth_assets.core import change
from dp_synth_assets.infra import private_files
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.source_access import change_state_path, secret_path, source_version
from dp_synth_assets.resources.ledger import PrivacyLedger
from tests.helpers import EXAMPLE_REPORT, make_project, without_random_ids

pytestmark = pytest.mark.filterwarnings(
    "ignore:Starting in dagster 1.11:UserWarning", "ignore::dagster.BetaWarning")

DATASET = "example"
SENSOR = "example_source_change"
HEX32 = re.compile(r"^[0-9a-f]{32}$")


# ---- the pure parts: secret, MAC, state ---------------------------------------------------------


def test_secret_is_created_once_owner_only_and_the_same_for_concurrent_creators(tmp_path):
    path = tmp_path / "private" / "change_detection.key"
    secrets, barrier = [], threading.Barrier(8)

    def create():
        barrier.wait()
        secrets.append(private_files.load_or_create_secret(path))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(secrets)) == 1 and len(secrets[0]) == change.SECRET_BYTES
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "private").stat().st_mode & 0o777 == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert private_files.load_or_create_secret(path) == secrets[0]
    os.chmod(path, 0o644)  # a too-wide mode is narrowed
    private_files.load_or_create_secret(path)
    assert path.stat().st_mode & 0o777 == 0o600


def test_the_secret_comes_from_the_environment_when_a_secret_store_sets_it(tmp_path,
                                                                           monkeypatch):
    """A container run has no secret file to keep: DP_SYNTH_CHANGE_SECRET (64 hex digits)
    keys the MAC, and no file is written; a malformed value is refused, naming the variable and
    never quoting it."""
    from dp_synth_assets.source_access import change_secret

    project = make_project(tmp_path, rows=50)
    warehouse = project.defs_fn().resources["warehouse"]
    key = "ab" * 32
    monkeypatch.setenv("DP_SYNTH_CHANGE_SECRET", key)
    assert change_secret(warehouse) == bytes.fromhex(key)
    assert not secret_path(warehouse).exists()
    spec = load_registry(project.datasets)[DATASET]
    version = source_version(warehouse, spec, DATASET)
    assert HEX32.match(version) and not secret_path(warehouse).exists()
    for bad in ("ab" * 31, "zz" * 32, "s3cr3t-value"):
        monkeypatch.setenv("DP_SYNTH_CHANGE_SECRET", bad)
        with pytest.raises(change.ChangeDetectionError) as refused:
            change_secret(warehouse)
        assert "DP_SYNTH_CHANGE_SECRET" in str(refused.value) and bad not in str(refused.value)
    monkeypatch.delenv("DP_SYNTH_CHANGE_SECRET")
    assert change_secret(warehouse) == secret_path(warehouse).read_bytes()  # the file, as before


def test_mac_is_hmac_sha256_keyed_by_the_installation_secret(tmp_path, monkeypatch):
    """The MAC is HMAC-SHA256 (RFC 4231's test case 2, a published vector), and the source's
    fingerprint depends on the installation's secret: the same table under two secrets gives
    two MACs, under one secret one MAC, and never an unkeyed digest of its summary."""
    from dp_synth_assets.source_access import fingerprint

    assert change.change_mac(b"Jefe", "what do ya want for nothing?") == (
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    project = make_project(tmp_path, rows=50)
    warehouse = project.defs_fn().resources["warehouse"]
    spec = load_registry(project.datasets)[DATASET]
    macs = {}
    for key in ("ab" * 32, "cd" * 32):
        monkeypatch.setenv("DP_SYNTH_CHANGE_SECRET", key)
        macs[key] = fingerprint(warehouse, spec, dataset=DATASET)
        assert fingerprint(warehouse, spec, dataset=DATASET) == macs[key]
    assert macs["ab" * 32] != macs["cd" * 32]
    with duckdb.connect(str(project.warehouse), read_only=True) as con:
        summary = content_summary(con, "main.example")
    assert not set(macs.values()) & digest_forms([summary], secret=None)


def test_version_holds_while_the_mac_holds_and_is_new_at_every_change(tmp_path):
    state = tmp_path / "example" / "change_state.json"
    seen = [private_files.observe(state, mac) for mac in ("A", "A", "B", "A", "A", "B")]
    assert seen[0] == seen[1] and seen[3] == seen[4]
    assert len({seen[0], seen[2], seen[3], seen[5]}) == 4  # back to A or B: a new id each time
    assert all(HEX32.match(v) for v in seen)
    stored = json.loads(state.read_text())
    assert stored["mac"] == "B" and stored["version"] == seen[5]  # the MAC stays private
    assert state.stat().st_mode & 0o777 == 0o600


def test_advance_is_a_pure_state_transition():
    ids = iter(["v1", "v2"])
    first = change.advance(None, "m1", mint=lambda: next(ids))
    assert first.version == "v1" and first.mac == "m1"
    assert change.advance(first, "m1", mint=lambda: next(ids)) is first
    assert change.advance(first, "m2", mint=lambda: next(ids)).version == "v2"


def _observe(args):
    return private_files.observe(*args)


def test_concurrent_observers_agree_on_one_version(tmp_path):
    state = tmp_path / "example" / "change_state.json"
    with ProcessPoolExecutor(4) as pool:
        versions = list(pool.map(_observe, [(state, "same mac")] * 16))
    assert len(set(versions)) == 1
    assert json.loads(state.read_text())["version"] == versions[0]


# ---- the one-row search, replayed ---------------------------------------------------------------


def content_summary(con, relation: str) -> str:
    from dp_synth_assets.core.sql import sql

    return con.execute(sql("content_summary", source=relation)).fetchone()[0]


HASHES = ("md5", "sha1", "sha256", "sha512", "blake2b", "sha3_256")


def digest_forms(texts: list[str], secret: bytes | None) -> set[str]:
    """Every form a leaked digest of `texts` (a content summary, a change signal) could take:
    the text itself when it is one token (a summary's digits); its unkeyed hashes (`HASHES`;
    the old fingerprint was sha256 of the summary); its HMAC-SHA256 under the installation's
    secret (today's change MAC); each in lower hex, upper hex, base64 and URL-safe base64. A public text holding any 12-character
    window of one of them (`leaked_digests`) holds a truncation of it."""
    forms = set()
    for text in texts:
        raw = [hashlib.new(name, text.encode()).digest() for name in HASHES]
        if secret is not None:
            raw.append(hmac.new(secret, text.encode(), hashlib.sha256).digest())
        if re.fullmatch(r"[\w.+-]+", text):
            forms.add(text)
        for digest in raw:
            forms |= {digest.hex(), digest.hex().upper(), base64.b64encode(digest).decode(),
                      base64.urlsafe_b64encode(digest).decode()}
    return forms


def leaked_digests(public: str, forms: set[str], width: int = 12) -> set[str]:
    """The forms of which `public` holds a `width`-character window (a truncation, a prefix or
    a suffix): hex and base64 runs of the public text are cut into windows and compared."""
    tokens = set(re.findall(r"[A-Za-z0-9+/_=-]{%d,}" % width, public))
    seen = {t[i:i + width] for t in tokens for i in range(len(t) - width + 1)}
    return {f for f in forms if f in public
            or any(f[i:i + width] in seen for i in range(len(f) - width + 1))}


def recorded_signals(monkeypatch) -> list[str]:
    """The change signals `change_mac` is asked for while the test runs (behaviour unchanged)."""
    signals = []
    real = change.change_mac

    def recording(secret, signal):
        signals.append(signal)
        return real(secret, signal)

    monkeypatch.setattr(change, "change_mac", recording)
    return signals


def published(instance: dg.DagsterInstance, project=None) -> str:
    """Everything public: every event of every run of the instance (serialized whole), the runs'
    tags, and the text files of the public folder."""
    texts = []
    for run in instance.get_runs():
        texts.append(json.dumps(run.tags))
        texts += [serialize_value(entry) for entry in instance.all_logs(run.run_id)]
    if project is not None and project.public.exists():
        texts += [p.read_text(errors="replace") for p in project.public.rglob("*")
                  if p.is_file() and p.suffix in (".json", ".html", ".txt")]
    return "\n".join(texts)


def tick(defs, instance, cursor=None):
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources,
                                 definitions=defs) as context:
        return defs.get_sensor_def(SENSOR).evaluate_tick(context)


def replay_one_row_search(tmp_path, monkeypatch) -> SimpleNamespace:
    """The attack's setting: the source observed, the sensor ticked, the one row changed, the
    sensor ticked and the source observed again. Returns what is public, the digest forms of
    every candidate's summary and change signal (`digest_forms`, under the installation's
    secret), and the run's pieces."""
    project = make_project(tmp_path / "one", rows=400, min_interval="0s")
    defs = project.defs_fn()
    source = next(a for a in defs.assets if getattr(a, "key", None) == dg.AssetKey([DATASET, "source"]))
    true_income = 54321.0
    with duckdb.connect(str(project.warehouse)) as con:
        con.execute("UPDATE main.example SET income = ? WHERE rowid = 0", [true_income])
        con.execute("CREATE TEMP TABLE known AS SELECT * FROM main.example WHERE rowid <> 0")
        con.execute("CREATE TEMP TABLE target AS SELECT * FROM main.example WHERE rowid = 0")
        actual = content_summary(con, "main.example")
        candidates = {}
        for c in [true_income + 10 * k for k in range(-20, 21)]:
            con.execute("CREATE OR REPLACE TEMP TABLE guess AS SELECT * FROM known UNION ALL "
                        f"SELECT * REPLACE (CAST({c} AS DOUBLE) AS income) FROM target")
            candidates[c] = content_summary(con, "guess")
    # the search is sound: the true value reproduces the source's summary, and only it
    assert [c for c, s in candidates.items() if s == actual] == [true_income]

    signals = recorded_signals(monkeypatch)
    instance = dg.DagsterInstance.ephemeral()
    observed = observe([source], resources=defs.resources, instance=instance)
    assert observed.success
    first = tick(defs, instance)
    with duckdb.connect(str(project.warehouse)) as con:
        con.execute("UPDATE main.example SET income = income + 1 WHERE rowid = 0")
        after = content_summary(con, "main.example")
    changed = tick(defs, instance, first.cursor)
    [request] = changed.run_requests
    assert observe([source], resources=defs.resources, instance=instance).success
    assert signals and all(actual in x or after in x for x in signals)

    public = published(instance) + first.cursor + changed.cursor + request.run_key + json.dumps(
        request.tags)
    secret = secret_path(defs.resources["warehouse"]).read_bytes()
    # every candidate's summary and its change signal (the real signal with the summary
    # replaced: the schema part is the same for every candidate)
    texts = [after, *signals] + [t for summary in candidates.values()
                                 for t in (summary, signals[0].replace(actual, summary))]
    return SimpleNamespace(public=public, forms=digest_forms(texts, secret), secret=secret,
                           project=project, defs=defs, instance=instance, first=first,
                           changed=changed, true_income=true_income)


def test_one_row_search_finds_no_digest_to_match(tmp_path, monkeypatch):
    """An adversary knows every row but the income of row 0 and tries candidates. Before, one
    candidate's digest equalled the published data version. Now nothing public is a function of
    the content: no form of any candidate's digest (nor of the true one), keyed or not, whole or
    truncated, appears anywhere, the version of the same table differs between installations,
    and a return to an earlier content gets a new version."""
    search = replay_one_row_search(tmp_path, monkeypatch)
    project, defs, instance = search.project, search.defs, search.instance
    first, changed, true_income, public = (search.first, search.changed, search.true_income,
                                           search.public)
    assert not leaked_digests(public, search.forms)
    mac = json.loads(change_state_path(defs.resources["warehouse"], DATASET).read_text())["mac"]
    assert mac in search.forms and not leaked_digests(public, {mac})  # the keyed MAC is private
    assert not leaked_digests(public, {search.secret.hex(),
                                       base64.b64encode(search.secret).decode()})

    # what is public is an opaque id: the data version equals the sensor's, is 32 hex digits
    versions = [e.asset_observation_data.asset_observation.data_version
                for r in instance.get_runs() for e in
                (x.dagster_event for x in instance.all_logs(r.run_id))
                if e is not None and e.event_type_value == "ASSET_OBSERVATION"]
    assert len(versions) == 2 and all(HEX32.match(v) for v in versions)
    assert set(versions) == {json.loads(first.cursor)["version"],
                             json.loads(changed.cursor)["version"]}

    # not a function of the table: a second installation with the same table gets another id,
    # and going back to the earlier content gives a third
    other = make_project(tmp_path / "two", rows=400)
    with duckdb.connect(str(other.warehouse)) as con:
        con.execute("UPDATE main.example SET income = ? WHERE rowid = 0", [true_income])
    spec = load_registry(other.datasets)[DATASET]
    again = source_version(other.defs_fn().resources["warehouse"], spec, DATASET)
    assert again != versions[0] and HEX32.match(again)
    with duckdb.connect(str(project.warehouse)) as con:
        con.execute("UPDATE main.example SET income = ? WHERE rowid = 0", [true_income])
    back = source_version(defs.resources["warehouse"], load_registry(project.datasets)[DATASET],
                          DATASET)
    assert back not in versions


@pytest.mark.parametrize("leak", ["keyed MAC", "sha256 of the summary", "base64 MAC prefix"])
def test_the_digest_search_finds_a_version_made_from_the_content(tmp_path, monkeypatch, leak):
    """The control: a change detection that published a digest as the data version (the old
    scheme, or today's keyed MAC, or a base64 prefix of it) is caught by the same search."""
    summaries = {}
    real_mac, real_observe = change.change_mac, private_files.observe

    def remembering(secret, signal):
        mac = real_mac(secret, signal)
        summaries[mac] = json.loads(signal)["content"]
        return mac

    def mint_from(mac):
        if leak == "keyed MAC":
            return mac[:32]
        if leak == "sha256 of the summary":
            return hashlib.sha256(summaries[mac].encode()).hexdigest()[:32]
        return base64.urlsafe_b64encode(bytes.fromhex(mac)).decode()[:22]

    monkeypatch.setattr(change, "change_mac", remembering)
    monkeypatch.setattr(private_files, "observe", lambda state_path, mac: real_observe(
        state_path, mac, mint=lambda: mint_from(mac)))
    search = replay_one_row_search(tmp_path, monkeypatch)
    assert leaked_digests(search.public, search.forms)


# ---- private failures ---------------------------------------------------------------------------


PLANTED = 123456789012345.67
BIN_WIDTH = 400000.0 / 31  # the example's income: bounds [0, 400000], 31 bins


def numbers_in(text: str) -> list[float]:
    """The decimal numbers in `text`, random identifiers left out (`without_random_ids`)."""
    text = without_random_ids(text)
    return [float(t) for t in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text)]


def test_numbers_in_reads_decimals_not_hex_identifiers():
    """The leak scans' number reader: a planted value is found written plainly, in exponent
    form and inside JSON; the digits of a random data version, run id or GX asset-name token are
    not numbers (CI failed once when a data version's "...4062795494e4ed9" fell within 0.1% of
    a target, and a leak scan once when a GX token's digits equalled an exact count)."""
    assert numbers_in('{"income": 123456789012345.67}') == [123456789012345.67]
    assert numbers_in("x=1.2345678901234567e+14, n=-3") == [1.2345678901234567e14, -3.0]
    version = "1fa029603000402e33eca2fba6e64265551e7b05f0f90763f4062795494e4ed9"
    assert numbers_in(f'"dagster/data_version": "{version}"') == []
    assert numbers_in("run 9f0b83c7-e574-4856-b243-dc8e33a49f17 of 1500 rows") == [1500.0]
    assert numbers_in('"data_asset_name": "asset__example_domain__c1957b0e2f5a"') == []


def assert_nothing_of(values: list[float], text: str) -> None:
    """No number in `text` within 0.1% of any of `values`, nor their leading digits."""
    for value in values:
        assert not any(math.isclose(n, value, rel_tol=1e-3) for n in numbers_in(text)), value
        assert f"{abs(value):.0f}"[:9] not in text.replace(",", "").replace("_", ""), value


def log_of(project):
    return project.warehouse.parent / "private" / DATASET / "private.log"


def materialize(defs, instance):
    return dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                          instance=instance, raise_on_error=False)


def failure_messages(result) -> list[str]:
    return [e.event_specific_data.error.message for e in result.all_events
            if e.event_type_value == "STEP_FAILURE"]


def assert_spent_only_what_was_charged(project, run_id: str) -> None:
    ledger = PrivacyLedger(project.ledger)
    charged = sum(e["rho"] for e in ledger.events(DATASET)
                  if e["run_id"] == run_id and e["kind"] == "charge")
    summary = ledger.summary(DATASET)
    assert summary.reserved_rho == 0
    assert summary.spent_rho == pytest.approx(charged, abs=1e-15)


@pytest.mark.parametrize("report", [None, "holdout"])
def test_an_overflowing_outlier_reaches_no_public_event_or_file(tmp_path, monkeypatch, report):
    """The issue's second attack: one income of 1.2e14 used to overflow the bin index's cast
    and DuckDB quoted it. Whether the run fails (the cast) or succeeds (a total encoding), no
    public event, tag, data version or file holds the value or its bin index, and no digest of
    the source. Without a report the outlier is a training row (read by `marginals`); with the
    example's report, this row falls in the held-out rows, read only by `utility_report`."""
    project = make_project(tmp_path, rows=1500, report=None if report is None else EXAMPLE_REPORT)
    with duckdb.connect(str(project.warehouse)) as con:
        con.execute("UPDATE main.example SET income = ? WHERE rowid = 7", [PLANTED])
        summary = content_summary(con, "main.example")
    defs = project.defs_fn()
    instance = dg.DagsterInstance.ephemeral()
    source = next(a for a in defs.assets if getattr(a, "key", None) == dg.AssetKey([DATASET, "source"]))
    signals = recorded_signals(monkeypatch)
    assert observe([source], resources=defs.resources, instance=instance).success
    result = materialize(defs, instance)

    public = published(instance, project)
    assert_nothing_of([PLANTED, PLANTED / BIN_WIDTH], public)
    assert signals and summary in signals[0]
    secret = secret_path(defs.resources["warehouse"]).read_bytes()
    assert not leaked_digests(public, digest_forms([summary, *signals], secret))
    if not result.success:
        [message] = failure_messages(result)
        assert "'example'" in message and str(log_of(project)) in message
        assert f"run {result.run_id}" in log_of(project).read_text()
    assert_spent_only_what_was_charged(project, result.run_id)


@pytest.mark.parametrize("stage,target", [
    ("preprocessed", "dp_synth_assets.core.stages.prepare_encoded_view"),
    ("selection", "dp_synth_assets.core.stages.run_method"),
    ("measurements", "dp_synth_assets.core.stages.draw"),
])
def test_a_private_stage_failure_publishes_no_value_of_its_exception(tmp_path, monkeypatch,
                                                                     stage, target):
    """A fault inside a private stage whose message quotes a value (as DuckDB's do) fails the
    run with a generic message naming the dataset, the stage and the private log; the value is
    only in that owner-only log, with the run id and the stage; nothing is left reserved and
    nothing is spent beyond what was charged before the fault; the outputs of an earlier run
    are untouched (there are none here: none is created)."""
    project = make_project(tmp_path, rows=1200, report=None)

    def fault(*args, **kwargs):
        raise duckdb.ConversionException(
            f"Conversion Error: Type DOUBLE with value {PLANTED!r} can't be cast to INT32")

    monkeypatch.setattr(target, fault)
    instance = dg.DagsterInstance.ephemeral()
    result = materialize(project.defs_fn(), instance)
    assert not result.success
    [message] = failure_messages(result)
    assert f"stage {stage!r}" in message and "'example'" in message
    assert "does not fit its declared spec" in message
    assert str(log_of(project)) in message
    assert_nothing_of([PLANTED], published(instance, project))

    log = log_of(project).read_text()
    assert repr(PLANTED) in log and result.run_id in log and f"stage {stage!r}" in log
    assert "Traceback" in log
    assert log_of(project).stat().st_mode & 0o777 == 0o600
    assert_spent_only_what_was_charged(project, result.run_id)
    failed = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failed[0].event_specific_data.error
    assert error.cause is None and error.context is None  # no chained exception published


def test_a_private_log_that_cannot_be_written_chains_nothing_to_the_public_failure(
        tmp_path, monkeypatch):
    """The private zone cannot take the log (here: a folder where the log file goes; a
    read-only or full volume fails the same write): the public failure says that the log could
    not be written, names only the write's exception type, and carries neither the stage's
    exception (which quotes a value) nor the write's, as cause or context, in any event."""
    project = make_project(tmp_path, rows=1200, report=None)
    canary = "SECRET_CANARY_999"

    def fault(*args, **kwargs):
        raise duckdb.InvalidInputException(
            f"CSV Error on Line: 7 Original Line: 7,B,{canary} Expected Number of Columns: 2 "
            f"Found: 3 (value {PLANTED!r})")

    monkeypatch.setattr("dp_synth_assets.core.stages.prepare_encoded_view", fault)
    log_of(project).mkdir(parents=True)  # the log's path is taken: its write fails
    instance = dg.DagsterInstance.ephemeral()
    result = materialize(project.defs_fn(), instance)
    assert not result.success
    [message] = failure_messages(result)
    assert f"The private log {log_of(project)} could not be written (IsADirectoryError)" \
        in message, message
    assert "stage 'preprocessed'" in message and "details of this failure are lost" in message
    public = published(instance, project)
    assert canary not in public and "Original Line" not in public
    assert_nothing_of([PLANTED], public)
    failed = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failed[0].event_specific_data.error
    assert error.cause is None and error.context is None
    assert_spent_only_what_was_charged(project, result.run_id)


def test_a_failing_source_observation_publishes_no_value(tmp_path, monkeypatch):
    project = make_project(tmp_path, rows=200)
    defs = project.defs_fn()

    def fault(*args, **kwargs):
        raise RuntimeError(f"value {PLANTED!r} broke the scan")

    monkeypatch.setattr("dp_synth_assets.core.change.change_mac", fault)
    source = next(a for a in defs.assets if getattr(a, "key", None) == dg.AssetKey([DATASET, "source"]))
    instance = dg.DagsterInstance.ephemeral()
    result = observe([source], resources=defs.resources, instance=instance,
                        raise_on_error=False)
    assert not result.success
    [message] = failure_messages(result)
    assert "stage 'source'" in message and "an unexpected error" in message
    assert_nothing_of([PLANTED], published(instance, project))
    assert repr(PLANTED) in log_of(project).read_text()
