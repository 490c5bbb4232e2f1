"""`--resume RUNDIR`: a plan of what is left (per language), checked as the stages would check it, then
applied as a new run is (create.py), with one rollback if the submission is refused. A resume may change the
resources of the resubmitted tasks (kept in run.json for later resumes), never the content."""
from __future__ import annotations

import dataclasses
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline import slurm
from shard_pipeline.access import resume_refusal, share_like
from shard_pipeline.errors import ExitCode, UsageError
from shard_pipeline.files import write_bytes_atomic, write_json_atomic
from shard_pipeline.run import unit_table
from shard_pipeline.run.claim import check_claimable, claim, run_lock
from shard_pipeline.run.rulebook import resume_preflight
from shard_pipeline.run.registry import STAGE_NAMES, since_done
from shard_pipeline.run.resume import ResumeRefused, changed_inputs, plan_resume, refuse_live_tasks, run_job_ids
from shard_pipeline.run.resume import describe as describe_resume
from shard_pipeline.run.rundir import RunDir, check_whole
from shard_pipeline.run.runconfig import RunConfig, load_config
from shard_pipeline.submit import layout as layout_mod
from shard_pipeline.submit import guards, scope
from shard_pipeline.submit.create import start, until_started
from shard_pipeline.submit.args import command_line
from shard_pipeline.submit.args import Request
from shard_pipeline.submit.settings import check_setting
from shard_pipeline.submit.slurm_limits import check_layout
from shard_pipeline.units import plural
from shard_pipeline.run.run_json import read_run_json


@dataclass
class Left:
    """What a resume has left to do: the global units per stage, the unfinished languages (those whose plan
    runs again apart: it makes OUT.tmp), and one report line per language."""

    tasks: dict[str, list[int]] = field(default_factory=lambda: {s: [] for s in STAGE_NAMES})
    todo: list[str] = field(default_factory=list)
    planning: list[str] = field(default_factory=list)
    report: list[str] = field(default_factory=list)


def resume_root(args: Request) -> Path:
    """The run dir a resume works on (a language's run dir resumes its run), refused early
    when it is no run dir, not whole, or not ours to write."""
    guards.check_numbers(args)  # --jobs -3 on a resume too
    root = args.resume.resolve()
    if unit_table.is_run_root(root.parent):  # a language's run dir: two chains for one language would race
        print(f"hplt-shard: {root} is {root.name} of the run {root.parent}: resuming that run (only what is "
              "unfinished, in every language)", file=sys.stderr)
        root = root.parent
    check_whole(root)
    if not RunDir(root).run_json.exists():  # a run of another format is refused by its run.json (check_this_version)
        raise UsageError(f"{root} is not a hplt-shard run directory (no run.json)")
    if (why := resume_refusal(root)) is not None:  # a colleague's run made under umask 022: before any lock or warning
        raise ResumeRefused(why)
    if (group_note := share_like(root)) is not None:  # a colleague's resume writes what the run's owner can still read
        print(f"hplt-shard: warning: {group_note}", file=sys.stderr)
    return root


def refuse_running(root: Path, dirs: dict[str, RunDir], record: dict) -> None:
    """No job of the run queued, no task of it alive: else two attempts would write the same files."""
    from shard_pipeline.run.runstate import ran_locally
    from shard_pipeline.submit.executors.slurm import queued_jobs_of

    answered = shutil.which("squeue") is not None
    if answered:  # first: once none is queued, records of Slurm tasks are stale
        queued = queued_jobs_of(run_job_ids(RunDir(root)))
        if queued:
            raise ResumeRefused(f"jobs of this run are still queued or running: {', '.join(queued)}; "
                                "wait for them or scancel them first")
    refuse_live_tasks(*dict.fromkeys([root, *(d.root for d in dirs.values())]),  # RUNDIR and each language's
                      local=ran_locally(record), squeue_answered=answered,
                      done=all(d.done_marker.exists() for d in dirs.values()))


def refuse_changed_inputs(dirs: dict[str, RunDir], cfgs: dict[str, RunConfig]) -> None:
    from shard_pipeline.run.next_step import new_run_command

    changes = {l: changed_inputs(d, cfgs[l]) for l, d in dirs.items()}
    changed = [f"{l}: {c}" for l, cs in changes.items() for c in cs]
    if changed:
        fresh = [cmd for l, cs in changes.items() if cs and (cmd := new_run_command(dirs[l], "new"))]
        raise ResumeRefused("input shards changed since the run was submitted (shard_inventory.tsv): "
                            + "; ".join(changed) + "; a run reads its inputs exactly as listed: restore them "
                            "(same size and mtime) and resume again, or start a new run to read them as they are now"
                            + (":\n" + "\n".join(f"    {cmd}" for cmd in fresh) if fresh else ""))


