"""The annotation files beside the shards (--annotations): where they lie, how they are written and checked.

`OUT/__annotations/hplt/<shard name>` holds each shard's ids in row order and the kept HPLT fields, one row
group per shard row group; the `__` folder keeps readers of OUT on the shards (contract/extras.py).
`__annotations/fields.json` says which fields, their types and how many rows hold each as null.
"""
from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shard_pipeline.contract.writer import _HashingSink
from shard_pipeline.files import file_sha256, naming
from shard_pipeline.contract.rules import SCHEMA

ANNOTATIONS_DIR = "__annotations/hplt"
FIELDS_NAME = "__annotations/fields.json"


def column_name(field: str) -> str:
    """A field's column in the annotation files: its HPLT name, or `hplt_<name>` where a shard column has that
    name (v3's `lang` list; the shard's `lang` is its first entry), so that a join of the two keeps both."""
    return f"hplt_{field}" if field in SCHEMA.names else field


def annotation_name(shard_name: str) -> str:
    """The annotation file of a shard (a name relative to OUT, `train/` folder included in the dirs layout)."""
    return f"{ANNOTATIONS_DIR}/{shard_name}"


def shard_of(name: str) -> str | None:
    """The shard an annotation file belongs to, or None when `name` is not an annotation file."""
    prefix = ANNOTATIONS_DIR + "/"
    return name[len(prefix):] if name.startswith(prefix) and name.endswith(".parquet") else None


class AnnotationWriter:
    """One annotation file written beside its shard, a row group per shard row group (so a writer holds one row
    group of annotations, however heavy the fields), zstd, hashed as written, fsynced by `close`."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.rows = path, 0
        with naming(path):
            self._f = open(path, "wb")
            self._sink = _HashingSink(self._f)
            self._writer = pq.ParquetWriter(pa.PythonFile(self._sink, mode="w"), schema, compression="zstd")

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            with naming(self.path):
                self._writer.write_table(table.combine_chunks(), row_group_size=table.num_rows)
            self.rows += table.num_rows

    def close(self) -> tuple[int, int, str]:
        """(rows, bytes, sha256) of the finished file."""
        with naming(self.path):
            self._writer.close()
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
        return self.rows, self._sink.size, self._sink.sha256.hexdigest()


def null_counts(path: Path, fields: tuple[str, ...]) -> dict[str, int]:
    """Rows of one annotation file that hold each field as null (absent from the record, or null in it)."""
    table = pq.read_table(path, columns=[column_name(n) for n in fields])
    return {name: table.column(column_name(name)).null_count for name in fields}


def fields_report(fields: tuple[str, ...], schema: pa.Schema, rows: int, nulls: dict[str, int]) -> dict[str, Any]:
    """`__annotations/fields.json`: the kept fields, their Parquet types, and the rows where each is null."""
    return {"layout": f"{ANNOTATIONS_DIR}/<shard name>: the shard's ids in its row order, then these fields",
            "rows": rows,
            "fields": [{"name": n, "column": column_name(n), "type": str(schema.field(column_name(n)).type),
                        "null_rows": nulls.get(n, 0)} for n in fields]}


def order_problem(shard: Path, annotations: Path) -> str | None:
    """Why an annotation file is not its shard's (other ids, or the same ids in another order); None if it is."""
    try:
        ids = pq.read_table(annotations, columns=["id"]).column("id")
    except Exception as exc:  # not Parquet, or no id column: named, never a traceback
        return f"not a readable annotation file ({type(exc).__name__}: {exc})"
    want = pq.read_table(shard, columns=["id"]).column("id")
    if len(ids) != len(want):
        return f"{len(ids)} rows, its shard {PurePosixPath(shard.name)} has {len(want)}"
    if not ids.equals(want):
        at = next(i for i, (a, b) in enumerate(zip(ids.to_pylist(), want.to_pylist())) if a != b)
        return f"row {at} has id {ids[at].as_py()!r}, its shard has {want[at].as_py()!r} there (reordered or edited)"
    return None


def annotations_differ(out_tmp: Path, shard: Any) -> str | None:
    """Why a written shard's annotation file is not the one its receipt (run/receipts.WrittenShard) names; None if
    it is, or the run keeps no annotations."""
    if shard.annotations_sha256 is None:
        return None
    path = out_tmp / annotation_name(shard.name)
    if not path.is_file():
        return f"{path}: missing (its shard {shard.name} is written)"
    if file_sha256(path) != shard.annotations_sha256:
        return f"{path}: sha256 differs from its write receipt"
    return None


def null_notes(out: Path) -> list[str]:
    """One line per kept field that some rows hold as null, from OUT's fields.json: said when the run is done."""
    report = json.loads((out / FIELDS_NAME).read_text(encoding="utf-8"))
    return [f"--annotations: {f['name']!r} is null in {f['null_rows']:,} of {report['rows']:,} rows (records without "
            f"it); counts in {FIELDS_NAME}" for f in report["fields"] if f["null_rows"]]
