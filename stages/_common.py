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


def parse(stage: str, array: bool) -> tuple[Path, int]:
    p = argparse.ArgumentParser(prog=f"stages/{stage}.py", description=f"hplt-shard {stage} stage (one task)")
    p.add_argument("rundir", type=Path)
    p.add_argument("--task", type=int, default=None, help="task index (default: $SLURM_ARRAY_TASK_ID + --task-offset)")
    p.add_argument("--task-offset", type=int, default=0, help="added to $SLURM_ARRAY_TASK_ID (arrays split in chunks)")
    a = p.parse_args()
    task = a.task
    if task is None:
        task = a.task_offset + int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
    rerun = [sys.executable, str(Path(sys.argv[0]).resolve()), str(a.rundir.resolve())]
    if array:
        rerun += ["--task", str(task)]
    print(f"# hplt-shard {stage} task {task}; rerun by hand: {shlex.join(rerun)}", flush=True)
    return a.rundir.resolve(), task


def main(stage: str, fn, array: bool = True) -> None:
    from shard_pipeline.run.rundir import RunDir

    rundir, task = parse(stage, array)
    from shard_pipeline.run import multi

    if multi.is_multi(rundir):  # RUNDIR of several languages: the index names (language, task) units
        sys.exit(multi.run_entry(stage, fn, rundir, task))
    try:
        result = fn(RunDir(rundir), task)
    except Exception as exc:  # the last line of a failed log names the error: --status shows it
        print(f"ERROR: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"# {stage} task {task} done: {result}", flush=True)
