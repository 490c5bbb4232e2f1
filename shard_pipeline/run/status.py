"""Where a run stands: per stage done / running / pending / failed, failures with their logs, an ETA.

Works from the run directory alone once the jobs have left the queue, and asks squeue about
the run's own job ids while they are in it. A run of several languages gets a row per language,
each from the language's own run dir, whose run.json holds the chain's chunks in its own task
numbers (run/unit_table.py record_submission): one squeue call for the chain; with C units per array
task its indices are translated to the language's task numbers first (`language_queue`). Each
language's phase is runstate.run_phase's (`language_state`): landed (with the time of its DONE
marker), running, waiting, failed, interrupted or stuck.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shard_pipeline import slurm
from shard_pipeline.errors import ExitCode, UsageError, UserError
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.commands import command, resume_command, status_command
from shard_pipeline.run import live, unit_table
from shard_pipeline.run.next_step import check_this_version, new_run_step
from shard_pipeline.run.receipts import PartitionCheckpoint, PartitionReceipt, Validation
from shard_pipeline.run.registry import STAGES, RunState, done_warnings, manifest_is_this_runs, run_history, since_done
from shard_pipeline.run.records import Problem, made_here, read_record
from shard_pipeline.run.runconfig import RunConfig, StageResources, load_config
from shard_pipeline.run.rundir import RunDir, check_whole, read_json, unit_log
from shard_pipeline.run.runstate import (
    Counts,
    RunPhase,
    TaskState,
    interrupted_step,
    ran_locally,
    is_stuck,
    refused_step,
    run_phase,
    stuck_step,
    task_state,
)
from shard_pipeline.run.tasklog import TaskFigures, ended_well, last_error_line, last_figures, last_progress_line, unit_ended
from shard_pipeline.units import UNIT_MEMORY_FLOOR, Memory, WallTime, plural


@dataclass
class StageStatus:
    stage: str
    total: int
    done: int = 0
    running: int = 0
    pending: int = 0
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (task, log, last error line)
    progress: list[tuple[int, str]] = field(default_factory=list)  # (running task, its last progress line)
    interrupted: list[int] = field(default_factory=list)  # tasks stopped from outside (Ctrl-C, scancel)
    reasons: list[tuple[int, str]] = field(default_factory=list)  # (pending task, squeue's reason)
    requeued: list[int] = field(default_factory=list)  # pending tasks that had started: Slurm requeued them
    figures: list[TaskFigures] = field(default_factory=list)  # of finished tasks whose log has them
    touched: list[int] = field(default_factory=list)  # done tasks with a file touched since (chmod, chgrp): done by size and mtime
    unread: dict[int, Path] = field(default_factory=dict)  # task -> the log (or its folder) this user may not read

    @property
    def not_started(self) -> int:
        """Waiting: neither queued nor started (a later stage, or not queued again yet)."""
        return self.total - self.done - self.running - self.pending - len(self.failed) - len(self.interrupted)


def counts(statuses: list[StageStatus]) -> Counts:
    """The run's tasks by state, over its stages (runstate.run_phase's input)."""
    return Counts(sum(s.total for s in statuses), sum(s.done for s in statuses), sum(s.running for s in statuses),
                  sum(s.pending for s in statuses), sum(len(s.failed) for s in statuses),
                  sum(len(s.interrupted) for s in statuses), tuple(r for s in statuses for _, r in s.reasons))


def latest_jobs(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per stage, the array chunks of the most recent submission that included that stage."""
    out: dict[str, list[dict[str, Any]]] = {}
    for sub in record.get("submissions", []):
        stages = {j["stage"] for j in sub["jobs"]}
        for stage in stages:
            out[stage] = [j for j in sub["jobs"] if j["stage"] == stage]
    return out


class SlurmUnreachable(UserError):
    """squeue could not reach the controller: which jobs are queued is unknown, so no state is claimed."""

    exit_code = ExitCode.FAILED


# squeue's words for ids the controller has forgotten (long finished): an answer, not a failure to answer
_FORGOTTEN = "Invalid job id specified"


