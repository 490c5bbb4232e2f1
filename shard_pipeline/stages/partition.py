"""Partition: stream a task's input shards, hash and split every document, spill sorted runs by bucket.

Memory is bounded by the spill budget whatever the size of an input shard: documents are
buffered as columns until their text reaches the budget, then sorted by id and appended to
the task's one spill file as bucket sections.
"""
from __future__ import annotations

import hashlib
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from shard_pipeline.input.annotations import from_scan, scan_keys
from shard_pipeline.input.corpus import check_unchanged
from shard_pipeline.input.reader import HpltRecord, QuarantineWriter, ReadStats, ShardLines, iter_records, native_scan
from shard_pipeline.run.faults import fault_point
from shard_pipeline.files import file_sha256
from shard_pipeline.run.receipts import Buckets, InputReceipt, PartitionReceipt, PartitionTask, file_stamp
from shard_pipeline.run.records import DAMAGED_STEP, load_record, made_here, save_record
from shard_pipeline.run.runconfig import InputRef, RunConfig, load_config
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.tasklog import input_line, log
from shard_pipeline.stages import columns as C
from shard_pipeline.stages.buckets import boundary_keys, bucket_cuts
from shard_pipeline.stages.checkpoint import PartitionCheckpoint
from shard_pipeline.stages.clean_quarantine import CleanedSink
from shard_pipeline.stages.spill import ANNOTATED_SPILL_SCHEMA, ANNOTATIONS, SPILL_SCHEMA, SpillWriter


class _Buffer:
    """The documents read since the last spill (one input's), held as compactly as a Python loop allows.

    Texts and digests go end to end into bytearrays, numbers into typed arrays; `table` builds each column
    from one buffer. Both text buffers (as read, and in id order) keep their memory from run to run
    (`columns.ReusedBytes`) up to `keep` bytes; a larger run frees them, as `layout.doc_memory` assumes.
    """

    def __init__(self, val_permille: int, keep: int = 1 << 62, annotated: bool = False) -> None:
        self.val_permille = val_permille
        self.annotations: list[bytes] | None = [] if annotated else None  # --annotations: each record's, as read
        self.annotation_bytes = 0
        self.keep = keep
        self.source = 0
        self.texts = bytearray()  # UTF-8, as hashed, end to end up to `fill`; kept from run to run
        self.fill = 0
        self.ends = array("q")  # offset in `texts` where each document's text ends
        self.ordered = C.ReusedBytes(keep)  # the texts in id order (`sorted_table`)
        self.shas = bytearray()  # 32-byte digests
        self.ids: list[str] = []
        self.urls: list[str] = []
        self.langs: list[str] = []
        self.lines = array("q")
        self.n_chars = array("q")
        self.piis = array("q")

    def clear(self) -> None:
        """Empty every column in place (the reading loop holds references to them); the text
        buffers keep their memory. No Arrow array may still view `shas`."""
        for col in (self.ends, self.shas, self.ids, self.urls, self.langs, self.lines, self.n_chars, self.piis):
            del col[:]
        if self.annotations is not None:
            del self.annotations[:]
            self.annotation_bytes = 0
        if len(self.texts) > self.keep:
            del self.texts[:]  # a large document's run: its memory is not kept
        self.fill = 0

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, rec: HpltRecord, raw: bytes) -> None:
        """Append one record; `raw` is its text's UTF-8, hashed here and spilled as it is."""
        fill = self.fill
        end = fill + len(raw)
        self.texts[fill:end] = raw
        self.ends.append(end)
        self.fill = end
        self.shas += hashlib.sha256(raw).digest()
        self.ids.append(rec.id)
        self.urls.append(rec.url)
        self.langs.append(rec.lang)
        self.lines.append(rec.line)
        self.n_chars.append(len(rec.text))
        self.piis.append(rec.pii_count)
        if self.annotations is not None:
            self.annotations.append(rec.annotations)
            self.annotation_bytes += len(rec.annotations)

    def sorted_table(self) -> pa.Table:
        """The buffer as a SPILL_SCHEMA table sorted by id, its texts a view of `ordered` (so `_spill` it
        before the next sort). Python's stable str sort is UTF-8 byte order, Arrow's order, without
        importing pyarrow.compute (60-90 ms of every task's start-up).
        """
        ids = self.ids
        order = sorted(range(len(ids)), key=ids.__getitem__)
        idx = np.array(order, np.int64)
        ends = np.frombuffer(self.ends, np.int64) if len(self.ends) else np.zeros(0, np.int64)
        starts = np.empty_like(ends)
        starts[:1] = 0
        starts[1:] = ends[:-1]
        sizes = (ends - starts)[idx]
        offsets = C.offsets_of(sizes)
        texts = self.ordered.join([self.texts], np.zeros(len(idx), np.int64), starts[idx], ends[idx])
        sha = np.frombuffer(self.shas, np.uint8).reshape(-1, 32)[idx].tobytes()
        columns = {
            "id": C.utf8_array([ids[i] for i in order]),
            "text_bytes": C.fixed_array(pa.int32(), sizes.astype(np.int32)),
            "text": C.string_array(texts, offsets),
            "source": C.fixed_array(pa.int32(), np.full(len(order), self.source, np.int32)),
            "line": C.fixed_array(pa.int64(), np.frombuffer(self.lines, np.int64)[idx]),
            "url": C.utf8_array([self.urls[i] for i in order]),
            "lang": C.utf8_array([self.langs[i] for i in order]),
            "n_chars": C.fixed_array(pa.int32(), np.frombuffer(self.n_chars, np.int64)[idx].astype(np.int32)),
            "sha256": C.binary_array(32, sha),
            "pii_redactions": C.fixed_array(pa.int32(), np.frombuffer(self.piis, np.int64)[idx].astype(np.int32)),
            "val": C.bool_array(val_flags(sha, self.val_permille)),
        }
        spill_schema = SPILL_SCHEMA
        if self.annotations is not None:
            kept = [self.annotations[i] for i in order]
            columns[ANNOTATIONS] = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(), len(kept), [None, pa.py_buffer(C.offsets_of(C.lengths(kept))), pa.py_buffer(b"".join(kept))])
            spill_schema = ANNOTATED_SPILL_SCHEMA
        schema = pa.schema([f.with_type(columns[f.name].type) for f in spill_schema])  # string or large_string
        return pa.Table.from_pydict(columns, schema=schema)

    def full(self, budget: int) -> bool:
        """The run reached the spill budget: its texts and annotations are what the buffer holds."""
        return self.fill + self.annotation_bytes >= budget


