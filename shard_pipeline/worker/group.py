"""Groups: an array task with C cores runs C units of its stage at once, one process per unit.

The group imports the stage code once and forks its units (worker/fork.py); a unit whose line is
not this interpreter's task line (or with HPLT_SHARD_FORK_UNITS=0) is started fresh as before.

A unit is what a stage task has always been (`stages/<stage>.py RUNDIR --task U`): its receipt,
checkpoint and log are its own, so `--resume` and a requeue stay per unit and the output does
not depend on C. What C changes is the number of Slurm jobs: under a per-user job cap (LUMI
`small`: 220, every array task counted) C cores per array task give C times the parallelism.

`units_of` is the one mapping from an array index to its units, for one language or many (a
multi-language run's global units, run/unit_table.py); the Slurm batch script (through the stage
entry point, `run_group`) and the local executors all run a group with `run_units`.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from shard_pipeline import slurm
from shard_pipeline.errors import ExitCode
from shard_pipeline.worker.fork import Forked, fork_unit, forkable, preload
from shard_pipeline.run.outcome import UnitExit, forget_exit, record_exit
from shard_pipeline.units import iso_time


@dataclass(frozen=True)
class UnitRun:
    """How one unit process ended: the times and rusage the group log and the tests read."""

    unit: int
    returncode: int
    start: float  # epoch seconds
    end: float
    cpu_s: float  # user + system, from wait4
    max_rss_mib: float
    log: Path
    error: str | None = None  # why it did not start (its log could not be opened): the log holds an older attempt


class _Stopping(Exception):
    """The owner is stopping the run (Ctrl-C, SIGHUP, SIGTERM): a unit not started yet never starts."""


class Owner(Protocol):
    """Who stops these units (the local executor): each unit runs in its own session, known to it."""

    stopping: bool

    def adopt(self, pid: int) -> None: ...

    def release(self, pid: int) -> None: ...


@dataclass
class _Group:
    """The units of one group while they run: their processes, results, and the lock between the threads."""

    argv_of: Callable[[int], list[str]]
    log_of: Callable[[int], Path]
    label: str
    append: bool
    env: dict[str, str] | None
    owner: Owner | None
    results: dict[int, UnitRun] = field(default_factory=dict)
    live: dict[int, Any] = field(default_factory=dict)  # unit -> subprocess.Popen or Forked
    lock: threading.Lock = field(default_factory=threading.Lock)

    def one(self, u: int) -> None:
        try:
            self.run_one(u)
        except (OSError, _Stopping) as exc:  # the log or the process could not be made: the unit failed
            now = time.time()
            why = None if isinstance(exc, _Stopping) else f"ERROR: did not start: {exc}"
            self.results[u] = UnitRun(u, 127, now, now, 0.0, 0.0, self.log_of(u), why)
            if why is not None:  # a stop is the owner's to report, once, not each unit's
                print(f"ERROR: {self.label} unit {u} did not start: {exc}", file=sys.stderr, flush=True)

    def spawn(self, u: int, argv: list[str], f) -> Any:
        """The unit's process, adopted by the owner (if any) before another can be started or stopped."""
        with self.lock:
            if self.owner is not None and self.owner.stopping:
                raise _Stopping
            if forkable(argv, self.env):
                p: subprocess.Popen | Forked = fork_unit(argv, f.fileno(), self.env, new_session=self.owner is not None)
            else:
                p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=self.owner is not None)
            self.live[u] = p
            if self.owner is not None:
                self.owner.adopt(p.pid)
        return p

    def run_one(self, u: int) -> None:
        log = self.log_of(u)
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = self.argv_of(u)
        forget_exit(log)  # this attempt has not ended: before its log is opened (and emptied, without append)
        with open(log, "ab" if self.append else "wb") as f:  # the unit's first line is its own: the rerun command
            size, start = os.fstat(f.fileno()).st_size, time.time()
            p = self.spawn(u, argv, f)
            _, status, ru = os.wait4(p.pid, 0)
            end = time.time()
            rc = os.waitstatus_to_exitcode(status)
            with self.lock:
                p.returncode = rc  # reaped here: keep Popen from waiting again
                del self.live[u]
                if self.owner is not None:
                    self.owner.release(p.pid)
            ended = UnitExit(self.label, u, rc, start, end, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024,
                             os.fstat(f.fileno()).st_size - size)
            f.write(f"# {ended.line()}\n".encode())
        record_exit(log, ended)  # the trailer as a record: --status reads this, never the line
        self.results[u] = UnitRun(u, rc, start, end, ended.cpu_s, ended.max_rss_mib, log)

    def forward(self, signum, _frame) -> None:  # requeue or scancel: the units stop at their checkpoints
        with self.lock:
            for p in self.live.values():
                p.send_signal(signum)


