"""Slurm executor: every stage submitted at once with plain sbatch, chained by afterany (one language's failure
must not cancel the others'), no orchestrator job. Values reach the fixed slurm_job.sh as argv elements.
"""
from __future__ import annotations

import base64
import getpass
import hashlib
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from shard_pipeline import slurm
from shard_pipeline.errors import ExitCode, UsageError, UserError
from shard_pipeline.paths import JOB_SCRIPT, checkout_root
from shard_pipeline.run.registry import STAGE_NAMES, STAGES
from shard_pipeline.run.runconfig import RunConfig, StageResources
from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.render import queued_lines
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.runstate import refusal_next_step
from shard_pipeline.run.unit_table import UnitTable, record_submission
from shard_pipeline.submit.layout import array_throttle, chain_resources, time_is_fixed
from shard_pipeline.units import REQUEUE_SIGNAL_SECONDS, plural
from shard_pipeline.run.run_json import read_run_json

DEFAULT_MAX_ARRAY_SIZE = 1001


class SubmitError(UserError):
    """sbatch refused a submission; the jobs already queued for the run were cancelled."""

    cancelled: tuple[str, ...] = ()  # the job ids this run had queued before the refusal


@dataclass(frozen=True)
class StageJobs:
    """The sbatch options of one stage; tasks are array indices 0..tasks-1 (or a sparse list)."""

    stage: str
    tasks: tuple[int, ...]  # array indices: units, or groups of C units for partition and write
    resources: StageResources  # as the layout decided them, per array task
    throttle: int | None = None


def max_array_size() -> int:
    """The cluster's MaxArraySize (array indices must stay below it); Slurm's default if unreadable."""
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", slurm.call(["scontrol", "show", "config"], 30).stdout, re.M)
    return int(m.group(1)) if m else DEFAULT_MAX_ARRAY_SIZE


def queued_jobs(account: str | None = None) -> int:
    """Jobs the user has queued (pending + running, each array task counted): what submit caps count;
    with `account`, only that account's (an association's MaxSubmitJobs counts those)."""
    user = getpass.getuser()
    a = slurm.call(["squeue", "-h", "-r", "-u", user, *(["-A", account] if account else []), "-o", "%i"], 60)
    if not a.ok:  # the room cannot be known: refuse rather than queue over a cap
        raise SubmitError(f"cannot count your queued jobs (squeue: {a.why()}); the submit cap needs it")
    return len([l for l in a.stdout.splitlines() if l.strip()])


def queued_jobs_of(job_ids: Sequence[str]) -> list[str]:
    """Which of these jobs (array ids cover their tasks) are still pending or running."""
    if not job_ids:
        return []
    a = slurm.call(["squeue", "-h", "-r", f"--jobs={','.join(job_ids)}", "-o", "%i %T"], 60)
    if a.ran and not a.ok and "Invalid job id" in a.stderr:
        return []  # Slurm has forgotten them all: none is queued
    if not a.ok:  # a resume must not start while it cannot tell whether the run's jobs still run
        raise SubmitError(f"squeue failed: {a.why()}")
    return [l.strip() for l in a.stdout.splitlines() if l.strip()]


