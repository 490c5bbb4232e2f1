"""Start a new run or resume one: the run directory, the claim on OUT, then the executor.

A run directory is written once, here, before any task runs; every stage reads its inputs from it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import platform
import shutil
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline import slurm
from shard_pipeline.access import place_refusal, resume_refusal, share_like
from shard_pipeline.commands import resume_command
from shard_pipeline.contract.replace import check_replaceable
from shard_pipeline.contract.root import LANG_CODE, is_root, scan
from shard_pipeline.errors import ExitCode, UsageError, UserError
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.run import codeversion, unit_table
from shard_pipeline.run.claim import check_claimable, claim, release, run_lock
from shard_pipeline.run.rulebook import Context, Moment, preflight, resume_preflight
from shard_pipeline.run.registry import STAGE_NAMES, since_done
from shard_pipeline.run.receipts import Buckets, PartitionTask
from shard_pipeline.run.records import made_here, save_record
from shard_pipeline.run.runconfig import Content, Execution, InputRef, RunConfig, load_config
from shard_pipeline.files import write_bytes_atomic, write_json_atomic
from shard_pipeline.run.rundir import RUN_FORMAT, RunDir, check_new, check_whole, read_json
from shard_pipeline.submit import guards, languages, option_checks, provenance, scope
from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.submit.report import describe
from shard_pipeline.submit.request import Request
from shard_pipeline.submit.slurm_limits import check_layout
from shard_pipeline.units import plural


def new_run(args: Request, argv: Sequence[str]) -> int:
    """Find the inputs of every language, lay out the jobs, and (unless --dry-run) write the run dir and start it.

    One LANG makes a run dir for that language and OUT is its output. A list of languages (a
    comma list, `all`, --langs-file) makes RUNDIR/<LANG>/ for each, written by the same code, and
    OUT is a root holding OUT/<LANG>/; the languages share one chain (run/unit_table.py's unit table)."""
    settings = scope.resolve_settings(args)
    option_checks.check_content_args(args)
    clean_policy(settings)  # a bad CLEAN_* value of the conf is refused at --dry-run too, --clean or not
    executor = scope.choose_executor(args)
    several = languages.wants_several(args)
    if several:
        langs = languages.languages(args, settings)
    elif not args.lang:
        raise UsageError("LANG is required (e.g. eng_Latn)")
    else:
        langs = [args.lang]
    if not args.dry_run:
        provenance.start()  # git answers on the idle core while the inputs are sampled
    ms = prepare_all(args, settings, executor, langs, several)
    subset = ms.scopes[langs[0]].subset
    root = (args.run_dir or (languages.default_run_dir(args, subset, langs, settings.runs_root) if several
                             else scope.default_run_dir(args, subset, settings.runs_root))).resolve()
    fits = []
    if executor == "slurm":  # at --dry-run too
        from shard_pipeline.submit.executors.slurm import check_log_dir

        check_log_dir(root)
        fits = [check_layout(ms.scopes[l].lay.resources, settings.worker_partition) for l in langs]
    outs = check_outs(args, settings, ms, root, several) if args.out is not None else {}
    guards.check_counts_index_path(settings.counts_index, list(dict.fromkeys(
        [*([Path(os.path.realpath(args.out))] if args.out is not None else []), *(o for o, _ in outs.values())])),
                                   scope.input_root(args, settings))
    if args.dry_run:
        print(describe(args, ms, executor, settings, root, several))
        if not several:
            print(scope.index_line(args, settings))
        for out, held in outs.values():
            print(guards.out_holds(out, held))
        for line in dict.fromkeys(f for f in fits if f):
            print(line)
        check_new(root)  # after the scope: what the run itself would refuse, said here too (reading only)
        for out, _ in outs.values():
            preflight(Moment.DRY_RUN, Context(out, root / out.name if several else root))
        print("dry run: nothing written, nothing submitted")
        return ExitCode.OK
    if args.out is None:
        raise UsageError("--out is required (" + ("the root folder; each language goes to OUT/<LANG>/)" if several
                                                  else "the output folder)"))
    check_new(root)
    with guards.languages_named([out for out, _ in outs.values()], several, root):
        cfgs = create_all(args, argv, settings, executor, ms, {l: out for l, (out, _) in outs.items()}, root, several)
    claims = {Path(cfg.execution.out): root / l if several else root for l, cfg in cfgs.items()}
    with until_started(root, claims, executor), run_lock(root):
        for out, held in outs.values():
            if held is not None:
                print(f"hplt-shard: {guards.out_holds(out, held)}", file=sys.stderr)
        table = unit_table.load(root)
        return start(table, cfgs, {s: list(range(table.size(s))) for s in STAGE_NAMES}, executor, args.jobs, settings,
                     "submit")


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


def check_outs(args: Request, settings, ms: "Languages", root: Path, several: bool) -> dict[str, tuple[Path, Any]]:
    """Each language's OUT (OUT itself, or OUT/<LANG> under a root) checked as one run's OUT is, --dry-run
    included: the path rules, what it holds, the same dataset. Returns (OUT, what it holds) per language."""
    given = guards.check_out_path(args.out)
    input_root = scope.input_root(args, settings)
    if several:
        if (given / MANIFEST_NAME).exists():
            raise UsageError(f"--out {given} is itself an output (it holds {MANIFEST_NAME}); a run of several "
                             "languages writes OUT/<LANG>/ into it, which that output does not list: choose another --out")
        preflight(Moment.NEW_ROOT, Context(given, root, input_root=input_root))  # a run of one language may hold ROOT
    places = [(given if several else given.parent, f"--out {given} cannot be written here", "--out"),
              (root.parent, f"the run directory {root} cannot be made here", "--run-dir")]
    if several:  # the languages' working files live beside ROOT (contract/beside.py)
        places.append((given.parent, f"the work folder beside --out {given} cannot be made here", "--out"))
    for folder, what, option in places:
        if (why := place_refusal(folder, what, option)) is not None:  # found now, not when the run makes or swaps them
            raise UsageError(why)
    if not several and is_root(given):
        held = scan(given).languages
        if all(LANG_CODE.fullmatch(h) for h in held):
            raise UsageError(f"--out {given} is the root of a run of several languages (it holds LANG/ outputs), and a "
                             f"run replaces OUT whole: give --out {given / ms.langs[0]}, or a new folder")
        named = ", ".join(f"{h}/" for h in held[:3]) + (", ..." if len(held) > 3 else "")
        raise UsageError(f"--out {given} holds outputs in its folders ({named}) and no manifest of its own, and a run "
                         "replaces OUT whole: give a new folder, or one of those outputs to replace it")
    outs = {}
    for lang in ms.langs:
        out = given / lang if several else given
        held = check_replaceable(out)
        guards.check_same_dataset(out, held, dataset_name(lang_args(args, lang), ms.scopes[lang].subset),
                                  args.replace_other)
        preflight(Moment.NEW_RUN, Context(out, root / lang if several else root, run_dir=root, input_root=input_root))
        outs[lang] = (out, held)
    return outs


@dataclass(frozen=True)
class Scope:
    """One language's inputs and job layout: what --dry-run shows and a run dir is made from."""

    subset: str
    shards: list
    sample: Any  # buckets.HeadSample
    lay: layout_mod.Layout
    known: dict[int, int]  # input index -> documents, from the counts index
    disagree: tuple = ()  # counts-index rows that no longer match their file
    impossible: tuple = ()  # counts-index rows of these inputs that cannot be true (ignored)
    annotation_bytes: float = 0.0  # --annotations: the kept fields' mean bytes per document, from the first records


def prepare(args: Request, settings, executor: str, budget: int | None = None) -> Scope:
    """Inputs, known counts, head sample and layout of args.lang (`budget`: this language's share of the tasks)."""
    if not settings.license:
        raise UsageError("no license: give --license SPDX or LICENSE in the conf (HPLT presets use CC0-1.0)")
    subset, shards = scope.find_inputs(args, settings)
    key = scope.index_key(args, settings)
    note = scope.index_warning(settings)
    if note:
        print(f"hplt-shard: warning: {note}", file=sys.stderr)
    index = scope.index_rows(settings, key, args.lang)
    rows = index.rows if index is not None else {}
    impossible = index.impossible_of(shards) if index is not None else []
    if impossible:  # ignored: lookup never sees them, so the run counts these files itself
        scope.warn_first([row.describe(index.path) for row in impossible], f"rows of {index.path} cannot be true")
    known = scope.known_counts(rows, shards)
    from shard_pipeline.input.shape import annotation_probe, check_record_shape
    from shard_pipeline.stages.buckets import sample_heads

    sample = sample_heads(shards, corpus=args.corpus)
    check_record_shape(shards, args.corpus)
    fields = option_checks.annotation_fields(args)
    per_doc = annotation_probe(shards, fields) if fields else 0.0
    # by size, and by documents where the sample read a file to its end; a file cut mid-frame is skipped by the sample
    scope.refuse_short_inputs(args, index, shards, {shards[i].name: n for i, n in sample.complete.items()})
    disagree = scope.index_disagreements(rows, shards, sample.complete)
    # HPLT releases are immutable: a file that no longer matches its row is a signal
    scope.warn_first([f"{d.describe()} (was the file replaced?)" for d in disagree],
                     "input shards disagree with the counts index")
    lay = scope.make_layout(args, settings, shards, {**sample.complete, **known}, executor, sample.compressed_per_doc,
                            sample.text_per_doc, budget=budget, sample=sample)
    big = layout_mod.doc_memory_warning(lay, settings.worker_mem, sample.largest_at)
    if big:  # the layout already raised the tasks; where memory is enforced, --mem is the user's to know
        print(f"hplt-shard: warning: {big}", file=sys.stderr)
    dp = option_checks.dp_ranks_note(args, lay.est_docs, lay.inputs_unknown == 0)
    if dp:
        print(f"hplt-shard: warning: {dp}", file=sys.stderr)
    return Scope(subset, shards, sample, lay, known, tuple(disagree), tuple(impossible), per_doc)


@dataclass(frozen=True)
class Languages:
    """The languages of a run, each with its scope (with its share of the task budget when there are several)."""

    langs: list[str]
    scopes: dict[str, Scope]
    alone: dict[str, Any]  # layout.Layout each language would get in a run of its own
    budget: int | None  # the queued tasks the languages share (several), None for one language


def lang_args(args: Request, lang: str) -> Request:
    return args.for_language(lang)


def total_budget(args: Request, settings, executor: str, n: int) -> int:
    if executor == "slurm":
        return scope.task_budget(args, settings, executor)
    # locally tasks are process starts, not queue slots; as a single run, groups of C count once
    return max(scope.local_budget(args.jobs, settings.cpus_per_task), 2 * n + 2)


def prepare_all(args: Request, settings, executor: str, langs: list[str], several: bool) -> Languages:
    """Lay out every language; several share the budget's units in proportion to bytes, and the
    dry-run also shows the layout each would get alone.

    Several languages are laid out in units (one core each): their array tasks of C units are
    packed across languages (run/unit_table.py), so a language's units, not array tasks, are its
    share, and every unit reads about the same bytes: one time limit fits the array."""
    if not several:
        sc = prepare(args, settings, executor)
        return Languages(langs, {langs[0]: sc}, {langs[0]: sc.lay}, None)
    budget = total_budget(args, settings, executor, len(langs))
    first = {l: prepare(lang_args(args, l), settings, executor, budget=budget) for l in langs}
    room = languages.unit_room(budget, settings.cpus_per_task)
    shares = languages.share_budget([first[l].lay.compressed_bytes for l in langs], room)
    scopes = {}
    for l, share in zip(langs, shares):
        sc = first[l]
        p = args.partition_tasks or languages.partition_units(len(sc.shards), share)
        lay = scope.make_layout(lang_args(args, l), settings, sc.shards, {**sc.sample.complete, **sc.known}, executor,
                                sc.sample.compressed_per_doc, sc.sample.text_per_doc, budget=share + 2,
                                sample=sc.sample, cpus=1, partition_tasks=p)
        scopes[l] = dataclasses.replace(sc, lay=lay)
    return Languages(langs, scopes, {l: first[l].lay for l in langs}, budget)


def unit_scope(sc: Scope) -> Scope:
    """A language's scope with one unit's resources: in a run of several languages the array task, not the
    language's run dir, groups units (C global units, of any language; run/unit_table.py), so the
    language's run dir keeps what one unit needs and its --status counts units as a C = 1 run."""
    return dataclasses.replace(sc, lay=dataclasses.replace(sc.lay, resources=layout_mod.unit_resources(sc.lay.resources),
                                                           cpus=1, partition_groups=sc.lay.partition_tasks,
                                                           write_groups=sc.lay.write_tasks))


def create_all(args, argv, settings, executor, ms: Languages, outs: dict[str, Path], root: Path,
               several: bool) -> dict[str, RunConfig]:
    """The run dir of one language at RUNDIR, or RUNDIR with one run dir per language and languages.json;
    undone (claims and all) if any language fails."""
    if not several:
        (lang,) = ms.langs
        return {lang: create_run(args, argv, settings, executor, ms.scopes[lang], outs[lang], RunDir(root))}
    order = languages.smallest_first({l: ms.scopes[l].lay.compressed_bytes for l in ms.langs})
    table = unit_table.table_of(root, [(l, ms.scopes[l].lay.partition_tasks, ms.scopes[l].lay.write_tasks)
                                    for l in order], settings.cpus_per_task)
    root_out = guards.check_out_path(args.out)
    RunDir(root).create_root_of_languages(STAGE_NAMES)
    cfgs, made = {}, []
    try:
        for l in ms.langs:
            cfgs[l] = create_run(lang_args(args, l), argv, settings, executor, unit_scope(ms.scopes[l]), outs[l],
                                 RunDir(table.lang_dir(l)))
            made.append(l)
        write_json_atomic(RunDir(root).languages_json, {**table.to_json(), "out": str(root_out)})
        write_json_atomic(RunDir(root).run_json, {
            "run_format": RUN_FORMAT, "code_version": codeversion.code_version(), "multi_format": unit_table.MULTI_FORMAT,
            "argv": ["hplt-shard", *argv],
            "languages": ms.langs, "executor": executor, "code": provenance.code_state(), "out": str(root_out),
            "budget": ms.budget, "time_limit": settings.time_limit, "submissions": [],
        })
    except BaseException:
        for l in made:
            release(outs[l], table.lang_dir(l))
        shutil.rmtree(root, ignore_errors=True)
        raise
    return cfgs


def create_run(args: Request, argv: Sequence[str], settings, executor: str, sc: Scope, out: Path,
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
        dp_ranks=parse_dp_ranks(args.dp_ranks) if args.dp_ranks is not None else (),
        split_layout=args.split_layout,
        hplt=scope.corpus_names(args, settings).hplt,
        annotations=option_checks.annotation_fields(args),
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


def parse_dp_ranks(spec: str) -> tuple[int, ...]:
    from shard_pipeline.stages.balance import parse_dp_ranks as parse

    with scope.usage_errors():
        return parse(spec)


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


def start(table: unit_table.UnitTable, cfgs: dict[str, RunConfig], tasks: dict[str, list[int]], executor: str, jobs: int,
          settings, kind: str) -> int:
    """Hand the units to the executor: blocking locally, queued at once under Slurm."""
    for lang in cfgs:  # this attempt is not the one that was stopped
        RunDir(table.lang_dir(lang)).interrupted_marker.unlink(missing_ok=True)
    if table.several:  # which languages the plan and finalize jobs take (all, or a resume's unfinished)
        for stage in unit_table.SINGLE_JOB_STAGES:
            unit_table.write_selection(table.root, stage, tasks.get(stage, []))
    if executor == "local":
        from shard_pipeline.submit.executors.local import run_local

        return run_local(table, cfgs, tasks, jobs, kind)
    from shard_pipeline.submit.executors.slurm import submit_run

    return submit_run(table, cfgs, tasks, settings, kind)


def multi_parent(root: Path) -> list[Path]:
    """The multi-language run dir this language's run dir belongs to, if any: its units run there too, and a
    resume of the language is a resume of that run (two chains for one language would race)."""
    return [root.parent] if unit_table.is_multi(root.parent) else []


def resume_run(args: Request, argv: Sequence[str]) -> int:
    """Redo, per language, only what is unfinished; same bytes as an uninterrupted run. Finished
    languages are left alone."""
    from shard_pipeline.run.next_step import check_this_version, new_run_command
    from shard_pipeline.run.resume import (
        ResumeRefused,
        changed_inputs,
        plan_resume,
        refuse_live_tasks,
        run_job_ids,
    )
    from shard_pipeline.run.resume import describe as describe_resume
    from shard_pipeline.run.runstate import ran_locally
    from shard_pipeline.submit.executors.slurm import SubmitError, queued_jobs_of
    from shard_pipeline.run.short_inputs import read_so_far, refuse_short_inputs
    from shard_pipeline.submit.resume_args import (
        keep_cpus,
        keep_release_changed,
        keep_resources,
        restore_resources,
        resume_resources,
        with_resources,
        with_settings,
    )

    option_checks.check_numbers(args)  # --jobs -3 on a resume too
    root = args.resume.resolve()
    for whole in multi_parent(root):  # a language of a run of several: that run numbers, queues and resumes its units
        print(f"hplt-shard: {root} is {root.name} of the run {whole}: resuming that run (only what is unfinished, "
              "in every language)", file=sys.stderr)
        root = whole
    check_whole(root)
    if not unit_table.is_multi(root) and not RunDir(root).config_json.exists():
        raise UsageError(f"{root} is not a hplt-shard run directory (no config.json)")
    if (why := resume_refusal(root)) is not None:  # a colleague's run made under umask 022: before any lock or warning
        raise ResumeRefused(why)
    if (group_note := share_like(root)) is not None:  # a colleague's resume writes what the run's owner can still read
        print(f"hplt-shard: warning: {group_note}", file=sys.stderr)
    record = read_json(RunDir(root).run_json)
    check_this_version(root, record)  # before anything of it is read
    table = unit_table.load(root)
    resources = resume_resources(argv, record)  # a later resume keeps an earlier --mem
    asked = resources.get("cpus_per_task")
    if table.several and asked is not None and int(asked) != table.units_per_task("partition"):
        raise UsageError(f"--cpus-per-task {asked}: a run of several languages keeps the cores per array task it was "
                         f"submitted with ({table.units_per_task('partition')}), because its array indices name "
                         "groups of units across languages; resume without --cpus-per-task")
    executor = scope.choose_executor(args, record["executor"])
    dirs = {l: RunDir(table.lang_dir(l)) for l in table.langs}
    with run_lock(root):
        answered = shutil.which("squeue") is not None
        if answered:  # first: once none is queued, records of Slurm tasks are stale
            queued = queued_jobs_of(run_job_ids(RunDir(root)))
            if queued:
                raise ResumeRefused(f"jobs of this run are still queued or running: {', '.join(queued)}; "
                                    "wait for them or scancel them first")
        refuse_live_tasks(root, *([d.root for d in dirs.values()] if table.several else []),
                          local=ran_locally(record), squeue_answered=answered,
                          done=all(d.done_marker.exists() for d in dirs.values()))
        cfgs = {l: with_resources(load_config(d), resources) for l, d in dirs.items()}
        changes = {l: changed_inputs(d, cfgs[l]) for l, d in dirs.items()}
        changed = [(f"{l}: " if table.several else "") + c for l, cs in changes.items() for c in cs]
        if changed:
            fresh = [cmd for l, cs in changes.items() if cs and (cmd := new_run_command(dirs[l], "new"))]
            raise ResumeRefused("input shards changed since the run was submitted (shard_inventory.tsv): "
                                + "; ".join(changed) + "; a run reads its inputs exactly as listed: restore them "
                                "(same size and mtime) and resume again, or start a new run to read them as they are now"
                                + (":\n" + "\n".join(f"    {cmd}" for cmd in fresh) if fresh else ""))
        if not table.several:  # a resume may regroup the units of one language (--cpus-per-task): no byte depends on C
            table = dataclasses.replace(table, cpus={s: cfgs[table.langs[0]].execution.units_per_task(s)
                                                     for s in table.cpus or {}})
        tasks: dict[str, list[int]] = {s: [] for s in STAGE_NAMES}
        todo, report, planning = [], [], []
        for l, d in dirs.items():
            rp = plan_resume(d)
            if rp.done:
                report.append(f"  {l}: done{since_done(d, Path(cfgs[l].execution.out))}")
                continue
            todo.append(l)
            if rp.tasks.get("plan"):  # the plan makes OUT.tmp: a staging folder not this run's would stop it there
                planning.append(l)
            report.append(f"  {l}:\n" + "\n".join("  " + line for line in describe_resume(rp).splitlines())
                          if table.several else describe_resume(rp))
            for stage, ts in rp.tasks.items():
                tasks[stage] += [table.global_index(stage, l, t) for t in ts]
        if not todo:
            if table.several:
                print("\n".join([f"{root}: already done; outputs under {record.get('out')}"]
                                + [line for line in report if "; but " in line]))  # an output changed since
            else:
                out = Path(cfgs[table.langs[0]].execution.out)
                print(f"{root}: already done; output at {out}{since_done(dirs[table.langs[0]], out)}")
            return ExitCode.OK
        cfgs = {l: cfgs[l] for l in todo}
        settings = with_settings(scope.resolve_settings(args), resources) if executor == "slurm" else None
        if settings is not None:  # what the chain would queue, with this resume's --mem/--time/--cpus-per-task/--partition
            fixed_time = bool(record.get("time_limit"))
            check_layout(layout_mod.chain_resources(table, cfgs, tasks, fixed_time), settings.worker_partition)
        if table.several:
            print("\n".join(report))
            print(f"resuming {root}: {len(todo)} of {plural(len(table.langs), 'language')} unfinished ({', '.join(todo)})")
        else:
            print(f"resuming {root}:\n{report[0]}")
        for l in todo:  # what reading alone can refuse (another run, a staging folder not ours): a dry run says it too
            resume_preflight(dirs[l], cfgs[l], l in planning, root)
            if l in planning:  # else the plan refuses it, after the whole partition stage
                refuse_short_inputs(cfgs[l], dirs[l].root, read_so_far(dirs[l], cfgs[l]),
                                    args.release_changed or cfgs[l].execution.release_changed)
        if args.dry_run:
            print("dry run: nothing submitted")
            return ExitCode.OK
        for l in todo:  # refused (a folder that cannot take a claim, a publish) before anything below changes
            check_claimable(Path(cfgs[l].execution.out), dirs[l].root)
        if table.several:
            for g in tasks["plan"]:  # a stale plan must not feed the writes of a chain that waits with afterany
                dirs[table.locate("plan", g)[0]].plan_json.unlink(missing_ok=True)
        with until_started(root, {Path(cfgs[l].execution.out): dirs[l].root for l in todo}, executor):
            for l in todo:
                claim(Path(cfgs[l].execution.out), dirs[l].root)
            config_before = None if table.several else RunDir(root).config_json.read_bytes()
            if not table.several:
                keep_cpus(RunDir(root), resources)
            if args.release_changed:  # the plan and finalize of each unfinished language read it there
                cfgs = {l: with_resources(keep_release_changed(dirs[l]), resources) for l in todo}
            kept = record.get("resources")
            keep_resources(RunDir(root).run_json, resources)
            try:
                return start(table, cfgs, tasks, executor, args.jobs, settings, "resume")
            except SubmitError as exc:  # nothing of this submission stays queued
                if config_before is not None:  # units stay grouped as the jobs that ran them (--status maps by it)
                    write_bytes_atomic(RunDir(root).config_json, config_before)
                if slurm.refusal_kind(str(exc).split("\n")[0]) == "request":  # a bad --account: not for the next resume
                    restore_resources(RunDir(root).run_json, kept)
                raise