def val_flags(sha256s: bytes, val_permille: int) -> np.ndarray:
    """`shard.split_of(...) == "val"` for each of the concatenated 32-byte digests, vectorised."""
    heads = np.frombuffer(sha256s, dtype=">u8").reshape(-1, 4)[:, 0]
    return heads % 1000 < val_permille


class _Utf8Keys(Sequence):
    """A sorted string array seen as UTF-8 bytes, decoded on access: `bucket_cuts` bisects it,
    touching a few ids per bucket instead of converting every id of the run."""

    def __init__(self, ids: pa.ChunkedArray) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> bytes:
        return self.ids[i].as_py().encode("utf-8")


def _spill(buf: _Buffer, writer: SpillWriter, keys: list[bytes]) -> int:
    """Sort the buffer by id, append it as one run of bucket sections; return its PII span count."""
    table = buf.sorted_table()
    pii_spans = sum(buf.piis)
    buf.clear()
    writer.write_run(table, bucket_cuts(_Utf8Keys(table.column("id")), keys))
    return pii_spans


def read_into(buf: _Buffer, inp: InputRef, index: int, cfg: RunConfig, quarantine: QuarantineWriter | None,
              spill, budget: int, cleaned: CleanedSink | None = None) -> ReadStats:
    """Stream one input shard into the buffer, spilling whenever its text reaches the budget."""
    shard = inp  # the reader uses .location and .source_id; corpus.py (and urllib with it) is not imported
    stats = ReadStats()
    assert not len(buf) or buf.source == index, "a run never spans two inputs"
    buf.source = index
    fields = cfg.content.annotations
    if cfg.content.clean is None and native_scan is not None:
        lines = ShardLines(shard, corpus=cfg.content.corpus, bad_records=cfg.content.bad_records,
                           quarantine=quarantine, stats=stats, annotations=fields)
        _scan_into(buf, lines, spill, budget)
        return stats
    policy = None
    if cfg.content.clean is not None:
        from shard_pipeline.stages.clean_policy import CleanPolicy, quarantine_reasons

        policy = CleanPolicy(**cfg.content.clean)
    for rec in iter_records(shard, corpus=cfg.content.corpus, bad_records=cfg.content.bad_records,
                            quarantine=quarantine, stats=stats, annotations=fields):
        raw = rec.text.encode("utf-8")
        if policy is not None:
            reasons = quarantine_reasons(rec.text, len(raw), policy, utf8=raw)
            if reasons:
                cleaned.add(rec, reasons)
                continue
        buf.add(rec, raw)
        if buf.full(budget):
            spill()
    return stats


