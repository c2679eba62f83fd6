"""Live progress (issue 15): the log lines of the model fit, of selection rounds, of the checks and
of the utility report's classifiers arrive while the work happens, and the lines of private work
hold public facts only.

Each test hands the code a `log` that stamps every line with `time.monotonic()` (or records it in
one event list with the work it reports on), so "arrives while the work happens" is an ordering
of events, not a reading of Dagster's event log.
"""

import itertools
import re
import time

import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.core.measure import Measurement
from dp_synth_assets.core.select import METHODS, round_line, select
from dp_synth_assets.core.config import SelectionSettings
from tests.helpers import ChargeRecorder, counting_oracle, method_budget, needs_extra


class Stamped:
    """A `log` callable keeping (time.monotonic(), line) per line."""

    def __init__(self):
        self.lines: list[tuple[float, str]] = []

    def __call__(self, line: str) -> None:
        self.lines.append((time.monotonic(), line))


# ------------------------------------------------------------------------------ the pgm fit

FIT_DOMAIN = {"a": 100, "b": 100, "c": 100}
FIT_ITERATIONS = 1000


def fit_measurements() -> list[Measurement]:
    rng = np.random.default_rng(5)
    cliques = [("a",), ("b",), ("c",), ("a", "b"), ("b", "c")]
    return [Measurement(c, rng.poisson(20, size=[FIT_DOMAIN[x] for x in c]).astype(float), 3.0,
                        0.1) for c in cliques]


@pytest.fixture(scope="module")
def logged_fit():
    import jax

    from dp_synth_assets.core.generate import pgm

    log = Stamped()
    started = time.monotonic()
    model = pgm.fit(FIT_DOMAIN, fit_measurements(), 200_000.0, FIT_ITERATIONS, log=log)
    jax.block_until_ready(model.potentials)  # the fit is done when its potentials are computed
    return started, log.lines, time.monotonic(), model


@needs_extra("jax")
def test_the_fit_logs_compile_time_then_iterations_as_they_finish(logged_fit):
    started, lines, returned, _ = logged_fit
    texts = [line for _, line in lines]
    assert texts[0].startswith(f"pgm: {FIT_ITERATIONS} iterations on 5 measurements")
    compiled = re.fullmatch(r"pgm: JAX compiled the fit in ([0-9.]+)s", texts[1])
    assert compiled, texts[1]
    stamp_compiled = lines[1][0]
    assert 0 < float(compiled.group(1)) <= stamp_compiled - started + 0.1
    iterations = [(t, re.fullmatch(r"pgm: iteration (\d+)/(\d+), ([0-9.]+)s fitting", line))
                  for t, line in lines[2:]]
    assert all(m for _, m in iterations), texts
    done = [int(m.group(1)) for _, m in iterations]
    assert done == sorted(done) and done[-1] == FIT_ITERATIONS and len(done) >= 5
    # the lines are spread over the iterations as they finish: the first comes well before the
    # fit is done, the last when it is (JAX dispatches the blocks asynchronously; without waiting
    # for each block every line came within milliseconds, long before the work was done)
    first, last = iterations[0][0], iterations[-1][0]
    stamps = ([round(t - started, 3) for t, _ in lines], round(returned - started, 3))
    assert last - first >= 0.5 * (returned - stamp_compiled), stamps
    assert returned - last <= 0.25 * (returned - stamp_compiled), stamps


@needs_extra("jax")
def test_logging_does_not_change_the_fitted_model(logged_fit):
    from dp_synth_assets.core.generate import pgm

    *_, logged = logged_fit
    quiet = pgm.fit(FIT_DOMAIN, fit_measurements(), 200_000.0, FIT_ITERATIONS)
    for clique in quiet.potentials.cliques:
        np.testing.assert_array_equal(np.asarray(logged.potentials[clique].values),
                                      np.asarray(quiet.potentials[clique].values))


# ------------------------------------------------------------------------------ selection rounds

SELECT_DOMAIN = {"a": 4, "b": 3, "c": 5, "d": 3}
ROUND = re.compile(r"(\w+): round (\d+): chose \[('\w+'(?:, '\w+')*)\], rho ([0-9.e+-]+) charged")


