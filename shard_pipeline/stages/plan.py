"""Plan: fix the global order and the exact row range of every output shard, without reading an id.

Partition counted every (task, run, bucket) section exactly, so bucket b starts at the rows of the buckets
before it and shard i's global rows [i*R, (i+1)*R) map to (bucket, offset) ranges; per split with
--split-layout dirs. The plan also proves read = kept + quarantined per input, and that none read fewer
documents than the counts index knows (run/short_inputs.py), before anything is written.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shard_pipeline.contract.replace import fresh_tmp_dir
from shard_pipeline.contract.rules import set_shard_name, shard_bounds, shard_sets
from shard_pipeline.files import file_sha256
from shard_pipeline.run.short_inputs import documents_read, refuse_short_inputs
from shard_pipeline.run.faults import fault_point
from shard_pipeline.run.receipts import (
    BucketPlan,
    Conservation,
    PartitionReceipt,
    Plan,
    PlannedShard,
    SetPlan,
    WriteTask,
    file_stamp,
)
from shard_pipeline.run.records import REDO_STEP, DamagedRunFile, load_record, made_here, save_record
from shard_pipeline.run.registry import file_matches
from shard_pipeline.run.runconfig import RunConfig, load_config
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.stages.spill import INDEX_SCHEMA, read_arrow, write_arrow


class PlanError(Exception):
    """The partition receipts do not add up: nothing is written."""


def assign_write_tasks(shard_rows: list[int], tasks: int) -> list[WriteTask]:
    """Contiguous runs of shards, as even as whole shards allow; extra tasks get none and exit 0."""
    n = len(shard_rows)
    out = []
    for t in range(tasks):
        a, b = t * n // tasks, (t + 1) * n // tasks
        out.append(WriteTask(t, (a, b), sum(shard_rows[a:b])))
    return out


def bucket_plans(sections: pa.Table, buckets: int, split: str | None = None) -> list[BucketPlan]:
    """Per-bucket rows, bytes, start and section range of one shard set; `sections` sorted by bucket.
    Vectorised: at HPLT scale there are tens of millions of sections."""
    b = sections.column("bucket").to_numpy()
    if len(b) and (int(b.max()) >= buckets or int(b.min()) < 0):
        raise PlanError(f"sections name buckets outside 0..{buckets - 1}")
    edges = np.searchsorted(b, np.arange(buckets + 1), side="left")
    all_rows, all_bytes = (sections.column(c).to_numpy().astype(np.int64) for c in ("rows", "text_bytes"))
    val_rows, val_bytes = (sections.column(c).to_numpy().astype(np.int64) for c in ("val_rows", "val_text_bytes"))
    per_row, per_byte = {None: (all_rows, all_bytes), "val": (val_rows, val_bytes),
                         "train": (all_rows - val_rows, all_bytes - val_bytes)}[split]
    rows = np.concatenate(([0], np.cumsum(per_row, dtype=np.int64)))
    tbytes = np.concatenate(([0], np.cumsum(per_byte, dtype=np.int64)))
    plans = []
    for k in range(buckets):
        lo, hi = int(edges[k]), int(edges[k + 1])
        plans.append(BucketPlan(int(rows[hi] - rows[lo]), int(tbytes[hi] - tbytes[lo]), int(rows[lo]), (lo, hi)))
    return plans


def check_conservation(cfg: RunConfig, receipts: list[PartitionReceipt]) -> Conservation:
    """Every input read by exactly one task, and read = kept + quarantined for each."""
    seen = {}
    problems = []
    for rc in receipts:
        for inp in rc.inputs:
            if inp.index in seen:
                problems.append(f"input {inp.source_id} read by two tasks")
            seen[inp.index] = inp
            q = sum(inp.quarantined.values()) + inp.cleaned
            if inp.read != inp.kept + q:
                problems.append(f"{inp.source_id}: read {inp.read} != kept {inp.kept} + quarantined {q}")
        kept = sum(i.kept for i in rc.inputs)
        if kept != rc.rows:
            problems.append(f"partition task {rc.task}: kept {kept} but spilled {rc.rows} rows")
    missing = [cfg.content.inputs[i].source_id for i in range(len(cfg.content.inputs)) if i not in seen]
    if missing:
        problems.append(f"inputs never read: {', '.join(missing)}")
    if problems:
        raise PlanError("; ".join(problems))
    quarantined: dict[str, int] = {}
    clean_reasons: dict[str, int] = {}
    for inp in seen.values():
        for k, v in inp.quarantined.items():
            quarantined[k] = quarantined.get(k, 0) + v
        for k, v in (inp.clean_reasons or {}).items():
            clean_reasons[k] = clean_reasons.get(k, 0) + v
    return Conservation(
        read=sum(i.read for i in seen.values()),
        kept=sum(i.kept for i in seen.values()),
        quarantined=dict(sorted(quarantined.items())),
        cleaned=sum(i.cleaned for i in seen.values()),
        clean_reasons=dict(sorted(clean_reasons.items())),
        ok=True,
    )


def filters_of(conservation: Conservation) -> dict[str, int]:
    """The manifest's filter counts: bad records by reason; --clean documents and matches per rule."""
    out = {f"bad_record:{k}": v for k, v in sorted(conservation.quarantined.items()) if v}
    if conservation.cleaned:
        out["clean:documents"] = conservation.cleaned
        out.update({f"clean:{k}": v for k, v in sorted(conservation.clean_reasons.items()) if v})
    return out


