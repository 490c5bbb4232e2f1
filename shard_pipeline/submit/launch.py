"""Start a new run or resume one: the run directory, the claim on OUT, then the executor.

A run directory is written once, here, before any task runs; every stage reads its inputs from it.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline.contract.shard import check_replaceable
from shard_pipeline.errors import UsageError
from shard_pipeline.run.claim import claim, run_lock
from shard_pipeline.run.runconfig import Content, Execution, InputRef, RunConfig
from shard_pipeline.run.rundir import RUN_FORMAT, RunDir, read_json, write_json_atomic
from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.submit import scope
from shard_pipeline.submit.report import describe


def new_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Find the inputs, lay out the jobs, and (unless --dry-run) write the run dir and start it."""
    settings = scope.resolve_settings(args)
    executor = scope.choose_executor(args)
    sc = prepare(args, settings, executor)
    if args.dry_run:
        print(describe(args, sc.subset, sc.shards, sc.lay, executor, settings))
        print("dry run: nothing written, nothing submitted")
        return 0
    if args.out is None:
        raise UsageError("--out is required (the output folder)")
    run = RunDir((args.run_dir or scope.default_run_dir(args, sc.subset)).resolve())
    cfg = create_run(args, argv, settings, executor, sc, args.out.resolve(), run)
    with run_lock(run.root):
        return start(run, cfg, stage_tasks(sc.lay), executor, args.jobs, settings, "submit")


@dataclass(frozen=True)
class Scope:
    """One language's inputs and job layout: what --dry-run shows and a run dir is made from."""

    subset: str
    shards: list
    sample: Any  # buckets.HeadSample
    lay: layout_mod.Layout
    known: dict[int, int]  # input index -> documents, from the counts index


def prepare(args: argparse.Namespace, settings, executor: str, budget: int | None = None) -> Scope:
    """Inputs, known counts, head sample and layout of args.lang (`budget`: this language's share of the tasks)."""
    if not settings.license:
        raise UsageError("no license: give --license SPDX or LICENSE in the conf (HPLT presets use CC0-1.0)")
    subset, shards = scope.find_inputs(args, settings)
    known = scope.known_counts(settings, args.corpus, subset, args.lang, shards)
    from shard_pipeline.stages.buckets import sample_heads

    sample = sample_heads(shards, corpus=args.corpus)
    lay = scope.make_layout(args, settings, shards, {**sample.complete, **known}, executor, sample.compressed_per_doc,
                            sample.text_per_doc, budget=budget)
    return Scope(subset, shards, sample, lay, known)


def create_run(args: argparse.Namespace, argv: Sequence[str], settings, executor: str, sc: Scope, out: Path,
               run: RunDir) -> RunConfig:
    """Check OUT and the run dir, claim OUT and write the run dir of one language; nothing is started."""
    subset, shards, lay, sample = sc.subset, sc.shards, sc.lay, sc.sample
    check_replaceable(out)
    if run.root.exists():
        raise UsageError(f"run directory {run.root} exists; use --resume {run.root} or move it away")
    if run.root == out or out in run.root.parents or run.root in out.parents:
        raise UsageError("--out and --run-dir must not contain each other")
    content = Content(
        corpus=args.corpus, subset=subset, lang=args.lang,
        dataset=args.dataset or f"hplt-{args.corpus}-{subset}-{args.lang}", version=args.dataset_version,
        license_spdx=settings.license, shard_rows=args.shard_rows, val_permille=args.val_permille,
        row_group_bytes=args.row_group_bytes, bad_records=args.bad_records,
        inputs=tuple(InputRef(s.name, s.location, s.size, s.mtime, s.source_id) for s in shards),
        dataset_card=args.dataset_card,
        clean=clean_policy(settings) if args.clean else None,
        shard_bytes=args.shard_bytes,
        dp_ranks=parse_dp_ranks(args.dp_ranks) if args.dp_ranks else (),
        split_layout=args.split_layout,
    )
    python = settings.python if executor == "slurm" else sys.executable
    execution = Execution(
        executor=executor, out=str(out), partition_tasks=lay.partition_tasks, write_tasks=lay.write_tasks,
        buckets=lay.buckets, spill_bytes=lay.spill_bytes, python=python,
        mem={"partition": lay.partition_mem, "plan": lay.plan_mem, "write": lay.write_mem, "job": lay.job_mem},
        time={"partition": lay.partition_time, "write": lay.write_time, "job": lay.job_time},
        cpus={"finalize": lay.finalize_cpus} if lay.finalize_cpus > 1 else {},
        counts_index=str(settings.counts_index) if settings.counts_index else None,
    )
    from shard_pipeline.stages.buckets import choose_boundaries

    method, boundaries = choose_boundaries(sample.ids, lay.buckets)
    execution = Execution(**{**asdict(execution), "buckets": len(boundaries) + 1})
    cfg = RunConfig(content, execution)
    claim(out, run.root)
    write_run_dir(run, cfg, lay, shards, {"method": method, "boundaries": boundaries}, ["hplt-shard", *argv], settings, executor)
    print(f"{args.lang}: config sha256 {content.sha256()}; {len(shards)} input shards; {lay.partition_tasks} partition / "
          f"{lay.write_tasks} write tasks; {len(boundaries) + 1} buckets ({method})", file=sys.stderr)
    return cfg


