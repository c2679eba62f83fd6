"""The synthetic side's stream: chunks drawn one ahead in a thread (`synthesize.prefetched`),
values drawn inside bins from the column's density (`domain._draw_density`), and the bit-reversed
ranks of the stratified sampler (`tree.bit_reversed_ranks`), each against its contract."""

import duckdb
import numpy as np
import pytest

from dp_synth_assets.core.domain import _draw_density
from dp_synth_assets.core.generate import tree
from dp_synth_assets.core.generate.tree import CliqueTree, bit_reversed_ranks
from dp_synth_assets.core.synthesize import decode_typed, prefetched, write_synthetic


def test_prefetched_keeps_the_order_and_raises_the_producers_error():
    assert list(prefetched(iter(range(50)))) == list(range(50))

    def failing():
        yield from range(3)
        raise RuntimeError("chunk 3 failed")

    got = []
    with pytest.raises(RuntimeError, match="chunk 3 failed"):
        for item in prefetched(failing()):
            got.append(item)
    assert got == [0, 1, 2]


def test_prefetched_stops_the_producer_when_the_consumer_stops():
    pulled, closed = [], []

    def chunks():
        try:
            for i in range(1000):
                pulled.append(i)
                yield i
        finally:
            closed.append(True)

    stream = prefetched(chunks(), depth=1)
    assert [next(stream), next(stream)] == [0, 1]
    stream.close()  # joins the producer
    # the two consumed, one queued, one being handed over: never the whole input
    assert len(pulled) <= 4
    assert closed == [True]  # the producer closed the generator (its sampler threads end)


def small_tree() -> CliqueTree:
    rng = np.random.default_rng(3)
    pxy = rng.random((3, 4))
    pyz = rng.random((4, 2))
    return CliqueTree({"x": 3, "y": 4, "z": 2}, (("x", "y"), ("y", "z")), ((), ("y",)),
                      (pxy / pxy.sum(), pyz / pyz.sum()))


def test_the_written_table_is_the_sequential_draw_of_the_same_seed(tmp_path):
    """Drawn ahead in a thread, the chunks are written in their order: the table holds the rows
    of decoding the same seeded chunks one after the other, row for row."""
    from dp_synth_assets.core.domain import EncodingPlan, Encoding

    plan = EncodingPlan(tuple(
        Encoding(column=a, kind="categorical", sql_type="VARCHAR", size=k,
                 categories=tuple(f"{a}{i}" for i in range(k)), nullable=False, has_other=False)
        for a, k in {"x": 3, "y": 4, "z": 2}.items()))
    t = small_tree()
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    written = write_synthetic(con, plan, tree.sample_chunks(t, 5000, 11, 1000),
                              np.random.default_rng([11, 1]), "synthetic.t",
                              str(tmp_path / "t.parquet"))
    assert written == 5000
    table = con.sql("SELECT * FROM synthetic.t").to_arrow_table()
    expected = [decode_typed(con, plan, codes, rng)
                for rng in [np.random.default_rng([11, 1])]
                for codes in tree.sample_chunks(t, 5000, 11, 1000)]
    import pyarrow as pa

    assert table.equals(pa.concat_tables(expected))


def test_values_inside_a_bin_follow_the_density_pieces_it_overlaps():
    # bin 0 = [0, 10): pieces [0, 4) weight 1 and [4, 8) weight 3; bin 1 = [10, 20): a point
    # mass at 12 (weight 5) and [15, 25) weight 2 overlapping half; bin 2 = [20, 30): only the
    # other half of [15, 25) ; bin 3 = [30, 40): no piece (NaN)
    density = ((0.0, 4.0, 1.0), (4.0, 8.0, 3.0), (12.0, 12.0, 5.0), (15.0, 25.0, 2.0))
    lows, highs = np.array([0.0, 10.0, 20.0, 30.0]), np.array([10.0, 20.0, 30.0, 40.0])
    n = 40_000
    bins = np.repeat(np.arange(4), n)
    out = _draw_density(density, lows, highs, bins, np.random.default_rng(0))
    first, second, third, fourth = (out[bins == k] for k in range(4))
    assert first.min() >= 0 and first.max() < 8
    assert abs(np.mean(first < 4) - 0.25) < 0.01  # weights 1 : 3
    # the point mass (5) against the half of [15, 25) inside the bin (2 * 0.5 = 1)
    assert abs(np.mean(second == 12.0) - 5 / 6) < 0.01
    assert np.all((second == 12.0) | ((second >= 15) & (second < 20)))
    assert np.all((third >= 20) & (third < 25))
    assert np.isnan(fourth).all()


