"""The task command line, built in one place: every executor and runner starts a task with it.

Kept apart from worker/task.py (which imports the runners) so that they can import it without a cycle.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

TASK_MODULE = "shard_pipeline.worker.task"  # what every task runs: `python -m TASK_MODULE STAGE RUNDIR ...`


def task_argv(stage: str, rundir: Path, task: int | None, group: bool = False, python: str = "") -> list[str]:
    """`task` of `stage` (or, `group`, array task `task`'s C units; None: a single job's task), run by
    `python` (default: this interpreter) with `task_env`; the line an operator types to rerun it by hand."""
    argv = [python or sys.executable, "-m", TASK_MODULE, stage, str(rundir)]
    if task is not None:
        argv += ["--group" if group else "--task", str(task)]
    return argv


def task_args(argv: Sequence[str]) -> list[str] | None:
    """What follows `-m TASK_MODULE` in a line task_argv built (stage, run dir, options); None for any other argv."""
    return list(argv[3:]) if len(argv) > 3 and list(argv[1:3]) == ["-m", TASK_MODULE] else None