def _scan_into(buf: _Buffer, lines: ShardLines, spill, budget: int) -> None:
    """`read_into`'s loop with the native scan: it fills the buffer's columns a chunk at a time, and
    the lines it does not take are decided by the strict path and added as `read_into` adds them.
    The same columns, so the same spill bytes, as the Python loop (tests/unit/input/test_native_scan.py)."""
    texts, ends, shas, ids, urls, langs = buf.texts, buf.ends, buf.shas, buf.ids, buf.urls, buf.langs
    sha256 = hashlib.sha256
    stats, v4 = lines.stats, lines.v4
    meta = bytearray()  # (text end, line, characters, PII spans) per record the scan took
    taken = array("q")
    kept: list[bytes] = []  # --annotations: each record's values of the wanted keys, as a JSON array
    wanted = (scan_keys(lines.annotations), kept) if lines.annotations else ()
    fill = buf.fill
    for first, batch in lines:
        i, n = 0, len(batch)
        while i < n:
            start, i0 = fill, i
            i, fill, refused = native_scan(batch, first, i, v4, texts, fill, budget, ids, urls, langs, meta, *wanted)
            scanned = len(kept)  # == i - i0: the records the scan took
            if kept:  # the records up to the budget or to a mistyped value; that one is the strict path's
                take, bad = _keep_annotations(buf, kept, lines, meta, budget)
                if take < scanned:
                    fill, i, refused = _text_end(meta, start), i0 + take, bad
            if meta:
                taken.frombytes(meta)
                del meta[:]
                got = taken[0::4]
                view = memoryview(texts)  # released before the next scan, which may grow `texts`
                for end in got:
                    shas += sha256(view[start:end]).digest()
                    start = end
                view.release()
                ends.extend(got)
                buf.lines.extend(taken[1::4])
                buf.n_chars.extend(taken[2::4])
                buf.piis.extend(taken[3::4])
                stats.kept += len(got)
                del taken[:]
            if refused:
                rec = lines.decide(batch[i], first + i)
                i += 1
                if rec is not None:
                    buf.fill = fill
                    buf.add(rec, rec.text.encode("utf-8"))
                    fill = buf.fill
            if fill + buf.annotation_bytes >= budget:
                buf.fill = fill
                spill()
                fill = buf.fill
    buf.fill = fill


def _keep_annotations(buf: _Buffer, kept: list[bytes], lines: ShardLines, meta: bytearray, budget: int) -> tuple[int, bool]:
    """Type the kept values of the records the scan just took (emptying `kept`) and keep the records up to the one
    that brings text plus annotations to the budget, as the Python loop spills, or up to the first whose value is
    not of its field's type (then True: that line is the strict path's to decide and name). The records after
    the cut leave the id, url and language lists and `meta`; (records kept, mistyped)."""
    corpus = "v4" if lines.v4 else "v3"
    ends, n = array("q", bytes(meta))[0::4], len(kept)
    take, bad, held = n, False, buf.annotation_bytes
    typed: list[bytes] = []  # the kept records' values: typed[:take]
    for k, raw in enumerate(kept):
        value = from_scan(raw, lines.annotations, corpus)
        if value.__class__ is tuple:
            take, bad = k, True
            break
        typed.append(value)
        held += len(value)
        if ends[k] + held >= budget:
            take = k + 1
            break
    del kept[:]
    if take < n:
        del buf.ids[take - n:], buf.urls[take - n:], buf.langs[take - n:], meta[32 * take:]
    buf.annotations.extend(typed)
    buf.annotation_bytes = held
    return take, bad


def _text_end(meta: bytearray, start: int) -> int:
    """The text fill after the records left in `meta` (each row's first int64 is its text's end)."""
    return array("q", bytes(meta[-32:-24]))[0] if meta else start


@dataclass
class _Spilling:
    """The task's buffer, spill file and bucket keys; counts the PII spans of the rows it has spilled."""

    buf: _Buffer
    writer: SpillWriter
    keys: list[bytes]
    pii_spans: int

    def __call__(self) -> None:
        self.pii_spans += _spill(self.buf, self.writer, self.keys)


