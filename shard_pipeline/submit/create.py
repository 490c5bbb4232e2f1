"""Applying a plan: a new run's RUNDIR and each language's run dir written whole (or not at all), each OUT
claimed; then, for a new run and a resume alike, the units handed to the executor, with one rollback.
"""
from __future__ import annotations

import contextlib
import dataclasses
import platform
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline import slurm
from shard_pipeline.commands import resume_command
from shard_pipeline.errors import ExitCode, UserError
from shard_pipeline.files import write_json_atomic
from shard_pipeline.run import codeversion, unit_table
from shard_pipeline.run.claim import check_claimable, claim, release
from shard_pipeline.run.receipts import Buckets, PartitionTask
from shard_pipeline.run.records import RUN_FORMAT, made_here, save_record
from shard_pipeline.run.registry import STAGE_NAMES
from shard_pipeline.run.rundir import RunDir, check_new
from shard_pipeline.run.runconfig import Content, Execution, InputRef, RunConfig
from shard_pipeline.stages.balance import parse_dp_ranks
from shard_pipeline.submit import guards, languages, provenance, scope
from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.submit.args import Request
from shard_pipeline.units import plural


def create_all(args, argv, settings, executor, ms: scope.Languages, outs: dict[str, Path], root: Path,
               out_is_root: bool) -> dict[str, RunConfig]:
    """RUNDIR with one run dir per language, languages.json and run.json; undone (claims and all) if any
    language fails. `out_is_root`: --out is a root holding OUT/<LANG>/ (else the one language's OUT)."""
    order = languages.smallest_first({l: ms.scopes[l].lay.compressed_bytes for l in ms.langs})
    table = unit_table.table_of(root, [(l, ms.scopes[l].lay.partition_tasks, ms.scopes[l].lay.write_tasks)
                                    for l in order], settings.cpus_per_task)
    root_out = guards.check_out_path(args.out)
    with guards.doing(f"creating the run directory {root}"):
        RunDir(root).create(STAGE_NAMES, work=False)
    cfgs, made = {}, []
    try:
        for l in ms.langs:
            cfgs[l] = create_run(args.for_language(l), argv, settings, executor, scope.unit_scope(ms.scopes[l]), outs[l],
                                 RunDir(table.lang_dir(l)))
            made.append(l)
        write_json_atomic(RunDir(root).languages_json, {**table.to_json(), "out": str(root_out)})
        write_json_atomic(RunDir(root).run_json, {
            "run_format": RUN_FORMAT, "code_version": codeversion.code_version(), "multi_format": unit_table.MULTI_FORMAT,
            "argv": ["hplt-shard", *argv], "out_is_root": out_is_root,
            "languages": ms.langs, "executor": executor, "code": provenance.code_state(), "out": str(root_out),
            "budget": ms.budget, "time_limit": settings.time_limit, "submissions": [],
        })
    except BaseException:
        for l in made:
            release(outs[l], table.lang_dir(l))
        shutil.rmtree(root, ignore_errors=True)
        raise
    return cfgs


def create_run(args: Request, argv: Sequence[str], settings, executor: str, sc: scope.Scope, out: Path,
               run: RunDir) -> RunConfig:
    """Check the run dir, write the run dir of one language, then claim OUT (checked by `check_outs`, which listed
    it once: a second listing costs seconds at HPLT English on Lustre); nothing is started."""
    subset, shards, lay, sample = sc.subset, sc.shards, sc.lay, sc.sample
    check_new(run.root)
    content = Content(
        corpus=args.corpus, subset=subset, lang=args.lang,
        dataset=dataset_name(args, subset), version=args.dataset_version,
        license_spdx=settings.license, shard_rows=args.shard_rows, val_permille=args.val_permille,
        row_group_bytes=args.row_group_bytes, bad_records=args.bad_records,
        inputs=tuple(InputRef(s.name, s.location, s.size, s.mtime, s.source_id) for s in shards),
        dataset_card=args.dataset_card,
        clean=clean_policy(settings) if args.clean else None,
        shard_bytes=args.shard_bytes,
        dp_ranks=parse_dp_ranks(args.dp_ranks) if args.dp_ranks is not None else (),  # checked: check_content_args
        split_layout=args.split_layout,
        hplt=scope.corpus_names(args, settings).hplt,
        annotations=guards.annotation_fields(args),
    )
    python = settings.python if executor == "slurm" else sys.executable
    execution = Execution(
        executor=executor, out=str(out), partition_tasks=lay.partition_tasks, write_tasks=lay.write_tasks,
        buckets=lay.buckets, spill_bytes=lay.spill_bytes, python=python,
        resources=lay.resources,
        counts_index=str(settings.counts_index) if settings.counts_index else None,
        counts_index_key="/".join(scope.index_key(args, settings)),
        keep_spill=args.keep_spill,
        release_changed=args.release_changed,
    )
    from shard_pipeline.stages.buckets import choose_boundaries

    method, boundaries = choose_boundaries(sample.ids, lay.buckets)
    execution = dataclasses.replace(execution, buckets=len(boundaries) + 1)
    cfg = RunConfig(content, execution)
    check_claimable(out, run.root)  # before the run dir exists: a refused run leaves nothing behind
    with guards.doing(f"creating the run directory {run.root}"):
        run.create(STAGE_NAMES)  # whole or not at all, even at a Ctrl-C
    try:  # a failure or a Ctrl-C anywhere here leaves neither the run dir nor a claim
        with guards.doing(f"writing the run directory {run.root}"):
            write_run_dir(run, cfg, lay, shards, Buckets(method, list(boundaries)), ["hplt-shard", *argv],
                          settings, executor, scope.index_record(sc.disagree, sc.impossible))
        claim(out, run.root)  # only once the run dir is whole: a failed start never leaves a claim
        print(f"{args.lang}: config sha256 {content.sha256()}; {plural(len(shards), 'input shard')}; "
              f"{lay.partition_tasks} partition / {plural(lay.write_tasks, 'write task')}; "
              f"{plural(len(boundaries) + 1, 'bucket')} ({method})", file=sys.stderr)
    except BaseException:
        release(out, run.root)  # only if this run took it
        shutil.rmtree(run.root, ignore_errors=True)  # made a moment ago by this process; nothing ran in it
        raise
    return cfg


