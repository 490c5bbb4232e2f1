"""Start a new run or resume one: the run directory, the claim on OUT, then the executor.

A run directory is written once, here, before any task runs; every stage reads its inputs from it.
"""
from __future__ import annotations

import argparse
import dataclasses
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
from shard_pipeline.run.claim import check_claimable, claim, run_lock
from shard_pipeline.run.registry import STAGE_NAMES, all_tasks
from shard_pipeline.run.runconfig import Content, Execution, InputRef, RunConfig
from shard_pipeline.run.rundir import RUN_FORMAT, RunDir, read_json, write_json_atomic
from shard_pipeline.submit import guards, scope
from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.submit.report import describe
from shard_pipeline.submit.slurm_limits import check_layout
from shard_pipeline.units import plural


def new_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Find the inputs, lay out the jobs, and (unless --dry-run) write the run dir and start it."""
    settings = scope.resolve_settings(args)
    guards.check_content_args(args)
    executor = scope.choose_executor(args)
    sc = prepare(args, settings, executor)
    run = RunDir((args.run_dir or scope.default_run_dir(args, sc.subset)).resolve())
    fits = None
    if executor == "slurm":  # at --dry-run too
        from shard_pipeline.submit.executors.slurm import check_log_dir

        check_log_dir(run.root)
        fits = check_layout(sc.lay.resources, settings.worker_partition)
    if args.out is not None:  # the path rules hold at --dry-run too
        out = guards.check_out_path(args.out)
        held = check_replaceable(out)
        guards.check_same_dataset(out, held, dataset_name(args, sc.subset), args.replace_other)
        guards.check_new_run_paths(out, run.root, scope.input_root(args, settings))
    if args.dry_run:
        print(describe(args, sc.subset, sc.shards, sc.lay, executor, settings, run.root))
        print(scope.index_line(args, settings))
        if args.out is not None:
            print(guards.out_holds(out, held))
        if fits:
            print(fits)
        print("dry run: nothing written, nothing submitted")
        return 0
    if args.out is None:
        raise UsageError("--out is required (the output folder)")
    cfg = create_run(args, argv, settings, executor, sc, out, run)
    if held is not None:
        print(f"hplt-shard: {guards.out_holds(out, held)}", file=sys.stderr)
    with run_lock(run.root):
        return start(run, cfg, all_tasks(cfg), executor, args.jobs, settings, "submit")


@dataclass(frozen=True)
class Scope:
    """One language's inputs and job layout: what --dry-run shows and a run dir is made from."""

    subset: str
    shards: list
    sample: Any  # buckets.HeadSample
    lay: layout_mod.Layout
    known: dict[int, int]  # input index -> documents, from the counts index
    disagree: tuple = ()  # counts-index rows that no longer match their file


def prepare(args: argparse.Namespace, settings, executor: str, budget: int | None = None) -> Scope:
    """Inputs, known counts, head sample and layout of args.lang (`budget`: this language's share of the tasks)."""
    if not settings.license:
        raise UsageError("no license: give --license SPDX or LICENSE in the conf (HPLT presets use CC0-1.0)")
    subset, shards = scope.find_inputs(args, settings)
    key = scope.index_key(args, settings)
    note = scope.index_warning(settings)
    if note:
        print(f"hplt-shard: warning: {note}", file=sys.stderr)
    known = scope.known_counts(settings, key, args.lang, shards)
    from shard_pipeline.input.shape import check_record_shape
    from shard_pipeline.stages.buckets import sample_heads

    sample = sample_heads(shards, corpus=args.corpus)
    check_record_shape(shards, args.corpus)
    disagree = scope.index_disagreements(settings, key, args.lang, shards, sample.complete)
    for d in disagree[:10]:  # HPLT releases are immutable: a file that no longer matches its row is a signal
        print(f"hplt-shard: warning: {d.describe()} (was the file replaced?)", file=sys.stderr)
    if len(disagree) > 10:
        print(f"hplt-shard: warning: {len(disagree) - 10} more input shards disagree with the counts index "
              "(all listed in run.json at submit)", file=sys.stderr)
    lay = scope.make_layout(args, settings, shards, {**sample.complete, **known}, executor, sample.compressed_per_doc,
                            sample.text_per_doc, budget=budget, sample=sample)
    big = layout_mod.doc_memory_warning(lay, settings.worker_mem, sample.largest_at)
    if big:  # the layout already raised the tasks; where memory is enforced, --mem is the user's to know
        print(f"hplt-shard: warning: {big}", file=sys.stderr)
    return Scope(subset, shards, sample, lay, known, tuple(disagree))


