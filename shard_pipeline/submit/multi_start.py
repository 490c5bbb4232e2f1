"""Start the units of a multi-language run: one Slurm chain (afterany), or the local process pool.

Every submission is recorded in RUNDIR/run.json and, translated to each language's own task
numbers, in RUNDIR/<LANG>/run.json, so `--status RUNDIR/<LANG>` and `--resume` work per language.
"""
from __future__ import annotations

import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shard_pipeline.errors import ExitCode, signal_exit
from shard_pipeline.run import multi
from shard_pipeline.run.claim import release
from shard_pipeline.run.registry import STAGE_NAMES as STAGES
from shard_pipeline.run.rundir import RunDir, read_json, write_json_atomic
from shard_pipeline.run.runconfig import StageResources
from shard_pipeline.run.runstate import resume_command
from shard_pipeline.run.taskcmd import task_argv
from shard_pipeline.submit.executors import local_task_env
from shard_pipeline.submit.layout import array_throttle, group_resources, minutes_to_slurm
from shard_pipeline.units import parse_mem, plural, share_of_mem, slurm_minutes


def stage_resources(m: multi.MultiRun, cfgs: dict, stage: str, units: int, fixed_time: bool) -> StageResources:
    """What a stage's array task asks for when it may run any language's units: C x the most one of them needs.

    Each language's run dir keeps one unit's resources (submit/multi.py unit_scope; a run dir made
    before C applied to several languages has C = 1, the same thing), so an array task of C units
    asks C x the largest unit memory of the stage, the longest time, C cores (layout.group_resources).
    plan and finalize run their languages in turn in one job: their time grows by a few minutes
    per language (HPLT v4 English plans in under a minute, docs/DESIGN.md), unless --time set it.
    """
    every = [(c.execution.resources[stage], c.execution.units_per_task(stage)) for c in cfgs.values()]
    if stage not in multi.SINGLE_JOB_STAGES:
        one = [StageResources(share_of_mem(r.mem, k), r.time, 1) for r, k in every]
        return group_resources(one, m.units_per_task(stage))
    mem = max((r.mem for r, _ in every), key=parse_mem)
    longest = max((r.time for r, _ in every), key=slurm_minutes)
    if not fixed_time:
        longest = minutes_to_slurm(slurm_minutes(longest) + 2 * units)
    return StageResources(mem, longest, max(r.cpus for r, _ in every))


def start_multi(m: multi.MultiRun, cfgs: dict, tasks: dict[str, list[int]], executor: str, jobs: int, settings,
                kind: str) -> int:
    for stage in multi.SINGLE_JOB_STAGES:
        multi.write_selection(m.root, stage, tasks.get(stage, []))
    if executor == "local":
        return run_local_multi(m, cfgs, tasks, jobs, kind)
    return submit_multi(m, cfgs, tasks, settings, kind)


def record_submission(m: multi.MultiRun, kind: str, tasks: dict[str, list[int]], jobs: list[dict]) -> None:
    """RUNDIR/run.json gets the chain; each language's run.json its chunks with offsets in its own task numbers."""
    now = time.time()
    rec = read_json(m.root / "run.json")
    rec["submissions"].append({"kind": kind, "submitted_at": now, "tasks": tasks, "jobs": jobs})
    write_json_atomic(m.root / "run.json", rec)
    for lang in m.langs:
        mine = {s: [m.locate(s, g)[1] for g in tasks.get(s, []) if m.locate(s, g)[0] == lang] for s in STAGES}
        if not any(mine.values()):
            continue
        translated = [{**{k: j[k] for k in ("stage", "job_id", "array", "tasks")},
                       "offset": j["offset"] - m.base(j["stage"], lang),
                       "log_dir": str(RunDir(m.root).unit_log_dir(j["stage"]) if m.units_per_task(j["stage"]) > 1
                                      else RunDir(m.root).log_dir(j["stage"]))}
                      for j in jobs if mine.get(j["stage"])]
        run = RunDir(m.lang_dir(lang))
        lrec = read_json(run.run_json)
        lrec["submissions"].append({"kind": f"multi-{kind}", "submitted_at": now, "tasks": mine, "jobs": translated,
                                    "multi_run": str(m.root)})
        write_json_atomic(run.run_json, lrec)


def chain_resources(m: multi.MultiRun, cfgs: dict, tasks: dict[str, list[int]]) -> dict[str, StageResources]:
    """What each stage's array task of the chain asks sbatch for (what slurm_limits checks, what is queued)."""
    fixed_time = bool(read_json(m.root / "run.json").get("time_limit"))  # --time at submission: every job gets it
    return {stage: stage_resources(m, cfgs, stage, len(tasks[stage]), fixed_time) for stage in STAGES if tasks.get(stage)}


def submit_multi(m: multi.MultiRun, cfgs: dict, tasks: dict[str, list[int]], settings, kind: str) -> int:
    from shard_pipeline.submit.executors.slurm import (
        SlurmSettings,
        StageJobs,
        max_array_size,
        submit_chain,
        watch_command,
    )

    python = next(iter(cfgs.values())).execution.python
    resources = chain_resources(m, cfgs, tasks)
    s = SlurmSettings(settings.worker_partition, settings.account, python, settings.module_loads, "mul")
    arrays = {stage: m.array_indices(stage, tasks[stage]) for stage in STAGES if tasks.get(stage)}
    throttle = array_throttle(len(arrays.get("partition", [])), len(arrays.get("write", [])), settings.max_tasks)
    stages = []
    for stage in STAGES:
        if not tasks.get(stage):
            continue
        single = stage in multi.SINGLE_JOB_STAGES
        stages.append(StageJobs(stage, tuple(arrays[stage]), resources[stage],
                                None if single else throttle, after="afterany"))
    sub = submit_chain(s, m.root, stages, max_size=max_array_size())
    record_submission(m, kind, tasks, sub.jobs)
    for j in sub.jobs:
        print(f"queued {j['stage']:<9} job {j['job_id']}  array {j['array']}")
    print(f"run dir: {m.root}  ({plural(len(cfgs), 'language')}; ./hplt-shard --status {m.root})")
    print(f"watch:   {watch_command(m.root, 'mul')}")
    print(f"done when every {m.root}/<LANG>/DONE exists; outputs appear at " + ", ".join(c.execution.out for c in list(cfgs.values())[:3])
          + (" ..." if len(cfgs) > 3 else ""))
    return 0


