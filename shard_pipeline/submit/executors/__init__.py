"""Executors run the same stage commands: locally in a process pool, or as chained Slurm arrays."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from shard_pipeline.paths import checkout_root
from shard_pipeline.run.registry import stage as registered


def task_argv(python: str, stage: str, rundir: Path, task: int) -> list[str]:
    """The argv that runs one task (with `task_env`); the line an operator types to rerun it by hand."""
    return [python or sys.executable, "-m", "shard_pipeline.run.task", registered(stage).name, str(rundir), "--task", str(task)]


def checkout_path() -> str:
    """What a task puts first on PYTHONPATH: the checkout the submitter runs from, "" when installed."""
    root = checkout_root()
    return str(root) if root else ""


def task_env() -> dict[str, str]:
    """The environment of a task: a checkout first on PYTHONPATH (it need not be installed)."""
    root, path = checkout_path(), os.environ.get("PYTHONPATH")
    if not root:
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": f"{root}{os.pathsep + path if path else ''}"}


def local_task_env() -> dict[str, str]:
    """`task_env` for a task the local executor owns: it dies when the executor dies (run/live.py)."""
    from shard_pipeline.run.live import child_env

    return child_env(task_env())
