"""Local executor: the stages in order, each stage's tasks in a bounded process pool, blocking."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from shard_pipeline.errors import ExitCode, signal_exit
from shard_pipeline.run import group, live
from shard_pipeline.run.claim import release
from shard_pipeline.run.next_step import bad_record_step
from shard_pipeline.run.registry import STAGES
from shard_pipeline.run.runconfig import Execution, RunConfig
from shard_pipeline.run.rundir import RunDir, read_json, write_json_atomic
from shard_pipeline.run.runstate import resume_command
from shard_pipeline.run.taskcmd import task_argv
from shard_pipeline.run.tasklog import last_error_line
from shard_pipeline.submit.executors import local_task_env
from shard_pipeline.units import plural


class StageFailed(Exception):
    """One or more tasks of a stage exited non-zero; the message names each log and its last error."""


@dataclass(frozen=True)
class TaskResult:
    stage: str
    task: int
    returncode: int
    log: Path


class _Workers:
    """The task processes alive now, each in its own process group, so that Ctrl-C can stop them all.

    Tasks run in new sessions: a terminal's SIGINT (or a closed session's SIGHUP) reaches only the
    executor, which then ends every task's group (the task and anything it started) and starts no
    new one. A task the executor cannot stop this way (SIGKILL of the executor) dies by its
    parent-death signal (run/live.py).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.adopted: set[int] = set()  # the units of groups (run/group.py), which reaps them itself
        self.stopping = False

    def adopt(self, pid: int) -> None:
        with self.lock:
            self.adopted.add(pid)

    def release(self, pid: int) -> None:
        with self.lock:
            self.adopted.discard(pid)

    def reset(self) -> None:
        with self.lock:
            self.stopping = False

    def run(self, argv: list[str], log, env=None, task: tuple[Path, str, int] | None = None) -> int:
        """Run one task process to its end; `task` (run dir, stage, task) records it as running at once."""
        with self.lock:
            if self.stopping:
                return -signal.SIGTERM
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
            self.procs.add(proc)
        if task is not None:
            live.record_child(*task, proc.pid)
        rc = proc.wait()  # a signal raised here (main thread) leaves proc listed: stop() ends it
        with self.lock:
            self.procs.discard(proc)
        return rc

    def stop(self, grace: float = 10.0) -> list[int]:
        """SIGTERM every task's process group, then SIGKILL what is still alive after `grace` seconds;
        the pids still alive after that (a process stuck in the kernel), normally none."""
        with self.lock:
            self.stopping = True
            procs = list(self.procs)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with self.lock:
                groups = [p.pid for p in procs if p.poll() is None] + list(self.adopted)
            for pgid in groups:
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while (any(p.poll() is None for p in procs) or self.adopted) and time.monotonic() < deadline:
                time.sleep(0.05)
        return [p.pid for p in procs if p.poll() is None] + sorted(self.adopted)


WORKERS = _Workers()


def run_task(python: str, stage: str, rundir: Path, task: int) -> TaskResult:
    log = RunDir(rundir).local_log(stage, task)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as f:
        rc = WORKERS.run(task_argv(stage, rundir, task, python=python), f, env=local_task_env(), task=(rundir, stage, task))
    return TaskResult(stage, task, rc, log)


def run_group(python: str, stage: str, rundir: Path, index: int, units: Sequence[int]) -> list[TaskResult]:
    """One group of units at once, as an array task with C cores runs them (run/group.py)."""
    runs = group.run_units(lambda u: task_argv(stage, rundir, u, python=python), units,
                           lambda u: RunDir(rundir).local_log(stage, u), f"{stage} group {index}", append=False,
                           env=local_task_env(), owner=WORKERS)
    return [TaskResult(stage, r.unit, r.returncode, r.log) for r in runs]


