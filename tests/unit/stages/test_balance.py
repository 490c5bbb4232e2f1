"""shard_pipeline.stages.balance: shard counts for data-parallel ranks and byte-balanced cuts."""
from __future__ import annotations

import random

import numpy as np
import pytest

from shard_pipeline.stages.balance import (
    balance_report,
    cut_targets,
    cuts_from_raw,
    cuts_in_block,
    parse_dp_ranks,
    rank_load_deviation,
    shard_count_for,
    shard_multiple,
)
from tests.pipeline_util import byte_balanced_cuts, cut_in_block


def reference_cuts(sizes: list[int], n: int) -> list[tuple[int, int]]:
    """The module docstring's rule, written out one step at a time in plain Python."""
    N = len(sizes)
    c, acc = [], 0
    for b in sizes:
        acc += b
        c.append(acc)
    total = acc
    cuts, prev = [], 0
    for i in range(n):
        target = (i + 1) * total // n
        k = next((k for k, v in enumerate(c) if v >= target), N)
        raw = k + 1
        cut = max(raw, prev + 1)
        cut = min(cut, N - (n - 1 - i)) if N >= n else min(cut, N)
        if i == n - 1:
            cut = N
        cuts.append(cut)
        prev = cut
    return list(zip([0] + cuts[:-1], cuts))


def streamed_cuts(sizes: list[int], n: int, block_lengths: list[int]) -> list[tuple[int, int]]:
    """The same cuts from cut_targets + cut_in_block over blocks + cuts_from_raw."""
    blocks, start = [], 0
    for length in block_lengths:
        blocks.append((start, np.asarray(sizes[start : start + length], dtype=np.int64)))
        start += length
    assert start == len(sizes)
    total = sum(sizes)
    raw = []
    for target in cut_targets(total, n):
        before, found = 0, []
        for block_start, block in blocks:
            j = cut_in_block(before, block, target)
            if j is not None:
                found.append(block_start + j)
            before += int(block.sum())
        if target > 0:
            assert len(found) == 1, (target, found)  # a positive target is in exactly one block
        else:
            assert found == []
        raw.append(found[0] if found else 1)
    return cuts_from_raw(raw, len(sizes))


def random_blocks(rng: random.Random, n_rows: int) -> list[int]:
    out, left = [], n_rows
    while left:
        k = rng.randint(1, max(1, min(left, 7)))
        out.append(k)
        left -= k
    return out


# ---------------------------------------------------------------- dp ranks


def test_parse_dp_ranks():
    assert parse_dp_ranks("128,448") == (128, 448)
    assert parse_dp_ranks(" 8 , 12 ") == (8, 12)
    assert parse_dp_ranks("1") == (1,)
    for bad in ("", "  ", "0", "-4", "8,", ",8", "8,,12", "8.0", "x", "8,8", "１２", "+8"):
        with pytest.raises(ValueError):
            parse_dp_ranks(bad)


def test_shard_multiple_is_the_lcm():
    assert shard_multiple((128, 448)) == 896
    assert shard_multiple((4, 6)) == 12
    assert shard_multiple((7,)) == 7
    assert shard_multiple(()) == 1
    with pytest.raises(ValueError):
        shard_multiple((0, 4))


def test_shard_count_rounds_up_to_the_lcm():
    # the seed: 7,168 = 8 x lcm(128, 448); 7,000 shards' worth of bytes rounds up to it
    assert shard_count_for(7000 * 10**9, 10**9, shard_bytes=10**9, shard_rows=None, dp_ranks=(128, 448)) == 7168
    assert shard_count_for(7168 * 10**9, 10**9, shard_bytes=10**9, shard_rows=None, dp_ranks=(128, 448)) == 7168
    assert shard_count_for(7169 * 10**9, 10**9, shard_bytes=10**9, shard_rows=None, dp_ranks=(128, 448)) == 8064
    # by rows, by bytes, and the larger of the two when both are given
    assert shard_count_for(10, 23, shard_bytes=None, shard_rows=10, dp_ranks=()) == 3
    assert shard_count_for(1000, 23, shard_bytes=100, shard_rows=None, dp_ranks=()) == 10
    assert shard_count_for(1000, 23, shard_bytes=100, shard_rows=2, dp_ranks=()) == 12
    assert shard_count_for(1000, 23, shard_bytes=500, shard_rows=10, dp_ranks=(4,)) == 4
    # at least one shard; an empty corpus has exactly one, with or without ranks
    assert shard_count_for(0, 5, shard_bytes=100, shard_rows=None, dp_ranks=(4,)) == 4  # 5 rows: 4 shards
    assert shard_count_for(0, 0, shard_bytes=100, shard_rows=None, dp_ranks=(128, 448)) == 1
    assert shard_count_for(0, 0, shard_bytes=None, shard_rows=7, dp_ranks=()) == 1


