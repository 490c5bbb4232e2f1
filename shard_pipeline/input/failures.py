"""What can go wrong while reading an input shard: the record and stream reasons and their errors.

A bad line is a :class:`BadRecord` (quarantinable, one of :data:`REASONS`); a byte stream that
cannot be read to its end is a :class:`CorruptShard` (one of :data:`STREAM_REASONS`): the rest of
such a shard cannot be counted, so it is never quarantinable.
"""

from __future__ import annotations

REASONS: tuple[str, ...] = (
    "empty_line",  # a blank line (only whitespace) between records
    "invalid_utf8",  # bytes that are not UTF-8
    "not_json",  # not parseable as JSON (includes NaN/Infinity and numbers out of double range)
    "lone_surrogate",  # a \ud800-\udfff escape without its pair: parses in Python, cannot be written as UTF-8
    "not_object",  # valid JSON, but not an object
    "missing_id",
    "id_not_string",
    "bad_id",  # empty, longer than MAX_ID_CHARS, or containing control / line-separator characters
    "missing_text",
    "text_not_string",
    "missing_u",
    "u_not_string",
    "empty_u",  # "u" is "": the ledger could not trace the document
    "pii_not_list",  # "pii" present, not null and not a list: its redaction count is unknown
    "annotation_type",  # a field --annotations keeps holds a value not of its type (input/annotations.py)
)
STREAM_REASONS: tuple[str, ...] = (
    "empty_file",  # 0 bytes: not even an empty zstd frame
    "not_zstd",  # does not start with a zstd frame
    "corrupt_frame",  # zstd reported corrupt data (bad block, checksum, trailing garbage)
    "truncated",  # the input ended inside a zstd frame
    "short_read",  # HTTP body still incomplete after all retries
    "http_error",  # HTTP status or protocol error that retrying cannot fix
    "checksum_mismatch",  # a local copy whose MD5 is not the one its release published (release_md5.py)
)

_DETAIL_CHARS = 200


class _LineError(Exception):
    """An error at a line of an input shard: where it is, what kind, and the detail."""

    def __init__(self, location: str, line: int, reason: str, detail: str) -> None:
        super().__init__(location, line, reason, detail)
        self.location = location
        self.line = line
        self.reason = reason
        self.detail = detail


class CorruptShard(_LineError):
    """The shard's byte stream cannot be read to its end; the whole shard has failed. It may come after
    records were yielded: callers discard what they produced from this shard."""

    def __init__(self, location: str, line: int, reason: str, detail: str, between: bool = False) -> None:
        super().__init__(location, line, reason, detail)
        self.between = between  # the stream broke after line `line` ended, not inside it

    def __str__(self) -> str:
        if self.line == 0:  # nothing was decompressed: there is no line to name, the detail has the byte offset
            return f"{self.location}: before the first line: {self.reason}: {self.detail}"
        where = f"after line {self.line}" if self.between else f"line {self.line}"
        return f"{self.location}: {where}: {self.reason}: {self.detail}"


class BadRecord(_LineError):
    """One line that cannot become a document; ``reason`` is one of :data:`REASONS`."""

    def __str__(self) -> str:
        return f"{self.location}:{self.line}: {self.reason}: {self.detail}"



class RepeatedId(Exception):
    """Two input lines share a document id: the order would not be a function of the documents."""


class StreamBroken(Exception):
    """Internal: the byte stream failed; the caller adds location and line."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail



def short(text: str) -> str:
    """``text`` cut to a readable length for an error detail."""
    return text if len(text) <= _DETAIL_CHARS else text[:_DETAIL_CHARS] + "..."