def dataset_name(args: Request, subset: str) -> str:
    """The manifest's dataset: --dataset, else hplt-<corpus>-<subset>-<LANG> (HPLT) or <name>-<LANG> (identity.py)."""
    from shard_pipeline.input.identity import CorpusNames, is_hplt

    hplt = args.corpus_name is None and is_hplt(args.corpus, subset)
    return args.dataset or CorpusNames(args.corpus, subset, hplt).dataset(args.lang)


def clean_policy(settings) -> dict:
    from shard_pipeline.stages.clean_policy import CleanPolicy

    with scope.usage_errors():  # a CLEAN_* value of the conf
        return CleanPolicy.from_conf(dict(settings.clean_values)).to_json()


def write_run_dir(run: RunDir, cfg: RunConfig, lay: layout_mod.Layout, shards, buckets: Buckets, argv: Sequence[str],
                  settings, executor: str, extra: dict[str, Any] | None = None) -> None:
    write_json_atomic(run.config_json, cfg.to_json())
    made = made_here(cfg.content.sha256())
    save_record(run.buckets_json, made, buckets)
    run.shard_list.write_text("".join(s.location + "\n" for s in shards))
    run.inventory.write_text("path\tsize\tmtime\n" + "".join(f"{s.location}\t{s.size}\t{s.mtime}\n" for s in shards))
    for t, pack in enumerate(lay.packing):
        save_record(run.task_file("partition", t), made, PartitionTask(t, list(pack)))
    save_record(run.run_json, made, {  # its header is config.json's: load_config checks they agree
        "argv": list(argv),
        "code": provenance.code_state(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "cluster": slurm.cluster_name() or platform.node(),
        "executor": executor,
        "layout": {k: v for k, v in asdict(lay).items() if k != "packing"},
        "settings": {k: str(v) for k, v in asdict(settings).items()},
        "submissions": [],
        **(extra or {}),
    })


class StoppedBeforeStart(UserError):
    """Ctrl-C between the claim on OUT and the executor taking over its own Ctrl-C."""

    exit_code = ExitCode.INTERRUPTED


@contextlib.contextmanager
def until_started(root: Path, held: dict[Path, Path], executor: str):
    """A Ctrl-C once the run dir is whole and OUT claimed, before any task runs: the exact --resume.
    Locally nothing can have started, so the claims are released (the resume takes them again);
    under Slurm a job may already be queued, so OUT stays claimed by the run."""
    try:
        yield
    except KeyboardInterrupt:
        if executor == "local":
            for out, run_root in held.items():
                release(out, run_root)
        kept = "OUT stays claimed by this run" if executor != "local" else "OUT is as it was, its claim released"
        raise StoppedBeforeStart(f"interrupted before any task ran ({kept}); to continue: "
                                 f"{resume_command(root)}") from None


def start(table: unit_table.UnitTable, cfgs: dict[str, RunConfig], tasks: dict[str, list[int]], executor: str, jobs: int,
          settings, kind: str) -> int:
    """Hand the units to the executor: blocking locally, queued at once under Slurm."""
    for lang in cfgs:  # this attempt is not the one that was stopped
        RunDir(table.lang_dir(lang)).interrupted_marker.unlink(missing_ok=True)
    for stage in unit_table.SINGLE_JOB_STAGES:  # which languages the plan and finalize jobs take (all, or the unfinished)
        unit_table.write_selection(table.root, stage, tasks.get(stage, []))
    if executor == "local":
        from shard_pipeline.submit.executors.local import run_local

        return run_local(table, cfgs, tasks, jobs, kind)
    from shard_pipeline.submit.executors.slurm import submit_run

    return submit_run(table, cfgs, tasks, settings, kind)


