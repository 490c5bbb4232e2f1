"""Executors run the same stage commands: locally in a process pool, or as chained Slurm arrays."""
from __future__ import annotations

import os

from shard_pipeline.paths import checkout_root


def task_env() -> dict[str, str]:
    """The environment of a task: the checkout the submitter runs from first on PYTHONPATH (it need not be
    installed)."""
    root, path = checkout_root(), os.environ.get("PYTHONPATH")
    if root is None:
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": f"{root}{os.pathsep + path if path else ''}"}


def local_task_env() -> dict[str, str]:
    """`task_env` for a task the local executor owns: it dies when the executor dies (run/live.py)."""
    from shard_pipeline.run.live import child_env

    return child_env(task_env())
