"""The dry-run of a multi-language run: a row per language, totals, and what separate runs would queue."""
from __future__ import annotations

from shard_pipeline.run.group import group_count
from shard_pipeline.submit.layout import group_resources, unit_resources
from shard_pipeline.units import human_bytes, parse_mem, plural


def describe_multi(args, ms, executor: str, settings) -> str:
    from shard_pipeline.run.multi import SINGLE_JOB_STAGES

    langs = ms.langs
    sc0 = ms.scopes[langs[0]]
    head = (f"hplt-shard {plural(len(langs), 'language')}  corpus {args.corpus}/{sc0.subset}  wds {args.wds or 'all'}"
            + (f"  sources {args.sources}" if args.sources else "") + f"  executor {executor}")
    cols = f"{'language':<14}{'inputs':>8}{'compressed':>12}{'docs known':>14}{'docs est.':>14}{'shards':>8}" \
           f"{'part.':>7}{'write':>7}{'alone':>7}"
    lines = [head, cols]
    tot = dict(inputs=0, bytes=0, known=0, est=0, shards=0, p=0, w=0, alone=0)
    for l in langs:
        lay, alone = ms.scopes[l].lay, ms.alone[l]
        queued_alone = alone.partition_groups + alone.write_groups + 2  # array tasks: what a queue slot counts
        lines.append(f"{l:<14}{len(ms.scopes[l].shards):>8,}{human_bytes(lay.compressed_bytes):>12}{lay.docs_known:>14,}"
                     f"{lay.est_docs:>14,}{lay.est_shards:>8,}{lay.partition_tasks:>7}{lay.write_tasks:>7}{queued_alone:>7}")
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
        f"{args.shard_rows:,} rows; part./write: this run's tasks; alone: what a run of that language alone would queue)",
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
        f"read volume      {human_bytes(tot['bytes'])} input + ~{human_bytes(sum(x.est_json_bytes for x in lays) // 2)} intermediate",
    ]
    return "\n".join(lines)

