"""Run one task of one stage: `python -m shard_pipeline.run.task STAGE RUNDIR [--task N]`.

Every executor starts tasks this way (the Slurm batch script, the local pool), and the first
line of every log is the command that reruns the task by hand. Progress goes to the log through
stdlib logging with timestamps; a failed task logs its traceback and ends the log with one
line `ERROR: Type: message`, which --status shows.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

LOG_FORMAT = "%(asctime)s %(message)s"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S"


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


def keep_pandas_out() -> None:
    """Install the finder before pyarrow is imported (idempotent)."""
    if not any(isinstance(f, _WithoutPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _WithoutPandas())


def setup_logging() -> logging.Logger:
    """Timestamped lines on stderr, which both executors send to the task's log file."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=DATE_FORMAT, stream=sys.stderr, force=True)
    return logging.getLogger("hplt_shard")


def rerun_argv(stage: str, rundir: Path, task: int | None) -> list[str]:
    """The command that runs this task again, from any folder."""
    from shard_pipeline.paths import PACKAGE_PARENT, checkout_root

    argv = [sys.executable, "-m", "shard_pipeline.run.task", stage, str(rundir)]
    if task is not None:
        argv += ["--task", str(task)]
    return ["env", f"PYTHONPATH={PACKAGE_PARENT}", *argv] if checkout_root() else argv


def parse(argv: Sequence[str]) -> tuple[str, Path, int, bool]:
    from shard_pipeline.run.registry import STAGE_NAMES

    p = argparse.ArgumentParser(prog="python -m shard_pipeline.run.task", description="run one task of an hplt-shard stage")
    p.add_argument("stage", choices=STAGE_NAMES)
    p.add_argument("rundir", type=Path)
    p.add_argument("--task", type=int, default=None, help="task index (default: $SLURM_ARRAY_TASK_ID + --task-offset)")
    p.add_argument("--task-offset", type=int, default=0, help="added to $SLURM_ARRAY_TASK_ID (arrays split in chunks)")
    a = p.parse_args(argv)
    task = a.task if a.task is not None else a.task_offset + int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
    return a.stage, a.rundir.resolve(), task, a.task is not None


def main(argv: Sequence[str] | None = None) -> int:
    keep_pandas_out()
    stage_name, rundir, task, by_hand = parse(sys.argv[1:] if argv is None else argv)
    from shard_pipeline.run import live

    live.die_with_parent()  # under the local executor: never outlive it (run/live.py)
    with live.recorded(rundir, stage_name, task):  # --resume and --status see this task alive
        return run_task(stage_name, rundir, task, by_hand)


def run_task(stage_name: str, rundir: Path, task: int, by_hand: bool) -> int:
    from shard_pipeline.run.registry import stage as registered
    from shard_pipeline.run.rundir import RunDir

    stage = registered(stage_name)
    log = setup_logging()
    log.info("hplt-shard %s task %d; rerun by hand: %s", stage.name, task,
             shlex.join(rerun_argv(stage.name, rundir, task if stage.array else None)))
    module, _, function = stage.entry.partition(":")
    from shard_pipeline.run import multi

    if multi.is_multi(rundir):  # RUNDIR of several languages: the index names (language, task) units
        fin_module, _, fin_function = registered("finalize").entry.partition(":")
        return multi.run_task(stage.name, getattr(importlib.import_module(module), function),
                              lambda r: getattr(importlib.import_module(fin_module), fin_function)(r),
                              rundir, task, by_hand, stage.array,
                              [sys.executable, "-m", "shard_pipeline.run.task", stage.name])
    if stage.array and not by_hand:  # an array task of a run with --cpus-per-task C runs C units at once
        from shard_pipeline.run import group
        from shard_pipeline.run.runconfig import RunConfig

        if RunConfig.from_json(RunDir(rundir).config()).execution.units_per_task(stage.name) > 1:
            return group.run_array_task(rundir, stage.name, task,
                                        [sys.executable, "-m", "shard_pipeline.run.task", stage.name])
    try:
        run = getattr(importlib.import_module(module), function)
        result = run(RunDir(rundir), task) if stage.array else run(RunDir(rundir))
    except Exception as exc:  # the traceback for whoever debugs it, then one line for --status
        log.exception("%s task %d failed", stage.name, task)
        logging.shutdown()
        try:
            print(f"ERROR: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        except OSError:  # the log's disk is full too: --status says so (tasklog.empty_log)
            pass
        return 1
    log.info("%s task %d done: %s", stage.name, task, stage.summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
