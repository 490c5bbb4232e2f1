"""A task's log: where it is, its human lines (progress, figures), and the last error line shown for a failed
task that left no outcome record (run/outcome.py): a task's state is never read from here."""
from __future__ import annotations

import logging
import signal
from pathlib import Path

from shard_pipeline.run.outcome import TaskFigures, UnitExit, read_exit


def last_error_line(log: Path, lang: str | None = None) -> str:
    """What to show of a failed task that left no outcome record: the last `ERROR: Type: message` line of its last
    attempt (else its last line), or how its group saw the unit end (a signal, nothing written). `lang`: a job's
    log of several languages, of which only the `ERROR: LANG: ...` lines are this language's."""
    ended = read_exit(log)
    try:
        lines = [l for l in attempt_text(log, ended).splitlines() if l.strip()]
    except FileNotFoundError:
        return "(no log)"
    except OSError as exc:
        return f"(the log could not be read: {exc})"
    errors = [l for l in lines if l.startswith(f"ERROR: {lang}: ")] if lang else \
        [l for l in lines if l.startswith("ERROR") or "Error" in l]
    if not errors and ended is not None:
        if ended.returncode < 0:
            return killed_line(ended)
        if ended.wrote_bytes == 0:  # not even its rerun line: its own words were lost
            return f"{empty_log(log)}; {ended.line()}"
    return (errors or ([] if lang else lines) or [empty_log(log) if not lines else f"(no ERROR: {lang}: line)"])[-1]


def attempt_text(log: Path, ended: UnitExit | None) -> str:
    """The log's text, or with the unit's exit record only its last attempt's: the `wrote_bytes` before the
    group's trailer (a log that does not end with that trailer is read whole)."""
    data = log.read_bytes()
    trailer = f"# {ended.line()}\n".encode() if ended is not None else b""
    if ended is not None and data.endswith(trailer):
        body = data[:-len(trailer)]
        data = body[max(0, len(body) - ended.wrote_bytes):] if ended.wrote_bytes else b""
    return data.decode("utf-8", "replace")


def killed_line(ended: UnitExit) -> str:
    """A unit that ended by a signal before writing an error: say which, and what usually sends it."""
    signum = -ended.returncode
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    why = {signal.SIGKILL: "the OOM killer, a memory limit, or a kill -9",
           signal.SIGTERM: "a time limit, a scancel, or a stop"}.get(signum, "a signal from outside the task")
    return f"killed by {name} (signal {signum}) before it could log an error: {why}; {ended.line()}"


def empty_log(log: Path) -> str:
    """What is known when a task left an empty log: a full disk is the usual cause, so say what df says."""
    from shard_pipeline.files import disk_figures, disk_is_full

    figures = disk_figures(log.parent)
    if figures is None:
        return "(empty log)"
    if disk_is_full(log.parent):
        return (f"(empty log: the log could not be written: the disk holding {log.parent} is full, {figures}; "
                "free space there, then --resume)")
    return (f"(empty log: the task wrote nothing to it, not even its first line; {figures} on the disk holding "
            f"{log.parent} now: if it was full when the task ran, the log could not be written)")


# Progress lines, one per partition input and per written shard, read by --status and by people:
#   2026-12-02T19:20:01 partition task 3 input 2/5 9_1.cc.jsonl.zst: 40,000 docs, 194.0 MB, 35.2 MB/s
#   2026-12-02T19:31:40 write task 1 shard 3/8 shard-00003-of-00020.parquet: 1,000,000 rows, 1203.5 MB, 41.0 s
log = logging.getLogger("hplt_shard")


def input_line(task: int, k: int, n: int, name: str, docs: int, compressed_bytes: int, seconds: float) -> str:
    mb = compressed_bytes / 1e6
    return f"partition task {task} input {k}/{n} {name}: {docs:,} docs, {mb:.1f} MB, {mb / max(seconds, 1e-9):.1f} MB/s"


def shard_line(task: int, k: int, n: int, name: str, rows: int, nbytes: int, seconds: float) -> str:
    return f"write task {task} shard {k}/{n} {name}: {rows:,} rows, {nbytes / 1e6:.1f} MB, {seconds:.1f} s"


def tail_lines(log: Path) -> list[str] | None:
    """The last 64 KiB of a log as lines (None: unreadable): progress and figures lines are short."""
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None


def last_progress_line(log: Path) -> str | None:
    """The newest progress line of a task's log (an input read, a shard written), or None."""
    lines = tail_lines(log)
    if lines is None:
        return None
    marks = (" input ", " shard ")
    found = [l for l in lines if (" partition task " in l or " write task " in l) and any(m in l for m in marks)
             and not l.startswith("ERROR")]
    return found[-1].strip() if found else None


def count_progress_lines(logs: list[Path], kind: str) -> int:
    """How many `kind` lines ("input" or "shard") the given logs hold: done units of work so far."""
    n = 0
    for log in logs:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        n += sum(1 for l in text.splitlines() if f" {kind} " in l and (" partition task " in l or " write task " in l))
    return n


# The figures line a task logs when it ends well, for people sizing --mem and --time (--status reads the outcome):
#   2026-12-02T19:31:41 write task 1 figures: wall 702.3 s, cpu 650.1 s, max rss 3012.4 MB
def figures_line(stage: str, task: int, f: TaskFigures) -> str:
    return f"{stage} task {task} figures: wall {f.wall_s:.1f} s, cpu {f.cpu_s:.1f} s, max rss {f.max_rss_mb:.1f} MB"
