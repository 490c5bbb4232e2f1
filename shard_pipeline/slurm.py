"""Every Slurm command this code runs, and every SLURM_* variable it reads, in one place.

`call` runs one command (an argv list) with a timeout and never raises: a missing command, a timeout and
a non-zero exit all come back as an `Answer`, and each caller says what that means for it.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Callable, Sequence

Runner = Callable[..., subprocess.CompletedProcess]


@dataclass(frozen=True)
class Answer:
    argv: tuple[str, ...]
    returncode: int | None  # None: the command could not be run (not installed, timed out)
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def ran(self) -> bool:
        return self.returncode is not None

    def why(self) -> str:
        """One line saying why it did not answer: the command's own error, or that it could not run."""
        if self.returncode is None:
            return self.stderr or f"{self.argv[0]} could not be run"
        return (self.stderr or self.stdout).strip() or f"{self.argv[0]} exited {self.returncode}"


def call(argv: Sequence[str], timeout: float = 60, run: Runner = subprocess.run) -> Answer:
    """Run a Slurm command; its answer, whatever happened (never an exception)."""
    try:
        p = run(list(argv), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return Answer(tuple(argv), None, "", f"{argv[0]}: not found (is Slurm installed here?)")
    except subprocess.TimeoutExpired:
        return Answer(tuple(argv), None, "", f"{argv[0]} did not answer within {timeout:.0f} s")
    except OSError as exc:
        return Answer(tuple(argv), None, "", f"{argv[0]} could not be run: {exc.strerror or exc}")
    return Answer(tuple(argv), p.returncode, p.stdout or "", p.stderr or "")


# sbatch's words when a per-user or per-account limit on submitted jobs refuses an array.
JOB_CAP = re.compile(r"QOSMaxSubmitJob\w*|AssocMaxSubmitJob\w*|MaxSubmitJobs\w*|submit limit|job limit", re.I)
# Words of a controller that did not answer (the request itself may be fine): try again.
UNANSWERED = re.compile(r"did not answer|could not be run|not found \(is Slurm|Unable to contact|Socket timed out|"
                        r"Connection (refused|timed out)|Zero Bytes were transmitted|Communication connection failure|"
                        r"Protocol authentication error|Slurm backup controller in standby", re.I)


def refusal_kind(refusal: str) -> str:
    """Why sbatch did not queue a submission, from its words: "cap" (the cap on submitted jobs: room comes
    back by itself), "unanswered" (the controller did not answer: try again) or "request" (an account, a
    partition, a limit in the request: it must change first)."""
    if JOB_CAP.search(refusal or ""):
        return "cap"
    if UNANSWERED.search(refusal or ""):
        return "unanswered"
    return "request"


# --- the job this process runs in (set by Slurm in a batch job) ------------------------------------

def job_id() -> str | None:
    """The array's job id (or the plain job's), None outside Slurm."""
    return os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")


def array_task_id() -> str | None:
    """This array task's index within its chunk (`%a` in the log name), None outside an array."""
    return os.environ.get("SLURM_ARRAY_TASK_ID")


def restart_count() -> int:
    """How many times Slurm requeued this job before this attempt (0 outside Slurm)."""
    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)


def cluster_name() -> str | None:
    return os.environ.get("SLURM_CLUSTER_NAME")
