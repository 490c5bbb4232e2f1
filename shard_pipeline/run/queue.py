"""What the scheduler says of a run's jobs: squeue's states and reasons, sacct's (or the log's) reason
a task ended, and the resume options that reason calls for."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from shard_pipeline import slurm
from shard_pipeline.errors import ExitCode, UserError
from shard_pipeline.run.runconfig import RunConfig, StageResources
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.steps import Resume
from shard_pipeline.units import UNIT_MEMORY_FLOOR, Memory, WallTime
from shard_pipeline.run.run_json import read_run_json


def latest_jobs(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per stage, the array chunks of the most recent submission that included that stage."""
    out: dict[str, list[dict[str, Any]]] = {}
    for sub in record.get("submissions", []):
        stages = {j["stage"] for j in sub["jobs"]}
        for stage in stages:
            out[stage] = [j for j in sub["jobs"] if j["stage"] == stage]
    return out


class SlurmUnreachable(UserError):
    """squeue could not reach the controller: which jobs are queued is unknown, so no state is claimed."""

    exit_code = ExitCode.FAILED


# squeue's words for ids the controller has forgotten (long finished): an answer, not a failure to answer
_FORGOTTEN = "Invalid job id specified"


def squeue_states(job_ids: list[str], run=subprocess.run, *, strict: bool = False) -> dict[str, str]:
    """'<array id>_<task>' -> 'STATE|REASON' for the still-queued tasks of these arrays; jobs Slurm forgot are
    absent. With `strict` (--status) squeue must answer: any state it does not give would be a guess."""
    if not job_ids:
        return {}
    answer = slurm.call(["squeue", "-h", "-r", f"--jobs={','.join(job_ids)}", "-o", "%i|%T|%r"], 60, run)
    if strict and not answer.ok and _FORGOTTEN not in answer.stderr:
        raise SlurmUnreachable(f"Slurm did not answer ({answer.why()}): whether this run's jobs are still queued is "
                               "unknown, so --status says no state; ask again once squeue answers (squeue --me)")
    return parse_squeue(answer.stdout)


def parse_squeue(text: str) -> dict[str, str]:
    """squeue -o '%i|%T|%r' lines -> {'123_4': 'PENDING|PartitionConfig'}."""
    states = {}
    for line in text.splitlines():
        jid, _, rest = line.strip().partition("|")
        if jid:
            states[jid] = rest
    return states


def split_queued(value: str | None) -> tuple[str | None, str]:
    """('PENDING', 'PartitionConfig') from squeue_states' value; (None, '') when Slurm does not hold the task."""
    if value is None:
        return None, ""
    state, _, reason = value.partition("|")
    return state, reason


_LOG_REASONS = (  # what slurmstepd / slurmd write into a task's log when Slurm ends it
    (re.compile(r"oom[-_ ]kill|out of memory|OUT_OF_MEMORY", re.I), "OUT_OF_MEMORY"),
    (re.compile(r"DUE TO TIME LIMIT|TIMEOUT", re.I), "TIMEOUT"),
    (re.compile(r"DUE TO NODE FAIL|NODE_FAIL", re.I), "NODE_FAIL"),
    (re.compile(r"DUE TO PREEMPTION|PREEMPTED", re.I), "PREEMPTED"),
    (re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ \*\*\*"), "CANCELLED"),  # scancel: no "DUE TO"
)
SACCT_REASONS = ("OUT_OF_MEMORY", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "CANCELLED")  # a task ended from outside


def slurm_reason(log: Path, run=subprocess.run) -> str | None:
    """Why Slurm ended a task (OUT_OF_MEMORY, TIMEOUT, ...): from sacct when it remembers the job, else from the
    lines Slurm wrote into the log; None if unknown. A unit is asked of as its group's array task, whose log
    (`<job>_<index>.log`) holds Slurm's lines."""
    m = re.fullmatch(r"(\d+)_(\d+)(\.unit\d+)?\.log", log.name)
    if m and m[3]:
        log = log.with_name(f"{m[1]}_{m[2]}.log")
    if m and shutil.which("sacct"):
        out = slurm.call(["sacct", "-n", "-P", "-X", "-j", f"{m[1]}_{m[2]}", "-o", "State"], 30, run).stdout
        states = [l.split()[0] for l in out.splitlines() if l.strip()]
        for state in reversed(states):
            if state in SACCT_REASONS:
                return state
    try:
        tail = log.read_text(errors="replace")[-20000:]
    except OSError:
        return None
    for pattern, reason in _LOG_REASONS:
        if pattern.search(tail):
            return reason
    return None


def resume_hint(run: RunDir, cfg: RunConfig, stage: str, reason: str, given: dict[str, Any] | None = None,
                peak_mb: float | None = None) -> Resume:
    """The resume that helps after this reason, counting an earlier resume's --mem/--time (`given`: run.json's
    "resources", read here when the caller has not)."""
    whole = run.root.parent if RunDir(run.root.parent).languages_json.is_file() else run.root  # the run of this dir
    if given is None:  # a resume keeps them in RUNDIR/run.json
        record = RunDir(whole).run_json
        given = read_run_json(record).get("resources", {}) if record.exists() else {}
    ex = cfg.execution.with_resources(given.get("mem"), given.get("time"))
    return reason_step(whole, reason, ex.resources.get(stage) or StageResources("4G", "01:00:00"),
                       ex.units_per_task(stage), peak_mb)


def reason_step(root: Path, reason: str, res: StageResources, units: int, peak_mb: float | None = None) -> Resume:
    """The resume after Slurm ended a task for `reason` (`res` for `units` units): after OUT_OF_MEMORY the most of
    twice one unit's memory, twice a unit's floor and 1.5x the peak the stage's finished tasks measured; twice the
    time after TIMEOUT; the same again otherwise (the node, not the task, was at fault)."""
    if reason == "OUT_OF_MEMORY":
        options = [Memory.parse(res.mem).share(units).times(2), Memory(UNIT_MEMORY_FLOOR >> 20, "M").times(2)]
        if peak_mb is not None:
            options.append(Memory(int(peak_mb * 1.5) + 1, "M"))
        return Resume(root, ("--mem", str(max(options, key=lambda m: m.bytes))))
    if reason == "TIMEOUT":
        return Resume(root, ("--time", str(WallTime.parse(res.time).times(2))))
    return Resume(root)
