"""The intermediate format between partition and write: one data file and one index per task.

A partition task appends sorted runs to its single `.spill` file; each run is cut by bucket
into sections, and each section is an Arrow IPC file blob (compressed buffers, fixed-size
record batches). The `.index.arrow` lists every section: (run, bucket, offset, length, rows,
text_bytes, val_rows, val_text_bytes). Files on scratch therefore grow with tasks, not tasks x buckets, and every text
byte is written once and read back once (by the one writer whose rows it is).
"""
from __future__ import annotations

import hashlib
import io
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np
import pyarrow as pa

from shard_pipeline.files import EarlyWriteback, atomic_file, hash_into, naming
from shard_pipeline.run.records import REDO_STEP, DamagedRunFile

SPILL_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("text_bytes", pa.int32(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("source", pa.int32(), nullable=False),
        pa.field("line", pa.int64(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("lang", pa.string(), nullable=False),
        pa.field("n_chars", pa.int32(), nullable=False),
        pa.field("sha256", pa.binary(32), nullable=False),
        pa.field("pii_redactions", pa.int32(), nullable=False),
        pa.field("val", pa.bool_(), nullable=False),
    ]
)
ANNOTATIONS = "annotations"  # --annotations: each row's kept HPLT fields as a JSON list (input/annotations.py)
ANNOTATED_SPILL_SCHEMA = SPILL_SCHEMA.append(pa.field(ANNOTATIONS, pa.large_binary(), nullable=False))
ORDER_FIELDS = [0, 1, 10]  # id, text_bytes, val: all a writer needs to order a bucket (or one split of it) and cut row groups
BATCH_ROWS = 32  # small: a writer keeps one decoded batch per section of its bucket
READ_WINDOW = 4096  # reads of a section smaller than this are served from one pread of this many bytes

INDEX_SCHEMA = pa.schema(
    [
        ("task", pa.int32()),
        ("run", pa.int32()),
        ("bucket", pa.int32()),
        ("offset", pa.int64()),
        ("length", pa.int64()),
        ("rows", pa.int64()),
        ("text_bytes", pa.int64()),
        ("val_rows", pa.int64()),  # of `rows`, those in split val: a split's shard set is planned from counts alone
        ("val_text_bytes", pa.int64()),
    ]
)


@dataclass(frozen=True)
class Section:
    task: int
    run: int
    bucket: int
    offset: int
    length: int
    rows: int
    text_bytes: int
    val_rows: int  # of `rows`, those in split val
    val_text_bytes: int


def section_blob(table: pa.Table, compression: str, into: np.ndarray | None = None) -> pa.Buffer:
    """One section as an Arrow IPC file in BATCH_ROWS-row batches, compressed on the calling thread (Arrow's
    pool costs more CPU than it saves on 32-row buffers). Batches of a large_string run are cast back.

    With `into` (at least `blob_bound(table)` bytes) the blob is written into that kept buffer, valid
    until the next call: a growing stream cost ~8% of a partition unit's CPU (bench/RESULTS.md table 4).
    """
    sink = pa.BufferOutputStream() if into is None else pa.FixedSizeBufferWriter(pa.py_buffer(into))
    opts = pa.ipc.IpcWriteOptions(compression=compression, use_threads=False)
    schema = ANNOTATED_SPILL_SCHEMA if ANNOTATIONS in table.schema.names else SPILL_SCHEMA
    large = table.schema != schema
    with pa.ipc.new_file(sink, schema, options=opts) as w:
        for batch in table.to_batches(max_chunksize=BATCH_ROWS):
            w.write_batch(_from_large(batch, schema) if large else batch)
    return sink.getvalue() if into is None else pa.py_buffer(into)[:sink.tell()]


def blob_bound(table: pa.Table) -> int:
    """More bytes than `section_blob(table)` can take: every buffer stored as it is (Arrow keeps a
    buffer uncompressed when compressing does not shrink it; LZ4 frames add at most 1/255 and a
    header), padded, with its batch's metadata, the schema and the footer."""
    batches = len(table) // BATCH_ROWS + 1
    return table.nbytes + table.nbytes // 128 + batches * (64 * 3 * len(table.schema) + 1024) + (64 << 10)


def _from_large(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch sliced from a large_string run, as `schema` (SPILL_SCHEMA, or with annotations). Its large_string columns are
    copied before the cast: a slice keeps the run's 64-bit offsets, which the cast refuses past
    2 GiB. (Same values as a string run; the IPC bytes differ slightly, the outputs do not.)"""
    columns = [c if c.type == f.type else pa.concat_arrays([c]).cast(f.type)
               for c, f in zip(batch.columns, schema)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class SpillWriter:
    """Appends bucket sections of sorted runs to one file; `close()` writes the index."""

    def __init__(self, task: int, data_path: Path, index_path: Path, compression: str = "lz4", keep: int = 1 << 62):
        self.task = task
        self.keep = keep  # the largest blob buffer kept from one section to the next (`section_blob`)
        self._blob: np.ndarray | None = None
        self.data_path = data_path
        self.index_path = index_path
        self.compression = compression
        self.sections: list[Section] = []
        self.runs = 0
        self._f: BinaryIO | None = None  # opened on first use: restore() must not truncate first
        self._writeback: EarlyWriteback | None = None
        self._offset = 0
        self.sha256 = hashlib.sha256()

    def _file(self) -> BinaryIO:
        if self._f is None:
            self._f = open(self.data_path, "wb")
            self._writeback = EarlyWriteback(self._f)
        return self._f

    def restore(self, offset: int, sections: list[Section], runs: int) -> None:
        """Continue after a checkpoint: keep the first `offset` bytes, re-hash them, append after."""
        with open(self.data_path, "r+b") as f:
            f.truncate(offset)
        with open(self.data_path, "rb") as f:
            hash_into(self.sha256, f)
        self._f = open(self.data_path, "ab")
        self._writeback = EarlyWriteback(self._f)
        self._offset, self.sections, self.runs = offset, list(sections), runs

    def flush(self) -> int:
        """Make everything written so far durable; return the file's length."""
        with naming(self.data_path):
            f = self._file()
            f.flush()
            os.fsync(f.fileno())
        return self._offset

    def write_run(self, table: pa.Table, cuts: list[int]) -> None:
        """`table` sorted by id; `cuts[b]:cuts[b+1]` are the rows of bucket b."""
        text_bytes = table.column("text_bytes").to_numpy().astype(np.int64)
        val = table.column("val").to_numpy(zero_copy_only=False)
        tb_sum = np.concatenate(([0], np.cumsum(text_bytes)))
        val_rows = np.concatenate(([0], np.cumsum(val, dtype=np.int64)))
        val_tb = np.concatenate(([0], np.cumsum(np.where(val, text_bytes, 0))))
        for b in range(len(cuts) - 1):
            lo, hi = cuts[b], cuts[b + 1]
            if hi == lo:
                continue
            part = table.slice(lo, hi - lo)
            blob = section_blob(part, self.compression, self._blob_buffer(blob_bound(part)))
            with naming(self.data_path):  # a full disk names the spill file
                self._file().write(blob)
                self._writeback.wrote(blob.size)
            self.sha256.update(blob)
            self.sections.append(Section(self.task, self.runs, b, self._offset, blob.size, hi - lo,
                                         int(tb_sum[hi] - tb_sum[lo]), int(val_rows[hi] - val_rows[lo]),
                                         int(val_tb[hi] - val_tb[lo])))
            self._offset += blob.size
        self.runs += 1

    def _blob_buffer(self, bound: int) -> np.ndarray | None:
        """A kept buffer of at least `bound` bytes, or None above `keep` (a large document's
        section gets a stream of its own, freed after it, as the memory model assumes)."""
        if bound > self.keep:
            return None
        if self._blob is None or len(self._blob) < bound:
            self._blob = None  # the smaller one goes first, never both at once
            self._blob = np.empty(min(self.keep, 2 * bound), np.uint8)  # not zeroed: only what is written is touched
        return self._blob

    def close(self) -> None:
        self.flush()
        with naming(self.data_path):
            self._file().close()
        cols = {name: [getattr(s, name) for s in self.sections] for name in INDEX_SCHEMA.names}
        write_arrow(self.index_path, pa.Table.from_pydict(cols, schema=INDEX_SCHEMA))


def write_arrow(path: Path, table: pa.Table) -> None:
    """An Arrow IPC file, written atomically (temp + fsync + rename)."""
    with atomic_file(path) as f:
        with pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)


# What reading a damaged IPC file raises: Arrow's invalid data, its own IOError (an OSError without an errno:
# "LZ4 decompress failed", "Invalid flatbuffers message"), and a malloc of a length no section has (a damaged
# length field: petabytes; Linux overcommits, so a section of the size written is not refused so). An OSError
# with an errno is the system's, and stays one.
ARROW_DAMAGE = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, pa.ArrowMemoryError, OSError)


def damaged_arrow(path: Path, exc: Exception) -> Exception:
    """Arrow's complaint about a file of the run dir (damaged, cut short, not Arrow) as one naming it: the done
    rule compares these files with their receipts, so --resume redoes the task that writes it."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc
    return DamagedRunFile(path, f"not the Arrow data hplt-shard wrote: {exc}", REDO_STEP)


@contextmanager
def arrow_named(path: Path) -> Iterator[None]:
    try:
        yield
    except ARROW_DAMAGE as exc:
        raise damaged_arrow(path, exc) from None


def read_arrow(path: Path) -> pa.Table:
    with arrow_named(path), pa.memory_map(str(path)) as f:
        return pa.ipc.open_file(f).read_all()


class SpillReader:
    """Random access to the sections of one task's spill file."""

    def __init__(self, data_path: Path):
        self.path = data_path
        self._fd = os.open(data_path, os.O_RDONLY)

    def _open(self, s: Section, fields: list[int] | None = None) -> pa.ipc.RecordBatchFileReader:
        """Batches are decompressed on the calling thread: handing 32-row buffers to Arrow's
        pool cost more than it saved, like on the writing side (`section_blob`)."""
        opts = pa.ipc.IpcReadOptions(included_fields=fields, use_threads=False)
        with arrow_named(self.path):
            return pa.ipc.open_file(pa.PythonFile(_SectionFile(self._fd, s), mode="r"), options=opts)

    def _reader(self, s: Section) -> pa.ipc.RecordBatchFileReader:
        return self._open(s)

    def order_columns(self, s: Section) -> pa.Table:
        """Only id, text_bytes and val: the bucket's order is fixed before any text is read or decompressed."""
        reader = self._open(s, ORDER_FIELDS)
        with arrow_named(self.path):
            return reader.read_all()

    def rows(self, s: Section, lo: int, hi: int) -> pa.Table:
        """Rows [lo, hi) of a section, decompressing only the batches that hold them."""
        return SectionCursor(self, s).rows(lo, hi)

    def close(self) -> None:
        os.close(self._fd)


class _SectionFile(io.RawIOBase):
    """One section of a spill file as a file of its own, read with pread: a memory map would keep every page
    a writer touched in its cgroup-charged RSS; here Arrow copies only the buffers it asks for."""

    def __init__(self, fd: int, s: Section):
        super().__init__()
        self._fd, self._start, self._length, self._pos = fd, s.offset, s.length, 0
        self._window, self._window_pos = b"", 0  # the last READ_WINDOW bytes read ahead, from section offset _window_pos

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        self._pos = pos + (0, self._pos, self._length)[whence]
        return self._pos

    def read(self, n: int = -1) -> bytes:
        n = self._length - self._pos if n < 0 else min(n, self._length - self._pos)
        if n <= 0:
            return b""
        data = self._from_window(n) if n < READ_WINDOW else os.pread(self._fd, n, self._start + self._pos)
        self._pos += len(data)
        return data

    def _from_window(self, n: int) -> bytes:
        """A small read (an IPC message's metadata, a 32-row batch's buffer), served from a window read ahead:
        Arrow asks for each in turn, ~34,000 preads a write task (bench/RESULTS.md 4); a window cuts them ~4x."""
        at = self._pos - self._window_pos
        if at < 0 or at + n > len(self._window):
            self._window = os.pread(self._fd, min(max(n, READ_WINDOW), self._length - self._pos), self._start + self._pos)
            self._window_pos, at = self._pos, 0
        return self._window[at:at + n]


class SectionCursor:
    """Reads one section front to back, keeping its last decoded batch: the one that straddles two row
    groups, so each batch is decompressed once."""

    def __init__(self, spill: SpillReader, s: Section):
        self._reader = spill._reader(s)
        self._path = spill.path
        self._index = -1
        self._batch: pa.RecordBatch | None = None

    def _get(self, i: int) -> pa.RecordBatch:
        if i != self._index:
            try:  # not a `with`: this runs for every 32-row batch a writer reads
                self._batch, self._index = self._reader.get_batch(i), i
            except ARROW_DAMAGE as exc:
                raise damaged_arrow(self._path, exc) from None
        return self._batch

    def rows(self, lo: int, hi: int) -> pa.Table:
        first, last = lo // BATCH_ROWS, (hi - 1) // BATCH_ROWS
        batches = [self._get(i) for i in range(first, last + 1)]
        table = pa.Table.from_batches(batches, schema=batches[0].schema)
        return table.slice(lo - first * BATCH_ROWS, hi - lo)
