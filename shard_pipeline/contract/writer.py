"""Writing one contract shard: one Parquet row group per table, zstd, hashed as it is written."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from shard_pipeline.contract.rules import COLUMNS, DICTIONARY_COLUMNS, SCHEMA, ShardFile
from shard_pipeline.files import EarlyWriteback, naming


class _HashingSink:
    """A write-only file object that hashes what passes through, so a shard is hashed as written."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self._writeback = EarlyWriteback(f)
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        mv = memoryview(data)
        self.sha256.update(mv)
        self.size += mv.nbytes
        n = self._f.write(mv)
        self._writeback.wrote(mv.nbytes)
        return n

    def flush(self) -> None:
        self._f.flush()

    @property
    def closed(self) -> bool:
        return self._f.closed

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:  # the owner closes the real file after fsync
        pass


def write_shard_file(path: Path, groups: Iterable[pa.Table]) -> ShardFile:
    """Write one fsynced shard, one Parquet row group per table in `groups` (combined into single chunks
    first, so the bytes do not depend on the caller's chunking), zstd, the contract schema."""
    with naming(path):  # a full disk names the shard
        return _write_shard_file(path, groups)


def _write_shard_file(path: Path, groups: Iterable[pa.Table]) -> ShardFile:
    rows = text_bytes = val = 0
    with open(path, "wb") as f:
        sink = _HashingSink(f)
        writer = pq.ParquetWriter(
            pa.PythonFile(sink, mode="w"),
            SCHEMA,
            compression="zstd",
            use_dictionary=DICTIONARY_COLUMNS,
        )
        try:
            for table in groups:
                if table.num_rows == 0:
                    continue
                table = table.select(COLUMNS).cast(SCHEMA).combine_chunks()
                writer.write_table(table, row_group_size=table.num_rows)
                rows += table.num_rows
                text_bytes += _utf8_bytes(table.column("text"))
                val += _count_val(table.column("split"))
        finally:
            writer.close()
        f.flush()
        os.fsync(f.fileno())
    return ShardFile(
        name=path.name,
        rows=rows,
        bytes=sink.size,
        sha256=sink.sha256.hexdigest(),
        text_bytes=text_bytes,
        train=rows - val,
        val=val,
    )


@dataclass(frozen=True)
class ShardCounts:
    """What a shard file holds, counted from the file: its rows (the footer) and split counts (its split column)."""

    rows: int
    train: int
    val: int


def shard_counts(path: Path) -> ShardCounts:
    """Count a written shard's rows and splits back from its file, by the definition the writer counted with.
    Cheap: the footer and the dictionary-encoded split column (~4% of hashing the file). Its text bytes would
    mean decompressing every text (~5x hashing it; HPLT English: hours of finalize), so they are not counted here."""
    rows = val = 0
    with pq.ParquetFile(path) as pf:
        for g in range(pf.metadata.num_row_groups):
            table = pf.read_row_group(g, columns=["split"])
            rows += table.num_rows
            val += _count_val(table.column("split"))
    return ShardCounts(rows, rows - val, val)


def _utf8_bytes(column: pa.ChunkedArray) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.binary_length(column)).as_py() or 0)


def _count_val(column: pa.ChunkedArray) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.equal(column, "val").cast(pa.int64())).as_py() or 0)
