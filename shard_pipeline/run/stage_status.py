"""Each stage's tasks by state, from the run dir's records, the scheduler's answer (run/queue.py) and the
live-task records (run/live.py); the run's phase and each language's. A language is viewed from its own run
dir, whose run.json holds the chain's chunks in its own task numbers (unit_table.record_submission).
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.run import live, outcome, unit_table
from shard_pipeline.run.outcome import Kind, Outcome, TaskFigures, UnitExit
from shard_pipeline.run.queue import latest_jobs, resume_hint, slurm_reason, split_queued, squeue_states
from shard_pipeline.run.registry import STAGES, RunState, manifest_is_this_runs
from shard_pipeline.run.rundir import RunDir, read_json, unit_log
from shard_pipeline.run.runstate import Counts, RunPhase, TaskState, ran_locally, run_phase, task_state
from shard_pipeline.run.steps import Resume
from shard_pipeline.run.tasklog import last_error_line, last_progress_line
from shard_pipeline.run.run_json import read_run_json


@dataclass(frozen=True)
class FailedTask:
    """A task that failed: its log and what ended it (its outcome record's error, else its log's last error
    line); when Slurm ended it, why (`reason`: OUT_OF_MEMORY, ...) and the resume that reason calls for."""

    task: int
    log: Path
    last_line: str
    reason: str | None = None
    resume: Resume | None = None
    kind: Kind | None = None  # its outcome record's kind; None: it ended without one (killed)

    @property
    def consequence(self) -> bool:
        """It skipped because an earlier stage of its language is not done (Kind.UPSTREAM): it never makes the
        run failed by itself."""
        return self.kind is Kind.UPSTREAM


@dataclass
class StageStatus:
    stage: str
    total: int
    done: int = 0
    running: int = 0
    pending: int = 0
    failed: list[FailedTask] = field(default_factory=list)
    progress: list[tuple[int, str]] = field(default_factory=list)  # (running task, its last progress line)
    interrupted: list[int] = field(default_factory=list)  # tasks stopped from outside (Ctrl-C, scancel)
    reasons: list[tuple[int, str]] = field(default_factory=list)  # (pending task, squeue's reason)
    requeued: list[int] = field(default_factory=list)  # pending tasks that had started: Slurm requeued them
    figures: list[TaskFigures] = field(default_factory=list)  # of finished tasks, from their outcome records
    touched: list[int] = field(default_factory=list)  # done tasks with a file touched since (chmod, chgrp): done by size and mtime
    unread: dict[int, Path] = field(default_factory=dict)  # task -> the log (or its folder) this user may not read
    unfinished: list[int] = field(default_factory=list)  # every task not done, whatever its state

    def causes(self) -> list[FailedTask]:
        """The failed tasks that are a cause, not the consequence of an earlier stage (FailedTask.consequence)."""
        return [f for f in self.failed if not f.consequence]

    def skipped(self) -> list[int]:
        """The tasks that skipped for an unfinished earlier stage (FailedTask.consequence)."""
        return [f.task for f in self.failed if f.consequence]

    @property
    def not_started(self) -> int:
        """Waiting: neither queued nor started (a later stage, or not queued again yet)."""
        return self.total - self.done - self.running - self.pending - len(self.failed) - len(self.interrupted)


def counts(statuses: list[StageStatus]) -> Counts:
    """The run's tasks by state (run_phase's input); a skipped unit (FailedTask.consequence) is no failure."""
    return Counts(sum(s.total for s in statuses), sum(s.done for s in statuses), sum(s.running for s in statuses),
                  sum(s.pending for s in statuses), sum(len(s.causes()) for s in statuses),
                  sum(len(s.interrupted) for s in statuses), tuple(r for s in statuses for _, r in s.reasons),
                  skipped=sum(len(s.failed) - len(s.causes()) for s in statuses))


def _task_log(run: RunDir, stage: str, task: int, chunks: list[dict[str, Any]], cpus: int = 1) -> Path | None:
    for j in chunks:
        local = task // cpus - j["offset"]  # array index of the task's group (worker/group.py)
        log_dir = Path(j.get("log_dir") or run.log_dir(stage))  # log_dir: multi-language run
        p = log_dir / f"{j['job_id']}_{local}.log" if cpus == 1 else unit_log(log_dir, j["job_id"], local, task)
        if p.exists():
            return p
    p = run.local_log(stage, task)
    if p.exists():
        return p
    shared = _multi_root(run)  # a multi-language run's plan and finalize: one job, one log for every language
    if shared is not None and stage in unit_table.SINGLE_JOB_STAGES:
        p = RunDir(shared).local_log(stage, 0)
        started = f"= {run.root.name} {stage} task {task};"  # landing.run_entry's line when it starts this unit
        try:
            return p if started in p.read_text(errors="replace") else None
        except OSError:
            return None
    return None


def _readable_log(st: StageStatus, run: RunDir, task: int, chunks: list[dict[str, Any]], cpus: int) -> Path | None:
    """The task's log; one this user may not look in (a colleague's `umask 077` run) is noted in `st.unread` and
    taken as no log."""
    try:
        return _task_log(run, stage=st.stage, task=task, chunks=chunks, cpus=cpus)
    except PermissionError as exc:
        st.unread[task] = Path(exc.filename or run.log_dir(st.stage))
        return None


def _multi_root(run: RunDir) -> Path | None:
    """The multi-language run dir a language's run dir sits in, or None."""
    return run.root.parent if unit_table.is_run_root(run.root.parent) else None