def run_group(python: str, stage: str, m: multi.MultiRun, index: int, units: list[int]) -> list[int]:
    """One array index's units at once, as its Slurm array task runs them (run/group.py); each unit's log
    is its language's `local_<task>.log`, as in a single run. Owned by local.WORKERS (Ctrl-C, SIGHUP)."""
    from shard_pipeline.run import group
    from shard_pipeline.submit.executors.local import WORKERS

    def log_of(g: int) -> Path:
        lang, t = m.locate(stage, g)
        return RunDir(m.lang_dir(lang)).local_log(stage, t)

    runs = group.run_units(lambda g: task_argv(stage, m.root, g, python=python), units, log_of, f"{stage} group {index}",
                           append=False, env=local_task_env(), owner=WORKERS)
    return [r.returncode for r in runs]


def run_unit(python: str, stage: str, root: Path, index: int, log: Path) -> int:
    """One job in its own process group, owned by this process (local.WORKERS: Ctrl-C, SIGHUP, SIGKILL)."""
    from shard_pipeline.submit.executors.local import WORKERS

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as f:
        return WORKERS.run(task_argv(stage, root, index, python=python), f, env=local_task_env())


def run_local_multi(m: multi.MultiRun, cfgs: dict, tasks: dict[str, list[int]], jobs: int, kind: str) -> int:
    """The stages in order; like afterany, a failed unit does not stop the others (its language's later units skip).

    Ctrl-C, SIGHUP and SIGTERM stop every unit as they stop a single-language local run."""
    from shard_pipeline.submit.executors.local import WORKERS, mark_interrupted, say, signal_words, stopped_by_signals

    record_submission(m, f"local-{kind}", tasks, [])
    for lang in cfgs:
        RunDir(m.lang_dir(lang)).interrupted_marker.unlink(missing_ok=True)
    WORKERS.reset()
    try:
        with stopped_by_signals():
            run_stages(m, tasks, jobs)
    except KeyboardInterrupt as exc:
        survivors = WORKERS.stop()
        if not survivors:
            for lang, cfg in cfgs.items():
                if not (m.lang_dir(lang) / "DONE").exists():
                    release(Path(cfg.execution.out), m.lang_dir(lang))
        signum = getattr(exc, "signum", signal.SIGINT)
        for lang in cfgs:
            if not (m.lang_dir(lang) / "DONE").exists():
                mark_interrupted(RunDir(m.lang_dir(lang)), signum, "")
        say(f"\nhplt-shard: {signal_words(signum)}: "
            + (f"tasks that did not end: pids {', '.join(map(str, survivors))}" if survivors
               else "every task process was stopped") + ".",
            f"hplt-shard: to continue: {resume_command(m.root, '--executor', 'local')}")
        return signal_exit(signum)
    return report_languages(m, cfgs)


def run_stages(m: multi.MultiRun, tasks: dict[str, list[int]], jobs: int) -> None:
    from shard_pipeline.submit.executors.local import WORKERS

    python = sys.executable
    for stage in STAGES:
        units = tasks.get(stage, [])
        if not units:
            continue
        if stage in multi.SINGLE_JOB_STAGES:
            rcs = [run_unit(python, stage, m.root, 0, RunDir(m.root).local_log(stage, 0))]
        else:  # array index i runs its C units at once, jobs // C indices at a time (as a single run)
            cpus = m.units_per_task(stage)
            groups = [(i, [g for g in units if g // cpus == i]) for i in m.array_indices(stage, units)]
            pool = ThreadPoolExecutor(max_workers=max(1, jobs // cpus))
            try:
                rcs = [rc for rs in pool.map(lambda iu: run_group(python, stage, m, *iu), groups) for rc in rs]
            except KeyboardInterrupt:  # end the units before the pool waits for the threads that wait on them
                WORKERS.stop()
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            pool.shutdown(wait=True)
        bad = sum(1 for rc in rcs if rc)
        print(f"{stage:<9} {plural(len(units), 'unit')}" + (f", {plural(bad, 'job')} failed" if bad else ""),
              file=sys.stderr, flush=True)


def report_languages(m: multi.MultiRun, cfgs: dict) -> int:
    """Per language: done, or failed with its claim released (its previous output untouched)."""
    from shard_pipeline.run import live

    failed = []
    for lang, cfg in cfgs.items():
        live.prune(m.lang_dir(lang))  # a unit killed (OOM killer, a fault) while the executor lived failed
        if (m.lang_dir(lang) / "DONE").exists():
            print(f"done: {lang}  output {cfg.execution.out}")
        else:
            release(Path(cfg.execution.out), m.lang_dir(lang))
            failed.append(lang)
    if failed:
        print(f"hplt-shard: {len(failed)} language(s) failed: {', '.join(failed)}; their previous outputs are untouched; "
              f"the others landed. See ./hplt-shard --status {m.root}, then ./hplt-shard --resume {m.root}",
              file=sys.stderr)
        return ExitCode.FAILED
    print(f"run dir: {m.root}")
    return ExitCode.OK