def select_data(rows: int = 2000) -> dict[str, np.ndarray]:
    """b copies a most of the time, d copies c: pairs worth selecting."""
    rng = np.random.default_rng(11)
    a = rng.integers(0, 4, rows)
    c = rng.integers(0, 5, rows)
    return {"a": a, "b": np.where(rng.random(rows) < 0.8, a % 3, rng.integers(0, 3, rows)),
            "c": c, "d": np.where(rng.random(rows) < 0.8, c % 3, rng.integers(0, 3, rows))}


def exact_numbers(data: dict[str, np.ndarray]) -> set[int]:
    """Every count of every 1-, 2- and 3-way marginal of `data`, and the row count, above 9 (a
    smaller one could be a round number)."""
    oracle = counting_oracle(data, SELECT_DOMAIN)
    cliques = [c for k in (1, 2, 3) for c in itertools.combinations(SELECT_DOMAIN, k)]
    counts = {int(x) for m in oracle(cliques).values() for x in m.ravel()}
    return {x for x in counts | {len(data["a"])} if x > 9}


@pytest.mark.parametrize("method", ["mst", "aim", "ppsyn", "absyn", "privsyn"])
def test_selection_logs_each_round_as_it_ends_with_public_facts_only(method):
    data = select_data()
    events: list[tuple] = []
    recorder = ChargeRecorder()

    def charge(spend, **params):
        recorder(spend, **params)
        events.append(("charge", spend.rho, params))

    settings = SelectionSettings(max_rounds=2) if method == "aim" else SelectionSettings()
    if method == "ppsyn":  # two rounds keep the refits few
        from dp_synth_assets.core.select import ppsyn
        chosen = ppsyn.select(SELECT_DOMAIN, counting_oracle(data, SELECT_DOMAIN),
                              method_budget(method, 1.0), settings, charge, rounds=2,
                              log=lambda line: events.append(("log", line)))
    else:
        chosen = select(method, SELECT_DOMAIN, counting_oracle(data, SELECT_DOMAIN),
                        method_budget(method, 1.0), settings, charge,
                        log=lambda line: events.append(("log", line)))
    lines = [e[1] for e in events if e[0] == "log"]
    trace = chosen.details["rounds"]
    assert lines and len(lines) == len(trace)
    secrets = exact_numbers(data)
    for k, (line, step) in enumerate(zip(lines, trace), start=1):
        match = ROUND.fullmatch(line)
        assert match, line  # round, clique and rho: nothing else
        assert match.group(1) == method and int(match.group(2)) == k
        clique = [name.strip("'") for name in match.group(3).split(", ")]
        assert clique == step.get("clique", step.get("pair"))
        numbers = {float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?",
                                                 re.sub(r"'\w+'", "", line))}
        assert not numbers & {float(s) for s in secrets}, line
    if METHODS[method].measures_in_selection or method == "mst":
        # adaptive rounds: round k's line comes after round k's charges and before round k+1's,
        # and its rho is what those charges add up to
        for k, line in enumerate(lines, start=1):
            at = events.index(("log", line))
            mine = [e for e in events if e[0] == "charge" and e[2].get("round") == k]
            assert mine and all(events.index(e) < at for e in mine)
            assert all(events.index(e) > at for e in events
                       if e[0] == "charge" and e[2].get("round", 0) > k)
            assert line == round_line(method, k, tuple(ROUND.fullmatch(line).group(3)
                                                       .replace("'", "").split(", ")),
                                      sum(e[1] for e in mine))
    else:  # greedy rounds post-process scores released before them: rho 0, after every charge
        last_charge = max(i for i, e in enumerate(events) if e[0] == "charge")
        assert all(events.index(("log", line)) > last_charge for line in lines)
        assert all(line.endswith("rho 0 charged") for line in lines)


def test_a_method_without_a_log_parameter_still_runs_under_select(monkeypatch):
    from dp_synth_assets.core import select as selection

    calls = []

    class Plugin:
        @staticmethod
        def select(domain, oracle, budget, settings, charge):
            calls.append(domain)
            return "selected"

    monkeypatch.setattr(selection, "method_module", lambda method: Plugin)
    assert selection.select("manual", {"a": 2}, None, None, None, None, log=print) == "selected"
    assert calls == [{"a": 2}]


# ------------------------------------------------------------------------------ the checks