def what_is_left(table: unit_table.UnitTable, dirs: dict[str, RunDir], cfgs: dict[str, RunConfig]) -> Left:
    """Each language's resume plan, in global units; finished languages are left alone."""
    left = Left()
    for l, d in dirs.items():
        rp = plan_resume(d)
        if rp.done:
            left.report.append(f"  {l}: done{since_done(d, Path(cfgs[l].execution.out))}")
            continue
        left.todo.append(l)
        if rp.tasks.get("plan"):  # the plan makes OUT.tmp: a staging folder not this run's would stop it there
            left.planning.append(l)
        left.report.append(f"  {l}:\n" + "\n".join("  " + line for line in describe_resume(rp).splitlines()))
        for stage, ts in rp.tasks.items():
            left.tasks[stage] += [table.global_index(stage, l, t) for t in ts]
    return left


def say_done(root: Path, record: dict, cfgs: dict[str, RunConfig], left: Left) -> None:
    """A resume of a run already done: where its output is (the root of a run of several languages, else
    the one language's OUT), then a line per language whose output changed since (as --status says)."""
    out = record.get("out") or next(iter(cfgs.values())).execution.out
    print("\n".join([f"{root}: already done; output at {out}"] + [line for line in left.report if "; but " in line]))


def say_left(root: Path, table: unit_table.UnitTable, left: Left) -> None:
    """What a resume does, per language (a list of one for one language)."""
    print("\n".join(left.report))
    print(f"resuming {root}: {len(left.todo)} of {plural(len(table.langs), 'language')} unfinished "
          f"({', '.join(left.todo)})")


def refuse_early(args: Request, root: Path, dirs: dict[str, RunDir], cfgs: dict[str, RunConfig], left: Left) -> None:
    """What reading alone can refuse (another run, a staging folder not ours): a dry run says it too."""
    from shard_pipeline.run.short_inputs import read_so_far, refuse_short_inputs

    for l in left.todo:
        resume_preflight(dirs[l], cfgs[l], l in left.planning, root)
        if l in left.planning:  # else the plan refuses it, after the whole partition stage
            refuse_short_inputs(cfgs[l], dirs[l].root, read_so_far(dirs[l], cfgs[l]),
                                args.release_changed or cfgs[l].execution.release_changed)


def resume_run(args: Request, argv: Sequence[str]) -> int:
    """Redo, per language, only what is unfinished; same bytes as an uninterrupted run. Finished
    languages are left alone."""
    from shard_pipeline.run.next_step import check_this_version

    root = resume_root(args)
    record = read_run_json(RunDir(root).run_json)
    check_this_version(root, record)  # before anything of it is read
    table = unit_table.load(root)
    resources = resume_resources(argv, record)  # a later resume keeps an earlier --mem
    executor = scope.choose_executor(args, record["executor"])
    dirs = {l: RunDir(table.lang_dir(l)) for l in table.langs}
    with run_lock(root):
        refuse_running(root, dirs, record)
        cfgs = {l: with_resources(load_config(d), resources) for l, d in dirs.items()}
        refuse_changed_inputs(dirs, cfgs)
        table = unit_table.with_cpus(table, resources.get("cpus_per_task"))  # a resume may regroup the units
        left = what_is_left(table, dirs, cfgs)
        if not left.todo:
            say_done(root, record, cfgs, left)
            return ExitCode.OK
        cfgs = {l: cfgs[l] for l in left.todo}
        settings = with_settings(scope.resolve_settings(args), resources) if executor == "slurm" else None
        if settings is not None:  # what the chain would queue, with this resume's --mem/--time/--cpus-per-task/--partition
            fixed_time = layout_mod.time_is_fixed({**record, "resources": resources})
            check_layout(layout_mod.chain_resources(table, cfgs, left.tasks, fixed_time), settings.worker_partition)
        say_left(root, table, left)
        refuse_early(args, root, dirs, cfgs, left)
        if args.dry_run:
            print("dry run: nothing submitted")
            return ExitCode.OK
        return apply_resume(args, root, table, dirs, cfgs, left, executor, settings, resources, record)


def apply_resume(args: Request, root: Path, table: unit_table.UnitTable, dirs: dict[str, RunDir],
                 cfgs: dict[str, RunConfig], left: Left, executor: str, settings, resources: dict[str, Any],
                 record: dict) -> int:
    """Claim every unfinished language's OUT and start what is left; a refused submission puts back
    what this resume changed in the run dir."""
    from shard_pipeline.submit.executors.slurm import SubmitError

    for l in left.todo:  # refused (a folder that cannot take a claim, a publish) before anything below changes
        check_claimable(Path(cfgs[l].execution.out), dirs[l].root)
    for g in left.tasks["plan"]:  # a stale plan must not feed the writes of a chain that waits with afterany
        dirs[table.locate("plan", g)[0]].plan_json.unlink(missing_ok=True)
    with until_started(root, {Path(cfgs[l].execution.out): dirs[l].root for l in left.todo}, executor):
        for l in left.todo:
            claim(Path(cfgs[l].execution.out), dirs[l].root)
        table_before = RunDir(root).languages_json.read_bytes()
        unit_table.save_cpus(table)
        if args.release_changed:  # the plan and finalize of each unfinished language read it there
            cfgs = {l: with_resources(keep_release_changed(dirs[l]), resources) for l in left.todo}
        kept = record.get("resources")
        if resources:
            record_resources(RunDir(root).run_json, resources)
            print(f"resources for the resubmitted tasks: {', '.join(f'{k}={v}' for k, v in resources.items())}")
        try:
            return start(table, cfgs, left.tasks, executor, args.jobs, settings, "resume")
        except SubmitError as exc:  # nothing of this submission stays queued
            # units stay grouped as the jobs that ran them (--status maps by it)
            write_bytes_atomic(RunDir(root).languages_json, table_before)
            if slurm.refusal_kind(str(exc).split("\n")[0]) == "request":  # a bad --account: not for the next resume
                record_resources(RunDir(root).run_json, kept)
            raise


