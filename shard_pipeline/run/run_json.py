"""`run.json`'s body, checked when read: the fields its readers use have the types the submitter writes, else
`DamagedRunFile` names the field. It grows and keeps fields only people read, so it is checked by shape, not
parsed into a dataclass.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shard_pipeline.run.records import DamagedRunFile, read_json

Shape = Any  # a type or tuple of types, a dict of field -> Shape (an object), a one-element list (a list of), Required


@dataclass(frozen=True)
class Required:
    """A field its readers index without a default: its absence is as wrong as a wrong type."""

    shape: Shape


_JOB = {"stage": Required(str), "job_id": Required((str, int)), "offset": Required(int), "tasks": (int, list, dict),
        "array": str, "argv": [str]}
_SUBMISSION = {"kind": str, "submitted_at": (int, float), "tasks": dict, "jobs": Required([_JOB]), "resources": dict}
SHAPE: Shape = {"argv": [str], "code_version": str, "executor": Required(str), "submissions": Required([_SUBMISSION]),
                "refused_submissions": [dict], "resources": dict}


def wrong_field(value: Any, shape: Shape, where: str = "") -> str | None:
    """What is wrong with `value` against `shape` (`where`: its path, `submissions[0].jobs`); None: nothing.
    An absent field is wrong only when it is `Required`."""
    if isinstance(shape, Required):
        return wrong_field(value, shape.shape, where)
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where or 'it'} is a {type(value).__name__}, not an object"
        return next((w for k, s in shape.items() if (w := _field(value, k, s, f"{where}.{k}" if where else k))), None)
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where} is a {type(value).__name__}, not a list"
        return next((w for i, v in enumerate(value) if (w := wrong_field(v, shape[0], f"{where}[{i}]"))), None)
    if isinstance(value, bool) and bool not in (shape if isinstance(shape, tuple) else (shape,)):
        return f"{where} is a bool"
    return None if isinstance(value, shape) else f"{where} is a {type(value).__name__}"


def _field(value: dict, key: str, shape: Shape, where: str) -> str | None:
    if key in value:
        return wrong_field(value[key], shape, where)
    return f"{where} is missing" if isinstance(shape, Required) else None


def read_run_json(path: Path) -> dict[str, Any]:
    """run.json as the submitter wrote it; DamagedRunFile names the file and the field of a wrong type."""
    record = read_json(path)
    if (why := wrong_field(record, SHAPE)) is not None:
        raise DamagedRunFile(path, why)
    return record
