"""Several languages in one submission: one run dir per language, one chain for all (run/multi.py).

Each language is laid out, written and claimed by the code of a single-language run (launch.prepare,
launch.create_run), with its share of the task budget; only the unit table and the chain are new.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.errors import UsageError
from shard_pipeline.paths import home
from shard_pipeline.run import multi
from shard_pipeline.run.claim import release, run_lock
from shard_pipeline.run.registry import STAGE_NAMES as STAGES
from shard_pipeline.run.rundir import RUN_FORMAT, RunDir, read_json, write_json_atomic
from shard_pipeline.submit import launch, scope
from shard_pipeline.units import plural

LANG_CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")


def wants_multi(args: argparse.Namespace) -> bool:
    """Several languages were asked for: a comma list, `all`, or --langs-file."""
    return bool(args.langs_file) or (args.lang is not None and ("," in args.lang or args.lang == "all"))


def corpus_root(args: argparse.Namespace, settings) -> Path:
    root = args.local_root or (settings.v4_root if args.corpus == "v4" else settings.v3_root)
    if root is None:
        raise UsageError("`all` lists the language folders of a local corpus root: give --local-root (or V4_ROOT/V3_ROOT)")
    return Path(root)


def read_langs_file(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"--langs-file {path}: {exc.strerror or exc}") from None
    langs = []
    for n, line in enumerate(lines, 1):
        code = line.split("#", 1)[0].strip()
        if not code:
            continue
        if not LANG_CODE.match(code):
            raise UsageError(f"{path}:{n}: {code!r} is not a language code (e.g. fin_Latn)")
        langs.append(code)
    return langs


def languages(args: argparse.Namespace, settings) -> list[str]:
    """The languages of the run, in the order given (sorted for `all`), each once."""
    if args.langs_file and args.lang:
        raise UsageError("give languages either as LANG or with --langs-file, not both")
    if args.langs_file:
        langs = read_langs_file(args.langs_file)
    elif args.lang == "all":
        root = corpus_root(args, settings)
        if not root.is_dir():
            raise UsageError(f"corpus root {root} is not a folder")
        langs = sorted(p.name for p in root.iterdir() if p.is_dir() and LANG_CODE.match(p.name))
    else:
        langs = [c.strip() for c in args.lang.split(",") if c.strip()]
        bad = [c for c in langs if not LANG_CODE.match(c)]
        if bad:
            raise UsageError(f"{bad[0]!r} is not a language code (e.g. fin_Latn)")
    dup = sorted({c for c in langs if langs.count(c) > 1})
    if dup:
        raise UsageError(f"language(s) given twice: {', '.join(dup)}")
    if not langs:
        raise UsageError("no languages given" + (f" ({args.langs_file} is empty)" if args.langs_file else ""))
    if args.dataset:
        raise UsageError("--dataset names one language's dataset; with several languages each gets "
                         "hplt-<corpus>-<subset>-<LANG>, as its single run would")
    return langs


def share_budget(sizes: Sequence[int], room: int) -> list[int]:
    """Split `room` queued tasks between languages in proportion to bytes, at least 2 each (1 partition + 1 write).

    Largest remainders, ties to the earlier language: a pure function of the sizes, so the
    dry-run shows exactly what is submitted.
    """
    n = len(sizes)
    if room < 2 * n:
        raise UsageError(f"{n} languages need at least {2 * n + 2} queued tasks (one partition and one write task "
                         f"each, plus plan and finalize); this run may queue {room + 2} (MAX_TASKS, SUBMIT_LIMIT): "
                         f"give at most {max(1, room // 2)} languages per run")
    extra, total = room - 2 * n, sum(sizes)
    if total == 0:
        return [2 + extra // n + (1 if i < extra % n else 0) for i in range(n)]
    exact = [extra * s / total for s in sizes]
    share = [int(e) for e in exact]
    for i in sorted(range(n), key=lambda i: (-(exact[i] - share[i]), i))[: extra - sum(share)]:
        share[i] += 1
    return [2 + s for s in share]


def lang_args(args: argparse.Namespace, lang: str) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "lang": lang, "langs_file": None})


@dataclass(frozen=True)
class MultiScope:
    langs: list[str]
    scopes: dict[str, launch.Scope]  # with this run's share of the budget
    alone: dict[str, object]  # layout.Layout each language would get in a run of its own
    budget: int


def total_budget(args: argparse.Namespace, settings, executor: str, n: int) -> int:
    if executor == "slurm":
        return scope.task_budget(args, settings, executor)
    # locally tasks are process starts, not queue slots; as a single run, groups of C count once
    return max(4 * max(1, args.jobs // settings.cpus_per_task) + 2, 2 * n + 2)


def prepare_all(args: argparse.Namespace, settings, executor: str, langs: list[str]) -> MultiScope:
    """Lay out every language with its share; the layout of a single run too, for the dry-run's comparison."""
    budget = total_budget(args, settings, executor, len(langs))
    first = {l: launch.prepare(lang_args(args, l), settings, executor, budget=budget) for l in langs}
    shares = share_budget([first[l].lay.compressed_bytes for l in langs], budget - 2)
    scopes = {}
    for l, share in zip(langs, shares):
        sc = first[l]
        lay = scope.make_layout(lang_args(args, l), settings, sc.shards, {**sc.sample.complete, **sc.known}, executor,
                                sc.sample.compressed_per_doc, sc.sample.text_per_doc, budget=share + 2,
                                sample=sc.sample)
        scopes[l] = launch.Scope(sc.subset, sc.shards, sc.sample, lay, sc.known)
    return MultiScope(langs, scopes, {l: first[l].lay for l in langs}, budget)


