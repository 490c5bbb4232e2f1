"""Write: turn one task's exact row range into contract shards in OUT.tmp, with a receipt.

A bucket's order is fixed from its ids alone (id + text_bytes columns, a few percent of the
data); texts are then decompressed row group by row group, so a writer's memory is one bucket's
order plus a row group, whatever the bucket's size. Equal ids meet here, and are an error before
any byte of the bucket is written.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shard_pipeline.contract.annotations import AnnotationWriter, annotation_name, annotations_differ
from shard_pipeline.contract.replace import NotReplaceable, staging_dir
from shard_pipeline.contract.rules import SCHEMA, ShardFile, row_group_bounds
from shard_pipeline.contract.writer import write_shard_file
from shard_pipeline.input.annotations import annotation_table, schema_of
from shard_pipeline.run.faults import fault_point
from shard_pipeline.run.receipts import Plan, SetPlan, WriteProgress, WriteReceipt, WrittenShard, file_stamp
from shard_pipeline.run.records import REDO_STEP, DamagedRunFile, Made, Problem, load_record, made_here, read_record, save_record
from shard_pipeline.run.registry import file_matches
from shard_pipeline.run.runconfig import RunConfig, load_config
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.tasklog import log, shard_line
from shard_pipeline.stages import columns as C
from shard_pipeline.stages.order import BucketOrder, Readers, sections_of
from shard_pipeline.stages.spill import ANNOTATIONS, Section, SectionCursor, read_arrow


@dataclass(frozen=True, eq=False)
class ShardRanks:
    """Where each rank of one shard lives, in rank order: bucket, section, row, text bytes. Built in one pass
    over the bucket orders; holds slices (~24 B per rank), so a writer holds one bucket's order and one shard."""

    bucket: np.ndarray
    section: np.ndarray
    row: np.ndarray
    text_bytes: np.ndarray
    sections: dict[int, list[Section]]  # bucket -> its sections, which `section` indexes

    @staticmethod
    def piece(o: BucketOrder, lo: int, hi: int) -> ShardRanks:
        """Ranks [lo, hi) of one bucket's order, copied (a view would keep the whole order alive)."""
        return ShardRanks(np.full(hi - lo, o.bucket, np.int64), o.section[lo:hi].copy(), o.row[lo:hi].copy(),
                          o.text_bytes[lo:hi].copy(), {o.bucket: o.sections})

    @staticmethod
    def joined(pieces: list[ShardRanks]) -> ShardRanks:
        if not pieces:
            return ShardRanks(*(np.zeros(0, np.int64) for _ in range(4)), {})
        cat = lambda name: np.concatenate([getattr(p, name) for p in pieces])
        return ShardRanks(cat("bucket"), cat("section"), cat("row"), cat("text_bytes"),
                          {b: secs for p in pieces for b, secs in p.sections.items()})