def test_each_check_is_logged_as_it_starts_and_as_it_ends(monkeypatch):
    from contextlib import nullcontext

    from dp_synth_assets.checks import suites

    events = []

    class FakeCheck:
        def __init__(self, name, passed):
            self.name, self.passed, self.rows = name, passed, suites.CHECKS[name].rows

        def run(self, table):
            events.append(("run", self.name))
            time.sleep(0.05)
            return type("Result", (), {"name": self.name, "passed": self.passed})()

    checks = {name: FakeCheck(name, passed=(name != "duplicates")) for name in suites.CHECKS}
    monkeypatch.setattr(suites, "CHECKS", checks)
    monkeypatch.setattr(suites.SyntheticTable, "read", staticmethod(lambda con, inputs: None))
    results = suites.run_all(lambda: nullcontext(), None,
                             log=lambda line: events.append(("log", line)))
    for result in results:  # a result is handed on after its end line, before the next check
        events.append(("yielded", result.name))
    rows = [n for n, c in checks.items() if c.rows]  # the checks that read rows come first
    assert rows == ["schema", "constraints"]
    order = rows + [n for n in checks if n not in rows]
    assert [e for e in events if e[0] == "run"] == [("run", n) for n in order]
    for name in order:
        start, run = events.index(("log", f"check {name}: started")), events.index(("run", name))
        end = next(i for i, e in enumerate(events)
                   if e[0] == "log" and re.fullmatch(rf"check {name}: (passed|failed) in "
                                                     r"[0-9.]+s", e[1]))
        assert start < run < end < events.index(("yielded", name))
        verdict = "failed" if name == "duplicates" else "passed"
        assert events[end][1].startswith(f"check {name}: {verdict} in ")


# ------------------------------------------------------------------------------ the utility report

ML_DOMAIN = {"x": 6, "y": 3, "noise": 4}


def ml_table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    x = rng.integers(0, 6, n)
    return pd.DataFrame({"x": x, "y": x % 3, "noise": rng.integers(0, 4, n)})


@needs_extra("report")
def test_each_classifier_is_logged_by_name_as_its_turn_starts(monkeypatch):
    from dp_synth_assets.evaluation import ml

    events = []
    make = ml._make_classifier

    def recorded(name, *args):
        model = make(name, *args)
        fit = model.fit

        def fitting(*a, **k):
            events.append(("fit", name))
            return fit(*a, **k)
        model.fit = fitting
        return model

    monkeypatch.setattr(ml, "_make_classifier", recorded)
    rng = np.random.default_rng(3)
    ml.ml_efficiency(ml_table(rng, 600), ml_table(rng, 200), ml_table(rng, 600), "y", ML_DOMAIN,
                     log=lambda line: events.append(("log", line)))
    expected = []
    for name in ml.CLASSIFIERS:  # its line, then its two fits (synthetic, real)
        expected += [("log", f"utility report: classifier {name}"), ("fit", name), ("fit", name)]
    assert events == expected


@needs_extra("report")
@pytest.mark.parametrize("test_rows", [200, 5])
def test_the_report_logs_the_same_lines_whatever_the_held_out_row_count(test_rows):
    from dp_synth_assets.evaluation import ml
    from dp_synth_assets.evaluation.report import utility_report

    rng = np.random.default_rng(4)
    lines = []
    report = utility_report(ml_table(rng, 600), ml_table(rng, test_rows), ml_table(rng, 600),
                            ML_DOMAIN, target="y", triples_count=2, log=lines.append)
    assert (report.ml is None) == (test_rows < ml.MIN_TEST_ROWS)  # the count is private...
    assert lines == [f"utility report: classifier {name}" for name in ml.CLASSIFIERS]  # ...not so the log
    quiet = []
    utility_report(ml_table(rng, 600), ml_table(rng, test_rows), ml_table(rng, 600), ML_DOMAIN,
                   target=None, triples_count=2, log=quiet.append)
    assert quiet == []  # no target (public): no classifier turns


# ------------------------------------------------------------------------------ the marginals

MARGINAL_LINE = re.compile(r"marginals: (\d+)/(\d+) marginals counted \((\d+)/(\d+) queries\)")


