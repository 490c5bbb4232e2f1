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
    """The dry-run: each language's scope and projection, the table of languages when there are several (it only
    adds rows), and the run's one chain of jobs, which every language shares."""
    lines = languages_table(args, ms, executor, settings) if len(ms.langs) > 1 else []
    lines += [line for lang in ms.langs for line in scope_lines(args, lang, ms.scopes[lang])]
    lines += chain_lines(args, ms, executor, settings, rundir)
    text = "\n".join(lines)
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


def scope_lines(args, lang: str, sc) -> list[str]:
    """One language's inputs, documents, output shards, buckets and projection."""
    lay, shards, res = sc.lay, sc.shards, sc.lay.resources
    return [
        f"hplt-shard {lang}  corpus {args.corpus}/{sc.subset}  wds {args.wds or 'all'}"
        + (f"  sources {args.sources}" if args.sources else ""),
        f"input shards     {len(shards):,}  ({human_bytes(lay.compressed_bytes)} compressed, ~{human_bytes(lay.est_json_bytes)} JSON)",
        f"documents        ~{lay.est_docs:,}  ({lay.docs_known:,} known exactly, from the counts index or a "
        f"shard read to its end; {lay.inputs_unknown} of {plural(len(shards), 'shard')} estimated from bytes)",
        f"output shards    ~{lay.est_shards:,} of {args.shard_rows:,} rows (val {args.val_permille}/1000)"
        + ("; split layout dirs: train/ and validation/, one shard set each" if args.split_layout == "dirs" else ""),
        f"id buckets       {lay.buckets:,}",
        f"sorted runs      ~{lay.sorted_runs:,} (text / spill budget {human_bytes(lay.spill_bytes)}), ~{lay.sections:,} "
        f"sections: plan mem {res['plan'].mem}, writer mem {share_of_mem(res['write'].mem, res['write'].cpus)} (more partition memory means fewer runs)",
        *projection_lines(lay),
    ]


def chain_resources_of(ms, settings) -> tuple[dict[str, int], dict[str, StageResources]]:
    """The units of each stage and what each stage's job asks, as the submission queues them
    (run/unit_table.py table_of, layout.shared_resources over each language's unit resources)."""
    from shard_pipeline.run.registry import STAGE_NAMES
    from shard_pipeline.run.runconfig import GROUPED_STAGES
    from shard_pipeline.submit.layout import shared_resources, unit_resources

    lays = [ms.scopes[l].lay for l in ms.langs]
    units = {"partition": sum(x.partition_tasks for x in lays), "plan": len(lays),
             "write": sum(x.write_tasks for x in lays), "finalize": len(lays)}
    per = {s: max(1, min(settings.cpus_per_task, units[s])) for s in GROUPED_STAGES}
    res = {s: shared_resources([(unit_resources(x.resources)[s], 1) for x in lays], per.get(s), len(lays),
                               bool(settings.time_limit)) for s in STAGE_NAMES}
    return units, res


def chain_lines(args, ms, executor: str, settings, rundir: Path | None) -> list[str]:
    """The run's one chain: every stage's job, what it asks, what is queued at once."""
    from shard_pipeline.run.runconfig import GROUPED_STAGES
    from shard_pipeline.run.unit_table import group_count
    from shard_pipeline.submit.layout import array_throttle

    units, res = chain_resources_of(ms, settings)
    groups = {s: group_count(units[s], res[s].cpus) for s in GROUPED_STAGES}
    throttle = array_throttle(groups["partition"], groups["write"], settings.max_tasks)
    single = "task " if len(ms.langs) == 1 else "job  "
    cpus = settings.cpus_per_task
    lines = [
        f"executor         {executor}",
        f"job layout ({cpus} core{'s' if cpus > 1 else ''} per partition/write array task, one task per core"
        + ("; one chain for all languages, plan and finalize take them in turn" if len(ms.langs) > 1 else "") + "):",
        _grouped("partition", units["partition"], groups["partition"], res["partition"]),
        f"  plan       {1:>6} {single}  mem {res['plan'].mem:>5}  time {res['plan'].time}",
        _grouped("write", units["write"], groups["write"], res["write"]),
        f"  finalize   {1:>6} {single}  mem {res['finalize'].mem:>5}  time {res['finalize'].time}  cpus {res['finalize'].cpus}",
        f"  queued at once: {plural(groups['partition'] + groups['write'] + 2, 'array task')} (MAX_TASKS "
        f"{settings.max_tasks}), {units['partition'] + units['write']} partition/write cores; array throttle %{throttle}",
    ]
    if len(ms.langs) > 1:
        lines += several_lines(ms, executor, settings)
    if executor == "slurm" and rundir is not None:
        from shard_pipeline.submit.executors.slurm import job_lang, job_names, watch_command

        tag = job_lang(ms.langs)
        lines.append(f"job names        {' '.join(job_names(rundir, tag).values())} (partition, plan, write, "
                     f"finalize; run dir {rundir}); watch: {watch_command(rundir, tag)}")
    return lines


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


