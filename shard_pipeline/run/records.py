"""Every record of a run directory as data: typed when read, and bound to the run and the code that made it.

A record is a JSON object: a header (`Made`: run-dir format, config content hash, code version) and a body, a
dataclass. `read_record` returns the body or the `Problem` that keeps it from being this run's; the done rule
redoes such a task, and a reader that needs the record raises `RecordRefused` naming file, reason and next step.
"""
from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from shard_pipeline.errors import UserError
from shard_pipeline.files import write_json_atomic
from shard_pipeline.run import codeversion
from shard_pipeline.run.typed import WrongType, parse_as

# The format of a run directory's files (spill index, plan.json, receipts, config.json): read only by code of
# the same format (docs/DESIGN.md "Compatibility"). 5: every run is RUNDIR/{run.json, languages.json} with each
# language's run dir in RUNDIR/<LANG>/, one language too.
RUN_FORMAT = 5

T = TypeVar("T")


class Why(str, enum.Enum):
    """Why a run-dir record cannot be used as it is."""

    MISSING = "missing"
    DAMAGED = "damaged"  # not JSON or not Arrow, a wrong type, a field missing or unknown
    EDITED = "edited"  # config.json whose content no longer hashes to what it records, or not run.json's
    OTHER_CONFIG = "other-config"  # made for another configuration (another run's partition/ copied in)
    OTHER_CODE = "other-code"  # made by another code version (codeversion.py)
    OTHER_FORMAT = "other-format"  # made by a version of another RUN_FORMAT


PHRASE = {
    Why.MISSING: "is missing",
    Why.DAMAGED: "is damaged",
    Why.EDITED: "was changed after the run was made",
    Why.OTHER_CONFIG: "was made for another configuration",
    Why.OTHER_CODE: "was made by another code version",
    Why.OTHER_FORMAT: "was made by a version of another run-dir format",
}
DAMAGED_STEP = ("it is not what hplt-shard wrote (an edit, a copy cut short, a disk error): put the original back, "
                "or start a new run with a fresh --run-dir")
REDO_STEP = "--resume redoes the task that writes it"


@dataclass(frozen=True)
class Problem:
    """Why the record at `path` cannot be used, and what to do."""

    why: Why
    path: Path
    detail: str
    step: str = REDO_STEP

    @property
    def reason(self) -> str:
        """Short, for the done rule's "not done" reasons (--status, --resume)."""
        return f"{self.path.name} {PHRASE[self.why]}" + (f" ({self.detail})" if self.detail else "")

    @property
    def message(self) -> str:
        return f"{self.path} {PHRASE[self.why]}" + (f" ({self.detail})" if self.detail else "") + f"; {self.step}"


