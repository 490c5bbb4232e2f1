"""Arrow arrays built in bulk from Python data: one joined buffer per column, no per-value conversion.

`pa.array`/`Table.from_pydict` convert object by object, re-validate UTF-8 the caller just
encoded, and make pyarrow import pandas (0.4 s, 60 MB a process) to check whether the objects
are pandas ones. These builders wrap numpy arrays and joined bytes with `from_buffers` instead.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from shard_pipeline.native import compiled

# compiled by pip install (setup.py); without it (or built from another source) a Python loop, same bytes
try:
    from shard_pipeline.stages import _gather
except ImportError:  # pragma: no cover - an install without a C compiler
    _gather = None
native_gather = compiled(_gather, "gather", "stages/_gather.c")

MAX_STRING_BYTES = (1 << 31) - 1  # pa.string() offsets are int32


def lengths(items: list) -> np.ndarray:
    """len() of every item, as int64."""
    return np.fromiter(map(len, items), np.int64, len(items))


def fixed_array(type_: pa.DataType, values: np.ndarray) -> pa.Array:
    """A fixed-width array over a numpy array's memory, without validity (no nulls)."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def bool_array(flags: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(pa.bool_(), len(flags), [None, pa.py_buffer(np.packbits(flags, bitorder="little"))])


def binary_array(width: int, data: bytes) -> pa.Array:
    """A fixed_size_binary(width) array over `data`, the values concatenated."""
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(data) // width, [None, pa.py_buffer(data)])


def offsets_of(sizes: np.ndarray) -> np.ndarray:
    """The n + 1 int64 offsets of n values of the given sizes, laid end to end."""
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return offsets


def string_array(data, offsets: np.ndarray) -> pa.Array:
    """A string array over `data` (valid UTF-8), value i at [offsets[i], offsets[i+1]); large_string past
    int32 offsets (a spill budget of 2 GiB or more; `spill.section_blob` casts IPC batches back)."""
    n = len(offsets) - 1
    if offsets[-1] > MAX_STRING_BYTES:
        return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))


def utf8_array(strings: list[str]) -> pa.Array:
    """Short strings (ids, URLs, language codes) in one encode call when all are ASCII, the usual case."""
    joined = "".join(strings)
    data = joined.encode("utf-8")
    if len(data) == len(joined):
        return string_array(data, offsets_of(lengths(strings)))
    encoded = [s.encode("utf-8") for s in strings]
    return string_array(b"".join(encoded), offsets_of(lengths(encoded)))


class ReusedBytes:
    """A byte buffer kept from one join to the next, for the texts of a spill run or a row group.

    A new buffer each time is fresh memory the kernel faults in and zeroes: in the write stage 86% of its
    page faults, ~10% of its CPU (bench/RESULTS.md 4). What `join` returned is overwritten by the next
    `join`, so an array over it must be written out first. A join over `keep` bytes (a large document)
    gets a buffer of its own, as the memory model counts it (`layout.doc_memory`).
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._data = memoryview(bytearray())

    def room(self, total: int) -> int:
        """The size to allocate for a join of `total` bytes: a quarter more, up to `keep`, so a join a little
        larger than the last does not take fresh memory again; pages never written are never faulted in."""
        return max(total, min(self.keep, total + total // 4))

    def join(self, sources: list, owner: np.ndarray, start: np.ndarray, end: np.ndarray) -> memoryview:
        """The byte runs `sources[owner[k]][start[k]:end[k]]` end to end (`sources` are byte buffers)."""
        owner, start, end = (np.ascontiguousarray(a, np.int64) for a in (owner, start, end))
        total = int((end - start).sum())
        if total > self.keep:
            out = memoryview(np.empty(total, np.uint8))  # its own; not zeroed: every byte is written below
        else:
            if len(self._data) < total:  # a larger buffer: the smaller one goes first, never both at once
                self._data = memoryview(bytearray())
                self._data = memoryview(np.empty(self.room(total), np.uint8))
            out = self._data
        if native_gather is not None:
            native_gather(sources, owner, start, end, out)
        else:
            views = [memoryview(s).cast("B") for s in sources]
            at = 0
            for o, a, b in zip(owner.tolist(), start.tolist(), end.tolist()):
                out[at:at + b - a] = views[o][a:b]
                at += b - a
            for v in views:
                v.release()
        return out[:total]


def gather_strings(arrays: list[pa.Array], positions: np.ndarray, into: ReusedBytes | None = None) -> pa.Array:
    """`pa.concat_arrays(arrays).take(positions)` for string arrays without nulls, in one copy of the bytes
    (concatenating then taking copied every text byte twice: bench/RESULTS.md 4). Runs of adjacent slices
    are merged and the data joined once, into `into` when given (valid until its next join).
    """
    views, starts, ends, owners = [], [], [], []
    for k, a in enumerate(arrays):
        if len(a) == 0:
            continue
        off_type = np.int64 if pa.types.is_large_string(a.type) else np.int32
        _, offsets_buf, data_buf = a.buffers()
        offs = np.frombuffer(offsets_buf, off_type)[a.offset:a.offset + len(a) + 1].astype(np.int64)
        views.append(memoryview(data_buf).cast("B") if data_buf is not None else memoryview(b""))
        starts.append(offs[:-1])
        ends.append(offs[1:])
        owners.append(np.full(len(a), len(views) - 1, np.int64))
    if not views or len(positions) == 0:
        return string_array(b"", np.zeros(len(positions) + 1, np.int64))
    start = np.concatenate(starts)[positions]
    end = np.concatenate(ends)[positions]
    owner = np.concatenate(owners)[positions]
    # a run starts where the value is not the next one in the same chunk's buffer
    new = np.ones(len(positions), bool)
    new[1:] = (owner[1:] != owner[:-1]) | (start[1:] != end[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(positions)) - 1
    offsets = offsets_of(end - start)
    data = (into or ReusedBytes(0)).join(views, owner[first], start[first], end[last])
    return string_array(data, offsets)