@dataclass(frozen=True)
class _Seen:
    """What every task's state is judged against: the run's records, the scheduler's answer, live processes."""

    run: RunDir
    rs: RunState
    record: dict[str, Any]
    jobs: dict[str, list[dict[str, Any]]]
    queue: dict[str, str]
    local: bool  # the local executor ran the last submission
    alive: frozenset  # (stage, task) of local processes alive now, whoever started them (run/live.py)
    killed: frozenset  # local tasks killed without a word (their submitter SIGKILLed): their records are left
    stopped: bool  # Ctrl-C / SIGTERM / SIGHUP stopped the local executor (its marker)
    held: bool  # a live local submitter: a task whose log has no trailer yet is starting
    strict: bool


def stage_statuses(run: RunDir, queue: dict[str, str] | None = None, strict: bool = False,
                   record: dict[str, Any] | None = None) -> list[StageStatus]:
    """Each stage's tasks by state (runstate.task_state), with the reasons and lines --status shows. `strict`
    (squeue answered): a task that never started and whose job left the queue will not run: interrupted."""
    rs = RunState(run, rehash=False, trust_touched=True)  # a stat per file: --status is run often, on terabytes
    if record is None:  # run.json, unless the caller read it already
        record = read_run_json(run.run_json)
    jobs = latest_jobs(record)
    if queue is None:
        ids = [j["job_id"] for chunks in jobs.values() for j in chunks]
        queue = unit_table.language_queue(unit_table.load(run.root.parent), run.root.name, jobs,
                                          squeue_states(ids, strict=strict))
    local = ran_locally(record)
    tasks = live.scan(run.root)
    # under Slurm a killed task (OOM, a fault) failed, and Slurm's own reason says why
    seen = _Seen(run, rs, record, jobs, queue, local, frozenset(tasks.running(local)),
                 frozenset(tasks.killed() if local else ()), run.interrupted_marker.exists(), run_is_held(run), strict)
    return [_stage_status(seen, reg) for reg in STAGES]


def _stage_status(seen: _Seen, reg) -> StageStatus:
    st = StageStatus(reg.name, reg.tasks(seen.rs.cfg))
    chunks = seen.jobs.get(reg.name, [])
    cpus = seen.rs.cfg.execution.units_per_task(reg.name)
    for task in range(st.total):
        problem, touched = reg.problem_and_touched(seen.rs, task)
        if problem is None:
            _count_done(st, seen.run, task, touched)
        else:
            _count_unfinished(st, seen, task, str(problem), chunks, cpus)
    peak = max((f.max_rss_mb for f in st.figures), default=None)  # the stage's finished tasks measured it by now
    st.failed = [replace(f, resume=resume_hint(seen.run, seen.rs.cfg, reg.name, f.reason, seen.record.get("resources", {}),
                                               peak)) if f.reason else f for f in st.failed]
    return st


def _count_done(st: StageStatus, run: RunDir, task: int, touched: bool) -> None:
    """Counts a done task, with what it used by its outcome record (its log is for people: not read)."""
    st.done += 1
    if touched:
        st.touched.append(task)
    ended = _outcome(st, run, task)
    if ended is not None and ended.kind is Kind.OK:
        st.figures.append(ended.figures)