class ShardAssembler:
    """Builds contract tables for ranges of one shard set's ranks, bucket by bucket."""

    def __init__(self, cfg: RunConfig, shard_set: SetPlan, sections: pa.Table, readers: Readers):
        self.cfg = cfg
        self.split = shard_set.split
        self.buckets = shard_set.buckets
        self.starts = np.array([b.start for b in self.buckets], dtype=np.int64)
        self.sections = sections
        self.readers = readers
        self.source_ids = pa.array([i.source_id for i in cfg.content.inputs], pa.string())
        self._order: BucketOrder | None = None
        self._cursors: dict[tuple[int, int], SectionCursor] = {}
        self._texts = C.ReusedBytes(cfg.content.row_group_bytes)  # a row group's texts: each is written before the next

    def order(self, b: int) -> BucketOrder:
        if self._order is None or self._order.bucket != b:
            self._order = None  # free the previous bucket before loading the next
            lo, hi = self.buckets[b].sections
            self._order = BucketOrder(b, sections_of(self.sections, lo, hi), self.readers, self.cfg, self.split)
        return self._order

    def cursor(self, ranks: ShardRanks, b: int, k: int) -> SectionCursor:
        if (b, k) not in self._cursors:
            s = ranks.sections[b][k]
            self._cursors[(b, k)] = SectionCursor(self.readers[s.task], s)
        return self._cursors[(b, k)]

    def pieces(self, start: int, stop: int) -> Iterator[tuple[BucketOrder, int, int]]:
        """(bucket order, local lo, local hi) covering global ranks [start, stop)."""
        if stop <= start:
            return
        b = int(np.searchsorted(self.starts, start, side="right")) - 1
        while start < stop:
            while self.buckets[b].rows == 0 or start >= self.buckets[b].start + self.buckets[b].rows:
                b += 1
            first = self.buckets[b].start
            hi = min(stop, first + self.buckets[b].rows)
            yield self.order(b), start - first, hi - first
            start = hi

    def ranks(self, start: int, stop: int) -> ShardRanks:
        """The ranks [start, stop) of the set; shards come in rank order, so each bucket is ordered once.
        Each piece is copied out before the next bucket's order replaces its own."""
        pieces = [ShardRanks.piece(o, lo, hi) for o, lo, hi in self.pieces(start, stop)]
        return ShardRanks.joined(pieces)

    def table(self, ranks: ShardRanks, first: int, a: int, b: int) -> tuple[pa.Table, pa.Table | None]:
        """The contract rows for the shard's ranks [a, b), the shard starting at set rank `first`
        (minhash_cluster is the rank in the set), and with --annotations their annotation rows."""
        bucket = ranks.bucket[a:b]
        low = int(bucket[0]) if len(bucket) else 0
        for key in [key for key in self._cursors if key[0] < low]:  # buckets this shard has left
            del self._cursors[key]
        parts, index, base = [], [], 0
        section, row = ranks.section[a:b], ranks.row[a:b]
        for lo, hi in runs_of(bucket):  # ranks are in bucket order: each bucket is one slice
            base = self._piece_rows(ranks, int(bucket[lo]), section[lo:hi], row[lo:hi], parts, index, base)
        # One gather for the whole row group: a take over the sections' 32-row batches (hundreds of
        # chunks) cost 10-15x a copy into one chunk plus a take of it (bench/RESULTS.md 4). The texts,
        # nearly all the bytes, skip that copy too: their buffer is built once, in rank order.
        positions = np.concatenate(index)
        rows = pa.concat_tables(parts)
        text = C.gather_strings(rows.column("text").chunks, positions, self._texts)
        t = rows.drop_columns(["text"]).combine_chunks().take(pa.array(positions))
        n = t.num_rows
        c = self.cfg.content
        kept = None
        if c.annotations:
            kept = annotation_table(t.column("id").combine_chunks(), t.column(ANNOTATIONS).combine_chunks(),
                                    c.annotations, c.corpus)
        return pa.Table.from_arrays(
            [
                t.column("id"),
                text,
                pc.take(self.source_ids, t.column("source")),
                t.column("url"),
                pa.array([c.license_spdx] * n, pa.string()),
                t.column("lang"),
                t.column("n_chars"),
                t.column("sha256"),
                pa.array(np.arange(first + a, first + b, dtype=np.int64)),
                t.column("pii_redactions"),
                pc.if_else(t.column("val"), "val", "train"),
            ],
            schema=SCHEMA,
        ), kept

    def _piece_rows(self, ranks: ShardRanks, b: int, sec: np.ndarray, row: np.ndarray, parts: list[pa.Table],
                    index: list[np.ndarray], base: int) -> int:
        """Append the row ranges holding one bucket's ranks to `parts` (each section contributes a
        contiguous range) and their positions, counted from `base`, to `index`; return the next base."""
        where = np.empty(len(sec), dtype=np.int64)
        by_section = np.argsort(sec, kind="stable")  # one sort, not a mask per section: at HPLT scale
        ordered = sec[by_section]                    # a row group draws on ~as many sections as rows
        for lo, hi in runs_of(ordered):  # sections in ascending order, as np.unique gave them
            at = by_section[lo:hi]
            rows = row[at]
            r0, r1 = int(rows.min()), int(rows.max()) + 1
            parts.append(self.cursor(ranks, b, int(ordered[lo])).rows(r0, r1))
            where[at] = base + (rows - r0)
            base += r1 - r0
        index.append(where)
        return base


def runs_of(values: np.ndarray) -> list[tuple[int, int]]:
    """The [lo, hi) slices of equal neighbours in `values` (sorted, so each value is one slice)."""
    if not len(values):
        return []
    cuts = (np.flatnonzero(values[1:] != values[:-1]) + 1).tolist()
    return list(zip([0, *cuts], [*cuts, len(values)]))