def squeue_states(job_ids: list[str], run=subprocess.run, *, strict: bool = False) -> dict[str, str]:
    """'<array id>_<task>' -> 'STATE|REASON' for the still-queued tasks of these arrays (-r: one line per task).

    Jobs Slurm has forgotten (long finished) are simply absent. With `strict` (--status) squeue must
    answer (installed, the controller reachable): the jobs may be queued, so calling them finished, failed
    or interrupted would be a guess. Without it (a job's own look at its run, landing.py) an unanswered
    squeue leaves the states to the run dir."""
    if not job_ids:
        return {}
    answer = slurm.call(["squeue", "-h", "-r", f"--jobs={','.join(job_ids)}", "-o", "%i|%T|%r"], 60, run)
    if strict and not answer.ok and _FORGOTTEN not in answer.stderr:
        raise SlurmUnreachable(f"Slurm did not answer ({answer.why()}): whether this run's jobs are still queued is "
                               "unknown, so --status says no state; ask again once squeue answers (squeue --me)")
    return parse_squeue(answer.stdout)


def parse_squeue(text: str) -> dict[str, str]:
    """squeue -o '%i|%T|%r' lines -> {'123_4': 'PENDING|PartitionConfig'}."""
    states = {}
    for line in text.splitlines():
        jid, _, rest = line.strip().partition("|")
        if jid:
            states[jid] = rest
    return states


def split_queued(value: str | None) -> tuple[str | None, str]:
    """('PENDING', 'PartitionConfig') from squeue_states' value; (None, '') when Slurm does not hold the task."""
    if value is None:
        return None, ""
    state, _, reason = value.partition("|")
    return state, reason


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
    """The task's log as `_task_log` finds it; a log folder this user may not look in (a colleague's run, written
    under `umask 077`) is noted in `st.unread` and taken as no log: the table is shown, with what it cannot know."""
    try:
        return _task_log(run, stage=st.stage, task=task, chunks=chunks, cpus=cpus)
    except PermissionError as exc:
        st.unread[task] = Path(exc.filename or run.log_dir(st.stage))
        return None


def _multi_root(run: RunDir) -> Path | None:
    """The multi-language run dir a language's run dir sits in, or None."""
    return run.root.parent if unit_table.is_multi(run.root.parent) else None


