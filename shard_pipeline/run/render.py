"""The --status table and the lines beside it: a rendering of a run's view (run/view.py), and the live
progress line of a local run."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from shard_pipeline.commands import status_command
from shard_pipeline.errors import ExitCode
from shard_pipeline.run.receipts import PartitionCheckpoint, PartitionReceipt
from shard_pipeline.run.outcome import Outcome
from shard_pipeline.run.records import Problem, made_here, read_record
from shard_pipeline.run.runconfig import RunConfig, load_config
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.run.runstate import is_stuck
from shard_pipeline.run.stage_status import FailedTask, StageStatus
from shard_pipeline.run.steps import Step
from shard_pipeline.run.steps import render as render_step
from shard_pipeline.run.tasklog import count_progress_lines
from shard_pipeline.units import human_bytes, plural
from shard_pipeline.run.run_json import read_run_json


def progress_counts(path: Path, cfg: RunConfig) -> tuple[int, int] | None:
    """(documents, compressed bytes) read that a partition receipt or checkpoint records; None when it is not this
    run's or not whole (mid-write)."""
    kind = PartitionCheckpoint if path.name.endswith(".checkpoint.json") else PartitionReceipt
    rec = read_record(path, kind, made_here(cfg.content.sha256()))
    if isinstance(rec, Problem):
        return None
    if isinstance(rec, PartitionCheckpoint):  # a checkpoint lists only its last inputs, and keeps totals
        return rec.read, rec.compressed_bytes
    return sum(i.read for i in rec.inputs), sum(i.compressed_bytes for i in rec.inputs)


def progress(run: RunDir, moving: bool = True) -> dict[str, Any]:
    """Documents and bytes read so far, throughput and ETA of the partition stage. `moving` False (a run stopped,
    failed or stuck): the time runs to its last receipt or checkpoint, not to now."""
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
    record = read_run_json(run.run_json)
    started = min((s.get("submitted_at", 0) for s in record.get("submissions", [])), default=0) or run.run_json.stat().st_mtime
    receipts = [run.partition_receipt(t) for t in range(cfg.execution.partition_tasks)]
    finished = all(p.exists() for p in receipts) and receipts
    if finished:
        end = max(p.stat().st_mtime for p in receipts)
    else:
        end = time.time() if moving else max((p.stat().st_mtime for p in touched), default=started)
    elapsed = max(1e-9, end - started)
    rate = compressed / elapsed
    return {"docs": docs, "compressed": compressed, "total": total, "elapsed": elapsed, "rate": rate,
            "eta": _eta(compressed, total, rate)}


def _eta(done: float, total: float, rate: float) -> float:
    return (total - done) / rate if rate > 0 and done < total else 0.0


def live_line(runs: RunDir | Sequence[RunDir], stage: str, started: float) -> str | None:
    """One line of a running local stage over every language of the run: work done, rate and ETA."""
    runs = [runs] if isinstance(runs, RunDir) else list(runs)
    elapsed = max(1e-9, time.time() - started)
    try:
        if stage == "partition":
            ps = [progress(run) for run in runs]
            docs, done, total = (sum(p[k] for p in ps) for k in ("docs", "compressed", "total"))
            rate = done / elapsed
            eta = _eta(done, total, rate)
            pct = 100 * done / total if total else 100.0
            return (f"partition {docs:,} docs, {human_bytes(done)} of {human_bytes(total)} ({pct:.0f}%), "
                    f"{human_bytes(rate)}/s, ETA {_hms(eta) if eta else '-'}")
        if stage == "write" and all(run.plan_json.exists() for run in runs):
            shards = [read_json(run.plan_json)["shards"] for run in runs]
            if not all(isinstance(n, int) for n in shards):  # not the plan hplt-shard wrote: the done rule says so
                return None
            total = sum(shards)
            done = sum(count_progress_lines(sorted(run.log_dir("write").glob("*.log")), "shard") for run in runs)
            rate = done / elapsed
            eta = _eta(done, total, rate)
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


