"""The documents --clean removed: kept whole with their reasons, never lost.

Partition writes one Parquet file per input into the run's quarantine/ (`CleanedSink`);
finalize gathers them, in id order, into OUT/quarantine.parquet (`write_cleaned`).
"""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from shard_pipeline.files import naming
from shard_pipeline.contract.rules import row_group_bounds
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import RunDir

CLEANED_SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("source_id", pa.string()), ("url", pa.string()),
                            ("line", pa.int64()), ("reasons", pa.list_(pa.string()))])


class CleanedSink:
    """Documents the --clean policy removed from one input, kept whole in Parquet with their reasons."""

    def __init__(self, path, source_id: str):
        self.path, self.source_id = path, source_id
        self.partial = path.with_name(path.name + ".partial")
        self.writer = None
        self.count = 0
        self.reasons: dict[str, int] = {}

    def add(self, rec, reasons: tuple[str, ...]) -> None:
        import pyarrow.parquet as pq  # only runs with --clean pay for it

        with naming(self.partial):  # a full disk names the file
            if self.writer is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.writer = pq.ParquetWriter(str(self.partial), CLEANED_SCHEMA, compression="zstd")
            self.writer.write_table(pa.Table.from_pylist(
                [{"id": rec.id, "text": rec.text, "source_id": self.source_id, "url": rec.url, "line": rec.line,
                  "reasons": list(reasons)}], schema=CLEANED_SCHEMA))
        self.count += 1
        for r in reasons:
            self.reasons[r] = self.reasons.get(r, 0) + 1

    def close(self) -> None:
        if self.writer is not None:
            with naming(self.partial):
                self.writer.close()
                os.replace(self.partial, self.path)
        else:
            self.path.unlink(missing_ok=True)


def write_cleaned(run: RunDir, cfg: RunConfig, path: Path) -> Path:
    """All documents the --clean policy removed, in id order, one zstd Parquet file: never lost."""
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [pq.read_table(p) for p in run.cleaned_files()]
    table = pa.concat_tables(parts) if parts else CLEANED_SCHEMA.empty_table()
    table = table.take(pc.sort_indices(table, [("id", "ascending")]))
    with naming(path), pq.ParquetWriter(str(path), CLEANED_SCHEMA, compression="zstd") as w:
        if table.num_rows:
            sizes = pc.binary_length(table.column("text")).to_pylist()
            for a, b in row_group_bounds(sizes, cfg.content.row_group_bytes):
                w.write_table(table.slice(a, b - a).combine_chunks(), row_group_size=b - a)
    return path
