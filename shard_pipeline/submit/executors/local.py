"""Local executor: the stages in order, each stage's units forked from this process, `--jobs` cores at a time, blocking."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from shard_pipeline.errors import ExitCode, signal_exit
from shard_pipeline.run import live
from shard_pipeline.worker import group
from shard_pipeline.run.claim import release
from shard_pipeline.run.next_step import each_language
from shard_pipeline.run.render import EndOfRun, Landed, end_of_run, only_skipped, skipped_lines
from shard_pipeline.run.runstate import RunPhase
from shard_pipeline.run.stage_status import stage_statuses
from shard_pipeline.run.steps import Resume, StepFacts, decide, render
from shard_pipeline.run.registry import STAGES, done_warnings
from shard_pipeline.run.registry import stage as registered
from shard_pipeline.run.unit_table import UnitTable, record_submission
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.worker.taskcmd import task_argv
from shard_pipeline.run.tasklog import last_error_line
from shard_pipeline.submit.executors import local_task_env
from shard_pipeline.units import plural


@dataclass(frozen=True)
class TaskResult:
    stage: str
    task: int  # the global unit (a task of a run of one language)
    returncode: int
    log: Path
    name: str  # `fin_Latn task 3` (unit_name)
    error: str | None = None  # it did not start (worker/group.py): its log, if any, is an older attempt's


class _Workers:
    """The task processes alive now (worker/group.py reports each), each in its own session: a terminal's SIGINT
    or SIGHUP reaches only the executor, which ends every task's process group and starts no new one. A task it
    cannot stop so (the executor SIGKILLed) dies by its parent-death signal (run/live.py)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.adopted: set[int] = set()
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

    def stop(self, grace: float = 10.0) -> list[int]:
        """SIGTERM every task's process group, then SIGKILL what is still alive after `grace` seconds;
        the pids still alive after that (a process stuck in the kernel), normally none."""
        with self.lock:
            self.stopping = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with self.lock:
                groups = list(self.adopted)
            for pgid in groups:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, sig)
            deadline = time.monotonic() + grace
            while self.adopted and time.monotonic() < deadline:
                time.sleep(0.05)
        return sorted(self.adopted)


WORKERS = _Workers()


def unit_log(table: UnitTable, stage: str, g: int) -> Path:
    """A unit's log, in its language's task numbers (`local_<task>.log`); a single job's in RUNDIR."""
    if not table.is_array(stage):
        return RunDir(table.root).local_log(stage, 0)
    lang, t = table.locate(stage, g)
    return RunDir(table.lang_dir(lang)).local_log(stage, t)


def unit_name(table: UnitTable, stage: str, g: int) -> str:
    """How a failure names a unit: `fin_Latn task 3`, in its language's task numbers; a single job: `job`."""
    if not table.is_array(stage):
        return "job"
    lang, t = table.locate(stage, g)
    return f"{lang} task {t}"


def run_group(python: str, stage: str, table: UnitTable, index: int, units: Sequence[int]) -> list[TaskResult]:
    """One array index's units at once, as its Slurm array task runs them (plan, finalize: a group of one), forked
    from this process, which imported the stage code once (worker/group.py)."""
    label = f"{stage} group {index}" if table.is_array(stage) else stage
    runs = group.run_units(lambda g: task_argv(stage, table.root, g, python=python), units,
                           lambda g: unit_log(table, stage, g), label, append=False,
                           env=local_task_env(), owner=WORKERS)
    return [TaskResult(stage, r.unit, r.returncode, r.log, unit_name(table, stage, r.unit), r.error) for r in runs]