def test_bit_reversed_ranks_are_the_ranks_of_the_reversed_positions():
    """Against the definition: sort each group's positions by their bit-reversed values."""
    rng = np.random.default_rng(0)
    sizes = np.r_[1, 2, 3, 7, 1024, 1025, rng.integers(1, 3000, 20)]
    starts = np.cumsum(sizes) - sizes
    group = np.repeat(np.arange(sizes.size), sizes)
    position = np.arange(group.size) - starts[group]
    ranks = bit_reversed_ranks(position, sizes[group])
    bits = int(position.max()).bit_length()
    for g, (start, m) in enumerate(zip(starts, sizes)):
        reversed_ = [int(format(p, f"0{bits}b")[::-1], 2) for p in range(m)]
        expected = np.argsort(np.argsort(reversed_))
        assert np.array_equal(ranks[start:start + m], expected), g


def test_a_seed_fixes_the_chunks_whatever_the_threads_that_draw_them():
    t = small_tree()

    def drawn(seed, threads):
        return [np.stack([c[a] for a in t.domain]) for c in
                tree.sample_chunks(t, 4500, seed, 1000, threads=threads)]

    one = drawn(11, 1)
    assert [c.shape[1] for c in one] == [1000, 1000, 1000, 1000, 500]
    for threads in (2, 3):
        assert all(np.array_equal(a, b) for a, b in zip(one, drawn(11, threads)))
    assert not all(np.array_equal(a, b) for a, b in zip(one, drawn(12, 2)))
    # chunks are drawn from streams of their own: no two chunks are the same rows
    assert not np.array_equal(one[0], one[1])


def test_dictionary_decoding_writes_the_same_values_as_spelled_out_decoding():
    """`write_synthetic` hands categorical columns to DuckDB as Arrow dictionaries (no per-row
    strings built in Python): cast to the declared types they are the values of spelled-out
    decoding, with the same random draws (rare members), the other label and NULLs included."""
    import pyarrow as pa

    from dp_synth_assets.core.domain import Encoding, EncodingPlan, decode
    from dp_synth_assets.core.synthesize import synthetic_casts

    plan = EncodingPlan((
        Encoding(column="c", kind="categorical", sql_type="VARCHAR", size=5,
                 categories=("a", "b"), rare=(("r1", 2.0), ("r2", 1.0)), other_label="zz",
                 nullable=True),
        Encoding(column="n", kind="categorical", sql_type="BIGINT", size=3,
                 categories=("1", "20"), nullable=False),
        Encoding(column="f", kind="boolean", sql_type="BOOLEAN", size=2)))
    rng = np.random.default_rng(5)
    codes = {"c": rng.integers(0, 5, 4000), "n": rng.integers(0, 3, 4000),
             "f": rng.integers(0, 2, 4000)}
    con = duckdb.connect()

    def cast(dictionary: bool) -> pa.Table:
        batch = decode(plan, codes, np.random.default_rng(9), dictionary=dictionary)
        assert pa.types.is_dictionary(batch.column("c").type) == dictionary
        con.register("rows", batch)
        try:
            return con.sql(f"SELECT {synthetic_casts(plan)} FROM rows").to_arrow_table()
        finally:
            con.unregister("rows")

    spelled, coded = cast(False), cast(True)
    assert coded.equals(spelled)
    values = set(spelled.column("c").to_pylist())
    assert {"r1", "r2", "zz", None} <= values  # every kind of code was exercised