def test_shard_count_never_exceeds_rows():
    # tiny shard_bytes: capped at rows, then down to a multiple of the lcm that fits
    assert shard_count_for(10**6, 3, shard_bytes=1, shard_rows=None, dp_ranks=()) == 3
    assert shard_count_for(10**6, 30, shard_bytes=1, shard_rows=None, dp_ranks=(4, 6)) == 24
    assert shard_count_for(100, 13, shard_bytes=10, shard_rows=None, dp_ranks=(4, 6)) == 12
    # fewer rows than the lcm: divisibility cannot hold without empty shards, so it is dropped
    assert shard_count_for(100, 5, shard_bytes=10, shard_rows=None, dp_ranks=(4, 6)) == 5
    assert shard_count_for(100, 5, shard_bytes=1000, shard_rows=None, dp_ranks=(4, 6)) == 1


def test_shard_count_is_a_multiple_whenever_rows_allow_it():
    rng = random.Random(7)
    for _ in range(2000):
        ranks = tuple(rng.sample(range(1, 13), rng.randint(0, 3)))
        rows = rng.randint(0, 300)
        total = rng.randint(0, 10**6)
        sb = rng.choice([None, rng.randint(1, 10**5)])
        sr = rng.randint(1, 50) if sb is None else rng.choice([None, rng.randint(1, 50)])
        n = shard_count_for(total, rows, shard_bytes=sb, shard_rows=sr, dp_ranks=ranks)
        m = shard_multiple(ranks)
        assert n >= 1
        assert rows == 0 and n == 1 or n <= rows
        if rows >= m:
            assert n % m == 0


def test_shard_count_rejects_bad_arguments():
    for kwargs in (
        dict(shard_bytes=None, shard_rows=None, dp_ranks=()),
        dict(shard_bytes=0, shard_rows=None, dp_ranks=()),
        dict(shard_bytes=None, shard_rows=-1, dp_ranks=()),
        dict(shard_bytes=True, shard_rows=None, dp_ranks=()),
        dict(shard_bytes=10, shard_rows=None, dp_ranks=(0,)),
    ):
        with pytest.raises(ValueError):
            shard_count_for(10, 10, **kwargs)
    with pytest.raises(ValueError):
        shard_count_for(-1, 10, shard_bytes=10, shard_rows=None, dp_ranks=())


# ---------------------------------------------------------------- cuts


def test_cut_targets():
    assert cut_targets(100, 4) == [25, 50, 75, 100]
    assert cut_targets(10, 3) == [3, 6, 10]
    assert cut_targets(2, 4) == [0, 1, 1, 2]
    assert cut_targets(0, 2) == [0, 0]
    big = 30 * 10**12  # far beyond int64 when multiplied by the shard count: still exact
    assert cut_targets(big, 99_999)[-1] == big
    with pytest.raises(ValueError):
        cut_targets(10, 0)