def create_run(args: argparse.Namespace, argv: Sequence[str], settings, executor: str, sc: Scope, out: Path,
               run: RunDir) -> RunConfig:
    """Check OUT and the run dir, write the run dir of one language, then claim OUT; nothing is started."""
    subset, shards, lay, sample, disagree = sc.subset, sc.shards, sc.lay, sc.sample, sc.disagree
    guards.check_same_dataset(out, check_replaceable(out), dataset_name(args, subset), args.replace_other)
    if run.root.exists():
        raise UsageError(f"run directory {run.root} exists; use --resume {run.root} or move it away")
    content = Content(
        corpus=args.corpus, subset=subset, lang=args.lang,
        dataset=dataset_name(args, subset), version=args.dataset_version,
        license_spdx=settings.license, shard_rows=args.shard_rows, val_permille=args.val_permille,
        row_group_bytes=args.row_group_bytes, bad_records=args.bad_records,
        inputs=tuple(InputRef(s.name, s.location, s.size, s.mtime, s.source_id) for s in shards),
        dataset_card=args.dataset_card,
        clean=clean_policy(settings) if args.clean else None,
        shard_bytes=args.shard_bytes,
        dp_ranks=parse_dp_ranks(args.dp_ranks) if args.dp_ranks is not None else (),
        split_layout=args.split_layout,
        hplt=scope.corpus_names(args, settings).hplt,
    )
    python = settings.python if executor == "slurm" else sys.executable
    execution = Execution(
        executor=executor, out=str(out), partition_tasks=lay.partition_tasks, write_tasks=lay.write_tasks,
        buckets=lay.buckets, spill_bytes=lay.spill_bytes, python=python,
        resources=lay.resources,
        counts_index=str(settings.counts_index) if settings.counts_index else None,
        counts_index_key="/".join(scope.index_key(args, settings)),
    )
    from shard_pipeline.stages.buckets import choose_boundaries

    method, boundaries = choose_boundaries(sample.ids, lay.buckets)
    execution = dataclasses.replace(execution, buckets=len(boundaries) + 1)
    cfg = RunConfig(content, execution)
    check_claimable(out, run.root)  # before the run dir exists: a refused run leaves nothing behind
    with guards.doing(f"creating the run directory {run.root}"):
        run.create(STAGE_NAMES)
    try:
        with guards.doing(f"writing the run directory {run.root}"):
            write_run_dir(run, cfg, lay, shards, {"method": method, "boundaries": boundaries}, ["hplt-shard", *argv],
                          settings, executor, {"counts_index_disagreements": [d.to_json() for d in disagree]} if disagree else {})
        claim(out, run.root)  # only once the run dir is whole: a failed start never leaves a claim
    except BaseException:
        shutil.rmtree(run.root, ignore_errors=True)  # made a moment ago by this process; nothing ran in it
        raise
    print(f"{args.lang}: config sha256 {content.sha256()}; {plural(len(shards), 'input shard')}; {lay.partition_tasks} "
          f"partition / {plural(lay.write_tasks, 'write task')}; {plural(len(boundaries) + 1, 'bucket')} ({method})",
          file=sys.stderr)
    return cfg


def dataset_name(args: argparse.Namespace, subset: str) -> str:
    """The manifest's dataset: --dataset, else hplt-<corpus>-<subset>-<LANG> (HPLT) or <name>-<LANG> (identity.py)."""
    from shard_pipeline.input.identity import CorpusNames, is_hplt

    hplt = getattr(args, "corpus_name", None) is None and is_hplt(args.corpus, subset)
    return args.dataset or CorpusNames(args.corpus, subset, hplt).dataset(args.lang)


def parse_dp_ranks(spec: str) -> tuple[int, ...]:
    from shard_pipeline.stages.balance import parse_dp_ranks as parse

    with scope.usage_errors():
        return parse(spec)