@dataclass(frozen=True)
class _End:
    """How a task's last attempt ended: its outcome record, its group's exit record, and what --status shows."""

    outcome: Outcome | None
    exit: UnitExit | None
    said: str

    @property
    def failed_by_itself(self) -> bool:
        return self.outcome is not None and self.outcome.kind is not Kind.OK


def _outcome(st: StageStatus, run: RunDir, task: int) -> Outcome | None:
    """The task's outcome record (a damaged one counts as none; an unreadable one is noted in `st.unread`)."""
    try:
        return outcome.read_or_none(run, st.stage, task)
    except PermissionError:
        st.unread[task] = run.outcome(st.stage, task)
        return None


def _end(st: StageStatus, run: RunDir, task: int, log: Path | None, problem: str) -> _End:
    rec = _outcome(st, run, task)
    ended = outcome.read_exit(log) if log is not None else None
    if rec is not None and ended is not None and rec.ended < ended.start:  # an earlier attempt's: not this one's end
        rec = None
    # the plan and finalize job's one log (RUNDIR/logs) holds every language's `ERROR: LANG: ...` lines: only this
    # language's are its own; a unit's own log, or a task run by hand in its run dir, is read whole
    shared = log is not None and st.stage in unit_table.SINGLE_JOB_STAGES and not log.is_relative_to(run.root)
    lang = run.root.name if shared else None
    if rec is not None and rec.kind is Kind.OK:  # it finished, and what it made is gone or changed since
        said = f"it finished, but {problem}: --resume does it again"
    elif rec is not None:
        said = rec.error_line() if lang is None else f"ERROR: {lang}: {rec.error_line().removeprefix('ERROR: ')}"
    else:  # killed, or its record could not be written: what its log and its group say, for people
        said = last_error_line(log, lang) if log is not None else ""
    return _End(rec, ended, said)


def _count_unfinished(st: StageStatus, seen: _Seen, task: int, problem: str, chunks: list[dict[str, Any]],
                      cpus: int) -> None:
    """Counts a task that is not done in its state."""
    run, stage = seen.run, st.stage
    st.unfinished.append(task)
    queued, why = split_queued(next((seen.queue[k] for j in chunks
                                     for k in [f"{j['job_id']}_{task // cpus - j['offset']}"] if k in seen.queue), None))
    log = _readable_log(st, run, task, chunks, cpus) if queued is None or queued == "RUNNING" else None
    end = _end(st, run, task, log, problem)
    # only a Slurm task that ended without its outcome record was ended from outside: Slurm says why
    reason = slurm_reason(log) if log is not None and queued is None and not seen.local and end.outcome is None \
        else None
    starting = seen.held and log is not None and end.exit is None
    # A local unit that ended by itself has its exit record, even a crash; one without it or an outcome that no
    # process runs lost its parent: the submitter was killed (SIGKILL) while it started or ran the unit.
    orphaned = (seen.local and log is not None and not starting and (stage, task) not in seen.alive
                and end.exit is None and end.outcome is None)
    cut = reason == "CANCELLED" or ((seen.stopped or (stage, task) in seen.killed or orphaned)
                                    and not end.failed_by_itself)
    # squeue -r lists every task Slurm holds: a task of the last submission that it does not list and that
    # has no log never started and never will (scancel of the task or its array, a dependency killed it)
    never = seen.strict and not seen.local and log is None and queued is None and bool(chunks)
    state = task_state(done=False, queued=queued, alive=(stage, task) in seen.alive or starting,
                       has_log=log is not None, interrupted=(log is not None and cut) or never)
    if state is TaskState.RUNNING:
        st.running += 1
        line = last_progress_line(log) if log is not None else None
        if line:
            st.progress.append((task, line))
    elif state is TaskState.PENDING:
        st.pending += 1
        st.reasons.append((task, why))
        if _readable_log(st, run, task, chunks, cpus) is not None:  # started in this submission
            st.requeued.append(task)
    elif state is TaskState.INTERRUPTED:
        st.interrupted.append(task)
    elif state is TaskState.FAILED and log is not None:
        st.failed.append(FailedTask(task, log, end.said, reason, kind=end.outcome.kind if end.outcome else None))


