"""Shared plumbing of the stage entry points: argv, the rerun line at the top of every log."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class _WithoutPandas:
    """Import finder that reports pandas as not installed.

    pyarrow imports pandas (0.4 s, 60 MB) the first time it converts Python objects, only to
    recognise pandas inputs; no stage passes any. pyarrow treats the ImportError as "no pandas".
    (`sys.modules["pandas"] = None` is not enough: pyarrow's compiled import returns the None.)
    """

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError("pandas is kept out of hplt-shard stage processes", name=name)
        return None


sys.meta_path.insert(0, _WithoutPandas())


def parse(stage: str, array: bool) -> tuple[Path, int, bool]:
    p = argparse.ArgumentParser(prog=f"stages/{stage}.py", description=f"hplt-shard {stage} stage (one task)")
    p.add_argument("rundir", type=Path)
    p.add_argument("--task", type=int, default=None, help="task index (default: $SLURM_ARRAY_TASK_ID + --task-offset)")
    p.add_argument("--task-offset", type=int, default=0, help="added to $SLURM_ARRAY_TASK_ID (arrays split in chunks)")
    a = p.parse_args()
    task = a.task
    if task is None:
        task = a.task_offset + int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
    return a.rundir.resolve(), task, a.task is not None


def main(stage: str, fn, array: bool = True) -> None:
    from shard_pipeline.run.rundir import RunDir

    rundir, task, by_hand = parse(stage, array)
    script = [sys.executable, str(Path(sys.argv[0]).resolve())]
    if array and not by_hand:  # an array task of a run with --cpus-per-task C runs C units at once
        from shard_pipeline.run import group

        if group.group_size(RunDir(rundir).config()["execution"].get("cpus", {}), stage) > 1:
            sys.exit(group.run_array_task(rundir, stage, task, script))
    rerun = [*script, str(rundir)] + (["--task", str(task)] if array else [])
    print(f"# hplt-shard {stage} task {task}; rerun by hand: {shlex.join(rerun)}", flush=True)
    try:
        result = fn(RunDir(rundir), task)
    except Exception as exc:  # the last line of a failed log names the error: --status shows it
        print(f"ERROR: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"# {stage} task {task} done: {result}", flush=True)