def languages_table(args, ms, executor: str, settings) -> list[str]:
    """A row per language with its projected landing, and the totals."""
    from shard_pipeline.submit.projection import landing_seconds

    langs = ms.langs
    sc0 = ms.scopes[langs[0]]
    head = (f"hplt-shard {plural(len(langs), 'language')}  corpus {args.corpus}/{sc0.subset}  wds {args.wds or 'all'}"
            + (f"  sources {args.sources}" if args.sources else "") + f"  executor {executor}")
    cols = f"{'language':<14}{'inputs':>8}{'compressed':>12}{'docs known':>14}{'docs est.':>14}{'shards':>8}" \
           f"{'part.':>7}{'write':>7}{'alone':>7}{'lands':>10}"
    lands = landing_seconds({l: ms.scopes[l].lay for l in langs}, settings.cpus_per_task)
    rows = {l: (len(ms.scopes[l].shards), lay.compressed_bytes, lay.docs_known, lay.est_docs, lay.est_shards,
                lay.partition_tasks, lay.write_tasks, ms.alone[l].partition_groups + ms.alone[l].write_groups + 2)
            for l in langs for lay in [ms.scopes[l].lay]}  # alone: array tasks, what a queue slot counts
    lines = [head, cols, *(_row(l, *r) + f"{hms(lands[l]):>10}" for l, r in rows.items())]
    lines.append(_row("total", *(sum(column) for column in zip(*rows.values()))))
    lines.append("(docs known: from the counts index or a shard read to its end; shards: output shards of "
                 f"{args.shard_rows:,} rows; part./write: this run's tasks; alone: what a run of that language alone "
                 "would queue; lands: projected time to its swap, every array task running at once, bench/RESULTS.md rates)")
    return lines


def _row(name: str, inputs: int, compressed: int, known: int, est: int, shards: int, p: int, w: int, alone: int) -> str:
    return (f"{name:<14}{inputs:>8,}{human_bytes(compressed):>12}{known:>14,}{est:>14,}{shards:>8,}{p:>7}{w:>7}"
            f"{alone:>7}")


def several_lines(ms, executor: str, settings) -> list[str]:
    """What the shared chain saves over separate runs, and when the languages land."""
    from shard_pipeline.submit.projection import landing_seconds

    langs, lays = ms.langs, [ms.scopes[l].lay for l in ms.langs]
    alone = sum(ms.alone[l].partition_groups + ms.alone[l].write_groups + 2 for l in langs)
    lands = landing_seconds({l: ms.scopes[l].lay for l in langs}, settings.cpus_per_task)
    return [
        f"  budget {ms.budget}: tasks shared in proportion to compressed bytes, at least one partition and one write "
        "task per language; each language lands when its last write unit ends",
        f"  separate runs would queue {alone} in {4 * len(langs)} sbatch arrays"
        + (f", more than the budget {ms.budget}: at least {-(-alone // max(1, ms.budget))} waves"
           if executor == "slurm" and alone > ms.budget else ""),
        f"projected wall   {hms(max(lands.values()))} to the last landing with {settings.cpus_per_task} core(s) per "
        f"array task, first landing {hms(min(lands.values()))} (no queue wait; docs/DESIGN.md, Many languages)",
        f"read volume      {human_bytes(sum(x.compressed_bytes for x in lays))} input + "
        f"~{human_bytes(sum(x.est_json_bytes for x in lays) // 2)} intermediate",
    ]


def annotations_line(spec: str, per_doc: float, docs: int) -> str:
    """The extra volume --annotations adds: in the spill as carried, and (less, compressed) in OUT/__annotations/."""
    return (f"annotations      {spec}: ~{human_bytes(int(per_doc))} per document from the first records, "
            f"~{human_bytes(int(per_doc * docs))} more spill (as JSON) and up to that in OUT/__annotations/hplt/ (Parquet)")
