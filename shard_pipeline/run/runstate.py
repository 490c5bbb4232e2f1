"""Where a run stands, one definition for both executors: a task's state and a run's phase (each with one exit
code), as pure functions of what run/stage_status.py gathers; squeue's reasons that do not clear by themselves.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from shard_pipeline.commands import resume_command
from shard_pipeline.errors import ExitCode
from shard_pipeline.slurm import refusal_kind


class TaskState(str, enum.Enum):
    WAITING = "waiting"  # not queued, not started: its stage comes later, or a resume has not queued it yet
    PENDING = "pending"  # queued in Slurm, not started (squeue's reason says why)
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # stopped from outside: Ctrl-C / SIGTERM / SIGHUP of the local run, scancel


class RunPhase(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    STUCK = "stuck"

    @property
    def exit_code(self) -> ExitCode:
        return PHASE_EXIT[self]


PHASE_EXIT = {RunPhase.DONE: ExitCode.OK, RunPhase.FAILED: ExitCode.FAILED, RunPhase.INTERRUPTED: ExitCode.FAILED,
              RunPhase.QUEUED: ExitCode.BUSY, RunPhase.RUNNING: ExitCode.BUSY, RunPhase.STUCK: ExitCode.STUCK}

# squeue reasons (%r) that do not clear by themselves: the job asks what the partition, the account or the QOS
# never gives, waits on a job that failed, or on an allocation used up. Reasons that clear as nodes return, jobs
# end or someone releases a hold (Resources, Priority, limits on running jobs, JobHeld*) are only pending.
STUCK_REASONS: dict[str, str] = {
    "PartitionConfig": "it asks more cores or memory than any node of the partition has",
    "PartitionNodeLimit": "it asks more nodes than the partition allows",
    "PartitionTimeLimit": "its --time is over the partition's MaxTime",
    "QOSMaxWallDurationPerJobLimit": "its --time is over the QOS's MaxWall",
    "QOSMaxCpuPerJobLimit": "it asks more cores than the QOS allows a job",
    "QOSMaxMemoryPerJob": "it asks more memory than the QOS allows a job",
    "AssocMaxWallDurationPerJobLimit": "its --time is over the account's MaxWall",
    "DependencyNeverSatisfied": "a job it depends on failed or was cancelled",
    "InvalidAccount": "the account is not valid on this partition",
    "InvalidQOS": "the QOS is not valid for the account",
    "BadConstraints": "no node has what it asks (cores, memory or features)",
    "AssocGrpBillingMinutes": "the project's allocation (billing units) is used up",
    "AssocGrpCPUMinutesLimit": "the project's allocation (CPU minutes) is used up",
    "QOSGrpBillingMinutes": "the QOS's allocation (billing units) is used up",
    "QOSGrpCPUMinutesLimit": "the QOS's allocation (CPU minutes) is used up",
}
# What helps, per stuck reason: the resume options (or what else to change).
STUCK_FIX: dict[str, str] = {
    "PartitionConfig": "--cpus-per-task and --mem that fit a node (the resume checks them against the partition; "
                       "--dry-run shows the values that fit), or --partition with bigger nodes",
    "PartitionNodeLimit": "--partition with more nodes",
    "PartitionTimeLimit": "--time within the partition's MaxTime (scontrol show partition), or another --partition",
    "QOSMaxWallDurationPerJobLimit": "--time within the QOS's MaxWall (sacctmgr show qos)",
    "QOSMaxCpuPerJobLimit": "a smaller --cpus-per-task",
    "QOSMaxMemoryPerJob": "a smaller --mem",
    "AssocMaxWallDurationPerJobLimit": "--time within the account's MaxWall",
    "DependencyNeverSatisfied": "no option: the resume redoes the failed stage and queues the rest after it",
    "InvalidAccount": "--account of a project you belong to",
    "InvalidQOS": "--account or --partition whose QOS you may use",
    "BadConstraints": "--cpus-per-task and --mem that fit a node (the resume checks them against the partition), "
                      "or --partition with bigger nodes",
    **dict.fromkeys(("AssocGrpBillingMinutes", "AssocGrpCPUMinutesLimit", "QOSGrpBillingMinutes", "QOSGrpCPUMinutesLimit"),
                    "--account of a project with allocation left, or the same once the project's allocation is "
                    "raised (LUMI: lumi-allocations shows what is left)"),
}


def is_stuck(reason: str | None) -> bool:
    return bool(reason) and reason.split(",")[0].strip() in STUCK_REASONS


def task_state(*, done: bool, queued: str | None, alive: bool, has_log: bool, interrupted: bool) -> TaskState:
    """One task's state. `queued`: squeue's state (%T) while Slurm holds it, which wins over a process still alive
    from an earlier attempt (on a node Slurm lost); `alive`: a live local process of it; `interrupted`: its last
    attempt was stopped from outside (marker, scancel)."""
    if done:
        return TaskState.DONE
    if queued in ("RUNNING", "COMPLETING", "CONFIGURING"):
        return TaskState.RUNNING
    if queued is not None:
        return TaskState.PENDING
    if alive:
        return TaskState.RUNNING
    if interrupted:
        return TaskState.INTERRUPTED
    if has_log:
        return TaskState.FAILED
    return TaskState.WAITING


@dataclass(frozen=True)
class Counts:
    """How many tasks of a run are in each state, and the reasons its pending tasks wait for."""

    total: int
    done: int
    running: int
    pending: int
    failed: int  # tasks that failed by themselves: a cause
    interrupted: int
    pending_reasons: tuple[str, ...] = ()
    skipped: int = 0  # tasks that did not start because an earlier stage of their language is not done: consequences


def run_phase(c: Counts, *, done_marker: bool, held: bool) -> RunPhase:
    """The run's phase. `held`: a live local submitter (or resume) holds the run's lock."""
    if done_marker:
        return RunPhase.DONE
    # A job whose dependency names a failed task may wait on one that can never be met; Slurm cancels
    # it (--kill-on-invalid-dep=yes): the failure, not the wait, is what the user acts on.
    doomed = [r for r in c.pending_reasons if c.failed and r.startswith("DependencyNeverSatisfied")]
    if any(is_stuck(r) for r in c.pending_reasons if r not in doomed):
        return RunPhase.STUCK
    if c.running or (held and not c.interrupted):
        return RunPhase.RUNNING
    if c.pending and len(doomed) < c.pending:
        # under way: between two tasks (some done, the next one waiting in the queue) a run is running, so the
        # state does not flip to queued and back at every task
        return RunPhase.RUNNING if c.done and not c.failed else RunPhase.QUEUED
    if c.failed:
        return RunPhase.FAILED
    return RunPhase.INTERRUPTED  # nothing runs, nothing is queued, nothing failed: stopped before the end


def ran_locally(record: dict) -> bool:
    """The run's last submission (run.json) ran on the local executor: it queued no Slurm job."""
    return not any(s.get("jobs") for s in record.get("submissions", [])[-1:])


def cap_name(message: str) -> str:
    """Which of Slurm's caps on submitted jobs sbatch named (LUMI: the QOS's, per user)."""
    if "QOSMaxSubmitJob" in message:
        return "the QOS's MaxSubmitJobsPerUser"
    if "AssocMaxSubmitJob" in message or "MaxSubmitJobs" in message:
        return "the association's MaxSubmitJobs"
    return "the cluster's cap on submitted jobs"


def refusal_next_step(root, message: str) -> str:
    """The way on after sbatch refused a submission, the same at submit and in --status."""
    resume = resume_command(root)
    kind = refusal_kind(message)
    if kind == "unanswered":
        return f"Slurm did not answer: once `squeue --me` answers, continue with: {resume}"
    if kind == "request":
        return ("Change what sbatch refused (an account, partition, memory or time the cluster does not take; the conf "
                f"or the option), then continue with: {resume} and the corrected option (--account, --partition, "
                "--mem, --time)")
    return (f"{cap_name(message)} is reached (every array task counts, squeue --me shows yours). When your queue has "
            f"room, continue with: {resume}; or need fewer jobs: {resume} --cpus-per-task C (C units per array task, "
            "e.g. twice what it has)")
