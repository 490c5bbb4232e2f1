"""Shards balanced for data-parallel ranks.

A training job with R data-parallel ranks gives each rank an equal, contiguous run of shard files
in name order. For every rank to see the same amount of text, two things must hold:

1. the shard count is a multiple of R, for every R the data is meant for: hence a multiple of
   ``lcm(dp_ranks)`` (``shard_count_for``);
2. shards are cut by cumulative text bytes, not by rows (the cut rule below).

Cut rule (integer arithmetic, reproducible by any implementation). With ``b[k]`` the UTF-8 text
bytes of row k in output order, ``c[k] = b[0] + ... + b[k]`` (inclusive prefix sum),
``T = c[N-1]`` and n shards:

    target_i = (i + 1) * T // n                      for i = 0 .. n-1      (cut_targets)
    raw_i    = 1 + (smallest k with c[k] >= target_i) = 1 + searchsorted(c, target_i, "left")
    cut_i    = max(raw_i, cut_{i-1} + 1)              with cut_{-1} = 0    (every shard >= 1 row)
    cut_i    = min(cut_i, N - (n - 1 - i))            (leave one row for each later shard)
    cut_{n-1} = N                                      (the last shard ends at the last row)
    shard i  = rows [cut_{i-1}, cut_i)

when N >= n. When N < n (only if the caller asks for it; ``shard_count_for`` never does for
N > 0) not every shard can have a row: ``cut_i = min(max(raw_i, cut_{i-1} + 1), N)``, and the
shards after the cut that reaches N are empty.

Because each cut is placed against the *cumulative* target, errors never accumulate: each end
of any contiguous run of shards is within one document's bytes of its share (unless a clamp
moved it, which takes documents larger than a shard). That is why one set of cuts serves every
R that divides n at once.

The streaming form (``cut_targets`` + ``cuts_in_block`` + ``cuts_from_raw``) needs only the row sizes
of one block at a time, for a plan that cannot hold billions of them.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def parse_dp_ranks(spec: str) -> tuple[int, ...]:
    """``"128,448"`` -> ``(128, 448)``: the data-parallel rank counts the shards must divide for.

    Spaces around items are allowed; an empty spec, an empty item, a non-integer, a rank count
    below 1 or a repeated count is a ValueError (a typo must not silently change the shard count).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("dp ranks: expected a comma-separated list of positive integers, e.g. 128,448")
    out: list[int] = []
    for item in spec.split(","):
        item = item.strip()
        if not item.isdigit() or not item.isascii():
            raise ValueError(f"dp ranks: {item!r} in {spec!r} is not a positive integer")
        value = int(item)
        if value < 1:
            raise ValueError(f"dp ranks: {value} in {spec!r} must be >= 1")
        if value in out:
            raise ValueError(f"dp ranks: {value} is repeated in {spec!r}")
        out.append(value)
    return tuple(out)


def _check_ranks(dp_ranks: Sequence[int]) -> None:
    for r in dp_ranks:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 1:
            raise ValueError(f"dp ranks must be positive ints, got {r!r}")


def shard_multiple(dp_ranks: Sequence[int]) -> int:
    """lcm of the rank counts (1 for none): the shard count must be a multiple of it."""
    _check_ranks(dp_ranks)
    return math.lcm(*(int(r) for r in dp_ranks)) if len(dp_ranks) else 1


