"""The dry-run report: what a submission would read, queue and write, before anything happens."""
from __future__ import annotations

from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.units import human_bytes


def describe(args, subset, shards, lay: layout_mod.Layout, executor: str, settings) -> str:
    lines = [
        f"hplt-shard {args.lang}  corpus {args.corpus}/{subset}  wds {args.wds or 'all'}"
        + (f"  sources {args.sources}" if args.sources else ""),
        f"input shards     {len(shards):,}  ({human_bytes(lay.compressed_bytes)} compressed, ~{human_bytes(lay.est_json_bytes)} JSON)",
        f"documents        ~{lay.est_docs:,}  ({lay.docs_known:,} known exactly, from the counts index or a "
        f"shard read to its end; {lay.inputs_unknown} of {len(shards)} shards estimated from bytes)",
        f"output shards    ~{lay.est_shards:,} of {args.shard_rows:,} rows (val {args.val_permille}/1000)"
        + ("; split layout dirs: train/ and validation/, one shard set each" if args.split_layout == "dirs" else ""),
        f"executor         {executor}",
        "job layout:",
        f"  partition  {lay.partition_tasks:>6} tasks  mem {lay.partition_mem:>5}  time {lay.partition_time}",
        f"  plan       {1:>6} task   mem {lay.plan_mem:>5}  time {lay.job_time}",
        f"  write      {lay.write_tasks:>6} tasks  mem {lay.write_mem:>5}  time {lay.write_time}",
        f"  finalize   {1:>6} task   mem {lay.job_mem:>5}  time {lay.job_time}  cpus {lay.finalize_cpus}",
        f"  queued at once: {lay.partition_tasks + lay.write_tasks + 2} (MAX_TASKS {settings.max_tasks}); array throttle %{lay.throttle}",
        f"id buckets       {lay.buckets:,}",
        f"sorted runs      ~{lay.sorted_runs:,} (text / spill budget {human_bytes(lay.spill_bytes)}), ~{lay.sections:,} "
        f"sections: plan mem {lay.plan_mem}, writer mem {lay.write_mem} (more partition memory means fewer runs)",
        f"read volume      {human_bytes(lay.compressed_bytes)} input + ~{human_bytes(lay.est_json_bytes // 2)} intermediate",
        f"write volume     ~{human_bytes(lay.est_json_bytes // 2)} intermediate + ~{human_bytes(lay.est_json_bytes // 6)} Parquet",
    ]
    return "\n".join(lines)
