"""What the last attempt of a task ended with, as a typed record in the run directory.

A task writes its outcome when it ends by itself, well or not (a task killed from outside writes
none: its log and Slurm say why). The next step after a failure is decided from these records,
never from the text of a log: which failures a resume cannot go past (a bad record under
`--bad-records fail`, a repeated document id, a local input that cannot be read to its end) is a
property of the outcome's kind.
"""
from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.rundir import RunDir, read_json

# A local file whose stream is broken stays broken: only a new copy helps. An HTTP body cut short may
# come whole on the next try, so a resume fetches it again.
BROKEN_STREAM_REASONS = ("empty_file", "not_zstd", "corrupt_frame", "truncated", "checksum_mismatch")


class Kind(enum.Enum):
    OK = "ok"
    BAD_RECORD = "bad_record"  # a line that cannot become a document stopped a --bad-records fail run
    REPEATED_ID = "repeated_id"  # two input lines share a document id
    BROKEN_INPUT = "broken_input"  # a local input that cannot be read to its end (truncated, corrupt)
    SHORT_INPUT = "short_input"  # an input the counts index knows as larger: a download cut short
    FAILED = "failed"  # anything else: fix the cause, then --resume


# The kinds a resume cannot go past: it reads the same lines, and refuses a changed input.
NEEDS_NEW_RUN = frozenset({Kind.BAD_RECORD, Kind.REPEATED_ID, Kind.BROKEN_INPUT, Kind.SHORT_INPUT})


@dataclass(frozen=True)
class Outcome:
    stage: str
    task: int
    kind: Kind
    detail: str  # the failure as one line (empty when OK)
    ended: float

    @property
    def needs_new_run(self) -> bool:
        return self.kind in NEEDS_NEW_RUN


class DamagedOutcome(Exception):
    """An outcome record that does not parse or has a wrong type: named, never a traceback."""


def kind_of(exc: BaseException) -> Kind:
    """The kind of failure an exception raised out of a stage is."""
    from shard_pipeline.input.failures import BadRecord, CorruptShard, RepeatedId
    from shard_pipeline.input.index_check import InputShorterThanIndex

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
    """Write the outcome of this attempt (`exc`: what ended it, None when it ended well). A record that
    cannot be written (a full disk) is left out: the task's log and exit still say what happened, and
    without an outcome the next step is --resume."""
    outcome = Outcome(stage, task, Kind.OK if exc is None else kind_of(exc), "" if exc is None else str(exc),
                      time.time())
    try:
        write_json_atomic(run.outcome(stage, task), {**asdict(outcome), "kind": outcome.kind.value})
    except OSError:
        pass
    return outcome


def forget(run: RunDir, stage: str, task: int) -> None:
    """A new attempt starts: the last one's outcome no longer describes the task."""
    run.outcome(stage, task).unlink(missing_ok=True)


def parse(data: Any, path: Path) -> Outcome:
    """An outcome record's JSON as an Outcome, every field checked."""
    fields = {"stage": str, "task": int, "kind": str, "detail": str, "ended": (int, float)}
    if not isinstance(data, dict) or any(not isinstance(data.get(k), t) for k, t in fields.items()):
        raise DamagedOutcome(f"{path}: not an outcome record (fields {', '.join(fields)} with their types)")
    try:
        kind = Kind(data["kind"])
    except ValueError:
        raise DamagedOutcome(f"{path}: unknown outcome kind {data['kind']!r}") from None
    return Outcome(data["stage"], data["task"], kind, data["detail"], float(data["ended"]))


def read(run: RunDir, stage: str, task: int) -> Outcome | None:
    """The last attempt's outcome, None when no attempt ended by itself (or none ran)."""
    path = run.outcome(stage, task)
    try:
        data = read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DamagedOutcome(f"{path}: cannot be read ({exc})") from None
    return parse(data, path)


def failures(run: RunDir) -> list[Outcome]:
    """The outcomes of the tasks whose last attempt ended badly, in stage order then task order."""
    from shard_pipeline.run.registry import STAGE_NAMES

    found = []
    for path in run.outcome_files():
        try:
            o = parse(read_json(path), path)
        except (OSError, ValueError, DamagedOutcome):
            continue  # a damaged record says nothing of the task: --status reads its log
        if o.kind is not Kind.OK:
            found.append(o)
    return sorted(found, key=lambda o: (STAGE_NAMES.index(o.stage) if o.stage in STAGE_NAMES else 99, o.task))
