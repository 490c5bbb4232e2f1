"""Executors run the same stage commands: locally in a process pool, or as chained Slurm arrays."""
from __future__ import annotations

import sys
from pathlib import Path

from shard_pipeline.run.registry import stage as registered

STAGES_DIR = Path(__file__).resolve().parents[3] / "stages"


def stage_script(stage: str) -> Path:
    return STAGES_DIR / f"{registered(stage).name}.py"


def task_argv(python: str, stage: str, rundir: Path, task: int) -> list[str]:
    """The argv that runs one task; the same line an operator types to rerun it by hand."""
    return [python or sys.executable, str(stage_script(stage)), str(rundir), "--task", str(task)]
