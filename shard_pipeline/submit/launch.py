"""Start a new run or resume one: the plan of the submission (scope.py), checked here, then applied
(create.py writes the run dirs, claims OUT and hands the units to the executor).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline.access import place_refusal
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract.replace import check_replaceable
from shard_pipeline.contract.root import LANG_CODE, is_root, scan
from shard_pipeline.errors import ExitCode, UsageError
from shard_pipeline.run import unit_table
from shard_pipeline.run.claim import run_lock
from shard_pipeline.run.rulebook import Context, Moment, preflight
from shard_pipeline.run.registry import STAGE_NAMES
from shard_pipeline.run.rundir import check_new
from shard_pipeline.submit import guards, languages, provenance, scope
from shard_pipeline.submit.create import clean_policy, create_all, dataset_name, start, until_started
from shard_pipeline.submit.report import chain_resources_of, describe
from shard_pipeline.submit.args import Request
from shard_pipeline.submit.resuming import resume_run
from shard_pipeline.submit.slurm_limits import check_layout

__all__ = ["new_run", "resume_run", "start"]


@dataclass(frozen=True)
class NewRun:
    """A new run's plan, checked: what --dry-run renders and `apply_new_run` executes."""

    args: Request
    settings: Any
    executor: str
    out_is_root: bool  # --out is a root holding OUT/<LANG>/ (a list of languages), else the one language's OUT
    ms: scope.Languages
    root: Path  # RUNDIR
    fits: list  # what the partition's limits say of the chain's layout (None: it fits)
    outs: dict[str, tuple[Path, Any]]  # per language: its OUT and what OUT holds now


def new_run(args: Request, argv: Sequence[str]) -> int:
    """Find the inputs of every language, lay out the jobs, and (unless --dry-run) write RUNDIR/<LANG>/ for each
    and start their one chain."""
    plan = plan_new_run(args)
    return render_dry_run(plan) if args.dry_run else apply_new_run(plan, argv)


def plan_new_run(args: Request) -> NewRun:
    """The languages, their scopes and layouts, RUNDIR and each OUT, with every refusal known before writing."""
    settings = scope.resolve_settings(args)
    guards.check_content_args(args)
    clean_policy(settings)  # a bad CLEAN_* value of the conf is refused at --dry-run too, --clean or not
    executor = scope.choose_executor(args)
    out_is_root = languages.out_is_root(args)
    if out_is_root:
        langs = languages.languages(args, settings)
    elif not args.lang:
        raise UsageError("LANG is required (e.g. eng_Latn)")
    else:
        langs = [args.lang]
    if not args.dry_run:
        provenance.start()  # git answers on the idle core while the inputs are sampled
    ms = scope.prepare_all(args, settings, executor, langs)
    subset = ms.scopes[langs[0]].subset
    root = (args.run_dir or languages.default_run_dir(args, subset, langs, settings.runs_root)).resolve()
    fits = []
    if executor == "slurm":  # at --dry-run too
        from shard_pipeline.submit.executors.slurm import check_log_dir

        check_log_dir(root)
        # what the chain's jobs ask (a grouped stage's array task: C units, C cores), not one language's units
        fits = [check_layout(chain_resources_of(ms, settings)[1], settings.worker_partition)]
    outs = check_outs(args, settings, ms, root, out_is_root) if args.out is not None else {}
    guards.check_counts_index_path(settings.counts_index, list(dict.fromkeys(
        [*([Path(os.path.realpath(args.out))] if args.out is not None else []), *(o for o, _ in outs.values())])),
                                   languages.input_root(args, settings))
    return NewRun(args, settings, executor, out_is_root, ms, root, fits, outs)