def test_byte_balanced_cuts_hand_example():
    # c = 10 20 30 40 100; T = 100; targets 50 and 100 -> first c >= 50 is row 4 -> cut 5;
    # clamped to leave one row for shard 1: cut 4
    assert byte_balanced_cuts(np.array([10, 10, 10, 10, 60]), 2) == [(0, 4), (4, 5)]
    # c = 60 70 80 90 100; target 50 -> row 0 -> cut 1
    assert byte_balanced_cuts(np.array([60, 10, 10, 10, 10]), 2) == [(0, 1), (1, 5)]
    # equal sizes split equally
    assert byte_balanced_cuts(np.full(12, 7), 4) == [(0, 3), (3, 6), (6, 9), (9, 12)]
    # one huge document in the middle: c = 1 2 1002 1003 1004, targets 251 502 753 1004 all
    # but the last land on row 2 (raw cut 3); the clamps give it a shard of its own
    assert byte_balanced_cuts(np.array([1, 1, 1000, 1, 1]), 4) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    # zero bytes everywhere: one row each, the rest in the last shard
    assert byte_balanced_cuts(np.zeros(5, dtype=np.int64), 3) == [(0, 1), (1, 2), (2, 5)]
    # trailing zero-byte rows belong to the last shard
    assert byte_balanced_cuts(np.array([5, 5, 0, 0]), 2) == [(0, 1), (1, 4)]
    # more shards than rows: the shards after the cut that reaches the last row are empty;
    # an empty corpus has one empty shard
    assert byte_balanced_cuts(np.array([3, 4]), 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert byte_balanced_cuts(np.array([0, 0, 9]), 5) == [(0, 3), (3, 3), (3, 3), (3, 3), (3, 3)]
    assert byte_balanced_cuts(np.zeros(0, dtype=np.int64), 1) == [(0, 0)]


def _random_sizes(rng: random.Random, n_rows: int) -> list[int]:
    kind = rng.choice(["lognormal", "zeros", "huge", "small", "mixed"])
    if kind == "lognormal":
        return [int(rng.lognormvariate(8, 1.2)) for _ in range(n_rows)]
    if kind == "zeros":
        return [rng.choice([0, 0, 0, 1]) for _ in range(n_rows)]
    if kind == "huge":
        sizes = [rng.randint(0, 50) for _ in range(n_rows)]
        if sizes:
            sizes[rng.randrange(n_rows)] = 10**9
        return sizes
    if kind == "small":
        return [rng.randint(0, 3) for _ in range(n_rows)]
    return [rng.choice([0, 1, 100, 10**4, 10**6]) for _ in range(n_rows)]


def test_vectorised_streamed_and_reference_cuts_agree():
    rng = random.Random(20260101)
    for it in range(1500):
        n_rows = rng.randint(0, 40)
        sizes = _random_sizes(rng, n_rows)
        n = rng.randint(1, 45)  # includes n > rows
        expected = reference_cuts(sizes, n)
        got = byte_balanced_cuts(np.asarray(sizes, dtype=np.int64), n)
        assert got == expected, (sizes, n)
        if n_rows and it % 5 == 0:
            assert streamed_cuts(sizes, n, random_blocks(rng, n_rows)) == expected, (sizes, n)
            assert streamed_cuts(sizes, n, rng.choice([[n_rows], [1] * n_rows])) == expected
        # the shape every caller relies on
        assert len(got) == n
        assert got[0][0] == 0 and got[-1][1] == n_rows
        assert all(a[1] == b[0] for a, b in zip(got, got[1:]))
        if n_rows >= n:
            assert all(stop > start for start, stop in got)


def test_cuts_accept_any_integer_dtype_and_reject_bad_input():
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    expected = byte_balanced_cuts(np.asarray(sizes, dtype=np.int64), 3)
    for dtype in (np.int32, np.uint32, np.uint64, np.int16):
        assert byte_balanced_cuts(np.asarray(sizes, dtype=dtype), 3) == expected
    assert byte_balanced_cuts(sizes, 3) == expected  # a plain list works too
    with pytest.raises(ValueError):
        byte_balanced_cuts(np.array([1, -1, 2]), 2)
    with pytest.raises(ValueError):
        byte_balanced_cuts(np.array([1.0, 2.0]), 2)
    with pytest.raises(ValueError):
        byte_balanced_cuts(np.array([1, 2]), 0)


def test_cut_in_block():
    block = np.array([10, 0, 5])
    assert cut_in_block(100, block, 100) is None  # reached before this block
    assert cut_in_block(100, block, 101) == 1
    assert cut_in_block(100, block, 110) == 1
    assert cut_in_block(100, block, 111) == 3  # the zero-byte row does not reach it
    assert cut_in_block(100, block, 115) == 3
    assert cut_in_block(100, block, 116) is None  # after this block
    assert cut_in_block(0, block, 0) is None  # target 0 is in no block: raw cut 1
    assert cut_in_block(0, np.zeros(0, dtype=np.int64), 5) is None


def test_cuts_in_block_agrees_with_cut_in_block():
    rng = random.Random(8)
    for _ in range(300):
        block = np.asarray(_random_sizes(rng, rng.randint(0, 12)), dtype=np.int64)
        before = rng.choice([0, 5, 10**6])
        targets = [rng.randint(0, before + int(block.sum()) + 3) for _ in range(rng.randint(0, 6))]
        assert cuts_in_block(before, block, targets) == [cut_in_block(before, block, t) for t in targets]
    assert cuts_in_block(0, np.array([1, 2]), []) == []


def test_cuts_balance_ranks_for_realistic_sizes():
    rng = np.random.default_rng(3)
    sizes = rng.lognormal(8, 1.3, size=200_000).astype(np.int64)
    ranks = (4, 14)
    n = shard_count_for(int(sizes.sum()), sizes.size, shard_bytes=int(sizes.sum()) // 100, shard_rows=None, dp_ranks=ranks)
    assert n == 112  # 100 rounded up to a multiple of lcm(4, 14) = 28
    cuts = byte_balanced_cuts(sizes, n)
    shard_bytes = [int(sizes[a:b].sum()) for a, b in cuts]
    assert sum(shard_bytes) == int(sizes.sum())
    # every boundary is within one document of its cumulative target
    c = np.concatenate(([0], np.cumsum(sizes)))
    for (_, stop), target in zip(cuts, cut_targets(int(sizes.sum()), n)):
        assert 0 <= int(c[stop]) - target < int(sizes[stop - 1]) + 1
    report = balance_report(shard_bytes, ranks)
    assert list(report) == ["4", "14"]
    assert report["4"]["shards_per_rank"] == 28 and report["14"]["shards_per_rank"] == 8
    for entry in report.values():
        assert 0 <= entry["max_relative_load_deviation"] < 0.001


# ---------------------------------------------------------------- rank loads


def test_rank_load_deviation():
    assert rank_load_deviation([10, 10, 10, 30], 2) == pytest.approx(1 / 3)  # loads 20, 40; mean 30
    assert rank_load_deviation([10, 10, 10, 30], 4) == 1.0  # loads 10,10,10,30; mean 15
    assert rank_load_deviation([10, 10, 10, 30], 1) == 0.0
    assert rank_load_deviation([5, 5, 5, 5, 5, 5], 3) == 0.0
    assert rank_load_deviation([0, 0], 2) == 0.0  # mean 0
    with pytest.raises(ValueError):
        rank_load_deviation([1, 2, 3], 2)
    with pytest.raises(ValueError):
        rank_load_deviation([1, 2], 0)


def test_balance_report_shape_and_rounding():
    shards = [1000, 1001, 999, 1003, 1000, 997]
    report = balance_report(shards, (3, 2, 1))
    assert list(report) == ["3", "2", "1"]
    # 3 ranks: loads 2001, 2002, 1997, mean 2000 -> 3/2000; 2 ranks: 3000, 3000 -> 0
    assert report["3"] == {"shards_per_rank": 2, "max_relative_load_deviation": 0.0015}
    assert report["2"] == {"shards_per_rank": 3, "max_relative_load_deviation": 0.0}
    assert report["1"] == {"shards_per_rank": 6, "max_relative_load_deviation": 0.0}
    assert balance_report([1, 2, 0], (3,))["3"]["max_relative_load_deviation"] == 1.0  # |3*0 - 3| / 3
    assert balance_report([1, 1, 1], (3,))["3"]["max_relative_load_deviation"] == 0.0
    assert balance_report([1, 1, 2], (3,))["3"]["max_relative_load_deviation"] == 0.5  # |3*2 - 4| / 4
    assert balance_report(shards, ()) == {}
    with pytest.raises(ValueError):
        balance_report(shards, (4,))