_LOG_REASONS = (  # what slurmstepd / slurmd write into a task's log when Slurm ends it
    (re.compile(r"oom[-_ ]kill|out of memory|OUT_OF_MEMORY", re.I), "OUT_OF_MEMORY"),
    (re.compile(r"DUE TO TIME LIMIT|TIMEOUT", re.I), "TIMEOUT"),
    (re.compile(r"DUE TO NODE FAIL|NODE_FAIL", re.I), "NODE_FAIL"),
    (re.compile(r"DUE TO PREEMPTION|PREEMPTED", re.I), "PREEMPTED"),
    (re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ \*\*\*"), "CANCELLED"),  # scancel: no "DUE TO"
)
SACCT_REASONS = ("OUT_OF_MEMORY", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "CANCELLED", "FAILED")


def slurm_reason(log: Path, run=subprocess.run) -> str | None:
    """Why Slurm ended a task (OUT_OF_MEMORY, TIMEOUT, NODE_FAIL, ...): from sacct when it is
    installed and remembers the job, else from the lines Slurm wrote into the log; None if unknown."""
    m = re.fullmatch(r"(\d+)_(\d+)\.log", log.name)
    if m and shutil.which("sacct"):
        out = slurm.call(["sacct", "-n", "-P", "-X", "-j", f"{m[1]}_{m[2]}", "-o", "State"], 30, run).stdout
        states = [l.split()[0] for l in out.splitlines() if l.strip()]
        for state in reversed(states):
            if state in SACCT_REASONS[:5]:
                return state
    try:
        tail = log.read_text(errors="replace")[-20000:]
    except OSError:
        return None
    for pattern, reason in _LOG_REASONS:
        if pattern.search(tail):
            return reason
    return None


def resume_hint(run: RunDir, cfg: RunConfig, stage: str, reason: str, given: dict[str, Any] | None = None,
                peak_mb: float | None = None) -> str:
    """The command that helps after this reason: more memory, more time, or just another try.

    `--mem` on resume means what it meant at submission, one unit's memory, so the hint doubles
    what the stage's units had, counting an earlier resume's --mem/--time (`given`: run.json's
    "resources", read here when the caller has not).
    """
    if given is None:
        given = read_json(run.run_json).get("resources", {}) if run.run_json.exists() else {}
    ex = cfg.execution.with_resources(given.get("mem"), given.get("time"))
    return reason_step(run.root, reason, ex.resources.get(stage) or StageResources("4G", "01:00:00"),
                       ex.units_per_task(stage), peak_mb)


def reason_step(root: Path, reason: str, res: StageResources, units: int, peak_mb: float | None = None) -> str:
    """The resume command after Slurm ended a task for `reason`, whose array task had `res` for `units` units:
    after OUT_OF_MEMORY the most of twice one unit's memory, twice the floor a unit needs, and 1.5x the peak
    the stage's finished tasks measured (`peak_mb`); twice the time after TIMEOUT; the same again otherwise
    (NODE_FAIL, PREEMPTED: the node, not the task, was at fault)."""
    if reason == "OUT_OF_MEMORY":
        options = [Memory.parse(res.mem).share(units).times(2), Memory(UNIT_MEMORY_FLOOR >> 20, "M").times(2)]
        if peak_mb is not None:
            options.append(Memory(int(peak_mb * 1.5) + 1, "M"))
        return resume_command(root, "--mem", max(options, key=lambda m: m.bytes))
    if reason == "TIMEOUT":
        return resume_command(root, "--time", WallTime.parse(res.time).times(2))
    return resume_command(root)


def stage_statuses(run: RunDir, queue: dict[str, str] | None = None, strict: bool = False,
                   record: dict[str, Any] | None = None) -> list[StageStatus]:
    """Each stage's tasks by state (runstate.task_state), with the reasons and lines --status shows.

    `strict` (--status, whose squeue answered; a run of several passes its queue): a task that never started and whose job has left the queue
    (scancel, or cancelled for a dependency that can never be met) will not run: interrupted, not waiting."""
    rs = RunState(run, rehash=False, trust_touched=True)  # a stat per file: --status is run often, on terabytes
    if record is None:  # run.json, unless the caller read it already
        record = read_json(run.run_json)
    jobs = latest_jobs(record)
    if queue is None:
        queue = unit_table.queue_of_language(run, jobs, squeue_states([j["job_id"] for chunks in jobs.values() for j in chunks],
                                                                      strict=strict))
    local = ran_locally(record)
    tasks = live.scan(run.root)
    alive = tasks.running(local)  # local tasks alive now, whoever started them (run/live.py)
    stopped = run.interrupted_marker.exists()  # Ctrl-C / SIGTERM / SIGHUP stopped the local executor
    # A local task killed without a word (its submitter SIGKILLed) left its record; under Slurm a killed
    # task (OOM, a fault) failed, and Slurm's own reason says why.
    killed = tasks.killed() if local else set()
    held = run_is_held(run)  # a live local submitter: a task whose log has no trailer yet is starting
    out = []
    for reg in STAGES:
        stage = reg.name
        st = StageStatus(stage, reg.tasks(rs.cfg))
        chunks = jobs.get(stage, [])
        cpus = rs.cfg.execution.units_per_task(stage)
        # squeue -r lists every task Slurm holds: a task of the last submission that it does not list and that
        # has no log never started and never will (scancel of the task or its array, a dependency killed it)
        submitted = bool(chunks)
        slurm_ended: list[tuple[int, str]] = []  # failed tasks Slurm ended, with its reason
        for task in range(st.total):
            problem, touched = reg.problem_and_touched(rs, task)
            if problem is None:
                st.done += 1
                if touched:
                    st.touched.append(task)
                done_log = _readable_log(st, run, task, chunks, cpus)
                fig = last_figures(done_log) if done_log is not None else None
                if fig is not None:
                    st.figures.append(fig)
                elif done_log is not None and not os.access(done_log, os.R_OK):
                    st.unread[task] = done_log
                continue
            queued, why = split_queued(next((queue[k] for j in chunks
                                             for k in [f"{j['job_id']}_{task // cpus - j['offset']}"] if k in queue), None))
            log = _readable_log(st, run, task, chunks, cpus) if queued is None or queued == "RUNNING" else None
            err = last_error_line(log, run.root.name if _multi_root(run) else None) if log is not None else ""
            if log is not None and ended_well(log) and not re.search("ERROR|Error", err):  # it finished, and what
                err = f"it finished, but {problem}: --resume does it again"  # it made is gone or changed since
            reason = slurm_reason(log) if log is not None and queued is None else None
            starting = held and log is not None and not unit_ended(log)
            # A local unit that ended by itself has its trailer (worker/group.py), even a crash; one without it that no
            # process runs lost its parent: the submitter was killed (SIGKILL) while it started or ran the unit.
            orphaned = (local and log is not None and not starting and (stage, task) not in alive and not unit_ended(log)
                        and not ended_well(log))
            cut = reason == "CANCELLED" or ((stopped or (stage, task) in killed or orphaned) and not err.startswith("ERROR"))
            never = strict and not local and log is None and queued is None and submitted
            state = task_state(done=False, queued=queued, alive=(stage, task) in alive or starting, has_log=log is not None,
                               interrupted=(log is not None and cut) or never)
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
            elif state is TaskState.FAILED:
                st.failed.append((task, str(log), err))
                if reason:
                    slurm_ended.append((len(st.failed) - 1, reason))
        for i, reason in slurm_ended:  # after the loop: the stage's finished tasks measured their peak by now
            task, log_path, err = st.failed[i]
            peak = max((f.max_rss_mb for f in st.figures), default=None)
            hint = resume_hint(run, rs.cfg, stage, reason, record.get("resources", {}), peak)
            st.failed[i] = (task, log_path, f"{reason} ({hint}); last line: {err}")
        out.append(st)
    return out


def progress_counts(path: Path, cfg: RunConfig) -> tuple[int, int] | None:
    """(documents read, compressed bytes read) that a partition receipt or checkpoint records; None when it is not
    this run's or not whole (a file mid-write)."""
    kind = PartitionCheckpoint if path.name.endswith(".checkpoint.json") else PartitionReceipt
    rec = read_record(path, kind, made_here(cfg.content.sha256()))
    if isinstance(rec, Problem):
        return None
    if isinstance(rec, PartitionCheckpoint):  # a checkpoint lists only its last inputs, and keeps totals
        return rec.read, rec.compressed_bytes
    return sum(i.read for i in rec.inputs), sum(i.compressed_bytes for i in rec.inputs)


def progress(run: RunDir, moving: bool = True) -> dict[str, Any]:
    """Documents and bytes read so far (receipts and checkpoints), throughput, ETA of the partition stage.

    `moving` False (a run stopped, failed or stuck): the time runs to its last receipt or checkpoint, not to now."""
    cfg = load_config(run)
    docs = compressed = 0
    touched = []
    for t in range(cfg.execution.partition_tasks):
        for path in (run.partition_receipt(t), run.partition_checkpoint(t)):
            counted = progress_counts(path, cfg) if path.exists() else None
            if counted is not None:
                touched.append(path)
                docs += counted[0]
                compressed += counted[1]
                break
    total = sum(i.size or 0 for i in cfg.content.inputs)
    record = read_json(run.run_json)
    started = min((s.get("submitted_at", 0) for s in record.get("submissions", [])), default=0) or run.run_json.stat().st_mtime
    receipts = [run.partition_receipt(t) for t in range(cfg.execution.partition_tasks)]
    finished = all(p.exists() for p in receipts) and receipts
    if finished:
        end = max(p.stat().st_mtime for p in receipts)
    else:
        end = time.time() if moving else max((p.stat().st_mtime for p in touched), default=started)
    elapsed = max(1e-9, end - started)
    rate = compressed / elapsed
    eta = (total - compressed) / rate if rate > 0 and compressed < total else 0.0
    return {"docs": docs, "compressed": compressed, "total": total, "elapsed": elapsed, "rate": rate, "eta": eta}


def live_line(run: RunDir, stage: str, started: float) -> str | None:
    """One line of a running local stage: work done, rate and ETA (partition: bytes read; write: shards)."""
    from shard_pipeline.run.tasklog import count_progress_lines
    from shard_pipeline.units import human_bytes, plural

    elapsed = max(1e-9, time.time() - started)
    try:
        if stage == "partition":
            p = progress(run)
            done, total = p["compressed"], p["total"]
            rate = done / elapsed
            eta = (total - done) / rate if rate > 0 and done < total else 0.0
            pct = 100 * done / total if total else 100.0
            return (f"partition {p['docs']:,} docs, {human_bytes(done)} of {human_bytes(total)} ({pct:.0f}%), "
                    f"{human_bytes(rate)}/s, ETA {_hms(eta) if eta else '-'}")
        if stage == "write" and run.plan_json.exists():
            total = read_json(run.plan_json)["shards"]
            if not isinstance(total, int):  # not the plan hplt-shard wrote: the done rule says so, not this line
                return None
            done = count_progress_lines(sorted(run.log_dir("write").glob("*.log")), "shard")
            rate = done / elapsed
            eta = (total - done) / rate if rate > 0 and done < total else 0.0
            return f"write     {done:,} of {plural(total, 'shard')}, {rate * 60:.1f} shards/min, ETA {_hms(eta) if eta else '-'}"
    except (OSError, ValueError, KeyError):  # a file mid-write: the next tick reads it whole
        return None
    return None


def _hms(seconds: float) -> str:
    """`0h01m02s`; under a minute with a decimal (`2.4s`), so a short task is not shown as taking nothing."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def render(run: RunDir, statuses: list[StageStatus], prog: dict[str, Any], state: str, code: int) -> str:
    """The --status table; `state` and `code` are run_state's (computed once: a done run's hashes its manifest)."""
    from shard_pipeline.units import human_bytes, plural

    cfg = load_config(run)
    lines = [f"run {run.root}  config {cfg.content.sha256()[:12]}  executor {cfg.execution.executor}",
             f"{'stage':<10}{'tasks':>7}{'done':>7}{'running':>9}{'pending':>9}{'failed':>8}{'interrupted':>13}{'waiting':>9}"]
    for st in statuses:
        lines.append(f"{st.stage:<10}{st.total:>7}{st.done:>7}{st.running:>9}{st.pending:>9}{len(st.failed):>8}"
                     f"{len(st.interrupted):>13}{st.not_started:>9}")
    pct = 100 * prog["compressed"] / prog["total"] if prog["total"] else 100.0
    eta = prog["eta"] if code == ExitCode.BUSY else 0  # a run that does not move has no ETA
    lines.append(f"read {prog['docs']:,} documents, {human_bytes(prog['compressed'])} of {human_bytes(prog['total'])} "
                 f"compressed ({pct:.1f}%) in {_hms(prog['elapsed'])} of partition; {human_bytes(prog['rate'])}/s; "
                 f"partition ETA {_hms(eta) if eta else '-'}")
    lines += [figures_summary(st) for st in statuses if st.figures]
    unread = [(st.stage, t, log) for st in statuses for t, log in sorted(st.unread.items())]
    if unread:
        lines.append(unread_line(unread, any(st.unread and st.done < st.total for st in statuses)))
    running = [(st.stage, t, line) for st in statuses for t, line in st.progress]
    for stage, t, line in running[:20]:
        lines.append(f"RUNNING {stage} task {t}: {line}")
    for st in statuses:
        by_reason: dict[str, list[int]] = {}
        for t, why in st.reasons:
            by_reason.setdefault(why or "unknown", []).append(t)
        for why, ts in by_reason.items():
            lines.append(f"PENDING {st.stage} {plural(len(ts), 'task')}: {why}" + (" (will not clear by itself)" if is_stuck(why) else ""))
        if st.requeued:
            lines.append(requeued_line(st.stage, st.requeued))
        if st.touched:
            lines.append(touched_line(st.stage, st.touched))
        if st.interrupted:
            lines.append(f"INTERRUPTED {st.stage} {plural(len(st.interrupted), 'task')}: "
                         f"{', '.join(map(str, st.interrupted[:10]))}{' ...' if len(st.interrupted) > 10 else ''}")
    failed = [(st.stage, t, log, err) for st in statuses for t, log, err in st.failed]
    for stage, t, log, err in failed[:20]:
        lines.append(f"FAILED {stage} task {t}: {err}\n       log: {log}")
    if len(failed) > 20:
        lines.append(f"... and {len(failed) - 20} more failed tasks")
    lines.append(f"state: {state}")
    return "\n".join(lines)


def unread_line(unread: list[tuple[str, int, Path]], unfinished: bool) -> str:
    """Task logs this user may not read (a colleague's run): what the table cannot show (`unfinished`: tasks
    without a receipt among them, whose failure only the log would tell), and the way on."""
    from shard_pipeline.access import access_step

    stage, task, log = unread[0]
    return (f"UNREAD {plural(len(unread), 'task log')} (the first: {stage} task {task}, {log}): not readable by this "
            "user, so their figures and errors are not shown" + (", and a task among them without a receipt is counted "
            "as not started even if it failed" if unfinished else "") + f"; {access_step(log, reading=True)}")


def touched_line(stage: str, tasks: list[int]) -> str:
    """Done tasks whose files something touched after their receipts (a ctime changed: chmod, chgrp, a copy
    that kept the times): --status reads no file, so it says how it counted them, and what re-checks them."""
    shown = ", ".join(map(str, tasks[:10])) + (" ..." if len(tasks) > 10 else "")
    return (f"TOUCHED {stage} {plural(len(tasks), 'task')} ({shown}): their files were touched after they finished "
            "(chmod, chgrp, a copy): counted done by size and mtime; --resume re-checks their sha256 and redoes any that changed")


def requeued_line(stage: str, tasks: list[int]) -> str:
    """Pending tasks that had started: Slurm requeued them, and nothing is to be done (a pending reason
    such as BeginTime alone would not say why a started task waits again)."""
    shown = ", ".join(map(str, tasks[:10])) + (" ..." if len(tasks) > 10 else "")
    return (f"REQUEUED {stage} {plural(len(tasks), 'task')} ({shown}): requeued by Slurm after a start (a node "
            "failure, a time limit near, scontrol requeue); each starts again by itself from its last checkpoint")


def figures_summary(st: StageStatus) -> str:
    """`FINISHED partition 4 tasks: elapsed up to 0h01m02s, peak memory 812.0 MB, cpu 3.9 min in all`: what
    the stage's finished tasks (one unit each) used, by their own logs, to size --time and --mem next time."""
    from shard_pipeline.units import plural

    wall = max(f.wall_s for f in st.figures)
    peak = max(f.max_rss_mb for f in st.figures)
    cpu = sum(f.cpu_s for f in st.figures) / 60
    return (f"FINISHED {st.stage} {plural(len(st.figures), 'task')}: elapsed up to {_hms(wall)}, "
            f"peak memory {peak:.1f} MB, cpu {cpu:.1f} min in all")