def shard_count_for(
    total_text_bytes: int,
    rows: int,
    *,
    shard_bytes: int | None,
    shard_rows: int | None,
    dp_ranks: Sequence[int],
) -> int:
    """The number of shards.

    Rule, in order:

    1. ``base = max(ceil(total_text_bytes / shard_bytes), ceil(rows / shard_rows), 1)`` over the
       targets given (at least one is required; with both, the larger count, so neither average
       exceeds its target);
    2. ``rows == 0`` -> 1 (an empty corpus has one empty shard, as in the shard contract);
    3. ``base = min(base, rows)``: never more shards than rows (no empty shards);
    4. with ``m = lcm(dp_ranks) > 1``: ``ceil(base / m) * m``, and if that exceeds ``rows``,
       ``(rows // m) * m``. So the count is divisible by m whenever ``rows >= m``. When
       ``0 < rows < m`` no count can be both a multiple of m and free of empty shards: the count
       stays ``base`` (not divisible; the caller should report that the dp balance cannot hold).
    """
    for name, v in (("total_text_bytes", total_text_bytes), ("rows", rows)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    if shard_bytes is None and shard_rows is None:
        raise ValueError("shard_count_for needs shard_bytes or shard_rows")
    for name, v in (("shard_bytes", shard_bytes), ("shard_rows", shard_rows)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    m = shard_multiple(dp_ranks)
    base = 1
    if shard_bytes is not None:
        base = max(base, -(-int(total_text_bytes) // int(shard_bytes)))
    if shard_rows is not None:
        base = max(base, -(-int(rows) // int(shard_rows)))
    rows = int(rows)
    if rows == 0:
        return 1
    base = min(base, rows)
    if m == 1 or rows < m:
        return base
    n = -(-base // m) * m
    if n > rows:
        n = (rows // m) * m
    return n


def run_shard_count(total_text_bytes: int, rows: int, *, shard_bytes: int | None, shard_rows: int,
                    dp_ranks: Sequence[int]) -> int:
    """A run's shard count: by text bytes when --shard-bytes is given, else by rows; a multiple of
    lcm(--dp-ranks) (`shard_count_for`). The plan cuts this many; the dry-run projects it."""
    return shard_count_for(total_text_bytes, rows, shard_bytes=shard_bytes,
                           shard_rows=None if shard_bytes else shard_rows, dp_ranks=dp_ranks)


def cut_targets(total_text_bytes: int, n_shards: int) -> list[int]:
    """``target_i = (i + 1) * total // n`` for each shard: the cumulative bytes shard i ends at.

    Exact Python integers (no overflow whatever the corpus size); the last target is the total.
    """
    if isinstance(total_text_bytes, bool) or not isinstance(total_text_bytes, (int, np.integer)) or total_text_bytes < 0:
        raise ValueError(f"total_text_bytes must be a non-negative int, got {total_text_bytes!r}")
    if isinstance(n_shards, bool) or not isinstance(n_shards, (int, np.integer)) or n_shards < 1:
        raise ValueError(f"n_shards must be a positive int, got {n_shards!r}")
    t, n = int(total_text_bytes), int(n_shards)
    return [(i + 1) * t // n for i in range(n)]


def _sizes(text_bytes) -> np.ndarray:
    a = np.asarray(text_bytes)
    if a.ndim != 1:
        raise ValueError("text_bytes must be one-dimensional")
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    if a.dtype.kind not in "iu":
        raise ValueError(f"text_bytes must be integers, got dtype {a.dtype}")
    if a.dtype.kind == "i" and int(a.min()) < 0:
        raise ValueError("text_bytes must be non-negative")
    return a.astype(np.int64, copy=False)


def cuts_in_block(cumsum_before: int, block_text_bytes: np.ndarray, targets: Sequence[int]) -> list[int | None]:
    """Where the cut for each of ``targets`` falls in a block of consecutive rows, None where not here.

    ``cumsum_before`` is the text bytes of all rows before the block. A cut is an *exclusive* offset ``j + 1`` in
    ``1 .. len(block)``, where j is the first row of the block whose inclusive cumulative bytes reach the target:
    the global raw cut is ``block_start + returned``. A target is here iff ``before < target <= before + sum(block)``,
    so a positive target is found in exactly one block; target 0 in none (its raw cut is 1).
    """
    sizes = _sizes(block_text_bytes)
    before = int(cumsum_before)
    ts = [int(x) for x in targets]
    if sizes.size == 0 or not ts:
        return [None] * len(ts)
    local = np.cumsum(sizes)
    end = before + int(local[-1])
    here = [before < x <= end for x in ts]
    rel = np.asarray([x - before if h else 1 for x, h in zip(ts, here)], dtype=np.int64)
    pos = np.searchsorted(local, rel, side="left") + 1
    return [int(p) if h else None for p, h in zip(pos, here)]


def cuts_from_raw(raw_cuts: Sequence[int], rows: int) -> list[tuple[int, int]]:
    """Apply the clamps of the module's cut rule to raw cuts; return the shards' [start, stop).

    ``raw_cuts[i]`` is ``1 + (smallest k with c[k] >= target_i)`` (1 where no block held the
    target). Vectorised: ``cut_i = i + max_{j<=i}(raw_j - j)`` is the running
    ``max(raw_i, cut_{i-1} + 1)``.
    """
    raw = np.asarray(raw_cuts, dtype=np.int64)
    n = raw.size
    if n == 0:
        raise ValueError("need at least one cut")
    rows = int(rows)
    idx = np.arange(n, dtype=np.int64)
    cuts = idx + np.maximum.accumulate(raw - idx)
    cuts = np.minimum(cuts, rows - (n - 1 - idx) if rows >= n else rows)
    cuts[-1] = rows
    starts = np.concatenate(([0], cuts[:-1]))
    return [(int(a), int(b)) for a, b in zip(starts, cuts)]


def rank_load_deviation(shard_text_bytes: Sequence[int], ranks: int) -> float:
    """Maximum relative load deviation when ``ranks`` take equal contiguous runs of shards.

    Load of a rank = the text bytes of its shards; result = ``max |load - mean| / mean``
    (0.0 when the mean is 0), the seed's "maximum relative load deviation". Computed as
    ``max |ranks * load - total| / total`` in exact integers, then one division.
    """
    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise ValueError(f"ranks must be a positive int, got {ranks!r}")
    sizes = [int(x) for x in shard_text_bytes]
    if any(x < 0 for x in sizes):
        raise ValueError("shard text bytes must be non-negative")
    if len(sizes) % ranks:
        raise ValueError(f"{len(sizes)} shards do not divide evenly over {ranks} ranks")
    per = len(sizes) // ranks
    total = sum(sizes)
    if total == 0:
        return 0.0
    loads = [sum(sizes[r * per : (r + 1) * per]) for r in range(ranks)]
    return max(abs(ranks * load - total) for load in loads) / total


def balance_report(shard_text_bytes: Sequence[int], dp_ranks: Sequence[int]) -> dict[str, dict[str, float | int]]:
    """For the manifest: per rank count, shards per rank and the maximum relative load deviation.

    ``{"128": {"shards_per_rank": 56, "max_relative_load_deviation": 0.014942}, ...}``, keys in
    the given order, the deviation rounded to 6 decimals. A rank count that does not divide the
    shard count is a ValueError (see ``shard_count_for`` for when that can happen).
    """
    _check_ranks(dp_ranks)
    sizes = [int(x) for x in shard_text_bytes]
    report: dict[str, dict[str, float | int]] = {}
    for r in dp_ranks:
        r = int(r)
        deviation = rank_load_deviation(sizes, r)  # raises unless r divides the shard count
        report[str(r)] = {
            "shards_per_rank": len(sizes) // r,
            "max_relative_load_deviation": round(deviation, 6),
        }
    return report
