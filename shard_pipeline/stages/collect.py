"""What finalize proves of OUT.tmp before it writes a manifest: every shard the plan promised is there, is the file
its writer's receipt names (size, sha256) and holds what that receipt says (rows and split counts, read from the
file); the receipts' text bytes add up, per shard set, to what partition counted (the plan); nothing else is there.
The manifest's entries are the files' own size, sha256, rows and splits.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from shard_pipeline.contract.extras import (
    BALANCE_NAME,
    CARD_NAME,
    CLEAN_POLICY_NAME,
    CLEANED_NAME,
    LEDGER_NAME,
)
from shard_pipeline.contract.annotations import FIELDS_NAME, annotation_name, annotations_differ
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract.replace import TMP_MARKER
from shard_pipeline.contract.rules import ShardFile
from shard_pipeline.contract.writer import ShardCounts, shard_counts
from shard_pipeline.files import file_sha256
from shard_pipeline.run.receipts import Plan, WriteReceipt, WrittenShard
from shard_pipeline.run.records import Problem, made_here, read_record
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import RunDir

# OUT's files besides the shards (contract/extras.py: named so that readers of OUT skip them).
EXTRA_NAMES = (CARD_NAME, LEDGER_NAME, CLEANED_NAME, CLEAN_POLICY_NAME, BALANCE_NAME)


class FinalizeError(Exception):
    """A receipt disagrees with the plan or with the file on disk: OUT is left as it was. `redo`: the write
    tasks whose receipts were removed for it, so that --resume redoes exactly these."""

    def __init__(self, message: str, redo: frozenset[int] = frozenset()) -> None:
        super().__init__(message)
        self.redo = redo


@dataclass(frozen=True)
class OnDisk:
    """A shard file as finalize finds it: its size and sha256, and what it holds (or why it cannot be read)."""

    bytes: int
    sha256: str
    counts: ShardCounts | None
    unreadable: str = ""


def inspect_files(directory: Path, names: list[str]) -> dict[str, OnDisk | None]:
    """Hash and count many shards at once: hashlib and Parquet's decoding release the GIL, so threads use every
    core the job has (HPLT scale: ~10 TB re-read; one stream would take hours). Each file is counted from the
    page cache right after it is hashed."""
    from concurrent.futures import ThreadPoolExecutor

    def one(name: str) -> OnDisk | None:
        path = directory / name
        if not path.is_file():
            return None
        size, sha = path.stat().st_size, file_sha256(path)
        try:
            return OnDisk(size, sha, shard_counts(path))
        except Exception as exc:  # a file that is not the Parquet it was: named, never a traceback
            return OnDisk(size, sha, None, f"{type(exc).__name__}: {exc}")

    workers = max(1, min(32, len(os.sched_getaffinity(0)) * 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(names, pool.map(one, names)))


def unexpected_files(tmp: Path, expected: set[str]) -> list[str]:
    """Paths under OUT.tmp (relative, folders included) that are not `expected` or a folder holding one:
    left by an attempt cut short."""
    allowed = expected | ({p.as_posix() for name in expected for p in Path(name).parents} - {"."})
    return sorted(rel for rel in (p.relative_to(tmp).as_posix() for p in tmp.rglob("*")) if rel not in allowed)


def written(run: RunDir, cfg: RunConfig, plan: Plan) -> tuple[dict[int, tuple[int, WrittenShard]], list[str]]:
    """Planned shard index -> (write task, its receipt's entry), and the write tasks whose receipt is not this run's."""
    made = made_here(cfg.content.sha256())
    by_index: dict[int, tuple[int, WrittenShard]] = {}
    problems = []
    for wt in plan.write_tasks:
        rc = read_record(run.write_receipt(wt.task), WriteReceipt, made)
        if isinstance(rc, Problem):
            problems.append(f"write task {wt.task} left no receipt ({rc.path})" if not rc.path.exists()
                            else f"write task {wt.task}: {rc.reason}")
            continue
        by_index.update({s.index: (wt.task, s) for s in rc.shards})
    return by_index, problems


def collect_shards(run: RunDir, cfg: RunConfig, plan: Plan) -> list[ShardFile]:
    """Shard entries in manifest order, each read from its file (size, sha256, rows, splits) and checked against its
    receipt and the plan; a write task whose receipt disagrees loses it, so --resume redoes it."""
    by_index, problems = written(run, cfg, plan)
    tmp = Path(plan.tmp_dir)
    planned = plan.shard_list
    disk = inspect_files(tmp, [p.name for p in planned])
    shards, damaged = [], set()
    for i, p in enumerate(planned):
        if i not in by_index:
            problems.append(f"{p.name}: no receipt")
            continue
        task, s = by_index[i]
        start, stop = p.rows
        if s.name != p.name or s.rows != stop - start:
            problems.append(f"{p.name}: receipt says {s.name} with {s.rows} rows, the plan {stop - start}")
        why = _disagrees(tmp / p.name, s, disk[p.name], run.write_receipt(task)) or (
            annotations_differ(tmp, s) if cfg.content.annotations else None)
        if why:
            problems.append(why)
            damaged.add(task)
            continue
        f = disk[p.name]
        shards.append(ShardFile(p.name, f.counts.rows, f.bytes, f.sha256, s.text_bytes, f.counts.train, f.counts.val))
    for why, tasks in text_bytes_disagree(plan, by_index):
        problems.append(why)
        damaged |= tasks
    kept = {annotation_name(p.name) for p in planned} | {FIELDS_NAME} if cfg.content.annotations else set()
    stray = unexpected_files(tmp, {p.name for p in planned} | {MANIFEST_NAME, TMP_MARKER, *EXTRA_NAMES} | kept)
    if stray:
        problems.append(f"{tmp}: unexpected files {', '.join(stray)} (not this run's: move them out of it)")
    if problems:
        for task in sorted(damaged):  # so that --resume redoes exactly these writers
            run.write_receipt(task).unlink(missing_ok=True)
        raise FinalizeError("; ".join(problems) + ("; run --resume to rewrite them" if damaged else ""), frozenset(damaged))
    return shards


def _disagrees(path: Path, s: WrittenShard, f: OnDisk | None, receipt: Path) -> str | None:
    """Why the shard at `path` is not what its receipt `s` says: missing, other bytes, unreadable, or other counts."""
    if f is None:
        return f"{path}: missing"
    if f.bytes != s.bytes or f.sha256 != s.sha256:
        return f"{path}: bytes or sha256 differ from its receipt"
    if f.counts is None:
        return f"{path}: not a readable shard ({f.unreadable})"
    said = ShardCounts(s.rows, s.train, s.val)
    if f.counts != said:
        return f"{receipt} says {s.name} holds {_counts(said)}, the file holds {_counts(f.counts)}"
    return None


def _counts(c: ShardCounts) -> str:
    return f"{c.rows} rows ({c.train} train, {c.val} val)"


def text_bytes_disagree(plan: Plan, by_index: dict[int, tuple[int, WrittenShard]]) -> list[tuple[str, set[int]]]:
    """Per shard set whose write receipts' text bytes do not add up to the partition's count of it (the plan): why,
    and the write tasks of that set (which receipt is wrong cannot be told). Counting them from the files would
    decompress every text; `--verify OUT` does, shard by shard."""
    out = []
    for k, planned in enumerate(plan.sets):
        mine = [by_index[i] for i, p in enumerate(plan.shard_list) if p.set == k and i in by_index]
        said = sum(s.text_bytes for _, s in mine)
        if said != planned.text_bytes and len(mine) == sum(1 for p in plan.shard_list if p.set == k):
            out.append((f"the write receipts of {planned.folder or 'OUT'}/ say its shards hold {said} text bytes, "
                        f"partition counted {planned.text_bytes}", {task for task, _ in mine}))
    return out