def render_dry_run(plan: NewRun) -> int:
    """--dry-run: the plan, and what the run itself would refuse (reading only)."""
    args = plan.args
    print(describe(args, plan.ms, plan.executor, plan.settings, plan.root))
    print(scope.index_line(args, plan.settings, plan.ms.langs))
    for out, held in plan.outs.values():
        print(guards.out_holds(out, held))
    for line in dict.fromkeys(f for f in plan.fits if f):
        print(line)
    check_new(plan.root)  # after the scope: what the run itself would refuse, said here too (reading only)
    for lang, (out, _) in plan.outs.items():
        preflight(Moment.DRY_RUN, Context(out, plan.root / lang))
    print("dry run: nothing written, nothing submitted")
    return ExitCode.OK


def apply_new_run(plan: NewRun, argv: Sequence[str]) -> int:
    """Write the run dirs, claim each OUT, start the chain; a failure before the start leaves nothing behind."""
    args, root = plan.args, plan.root
    if args.out is None:
        raise UsageError("--out is required (the output folder; with several languages, the root folder: each "
                         "language goes to OUT/<LANG>/)")
    check_new(root)
    outs = {l: out for l, (out, _) in plan.outs.items()}
    with guards.languages_named(outs, plan.out_is_root, root):
        cfgs = create_all(args, argv, plan.settings, plan.executor, plan.ms, outs, root, plan.out_is_root)
    claims = {Path(cfg.execution.out): root / l for l, cfg in cfgs.items()}
    with until_started(root, claims, plan.executor), run_lock(root):
        for out, held in plan.outs.values():
            if held is not None:
                print(f"hplt-shard: {guards.out_holds(out, held)}", file=sys.stderr)
        table = unit_table.load(root)
        return start(table, cfgs, {s: list(range(table.size(s))) for s in STAGE_NAMES}, plan.executor, args.jobs,
                     plan.settings, "submit")


def check_outs(args: Request, settings, ms: scope.Languages, root: Path, out_is_root: bool) -> dict[str, tuple[Path, Any]]:
    """Each language's OUT (OUT itself, or OUT/<LANG> under a root) checked as one run's OUT is, --dry-run
    included: the path rules, what it holds, the same dataset. Returns (OUT, what it holds) per language."""
    given = guards.check_out_path(args.out)
    input_root = languages.input_root(args, settings)
    if out_is_root:
        if (given / MANIFEST_NAME).exists():
            raise UsageError(f"--out {given} is itself an output (it holds {MANIFEST_NAME}); a run of several "
                             "languages writes OUT/<LANG>/ into it, which that output does not list: choose another --out")
        preflight(Moment.NEW_ROOT, Context(given, root, input_root=input_root))  # a run of one language may hold ROOT
    places = [(given if out_is_root else given.parent, f"--out {given} cannot be written here", "--out"),
              (root.parent, f"the run directory {root} cannot be made here", "--run-dir")]
    if out_is_root:  # the languages' working files live beside ROOT (contract/beside.py)
        places.append((given.parent, f"the work folder beside --out {given} cannot be made here", "--out"))
    for folder, what, option in places:
        if (why := place_refusal(folder, what, option)) is not None:  # found now, not when the run makes or swaps them
            raise UsageError(why)
    if not out_is_root and is_root(given):
        held = scan(given).languages
        if all(LANG_CODE.fullmatch(h) for h in held):
            raise UsageError(f"--out {given} is the root of a run of several languages (it holds LANG/ outputs), and a "
                             f"run replaces OUT whole: give --out {given / ms.langs[0]}, or a new folder")
        named = ", ".join(f"{h}/" for h in held[:3]) + (", ..." if len(held) > 3 else "")
        raise UsageError(f"--out {given} holds outputs in its folders ({named}) and no manifest of its own, and a run "
                         "replaces OUT whole: give a new folder, or one of those outputs to replace it")
    outs = {}
    for lang in ms.langs:
        out = given / lang if out_is_root else given
        held = check_replaceable(out)
        guards.check_same_dataset(out, held, dataset_name(args.for_language(lang), ms.scopes[lang].subset),
                                  args.replace_other)
        preflight(Moment.NEW_RUN, Context(out, root / lang, run_dir=root, input_root=input_root, of_a_root=out_is_root))
        outs[lang] = (out, held)
    return outs
