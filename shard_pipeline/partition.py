"""Partition: stream a task's input shards, hash and split every document, spill sorted runs by bucket.

Memory is bounded by the spill budget whatever the size of an input shard: documents are
buffered as columns until their text reaches the budget, then sorted by id and appended to
the task's one spill file as bucket sections.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .buckets import boundary_keys, bucket_cuts
from .reader import QuarantineWriter, ReadStats, iter_records
from .rundir import RunDir, read_json, write_json_atomic
from .runconfig import InputRef, RunConfig
from .spill import SPILL_SCHEMA, SpillWriter


@dataclass
class InputReceipt:
    """What reading one input shard found: the counts the plan checks read = kept + quarantined on."""

    index: int
    source_id: str
    name: str
    size: int | None
    mtime: int | None
    read: int
    kept: int
    quarantined: dict[str, int]
    json_bytes: int
    compressed_bytes: int


@dataclass
class PartitionReceipt:
    task: int
    inputs: list[InputReceipt]
    rows: int
    text_bytes: int
    runs: int
    sections: int
    pii_spans: int
    spill_bytes: int
    spill_sha256: str
    quarantine_file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class _Buffer:
    """Column lists for the documents read since the last spill."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {name: [] for name in SPILL_SCHEMA.names}
        self.text_bytes = 0

    def clear(self) -> None:
        """Empty the lists in place: the reading loop holds references to them."""
        for col in self.cols.values():
            col.clear()
        self.text_bytes = 0

    def __len__(self) -> int:
        return len(self.cols["id"])

    def table(self) -> pa.Table:
        return pa.Table.from_pydict(self.cols, schema=SPILL_SCHEMA)


def _spill(buf: _Buffer, writer: SpillWriter, keys: list[bytes]) -> int:
    """Sort the buffer by id, append it as one run of bucket sections; return its PII span count."""
    table = buf.table()
    buf.clear()
    table = table.take(pc.sort_indices(table, sort_keys=[("id", "ascending")]))
    ids = [s.encode("utf-8") for s in table.column("id").to_pylist()]
    writer.write_run(table, bucket_cuts(ids, keys))
    return int(pc.sum(table.column("pii_redactions")).as_py() or 0)


def read_into(buf: _Buffer, inp: InputRef, index: int, cfg: RunConfig, quarantine: QuarantineWriter | None,
              spill, budget: int) -> ReadStats:
    """Stream one input shard into the buffer, spilling whenever its text reaches the budget."""
    from .corpus import InputShard

    shard = InputShard(inp.name, inp.location, inp.size, inp.mtime, inp.source_id)
    stats = ReadStats()
    c = buf.cols
    ids, tbs, texts, sources, lines = c["id"], c["text_bytes"], c["text"], c["source"], c["line"]
    urls, langs, nch, shas, piis, vals = c["url"], c["lang"], c["n_chars"], c["sha256"], c["pii_redactions"], c["val"]
    vp = cfg.content.val_permille
    sha256 = hashlib.sha256
    for rec in iter_records(shard, corpus=cfg.content.corpus, bad_records=cfg.content.bad_records,
                            quarantine=quarantine, stats=stats):
        raw = rec.text.encode("utf-8")
        digest = sha256(raw).digest()
        ids.append(rec.id)
        tbs.append(len(raw))
        texts.append(rec.text)
        sources.append(index)
        lines.append(rec.line)
        urls.append(rec.url)
        langs.append(rec.lang)
        nch.append(len(rec.text))
        shas.append(digest)
        piis.append(rec.pii_count)
        vals.append(int.from_bytes(digest[:8], "big") % 1000 < vp)
        buf.text_bytes += len(raw)
        if buf.text_bytes >= budget:
            spill()
    return stats


def run_partition(run: RunDir, task: int) -> PartitionReceipt:
    cfg = RunConfig.from_json(read_json(run.config_json))
    spec = read_json(run.task_file("partition", task))
    boundaries = read_json(run.buckets_json)["boundaries"]
    keys = boundary_keys(boundaries)
    budget = cfg.execution.spill_bytes
    writer = SpillWriter(task, run.spill_file(task), run.spill_index(task), cfg.execution.intermediate_compression)
    buf = _Buffer()
    pii_spans = 0

    def spill() -> None:
        nonlocal pii_spans
        pii_spans += _spill(buf, writer, keys)

    receipts: list[InputReceipt] = []
    qpath = run.quarantine_file(task)
    quarantine = QuarantineWriter(qpath) if cfg.content.bad_records == "quarantine" else None
    try:
        for index in spec["inputs"]:
            inp = cfg.content.inputs[index]
            stats = read_into(buf, inp, index, cfg, quarantine, spill, budget)
            receipts.append(InputReceipt(index, inp.source_id, inp.name, inp.size, inp.mtime, stats.read, stats.kept,
                                         dict(sorted(stats.quarantined.items())), stats.json_bytes, stats.compressed_bytes))
        if len(buf):
            spill()
    finally:
        if quarantine is not None:
            quarantine.close()
    writer.close()
    rows = sum(s.rows for s in writer.sections)
    text_bytes = sum(s.text_bytes for s in writer.sections)
    receipt = PartitionReceipt(
        task=task,
        inputs=receipts,
        rows=rows,
        text_bytes=text_bytes,
        runs=writer.runs,
        sections=len(writer.sections),
        pii_spans=pii_spans,
        spill_bytes=run.spill_file(task).stat().st_size,
        spill_sha256=writer.sha256.hexdigest(),
        quarantine_file=str(qpath.relative_to(run.root)) if qpath.exists() else None,
    )
    write_json_atomic(run.partition_receipt(task), asdict(receipt))
    return receipt

