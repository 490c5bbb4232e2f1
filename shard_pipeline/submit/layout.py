"""Job layout: how many tasks per stage, which inputs each partition task reads, and what each asks sbatch for.

Pure functions of the input list and the limits, so `--dry-run` shows exactly what a real
submission would queue.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from shard_pipeline.run.runconfig import StageResources
from shard_pipeline.stages.balance import run_shard_count
from shard_pipeline.units import MIN_TIME_MINUTES, WallTime, parse_mem, scale_mem, share_of_mem

# HPLT v4 clean English: 18.15 TB compressed / 7.86 B documents.
COMPRESSED_BYTES_PER_DOC = 2309
JSON_PER_COMPRESSED = 5.5  # zstd level 3 on HPLT JSONL, measured on synthetic HPLT-shaped records
BUCKET_ROWS = 4_000_000  # a writer orders one bucket at a time: ~60 B/row of order arrays (docs/DESIGN.md)
MAX_BUCKETS = 200_000
# Even with fewer writers: the bucket straddling two writers' ranges is ordered by both (with 4, a quarter at most).
MIN_BUCKETS = 4
PARTITION_MB_S = 25.0  # compressed MB/s one partition task sustains, conservative (see bench/RESULTS.md)
# One input's fixed cost in a partition task: 12.6 ms on ext4 (bench/partition_many_inputs.py), x4 for Lustre.
PARTITION_SECONDS_PER_INPUT = 0.05
WRITE_MB_S = 40.0  # JSON-equivalent MB/s one writer sustains
TEXT_BYTES_PER_DOC = 3500  # HPLT v4 English: ~27.5 TB of text / 7.86 B documents; the head sample measures it
# Memory model of the stages after partition (bench/RESULTS.md 6, "Memory bounds"):
PROCESS_BYTES = 300 << 20  # interpreter, pyarrow, numpy
PLAN_BYTES_PER_SECTION = 213  # index columns, the sort permutation and the sorted copy: 27 M sections -> 5.0-5.4 GiB
HEADROOM = 1.25  # on the estimates: allocator slack, a byte-balanced plan's bucket order
PARQUET_PER_JSON = 1 / 6  # output bytes per input JSON byte (bench/RESULTS.md: Parquet ~0.35 x text)
HASH_BYTES_PER_CPU_S = 1e9  # sha256 of one core (SHA extensions: 1-2 GB/s)
FINALIZE_HASH_SECONDS = 900  # finalize gets the cores to re-hash the output in about this long
MAX_FINALIZE_CPUS = 16
ORDER_BYTES_PER_ROW = 60  # a writer's order arrays of one bucket
# One large document (bench/doc_memory.py, bench/RESULTS.md 6) adds ~2 x its JSON line + ~2 x its text to a
# partition task's peak RSS, and 4-10 x its text to a writer's (10 x from ~100 MB on).
DOC_PARTITION_PER_LINE_BYTE = 2.0
DOC_PARTITION_PER_TEXT_BYTE = 2.0
DOC_WRITE_PER_TEXT_BYTE = 10.0


@dataclass(frozen=True)
class Layout:
    partition_tasks: int
    write_tasks: int
    buckets: int
    packing: tuple[tuple[int, ...], ...]  # input indices per partition task
    est_docs: int
    docs_known: int
    inputs_unknown: int
    est_shards: int
    compressed_bytes: int
    est_json_bytes: int
    resources: dict[str, StageResources]  # stage -> what each of its array tasks asks sbatch for
    spill_bytes: int
    throttle: int
    sorted_runs: int = 0  # estimated, all partition tasks together
    sections: int = 0  # estimated index entries: what the plan holds and writers open
    cpus: int = 1  # units (partition/write tasks) each array task runs at once, one core each
    partition_groups: int = 0  # array tasks: ceil(tasks / cpus); these count against the job cap
    write_groups: int = 0
    biggest_unit_bytes: int = 0  # compressed input of the largest partition task
    most_unit_inputs: int = 0  # inputs of the partition task that has the most (each costs PARTITION_SECONDS_PER_INPUT)
    text_bytes: int = 0  # estimated text of the whole selection
    largest_text: int = 0  # the longest document text the head sample saw (UTF-8 bytes)
    doc_need: int = 0  # what a partition or write task needs to hold that one document (0: no large one seen)


def array_throttle(partition_tasks: int, write_tasks: int, cap: int) -> int:
    """How many partition/write array tasks may run at once (sbatch's `%N`): all of them, up to the run's
    cap. One definition: the dry-run prints it and the submission passes it on."""
    return max(1, min(partition_tasks + write_tasks, cap))


def minutes_to_slurm(minutes: float) -> str:
    """A task's time limit: whole minutes, never shorter than a given one may be (units.WallTime prints it)."""
    return str(WallTime.from_minutes(minutes, MIN_TIME_MINUTES))


def pack_by_bytes(sizes: Sequence[int], tasks: int) -> list[list[int]]:
    """Longest-processing-time packing: biggest input first onto the least-loaded task."""
    tasks = max(1, min(tasks, len(sizes))) if sizes else 1
    loads = [(0, t) for t in range(tasks)]
    packs: list[list[int]] = [[] for _ in range(tasks)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, t = min(loads)
        loads[t] = (load + sizes[i], t)
        packs[t].append(i)
    return [sorted(p) for p in packs]


def at_least(mem: str, need: int) -> str:
    """`mem` (a Slurm --mem value), or `need` bytes rounded up to whole GiB when `mem` is less."""
    return mem if parse_mem(mem) >= need else f"{-(-need // (1 << 30))}G"


@dataclass(frozen=True)
class StageMemory:
    """What the plan and a writer need, from the counts the partition will produce."""

    sorted_runs: int
    sections: int
    plan_bytes: int
    write_bytes: int
    partition_bytes: int = 0  # 0: the partition task fits in --mem by design (spill budget = mem / 8)


def doc_memory(largest_text: int, largest_line: int, spill_bytes: int) -> tuple[int, int]:
    """(partition, write) bytes a task needs to hold the largest document; (0, 0) when it fits in the spill budget
    (mem / 8 by default), which the design already leaves for documents in flight."""
    part_doc = DOC_PARTITION_PER_LINE_BYTE * largest_line + DOC_PARTITION_PER_TEXT_BYTE * largest_text
    write_doc = DOC_WRITE_PER_TEXT_BYTE * largest_text
    if max(part_doc, write_doc) <= spill_bytes:
        return 0, 0
    return int((PROCESS_BYTES + spill_bytes + part_doc) * HEADROOM), int((PROCESS_BYTES + write_doc) * HEADROOM)


def stage_memory(*, docs: int, text_bytes: int, spill_bytes: int, inputs: int, buckets: int,
                 row_group_bytes: int, text_per_doc: float, largest_text: int = 0,
                 largest_line: int = 0) -> StageMemory:
    """The sections and the plan's and a writer's memory: every sorted run is cut into up to one section per
    bucket, and a writer keeps one decoded batch per section of its bucket; the largest document adds its own."""
    from shard_pipeline.stages.spill import BATCH_ROWS

    runs = inputs + -(-text_bytes // max(1, spill_bytes))  # a run never spans two inputs: each ends a partial one
    docs_per_run = max(1, docs // max(1, runs))
    sections = runs * min(buckets, docs_per_run)
    per_bucket = sections // max(1, buckets)
    cursor = int(BATCH_ROWS * (text_per_doc + 400)) + 4096  # one decoded batch (all columns) + its reader
    plan = PROCESS_BYTES + PLAN_BYTES_PER_SECTION * sections
    write = PROCESS_BYTES + 4 * row_group_bytes + per_bucket * cursor + ORDER_BYTES_PER_ROW * (docs // max(1, buckets)) \
        + DOC_WRITE_PER_TEXT_BYTE * largest_text
    partition = doc_memory(largest_text, largest_line, spill_bytes)[0]
    return StageMemory(runs, sections, int(plan * HEADROOM), int(write * HEADROOM), partition)


def finalize_cpus(json_bytes: int) -> int:
    """Cores for finalize, whose re-hash of every output file runs a thread per core (~10 TB at v4 English)."""
    need = json_bytes * PARQUET_PER_JSON / (HASH_BYTES_PER_CPU_S * FINALIZE_HASH_SECONDS)
    return max(1, min(MAX_FINALIZE_CPUS, math.ceil(need)))


def sbatch_resources(*, worker_mem: str, need: StageMemory, partition_cpus: int, write_cpus: int,
                     partition_time: str, write_time: str, job_time: str, finalize_cores: int) -> dict[str, StageResources]:
    """What each stage's array task asks sbatch for: a grouped task asks its units' memory, and every stage gets
    at least its estimated `need`, whatever --mem says."""
    return {
        "partition": StageResources(scale_mem(at_least(worker_mem, need.partition_bytes), partition_cpus), partition_time,
                                    partition_cpus),
        "plan": StageResources(at_least(worker_mem, need.plan_bytes), job_time),
        "write": StageResources(scale_mem(at_least(worker_mem, need.write_bytes), write_cpus), write_time, write_cpus),
        "finalize": StageResources(worker_mem, job_time, finalize_cores),
    }


def unit_resources(resources: dict[str, StageResources]) -> dict[str, StageResources]:
    """What one unit of each stage needs (what a language's run dir keeps): a grouped stage's memory / C, one core."""
    from shard_pipeline.run.runconfig import GROUPED_STAGES

    return {s: StageResources(share_of_mem(r.mem, r.cpus), r.time, 1) if s in GROUPED_STAGES else r
            for s, r in resources.items()}


def stage_resources(table, cfgs: dict, stage: str, units: int, fixed_time: bool) -> StageResources:
    """What a stage's array task asks for when it may run any language's units (shared_resources)."""
    every = [(c.execution.resources[stage], c.execution.units_per_task(stage)) for c in cfgs.values()]
    return shared_resources(every, table.units_per_task(stage) if table.is_array(stage) else None, units, fixed_time)


def shared_resources(every: Sequence[tuple[StageResources, int]], cpus: int | None, units: int,
                     fixed_time: bool) -> StageResources:
    """What a stage's job asks when it may run any of these languages' units (`every`: a language's resources and
    the units they were sized for; `cpus`: C of an array stage, None for plan and finalize, which take their
    `units` languages in turn: two minutes more each, unless --time set it)."""
    from shard_pipeline.units import slurm_minutes

    longest = max((r.time for r, _ in every), key=slurm_minutes)
    if cpus is not None:  # C x the largest unit's memory
        return StageResources(scale_mem(max((share_of_mem(r.mem, k) for r, k in every), key=parse_mem), cpus), longest,
                              cpus)
    mem = max((r.mem for r, _ in every), key=parse_mem)
    if not fixed_time:
        longest = minutes_to_slurm(slurm_minutes(longest) + 2 * units)
    return StageResources(mem, longest, max(r.cpus for r, _ in every))


def time_is_fixed(record: dict) -> bool:
    """--time was given at submission or by a resume (run.json's "time_limit", "resources"): every job gets it."""
    return bool(record.get("time_limit") or (record.get("resources") or {}).get("time"))


def chain_resources(table, cfgs: dict, tasks: dict[str, list[int]], fixed_time: bool) -> dict[str, StageResources]:
    """What each stage's array task of the chain asks sbatch for (what slurm_limits checks, what is queued).
    `fixed_time`: --time was given (time_is_fixed), so every job gets it."""
    from shard_pipeline.run.registry import STAGE_NAMES

    return {stage: stage_resources(table, cfgs, stage, len(tasks[stage]), fixed_time)
            for stage in STAGE_NAMES if tasks.get(stage)}


def estimate_docs(sizes: Sequence[int | None], known: dict[int, int], compressed_per_doc: float | None = None) -> int:
    """Exact where known (counts index, or a shard the head sample read to its end), else from bytes."""
    per = compressed_per_doc or COMPRESSED_BYTES_PER_DOC
    return sum(known[i] if i in known else int((s or 0) / per) for i, s in enumerate(sizes))


def layout_resources(worker_mem: str, need: StageMemory, cpus: int, sizes: Sequence[int],
                     packing: Sequence[Sequence[int]], w: int, json_bytes: int, time_limit: str | None) -> dict[str, StageResources]:
    """What each stage's job asks: --mem at least, C cores where a stage has C units to run, and the time of
    the longest unit with half again as margin (or the run's fixed --time)."""
    p = len(packing)
    part_s = max((sum(sizes[i] for i in pk) / 1e6 / PARTITION_MB_S + len(pk) * PARTITION_SECONDS_PER_INPUT
                  for pk in packing), default=0)
    part_min = part_s / 60 * 1.5
    write_min = json_bytes / max(1, w) / 1e6 / WRITE_MB_S / 60 * 1.5
    return sbatch_resources(worker_mem=worker_mem, need=need, partition_cpus=max(1, min(cpus, p)),
                            write_cpus=max(1, min(cpus, w)),
                            partition_time=time_limit or minutes_to_slurm(part_min),
                            write_time=time_limit or minutes_to_slurm(write_min),
                            job_time=time_limit or minutes_to_slurm(30), finalize_cores=finalize_cpus(json_bytes))


def lay_out_jobs(
    sizes: Sequence[int | None],
    known_docs: dict[int, int],
    *,
    shard_rows: int,
    task_budget: int,
    shard_bytes: int | None = None,
    dp_ranks: Sequence[int] = (),
    worker_mem: str,
    time_limit: str | None = None,
    partition_tasks: int | None = None,
    write_tasks: int | None = None,
    buckets: int | None = None,
    spill_bytes: int | None = None,
    compressed_per_doc: float | None = None,
    text_per_doc: float | None = None,
    row_group_bytes: int = 64 << 20,
    cpus: int = 1,
    largest_text: int = 0,
    largest_line: int = 0,
) -> Layout:
    """Fit partition + plan + write + finalize into `task_budget` queued array tasks of `cpus` units each;
    `worker_mem` (--mem) is one unit's memory, the floor for every stage."""
    n = len(sizes)
    sizes_ = [s or 0 for s in sizes]
    est_docs = estimate_docs(sizes, known_docs, compressed_per_doc)
    per_doc = text_per_doc or TEXT_BYTES_PER_DOC
    est_shards = run_shard_count(int(est_docs * per_doc), est_docs, shard_bytes=shard_bytes, shard_rows=shard_rows,
                                 dp_ranks=dp_ranks)
    room = max(4, task_budget) - 2  # plan and finalize are one task each
    p = partition_tasks or max(1, min(n, room // 2 * cpus))
    w = write_tasks or max(1, min(est_shards, (room - -(-p // cpus)) * cpus))
    buckets = buckets or min(MAX_BUCKETS, max(MIN_BUCKETS, w, math.ceil(est_docs / BUCKET_ROWS)))
    packing = pack_by_bytes(sizes_, p) if n else [[]]
    p = len(packing)
    compressed = sum(sizes_)
    json_bytes = int(compressed * JSON_PER_COMPRESSED)
    biggest = max((sum(sizes_[i] for i in pk) for pk in packing), default=0)
    spill = spill_bytes or max(8 << 20, parse_mem(worker_mem) // 8)
    need = stage_memory(docs=est_docs, text_bytes=int(est_docs * per_doc), spill_bytes=spill, inputs=n,
                        buckets=buckets, row_group_bytes=row_group_bytes, text_per_doc=per_doc,
                        largest_text=largest_text, largest_line=largest_line)
    return Layout(
        partition_tasks=p, write_tasks=w, buckets=buckets, packing=tuple(tuple(pk) for pk in packing),
        est_docs=est_docs, docs_known=sum(known_docs.values()), inputs_unknown=n - len(known_docs),
        est_shards=est_shards, compressed_bytes=compressed, est_json_bytes=json_bytes,
        resources=layout_resources(worker_mem, need, cpus, sizes_, packing, w, json_bytes, time_limit),
        spill_bytes=spill, throttle=array_throttle(-(-p // cpus), -(-w // cpus), task_budget),
        sorted_runs=need.sorted_runs, sections=need.sections,
        cpus=cpus, partition_groups=-(-p // cpus), write_groups=-(-w // cpus),
        biggest_unit_bytes=biggest, most_unit_inputs=max((len(pk) for pk in packing), default=0),
        text_bytes=int(est_docs * per_doc), largest_text=largest_text,
        doc_need=max(doc_memory(largest_text, largest_line, spill)),
    )


def doc_memory_warning(lay: Layout, worker_mem: str, where: str) -> str | None:
    """One line when the largest document seen would not fit the requested --mem (None when it fits)."""
    from shard_pipeline.units import human_bytes

    if lay.doc_need <= parse_mem(worker_mem):
        return None
    fits = at_least(worker_mem, lay.doc_need)
    return (f"a single document of {human_bytes(lay.largest_text)} of text ({where}) needs about "
            f"{human_bytes(lay.doc_need)} in one partition or write task, more than --mem {worker_mem}: "
            f"--mem {fits} fits it (this run raises its partition and write tasks to what each needs)")