def phase_of(run: RunDir, statuses: list[StageStatus]) -> RunPhase:
    """The run's phase (runstate.run_phase) from its stages, its DONE marker and its lock."""
    return run_phase(counts(statuses), done_marker=run.done_marker.exists(), held=run_is_held(run))


def run_is_held(run: RunDir) -> bool:
    """A live submitter holds the run, or, for a language of a multi-language run, the whole run."""
    root = _multi_root(run)
    return held_by_a_process(run) or (root is not None and held_by_a_process(RunDir(root)))


def queued_job_ids(run: RunDir, statuses: list[StageStatus]) -> list[str]:
    """The job ids of the stages that still have tasks in Slurm's queue: what a scancel of the run names."""
    jobs = latest_jobs(read_json(run.run_json))
    return list(dict.fromkeys(j["job_id"] for st in statuses if st.pending or st.running for j in jobs.get(st.stage, [])))


def run_state(run: RunDir, statuses: list[StageStatus]) -> tuple[str, int]:
    """The one-line state with its next step, and the exit code of --status (docs/operations.md)."""
    ex = load_config(run).execution
    record = read_json(run.run_json) if run.run_json.exists() else {}
    phase = phase_of(run, statuses)
    resume = resume_command(run.root)
    failed = [err for st in statuses for _, _, err in st.failed]
    if phase is RunPhase.DONE:
        text = f"done: output at {ex.out}" + since_done(run, Path(ex.out))
        text += "".join(f"; warning: {w}" for w in done_warnings(run))
    elif phase is RunPhase.STUCK:
        text = stuck_step(run.root, [r for st in statuses for _, r in st.reasons], queued_job_ids(run, statuses))
    elif phase in (RunPhase.RUNNING, RunPhase.QUEUED):
        held = "" if any(st.running or st.pending for st in statuses) else \
            " (an hplt-shard process is running or resuming it here)"
        text = f"{phase.value}{held}" + (f"; {len(failed)} failed so far: after the jobs end, {resume}"
                                         if failed else "")
        cut = sum(len(st.interrupted) for st in statuses)
        queued_ids = queued_job_ids(run, statuses)
        if cut and queued_ids and not failed:  # a later stage's job cancelled while an earlier one waits: no end
            text += (f"; but {plural(cut, 'task')} will not run (their jobs left the queue, e.g. scancel): the run cannot "
                     f"finish as queued; {command('scancel', *queued_ids)}, then {resume}")
    elif phase is RunPhase.FAILED:
        hint = reason_hint(failed)
        text = (new_run_step(run)
                or (f"failed: {hint}" if hint else f"failed: fix the cause named above, then {resume}"))
    else:
        refusal = last_refusal(record)
        text = refused_step(run.root, refusal) if refusal else interrupted_step(run.root, ex.executor)
    if phase is not RunPhase.DONE and (away := elsewhere(record, run.root)):
        text += f"; {away}"
    return text, int(phase.exit_code)


