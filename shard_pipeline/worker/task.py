"""Run one task of one stage: `python -m shard_pipeline.worker.task STAGE RUNDIR [--task N]`.

Every executor starts tasks this way (the Slurm batch script, the local pool), and the first
line of every log is the command that reruns the task by hand (for an array task of C units,
`--group G`, which runs them as its job did). Progress goes to the log through
stdlib logging with timestamps; a failed task logs its traceback and ends the log with one
line `ERROR: Type: message` for whoever reads it; what the attempt ended with, and what it used, is the
task's outcome record (run/outcome.py), which --status and the next step are read from.
"""
from __future__ import annotations

import argparse
import logging
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from shard_pipeline import slurm
from shard_pipeline.commands import command
from shard_pipeline.errors import ExitCode
from shard_pipeline.worker.entries import stage_main
from shard_pipeline.worker.taskcmd import TASK_MODULE, task_argv
from shard_pipeline.run.run_json import read_run_json

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


def rerun_argv(stage: str, rundir: Path, task: int | None, group: bool = False) -> list[str]:
    """The command that runs this task (or, `group`, this array task's C units) again, from any folder."""
    from shard_pipeline.paths import PACKAGE_PARENT, checkout_root

    argv = task_argv(stage, rundir, task, group)
    return ["env", f"PYTHONPATH={PACKAGE_PARENT}", *argv] if checkout_root() else argv


@dataclass(frozen=True)
class TaskArgs:
    stage: str
    rundir: Path
    task: int  # a unit, or with `group` an array index whose C units run at once
    by_hand: bool  # --task given: this one unit, never a group
    group: bool  # --group given: the array task's units, as its Slurm job runs them


def parse(argv: Sequence[str]) -> TaskArgs:
    from shard_pipeline.run.registry import STAGE_NAMES

    p = argparse.ArgumentParser(prog=f"python -m {TASK_MODULE}", description="run one task of an hplt-shard stage")
    p.add_argument("stage", choices=STAGE_NAMES)
    p.add_argument("rundir", type=Path)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--task", type=int, default=None, help="task index (default: $SLURM_ARRAY_TASK_ID + --task-offset)")
    which.add_argument("--group", type=int, default=None,
                       help="array task index of a run with --cpus-per-task C: run its C units at once")
    p.add_argument("--task-offset", type=int, default=0, help="added to $SLURM_ARRAY_TASK_ID (arrays split in chunks)")
    a = p.parse_args(argv)
    if a.group is not None:
        return TaskArgs(a.stage, a.rundir.resolve(), a.group, False, True)
    task = a.task if a.task is not None else a.task_offset + int(slurm.array_task_id() or 0)
    return TaskArgs(a.stage, a.rundir.resolve(), task, a.task is not None, False)


def where() -> str:
    """Which Slurm job runs this, on which node, which attempt (empty outside Slurm)."""
    job = slurm.job_id()
    if not job:
        return ""
    return f" (job {job}_{slurm.array_task_id() or 0} on {socket.gethostname()}, restart {slurm.restart_count()})"


def grouped(a: TaskArgs, array: bool, cpus: int) -> bool:
    """True when this process runs the C units of an array task (worker/group.py), not one unit."""
    return a.group or (array and not a.by_hand and cpus > 1)


def main(argv: Sequence[str] | None = None) -> int:
    keep_pandas_out()
    a = parse(sys.argv[1:] if argv is None else argv)
    from shard_pipeline.run import live, unit_table
    from shard_pipeline.run.registry import stage as registered

    from shard_pipeline.run.next_step import check_this_version
    from shard_pipeline.run.records import RecordRefused
    from shard_pipeline.run.rundir import RunDir

    from shard_pipeline.run import outcome

    stage = registered(a.stage)
    # its last outcome is no longer this attempt's: one task's, or RUNDIR's record under this array task's own id
    own = a.by_hand or not stage.array or unit_table.is_run_root(a.rundir)
    if own:
        outcome.forget(RunDir(a.rundir), stage.name, a.task)
    try:  # a job queued by another format or code version (a git pull while it waited), run by this one: refused, named
        check_this_version(a.rundir, read_run_json(RunDir(a.rundir).run_json))
        # RUNDIR: an index names a (language, task) unit, or C of them; RUNDIR/<LANG>: that language's task, by hand
        table = unit_table.load(a.rundir) if unit_table.is_run_root(a.rundir) else None
    except (RecordRefused, OSError) as exc:
        print(f"ERROR: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        # in a run dir hplt-shard made; which units an index of RUNDIR names is the table's, which this code may not read
        run = RunDir(a.rundir)
        if own and run.run_json.is_file() and run.outcome(stage.name, a.task).parent.is_dir():
            outcome.record(run, stage.name, a.task, exc)
        return ExitCode.FAILED
    as_group = table is not None and grouped(a, stage.array, table.units_per_task(stage.name))
    # The log's first line: the command that reruns this task by hand (README, "What a run leaves").
    print(command(*rerun_argv(stage.name, a.rundir, a.task if stage.array else None, as_group)), file=sys.stderr,
          flush=True)
    live.die_with_parent()  # under the local executor: never outlive it (run/live.py)
    with live.recorded(a.rundir, stage.name, a.task):  # --resume and --status see this task alive
        code = run_task(a, table, as_group)
    if code == 0:  # what it used, for people sizing --mem and --time (--status reads the outcome record's)
        from shard_pipeline.run.outcome import own_figures
        from shard_pipeline.run.tasklog import figures_line

        logging.getLogger("hplt_shard").info("%s", figures_line(stage.name, a.task, own_figures()))
    return code


def run_task(a: TaskArgs, table, as_group: bool) -> int:
    """The C units of an array task, one global unit, a single job's languages in turn (`table`: the run's), or one
    task of a language's run dir (`table` None)."""
    from shard_pipeline.run import outcome
    from shard_pipeline.worker import group, landing
    from shard_pipeline.run.registry import stage as registered
    from shard_pipeline.run.rundir import RunDir

    stage, task = registered(a.stage), a.task
    log = setup_logging()
    log.info("hplt-shard %s %s %d%s", stage.name, "group" if as_group else "task", task, where())
    if as_group:  # an array task of a run with --cpus-per-task C runs C units at once
        return group.run_array_task(table, stage.name, task)
    run = stage_main(stage.name)
    if table is not None:  # an array index names one global unit (language, task), a single job its selection
        finalize = stage_main("finalize")
        return landing.run_task(stage.name, run, finalize, a.rundir, task, stage.array)
    rundir = RunDir(a.rundir)
    try:
        result = run(rundir, task) if stage.array else run(rundir)
    except Exception as exc:  # the traceback for whoever debugs it, the outcome record, one line for the log
        log.exception("%s task %d failed", stage.name, task)
        outcome.record(rundir, stage.name, task, exc)
        logging.shutdown()
        try:
            print(f"ERROR: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        except OSError:  # the log's disk is full too: --status says so (tasklog.empty_log)
            pass
        return ExitCode.FAILED
    outcome.record(rundir, stage.name, task, None)
    log.info("%s task %d done: %s", stage.name, task, stage.summary(result))
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