def run_stage(python: str, stage: str, rundir: Path, tasks: Sequence[int], jobs: int,
              progress: Callable[[str], None] | None = None, cpus: int = 1) -> None:
    """The stage's tasks, `jobs` cores at a time: one process per task, or groups of `cpus` tasks."""
    done = 0
    failed: list[TaskResult] = []
    if cpus > 1:  # jobs // cpus groups at once, each running its units in parallel
        groups = [(g, [t for t in tasks if t // cpus == g]) for g in group.groups_of(tasks, cpus)]
        work, workers = (lambda gu: run_group(python, stage, rundir, *gu)), max(1, jobs // cpus)
    else:
        groups = [(t, [t]) for t in tasks]
        work, workers = (lambda gu: [run_task(python, stage, rundir, gu[0])]), max(1, jobs)
    pool = ThreadPoolExecutor(max_workers=workers)
    ticker = Ticker(RunDir(rundir), stage)
    say = progress or ticker.say
    try:
        for rs in pool.map(work, groups):
            for r in rs:
                done += 1
                if r.returncode != 0:
                    failed.append(r)
                say(f"{stage:<9} {done}/{plural(len(tasks), 'task')}" + (f", {len(failed)} failed" if failed else ""))
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGHUP / SIGTERM (Stop)
        survivors = WORKERS.stop()  # before the pool waits for its threads: they wait on these processes
        pool.shutdown(wait=True, cancel_futures=True)
        raise Interrupted(stage, done, len(tasks), getattr(exc, "signum", signal.SIGINT), survivors) from None
    finally:
        ticker.stop()
    pool.shutdown(wait=True)
    if failed:
        lines = [f"  task {r.task}: {last_error_line(r.log)}  (log: {r.log})" for r in failed]
        raise StageFailed(f"{stage}: {len(failed)} of {plural(len(tasks), 'task')} failed\n" + "\n".join(lines))


class Ticker:
    """Progress of a running stage on stderr: rewritten in place on a terminal, a plain line every 30 s otherwise.

    Every other line of the stage goes through `say`, which ends the live line first, so that two
    never run together on a terminal; `stop` prints the final state (all shards, 100%), not the last tick.
    """

    def __init__(self, run: RunDir, stage: str, stream=None) -> None:
        self.run, self.stage, self.started = run, stage, time.time()
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.lock = threading.Lock()
        self.live: str | None = None  # the line shown in place now (terminal only)
        self.last: str | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        if stage in ("partition", "write"):
            self.thread.start()

    def _show(self, line: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        if self.tty:
            print(f"\r{stamped}\x1b[K", end="", file=self.stream, flush=True)
            self.live = stamped
        else:
            print(stamped, file=self.stream, flush=True)
        self.last = line

    def _tick(self) -> None:
        from shard_pipeline.run.status import live_line

        line = live_line(self.run, self.stage, self.started)
        with self.lock:
            if line and line != self.last:
                self._show(line)

    def _loop(self) -> None:
        while not self.done.wait(1.0 if self.tty else 30.0):
            self._tick()

    def say(self, text: str) -> None:
        """A line of its own (tasks done, ...): the live line is cleared, the text printed, the live line redrawn."""
        with self.lock:
            if self.tty and self.live is not None:
                print(f"\r\x1b[K{text}", file=self.stream, flush=True)
                print(f"\r{self.live}\x1b[K", end="", file=self.stream, flush=True)
            else:
                print(text, file=self.stream, flush=True)

    def stop(self) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()
            self._tick()  # the final state: a stage that finished shows all of its work
            with self.lock:
                if self.tty and self.live is not None:
                    print(file=self.stream, flush=True)
                    self.live = None


class Interrupted(Exception):
    """Ctrl-C (or SIGHUP, SIGTERM): the workers were stopped during `stage`, after `done` of its `total` tasks returned."""

    def __init__(self, stage: str, done: int, total: int, signum: int = signal.SIGINT,
                 survivors: list[int] | None = None) -> None:
        super().__init__(stage, done, total)
        self.stage, self.done, self.total, self.signum = stage, done, total, signum
        self.survivors = survivors or []
        self.finished: list[str] = []


class Stop(KeyboardInterrupt):
    """SIGHUP or SIGTERM reached the executor: it stops its tasks as Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def signal_words(signum: int) -> str:
    return {signal.SIGINT: "interrupted (Ctrl-C)",
            signal.SIGHUP: "stopped by SIGHUP (the terminal or SSH session closed)",
            signal.SIGTERM: "stopped by SIGTERM"}.get(signum, f"stopped by signal {signum}")


@contextlib.contextmanager
def stopped_by_signals():
    """SIGHUP (a closed terminal or SSH session) and SIGTERM stop the run as Ctrl-C does: the tasks
    die with the executor instead of running on unseen. A SIGHUP that nohup set to ignore stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = []

    def handler(signum, _frame) -> None:
        if not fired:  # the second signal must not break off the stopping of the first
            fired.append(signum)
            raise Stop(signum)

    old = {}
    for sig in (signal.SIGHUP, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def say(*lines: str) -> None:
    """Lines on stderr; a terminal that closed (SIGHUP) must not turn the stop into a traceback."""
    for line in lines:
        try:
            print(line, file=sys.stderr, flush=True)
        except OSError:
            pass


def run_all(python: str, rundir: Path, layout: dict[str, Sequence[int]], jobs: int,
            execution: Execution | None = None) -> None:
    """Run the stages in order; a failed stage stops the chain (like afterok)."""
    finished: list[str] = []
    WORKERS.reset()
    for stage in STAGES:
        if layout.get(stage.name):  # a resume runs only what is unfinished
            try:
                run_stage(python, stage.name, rundir, layout[stage.name], jobs,
                          cpus=execution.units_per_task(stage.name) if execution else 1)
            except Interrupted as exc:
                exc.finished = finished
                raise
            finished.append(stage.name)


def out_now(run: RunDir, cfg: RunConfig, out: Path) -> str:
    """What OUT holds now, truthfully: this run's output (swapped in, last steps unfinished) or what it held before."""
    from shard_pipeline.contract.shard import load_manifest

    try:
        manifest = load_manifest(out)
    except (OSError, ValueError):
        manifest = None
    if manifest is not None and manifest.get("config_sha256") == cfg.content.sha256() and run.plan_json.exists():
        try:
            plan = read_json(run.plan_json)
        except (OSError, ValueError):
            plan = None
        if plan is not None and manifest.get("rows") == plan.get("rows") and not _stale_before(out, run):
            return (f"{out} now holds this run's complete output (it was swapped in; the previous version is gone); "
                    "only the steps after the swap are unfinished")
    return f"{out} is as it was before this run (nothing of this run reached it)"


def _stale_before(out: Path, run: RunDir) -> bool:
    """True when OUT's manifest predates this run's plan: an earlier identical run's output, not ours."""
    try:
        return (out / "_MANIFEST.json").stat().st_mtime < run.plan_json.stat().st_mtime
    except OSError:
        return True


def mark_interrupted(run: RunDir, signum: int, stage: str) -> None:
    """Record in the run dir that a signal stopped it: --status then calls its stopped tasks interrupted,
    not failed (a new start or resume removes the marker)."""
    try:
        write_json_atomic(run.interrupted_marker, {"signal": int(signum), "words": signal_words(signum),
                                                   "stage": stage, "at": time.time()})
    except OSError as exc:  # a full disk: --status then shows the stopped tasks as failed, the resume is the same
        say(f"hplt-shard: warning: could not record the interruption in {run.interrupted_marker}: {exc}")


def stopped(run: RunDir, cfg: RunConfig, out: Path, exc: Interrupted) -> int:
    """What a stopped local run says; the claim on OUT is released only once no task of the run is alive."""
    mark_interrupted(run, exc.signum, exc.stage)
    if exc.survivors:
        stuck = f"tasks that did not end: pids {', '.join(map(str, exc.survivors))}; OUT stays claimed"
    else:
        release(out, run.root)
        stuck = "every task process was stopped"
    done = ", ".join(exc.finished) or "none"
    say(f"\nhplt-shard: {signal_words(exc.signum)}: {stuck}. Stages finished: {done}; "
        f"{exc.stage} stopped after {exc.done} of {plural(exc.total, 'task')}.",
        f"hplt-shard: {out_now(run, cfg, out)}",
        f"hplt-shard: to continue: {resume_command(run.root, '--executor', 'local')}")
    return signal_exit(exc.signum)


def run_local(run: RunDir, cfg: RunConfig, tasks: dict[str, list[int]], jobs: int, out: Path) -> int:
    record = read_json(run.run_json)
    record["submissions"].append({"kind": "local", "submitted_at": time.time(), "tasks": tasks, "jobs": []})
    write_json_atomic(run.run_json, record)
    try:
        with stopped_by_signals():
            run_all(sys.executable, run.root, tasks, jobs, cfg.execution)
    except StageFailed as exc:
        live.prune(run.root)  # a task killed by the OOM killer left its record: it failed, it was not interrupted
        release(out, run.root)
        print(f"hplt-shard: {exc}", file=sys.stderr)
        print(f"hplt-shard: run directory {run.root}; {out_now(run, cfg, out)}", file=sys.stderr)
        step = bad_record_step(run, str(exc).splitlines())
        if step:
            print(f"hplt-shard: {step}", file=sys.stderr)
        return ExitCode.FAILED
    except (Interrupted, KeyboardInterrupt) as exc:
        if not isinstance(exc, Interrupted):  # between two stages: no task was running
            exc = Interrupted("the next stage", 0, 0, getattr(exc, "signum", signal.SIGINT), WORKERS.stop())
        return stopped(run, cfg, out, exc)
    manifest = json.loads((out / "_MANIFEST.json").read_text())
    print(f"done: {plural(manifest['rows'], 'document')} in {plural(len(manifest['shards']), 'shard')} "
          f"(train {manifest['splits']['train']:,}, val {manifest['splits']['val']:,})")
    print(f"output:  {out}  (manifest {out / '_MANIFEST.json'})")
    print(f"run dir: {run.root}  (validation.json, logs/)")
    return ExitCode.OK