def array_chunks(tasks: Sequence[int], max_size: int) -> list[tuple[int, list[int]]]:
    """Split task indices into (offset, local indices) chunks whose indices stay below MaxArraySize."""
    chunks: dict[int, list[int]] = {}
    for t in sorted(tasks):
        offset = (t // max_size) * max_size
        chunks.setdefault(offset, []).append(t - offset)
    return sorted(chunks.items())


def array_spec(local: Sequence[int], throttle: int | None) -> str:
    """Compact '0-9,12,15-17' with an optional '%N' throttle."""
    parts, i = [], 0
    local = sorted(local)
    while i < len(local):
        j = i
        while j + 1 < len(local) and local[j + 1] == local[j] + 1:
            j += 1
        parts.append(str(local[i]) if i == j else f"{local[i]}-{local[j]}")
        i = j + 1
    spec = ",".join(parts)
    return f"{spec}%{throttle}" if throttle else spec


def job_tag(rundir: Path, lang: str) -> str:
    """3 characters of the language and 4 of a hash of the run dir's absolute path: two runs of one
    language (another user's too) differ, and the same run dir always gets the same tag."""
    lang3 = (re.sub(r"[^a-z0-9]", "", lang.lower()) + "xxx")[:3]
    digest = hashlib.sha256(str(Path(rundir).absolute()).encode()).digest()
    return lang3 + base64.b32encode(digest).decode().lower()[:4]


def job_names(rundir: Path, lang: str) -> dict[str, str]:
    """Every stage's job name, 8 characters (e.g. `Pspa3kq7`, `Lspa3kq7`, `Wspa3kq7`, `Fspa3kq7`)."""
    tag = job_tag(rundir, lang)
    return {s.name: s.letter + tag for s in STAGES}


def job_lang(langs: Sequence[str]) -> str:
    """What the job names show of the languages (job_names): "fin_Latn", or "mul" for several."""
    return langs[0] if len(langs) == 1 else "mul"


def watch_command(rundir: Path, lang: str) -> str:
    """The squeue line that shows this run's jobs and nothing else."""
    return f"squeue --me -n {','.join(job_names(rundir, lang).values())}"


@dataclass(frozen=True)
class SlurmSettings:
    partition: str
    account: str | None
    python: str
    module_loads: tuple[str, ...]
    job_lang: str  # job_lang: "fin_Latn", or "mul" for several


def check_log_dir(rundir: Path) -> None:
    """Refuse a run dir Slurm cannot name logs in: a backslash anywhere in --output turns every
    %-replacement off (sbatch, "filename pattern"), so the array tasks would share one literal name."""
    if "\\" in str(rundir):
        raise UsageError(f"the run directory {rundir} contains a backslash, which makes Slurm ignore the %A/%a "
                          "in the jobs' log names (sbatch \"filename pattern\"); choose a run directory without '\\' "
                          "(--run-dir)")


def output_pattern(rundir: Path, stage: str) -> str:
    """sbatch --output of a stage's array tasks: RUNDIR/logs/STAGE/%A_%a.log, with every '%' of the run
    dir itself written '%%' so that Slurm does not expand a %j or %u that is part of a folder's name."""
    check_log_dir(rundir)
    return str(RunDir(Path(str(rundir).replace("%", "%%"))).array_log(stage, "%A", "%a"))


def sbatch_argv(s: SlurmSettings, stage: StageJobs, rundir: Path, offset: int, local: Sequence[int],
                depends_on: Sequence[str]) -> list[str]:
    argv = ["sbatch", "--parsable", "--partition", s.partition]
    if s.account:
        argv += ["--account", s.account]
    argv += [
        "--job-name", job_names(rundir, s.job_lang)[stage.stage],
        "--array", array_spec(local, stage.throttle),
        "--output", output_pattern(rundir, stage.stage),
        "--ntasks", "1",
        "--cpus-per-task", str(stage.resources.cpus),
        "--mem", stage.resources.mem,
        "--time", stage.resources.time,
        "--requeue",
        f"--signal=B:USR1@{REQUEUE_SIGNAL_SECONDS}",
        "--open-mode=append",
    ]
    if depends_on:
        argv += ["--dependency", "afterany:" + ":".join(depends_on), "--kill-on-invalid-dep=yes"]
    argv += [str(JOB_SCRIPT), s.python, str(checkout_root() or "-"), stage.stage, str(rundir), str(offset), *s.module_loads]
    return argv


def submit_chain(s: SlurmSettings, rundir: Path, stages: Sequence[StageJobs], max_size: int) -> list[dict]:
    """Submit every stage now; each waits (afterany) on every array chunk of the stage before it. One entry per
    array chunk queued, in submission order."""
    jobs: list[dict] = []
    previous: list[str] = []
    try:
        for stage in stages:
            current = []
            for offset, local in array_chunks(stage.tasks, max_size):
                argv = sbatch_argv(s, stage, rundir, offset, local, previous)
                a = slurm.call(argv, 120)
                if not a.ok:
                    raise SubmitError(f"sbatch for {stage.stage} failed ({a.returncode}): {a.why()}"
                                      + refusal_step(a.why(), rundir, len(jobs)))
                job_id = a.stdout.strip().split(";")[0]
                if not job_id.isdigit():
                    raise SubmitError(f"sbatch for {stage.stage} answered {a.stdout!r}, not a job id")
                current.append(job_id)
                jobs.append({"stage": stage.stage, "job_id": job_id, "offset": offset,
                                 "array": array_spec(local, stage.throttle), "tasks": len(local), "argv": argv})
            previous = current
    except BaseException as exc:
        ids = [j["job_id"] for j in jobs]
        if ids:
            slurm.call(["scancel", *ids], 120)
        if isinstance(exc, SubmitError):
            exc.cancelled = tuple(ids)
        raise
    return jobs


def refusal_step(stderr: str, rundir: Path, queued: int) -> str:
    """The next step after sbatch refused a stage (runstate.refusal_next_step, as --status says it)."""
    cancelled = (f"the {plural(queued, 'array')} already queued for this run {'was' if queued == 1 else 'were'} "
                 "cancelled; " if queued else "")
    return f"\n{cancelled}nothing of this run runs. {refusal_next_step(rundir, stderr)}"


def record_refusal(run: RunDir, kind: str, exc: SubmitError) -> None:
    """Keep in run.json that sbatch refused this submission and which jobs were cancelled: --status
    names it and --resume starts again from what is done."""
    record = read_run_json(run.run_json)
    record.setdefault("refused_submissions", []).append(
        {"kind": kind, "refused_at": time.time(), "message": str(exc).split("\n")[0], "cancelled": list(exc.cancelled)})
    write_json_atomic(run.run_json, record)


def submit_run(table: UnitTable, cfgs: dict[str, RunConfig], t: dict[str, list[int]], settings, kind: str) -> int:
    """Queue every stage that has units now, each after the one before with afterany: one language's failure
    must not cancel the others' chain; a failed language's later units fail at once, naming why."""
    python = next(iter(cfgs.values())).execution.python
    tag = job_lang(table.langs)
    s = SlurmSettings(settings.worker_partition, settings.account, python, settings.module_loads, tag)
    fixed_time = time_is_fixed(read_run_json(RunDir(table.root).run_json))
    resources = chain_resources(table, cfgs, t, fixed_time)
    # Array indices are groups of C units (worker/group.py): a resume resubmits the groups holding unfinished units.
    arrays = {stage: table.array_indices(stage, t[stage]) for stage in STAGE_NAMES if t.get(stage)}
    throttle = array_throttle(len(arrays.get("partition", [])), len(arrays.get("write", [])), settings.max_tasks)
    stages = [StageJobs(stage, tuple(arrays[stage]), resources[stage], throttle if table.is_array(stage) else None)
              for stage in arrays]
    try:
        jobs = submit_chain(s, table.root, stages, max_array_size())
    except SubmitError as exc:
        record_refusal(RunDir(table.root), kind, exc)
        raise
    record_submission(table, kind, t, jobs, {
        "stages": {st: asdict(r) for st, r in resources.items()}, "partition": settings.worker_partition,
        "account": settings.account, "max_tasks": settings.max_tasks})
    lands = {lang: (RunDir(table.lang_dir(lang)).done_marker, Path(cfg.execution.out)) for lang, cfg in cfgs.items()}
    print("\n".join(queued_lines(table.root, jobs, watch_command(table.root, tag), lands)))
    return ExitCode.OK