def reason_hint(failed: list[str]) -> str | None:
    """The resume command of the first failed task whose Slurm reason has one (`REASON (CMD); last line: ...`,
    stage_statuses), read back whole: the quoted run dir may hold a parenthesis."""
    return next((m[1] for err in failed for m in [re.match(r"[A-Z_]+ \((.+ --resume .*?)\); last line: ", err)] if m), None)


def elsewhere(record: dict, *roots: Path) -> str:
    """What --status adds while a local run has tasks recorded on another host (a login node sharing the
    run dir): the same words a resume refuses with, since this host cannot see their processes."""
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


def status_report(run: RunDir) -> tuple[str, int]:
    """The --status text and its exit code (errors.ExitCode: 0 done, 1 failed or interrupted, 3 busy, 4 stuck)."""
    statuses = stage_statuses(run, strict=not run.done_marker.exists())  # a finished run needs no squeue
    state, code = run_state(run, statuses)
    return render(run, statuses, progress(run, moving=code == ExitCode.BUSY), state, code), code


def report(root: Path) -> tuple[str, int]:
    """--status of any run dir: one language's stages, or a row per language of a run of several."""
    run = RunDir(root)
    check_whole(root)
    if not unit_table.is_multi(root) and not run.config_json.exists():
        raise UsageError(f"{run.root} is not a hplt-shard run directory (no config.json)")
    if run.run_json.exists():
        check_this_version(root, read_json(run.run_json))
    if unit_table.is_multi(root):
        return languages_report(root)
    return status_report(run)


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
    """The language's phase (runstate.run_phase; `chain_alive`: a local executor runs the chain) and its row's word.

    A language with a failed task and none running is failed even while other languages' jobs
    still run: its finalize can only name it (afterany), and --resume is what redoes it."""
    phase = run_phase(counts(sts), done_marker=run.done_marker.exists(), held=chain_alive)
    failed = [st.stage for st in sts if st.failed]
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