def write_one_shard(asm: ShardAssembler, out_tmp: Path, name: str, start: int, stop: int, budget: int,
                    task: int | None = None) -> tuple[ShardFile, str | None]:
    """Shard `name` (relative to OUT) from the set's ranks [start, stop), via a partial file and a rename; with
    --annotations its annotation file too, whose sha256 is returned with the shard."""
    final = out_tmp / name
    final.parent.mkdir(exist_ok=True)
    partial = final.with_name(f".{final.name}.partial")
    ranks = asm.ranks(start, stop)
    groups = row_group_bounds(ranks.text_bytes.tolist(), budget)

    def tables():
        for k, (a, b) in enumerate(groups):
            if k == 1:
                fault_point("write-mid-shard", task)  # a row group is on disk, the footer is not
            yield asm.table(ranks, start, a, b)

    content = asm.cfg.content
    kept = (AnnotationWriter(out_tmp / annotation_name(name), schema_of(content.annotations, content.corpus))
            if content.annotations else None)

    def contract_tables():
        for shard_table, annotations in tables():
            if kept is not None:
                kept.write(annotations)
            yield shard_table

    shard = write_shard_file(partial, contract_tables())
    annotations_sha256 = kept.close()[2] if kept is not None else None  # before the rename: a shard in place has them
    os.replace(partial, final)
    return replace(shard, name=name), annotations_sha256


def _finished_before(run: RunDir, task: int, out_tmp: Path, made: Made) -> dict[int, WrittenShard]:
    """Shards a stopped attempt of this task already wrote and that still match their record (a record that is not
    this run's, or is damaged, keeps none: the task starts over)."""
    progress = read_record(run.write_progress(task), WriteProgress, made)
    if isinstance(progress, Problem):
        return {}
    kept = {}
    for s in progress.shards:
        if file_matches(out_tmp / s.name, s.stamp, s.sha256) is not None or annotations_differ(out_tmp, s):
            break
        kept[s.index] = s
    return kept


def planned_sections(run: RunDir, plan: Plan) -> pa.Table:
    """sections.arrow, once the plan's stamp vouches for it (else one refusal naming it: --resume redoes the plan)."""
    why = file_matches(run.sections, plan.sections_stamp, plan.sections_sha256)
    if why:
        raise DamagedRunFile(run.sections, f"{why}: not what the plan wrote", "--resume redoes the plan")
    return read_arrow(run.sections)


def run_write(run: RunDir, task: int) -> WriteReceipt:
    cfg = load_config(run)
    made = made_here(cfg.content.sha256())
    plan = load_record(run.plan_json, Plan, made, step=REDO_STEP)
    a, b = plan.write_tasks[task].shards
    if run.done_marker.exists():  # a write task rerun by hand after the swap: its shards are in OUT
        raise NotReplaceable(f"this run is done: its shards are in {cfg.execution.out}; a write task reruns only "
                             "in an unfinished run (a new run writes a new output)")
    out_tmp = staging_dir(Path(cfg.execution.out), str(run.root), "move it away, then --resume this run")
    earlier = _finished_before(run, task, out_tmp, made)
    sections = planned_sections(run, plan)
    readers = Readers(run)
    assemblers: dict[int, ShardAssembler] = {}
    try:
        shards = []
        for i in range(a, b):
            if i in earlier:
                shards.append(earlier[i])
                continue
            planned = plan.shard_list[i]
            k = planned.set
            if k not in assemblers:
                assemblers.clear()  # sets are contiguous: one bucket order in memory at a time
                assemblers[k] = ShardAssembler(cfg, plan.sets[k], sections, readers)
            asm = assemblers[k]
            start, stop = planned.rows
            fault_point("write-start", task)
            started = time.monotonic()
            sf, kept = write_one_shard(asm, out_tmp, planned.name, start, stop, cfg.content.row_group_bytes, task)
            shards.append(WrittenShard(**vars(sf), index=i, stamp=file_stamp(out_tmp / sf.name), annotations_sha256=kept))
            save_record(run.write_progress(task), made, WriteProgress(shards))
            log.info(shard_line(task, i - a + 1, b - a, sf.name, sf.rows, sf.bytes, time.monotonic() - started))
    finally:
        readers.close()
    receipt = WriteReceipt(task, shards)
    save_record(run.write_receipt(task), made, receipt)
    run.write_progress(task).unlink(missing_ok=True)
    return receipt
