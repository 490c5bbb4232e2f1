"""Executors run the same stage commands: locally in a process pool, or as chained Slurm arrays."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from shard_pipeline.paths import PACKAGE_PARENT
from shard_pipeline.run.registry import stage as registered


def task_argv(python: str, stage: str, rundir: Path, task: int) -> list[str]:
    """The argv that runs one task (with `task_env`); the line an operator types to rerun it by hand."""
    return [python or sys.executable, "-m", "shard_pipeline.run.task", registered(stage).name, str(rundir), "--task", str(task)]


def task_env() -> dict[str, str]:
    """The environment of a task: this package first on PYTHONPATH (a checkout need not be installed)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{PACKAGE_PARENT}{os.pathsep + path if path else ''}"}