def _cell(st: StageStatus) -> str:
    return f"{st.done}/{st.total}" + (f" {len(st.failed)}F" if st.failed else "")


def rebuilt_by(root: Path, lang: str, run: RunDir) -> Path | None:
    """The new run of `lang` alone that a failed language's next step names (RUNDIR-LANG-..., next_step.py) and
    that is done, its output provably the one in ROOT/LANG now (registry.manifest_is_this_runs): the language
    was made by it."""
    try:
        out = Path(read_json(run.config_json)["execution"]["out"])
        manifest = read_json(out / MANIFEST_NAME)
        candidates = sorted(root.parent.glob(f"{root.name}-{lang}-*"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return next((c for c in candidates if RunDir(c).done_marker.exists()
                 and manifest_is_this_runs(RunDir(c), out, manifest, rehash=False)), None)


def languages_report(root: Path) -> tuple[str, int]:
    """The --status text of a multi-language run and its exit code (errors.ExitCode, as a single run's)."""
    m = unit_table.load(root)
    record = read_json(RunDir(root).run_json)
    jobs = latest_jobs(record)
    landed = all(RunDir(m.lang_dir(lang)).done_marker.exists() for lang in m.langs)  # then no squeue is needed
    queue = squeue_states([j["job_id"] for chunks in jobs.values() for j in chunks], strict=not landed)
    # A local executor running the chain holds the run; queued Slurm jobs are in each language's counts
    # (pending or running, with Slurm's reason), so a held or waiting job is never shown as running.
    alive = held_by_a_process(RunDir(root))
    lines = [f"run {m.root}  {plural(len(m.langs), 'language')}",
             f"{'language':<14}{'partition':>11}{'plan':>7}{'write':>11}{'finalize':>10}{'rows':>14}  state"]
    phases, every, failures, reasons, requeued, touched, since = {}, [], [], [], [], [], []
    per_lang: dict[str, list[StageStatus]] = {}
    for lang in m.langs:
        run = RunDir(m.lang_dir(lang))
        lang_record = read_json(run.run_json)
        lang_queue = unit_table.language_queue(m, lang, latest_jobs(lang_record), queue)
        sts = per_lang[lang] = stage_statuses(run, lang_queue, strict=not landed, record=lang_record)
        phases[lang], word = language_state(run, sts, alive)
        if phases[lang] in (RunPhase.FAILED, RunPhase.INTERRUPTED) and (again := rebuilt_by(m.root, lang, run)):
            phases[lang], word, sts = RunPhase.DONE, f"landed by {again}", []  # its next step was taken
        every += sts
        reasons += [r for st in sts for _, r in st.reasons]
        validation = run_history(run, run.validation_json, Validation) if run.done_marker.exists() else None
        rows = validation.rows if validation is not None else None
        lines.append(f"{lang:<14}" + "".join(f"{_cell(st):>{w}}" for st, w in zip(sts, (11, 7, 11, 10)))
                     + f"{(f'{rows:,}' if rows is not None else '-'):>14}  {word}")
        failures += [(lang, st.stage, t, log, err) for st in sts for t, log, err in st.failed[:1]]
        requeued += [requeued_line(f"{lang} {st.stage}", st.requeued) for st in sts if st.requeued]
        touched += [touched_line(f"{lang} {st.stage}", st.touched) for st in sts if st.touched]
        if phases[lang] is RunPhase.DONE and (note := since_done(run, Path(load_config(run).execution.out))):
            since.append(f"{lang}: done{note}")  # as a resume of the done run says it
        if phases[lang] is RunPhase.DONE:
            since += [f"{lang}: warning: {w}" for w in done_warnings(run)]  # as --status of that language says them
    lines += requeued[:20] + touched[:20] + since
    unread = [(f"{lang} {st.stage}", t, log) for lang, sts in per_lang.items() for st in sts for t, log in sorted(st.unread.items())]
    if unread:
        lines.append(unread_line(unread, any(st.unread and st.done < st.total for st in every)))
    for lang, stage, t, log, err in failures[:20]:
        lines.append(f"FAILED {lang} {stage} task {t}: {err}\n       log: {log}")
    count = {p: sum(1 for v in phases.values() if v is p) for p in RunPhase}
    lines.append(f"languages landed {count[RunPhase.DONE]}/{len(m.langs)}"
                 + "".join(f", {count[p]} {LANGUAGE_WORD[p]}" for p in LANGUAGE_WORD if p is not RunPhase.DONE and count[p]))
    phase = run_phase(counts(every), done_marker=count[RunPhase.DONE] == len(m.langs), held=alive)
    failed = [l for l, p in phases.items() if p is RunPhase.FAILED]
    unfinished = [l for l, p in phases.items() if p is not RunPhase.DONE]
    if phase is RunPhase.DONE:
        lines.append("state: done")
    elif phase is RunPhase.STUCK:
        ids = list(dict.fromkeys(k.partition("_")[0] for k in queue))
        lines.append(f"state: {stuck_step(m.root, reasons, ids)}")
    elif phase in (RunPhase.RUNNING, RunPhase.QUEUED):
        lines.append(f"state: {phase.value}" + (f"; failed so far: {', '.join(failed)} "
                                                 f"(after the chain ends: {resume_command(m.root)})" if failed else ""))
    elif refusal := last_refusal(record):  # sbatch refused the chain: nothing of it was queued
        lines.append(f"state: {refused_step(m.root, refusal)}")
    else:
        how = "interrupted" if phase is RunPhase.INTERRUPTED else "failed"
        steps = {l: step for l in failed if (step := new_run_step(RunDir(m.lang_dir(l))))}
        resumable = [l for l in unfinished if l not in steps]
        if resumable:
            lines.append(f"state: {how}, unfinished ({', '.join(unfinished)}): {resume_command(m.root)}  "
                         f"(details: {status_command(m.root)}/LANG)")
        else:
            lines.append(f"state: {how}, unfinished ({', '.join(unfinished)}): a resume cannot finish "
                         f"{'it' if len(unfinished) == 1 else 'them'}; the next step of each:")
        lines += [f"{l}: {step}" for l, step in steps.items()]
    if phase is not RunPhase.DONE and (away := elsewhere(record, root, *(m.lang_dir(l) for l in m.langs))):
        lines.append(away)
    return "\n".join(lines), int(phase.exit_code)
