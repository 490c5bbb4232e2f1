"""Shared plumbing of the by-hand entry points: find the package next to this folder, run one task.

`stages/partition.py RUNDIR --task 3` is `python -m shard_pipeline.worker.task partition RUNDIR --task 3`
from a checkout that is not installed.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(stage: str) -> None:
    from shard_pipeline.worker.task import main as run_task

    sys.exit(run_task([stage, *sys.argv[1:]]))
