"""The dry-run report: what a submission would read, queue and write, before anything happens."""
from __future__ import annotations

from pathlib import Path

from shard_pipeline.run.runconfig import StageResources
from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.submit.projection import (
    LOADED_SLOWDOWN,
    hms,
    project,
    total_seconds,
)
from shard_pipeline.units import human_bytes, plural, share_of_mem


def describe(args, subset, shards, lay: layout_mod.Layout, executor: str, settings, rundir: Path | None = None) -> str:
    res = lay.resources
    lines = [
        f"hplt-shard {args.lang}  corpus {args.corpus}/{subset}  wds {args.wds or 'all'}"
        + (f"  sources {args.sources}" if args.sources else ""),
        f"input shards     {len(shards):,}  ({human_bytes(lay.compressed_bytes)} compressed, ~{human_bytes(lay.est_json_bytes)} JSON)",
        f"documents        ~{lay.est_docs:,}  ({lay.docs_known:,} known exactly, from the counts index or a "
        f"shard read to its end; {lay.inputs_unknown} of {plural(len(shards), 'shard')} estimated from bytes)",
        f"output shards    ~{lay.est_shards:,} of {args.shard_rows:,} rows (val {args.val_permille}/1000)"
        + ("; split layout dirs: train/ and validation/, one shard set each" if args.split_layout == "dirs" else ""),
        f"executor         {executor}",
        f"job layout ({lay.cpus} core{'s' if lay.cpus > 1 else ''} per partition/write array task, one task per core):",
        _grouped("partition", lay.partition_tasks, lay.partition_groups, res["partition"]),
        f"  plan       {1:>6} task   mem {res['plan'].mem:>5}  time {res['plan'].time}",
        _grouped("write", lay.write_tasks, lay.write_groups, res["write"]),
        f"  finalize   {1:>6} task   mem {res['finalize'].mem:>5}  time {res['finalize'].time}  cpus {res['finalize'].cpus}",
        f"  queued at once: {plural(lay.partition_groups + lay.write_groups + 2, 'array task')} (MAX_TASKS {settings.max_tasks}), "
        f"{lay.partition_tasks + lay.write_tasks} partition/write cores; array throttle %{lay.throttle}",
        f"id buckets       {lay.buckets:,}",
        f"sorted runs      ~{lay.sorted_runs:,} (text / spill budget {human_bytes(lay.spill_bytes)}), ~{lay.sections:,} "
        f"sections: plan mem {res['plan'].mem}, writer mem {share_of_mem(res['write'].mem, res['write'].cpus)} (more partition memory means fewer runs)",
    ]
    if executor == "slurm" and rundir is not None:
        from shard_pipeline.submit.executors.slurm import job_names, watch_command

        lines.append(f"job names        {' '.join(job_names(rundir, args.lang).values())} (partition, plan, write, "
                     f"finalize; run dir {rundir}); watch: {watch_command(rundir, args.lang)}")
    return "\n".join(lines + projection_lines(lay))


def _grouped(stage: str, tasks: int, groups: int, res: StageResources) -> str:
    if res.cpus == 1:
        return f"  {stage:<9}  {tasks:>6} {'task ' if tasks == 1 else 'tasks'}  mem {res.mem:>5}  time {res.time}"
    return (f"  {stage:<9}  {tasks:>6} tasks in {plural(groups, 'array task')} of {res.cpus} cores  mem {res.mem} "
            f"per array task ({res.cpus} x {share_of_mem(res.mem, res.cpus)})  time {res.time}")


def projection_lines(lay: layout_mod.Layout) -> list[str]:
    """Projected wall time (idle cores, every array task running) and what it asks of scratch."""
    stages = project(lay)
    lines = ["projection (bench/RESULTS.md rates per idle core; no queue wait):"]
    for s in stages:
        lines.append(f"  {s.stage:<9}  {s.cores:>6} cores  {hms(s.seconds):>10}  reads {human_bytes(s.read_bytes):>9}  "
                     f"writes {human_bytes(s.write_bytes):>9}  needs {human_bytes(s.lustre_bytes_s)}/s")
    lines.append(f"  whole run  {hms(total_seconds(stages))} compute-bound (about {LOADED_SLOWDOWN}x that at the rates measured "
                 f"under load); scratch read {human_bytes(sum(s.read_bytes for s in stages))}, "
                 f"written {human_bytes(sum(s.write_bytes for s in stages))}")
    return lines
