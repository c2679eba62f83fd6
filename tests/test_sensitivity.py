"""Sensitivity by brute force: every query a mechanism answers, on a table and on each neighbour
that adds or removes one row, changes by at most the sensitivity the mechanism is charged for.

Neighbours: every removal, and the addition of every row of a small domain plus adversarial rows
(values at and beyond the bounds, NULLs and `missing` markers, undeclared categories, duplicates
of the most common row, rows in the rarest or empty cells). Tables: seeded random ones and
adversarial ones (one row, all rows equal, empty cells). The norm is the mechanism's: L2 for the
Gaussian vectors (one marginal, one histogram), per score for the noisy InDif / R-scores (the
vector's L2 is that times sqrt(m)), L-inf for the quality scores fed to the exponential mechanism,
(changed keys, L2, L-inf) for the thresholded Gaussian histogram, per node for PrivTree's biased
counts. The charged sensitivity is read from the Spend a real invocation reports, or from the
module constant the mechanism passes.

Two layers: raw rows -> exact aggregates through the real DuckDB SQL (encoded view + marginal
counts, preprocessing's exact aggregates), and code rows -> the scores the selection methods
compute from a marginal oracle. AIM's and ppsyn's quality scores are computed inline in their
selection loops, so they are captured where they are fed to the exponential mechanism, with the
model fit replaced by a fixed (public) estimate.
"""

import itertools
import math

import duckdb
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from dp_synth_assets.core.config import ColumnSpec
from dp_synth_assets.core.domain import build_plan, encode_view_sql, encoded_columns
from dp_synth_assets.core.marginals import count_marginals
from dp_synth_assets.core import measure as measure_module
from dp_synth_assets.core.measure import Measurement
from dp_synth_assets.core import preprocess as pp
from dp_synth_assets.core import privacy
from dp_synth_assets.core.privacy import gaussian_counts
from dp_synth_assets.core.select import Budget, aim, mst, ppsyn, privsyn
from dp_synth_assets.core.config import SelectionSettings

from helpers import ChargeRecorder, counting_oracle

TOL = 1e-9


# ------------------------------------------------------------------------------ raw tables

RAW_COLUMNS = {
    "city": ColumnSpec(kind="categorical", categories=["a", "b", "c"], missing=["?"]),
    "age": ColumnSpec(kind="integer", bounds=[0, 9], bins=3, nullable=True),
    "income": ColumnSpec(kind="float", bounds=[0, 100], bins=4, nullable=True),
    "flag": ColumnSpec(kind="boolean", nullable=True),
}
RAW_TYPES = {"city": "VARCHAR", "age": "BIGINT", "income": "DOUBLE", "flag": "BOOLEAN"}
# every value a row may take here: inside, at and beyond the bounds, undeclared, NULL, markers
RAW_VALUES = {
    "city": ["a", "b", "c", "zz", "?", None],
    "age": [-3, 0, 5, 9, 10, 10 ** 6, None],
    "income": [-1e6, 0.0, 37.5, 100.0, 100.5, 1e6, None],
    "flag": [True, False, None],
}
# values the encoding must clamp but today cannot cast (issue 13, item 2: encode_binned.sql casts
# floor((x - low) / width) to INTEGER before clamping): checked separately below
OVERFLOWING = {"income": [1e12, -1e12, float("inf"), float("nan")], "age": [2 ** 62, -(2 ** 62)]}