def test_the_marginals_log_counts_of_marginals_and_queries_as_they_are_stored():
    """A 300-column run spent 326 s in `marginals` without a line. The stage now says how many
    marginals it counts in how many queries, then about ten times how many are done: each line
    comes when exactly that many are in the table (read back from DuckDB as the line is
    logged), and holds counts of the plan only, never a time."""
    import duckdb

    from dp_synth_assets.core.marginals import _batches, compute_marginals

    columns = [f"x{i}" for i in range(40)]
    domain = {c: 3 for c in columns}
    cliques = list(itertools.combinations(columns, 2))  # 780 pairs, in 15 queries
    con = duckdb.connect()
    con.execute("CREATE SCHEMA private")
    rows = 1237
    con.execute("CREATE TABLE private.enc AS SELECT " + ", ".join(
        f"CAST((i * {k + 1}) % 3 AS INTEGER) AS {c}" for k, c in enumerate(columns))
        + f" FROM range({rows}) AS t(i)")
    seen = []

    def log(line):
        stored = con.execute("SELECT count(DISTINCT gid) FROM private.marginals").fetchone()[0] \
            if MARGINAL_LINE.fullmatch(line) else None
        seen.append((line, stored))

    compute_marginals(con, "private.enc", "private.marginals", columns, cliques, domain, log=log)
    queries = len(_batches(columns, cliques))
    assert queries > 10
    assert seen[0] == (f"marginals: counting {len(cliques)} marginals in {queries} queries", None)
    progress = [(MARGINAL_LINE.fullmatch(line), stored) for line, stored in seen[1:]]
    assert all(m for m, _ in progress), seen
    assert 5 <= len(progress) <= 10
    done = [int(m.group(1)) for m, _ in progress]
    assert done == sorted(done) and done[-1] == len(cliques)
    for m, stored in progress:
        assert int(m.group(1)) == stored  # said when that many are stored
        assert int(m.group(2)) == len(cliques) and int(m.group(4)) == queries
    assert not any(str(rows) in line for line, _ in seen)


# ------------------------------------------------------------------------------ preprocessing

MECHANISMS_LINE = re.compile(r"preprocessed: (\d+)/(\d+) mechanisms run")
SCAN_LINE = re.compile(r"preprocessed: scan (\d)/(\d): the exact aggregates of (\d+) mechanisms")


def test_preprocessing_logs_its_scans_and_counts_of_mechanisms_as_they_are_charged():
    """Each scan is announced as it starts, then about ten lines say how many mechanisms have
    run, each after exactly that many charges: counts of the spec's mechanisms, no time."""
    import duckdb

    from dp_synth_assets.core.config import ColumnSpec
    from dp_synth_assets.core.preprocess import all_tasks, preprocess

    rng = np.random.default_rng(7)
    rows = 2003
    frame = pd.DataFrame({
        **{f"k{i}": rng.choice(["a", "b", "c"], rows) for i in range(4)},
        **{f"n{i}": rng.integers(0, 500, rows) for i in range(4)},
        **{f"f{i}": rng.normal(50, 10, rows) for i in range(4)}})
    columns = {**{f"k{i}": ColumnSpec(kind="categorical") for i in range(4)},        # discover
               **{f"n{i}": ColumnSpec(kind="integer") for i in range(4)},  # bounds, density
               **{f"f{i}": ColumnSpec(kind="float", bounds=[0, 100]) for i in range(4)}}
    con = duckdb.connect()
    con.register("frame", frame)
    events = []
    preprocess(con, "frame", columns, 1.0, 1e-6,
               lambda spend, **params: events.append(("charge",)),
               log=lambda line: events.append(("log", line)))
    total = len(all_tasks(columns))
    assert total == 16
    lines = [e[1] for e in events if e[0] == "log"]
    assert lines[0] == "preprocessed: scan 1/2: the exact aggregates of 12 mechanisms"
    assert "preprocessed: scan 2/2: the exact aggregates of 4 mechanisms" in lines
    progress = [MECHANISMS_LINE.fullmatch(line) for line in lines
                if not SCAN_LINE.fullmatch(line)]
    assert all(progress) and 5 <= len(progress) <= 10, lines
    for at, event in enumerate(events):
        match = MECHANISMS_LINE.fullmatch(event[1]) if event[0] == "log" else None
        if match:  # said when exactly that many mechanisms have charged
            assert int(match.group(1)) == sum(e[0] == "charge" for e in events[:at])
            assert int(match.group(2)) == total
    assert lines[-1] == f"preprocessed: {total}/{total} mechanisms run"
    assert not any(str(rows) in line for line in lines)