# Options a resume applies (dest -> the conf key whose rules they follow) and the ones it just
# uses (how to run, not what).
APPLIED = {"mem": "WORKER_MEM", "time": "TIME_LIMIT", "worker_partition": "WORKER_PARTITION", "account": "ACCOUNT",
           "max_tasks": "MAX_TASKS", "cpus_per_task": "CPUS_PER_TASK"}
NEUTRAL = ("resume", "executor", "jobs", "conf", "preset", "dry_run")
ACCEPTS = ("release_changed",)  # the explicit word a refusal asked for (input/index_check.py), kept in config.json


def given_options(argv: Sequence[str], quiet: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """The options present on the command line (dest -> value; defaults left out), and every option's flag.

    `quiet`: a command line that does not parse raises ValueError, printing nothing."""
    parser, flags = command_line(given_only=True, quiet=quiet)
    return vars(parser.parse_args(list(argv))), flags


def made_with(recorded_argv: Sequence[str] | None) -> dict[str, Any]:
    """The options the run was submitted with (run.json "argv", program name first); {} when unknown."""
    if not recorded_argv:
        return {}
    try:
        return given_options(list(recorded_argv)[1:], quiet=True)[0]
    except ValueError:  # recorded by a version with other options
        return {}


def check_resume_options(argv: Sequence[str], recorded_argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Refuse every option a resume cannot honour, named (one given as the run was made with it is
    harmless, and ignored); return the resource overrides given."""
    given, flags = given_options(argv)
    original = made_with(recorded_argv)
    refused = sorted(d for d in given if d not in (*APPLIED, *NEUTRAL, *ACCEPTS)
                     and not (d in original and original[d] == given[d]))
    if refused:
        names = ", ".join(flags.get(d, d) for d in refused)
        raise UsageError(f"--resume continues a run exactly as it was made: {names} cannot change on resume "
                         "(they decide the content or the run's layout; given as the run was made with them, "
                         "they are ignored); start a new run for that. "
                         "A resume may change --mem, --time, --cpus-per-task, --partition, --account and --max-tasks, "
                         "and take --release-changed")
    overrides = {d: given[d] for d in APPLIED if d in given}
    for dest, value in overrides.items():  # the rules a submission's --mem, --time, ... follow
        check_setting(APPLIED[dest], str(value), flags.get(dest, dest))
    return overrides


def resume_resources(argv: Sequence[str], record: dict[str, Any]) -> dict[str, Any]:
    """This resume's resource options over those of earlier resumes (run.json "resources"): a later
    resume keeps an earlier --mem or --partition unless it gives another."""
    return {**record.get("resources", {}), **check_resume_options(argv, record.get("argv"))}


def with_resources(cfg: RunConfig, resources: dict[str, Any]) -> RunConfig:
    """The run's config with a resume's --mem/--time (execution only: never hashed). A language's run dir
    keeps one unit's resources: C lives in languages.json (run/unit_table.py with_cpus)."""
    return RunConfig(cfg.content, cfg.execution.with_resources(resources.get("mem"), resources.get("time")))


def keep_release_changed(run: RunDir) -> RunConfig:
    """Record a resume's --release-changed in config.json's execution, where the plan and finalize read it
    (never hashed: the content and its hash stay). Returns the config as written."""
    on_disk = load_config(run)
    new = RunConfig(on_disk.content, dataclasses.replace(on_disk.execution, release_changed=True))
    if new != on_disk:
        write_json_atomic(run.config_json, new.to_json())
    return new


def with_settings(settings, resources: dict[str, Any]):
    """The submitter's settings with a resume's --partition, --account and --max-tasks (earlier ones kept)."""
    kept = {dest: int(v) if dest == "max_tasks" else str(v) for dest, v in resources.items()
            if dest in ("worker_partition", "account", "max_tasks")}
    return dataclasses.replace(settings, **kept) if settings is not None and kept else settings


def record_resources(run_json: Path, resources: dict[str, Any] | None) -> None:
    """run.json's "resources": a resume's, for later resumes and --status; none when `resources` is empty."""
    record = read_run_json(run_json)
    if resources:
        record["resources"] = resources
    else:
        record.pop("resources", None)
    write_json_atomic(run_json, record)
