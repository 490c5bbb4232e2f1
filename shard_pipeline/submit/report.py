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


def describe(args, ms, executor: str, settings, rundir: Path | None) -> str:
    """The dry-run: one language's scope and projection, or a row per language of a run of several."""
    if len(ms.langs) > 1:
        text = describe_languages(args, ms, executor, settings)
    else:
        (lang,) = ms.langs
        sc = ms.scopes[lang]
        text = describe_one(args, sc.subset, sc.shards, sc.lay, executor, settings, rundir)
    if args.annotations is not None:
        scopes = [ms.scopes[l] for l in ms.langs]
        docs = sum(sc.lay.est_docs for sc in scopes)
        total = sum(sc.annotation_bytes * sc.lay.est_docs for sc in scopes)
        text += "\n" + annotations_line(args.annotations, total / docs if docs else 0.0, docs)
    return text + ("\n" + bulk_line(rundir, [ms.scopes[l].lay for l in ms.langs]) if rundir is not None else "")


def bulk_line(rundir: Path, lays: list[layout_mod.Layout]) -> str:
    """Where the run's bulk goes and how much: the partition spill, in the run directory until the run is done."""
    spill = sum(s.write_bytes for lay in lays for s in project(lay) if s.stage == "partition")
    return (f"run dir          {rundir}: the partition spill there peaks at ~{human_bytes(spill)}; a done run "
            "removes it (--keep-spill keeps it)")


def describe_one(args, subset, shards, lay: layout_mod.Layout, executor: str, settings, rundir: Path | None = None) -> str:
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


def describe_languages(args, ms, executor: str, settings) -> str:
    """Several languages: a row per language with its projected landing, totals, and what separate runs would queue."""
    from shard_pipeline.run.unit_table import group_count
    from shard_pipeline.run.unit_table import SINGLE_JOB_STAGES
    from shard_pipeline.submit.layout import group_resources, unit_resources
    from shard_pipeline.submit.projection import landing_seconds
    from shard_pipeline.units import parse_mem

    langs = ms.langs
    sc0 = ms.scopes[langs[0]]
    head = (f"hplt-shard {plural(len(langs), 'language')}  corpus {args.corpus}/{sc0.subset}  wds {args.wds or 'all'}"
            + (f"  sources {args.sources}" if args.sources else "") + f"  executor {executor}")
    cols = f"{'language':<14}{'inputs':>8}{'compressed':>12}{'docs known':>14}{'docs est.':>14}{'shards':>8}" \
           f"{'part.':>7}{'write':>7}{'alone':>7}{'lands':>10}"
    lines = [head, cols]
    tot = dict(inputs=0, bytes=0, known=0, est=0, shards=0, p=0, w=0, alone=0)
    lands = landing_seconds({l: ms.scopes[l].lay for l in langs}, settings.cpus_per_task)
    for l in langs:
        lay, alone = ms.scopes[l].lay, ms.alone[l]
        queued_alone = alone.partition_groups + alone.write_groups + 2  # array tasks: what a queue slot counts
        lines.append(f"{l:<14}{len(ms.scopes[l].shards):>8,}{human_bytes(lay.compressed_bytes):>12}{lay.docs_known:>14,}"
                     f"{lay.est_docs:>14,}{lay.est_shards:>8,}{lay.partition_tasks:>7}{lay.write_tasks:>7}{queued_alone:>7}"
                     f"{hms(lands[l]):>10}")
        for k, v in (("inputs", len(ms.scopes[l].shards)), ("bytes", lay.compressed_bytes), ("known", lay.docs_known),
                     ("est", lay.est_docs), ("shards", lay.est_shards), ("p", lay.partition_tasks),
                     ("w", lay.write_tasks), ("alone", queued_alone)):
            tot[k] += v
    lines.append(f"{'total':<14}{tot['inputs']:>8,}{human_bytes(tot['bytes']):>12}{tot['known']:>14,}{tot['est']:>14,}"
                 f"{tot['shards']:>8,}{tot['p']:>7}{tot['w']:>7}{tot['alone']:>7}")
    lays = [ms.scopes[l].lay for l in langs]
    cpus = settings.cpus_per_task
    arrays = {s: group_resources([unit_resources(x.resources)[s] for x in lays], max(1, min(cpus, tot[k])))
              for s, k in (("partition", "p"), ("write", "w"))}
    groups = {k: group_count(tot[k], arrays[s].cpus) for s, k in (("partition", "p"), ("write", "w"))}
    most = {stage: max((x.resources[stage] for x in lays), key=lambda r: parse_mem(r.mem)) for stage in lays[0].resources}
    queued = groups["p"] + groups["w"] + len(SINGLE_JOB_STAGES)
    budget = ms.budget
    lines += [
        "(docs known: from the counts index or a shard read to its end; shards: output shards of "
        f"{args.shard_rows:,} rows; part./write: this run's tasks; alone: what a run of that language alone would queue; "
        f"lands: projected time to its swap, every array task running at once, bench/RESULTS.md rates)",
        "job layout (one chain for all languages; plan and finalize take the languages in turn):",
        f"  partition  {tot['p']:>6} units in {groups['p']} array tasks of {arrays['partition'].cpus} cores  "
        f"mem {arrays['partition'].mem:>5}  time {arrays['partition'].time}",
        f"  plan       {1:>6} job    mem {most['plan'].mem:>5}",
        f"  write      {tot['w']:>6} units in {groups['w']} array tasks of {arrays['write'].cpus} cores  "
        f"mem {arrays['write'].mem:>5}  time {arrays['write'].time}",
        f"  finalize   {1:>6} job    mem {most['finalize'].mem:>5}  cpus {max(x.resources['finalize'].cpus for x in lays)}",
        f"  queued at once: {queued} in 4 sbatch arrays (budget {ms.budget}, MAX_TASKS {settings.max_tasks}); "
        f"tasks shared in proportion to compressed bytes, at least one partition and one write task per language; "
        f"each language lands when its last write unit ends",
        f"  separate runs would queue {tot['alone']} in {4 * len(langs)} sbatch arrays"
        + (f", more than the budget {budget}: at least {-(-tot['alone'] // max(1, budget))} waves"
           if executor == "slurm" and tot['alone'] > budget else ""),
        f"projected wall   {hms(max(lands.values()))} to the last landing with {cpus} core(s) per array task, "
        f"first landing {hms(min(lands.values()))} (no queue wait; docs/DESIGN.md, Many languages)",
        f"read volume      {human_bytes(tot['bytes'])} input + ~{human_bytes(sum(x.est_json_bytes for x in lays) // 2)} intermediate",
    ]
    return "\n".join(lines)


def annotations_line(spec: str, per_doc: float, docs: int) -> str:
    """The extra volume --annotations adds: in the spill as carried, and (less, compressed) in OUT/__annotations/."""
    return (f"annotations      {spec}: ~{human_bytes(int(per_doc))} per document from the first records, "
            f"~{human_bytes(int(per_doc * docs))} more spill (as JSON) and up to that in OUT/__annotations/hplt/ (Parquet)")
