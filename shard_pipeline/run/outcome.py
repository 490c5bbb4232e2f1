"""What the last attempt of a task ended with, as a typed record in the run directory: written when a task
ends by itself, well or not (one killed from outside writes none). The next step after a failure is decided
from these records' kinds, never from the text of a log.
"""
from __future__ import annotations

import enum
import os
import resource
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.run.typed import WrongType, parse_as
from shard_pipeline.units import iso_time

# A local file whose stream is broken stays broken: only a new copy helps. An HTTP body cut short may
# come whole on the next try, so a resume fetches it again.
BROKEN_STREAM_REASONS = ("empty_file", "not_zstd", "corrupt_frame", "truncated", "checksum_mismatch")


class Kind(enum.Enum):
    OK = "ok"
    BAD_RECORD = "bad_record"  # a line that cannot become a document stopped a --bad-records fail run
    REPEATED_ID = "repeated_id"  # two input lines share a document id
    BROKEN_INPUT = "broken_input"  # a local input that cannot be read to its end (truncated, corrupt)
    SHORT_INPUT = "short_input"  # an input the counts index knows as larger: a download cut short
    UPSTREAM = "upstream"  # not started: an earlier stage of its language is unfinished (run/landing.py)
    REFUSED = "refused"  # a run-dir record refused it (run/records.py: another code version, edited, damaged, ...)
    FAILED = "failed"  # anything else: fix the cause, then --resume


# The kinds a resume cannot go past: it reads the same lines, and refuses a changed input.
NEEDS_NEW_RUN = frozenset({Kind.BAD_RECORD, Kind.REPEATED_ID, Kind.BROKEN_INPUT, Kind.SHORT_INPUT})


@dataclass(frozen=True)
class TaskFigures:
    """What one task process used until it recorded its outcome: its own measure, needing no sacct."""

    wall_s: float
    cpu_s: float  # user + system, of it and its children
    max_rss_bytes: int  # peak resident set size

    @property
    def max_rss_mb(self) -> float:
        return self.max_rss_bytes / 1e6


def _process_wall() -> float:
    """Seconds since this process started (its start time in /proc, run/live.py), 0.0 where /proc has no answer."""
    from shard_pipeline.run.live import proc_stat

    st = proc_stat(os.getpid())
    if st is None:
        return 0.0
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - st[1] / os.sysconf("SC_CLK_TCK"))


def own_figures() -> TaskFigures:
    """This process's figures since it started: wall, CPU of it and its children, peak RSS."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    return TaskFigures(_process_wall(), cpu, max(me.ru_maxrss, kids.ru_maxrss) * 1024)  # KiB on Linux


@dataclass(frozen=True)
class Outcome:
    stage: str
    task: int
    kind: Kind
    detail: str  # the failure as one line (empty when OK)
    ended: float
    error_type: str  # the failure's exception class name (empty when OK)
    figures: TaskFigures  # what the attempt used until it ended

    def error_line(self) -> str:
        """The failure as the task's log ends with it (worker/task.py), on one line: `ERROR: Type: message`."""
        return f"ERROR: {self.error_type}: {' '.join(self.detail.splitlines())}"

    @property
    def needs_new_run(self) -> bool:
        return self.kind in NEEDS_NEW_RUN


class DamagedOutcome(Exception):
    """An outcome record that does not parse or has a wrong type: named, never a traceback."""


class UpstreamUnfinished(Exception):
    """A unit of a run of several languages not started: an earlier stage of its language is unfinished."""


def kind_of(exc: BaseException) -> Kind:
    """The kind of failure an exception raised out of a stage is."""
    from shard_pipeline.input.failures import BadRecord, CorruptShard, RepeatedId
    from shard_pipeline.input.index_check import InputShorterThanIndex
    from shard_pipeline.run.records import RecordRefused

    if isinstance(exc, UpstreamUnfinished):
        return Kind.UPSTREAM
    if isinstance(exc, RecordRefused):
        return Kind.REFUSED
    if isinstance(exc, InputShorterThanIndex):
        return Kind.SHORT_INPUT
    if isinstance(exc, BadRecord):
        return Kind.BAD_RECORD
    if isinstance(exc, RepeatedId):
        return Kind.REPEATED_ID
    if isinstance(exc, CorruptShard) and exc.reason in BROKEN_STREAM_REASONS \
            and not str(exc.location).startswith(("http://", "https://")):
        return Kind.BROKEN_INPUT
    return Kind.FAILED


def record(run: RunDir, stage: str, task: int, exc: BaseException | None) -> Outcome:
    """Write the outcome of this attempt (`exc`: what ended it, None when it ended well). One that cannot be
    written (a full disk) is left out: the log and exit say what happened, and the next step is --resume."""
    outcome = Outcome(stage, task, Kind.OK if exc is None else kind_of(exc), "" if exc is None else str(exc),
                      time.time(), "" if exc is None else type(exc).__name__, own_figures())
    try:
        write_json_atomic(run.outcome(stage, task), {**asdict(outcome), "kind": outcome.kind.value})
    except OSError:
        pass
    return outcome


def forget(run: RunDir, stage: str, task: int) -> None:
    """A new attempt starts: the last one's outcome no longer describes the task."""
    run.outcome(stage, task).unlink(missing_ok=True)


