"""Marginals are counted in as few scans as possible: each method's up-front set, then on demand.

Real DuckDB: the `marginals` stage's table, and `MarginalStore`, the oracle of the selection and
measurement stages, which counts missing cliques in one scan and keeps them for reuse.
"""

import itertools

import duckdb
import numpy as np
import pytest

from dp_synth_assets.core import marginals as margs
from dp_synth_assets.core.config import SelectionSettings
from dp_synth_assets.core.select import required_cliques
from dp_synth_assets.core.select.ppsyn import workload

DOMAIN = {"a": 3, "b": 4, "c": 5, "d": 2}


@pytest.fixture
def con(tmp_path):
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    rng = np.random.default_rng(0)
    n = 5000
    a = rng.integers(0, 3, n)
    columns = {"a": a, "b": (a + rng.integers(0, 2, n)) % 4, "c": rng.integers(0, 5, n),
               "d": rng.integers(0, 2, n)}
    con.register("frame", {k: v.astype(np.int64) for k, v in columns.items()})
    con.execute("CREATE SCHEMA private")
    con.execute("CREATE TABLE private.enc AS SELECT * FROM frame")
    yield con
    con.close()


def exact(con, clique) -> np.ndarray:
    """The reference: a plain GROUP BY of the clique."""
    out = np.zeros([DOMAIN[a] for a in clique], dtype=np.int64)
    cols = ", ".join(clique)
    for *key, n in con.execute(f"SELECT {cols}, count(*) FROM private.enc GROUP BY {cols}").fetchall():
        out[tuple(key)] = n
    return out


def test_each_method_precomputes_only_what_it_needs():
    pairs = [tuple(p) for p in itertools.combinations(DOMAIN, 2)]
    singles = [(a,) for a in DOMAIN]
    for method in ("absyn", "privsyn", "mst"):  # they score every pair
        assert required_cliques(method, DOMAIN) == singles + pairs
    # AIM's workload: every 3-way marginal of at most 10,000 cells (all four here, at most 60
    # cells), and the pairs its candidates include
    triples = [tuple(t) for t in itertools.combinations(DOMAIN, 3)]
    assert required_cliques("aim", DOMAIN) == singles + pairs + triples
    declared = SelectionSettings(marginals=[["a", "c", "d"], ["b", "a"]])
    assert required_cliques("manual", DOMAIN, declared) == singles + [("a", "c", "d"), ("a", "b")]
    ppsyn = required_cliques("ppsyn", DOMAIN)
    assert ppsyn == singles + workload(DOMAIN, 3) and not set(pairs) & set(ppsyn)


def test_missing_marginals_are_counted_once_in_one_scan_and_reused(con):
    table = "private.margs"
    margs.compute_marginals(con, "private.enc", table, list(DOMAIN), [(a,) for a in DOMAIN])
    store = margs.MarginalStore(con, "private.enc", table, list(DOMAIN), DOMAIN)
    got = store([("a",), ("b", "a"), ("a", "c", "d")])
    for clique, counts in got.items():
        np.testing.assert_array_equal(counts, exact(con, clique))
    assert got[("b", "a")].shape == (4, 3)  # axes in the asked order
    assert store.on_demand == [("b", "a"), ("a", "c", "d")]
    scans = con.execute("SELECT count(DISTINCT gid) FROM private.margs").fetchone()[0]
    assert scans == 4 + 2
    # asked again (any column order), nothing is recounted: this store and a new one read the table
    store([("a", "b")])
    again = margs.MarginalStore(con, "private.enc", table, list(DOMAIN), DOMAIN)
    np.testing.assert_array_equal(again([("a", "b")])[("a", "b")], exact(con, ("a", "b")))
    assert store.on_demand == [("b", "a"), ("a", "c", "d")] and again.on_demand == []
    assert con.execute("SELECT count(*) FROM private.margs").fetchone()[0] == \
        sum(int((exact(con, c) > 0).sum()) for c in [(a,) for a in DOMAIN] + [("a", "b"), ("a", "c", "d")])