def run_units(argv_of: Callable[[int], list[str]], units: Sequence[int], log_of: Callable[[int], Path],
              label: str, *, append: bool, env: dict[str, str] | None = None,
              owner: Owner | None = None) -> list[UnitRun]:
    """Start every unit at once, each writing its own log, and wait for all of them.

    With an `owner` (the local executor) every unit gets its own session, which the owner ends
    on Ctrl-C, SIGHUP or SIGTERM; under Slurm the units stay in the job's group.

    Each unit is reaped with wait4 on its own pid (never -1: the local executor runs several
    groups in threads of one process), which gives its CPU time and peak RSS. The first line of a
    unit's log is the unit's rerun command (worker/task.py); the last gives its start and end, so
    overlapping runs show.
    """
    from shard_pipeline.run.live import DIE_WITH_ENV, child_env

    base = dict(os.environ if env is None else env)
    env = child_env(base) if DIE_WITH_ENV in base else env  # a local run's units die with this process
    preload([argv_of(u) for u in units], env)  # the stage's imports, once for all units (fork_unit)
    group = _Group(argv_of, log_of, label, append, env, owner)
    in_main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, group.forward) if in_main else None
    try:
        threads = [threading.Thread(target=group.one, args=(u,), daemon=True) for u in units]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, old)
    return [group.results[u] for u in units]


def summary(label: str, runs: Sequence[UnitRun]) -> str:
    """Per unit and for the group: wall, CPU and how many cores were busy on average."""
    lines = [f"# {label} unit {r.unit}: exit {r.returncode}, {iso_time(r.start)} -> {iso_time(r.end)} "
             f"({r.end - r.start:.2f} s), cpu {r.cpu_s:.2f} s, max rss {r.max_rss_mib:.0f} MiB  log {r.log.name}"
             for r in runs]
    if runs:
        wall = max(r.end for r in runs) - min(r.start for r in runs)
        cpu = sum(r.cpu_s for r in runs)
        lines.append(f"# {label}: {len(runs)} units, wall {wall:.2f} s, cpu {cpu:.2f} s "
                     f"({cpu / max(wall, 1e-9):.2f} cores busy; load average {os.getloadavg()[0]:.1f})")
    return "\n".join(lines)


def run_array_task(table, stage: str, index: int) -> int:
    """The Slurm side: run the units of array task `index` (of any language) that are not finished yet.

    A unit whose receipt agrees with its files (the same test `--resume` applies) is skipped:
    after a requeue or a sparse resubmission the group redoes only its unfinished units.
    `table` is run/unit_table.py's unit table of the run.
    """
    from shard_pipeline.run.registry import RunState
    from shard_pipeline.run.registry import stage as registered
    from shard_pipeline.run.rundir import RunDir
    from shard_pipeline.worker.taskcmd import task_argv

    units = table.units_of(stage, index)
    job = slurm.job_id() or "nojob"
    local = slurm.array_task_id() or str(index)
    chunk = index - int(local)  # the chunk's --task-offset
    label = f"{stage} group {index}"
    print(f"# hplt-shard {label}: units {units[0] if units else '-'}..{units[-1] if units else '-'} "
          f"of {table.size(stage)} on {table.units_per_task(stage)} cores (pid {os.getpid()})", flush=True)
    reg, states = registered(stage), {}

    def finished(g: int) -> bool:
        lang, t = table.locate(stage, g)
        if lang not in states:
            states[lang] = RunState(RunDir(table.lang_dir(lang)))
        return reg.problem(states[lang], t) is None

    def log_of(g: int) -> Path:
        """Next to the group's log, named so that the language's --status finds it in its own task numbers
        (`<job>_<t - chunk offset>` with the offsets its run.json records)."""
        return RunDir(table.root).unit_log_dir(stage) / f"{job}_{g - chunk}.log"

    return run_group(stage, label, units, finished, lambda g: task_argv(stage, table.root, g), log_of)


def run_group(stage: str, label: str, units: Sequence[int], finished: Callable[[int], bool], argv_of: Callable[[int], list[str]],
              log_of: Callable[[int], Path], *, append: bool = True, env: dict[str, str] | None = None,
              owner: Owner | None = None) -> int:
    """Run the units of one group that are not finished yet, at once; 1 if any failed.

    Shared by a Slurm array task (run_array_task) and the local executor, whose units may belong to
    several languages. A unit whose receipt agrees with its files (the test
    `--resume` applies, `finished`) is skipped: after a requeue or a sparse resubmission the
    group redoes only its unfinished units.
    """
    todo = []
    for u in units:
        if finished(u):
            print(f"# {label} unit {u}: finished before (its receipt agrees with its files), skipped", flush=True)
        else:
            todo.append(u)
    runs = run_units(argv_of, todo, log_of, label, append=append, env=env, owner=owner)
    print(summary(label, runs), flush=True)
    failed = [r for r in runs if r.returncode != 0]
    for r in failed:
        print(f"ERROR: {stage} unit {r.unit} exited {r.returncode} (log: {r.log})", file=sys.stderr, flush=True)
    return ExitCode.FAILED if failed or len(runs) != len(todo) else ExitCode.OK