def clean_policy(settings) -> dict:
    from shard_pipeline.stages.clean_policy import CleanPolicy

    with scope.usage_errors():  # a CLEAN_* value of the conf
        return CleanPolicy.from_conf(dict(settings.clean_values)).to_json()


def git_state() -> dict[str, Any]:
    """The commit of the checkout the code runs from (None for an installed package)."""
    from importlib.metadata import PackageNotFoundError, version

    from shard_pipeline.paths import checkout_root

    try:
        __version__ = version("hplt-shard")
    except PackageNotFoundError:
        __version__ = None
    root = checkout_root()
    if root is None:
        return {"commit": None, "dirty": None, "version": __version__}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None, "version": __version__}
    return {"commit": commit or None, "dirty": dirty, "version": __version__}



def write_run_dir(run: RunDir, cfg: RunConfig, lay: layout_mod.Layout, shards, boundaries: dict, argv: Sequence[str],
                  settings, executor: str, extra: dict[str, Any] | None = None) -> None:
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
        **(extra or {}),
    })


def start(run: RunDir, cfg: RunConfig, tasks: dict[str, list[int]], executor: str, jobs: int, settings,
          kind: str) -> int:
    """Hand the tasks to the executor: blocking locally, queued at once under Slurm."""
    run.interrupted_marker.unlink(missing_ok=True)  # this attempt is not the one that was stopped
    if executor == "local":
        from shard_pipeline.submit.executors.local import run_local

        return run_local(run, cfg, tasks, jobs, Path(cfg.execution.out))
    from shard_pipeline.submit.executors.slurm import submit_run

    return submit_run(run, cfg, tasks, settings, cfg.content.lang, kind)


def multi_parent(root: Path) -> list[Path]:
    """The multi-language run dir this language's run dir belongs to, if any: its units run there too."""
    from shard_pipeline.run import multi

    return [root.parent] if multi.is_multi(root.parent) else []


def resume_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Redo only what an interrupted run has not finished; same bytes as an uninterrupted run."""
    from shard_pipeline.run.resume import (
        ResumeRefused,
        changed_inputs,
        plan_resume,
        refuse_live_tasks,
        run_job_ids,
    )
    from shard_pipeline.run.resume import describe as describe_resume
    from shard_pipeline.submit.args import build_parser
    from shard_pipeline.submit.executors.slurm import queued_jobs_of
    from shard_pipeline.submit.resume_args import (
        keep_cpus,
        keep_resources,
        resume_resources,
        with_resources,
        with_settings,
    )

    run = RunDir(args.resume.resolve())
    if not run.config_json.exists():
        raise UsageError(f"{run.root} is not a hplt-shard run directory (no config.json)")
    cfg = RunConfig.from_json(read_json(run.config_json))
    record = read_json(run.run_json)
    resources = resume_resources(build_parser(), argv, record)  # a later resume keeps an earlier --mem
    cfg = with_resources(cfg, resources)
    executor = scope.choose_executor(args, record["executor"])
    made_by = record.get("run_format", 1)
    if made_by != RUN_FORMAT:
        raise ResumeRefused(f"{run.root} was made by hplt-shard {record.get('code', {}).get('commit') or '(unknown commit)'} "
                            f"whose intermediate files have format {made_by}; this version reads format {RUN_FORMAT}. "
                            "Resume it with that version, or start a new run (inputs and OUT are untouched)")
    with run_lock(run.root):
        refuse_live_tasks(run.root, *multi_parent(run.root))
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
        settings = with_settings(scope.resolve_settings(args), resources) if executor == "slurm" else None
        if settings is not None:  # the resources after this resume's --mem/--time/--cpus-per-task/--partition
            check_layout(cfg.execution.resources, settings.worker_partition)
        print(f"resuming {run.root}:\n{describe_resume(rp)}")
        if args.dry_run:
            print("dry run: nothing submitted")
            return 0
        out = Path(cfg.execution.out)
        claim(out, run.root)
        keep_cpus(run.config_json, resources)
        keep_resources(run.run_json, resources)
        return start(run, cfg, rp.tasks, executor, args.jobs, settings, "resume")
