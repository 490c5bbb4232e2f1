"""Small helpers for tests that submit to the real single-node Slurm (tests/slurm/cluster.sh).

Everything runs Slurm's command-line tools with an argv list (no shell). Job states come from
``squeue`` (pending, running, completing jobs) and ``scontrol show job`` (which, with
MinJobAge=300, also keeps finished jobs for 5 minutes); the test cluster also has accounting
(slurmdbd), so ``sacct`` answers, as on LUMI.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterable
from typing import NamedTuple

# A Slurm command that hangs means a dead controller; fail the test rather than hang it.
CMD_TIMEOUT = 30

# States a job can still be in while it matters to a waiter; squeue shows only these by default.
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED")


class JobState(NamedTuple):
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    reason: str  # None, Dependency, DependencyNeverSatisfied, NonZeroExitCode, ...


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=CMD_TIMEOUT)
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


def _ids(job_ids: str | Iterable[str]) -> list[str]:
    return [job_ids] if isinstance(job_ids, str) else [str(j) for j in job_ids]


def _unknown_job(proc: subprocess.CompletedProcess[str]) -> bool:
    # squeue/scontrol say this (and exit 1) for a job id the controller no longer knows.
    return proc.returncode != 0 and "Invalid job id" in proc.stderr


def sbatch(args: list[str]) -> str:
    """Run ``sbatch --parsable *args`` and return the job id (for an array: the array's id)."""
    out = _run(["sbatch", "--parsable", *args]).stdout.strip()
    # --parsable prints "<jobid>" or "<jobid>;<cluster>".
    job_id = out.split(";", 1)[0]
    if not job_id.isdigit():
        raise RuntimeError(f"sbatch printed no job id: {out!r}")
    return job_id


def squeue_reasons(job_ids: str | Iterable[str]) -> dict[str, str]:
    """Reason column of ``squeue`` for the still-active jobs among job_ids.

    Keys are squeue's job ids: a pending, not yet started array shows as one "<id>_[0-3]"
    entry; started tasks show as "<id>_<task>". Finished jobs are absent.
    """
    ids = _ids(job_ids)
    proc = _run(["squeue", "-h", f"--jobs={','.join(ids)}", "-o", "%i|%r"], check=False)
    if _unknown_job(proc):
        return {}
    if proc.returncode != 0:
        raise RuntimeError(f"squeue failed: {proc.stderr.strip()}")
    reasons = {}
    for line in proc.stdout.splitlines():
        job, _, reason = line.strip().partition("|")
        reasons[job] = reason
    return reasons


def wait_for_jobs(job_ids: str | Iterable[str], timeout: float, poll: float = 0.5) -> None:
    """Wait until none of job_ids (array ids cover all their tasks) is pending, running or
    completing. Raises TimeoutError with squeue's view of what is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = squeue_reasons(job_ids)
        if not left:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"Slurm jobs still queued after {timeout:g}s: {left}")
        time.sleep(poll)


def _field(record: str, key: str) -> str:
    m = re.search(rf"(?:^|\s){key}=(\S*)", record)
    return m.group(1) if m else ""


def job_records(job_id: str) -> list[dict[str, str]]:
    """``scontrol show job -o <job_id>``, one dict of the main fields per record.

    An array id gives one record per task once tasks have started (plus one "<id>_[a-b]" record
    for its still-pending rest); "<id>_<task>" names one task. Empty if Slurm no longer knows
    the job (more than MinJobAge = 300 s after it ended).
    """
    proc = _run(["scontrol", "show", "job", "-o", str(job_id)], check=False)
    if _unknown_job(proc):
        return []
    if proc.returncode != 0:
        raise RuntimeError(f"scontrol show job {job_id} failed: {proc.stderr.strip()}")
    keys = ("JobId", "ArrayJobId", "ArrayTaskId", "JobState", "Reason", "ExitCode",
            "Dependency", "StartTime", "EndTime", "TimeLimit")
    return [{k: _field(line, k) for k in keys} for line in proc.stdout.splitlines() if line.strip()]


def job_state(job_id: str) -> JobState | None:
    """(JobState, Reason) of one job or array task, None if Slurm no longer knows it."""
    records = job_records(job_id)
    if not records:
        return None
    if len(records) > 1:
        raise ValueError(
            f"job {job_id} is an array with {len(records)} records; ask for one task "
            f"('{job_id}_<task>') or use job_records()"
        )
    return JobState(records[0]["JobState"], records[0]["Reason"])