def default_run_dir(args: argparse.Namespace, subset: str, langs: list[str]) -> Path:
    wds = (args.wds or "all").replace(",", "_")
    name = "all" if args.lang == "all" else f"{langs[0]}+{len(langs) - 1}" if len(langs) > 1 else langs[0]
    return home() / "runs" / f"{args.corpus}-{subset}-multi-{name}-{wds}"


def check_language_outs(args: argparse.Namespace, ms: MultiScope) -> list[str]:
    """Each OUT/<LANG> checked as a single run checks its OUT (--dry-run included); what each holds now."""
    from shard_pipeline.contract.shard import check_replaceable
    from shard_pipeline.submit import guards

    root_out = args.out.resolve()
    if (root_out / MANIFEST_NAME).exists():
        raise UsageError(f"--out {root_out} is itself an output (it holds {MANIFEST_NAME}); a multi-language "
                         "run writes OUT/<LANG>/ into it, which that output does not list: choose another --out")
    holds = []
    for lang in ms.langs:
        out, la = root_out / lang, lang_args(args, lang)
        held = check_replaceable(out)
        guards.check_same_dataset(out, held, launch.dataset_name(la, ms.scopes[lang].subset), args.replace_other)
        holds.append(guards.out_holds(out, held))
    return holds


def new_multi_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from shard_pipeline.submit.multi_report import describe_multi
    from shard_pipeline.submit.multi_start import start_multi

    settings = scope.resolve_settings(args)  # CPUS_PER_TASK / --cpus-per-task: C global units per array task
    executor = scope.choose_executor(args)
    langs = languages(args, settings)
    ms = prepare_all(args, settings, executor, langs)
    if executor == "slurm" and args.run_dir is not None:  # at --dry-run too
        from shard_pipeline.submit.executors.slurm import check_log_dir

        check_log_dir(args.run_dir.resolve())
    if executor == "slurm":  # at --dry-run too: each language's array tasks as its layout sizes them
        from shard_pipeline.submit.slurm_limits import check_layout

        for lang in langs:
            check_layout(ms.scopes[lang].lay.resources, settings.worker_partition)
    holds = check_language_outs(args, ms) if args.out is not None else []
    if args.dry_run:
        print(describe_multi(args, ms, executor, settings))
        print("\n".join(holds))
        print("dry run: nothing written, nothing submitted")
        return 0
    if args.out is None:
        raise UsageError("--out is required (the root folder; each language goes to OUT/<LANG>/)")
    root_out = args.out.resolve()
    subset = ms.scopes[langs[0]].subset
    root = (args.run_dir or default_run_dir(args, subset, langs)).resolve()
    if root.exists():
        raise UsageError(f"run directory {root} exists; use --resume {root} or move it away")
    if root == root_out or root_out in root.parents or root in root_out.parents:
        raise UsageError("--out and --run-dir must not contain each other")
    m = multi.unit_table(root, [(l, ms.scopes[l].lay.partition_tasks, ms.scopes[l].lay.write_tasks) for l in langs],
                         settings.cpus_per_task)
    cfgs = create_all(args, argv, settings, executor, ms, root_out, m)
    with run_lock(root):
        tasks = {s: list(range(m.size(s))) for s in ("partition", "write")}
        tasks.update({s: list(range(m.size(s))) for s in multi.SINGLE_JOB_STAGES})
        return start_multi(m, cfgs, tasks, executor, args.jobs, settings, "submit")


def unit_scope(sc: launch.Scope) -> launch.Scope:
    """A language's scope with one unit's resources: in a multi-language run the array task, not the
    language's run dir, groups units (C global units, of any language; run/multi.py), so the
    language's run dir keeps what one unit needs and its --status counts units as a C = 1 run."""
    from shard_pipeline.submit.layout import unit_resources

    return dataclasses.replace(sc, lay=dataclasses.replace(sc.lay, resources=unit_resources(sc.lay.resources), cpus=1,
                                                           partition_groups=sc.lay.partition_tasks,
                                                           write_groups=sc.lay.write_tasks))