def render(run: RunDir, statuses: list[StageStatus], prog: dict[str, Any], state: str, code: int,
           refused: Sequence[Outcome] = ()) -> str:
    """The --status table; `state` and `code`: the view's state line and exit code (status.status_report);
    `refused`: the view's refused array tasks."""
    cfg = load_config(run)
    lines = [f"run {run.root}  config {cfg.content.sha256()[:12]}  executor {cfg.execution.executor}",
             f"{'stage':<10}{'tasks':>7}{'done':>7}{'running':>9}{'pending':>9}{'failed':>8}{'interrupted':>13}{'waiting':>9}"
             f"{'skipped':>9}"]
    for st in statuses:
        lines.append(f"{st.stage:<10}{st.total:>7}{st.done:>7}{st.running:>9}{st.pending:>9}{len(st.causes()):>8}"
                     f"{len(st.interrupted):>13}{st.not_started:>9}{len(st.skipped()):>9}")
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
                         f"{_first_ten(st.interrupted)}")
    failed = [(st.stage, f) for st in statuses for f in st.causes()]
    lines += [failed_line(stage, f) for stage, f in failed[:20]]
    if len(failed) > 20:
        lines.append(f"... and {len(failed) - 20} more failed tasks")
    lines += skipped_lines(statuses) + [refused_line(o) for o in refused[:20]]
    lines.append(f"state: {state}")
    return "\n".join(lines)


def unread_line(unread: list[tuple[str, int, Path]], unfinished: bool) -> str:
    """Task logs this user may not read (a colleague's run), what the table cannot show of them (`unfinished`: a
    task without a receipt among them), and the way on."""
    from shard_pipeline.access import access_step

    stage, task, log = unread[0]
    return (f"UNREAD {plural(len(unread), 'task log')} (the first: {stage} task {task}, {log}): not readable by this "
            "user, so their last lines are not shown" + (", and a task among them without a receipt is counted "
            "as not started even if it failed" if unfinished else "") + f"; {access_step(log, reading=True)}")


def touched_line(stage: str, tasks: list[int]) -> str:
    """Done tasks whose files something touched after their receipts: how --status counted them, what re-checks."""
    return (f"TOUCHED {stage} {plural(len(tasks), 'task')} ({_first_ten(tasks)}): their files were touched "
            "after they finished (chmod, chgrp, a copy): counted done by size and mtime; --resume re-checks "
            "their sha256 and redoes any that changed")


def requeued_line(stage: str, tasks: list[int]) -> str:
    """Pending tasks that had started: Slurm requeued them, and nothing is to be done (a pending reason such as
    BeginTime alone would not say why a started task waits again)."""
    return (f"REQUEUED {stage} {plural(len(tasks), 'task')} ({_first_ten(tasks)}): requeued by Slurm after a "
            "start (a node failure, a time limit near, scontrol requeue); each starts again by itself from its "
            "last checkpoint")


def _first_ten(tasks: list[int]) -> str:
    return ", ".join(map(str, tasks[:10])) + (" ..." if len(tasks) > 10 else "")


def figures_summary(st: StageStatus) -> str:
    """What the stage's finished tasks used, by their outcome records, to size --time and --mem next time."""
    wall = max(f.wall_s for f in st.figures)
    peak = max(f.max_rss_mb for f in st.figures)
    cpu = sum(f.cpu_s for f in st.figures) / 60
    return (f"FINISHED {st.stage} {plural(len(st.figures), 'task')}: elapsed up to {_hms(wall)}, "
            f"peak memory {peak:.1f} MB, cpu {cpu:.1f} min in all")


def failed_line(stage: str, f: FailedTask) -> str:
    """`FAILED write task 3: OUT_OF_MEMORY (RESUME); last line: ...` and its log on the next line."""
    why = f"{f.reason} ({f.resume.command()}); last line: " if f.reason and f.resume else ""
    return f"FAILED {stage} task {f.task}: {why}{f.last_line}\n       log: {f.log}"


def task_list(tasks: Sequence[int]) -> str:
    """`task 3`, `tasks 0-2, 5, 7-9`: task numbers in runs, the first ten runs, so a line stays short."""
    runs: list[list[int]] = []
    for t in sorted(tasks):
        if runs and t == runs[-1][1] + 1:
            runs[-1][1] = t
        else:
            runs.append([t, t])
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:10]) + (" ..." if len(runs) > 10 else "")
    return f"{'task' if len(tasks) == 1 else 'tasks'} {shown}"


def skipped_lines(statuses: Sequence[StageStatus], where: str = "") -> list[str]:
    """One line per stage whose units skipped for an unfinished earlier stage (`SKIPPED {where}finalize task 0:
    ...`): a consequence, named by the first earlier stage with tasks not done, which the next step runs too."""
    lines = []
    for i, st in enumerate(statuses):
        if skipped := st.skipped():
            cause = next((s for s in statuses[:i] if s.unfinished), None)
            why = f"{cause.stage} {task_list(cause.unfinished)} not done" if cause else "an earlier stage was not done"
            lines.append(f"SKIPPED {where}{st.stage} {task_list(skipped)}: {why} (the next step runs "
                         f"{'it' if len(skipped) == 1 else 'them'})")
    return lines