class RecordRefused(UserError):
    """A record that cannot be used: `problem` says which, why and the next step."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class DamagedRunFile(RecordRefused, ValueError):
    """Not what hplt-shard wrote. A ValueError, so the callers that treat an unreadable file as absent still do."""

    def __init__(self, path: Path, reason: str, step: str = DAMAGED_STEP) -> None:
        super().__init__(Problem(Why.DAMAGED, path, reason, step))


class MissingField(DamagedRunFile, KeyError):
    """A field a run file must hold is absent; a KeyError too, for the callers that look fields up."""

    def __str__(self) -> str:  # KeyError's str() would quote the message
        return self.args[0]


class EditedRecord(RecordRefused):
    """config.json changed after the run was made."""


class OtherConfig(RecordRefused):
    """A record made for another configuration."""


class OtherCode(RecordRefused):
    """A record, or a run, made by another code version."""


class OtherFormat(RecordRefused):
    """A record, or a run directory, made by a version of another RUN_FORMAT."""


_REFUSAL = {Why.EDITED: EditedRecord, Why.OTHER_CONFIG: OtherConfig, Why.OTHER_CODE: OtherCode,
            Why.OTHER_FORMAT: OtherFormat}


def refusal(problem: Problem) -> RecordRefused:
    """The exception that says `problem` (its class names the kind in a task's `ERROR: Type: ...` line)."""
    if problem.why is Why.DAMAGED:
        return DamagedRunFile(problem.path, problem.detail, problem.step)
    return _REFUSAL.get(problem.why, RecordRefused)(problem)


class RunRecord(dict):
    """A JSON object of a run file that names its file when a field it must hold is missing."""

    path: Path = Path("(a run file)")

    def __missing__(self, key: Any):
        raise MissingField(self.path, f"it has no field {key!r}")


def read_json(path: Path) -> Any:
    """A run-dir JSON object; DamagedRunFile names the file when it is not JSON, not an object, or lacks a field."""
    def record(pairs: dict) -> RunRecord:
        r = RunRecord(pairs)
        r.path = path
        return r

    with open(path, "rb") as f:
        data = f.read()
    try:
        value = json.loads(data.decode("utf-8"), object_hook=record)
    except UnicodeDecodeError as exc:
        raise DamagedRunFile(path, f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise DamagedRunFile(path, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(value, dict):
        raise DamagedRunFile(path, f"a JSON {type(value).__name__}, not the object hplt-shard writes")
    return value


@dataclass(frozen=True)
class Made:
    """The header of every record: what made it. A record is this run's only when all three are the run's."""

    run_format: int
    config_sha256: str
    code_version: str


HEADER = tuple(f.name for f in fields(Made))


def made_here(config_sha256: str) -> Made:
    """The header of a record made here, and what every record of the run must carry to count."""
    return Made(RUN_FORMAT, config_sha256, codeversion.code_version())


def record_json(made: Made, body: Any) -> dict[str, Any]:
    """The JSON of a record: its header, then its body (a dataclass or a dict)."""
    return {**asdict(made), **(asdict(body) if is_dataclass(body) else body)}


def save_record(path: Path, made: Made, body: Any) -> None:
    write_json_atomic(path, record_json(made, body))


def header_of(doc: dict[str, Any], path: Path) -> Made:
    """The header of a record's JSON; DamagedRunFile when a field of it is absent or of another type."""
    try:
        return parse_as(Made, {k: doc[k] for k in HEADER if k in doc})
    except WrongType as exc:
        raise DamagedRunFile(path, str(exc)) from None


def stale(made: Made, expect: Made, path: Path, *, any_code: bool = False) -> Problem | None:
    """Why a record made as `made` is not one of the run `expect` describes; None when it is. `any_code`: a
    finished run's records are history, read by any code."""
    if made.run_format != expect.run_format:
        return Problem(Why.OTHER_FORMAT, path, f"format {made.run_format}; this version reads {expect.run_format}")
    if made.config_sha256 != expect.config_sha256:
        return Problem(Why.OTHER_CONFIG, path, f"config sha256 {made.config_sha256[:12]}, "
                                               f"this run's {expect.config_sha256[:12]}")
    if not any_code and made.code_version != expect.code_version:
        return Problem(Why.OTHER_CODE, path, f"code {codeversion.short(made.code_version)}, "
                                             f"this run's {codeversion.short(expect.code_version)}")
    return None


def read_record(path: Path, cls: type[T], expect: Made, *, any_code: bool = False) -> T | Problem:
    """The record at `path` as `cls`, or the Problem that keeps it from being this run's."""
    try:
        doc = read_json(path)
        made = header_of(doc, path)
    except FileNotFoundError:
        return Problem(Why.MISSING, path, "")
    except DamagedRunFile as exc:
        return exc.problem
    except OSError as exc:
        return Problem(Why.DAMAGED, path, f"cannot be read: {exc.strerror or exc}")
    if (why := stale(made, expect, path, any_code=any_code)) is not None:
        return why
    try:
        return parse_as(cls, {k: v for k, v in doc.items() if k not in HEADER})
    except WrongType as exc:
        return Problem(Why.DAMAGED, path, str(exc), DAMAGED_STEP)


def load_record(path: Path, cls: type[T], expect: Made, *, step: str | None = None, any_code: bool = False) -> T:
    """`read_record`, raising RecordRefused (with `step` as its next step, if given) instead of returning a Problem."""
    got = read_record(path, cls, expect, any_code=any_code)
    if isinstance(got, Problem):
        raise refusal(Problem(got.why, got.path, got.detail, step or got.step))
    return got