def run_stage(python: str, stage: str, table: UnitTable, units: Sequence[int], jobs: int,
              progress: Callable[[str], None] | None = None) -> list[TaskResult]:
    """The stage's units, `jobs` cores at a time: one process per unit, or groups of C units
    (one array index each, as under Slurm). Returns the failed ones."""
    done = 0
    failed: list[TaskResult] = []
    cpus = table.units_per_task(stage)
    if not table.is_array(stage):  # a single job: one group of one unit
        groups, workers = [(0, [0])], 1
    else:  # jobs // C groups at once, each running its C units in parallel, forked from one import (worker/group.py)
        groups = [(i, [g for g in units if g // cpus == i]) for i in table.array_indices(stage, units)]
        workers = max(1, jobs // cpus)
    total = sum(len(u) for _, u in groups)
    noun = table.item_noun(stage)
    pool = ThreadPoolExecutor(max_workers=workers)
    ticker = Ticker([RunDir(table.lang_dir(lang)) for lang in table.langs], stage)
    say = progress or ticker.say
    try:
        try:
            for rs in pool.map(lambda gu: run_group(python, stage, table, *gu), groups):
                for r in rs:
                    done += 1
                    if r.returncode != 0:
                        failed.append(r)
                    say(f"{stage:<9} {done}/{plural(total, noun)}" + (f", {len(failed)} failed" if failed else ""))
        finally:
            ticker.stop()
        pool.shutdown(wait=True)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGHUP / SIGTERM (Stop); after the last task too: `done` says so
        survivors = WORKERS.stop()  # before the pool waits for its threads: they wait on these processes
        pool.shutdown(wait=True, cancel_futures=True)
        raise Interrupted(stage, done, total, getattr(exc, "signum", signal.SIGINT), survivors) from None
    return failed


class Ticker:
    """Progress of a running stage on stderr: rewritten in place on a terminal, a plain line every 30 s otherwise.
    Every other line goes through `say`, which ends the live line first, so that two never run together."""

    def __init__(self, runs: RunDir | Sequence[RunDir], stage: str, stream=None) -> None:
        self.runs, self.stage, self.started = runs, stage, time.time()
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.lock = threading.Lock()
        self.live: str | None = None  # the line shown in place now (terminal only)
        self.last: str | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        if registered(stage).array:
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
        from shard_pipeline.run.render import live_line

        line = live_line(self.runs, self.stage, self.started)
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
    """Ctrl-C, SIGHUP or SIGTERM reached the executor: it stops its tasks."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def signal_words(signum: int) -> str:
    return {signal.SIGINT: "interrupted (Ctrl-C)",
            signal.SIGHUP: "stopped by SIGHUP (the terminal or SSH session closed)",
            signal.SIGTERM: "stopped by SIGTERM"}.get(signum, f"stopped by signal {signum}")


@contextlib.contextmanager
def stopped_by_signals():
    """Ctrl-C, SIGHUP and SIGTERM stop the run and its tasks. Only the first raises (`Stop`); later ones are ignored,
    so a second Ctrl-C cannot break off the stop with a traceback. A signal nohup ignores stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = []

    def handler(signum, _frame) -> None:
        if not fired:
            fired.append(signum)
            raise Stop(signum)

    old = {}
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        if not fired:  # once stopped, the handler stays: it ignores every later signal while the stop is reported
            for sig, h in old.items():
                signal.signal(sig, h)


def say(*lines: str) -> None:
    """Lines on stderr; a terminal that closed (SIGHUP) must not turn the stop into a traceback."""
    for line in lines:
        with contextlib.suppress(OSError):
            print(line, file=sys.stderr, flush=True)


def run_all(python: str, table: UnitTable, tasks: dict[str, Sequence[int]], jobs: int) -> list[TaskResult]:
    """Run the stages in order; the failed units. A failed language's later units fail at once, naming why; the
    other languages go on (Slurm's afterany)."""
    finished: list[str] = []
    failures: list[TaskResult] = []
    todo = [(stage.name, tasks[stage.name]) for stage in STAGES if tasks.get(stage.name)]  # a resume: the unfinished
    WORKERS.reset()
    try:
        for name, units in todo:
            failed = run_stage(python, name, table, units, jobs)
            failures += failed
            finished.append(name)
    except Interrupted as exc:
        exc.finished = finished
        raise
    except KeyboardInterrupt as exc:  # between two stages: the next one had not started a task
        name, units = todo[min(len(finished), len(todo) - 1)]
        stopped_at = Interrupted(name, 0, len(units), getattr(exc, "signum", signal.SIGINT), WORKERS.stop())
        stopped_at.finished = finished
        raise stopped_at from None
    return failures


def out_now(run: RunDir, cfg: RunConfig, out: Path) -> str:
    """What OUT holds now, truthfully: this run's output (the manifest swap.json recorded, the last steps
    unfinished), nothing while a fallback swap has the previous version parked, or what it held before."""
    from shard_pipeline.contract.replace import PARKED, parking_dir_for, tmp_owner
    from shard_pipeline.run.registry import RunState

    park = parking_dir_for(out)
    if not out.exists() and (park / PARKED).exists() and tmp_owner(park) == str(run.root):
        return (f"{out} is absent for now: the swap was stopped between its two renames; the previous version is "
                f"complete in {park / PARKED} and a resume puts it back before it swaps again")
    if RunState(run).swapped:  # the done-checks' own rule: every shard in OUT the very file a writer made
        return f"{out} now holds this run's complete output (swapped in); only the steps after the swap are unfinished"
    return f"{out} is as it was before this run (nothing of this run reached it)"


def mark_interrupted(run: RunDir, signum: int, stage: str) -> None:
    """Record in the run dir that a signal stopped it: --status then calls its stopped tasks interrupted,
    not failed (a new start or resume removes the marker)."""
    try:
        write_json_atomic(run.interrupted_marker, {"signal": int(signum), "words": signal_words(signum),
                                                   "stage": stage, "at": time.time()})
    except OSError as exc:  # a full disk: --status then shows the stopped tasks as failed, the resume is the same
        say(f"hplt-shard: warning: could not record the interruption in {run.interrupted_marker}: {exc}")


def stopped(table: UnitTable, cfgs: dict[str, RunConfig], exc: Interrupted) -> int:
    """What a stopped local run says; a claim on OUT is released only once no task of the run is alive."""
    if not exc.survivors and all(RunDir(table.lang_dir(lang)).done_marker.exists() for lang in cfgs):
        say(f"\nhplt-shard: {signal_words(exc.signum)} after the run had finished: nothing is left to do",
            *(f"done: {lang}  output {cfg.execution.out}" for lang, cfg in cfgs.items()), f"run dir: {table.root}")
        return ExitCode.OK
    words = [f"\nhplt-shard: {signal_words(exc.signum)}: "
             + (f"tasks that did not end: pids {', '.join(map(str, exc.survivors))}; OUT stays claimed"
                if exc.survivors else "every task process was stopped")
             + f". Stages finished: {', '.join(exc.finished) or 'none'}; "
             f"{exc.stage} stopped after {exc.done} of {plural(exc.total, 'task')}."]
    for lang, cfg in cfgs.items():
        run, out = RunDir(table.lang_dir(lang)), Path(cfg.execution.out)
        if run.done_marker.exists():  # a language that landed before the stop
            words.append(f"hplt-shard: {lang}: landed: {out} holds this run's output")
            continue
        mark_interrupted(run, exc.signum, exc.stage)
        if not exc.survivors:
            release(out, run.root)
        words.append(f"hplt-shard: {lang}: {out_now(run, cfg, out)}")
    say(*words, f"hplt-shard: to continue: {render(Resume(table.root, ('--executor', 'local')))}")
    return signal_exit(exc.signum)


def run_local(table: UnitTable, cfgs: dict[str, RunConfig], tasks: dict[str, list[int]], jobs: int,
              kind: str) -> int:
    """Every stage here, blocking; the languages that landed, and the next step for the rest."""
    record_submission(table, f"local-{kind}", tasks, [])
    try:
        with stopped_by_signals():
            failures = run_all(sys.executable, table, tasks, jobs)
    except (Interrupted, KeyboardInterrupt) as exc:
        if not isinstance(exc, Interrupted):  # between two stages: no task was running
            exc = Interrupted("the next stage", 0, 0, getattr(exc, "signum", signal.SIGINT), WORKERS.stop())
        return stopped(table, cfgs, exc)
    return report(table, cfgs, failures)


def landed(lang: str, run: RunDir, out: Path) -> Landed:
    """A landed language's figures, from the manifest it swapped in."""
    manifest = json.loads((out / "_MANIFEST.json").read_text())
    return Landed(lang, out, manifest["rows"], len(manifest["shards"]), manifest["splits"]["train"],
                  manifest["splits"]["val"], tuple(done_warnings(run)))


def report(table: UnitTable, cfgs: dict[str, RunConfig], failures: Sequence[TaskResult]) -> int:
    """Per language: landed, or not, with its claim released (its previous output untouched); then the
    run's next step, decided as --status decides it (run/steps.py)."""
    done, not_landed, dirs = [], [], {}
    for lang, cfg in cfgs.items():
        run, out = RunDir(table.lang_dir(lang)), Path(cfg.execution.out)
        live.prune(run.root)  # a unit killed (OOM killer, a fault) while the executor lived failed
        if run.done_marker.exists():
            done.append(landed(lang, run, out))
            continue
        release(out, run.root)
        not_landed.append((lang, out_now(run, cfg, out)))
        dirs[lang] = run.root
    step = decide(StepFacts(table.root, RunPhase.FAILED, new_runs=each_language(table.root, dirs).new_runs,
                            unfinished=tuple(dirs), local=True))
    sts = {lang: stage_statuses(RunDir(root)) for lang, root in dirs.items()}  # a skip is said once per stage
    tasks = tuple((r.stage, r.name, r.error or last_error_line(r.log), r.log) for r in failures if not only_skipped(
        r.stage, [table.locate(r.stage, r.task)] if table.is_array(r.stage) else [(lang, 0) for lang in sts], sts))
    skipped = tuple(line for lang, s in sts.items() for line in skipped_lines(s, f"{lang} "))
    lines, errors = end_of_run(EndOfRun(table.root, tuple(done), tasks, tuple(not_landed), step, skipped))
    for line in lines:
        print(line)
    say(*errors)
    return ExitCode.FAILED if not_landed else ExitCode.OK