def refused_line(o: Outcome) -> str:
    """An array task the run's records refused before it could tell which units it runs (view.refused_tasks)."""
    return f"REFUSED {o.stage} array task {o.task} of the run (none of its units started): {o.error_line()}"


def only_skipped(stage: str, units: Sequence[tuple[str, int]], statuses: dict[str, Sequence[StageStatus]]) -> bool:
    """True when a failed task (one unit, or a single job over the languages it ran: `units`, as (language, task))
    failed only because units of it skipped (`statuses`: each language's), so its SKIPPED line says it all."""
    of = {lang: next((st for st in sts if st.stage == stage), None) for lang, sts in statuses.items()}
    mine = [(of[lang], t) for lang, t in units if of.get(lang) is not None]
    return any(t in st.skipped() for st, t in mine) and not any(f.task == t for st, t in mine for f in st.causes())


def cell(st: StageStatus) -> str:
    """`done/total`, and `nF` for the failed tasks that are a cause (a skipped one is said on its SKIPPED line)."""
    return f"{st.done}/{st.total}" + (f" {len(st.causes())}F" if st.causes() else "")


@dataclass(frozen=True)
class Landed:
    """A language whose output a local run swapped in: its manifest's counts, and the done rule's warnings."""

    lang: str
    out: Path
    rows: int
    shards: int
    train: int
    val: int
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class EndOfRun:
    """What a local run ends with, for one language or several alike: the languages that landed, each failed
    task that is a cause (stage, name, its error, its log), what OUT holds now for each language that did not land,
    the next step, and the units that only skipped for those causes."""

    root: Path
    landed: tuple[Landed, ...]
    failed_tasks: tuple[tuple[str, str, str, Path], ...]
    not_landed: tuple[tuple[str, str], ...]
    step: Step
    skipped: tuple[str, ...] = ()  # the SKIPPED lines of the languages that did not land (skipped_lines)


def end_of_run(end: EndOfRun) -> tuple[list[str], list[str]]:
    """The local executor's end text: (stdout lines, stderr lines)."""
    out: list[str] = []
    err: list[str] = []
    for lan in end.landed:
        out += [f"done: {lan.lang}: {plural(lan.rows, 'document')} in {plural(lan.shards, 'shard')} "
                f"(train {lan.train:,}, val {lan.val:,})",
                f"  output:  {lan.out}  (manifest {lan.out / '_MANIFEST.json'})"]
        err += [f"hplt-shard: warning: {lan.lang}: {w}" for w in lan.warnings]
    if not end.not_landed:
        return out + [f"run dir: {end.root}  ({status_command(end.root)})"], err
    err += [f"hplt-shard: {stage} {name} failed: {why}  (log: {log})" for stage, name, why, log in end.failed_tasks[:20]]
    if len(end.failed_tasks) > 20:
        err.append(f"hplt-shard: ... and {len(end.failed_tasks) - 20} more failed tasks")
    err += [f"hplt-shard: {line}" for line in end.skipped[:20]]
    err += [f"hplt-shard: {lang}: {holds}" for lang, holds in end.not_landed]
    names = ", ".join(lang for lang, _ in end.not_landed)
    err += [f"hplt-shard: {plural(len(end.not_landed), 'language')} failed: {names}; run dir {end.root}",
            f"hplt-shard: {render_step(end.step)}"]
    return out, err


def queued_lines(root: Path, jobs: list[dict], watch: str, lands: dict[str, tuple[Path, Path]]) -> list[str]:
    """What a Slurm submission prints: each queued array, the run dir, how to watch it, and where the first three
    languages land (`lands`: language -> its DONE marker and OUT)."""
    lines = [f"queued {j['stage']:<9} job {j['job_id']}  array {j['array']}" for j in jobs]
    lines += [f"run dir: {root}  ({plural(len(lands), 'language')}; {status_command(root)})", f"watch:   {watch}"]
    lines += [f"done when {marker} exists; {lang}'s output appears at {out}"
              for lang, (marker, out) in list(lands.items())[:3]]
    return lines + ([f"... and {plural(len(lands) - 3, 'language')} more"] if len(lands) > 3 else [])
