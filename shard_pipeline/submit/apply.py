"""Applying a plan: the units handed to the executor, and the Ctrl-C between the claim and the start.

A new run and a resume both end here, so both start, and roll back, the same way."""
from __future__ import annotations

import contextlib
from pathlib import Path

from shard_pipeline.commands import resume_command
from shard_pipeline.errors import ExitCode, UserError
from shard_pipeline.run import unit_table
from shard_pipeline.run.claim import release
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.runconfig import RunConfig


class StoppedBeforeStart(UserError):
    """Ctrl-C between the claim on OUT and the executor taking over its own Ctrl-C."""

    exit_code = ExitCode.INTERRUPTED


@contextlib.contextmanager
def until_started(root: Path, held: dict[Path, Path], executor: str):
    """A Ctrl-C once the run dir is whole and OUT claimed, before any task runs: the exact --resume.
    Locally nothing can have started, so the claims are released (the resume takes them again);
    under Slurm a job may already be queued, so OUT stays claimed by the run."""
    try:
        yield
    except KeyboardInterrupt:
        if executor == "local":
            for out, run_root in held.items():
                release(out, run_root)
        kept = "OUT stays claimed by this run" if executor != "local" else "OUT is as it was, its claim released"
        raise StoppedBeforeStart(f"interrupted before any task ran ({kept}); to continue: "
                                 f"{resume_command(root)}") from None


def start(table: unit_table.UnitTable, cfgs: dict[str, RunConfig], tasks: dict[str, list[int]], executor: str, jobs: int,
          settings, kind: str) -> int:
    """Hand the units to the executor: blocking locally, queued at once under Slurm."""
    for lang in cfgs:  # this attempt is not the one that was stopped
        RunDir(table.lang_dir(lang)).interrupted_marker.unlink(missing_ok=True)
    for stage in unit_table.SINGLE_JOB_STAGES:  # which languages the plan and finalize jobs take (all, or the unfinished)
        unit_table.write_selection(table.root, stage, tasks.get(stage, []))
    if executor == "local":
        from shard_pipeline.submit.executors.local import run_local

        return run_local(table, cfgs, tasks, jobs, kind)
    from shard_pipeline.submit.executors.slurm import submit_run

    return submit_run(table, cfgs, tasks, settings, kind)