def test_the_checks_count_the_same_marginals_without_storing_them(con):
    cliques = [("a",), ("c", "d"), ("a", "b", "c")]
    got = margs.count_marginals(con, "private.enc", list(DOMAIN), cliques, DOMAIN)
    for clique in cliques:
        np.testing.assert_array_equal(got[clique], exact(con, clique))


def test_repeated_rows_counts_rows_minus_distinct_rows(con):
    total, distinct = con.execute(
        "SELECT count(*), (SELECT count(*) FROM (SELECT DISTINCT * FROM private.enc)) "
        "FROM private.enc").fetchone()
    assert margs.repeated_rows(con, "private.enc", DOMAIN) == total - distinct > 0
    # a domain too large to pack exactly falls back to the rows' hashes, same answer here
    huge = {a: 2 ** 20 for a in DOMAIN}
    assert margs.repeated_rows(con, "private.enc", huge) == total - distinct


@pytest.mark.parametrize("seed", range(4))
def test_repeated_rows_equals_a_brute_force_count_of_planted_repeats(tmp_path, seed):
    """Tables of distinct rows with some rows planted again once or several times (not next to
    their first copy): the count is the brute-force rows minus distinct rows, with the exact
    packed key and with the hashed key of a domain too large to pack."""
    rng = np.random.default_rng(seed)
    domain = {"x": 7, "y": 256, "z": 3, "w": 1000}
    n = int(rng.integers(200, 2000))
    cells = rng.choice(7 * 256 * 3 * 1000, size=n, replace=False)  # distinct rows
    rows = np.stack(np.unravel_index(cells, tuple(domain.values())), axis=1)
    planted = rows[rng.integers(0, n, int(rng.integers(1, 50)))]  # repeats of repeats too
    table = rng.permutation(np.concatenate([rows, planted, planted[:3]]))
    brute = len(table) - len({tuple(r) for r in table})
    assert brute == len(planted) + 3 > 0
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.register("frame", {c: table[:, i].astype(np.int64) for i, c in enumerate(domain)})
    con.execute("CREATE TABLE enc AS SELECT * FROM frame")
    assert margs.repeated_rows(con, "enc", domain) == brute
    assert margs.repeated_rows(con, "enc", {c: 2 ** 16 for c in domain}) == brute  # hashed key
    assert margs.repeated_rows(con, "(SELECT * FROM enc LIMIT 0)", domain) == 0
    con.close()


def test_repeated_rows_runs_within_a_memory_limit_a_count_distinct_exceeded(tmp_path,
                                                                            monkeypatch):
    """Under DP_SYNTH_DUCKDB_MEMORY_LIMIT, on a warehouse connection as the checks open it, 3
    million distinct rows plus 1,020 planted repeats are counted exactly, through the narrow
    codes copy the checks make; the count(DISTINCT) the checks used before runs out of memory
    under the same limit (2 threads, as on the machine the limit was chosen on: 100 million
    rows under 1 GB failed that way in a run)."""
    from dp_synth_assets.resources.warehouse import MEMORY_LIMIT_ENV, WarehouseResource

    database = tmp_path / "w.duckdb"
    with duckdb.connect(str(database)) as con:  # no limit while the table is written
        con.execute("""CREATE TABLE codes AS
            SELECT i % 100 AS a, (i // 100) % 100 AS b, (i // 10000) % 100 AS c, i // 1000000 AS d
            FROM (SELECT range AS i FROM range(3000000) UNION ALL SELECT range FROM range(1000)
                  UNION ALL SELECT range * 7 FROM range(10) UNION ALL SELECT range * 7 FROM range(10))
        """)
    domain = {"a": 100, "b": 100, "c": 100, "d": 3}
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "30MB")
    warehouse = WarehouseResource(database=str(database), public_dir=str(tmp_path / "public"))
    with warehouse.connect(read_only=True) as con:
        con.execute("SET threads = 2")
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "28.6 MiB"
        with margs.narrow_codes(con, "codes", list(domain), domain) as codes:
            assert margs.repeated_rows(con, codes, domain) == 1000 + 20
            with pytest.raises(duckdb.OutOfMemoryException):  # else: the limit proves nothing
                con.execute(f"SELECT count(*) - count(DISTINCT {margs.row_key(domain)}) "
                            f"FROM {codes}").fetchone()
