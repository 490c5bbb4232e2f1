"""The quarantine file: bad records kept verbatim, one JSON object per line, with why and where."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import BinaryIO

import orjson

from shard_pipeline.files import naming
from shard_pipeline.input.failures import BadRecord


class QuarantineWriter:
    """Appends bad records, verbatim, one JSON object per line; the file is made on the first one.
    ``raw`` is the line as text when it is valid UTF-8, else ``{"base64": ...}``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fh: BinaryIO | None = None
        self.count = 0

    def add(self, source_id: str, bad: BadRecord, raw: bytes | bytearray) -> None:
        """Write one quarantined line with where it came from and why."""
        try:
            kept_raw: object = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            kept_raw = {"base64": base64.b64encode(raw).decode("ascii")}
        row = {
            "source_id": source_id,
            "location": bad.location,
            "line": bad.line,
            "reason": bad.reason,
            "detail": bad.detail,
            "raw": kept_raw,
        }
        with naming(self.path):  # a full disk names the file
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "ab")
            self._fh.write(orjson.dumps(row) + b"\n")
        self.count += 1

    def close(self) -> None:
        """Flush and fsync: the quarantine is the only copy of what was not kept."""
        if self._fh is not None:
            with naming(self.path):
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
            self._fh = None

    def __enter__(self) -> QuarantineWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