def byte_balanced_bounds(run: RunDir, cfg: RunConfig, buckets: list[BucketPlan], sections: pa.Table,
                         split: str | None = None) -> list[tuple[int, int]]:
    """Shard row ranges of one set, balanced by text bytes (balance.py's rule), found bucket by bucket: only
    the buckets that hold a cut are ordered, so the plan never holds more than one bucket's order."""
    from shard_pipeline.stages.balance import (
        cut_targets,
        cuts_from_raw,
        cuts_in_block,
        run_shard_count,
    )
    from shard_pipeline.stages.order import BucketOrder, Readers, sections_of

    c = cfg.content
    total_rows = sum(b.rows for b in buckets)
    total_bytes = sum(b.text_bytes for b in buckets)
    n = run_shard_count(total_bytes, total_rows, shard_bytes=c.shard_bytes, shard_rows=c.shard_rows, dp_ranks=c.dp_ranks)
    targets = cut_targets(total_bytes, n)
    raw = [1] * n  # a target of 0 falls in no bucket: its raw cut is 1
    readers = Readers(run)
    try:
        before, i = 0, 0
        while i < n and targets[i] <= 0:
            i += 1
        for b, bp in enumerate(buckets):
            here = []
            while i < n and targets[i] <= before + bp.text_bytes:
                here.append(i)
                i += 1
            if here:
                order = BucketOrder(b, sections_of(sections, *bp.sections), readers, cfg, split)
                for k, cut in zip(here, cuts_in_block(before, order.text_bytes, [targets[k] for k in here])):
                    raw[k] = bp.start + cut
            before += bp.text_bytes
    finally:
        readers.close()
    return cuts_from_raw(raw, total_rows)


def plan_sets(run: RunDir, cfg: RunConfig, sections: pa.Table) -> tuple[list[SetPlan], list[PlannedShard]]:
    """Every shard set of the layout and every shard of each, in manifest order."""
    sets, shards = [], []
    for k, (folder, split) in enumerate(shard_sets(cfg.content.split_layout)):
        buckets = bucket_plans(sections, cfg.execution.buckets, split)
        rows = sum(b.rows for b in buckets)
        sets.append(SetPlan(folder, split, rows, sum(b.text_bytes for b in buckets), buckets))
        if cfg.content.byte_balanced:
            bounds = byte_balanced_bounds(run, cfg, buckets, sections, split)
        else:
            bounds = shard_bounds(rows, cfg.content.shard_rows)
        shards += [PlannedShard(set_shard_name(folder, i, len(bounds)), k, i, len(bounds), tuple(r))
                   for i, r in enumerate(bounds)]
    return sets, shards


def partition_results(run: RunDir, cfg: RunConfig) -> tuple[list[PartitionReceipt], list[pa.Table]]:
    """Every partition task's receipt and index, each this run's and as its receipt recorded it (else one refusal
    naming the file: --resume redoes that task)."""
    made = made_here(cfg.content.sha256())
    receipts, indexes = [], []
    for t in range(cfg.execution.partition_tasks):
        rc = load_record(run.partition_receipt(t), PartitionReceipt, made, step=REDO_STEP)
        why = file_matches(run.spill_index(t), rc.index_stamp, rc.index_sha256)
        if why:
            raise DamagedRunFile(run.spill_index(t), f"{why}: not what partition task {t} wrote", REDO_STEP)
        index = read_arrow(run.spill_index(t))
        if sum(index.column("rows").to_pylist()) != rc.rows:
            raise PlanError(f"partition task {t}: index rows differ from its receipt")
        receipts.append(rc)
        indexes.append(index)
    return receipts, indexes


def run_plan(run: RunDir) -> Plan:
    fault_point("plan-start")
    cfg = load_config(run)
    ex = cfg.execution
    receipts, indexes = partition_results(run, cfg)
    conservation = check_conservation(cfg, receipts)
    refuse_short_inputs(cfg, run.root, documents_read(cfg, receipts), ex.release_changed)  # before OUT.tmp is made
    sections = pa.concat_tables(indexes) if indexes else INDEX_SCHEMA.empty_table()
    sections = sections.take(pc.sort_indices(sections, [("bucket", "ascending"), ("task", "ascending"), ("run", "ascending")]))
    sets, shards = plan_sets(run, cfg, sections)
    total = sum(s.rows for s in sets)
    if total != conservation.kept:
        raise PlanError(f"sections hold {total} rows but the inputs kept {conservation.kept}")
    writes = assign_write_tasks([b - a for a, b in (s.rows for s in shards)], ex.write_tasks)
    pii = sum(rc.pii_spans for rc in receipts)
    write_arrow(run.sections, sections)
    tmp = fresh_tmp_dir(Path(ex.out), owner=str(run.root), step="move it away, then --resume this run")
    plan = Plan(
        rows=total,
        text_bytes=sum(s.text_bytes for s in sets),
        shards=len(shards),
        sets=sets,
        shard_list=shards,
        write_tasks=writes,
        conservation=conservation,
        filters=filters_of(conservation),
        pii={"spans": pii} if pii else {},
        tmp_dir=str(tmp),
        sections_sha256=file_sha256(run.sections),
        sections_stamp=file_stamp(run.sections),
    )
    save_record(run.plan_json, made_here(cfg.content.sha256()), plan)
    return plan
