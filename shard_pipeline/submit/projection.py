"""Projected wall time and scratch I/O of a job layout, from per-core rates measured in bench/.

A stage's compute time is its largest unit's work at one core's rate (every array task running, no queue
wait); the bytes it moves over that time give the Lustre throughput it needs, else it takes bytes / throughput.
"""
from __future__ import annotations

from dataclasses import dataclass

from shard_pipeline.submit.layout import (
    HASH_BYTES_PER_CPU_S,
    JSON_PER_COMPRESSED,
    PARTITION_SECONDS_PER_INPUT,
    Layout,
)

# bench/RESULTS.md section 8 (measured 2026-12-02 at 5eec398): one idle core, steady state.
PARTITION_JSON_BYTES_PER_S = 130e6  # zstd + JSON + sha256 + spill, 0.56-0.60x the floor's 228 MB/s
WRITE_TEXT_BYTES_PER_S = 85e6  # order, assemble, Parquet zstd, fsync
LOADED_SLOWDOWN = 2.3  # the same rates as measured on the loaded test machine: the pessimistic bound
SPILL_PER_TEXT = 0.6  # lz4 spill bytes per text byte (measured 0.55-0.67)
PARQUET_PER_TEXT = 0.36  # output bytes per text byte (measured 0.34-0.38)
PLAN_SECONDS_PER_SECTION = 23 / 27e6  # bench/plan_scale.py: 27 M sections in 23 s
CLIENT_READ_BYTES_S = 10e9  # one node's Lustre read rate (assumed, not measured): bounds finalize


@dataclass(frozen=True)
class StageProjection:
    stage: str
    cores: int  # all array tasks together
    seconds: float  # compute-bound, idle cores
    read_bytes: int  # scratch (and input) bytes read
    write_bytes: int  # scratch bytes written

    @property
    def lustre_bytes_s(self) -> float:
        """Throughput the stage needs to stay compute-bound."""
        return (self.read_bytes + self.write_bytes) / max(self.seconds, 1e-9)

    def seconds_at(self, lustre_bytes_s: float | None) -> float:
        """Wall time when Lustre delivers `lustre_bytes_s` (None: unlimited)."""
        if not lustre_bytes_s:
            return self.seconds
        return max(self.seconds, (self.read_bytes + self.write_bytes) / lustre_bytes_s)


def project(lay: Layout) -> list[StageProjection]:
    """Partition, plan, write, finalize: cores, compute-bound seconds, bytes moved."""
    text = lay.text_bytes
    spill = int(text * SPILL_PER_TEXT)
    parquet = int(text * PARQUET_PER_TEXT)
    part_s = (lay.biggest_unit_bytes * JSON_PER_COMPRESSED / PARTITION_JSON_BYTES_PER_S
              + lay.most_unit_inputs * PARTITION_SECONDS_PER_INPUT)  # many small inputs cost by their number
    write_s = text / max(1, lay.write_tasks) / WRITE_TEXT_BYTES_PER_S
    finalize_cpus = lay.resources["finalize"].cpus
    hash_rate = min(finalize_cpus * HASH_BYTES_PER_CPU_S, CLIENT_READ_BYTES_S)
    return [
        StageProjection("partition", lay.partition_tasks, part_s, lay.compressed_bytes, spill),
        StageProjection("plan", 1, 5 + lay.sections * PLAN_SECONDS_PER_SECTION, lay.sections * 60, lay.sections * 56),
        StageProjection("write", lay.write_tasks, write_s, spill, parquet),
        StageProjection("finalize", finalize_cpus, 5 + parquet / hash_rate, parquet, 0),
    ]


def total_seconds(stages: list[StageProjection], lustre_bytes_s: float | None = None) -> float:
    """The four stages one after the other (the chain), Lustre-bound where it delivers less."""
    return sum(s.seconds_at(lustre_bytes_s) for s in stages)


def hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def landing_seconds(lays: dict[str, Layout], cpus: int = 1) -> dict[str, float]:
    """When each language of one run lands, compute-bound, from the chain's start: the slowest partition, all
    planning, its own write, and its own finalize on the cores of its last write's array task (land_if_written)."""
    per = {lang: {s.stage: s for s in project(lay)} for lang, lay in lays.items()}
    partition = max((p["partition"].seconds for p in per.values()), default=0.0)
    plan = sum(p["plan"].seconds for p in per.values())
    out = {}
    for lang, lay in lays.items():
        parquet = per[lang]["finalize"].read_bytes
        cores = max(1, min(cpus, lay.resources["finalize"].cpus))
        out[lang] = partition + plan + per[lang]["write"].seconds + 5 + parquet / min(cores * HASH_BYTES_PER_CPU_S,
                                                                                       CLIENT_READ_BYTES_S)
    return out