def raw_rows_random(n: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    return [tuple(vals[rng.integers(len(vals))] for vals in RAW_VALUES.values()) for _ in range(n)]


RAW_TABLES = {
    "random-40": raw_rows_random(40, 0),
    "random-12": raw_rows_random(12, 1),
    "one-row": [("a", 5, 37.5, True)],
    "all-equal": [("b", 0, 0.0, False)] * 15,
    "skewed": [("a", 5, 37.5, True)] * 20 + [("zz", None, 1e6, None)],
}


def raw_neighbours(rows: list[tuple]):
    """(label, rows') for every removal and for the addition of every combination of RAW_VALUES
    (which includes the duplicates of the most common row and the rows of empty cells)."""
    for i in range(len(rows)):
        yield f"remove {rows[i]}", rows[:i] + rows[i + 1:]
    for row in itertools.product(*RAW_VALUES.values()):
        yield f"add {row}", rows + [row]


class RawWarehouse:
    """All neighbour tables stacked in one DuckDB table (column `nb` says which), so that each
    query is the real SQL over `(SELECT ... WHERE nb = k)`."""

    def __init__(self, tables: list[list[tuple]]):
        self.con = duckdb.connect()
        frame = pd.DataFrame(
            [(k, *row) for k, rows in enumerate(tables) for row in rows],
            columns=["nb", *RAW_COLUMNS]).astype(
                {"city": object, "age": "Int64", "income": "Float64", "flag": "boolean"})
        self.con.register("frame", frame)
        self.con.execute("CREATE TABLE stacked AS SELECT * FROM frame")
        self.con.unregister("frame")
        types = {r[0]: r[1] for r in self.con.execute("DESCRIBE stacked").fetchall()}
        assert {c: types[c] for c in RAW_COLUMNS} == RAW_TYPES
        self.types = RAW_TYPES

    def relation(self, k: int) -> str:
        return f"(SELECT {', '.join(RAW_COLUMNS)} FROM stacked WHERE nb = {k})"


def _world(name: str):
    rows = RAW_TABLES[name]
    neighbours = list(raw_neighbours(rows))
    return RawWarehouse([rows] + [r for _, r in neighbours]), [label for label, _ in neighbours]


@pytest.fixture(params=list(RAW_TABLES))
def raw_world(request):
    warehouse, labels = _world(request.param)
    yield warehouse, labels
    warehouse.con.close()


@pytest.fixture(params=["random-12", "skewed", "one-row"])
def raw_world_small(request):
    """Preprocessing runs one scan per neighbour: three tables keep it to seconds."""
    warehouse, labels = _world(request.param)
    yield warehouse, labels
    warehouse.con.close()


def neighbour_marginals(warehouse: "RawWarehouse", plan, cliques, tables: int) -> dict:
    """Every stacked table's marginals from the real encoding SQL (`encoded_columns`) and the
    real counting query (`count_marginals`), in one scan: the table id `nb` is carried through
    the encoded view and prefixed to each clique, so each array has one slice per table."""
    warehouse.con.execute(f"CREATE OR REPLACE VIEW enc AS SELECT nb, {encoded_columns(plan)} "
                          "FROM stacked")
    columns = ["nb", *plan.columns]
    got = count_marginals(warehouse.con, "enc", columns, [("nb", *c) for c in cliques],
                          {**plan.domain, "nb": tables})
    return {c: got[("nb", *c)] for c in cliques}


def test_every_marginal_of_the_encoded_view_moves_by_at_most_l2_one(raw_world):
    """1-, 2-, 3- and 4-way marginals of the encoded view (the SQL encoding, then the SQL counts):
    one added or removed raw row, whatever its values, moves one cell of each by exactly 1, the
    L2 sensitivity `gaussian_counts` is charged at."""
    warehouse, labels = raw_world
    plan = build_plan(RAW_COLUMNS, warehouse.types)
    cliques = [c for k in range(1, 5) for c in itertools.combinations(plan.columns, k)]
    charged = gaussian_counts(np.zeros(3, dtype=np.int64), 1.0)[1].sensitivity
    marginals = neighbour_marginals(warehouse, plan, cliques, len(labels) + 1)
    worst = 0.0
    for clique in cliques:
        arrays = marginals[clique]
        change = np.sqrt(((arrays[1:] - arrays[0]) ** 2).reshape(len(labels), -1).sum(axis=1))
        for label, c in zip(labels, change):
            assert c <= charged + TOL, (label, clique, c)
        # every row gets a code in every column: each neighbour moves exactly one cell by 1
        assert np.all(change == 1.0), clique
        worst = max(worst, float(change.max()))
    assert worst == charged


@pytest.mark.parametrize("column, value", [
    (c, v) for c, vs in OVERFLOWING.items() for v in vs])
def test_an_overflowing_value_is_clamped_into_one_cell_like_any_other(column, value):
    """An outlier far beyond the bounds, an infinity or a NaN still adds exactly one row to one
    cell of each marginal (the encoding must be total: clamp before any cast, issue 13)."""
    rows = RAW_TABLES["random-12"]
    position = list(RAW_COLUMNS).index(column)
    outlier = tuple(value if i == position else v for i, v in enumerate(rows[0]))
    warehouse = RawWarehouse([rows, rows + [outlier]])
    plan = build_plan(RAW_COLUMNS, warehouse.types)
    cliques = [c for k in range(1, 3) for c in itertools.combinations(plan.columns, k)]
    out = []
    for k in (0, 1):
        warehouse.con.execute(encode_view_sql(plan, "enc", warehouse.relation(k)))
        out.append(count_marginals(warehouse.con, "enc", plan.columns, cliques, plan.domain))
    for clique in cliques:
        assert np.linalg.norm((out[1][clique] - out[0][clique]).ravel()) == 1.0, clique


PRE_COLUMNS = {
    "city": ColumnSpec(kind="categorical", missing=["?"]),                       # discover
    "grade": ColumnSpec(kind="categorical", categories=["a", "b", "c"], rare="merge"),  # rare
    "age": ColumnSpec(kind="integer"),                                           # bounds
    "income": ColumnSpec(kind="float", bounds=[0, 100], binning="privtree"),     # privtree
}


REFERENCE_ROW = tuple(values[0] for values in RAW_VALUES.values())


def one_column_at_a_time(label: str) -> bool:
    """Removals, and the additions that differ from REFERENCE_ROW in at most one column: each
    preprocessing aggregate reads one column, so these cover every value of every column."""
    if label.startswith("remove"):
        return True
    row = eval(label[len("add "):])  # the label is the tuple's repr (test data only)
    return sum(a != b for a, b in zip(row, REFERENCE_ROW)) <= 1


def _pre_world_tasks():
    return pp.all_tasks(PRE_COLUMNS)


def test_preprocessing_aggregates_move_within_what_each_mechanism_is_charged_for(raw_world_small):
    """Preprocessing's exact aggregates (one SQL scan, `exact_aggregates`): the value counts fed
    to the thresholded Gaussian change in at most one key by at most 1 (its map is evaluated at
    d_in = (1, 1, 1)); the declared-category counts, the DP-bounds bucket histogram and
    PrivTree's cell histogram move by at most L2 1, the sensitivity their Spend reports."""
    warehouse, labels = raw_world_small
    con = warehouse.con
    # reuse the raw table under preprocessing's specs: city -> discover, age -> bounds and density,
    # income -> PrivTree cells over its declared bounds, grade -> rare (declared)
    con.execute("CREATE OR REPLACE TABLE stacked2 AS SELECT nb, city, city AS grade, age, income "
                "FROM stacked")
    tasks = _pre_world_tasks()
    spans = {"income": (0.0, 100.0), "age": (0.0, 127.0)}  # age's density: over its DP bounds

    def aggregates(k):
        rel = f"(SELECT city, grade, age, income FROM stacked2 WHERE nb = {k})"
        return pp.exact_aggregates(con, rel, PRE_COLUMNS, tasks, spans)

    base = aggregates(0)
    charged = _charged_preprocessing_sensitivities(base)
    seen = set()  # removing either of two equal rows leaves the same table: scanned once
    for k, label in enumerate(labels, start=1):
        if label in seen or not one_column_at_a_time(label):
            continue
        seen.add(label)
        other = aggregates(k)
        for task in tasks:
            a, b = base[task], other[task]
            if task.mechanism == "discover":
                keys = set(a) | set(b)
                diffs = [b.get(key, 0) - a.get(key, 0) for key in keys]
                changed = sum(d != 0 for d in diffs)
                l0, l2, linf = charged["discover"]
                assert changed <= l0 and max(map(abs, diffs), default=0) <= linf, (label, diffs)
                assert math.sqrt(sum(d * d for d in diffs)) <= l2 + TOL
                continue
            if task.mechanism == "rare":
                cats = [str(c) for c in PRE_COLUMNS["grade"].categories]
                a = np.array([a.get(c, 0) for c in cats])
                b = np.array([b.get(c, 0) for c in cats])
            change = float(np.linalg.norm(np.asarray(b) - np.asarray(a)))
            assert change <= charged[task.mechanism] + TOL, (label, task, change)


def _charged_preprocessing_sensitivities(exact) -> dict:
    """The sensitivity each preprocessing mechanism is charged at, from real invocations."""
    out = {}
    rec = ChargeRecorder()
    pp.discover_categories({"x": 10}, "city", 1.0, 1e-6, rec)
    assert rec.calls[-1][0].sensitivity == 1.0
    # the thresholded Gaussian is checked against its closed form in
    # test_the_threshold_mechanism_is_charged_its_closed_form_rho_and_delta: here, the
    # (changed keys, L2, L-inf) it is charged for
    out["discover"] = (1, 1.0, 1.0)
    pp.measure_declared_categories({"a": 3}, "grade", PRE_COLUMNS["grade"], 1.0, rec)
    out["rare"] = rec.calls[-1][0].sensitivity
    task = pp.Task("age", "bounds")
    pp.dp_bounds(exact[task], "age", PRE_COLUMNS["age"], 1.0, rec)
    out["bounds"] = rec.calls[-1][0].sensitivity
    task = pp.Task("age", "density")
    pp.grid_density(exact[task], "age", PRE_COLUMNS["age"], 0.0, 127.0, 1.0, rec)
    out["density"] = rec.calls[-1][0].sensitivity
    task = pp.Task("income", "privtree")
    pp.privtree_edges(exact[task], "income", PRE_COLUMNS["income"], 0.0, 100.0, 1.0, rec)
    out["privtree"] = rec.calls[-1][0].sensitivity
    return out


def discrete_gaussian_tail(scale: float, k: int) -> float:
    """P[Z >= k] for the discrete Gaussian Z on the integers with parameter `scale`
    (P[Z = z] proportional to exp(-z^2 / (2 scale^2))), summed exactly."""
    span = int(math.ceil(40 * scale)) + abs(k) + 2
    z = np.arange(-span, span + 1)
    weights = np.exp(-(z.astype(float) ** 2) / (2 * scale ** 2))
    return float(weights[z >= k].sum() / weights.sum())


@pytest.mark.parametrize("rho, delta", [(1.0, 1e-6), (0.05, 1e-9), (0.3, 1e-4), (0.5, 0.06)])
def test_the_threshold_mechanism_is_charged_its_closed_form_rho_and_delta(rho, delta):
    """Category discovery's thresholded Gaussian histogram, against closed forms rather than its
    own privacy map. The value counts of neighbouring tables differ in one key by 1 (brute force
    above). A key both tables hold moves by L2 1: rho = 1 / (2 sigma^2). A key only one holds
    (count 1) is released exactly when 1 + Z >= threshold (a released count is one at or above
    the threshold), so delta is at least P[Z >= threshold - 1] of the discrete Gaussian drawn.
    The charge must cover both and stay within the `delta` asked for."""
    rec = ChargeRecorder()
    pp.discover_categories({"x": 10}, "city", rho, delta, rec)
    spend, params = rec.calls[-1]
    sigma, threshold = spend.scale, params["threshold"]
    assert sigma == pytest.approx(1 / math.sqrt(2 * rho), rel=1e-12)
    assert spend.rho >= 1 / (2 * sigma ** 2) * (1 - 1e-12)
    assert spend.rho <= rho * (1 + 1e-12)
    new_key_released = discrete_gaussian_tail(sigma, threshold - 1)
    assert spend.delta_extra >= new_key_released * (1 - 1e-9), (spend, new_key_released)
    assert spend.delta_extra <= delta


def test_a_new_key_is_released_as_often_as_the_closed_form_says():
    """The release rule the closed form assumes, on the mechanism's own draws: 20,000 keys of
    count 1 through OpenDP's thresholded Gaussian (sigma 1, threshold 3) are released at the
    rate P[Z >= 2] = 0.0586 of the discrete Gaussian (within 5 standard deviations, 0.0083; the
    continuous Gaussian's P[N > 2] = 0.0228 is 21 standard deviations away)."""
    keys = 20_000
    released = pp._threshold_measurement(1.0, 3)({f"k{i}": 1 for i in range(keys)})
    expected = discrete_gaussian_tail(1.0, 2)
    assert expected == pytest.approx(0.0586, abs=1e-4)
    assert abs(len(released) / keys - expected) < 5 * math.sqrt(expected * (1 - expected) / keys)


# ------------------------------------------------------------------------------ PrivTree nodes

def _biased_counts(cells: np.ndarray, scale: float, depth: int) -> dict:
    """Every node's biased count in the full tree down to `depth` (noise replaced by +inf, so
    every node splits), from `privtree_split_decisions` itself. The top `depth` levels of the
    2^16-cell tree are the tree over 2^depth block sums."""
    blocks = cells.reshape(2 ** depth, -1).sum(axis=1)
    seen = {}
    order = []

    def always_split(biased):
        order.append(biased)
        return math.inf

    leaves = pp.privtree_split_decisions(blocks, scale, pp.PRIVTREE_THETA, None, depth,
                                         always_split)
    # replay the breadth-first order privtree_split_decisions visits to name each node
    queue, names = [(0, blocks.size, 0)], []
    while queue:
        first, stop, d = queue.pop(0)
        names.append((first, stop, d))
        if d < depth and stop - first >= 2:
            mid = (first + stop) // 2
            queue += [(first, mid, d + 1), (mid, stop, d + 1)]
    assert len(names) == len(order) and len(leaves) == 2 ** depth
    seen.update(zip(names, order))
    return seen


@pytest.mark.parametrize("seed", [0, 1])
def test_privtree_biased_counts_change_by_at_most_one_on_one_root_to_leaf_path(seed):
    """Zhang et al.'s proof needs: one row changes the biased count of each node by at most 1
    (the Laplace mechanism's sensitivity in the Spend), and only on the nodes containing that
    row's cell. Checked on every node down to depth 8, for removals and additions of rows in
    every cell class (occupied, empty, the boundary cells), including nodes at the clamp
    theta - delta."""
    rng = np.random.default_rng(seed)
    cells = np.zeros(pp.PRIVTREE_CELLS, dtype=np.int64)
    hot = rng.integers(0, pp.PRIVTREE_CELLS, 6)
    cells[hot] = rng.integers(1, 40, hot.size)  # a few dense cells, most nodes at the clamp
    scale = pp.privtree_lambda(math.sqrt(2 * 0.5))
    rec = ChargeRecorder()
    pp.privtree_edges(cells, "x", PRE_COLUMNS["income"], 0.0, 100.0, 0.5, rec)
    charged = rec.calls[-1][0].sensitivity
    assert math.isclose(rec.calls[-1][0].scale, scale)
    depth = 8
    base = _biased_counts(cells, scale, depth)
    clamp = pp.PRIVTREE_THETA - scale * math.log(2)
    assert any(math.isclose(v, clamp) for v in base.values())  # the clamp case is exercised
    block = pp.PRIVTREE_CELLS // 2 ** depth
    targets = sorted(set(hot.tolist()) | {0, pp.PRIVTREE_CELLS - 1,
                                          int(rng.integers(0, pp.PRIVTREE_CELLS))})
    for cell in targets:
        for sign in (+1, -1):
            if sign < 0 and cells[cell] == 0:
                continue
            other = cells.copy()
            other[cell] += sign
            moved = _biased_counts(other, scale, depth)
            for node, value in base.items():
                change = abs(moved[node] - value)
                assert change <= charged + TOL, (cell, sign, node, change)
                first, stop, _ = node
                if not first <= cell // block < stop:
                    assert change == 0, (cell, node)  # off the row's path nothing moves


# ------------------------------------------------------------------------------ code tables

DOMAIN = {"x": 3, "y": 4, "z": 2}


def code_table_random(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {a: rng.integers(0, k, n) for a, k in DOMAIN.items()}


def code_table(rows: list[tuple]) -> dict:
    return {a: np.array([r[i] for r in rows], dtype=np.int64) for i, a in enumerate(DOMAIN)}


CELLS = list(itertools.product(*(range(k) for k in DOMAIN.values())))
CODE_TABLES = {
    "random-30": code_table_random(30, 0),
    "random-200": code_table_random(200, 1),
    "one-row": code_table([(0, 0, 0)]),
    "two-rows": code_table([(0, 0, 0), (2, 3, 1)]),
    "all-equal": code_table([(1, 2, 0)] * 25),
    "diagonal": code_table([(i % 3, i % 4, i % 2) for i in range(24)] * 3),
    "empty": code_table([]),
}


def rows_of(table: dict) -> list[tuple]:
    return list(zip(*(table[a].tolist() for a in DOMAIN)))


def code_neighbours(table: dict):
    """Every removal, and the addition of every row of the domain (all cells: duplicates of the
    most common row and rows in the empty / rarest cells are among them)."""
    rows = rows_of(table)
    for i in range(len(rows)):
        yield f"remove {rows[i]}", code_table(rows[:i] + rows[i + 1:])
    for cell in CELLS:
        yield f"add {cell}", code_table(rows + [cell])


PAIRS = list(itertools.combinations(DOMAIN, 2))


def noisy_one_way(table: dict, seed: int = 0) -> tuple[Measurement, ...]:
    """A fixed set of published 1-way measurements (what the scores condition on)."""
    rng = np.random.default_rng(seed)
    oracle = counting_oracle(table, DOMAIN)
    return tuple(Measurement((a,), oracle([(a,)])[(a,)] + rng.normal(0, 2, DOMAIN[a]), 2.0, 0.1)
                 for a in DOMAIN)


@pytest.mark.parametrize("name", list(CODE_TABLES))
def test_indif_and_r_scores_move_by_at_most_the_charged_sensitivity_each(name):
    """InDif (privsyn) = ABSyn's count-scale R-score: each score moves by at most the
    sensitivity `noisy_indif` charges per score (PrivSyn Lemma 4), so the vector of m scores by
    at most that times sqrt(m) in L2, the vector sensitivity of the Gaussian draw."""
    table = CODE_TABLES[name]
    rec = ChargeRecorder()
    privsyn.noisy_indif(PAIRS, counting_oracle(table, DOMAIN), 1.0, rec, "R-scores")
    spend = rec.calls[-1][0]
    per_score = spend.sensitivity
    assert per_score == privsyn.INDIF_SENSITIVITY
    # the vector sensitivity sqrt(m) * 4 is what the Gaussian is scaled for
    assert math.isclose(spend.scale, per_score * math.sqrt(len(PAIRS)) / math.sqrt(2 * spend.rho))

    def scores(t):
        exact = counting_oracle(t, DOMAIN)(PAIRS)
        return np.array([privsyn.indif(exact[p]) for p in PAIRS])

    base = scores(table)
    for label, other in code_neighbours(table):
        change = np.abs(scores(other) - base)
        assert change.max() <= per_score + TOL, (label, change)
        assert np.linalg.norm(change) <= per_score * math.sqrt(len(PAIRS)) + TOL


@pytest.mark.parametrize("name", list(CODE_TABLES))
def test_mst_quality_scores_move_by_at_most_the_exponential_mechanisms_sensitivity(name):
    """MST's w_ab given the published 1-way measurements (`independence_errors`): L-inf change
    at most the sensitivity the spanning-tree rounds charge."""
    table = CODE_TABLES[name]
    one_way = noisy_one_way(table)
    rec = ChargeRecorder()
    base = mst.independence_errors(PAIRS, counting_oracle(table, DOMAIN)(PAIRS), one_way)
    mst.private_spanning_tree(list(DOMAIN), PAIRS, base, 0.5, rec)
    charged = {s.sensitivity for s, _ in rec.calls}
    assert charged == {mst.SCORE_SENSITIVITY}
    for label, other in code_neighbours(table):
        scores = mst.independence_errors(PAIRS, counting_oracle(other, DOMAIN)(PAIRS), one_way)
        assert np.abs(scores - base).max() <= mst.SCORE_SENSITIVITY + TOL, label


class _Captured(Exception):
    pass


def fixed_estimates(cliques, noisy_total: float = 20.0, seed: int = 3) -> dict:
    """A fixed (public) model estimate of each clique."""
    rng = np.random.default_rng(seed)
    return {c: noisy_total * rng.dirichlet(np.ones(math.prod(DOMAIN[a] for a in c)))
            .reshape(tuple(DOMAIN[a] for a in c)) for c in cliques}


def aim_first_round_scores(table: dict, one_way, monkeypatch) -> tuple[list, np.ndarray, float]:
    """The quality scores AIM's first round feeds to the exponential mechanism (computed inline
    in `aim.run`), with the 1-way measurements and the model's estimates held fixed."""
    captured = {}
    monkeypatch.setattr(aim, "measure_one_way", lambda *a, **k: one_way)
    model = SimpleNamespace(cliques=(), project=lambda r: fixed_estimates([r])[r])
    monkeypatch.setattr(aim, "fit", lambda *a, **k: (None, model))
    real = privacy.exponential_mechanism

    def capture(scores, rho, sensitivity=1.0):
        _, spend = real(scores, rho, sensitivity)
        captured["scores"], captured["sensitivity"] = np.array(scores), spend.sensitivity
        raise _Captured

    monkeypatch.setattr(aim, "exponential_mechanism", capture)
    with pytest.raises(_Captured):
        aim.run(DOMAIN, counting_oracle(table, DOMAIN), Budget(0.1, 0.1, 0.8), ChargeRecorder(),
                max_model_mb=100.0, max_rounds=4)
    return captured["scores"], captured["sensitivity"]


@pytest.mark.parametrize("name", ["random-30", "one-row", "all-equal", "empty"])
def test_aim_quality_scores_move_by_at_most_the_exponential_mechanisms_sensitivity(
        name, monkeypatch):
    table = CODE_TABLES[name]
    one_way = noisy_one_way(table)
    base, charged = aim_first_round_scores(table, one_way, monkeypatch)
    assert charged == aim.SCORE_SENSITIVITY
    assert base.size == len(aim.candidate_weights(aim.workload(DOMAIN)))
    for label, other in code_neighbours(table):
        scores, _ = aim_first_round_scores(other, one_way, monkeypatch)
        assert np.abs(scores - base).max() <= charged + TOL, label


def ppsyn_first_round(table: dict, one_way, monkeypatch) -> dict:
    """What ppsyn's first round feeds to its three mechanisms, captured at the calls: the
    quality vector (exponential mechanism), the chosen marginal's contribution (Gaussian) and
    the partition's interval counts (Gaussian). The public inputs are held fixed: the 1-way
    measurements, the model's estimates, the exponential mechanism's pick and the noisy
    contribution (so the partition is the same on both tables)."""
    captured = {}
    oracle = counting_oracle(table, DOMAIN)
    monkeypatch.setattr(ppsyn, "measure_one_way",
                        lambda domain, orc, rho, charge: (one_way, orc([(a,) for a in DOMAIN])))
    monkeypatch.setattr(ppsyn, "refit", lambda *a, **k: ("model", fixed_estimates))
    real_em, real_scores, real_counts = (privacy.exponential_mechanism, privacy.gaussian_scores,
                                         privacy.gaussian_counts)

    def em(scores, rho, sensitivity=1.0):
        _, spend = real_em(scores, rho, sensitivity)
        captured["quality"], captured["em_sensitivity"] = np.array(scores), spend.sensitivity
        return 0, spend

    def contribution(scores, rho, sensitivity):
        _, spend = real_scores(scores, rho, sensitivity)
        captured["contribution"] = float(scores[0])
        captured["contr_sensitivity"] = spend.sensitivity
        return np.array([500.0]), spend

    def counts(sums, rho):
        _, spend = real_counts(sums, rho)
        captured["sums"], captured["sums_sensitivity"] = np.array(sums), spend.sensitivity
        raise _Captured

    monkeypatch.setattr(ppsyn, "exponential_mechanism", em)
    monkeypatch.setattr(ppsyn, "gaussian_scores", contribution)
    monkeypatch.setattr(measure_module, "gaussian_counts", counts)  # measure_marginal draws
    with pytest.raises(_Captured):
        ppsyn.select(DOMAIN, oracle, Budget(0.1, 0.1, 0.8), SelectionSettings(), ChargeRecorder(),
                     rounds=2)
    return captured


@pytest.mark.parametrize("name", ["random-30", "one-row", "all-equal", "diagonal"])
def test_ppsyn_quality_contribution_and_partition_counts_move_within_their_charges(
        name, monkeypatch):
    table = CODE_TABLES[name]
    one_way = noisy_one_way(table)
    base = ppsyn_first_round(table, one_way, monkeypatch)
    assert base["em_sensitivity"] == base["contr_sensitivity"] == ppsyn.QUALITY_SENSITIVITY
    assert base["sums"].size > 1  # a real partition, not one cell
    for label, other in code_neighbours(table):
        got = ppsyn_first_round(other, one_way, monkeypatch)
        assert np.abs(got["quality"] - base["quality"]).max() <= base["em_sensitivity"] + TOL, label
        assert abs(got["contribution"] - base["contribution"]) <= base["contr_sensitivity"] + TOL
        assert got["sums"].shape == base["sums"].shape
        change = float(np.linalg.norm(got["sums"] - base["sums"]))
        assert change <= base["sums_sensitivity"] + TOL, (label, change)


@pytest.mark.parametrize("seed", range(4))
def test_ppsyn_interval_counts_of_any_partition_move_by_at_most_l2_one(seed):
    """`interval_counts` over partitions built (from a public reference) by Algorithms 3 and 4:
    every row lies in exactly one partition cell."""
    rng = np.random.default_rng(seed)
    clique = ("x", "y", "z")
    table = code_table_random(int(rng.integers(1, 60)), seed)
    exact = counting_oracle(table, DOMAIN)([clique])[clique]
    reference = fixed_estimates([clique], noisy_total=1000.0, seed=seed)[clique]
    for multi_dim in ("split", "merge"):
        part = ppsyn.partition(reference, contr=float(rng.uniform(500, 2000)), rho=10.0,
                               multi_dim=multi_dim)
        assert 1 < part.size <= exact.size
        base = ppsyn.interval_counts(exact, part.labels, part.size)
        for cell in itertools.product(*(range(k) for k in exact.shape)):
            for sign in (+1, -1):
                if sign < 0 and exact[cell] == 0:
                    continue
                other = exact.copy()
                other[cell] += sign
                change = ppsyn.interval_counts(other, part.labels, part.size) - base
                assert np.linalg.norm(change) == pytest.approx(1.0)
