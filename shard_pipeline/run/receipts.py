"""What each stage leaves in the run directory, as the bodies of its records (run/records.py): receipts, the plan,
the swap. A receipt vouches for the files it names by their stamps and sha256 (the done rule: run/registry.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shard_pipeline.contract.rules import ShardFile


@dataclass(frozen=True)
class Stamp:
    """Size, mtime and ctime of a finished file: an unchanged ctime vouches for its bytes."""

    bytes: int
    mtime_ns: int
    ctime_ns: int


def file_stamp(path: Path) -> Stamp:
    st = os.stat(path)
    return Stamp(st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Buckets:
    """buckets.json: the id boundaries fixed at submit (stages/buckets.py) and how they were chosen."""

    method: str
    boundaries: list[str]


@dataclass(frozen=True)
class PartitionTask:
    """tasks/partition-N.json: the inputs (indices into the config's) one partition task reads, packed at submit."""

    task: int
    inputs: list[int]


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
    cleaned: int = 0  # removed by the --clean policy (kept in quarantine/clean-*.parquet)
    clean_reasons: dict[str, int] | None = None  # per rule; one document may match several


@dataclass
class PartitionReceipt:
    """A finished partition task: its inputs' counts, and the spill and index files it vouches for."""

    task: int
    inputs: list[InputReceipt]
    rows: int
    text_bytes: int
    runs: int
    sections: int
    pii_spans: int
    spill_bytes: int
    spill_sha256: str
    spill_stamp: Stamp
    index_sha256: str
    index_stamp: Stamp
    quarantine_file: str | None = None


@dataclass(frozen=True)
class PartitionCheckpoint:
    """Where a partition task stood after its last whole input (stages/checkpoint.py): lengths to cut its files
    back to, and running totals. `inputs` holds only the last save's receipts."""

    format: str
    log_bytes: int
    inputs_done: int
    sections: int
    inputs: list[InputReceipt]
    read: int
    compressed_bytes: int
    spill_bytes: int
    runs: int
    pii_spans: int
    quarantine_bytes: int


@dataclass(frozen=True)
class BucketPlan:
    rows: int
    text_bytes: int
    start: int  # rank, in its shard set, of the bucket's first row
    sections: tuple[int, int]  # row range of its sections in sections.arrow


@dataclass(frozen=True)
class SetPlan:
    """One shard set: all rows (column layout) or one split's rows in their own folder (dirs layout)."""

    folder: str  # "" = OUT itself
    split: str | None  # the split its rows hold; None = every row
    rows: int
    text_bytes: int
    buckets: list[BucketPlan]


@dataclass(frozen=True)
class PlannedShard:
    name: str  # relative to OUT, e.g. shard-00000-of-00004.parquet or validation/shard-00000-of-00001.parquet
    set: int  # index into the plan's sets
    index: int  # within its set
    count: int  # shards in its set
    rows: tuple[int, int]  # ranks [start, stop) within its set


@dataclass(frozen=True)
class WriteTask:
    task: int
    shards: tuple[int, int]  # indices [a, b) into the plan's shard list
    rows: int


@dataclass(frozen=True)
class Conservation:
    """read = kept + quarantined (+ cleaned), over every input: what the plan proved."""

    read: int
    kept: int
    quarantined: dict[str, int]
    cleaned: int
    clean_reasons: dict[str, int]
    ok: bool


@dataclass(frozen=True)
class Plan:
    """plan.json: the global order's shard sets and shards, the write tasks' shares, and sections.arrow's stamp."""

    rows: int
    text_bytes: int
    shards: int
    sets: list[SetPlan]
    shard_list: list[PlannedShard]
    write_tasks: list[WriteTask]
    conservation: Conservation
    filters: dict[str, int]
    pii: dict[str, int]
    tmp_dir: str
    sections_sha256: str
    sections_stamp: Stamp


@dataclass(frozen=True)
class WrittenShard(ShardFile):
    """One shard a write task finished in OUT.tmp: which of the plan's shards it is, and its stamp."""

    index: int  # into the plan's shard list
    stamp: Stamp
    annotations_sha256: str | None = None  # --annotations: the sha256 of its annotation file (contract/annotations.py)


@dataclass(frozen=True)
class WriteReceipt:
    task: int
    shards: list[WrittenShard]


@dataclass(frozen=True)
class WriteProgress:
    """The shards a write task finished so far: a restarted attempt keeps those that still match."""

    shards: list[WrittenShard]


@dataclass(frozen=True)
class SwapReceipt:
    """What finalize recorded before the swap: the manifest it put in OUT.tmp, and what OUT held then."""

    manifest_sha256: str
    previous: dict[str, Any] | None


@dataclass(frozen=True)
class Validation:
    """validation.json: what finalize proved and recorded once the output was in place."""

    out: str
    conservation: Conservation
    inputs: list[InputReceipt]
    shards: int
    rows: int
    splits: dict[str, int]
    receipts_match_disk: bool
    counts_index_rows: int
    counts_index_replaced: list[str]
    warnings: list[str]
    counts_index_warning: str | None = None