def parse_dp_ranks(spec: str) -> tuple[int, ...]:
    from shard_pipeline.stages.balance import parse_dp_ranks as parse

    return parse(spec)


def clean_policy(settings) -> dict:
    from shard_pipeline.stages.clean import CleanPolicy

    return CleanPolicy.from_conf(dict(settings.clean_values)).to_json()


def git_state() -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "-C", str(scope.REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(scope.REPO_ROOT), "status", "--porcelain"], capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": dirty}



def write_run_dir(run: RunDir, cfg: RunConfig, lay: layout_mod.Layout, shards, boundaries: dict, argv: Sequence[str],
                  settings, executor: str) -> None:
    run.create()
    write_json_atomic(run.config_json, cfg.to_json())
    write_json_atomic(run.buckets_json, boundaries)
    run.shard_list.write_text("".join(s.location + "\n" for s in shards))
    run.inventory.write_text("path\tsize\tmtime\n" + "".join(f"{s.location}\t{s.size}\t{s.mtime}\n" for s in shards))
    for t, pack in enumerate(lay.packing):
        write_json_atomic(run.task_file("partition", t), {"task": t, "inputs": list(pack)})
    write_json_atomic(run.run_json, {
        "run_format": RUN_FORMAT,
        "argv": list(argv),
        "config_sha256": cfg.content.sha256(),
        "code": git_state(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "cluster": os.environ.get("SLURM_CLUSTER_NAME") or platform.node(),
        "executor": executor,
        "layout": {k: v for k, v in asdict(lay).items() if k != "packing"},
        "settings": {k: str(v) for k, v in asdict(settings).items()},
        "submissions": [],
    })


def stage_tasks(lay: layout_mod.Layout) -> dict[str, list[int]]:
    return {"partition": list(range(lay.partition_tasks)), "plan": [0], "write": list(range(lay.write_tasks)), "finalize": [0]}


def start(run: RunDir, cfg: RunConfig, tasks: dict[str, list[int]], executor: str, jobs: int, settings,
          kind: str) -> int:
    """Hand the tasks to the executor: blocking locally, queued at once under Slurm."""
    if executor == "local":
        from shard_pipeline.submit.executors.local import run_local

        return run_local(run, cfg, tasks, jobs, Path(cfg.execution.out))
    from shard_pipeline.submit.executors.slurm import submit_run

    return submit_run(run, cfg, tasks, settings, cfg.content.lang, kind)


def resume_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Redo only what an interrupted run has not finished; same bytes as an uninterrupted run."""
    from shard_pipeline.run.resume import (
        ResumeRefused,
        changed_inputs,
        plan_resume,
        run_job_ids,
    )
    from shard_pipeline.run.resume import describe as describe_resume
    from shard_pipeline.submit.executors.slurm import queued_jobs_of

    run = RunDir(args.resume.resolve())
    if not run.config_json.exists():
        raise UsageError(f"{run.root} is not a hplt-shard run directory (no config.json)")
    cfg = RunConfig.from_json(read_json(run.config_json))
    record = read_json(run.run_json)
    executor = args.executor or record["executor"]
    made_by = record.get("run_format", 1)
    if made_by != RUN_FORMAT:
        raise ResumeRefused(f"{run.root} was made by hplt-shard {record.get('code', {}).get('commit') or '(unknown commit)'} "
                            f"whose intermediate files have format {made_by}; this version reads format {RUN_FORMAT}. "
                            "Resume it with that version, or start a new run (inputs and OUT are untouched)")
    with run_lock(run.root):
        if shutil.which("squeue"):
            queued = queued_jobs_of(run_job_ids(run))
            if queued:
                raise ResumeRefused(f"jobs of this run are still queued or running: {', '.join(queued)}; "
                                    "wait for them or scancel them first")
        changed = changed_inputs(run, cfg)
        if changed:
            raise ResumeRefused("input shards changed since the run was submitted (shard_inventory.tsv): " + "; ".join(changed))
        rp = plan_resume(run)
        if rp.done:
            print(f"{run.root}: already done; output at {cfg.execution.out}")
            return 0
        print(f"resuming {run.root}:\n{describe_resume(rp)}")
        if args.dry_run:
            print("dry run: nothing submitted")
            return 0
        out = Path(cfg.execution.out)
        claim(out, run.root)
        settings = scope.resolve_settings(args) if executor == "slurm" else None
        return start(run, cfg, rp.tasks, executor, args.jobs, settings, "resume")