# The ranges a record's numbers must lie in, so that a damaged one is named, never an overflow while shown.
TIMES = ("ended", "start", "end")
LARGEST = 2.0 ** 63
LATEST = 1e11


def _sane(record: Any) -> bool:
    """Every number of a parsed record finite, times in [0, LATEST], any other number within +-LARGEST."""
    values = dict(vars(record))
    if isinstance(values.get("figures"), TaskFigures):
        values.update(vars(values.pop("figures")))
    numbers = {k: v for k, v in values.items() if type(v) in (int, float)}  # NaN fails every comparison below
    return all((0 <= v <= LATEST) if k in TIMES else (-LARGEST < v < LARGEST) for k, v in numbers.items())


def checked(cls: type, data: Any, path: Path) -> Any:
    """A record's JSON as `cls` (run/typed.py parse_as), its numbers sane (`_sane`); DamagedOutcome otherwise."""
    try:
        record = parse_as(cls, data)
    except WrongType as exc:
        raise DamagedOutcome(f"{path}: not a valid {cls.__name__} record: {exc}") from None
    if not _sane(record):
        raise DamagedOutcome(f"{path}: a {cls.__name__} record with a number out of range (not finite, or too large)")
    return record


def parse(data: Any, path: Path) -> Outcome:
    """An outcome record's JSON as an Outcome, every field checked, its stage and task those of its file name."""
    o = checked(Outcome, data, path)
    if path.name != f"{o.stage}-{o.task:05d}.outcome.json":
        raise DamagedOutcome(f"{path}: the record of {o.stage} task {o.task}, not of its file")
    figures = TaskFigures(float(o.figures.wall_s), float(o.figures.cpu_s), o.figures.max_rss_bytes)
    return replace(o, ended=float(o.ended), figures=figures)


def read(run: RunDir, stage: str, task: int) -> Outcome | None:
    """The last attempt's outcome, None when no attempt ended by itself (or none ran)."""
    path = run.outcome(stage, task)
    try:
        data = read_json(path)
    except FileNotFoundError:
        return None
    except PermissionError:  # --status names it as it names a log it may not read
        raise
    except (OSError, ValueError) as exc:
        raise DamagedOutcome(f"{path}: cannot be read ({exc})") from None
    return parse(data, path)


def read_or_none(run: RunDir, stage: str, task: int) -> Outcome | None:
    """The last attempt's outcome for --status: a damaged record counts as none (an unreadable one raises)."""
    try:
        return read(run, stage, task)
    except DamagedOutcome:
        return None


def failures(run: RunDir) -> list[Outcome]:
    """The outcomes of the tasks whose last attempt ended badly, in stage order then task order."""
    from shard_pipeline.run.registry import STAGE_NAMES

    found = []
    for path in run.outcome_files():
        try:
            o = parse(read_json(path), path)
        except (OSError, ValueError, DamagedOutcome):
            continue  # a damaged record says nothing of the task: --status counts it as no record
        if o.kind is not Kind.OK:
            found.append(o)
    return sorted(found, key=lambda o: (STAGE_NAMES.index(o.stage) if o.stage in STAGE_NAMES else 99, o.task))


@dataclass(frozen=True)
class UnitExit:
    """How a unit's process ended, as its group saw it (worker/group.py): written beside the unit's log with the
    trailer line, even when the unit could write nothing itself (a signal, a full disk)."""

    label: str  # the group's label: `write group 3`
    unit: int
    returncode: int  # negative: the signal that ended it
    start: float  # epoch seconds
    end: float
    cpu_s: float
    max_rss_mib: float
    wrote_bytes: int  # what the unit wrote to its log in this attempt

    def line(self) -> str:
        """The trailer the group writes after the unit's lines (prefixed `# ` in the log)."""
        return (f"hplt-shard {self.label} unit {self.unit} exit {self.returncode}: {iso_time(self.start)} -> "
                f"{iso_time(self.end)}, wall {self.end - self.start:.2f} s, cpu {self.cpu_s:.2f} s, "
                f"max rss {self.max_rss_mib:.0f} MiB")


def exit_path(log: Path) -> Path:
    """Where a unit's exit record lies: beside its log (`900_0.unit1.log` -> `900_0.unit1.exit.json`)."""
    return log.with_name(f"{log.stem}.exit.json")


def record_exit(log: Path, ended: UnitExit) -> None:
    """The group saw the unit end; a record that cannot be written (a full disk) is left out."""
    try:
        write_json_atomic(exit_path(log), asdict(ended))
    except OSError:
        pass


def forget_exit(log: Path) -> None:
    """A new attempt of the unit starts writing this log: the last one's end no longer describes it."""
    try:
        exit_path(log).unlink(missing_ok=True)
    except OSError:
        pass


def read_exit(log: Path) -> UnitExit | None:
    """The unit's exit as its group recorded it; None while it runs, when no group ran it, or when damaged."""
    try:
        data = read_json(exit_path(log))
        ended = checked(UnitExit, data, exit_path(log))
    except (OSError, ValueError, DamagedOutcome):
        return None
    return replace(ended, start=float(ended.start), end=float(ended.end))
