"""The task command line, built in one place: every executor and runner starts a task with it.

Kept apart from run/task.py (which imports the runners) so that they can import it without a cycle.
"""
from __future__ import annotations

import sys
from pathlib import Path

TASK_MODULE = "shard_pipeline.run.task"  # what every task runs: `python -m TASK_MODULE STAGE RUNDIR ...`


def task_argv(stage: str, rundir: Path, task: int | None, group: bool = False, python: str = "") -> list[str]:
    """`task` of `stage` (or, `group`, array task `task`'s C units; None: a single job's task), run by
    `python` (default: this interpreter) with `task_env`; the line an operator types to rerun it by hand."""
    argv = [python or sys.executable, "-m", TASK_MODULE, stage, str(rundir)]
    if task is not None:
        argv += ["--group" if group else "--task", str(task)]
    return argv