def phase_of(run: RunDir, statuses: list[StageStatus]) -> RunPhase:
    """The run's phase (runstate.run_phase) from its stages, its DONE marker and its lock."""
    return run_phase(counts(statuses), done_marker=run.done_marker.exists(), held=run_is_held(run))


def run_is_held(run: RunDir) -> bool:
    """A live submitter holds the run, or, for a language of a multi-language run, the whole run."""
    root = _multi_root(run)
    return held_by_a_process(run) or (root is not None and held_by_a_process(RunDir(root)))


def queued_job_ids(run: RunDir, statuses: list[StageStatus]) -> list[str]:
    """The job ids of the stages that still have tasks in Slurm's queue: what a scancel of the run names."""
    jobs = latest_jobs(read_run_json(run.run_json))
    return list(dict.fromkeys(j["job_id"] for st in statuses if st.pending or st.running for j in jobs.get(st.stage, [])))


def elsewhere(record: dict, *roots: Path) -> str:
    """What --status adds while a local run has tasks recorded on another host: the words a resume refuses with."""
    away = [x for r in roots for x in live.scan(r).elsewhere()] if ran_locally(record) else []
    return live.elsewhere_step(away) if away else ""


def last_refusal(record: dict) -> dict | None:
    """The refused submission (run.json `refused_submissions`) if none was queued after it."""
    refused = record.get("refused_submissions", [])[-1:]
    last_queued = max((s.get("submitted_at", 0) for s in record.get("submissions", [])), default=0)
    return refused[0] if refused and refused[0].get("refused_at", 0) > last_queued else None


def held_by_a_process(run: RunDir) -> bool:
    """True while a local run or a resume holds the run's lock (its tasks have logs but no receipts yet)."""
    from filelock import FileLock, Timeout

    path = run.lock_file
    if not path.exists():
        return False
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    except OSError:
        return False
    lock.release()
    return False


def landed_at(run: RunDir) -> str | None:
    """When the language landed: its DONE marker's time (UTC), None if it has not."""
    try:
        t = run.done_marker.stat().st_mtime
    except OSError:
        return None
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


LANGUAGE_WORD = {RunPhase.RUNNING: "running", RunPhase.QUEUED: "waiting", RunPhase.INTERRUPTED: "interrupted",
       RunPhase.STUCK: "stuck", RunPhase.FAILED: "failed", RunPhase.DONE: "landed"}


def language_state(run: RunDir, sts: list[StageStatus], chain_alive: bool) -> tuple[RunPhase, str]:
    """The language's phase (`chain_alive`: a local executor runs the chain) and its row's word. A language with a
    failed task and none running is failed even while other languages' jobs run: only --resume redoes it."""
    c = counts(sts)
    phase = run_phase(c, done_marker=run.done_marker.exists(), held=chain_alive)
    failed = [st.stage for st in sts if st.causes()] if c.failed else []
    if failed and phase in (RunPhase.RUNNING, RunPhase.QUEUED) and not any(st.running for st in sts):
        phase = RunPhase.FAILED
    if phase is RunPhase.DONE:
        return phase, f"landed {landed_at(run)}"
    if phase is RunPhase.FAILED:
        return phase, f"{LANGUAGE_WORD[phase]} ({failed[0]})"
    pending = [(st.stage, why) for st in sts for _, why in st.reasons]
    if phase is RunPhase.QUEUED and pending:  # what Slurm says it waits for, as a single run's --status shows
        stage, why = pending[0]
        return phase, f"{LANGUAGE_WORD[phase]} ({stage}: {why.split(',')[0]})"
    return phase, LANGUAGE_WORD[phase]


def rebuilt_by(root: Path, lang: str, run: RunDir) -> Path | None:
    """The done new run of `lang` alone (RUNDIR-LANG-..., next_step.py) whose output is provably the one in
    ROOT/LANG now: the language was made by it."""
    try:
        out = Path(read_json(run.config_json)["execution"]["out"])
        manifest = read_json(out / MANIFEST_NAME)
        candidates = sorted(root.parent.glob(f"{root.name}-{lang}-*"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return next((c for c in candidates if RunDir(c / lang).done_marker.exists()  # the new run's own language dir
                 and manifest_is_this_runs(RunDir(c / lang), out, manifest, rehash=False)), None)