def create_all(args, argv, settings, executor, ms: MultiScope, root_out: Path, m: multi.MultiRun) -> dict:
    """RUNDIR, one ordinary run dir per language, languages.json; undone (claims and all) if any language fails."""
    root = m.root
    root.mkdir(parents=True)
    cfgs, made = {}, []
    try:
        for l in ms.langs:
            out = root_out / l
            cfgs[l] = launch.create_run(lang_args(args, l), argv, settings, executor, unit_scope(ms.scopes[l]), out,
                                        RunDir(m.lang_dir(l)))
            made.append(out)
        write_json_atomic(root / multi.LANGUAGES_JSON, {**m.to_json(), "out": str(root_out)})
        for sub in ("tasks", *(f"logs/{s}" for s in STAGES)):  # Slurm opens the logs of every job here
            (root / sub).mkdir(parents=True, exist_ok=True)
        write_json_atomic(root / "run.json", {
            "run_format": RUN_FORMAT, "multi_format": multi.MULTI_FORMAT, "argv": ["hplt-shard", *argv],
            "languages": ms.langs, "executor": executor, "code": launch.git_state(), "out": str(root_out),
            "budget": ms.budget, "time_limit": settings.time_limit, "submissions": [],
        })
    except BaseException:
        for out in made:
            release(out, m.lang_dir(out.name))
        shutil.rmtree(root, ignore_errors=True)
        raise
    return cfgs


def resume_multi(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Redo, per language, only what is unfinished; finished languages are left alone."""
    from shard_pipeline.run.claim import check_claimable, claim
    from shard_pipeline.run.resume import (
        ResumeRefused,
        changed_inputs,
        describe,
        plan_resume,
        refuse_live_tasks,
        run_job_ids,
    )
    from shard_pipeline.run.runconfig import RunConfig
    from shard_pipeline.submit.args import build_parser
    from shard_pipeline.submit.executors.slurm import queued_jobs_of
    from shard_pipeline.submit.multi_start import start_multi
    from shard_pipeline.submit.resume_args import (
        keep_resources,
        resume_resources,
        with_resources,
        with_settings,
    )

    root = args.resume.resolve()
    m = multi.load(root)
    record = read_json(root / "run.json")
    resources = resume_resources(build_parser(), argv, record)  # as a single run's resume: same options, same rules
    asked = resources.get("cpus_per_task")
    if asked is not None and int(asked) != m.units_per_task("partition"):
        raise UsageError(f"--cpus-per-task {asked}: a multi-language run keeps the cores per array task it was "
                         f"submitted with ({m.units_per_task('partition')}), because its array indices name groups "
                         "of units across languages; resume without --cpus-per-task")
    executor = scope.choose_executor(args, record["executor"])
    if record.get("run_format", 1) != RUN_FORMAT:
        raise ResumeRefused(f"{root} was made by another hplt-shard version (format {record.get('run_format')}); "
                            f"this version reads format {RUN_FORMAT}")
    with run_lock(root):
        refuse_live_tasks(root, *(m.lang_dir(l) for l in m.langs))
        if shutil.which("squeue"):
            queued = queued_jobs_of(run_job_ids(RunDir(root)))
            if queued:
                raise ResumeRefused(f"jobs of this run are still queued or running: {', '.join(queued)}; "
                                    "wait for them or scancel them first")
        cfgs = {l: with_resources(RunConfig.from_json(read_json(RunDir(m.lang_dir(l)).config_json)), resources)
                for l in m.langs}
        changed = [f"{l}: {c}" for l in m.langs for c in changed_inputs(RunDir(m.lang_dir(l)), cfgs[l])]
        if changed:
            raise ResumeRefused("input shards changed since the run was submitted (shard_inventory.tsv): " + "; ".join(changed))
        tasks: dict[str, list[int]] = {s: [] for s in ("partition", "plan", "write", "finalize")}
        todo = []
        for l in m.langs:
            rp = plan_resume(RunDir(m.lang_dir(l)))
            if rp.done:
                print(f"  {l}: done")
                continue
            todo.append(l)
            print(f"  {l}:\n" + "\n".join("  " + line for line in describe(rp).splitlines()))
            for stage, ts in rp.tasks.items():
                tasks[stage] += [m.global_index(stage, l, t) for t in ts]
        if not todo:
            print(f"{root}: already done; outputs under {record.get('out')}")
            return 0
        settings = with_settings(scope.resolve_settings(args), resources) if executor == "slurm" else None
        if settings is not None:  # what the chain would queue, with this resume's --mem/--time/--partition
            from shard_pipeline.submit.multi_start import chain_resources
            from shard_pipeline.submit.slurm_limits import check_layout

            check_layout(chain_resources(m, {l: cfgs[l] for l in todo}, tasks), settings.worker_partition)
        print(f"resuming {root}: {len(todo)} of {plural(len(m.langs), 'language')} unfinished ({', '.join(todo)})")
        if args.dry_run:
            print("dry run: nothing submitted")
            return 0
        for l in todo:  # refused (another run, a publish) before anything below changes
            check_claimable(Path(cfgs[l].execution.out), m.lang_dir(l))
        for g in tasks["plan"]:  # a stale plan must not feed the writes of a chain that waits with afterany
            RunDir(m.lang_dir(m.locate("plan", g)[0])).plan_json.unlink(missing_ok=True)
        for l in todo:
            claim(Path(cfgs[l].execution.out), m.lang_dir(l))
        keep_resources(root / "run.json", resources)
        return start_multi(m, {l: cfgs[l] for l in todo}, tasks, executor, args.jobs, settings, "resume")