def run_partition(run: RunDir, task: int) -> PartitionReceipt:
    cfg = load_config(run)
    made = made_here(cfg.content.sha256())
    spec = load_record(run.task_file("partition", task), PartitionTask, made, step=DAMAGED_STEP)
    keys = boundary_keys(load_record(run.buckets_json, Buckets, made, step=DAMAGED_STEP).boundaries)
    budget = cfg.execution.spill_bytes
    writer = SpillWriter(task, run.spill_file(task), run.spill_index(task), cfg.execution.intermediate_compression,
                         keep=budget + budget // 4)
    checkpoint = PartitionCheckpoint(run, task, made)
    receipts, pii_spans = checkpoint.restore(writer)
    done = {r.index for r in receipts}
    buf = _Buffer(cfg.content.val_permille, keep=budget + budget // 4, annotated=bool(cfg.content.annotations))
    spill = _Spilling(buf, writer, keys, pii_spans)
    if native_scan is None and cfg.content.clean is None:
        log.info(f"partition task {task}: reading with the Python loop, slower: the compiled read loop "
                 "(shard_pipeline/input/_scan.c) is not built, or built from another version of it; `pip install -e .` "
                 "with a C compiler builds it")
    quarantine = QuarantineWriter(run.quarantine_file(task)) if cfg.content.bad_records == "quarantine" else None
    try:
        for k, index in enumerate(spec.inputs, 1):
            if index in done:
                continue
            started = time.monotonic()
            receipts.append(_partition_input(run, cfg, index, spill, quarantine))
            if quarantine is not None:
                quarantine.close()  # flushed and fsynced; it reopens in append mode on the next bad record
            checkpoint.save(writer, [receipts[-1]], spill.pii_spans)
            log.info(input_line(task, k, len(spec.inputs), receipts[-1].name, receipts[-1].read,
                                receipts[-1].compressed_bytes, time.monotonic() - started))
            fault_point("partition-after-input", task)
    finally:
        if quarantine is not None:
            quarantine.close()
    writer.close()
    receipt = _receipt(run, task, writer, receipts, spill.pii_spans)
    save_record(run.partition_receipt(task), made, receipt)
    checkpoint.remove()
    return receipt


def _partition_input(run: RunDir, cfg: RunConfig, index: int, spill: _Spilling,
                     quarantine: QuarantineWriter | None) -> InputReceipt:
    """Read one input shard into the spill; the input must not change while it is read."""
    inp = cfg.content.inputs[index]
    check_unchanged(inp.location, inp.size, inp.mtime, "before reading it")
    cleaned = CleanedSink(run.cleaned_file(index), inp.source_id)
    stats = read_into(spill.buf, inp, index, cfg, quarantine, spill, cfg.execution.spill_bytes, cleaned)
    cleaned.close()
    check_unchanged(inp.location, inp.size, inp.mtime, "while it was read")
    if len(spill.buf):
        spill()  # a run never spans two inputs, so each input is a checkpoint
    return InputReceipt(index, inp.source_id, inp.name, inp.size, inp.mtime, stats.read,
                        stats.kept - cleaned.count, dict(sorted(stats.quarantined.items())),
                        stats.json_bytes, stats.compressed_bytes, cleaned.count,
                        dict(sorted(cleaned.reasons.items())))


def _receipt(run: RunDir, task: int, writer: SpillWriter, receipts: list[InputReceipt], pii_spans: int) -> PartitionReceipt:
    """What the task made, bound to its files by size, stamp and hash."""
    qpath = run.quarantine_file(task)
    return PartitionReceipt(
        task=task,
        inputs=receipts,
        rows=sum(s.rows for s in writer.sections),
        text_bytes=sum(s.text_bytes for s in writer.sections),
        runs=writer.runs,
        sections=len(writer.sections),
        pii_spans=pii_spans,
        spill_bytes=run.spill_file(task).stat().st_size,
        spill_sha256=writer.sha256.hexdigest(),
        spill_stamp=file_stamp(run.spill_file(task)),
        index_sha256=file_sha256(run.spill_index(task)),
        index_stamp=file_stamp(run.spill_index(task)),
        quarantine_file=str(qpath.relative_to(run.root)) if qpath.exists() else None,
    )
