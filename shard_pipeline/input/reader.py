"""A strict streaming reader for HPLT ``.jsonl.zst`` shards.

Every line of a shard is either yielded as an :class:`HpltRecord` or reported
as a :class:`BadRecord` with its reason; nothing is skipped silently, so the
pipeline can prove ``read == kept + quarantined`` per shard. A stream that
cannot be read to its end (truncated or corrupt zstd, an HTTP body cut short)
is a :class:`CorruptShard`: the rest of such a shard cannot be counted, so it is
never quarantinable.

Memory does not depend on the shard's size (HPLT v4 shards hold up to 1e11
bytes of JSON): decompression runs in bounded chunks whatever the compression
ratio, and only the line being parsed is held whole. A single 200 MB document
peaks at about three times its size (its bytes, orjson's buffer, the str).
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import time
import unicodedata
import urllib.error
import urllib.request
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NamedTuple

import orjson
import zstandard

from shard_pipeline.input.corpus import InputShard

if TYPE_CHECKING:  # pragma: no cover
    from shard_pipeline.contract.shard import Doc

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
)
STREAM_REASONS: tuple[str, ...] = (
    "empty_file",  # 0 bytes: not even an empty zstd frame
    "not_zstd",  # does not start with a zstd frame
    "corrupt_frame",  # zstd reported corrupt data (bad block, checksum, trailing garbage)
    "truncated",  # the input ended inside a zstd frame
    "short_read",  # HTTP body still incomplete after all retries
    "http_error",  # HTTP status or protocol error that retrying cannot fix
)
BAD_RECORD_MODES = ("fail", "quarantine")
CORPORA = ("v3", "v4")

MAX_ID_CHARS = 4096  # ids are sort keys held by the plan; a huge one is a broken record
HTTP_RETRIES = 5  # consecutive failed attempts without progress before an HTTP shard is given up
HTTP_BACKOFF = 1.0  # seconds before the first retry; doubled each time (capped at 120 s)
_READ_SIZE = 1 << 17  # compressed bytes per read() of a file or HTTP body (zstd's recommended input size)
_FEED_SIZE = 1 << 17  # compressed bytes the decompressor pulls at a time
_OUT_SIZE = 1 << 18  # decompressed bytes per chunk: bounds memory whatever the compression ratio
_DETAIL_CHARS = 200
_MAX_BACKOFF = 120.0


class _LineError(Exception):
    """An error at a line of an input shard: where it is, what kind, and the detail."""

    def __init__(self, location: str, line: int, reason: str, detail: str) -> None:
        super().__init__(location, line, reason, detail)
        self.location = location
        self.line = line
        self.reason = reason
        self.detail = detail


class CorruptShard(_LineError):
    """The shard's byte stream cannot be read to its end; the whole shard has failed.

    It may be raised after records were already yielded: callers must discard
    whatever they produced from this shard.
    """

    def __str__(self) -> str:
        if self.line == 0:  # nothing was decompressed: there is no line to name, the detail has the byte offset
            return f"{self.location}: before the first line: {self.reason}: {self.detail}"
        return f"{self.location}: line {self.line}: {self.reason}: {self.detail}"


class BadRecord(_LineError):
    """One line that cannot become a document; ``reason`` is one of :data:`REASONS`."""

    def __str__(self) -> str:
        return f"{self.location}:{self.line}: {self.reason}: {self.detail}"


class HpltRecord(NamedTuple):
    """The fields the pipeline keeps from one HPLT line (see docs/hplt-mapping.md)."""

    line: int
    id: str
    text: str
    url: str
    lang: str
    pii_count: int


@dataclass
class ReadStats:
    """Per-shard counts; after a full read ``read == kept + sum(quarantined.values())``."""

    read: int = 0
    kept: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    json_bytes: int = 0
    compressed_bytes: int = 0


class QuarantineWriter:
    """Appends bad records, verbatim, one JSON object per line.

    The file is created on the first bad record, so a clean shard leaves no
    file behind. ``raw`` is the line as text when it is valid UTF-8, else
    ``{"base64": ...}``, so the original bytes can always be recovered.
    """

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
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "ab")
        self._fh.write(orjson.dumps(row) + b"\n")
        self.count += 1

    def close(self) -> None:
        """Flush and fsync: the quarantine is the only copy of what was not kept."""
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None

    def __enter__(self) -> QuarantineWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _StreamBroken(Exception):
    """Internal: the byte stream failed; the caller adds location and line."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail


# --------------------------------------------------------------------------
# Compressed input: local files and HTTP with resume


def _is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def _file_chunks(path: str, count: Callable[[int], None] | None) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while True:
            buf = fh.read(_READ_SIZE)
            if not buf:
                return
            if count is not None:
                count(len(buf))
            yield buf


def _content_range(value: str | None) -> tuple[int, int | None] | None:
    """Parse ``bytes START-END/TOTAL`` into (START, TOTAL or None)."""
    if not value or not value.startswith("bytes "):
        return None
    try:
        span, _, total = value[6:].partition("/")
        start = int(span.split("-", 1)[0])
        return start, (None if total.strip() == "*" else int(total))
    except ValueError:
        return None


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code in (408, 425, 429) or exc.code >= 500
    return isinstance(exc, (OSError, http.client.HTTPException))


def _http_chunks(url: str, retries: int, backoff: float, count: Callable[[int], None] | None) -> Iterator[bytes]:
    """Yield the body of ``url``; resume with Range requests after a drop.

    ``retries`` counts consecutive failed attempts that brought no new bytes;
    any progress resets it, so a long shard over a flaky link still finishes,
    while a server that never delivers more fails after ``retries`` retries.
    The total length comes from Content-Length / Content-Range and is checked
    at the end: a body cut short is never taken for a short shard.
    """
    offset = 0
    total: int | None = None
    validator: tuple[str | None, str | None] | None = None  # (ETag, Last-Modified)
    failures = 0
    last_error = ""
    while True:
        progressed = False
        headers = {"Accept-Encoding": "identity", "User-Agent": "hplt-shard"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as resp:
                status = resp.status
                got = (resp.headers.get("ETag"), resp.headers.get("Last-Modified"))
                if validator is None:
                    validator = got
                elif any(a and b and a != b for a, b in zip(validator, got, strict=True)):
                    raise _StreamBroken("http_error", f"{url} changed while it was being read (ETag/Last-Modified)")
                skip = 0
                if status == 206:
                    cr = _content_range(resp.headers.get("Content-Range"))
                    if cr is None or cr[0] != offset:
                        raise _StreamBroken(
                            "http_error",
                            f"bad Content-Range {resp.headers.get('Content-Range')!r} for a request from byte {offset}",
                        )
                    length = cr[1]
                elif status == 200:
                    skip = offset  # the server ignored Range: read from the start, drop what we have
                    cl = resp.headers.get("Content-Length")
                    length = int(cl) if cl is not None and cl.isdigit() else None
                else:
                    raise _StreamBroken("http_error", f"unexpected HTTP status {status}")
                if length is not None:
                    if total is not None and length != total:
                        raise _StreamBroken("http_error", f"length changed from {total} to {length} bytes")
                    total = length
                while skip:
                    dropped = resp.read(min(skip, _READ_SIZE))
                    if not dropped:
                        break
                    skip -= len(dropped)
                if skip:
                    raise http.client.IncompleteRead(b"", skip)
                while True:
                    buf = resp.read(_READ_SIZE)
                    if not buf:
                        break
                    if total is not None and offset + len(buf) > total:
                        raise _StreamBroken("http_error", f"server sent more than the announced {total} bytes")
                    offset += len(buf)
                    progressed = True
                    if count is not None:
                        count(len(buf))
                    yield buf
            if total is None or offset == total:
                return
            last_error = f"connection closed at byte {offset} of {total}"
        except _StreamBroken:
            raise
        except urllib.error.HTTPError as e:
            if not _retryable(e):
                raise _StreamBroken("http_error", f"HTTP {e.code} {e.reason} for {url}") from None
            last_error = f"HTTP {e.code} {e.reason}"
        except (OSError, http.client.HTTPException) as e:
            last_error = f"{type(e).__name__}: {e}"
        failures = 1 if progressed else failures + 1
        if failures > retries:
            where = f"byte {offset} of {total}" if total is not None else f"byte {offset}"
            raise _StreamBroken("short_read", f"gave up after {retries} retries at {where}: {last_error}")
        time.sleep(min(_MAX_BACKOFF, backoff * 2 ** (failures - 1)))


def _compressed_chunks(
    location: str, retries: int, backoff: float, count: Callable[[int], None] | None
) -> Iterator[bytes]:
    if _is_url(location):
        return _http_chunks(location, retries, backoff, count)
    return _file_chunks(location, count)


# --------------------------------------------------------------------------
# Decompression across frames, with truncation detection

_ZSTD_MAGIC = 0xFD2FB528
_BLOCK_MAX = 128 * 1024  # RFC 8878 Block_Maximum_Size upper bound
_DID_BYTES = (0, 1, 2, 4)
_FCS_BYTES = ((0, 1), (2, 2), (4, 4), (8, 8))  # [FCS flag][Single_Segment_flag]


class _FrameWalker:
    """Follows zstd frame and block headers (RFC 8878) over the compressed bytes.

    python-zstandard's ``stream_reader`` returns a short stream, without an
    error, when its input stops inside a frame, and ``decompressobj`` cannot
    bound its output (a highly repetitive shard expands without limit). So
    the bytes are decompressed by ``stream_reader`` (bounded reads) while this
    walker, which skips over block contents without decompressing them, says
    whether the input ended exactly at a frame boundary. It also names the
    first byte that is not a frame (garbage, a bad block header). A file cut
    exactly at a frame boundary of a multi-frame file is still a valid zstd
    stream and cannot be detected from the bytes alone: only a known size
    (HTTP Content-Length, the counts index's bytes) or count catches it.
    """

    def __init__(self) -> None:
        self.state = "magic"
        self.need = 4
        self.hdr = bytearray()
        self.hdr_start = 0
        self.skip = 0
        self.offset = 0  # absolute offset of the next byte fed
        self.frames = 0  # frames (zstd or skippable) fully walked
        self.checksum = False
        self.single_segment = False
        self.error: _StreamBroken | None = None

    def at_boundary(self) -> bool:
        return self.state == "magic" and not self.hdr and not self.skip

    def feed(self, data: bytes | memoryview) -> int:
        """Walk ``data``; return how many of its bytes precede the first error (all if none)."""
        pos, n = 0, len(data)
        while pos < n:
            if self.skip:
                take = min(self.skip, n - pos)
                self.skip -= take
                pos += take
                continue
            if not self.hdr:
                self.hdr_start = self.offset + pos
            take = min(self.need - len(self.hdr), n - pos)
            self.hdr += data[pos : pos + take]
            pos += take
            if len(self.hdr) < self.need:
                break
            self.error = self._header(bytes(self.hdr))
            self.hdr = bytearray()
            if self.error is not None:
                accepted = max(0, self.hdr_start - self.offset)
                self.offset += accepted
                return accepted
        self.offset += n
        return n

    def _header(self, h: bytes) -> _StreamBroken | None:
        state = self.state
        if state == "magic":
            magic = int.from_bytes(h, "little")
            if magic == _ZSTD_MAGIC:
                self.state, self.need = "descriptor", 1
            elif 0x184D2A50 <= magic <= 0x184D2A5F:
                self.state, self.need = "skippable", 4
            elif self.hdr_start == 0:
                return _StreamBroken("not_zstd", f"starts with {h!r}, not a zstd frame")
            else:
                return _StreamBroken(
                    "corrupt_frame", f"no zstd frame at compressed byte {self.hdr_start} (after {self.frames} frames)"
                )
        elif state == "descriptor":
            fhd = h[0]
            if fhd & 0x08:
                return _StreamBroken("corrupt_frame", f"reserved bit set in frame header at byte {self.hdr_start}")
            self.single_segment = bool(fhd & 0x20)
            self.checksum = bool(fhd & 0x04)
            rest = (0 if self.single_segment else 1) + _DID_BYTES[fhd & 3] + _FCS_BYTES[fhd >> 6][self.single_segment]
            self.state, self.need = ("frame_rest", rest) if rest else ("block", 3)
        elif state == "frame_rest":
            self.state, self.need = "block", 3
        elif state == "block":
            value = int.from_bytes(h, "little")
            last, kind, size = value & 1, (value >> 1) & 3, value >> 3
            if kind == 3 or size > _BLOCK_MAX:
                return _StreamBroken("corrupt_frame", f"bad block header at compressed byte {self.hdr_start}")
            self.skip = 1 if kind == 1 else size  # an RLE block stores one byte
            if last:
                self.skip += 4 if self.checksum else 0
                self.state, self.need = "magic", 4
                self.frames += 1
        elif state == "skippable":
            self.skip = int.from_bytes(h, "little")
            self.state, self.need = "magic", 4
            self.frames += 1
        return None

    def end_problem(self) -> _StreamBroken | None:
        """Why the input may not end here, or None at a frame boundary."""
        if self.offset == 0:
            return _StreamBroken("empty_file", "0 bytes")
        if self.frames == 0 and self.state in ("magic", "descriptor"):
            return _StreamBroken("not_zstd", f"{self.offset} bytes, not even a zstd frame header")
        if not self.at_boundary():
            where = "header" if self.hdr else "block"
            return _StreamBroken(
                "truncated",
                f"input ends inside a {where} of zstd frame {self.frames + 1} after {self.offset} compressed bytes",
            )
        return None


class _WalkedSource:
    """The file-like source ``stream_reader`` pulls from: compressed chunks, walked as they pass.

    Bytes after a structural error are withheld, so everything before it is
    still decompressed and yielded, and the error is raised where it occurred.
    """

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.walker = _FrameWalker()
        self.view = memoryview(b"")
        self.stopped = False

    def read(self, n: int = -1) -> bytes | memoryview:
        if self.stopped:
            return b""
        while not self.view:
            chunk = next(self.chunks, None)
            if chunk is None:
                return b""
            self.view = memoryview(chunk)
        if n < 0:
            n = len(self.view)
        out, self.view = self.view[:n], self.view[n:]
        accepted = self.walker.feed(out)
        if self.walker.error is not None:
            self.stopped = True
            return out[:accepted]
        return out

    def close(self) -> None:
        close = getattr(self.chunks, "close", None)
        if close is not None:
            close()


def _inflate(chunks: Iterator[bytes]) -> Generator[bytes, None, None]:
    """Decompress every frame in ``chunks`` in bounded pieces; fail unless the input ends at a frame boundary."""
    source = _WalkedSource(chunks)
    reader = zstandard.ZstdDecompressor().stream_reader(source, read_size=_FEED_SIZE, read_across_frames=True)
    try:
        while True:
            try:
                out = reader.read(_OUT_SIZE)
            except zstandard.ZstdError as e:
                w = source.walker
                raise _StreamBroken(
                    "corrupt_frame", f"zstd error in frame {w.frames + 1} before compressed byte {w.offset}: {e}"
                ) from None
            if not out:
                break
            yield out
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    problem = source.walker.error or source.walker.end_problem()
    if problem is not None:
        raise problem


# --------------------------------------------------------------------------
# open_decompressed: the file-like view


class _DecompressedRaw(io.RawIOBase):
    """Raw stream over the decompressed chunks; stream failures become CorruptShard."""

    def __init__(self, location: str, chunks: Iterator[bytes]) -> None:
        super().__init__()
        self._location = location
        self._chunks = chunks
        self._buf = memoryview(b"")
        self._newlines = 0
        self._partial = False
        self._error: CorruptShard | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        while not self._buf:
            if self._error is not None:
                raise self._error  # sticky: a broken stream never turns into a clean EOF
            try:
                chunk = next(self._chunks)
            except StopIteration:
                return 0
            except _StreamBroken as e:
                line = self._newlines + (1 if self._partial else 0)
                self._error = CorruptShard(self._location, line, e.reason, e.detail)
                raise self._error from None
            self._newlines += chunk.count(b"\n")
            self._partial = not chunk.endswith(b"\n")
            self._buf = memoryview(chunk)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()
        super().close()


def open_decompressed(location: str, *, retries: int = HTTP_RETRIES, backoff: float = HTTP_BACKOFF) -> BinaryIO:
    """Open a local ``.jsonl.zst`` path or an http(s) URL as a decompressed binary stream.

    Reads across zstd frames; raises :class:`CorruptShard` when the stream is
    empty, not zstd, corrupt, truncated inside a frame, or (HTTP) still short
    after ``retries`` retries with exponential backoff starting at
    ``backoff`` seconds. Its line number counts the newlines decompressed so
    far, which may run ahead of what the caller has read from the buffer.
    """
    if not _is_url(location) and not os.path.exists(location):
        raise FileNotFoundError(f"{location}: no such shard")
    raw = _DecompressedRaw(location, _inflate(_compressed_chunks(location, retries, backoff, None)))
    return io.BufferedReader(raw, buffer_size=_OUT_SIZE)  # type: ignore[return-value]


# --------------------------------------------------------------------------
# Record classification


def _short(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[:_DETAIL_CHARS] + "..."


def _has_surrogate(value: object) -> bool:
    """True when a parsed value holds a lone surrogate anywhere (keys included)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _unparsable(raw: bytes | bytearray, orjson_error: Exception) -> tuple[str, str]:
    """Why orjson refused a line: checked independently of orjson's messages."""
    if not raw.strip(b" \t\r"):
        return "empty_line", "blank line" if raw else "empty line"
    data = bytes(raw)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return "invalid_utf8", f"byte 0x{data[e.start]:02x} at offset {e.start} ({e.reason})"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        return "not_json", _short(str(e))
    if _has_surrogate(value):
        return "lone_surrogate", _short(str(orjson_error))
    return "not_json", _short(str(orjson_error))  # e.g. NaN, Infinity, 1e400, nesting depth


def _bad_id_chars(value: str) -> bool:
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            return True
    return False


def _field_problem(obj: object) -> tuple[str, str] | None:
    """The first field problem of a parsed line, or None if it is a good record."""
    if not isinstance(obj, dict):
        return "not_object", f"JSON {type(obj).__name__}, expected an object"
    if "id" not in obj:
        return "missing_id", "no 'id' field"
    id_ = obj["id"]
    if not isinstance(id_, str):
        return "id_not_string", f"'id' is {type(id_).__name__}: {_short(repr(id_))}"
    if not id_:
        return "bad_id", "'id' is empty"
    if len(id_) > MAX_ID_CHARS:
        return "bad_id", f"'id' has {len(id_)} characters (at most {MAX_ID_CHARS})"
    if _bad_id_chars(id_):
        return "bad_id", f"'id' contains control characters: {_short(ascii(id_))}"
    if "text" not in obj:
        return "missing_text", "no 'text' field"
    text = obj["text"]
    if not isinstance(text, str):
        return "text_not_string", f"'text' is {type(text).__name__}"
    if "u" not in obj:
        return "missing_u", "no 'u' field (the document URL)"
    url = obj["u"]
    if not isinstance(url, str):
        return "u_not_string", f"'u' is {type(url).__name__}: {_short(repr(url))}"
    if not url:
        return "empty_u", "'u' is an empty string"
    pii = obj.get("pii")
    if pii is not None and not isinstance(pii, list):
        return "pii_not_list", f"'pii' is {type(pii).__name__}"
    return None


# --------------------------------------------------------------------------
# iter_records: the hot path


def iter_records(
    shard: InputShard,
    *,
    corpus: str,
    bad_records: str = "fail",
    quarantine: QuarantineWriter | None = None,
    stats: ReadStats,
) -> Iterator[HpltRecord]:
    """Yield every good record of ``shard``; report every other line.

    Lines are split on ``b"\\n"`` only; a final line without a newline is a
    line. ``bad_records="fail"`` raises :class:`BadRecord` at the first bad
    line; ``"quarantine"`` counts it in ``stats.quarantined`` by reason and
    writes it to ``quarantine``. Stream failures raise :class:`CorruptShard`.
    Arguments are checked here, before the first line is read.
    """
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, not {corpus!r}")
    if bad_records not in BAD_RECORD_MODES:
        raise ValueError(f"bad_records must be one of {BAD_RECORD_MODES}, not {bad_records!r}")
    if bad_records == "quarantine" and quarantine is None:
        raise ValueError("bad_records='quarantine' needs a QuarantineWriter")
    if not _is_url(shard.location) and not os.path.exists(shard.location):
        raise FileNotFoundError(f"{shard.location}: no such shard")
    return _records(shard, corpus == "v4", bad_records == "fail", quarantine, stats)


class _LineBatches:
    """Complete lines, one list per decompressed chunk, split on b"\\n" only.

    Each line keeps its b"\\n" (JSON whitespace to orjson; stripped before a
    bad line is reported). ``BytesIO.readlines`` finds newlines with memchr,
    about 10x faster than ``bytes.split``, and handing the hot loop a list
    per chunk keeps the per-line cost to a list iteration. A line longer than
    a chunk grows in one bytearray, so a 200 MB document is held once, not in
    pieces plus a joined copy.
    """

    def __init__(self, chunks: Iterator[bytes], stats: ReadStats) -> None:
        self.chunks = chunks
        self.stats = stats
        self.pending = bytearray()

    def __iter__(self) -> Iterator[list]:
        stats = self.stats
        for chunk in self.chunks:
            stats.json_bytes += len(chunk)
            lines: list = io.BytesIO(chunk).readlines()
            if self.pending:
                self.pending += lines[0]
                if self.pending[-1] != 10:  # still no newline: the chunk was all one line's middle
                    continue
                lines[0] = self.pending
                self.pending = bytearray()
            if lines[-1][-1] != 10:
                self.pending += lines.pop()
            if lines:
                yield lines
        if self.pending:  # a final line without a newline is a line
            final, self.pending = self.pending, bytearray()
            yield [final]


def _records(
    shard: InputShard,
    v4: bool,
    fail: bool,
    quarantine: QuarantineWriter | None,
    stats: ReadStats,
) -> Iterator[HpltRecord]:
    location = shard.location

    def count_compressed(n: int) -> None:
        stats.compressed_bytes += n

    chunks = _inflate(_compressed_chunks(location, HTTP_RETRIES, HTTP_BACKOFF, count_compressed))
    batches = _LineBatches(chunks, stats)
    loads = orjson.loads
    new_record = tuple.__new__  # HpltRecord(...) would add a Python-level __new__ call per line
    max_id = MAX_ID_CHARS
    read0, kept0 = stats.read, stats.kept
    line = kept = 0
    try:
        for batch in batches:
            # Counted per batch for speed; made exact in ``finally``.
            stats.read = read0 + line + len(batch)
            stats.kept = kept0 + kept
            for raw in batch:
                line += 1
                try:
                    obj = loads(raw)
                    id_ = obj["id"]
                    text = obj["text"]
                    url = obj["u"]
                except Exception as e:  # JSONDecodeError, KeyError, TypeError: diagnosed off the hot path
                    raw = _without_newline(raw)
                    if isinstance(e, orjson.JSONDecodeError):
                        reason, detail = _unparsable(raw, e)
                    else:
                        reason, detail = _field_problem(obj) or ("not_object", "unreadable fields")
                    _reject(shard, line, raw, reason, detail, fail, quarantine, stats)
                    continue
                pii = obj.get("pii")
                if pii.__class__ is list:
                    pii_count = len(pii)
                elif pii is None:
                    pii_count = 0
                else:
                    pii_count = -1
                if not (
                    id_.__class__ is str
                    and text.__class__ is str
                    and url.__class__ is str
                    and id_
                    and url
                    and pii_count >= 0
                    and len(id_) <= max_id
                    and id_.isprintable()
                ):
                    problem = _field_problem(obj)
                    if problem is not None:
                        _reject(shard, line, _without_newline(raw), *problem, fail, quarantine, stats)
                        continue
                if v4:
                    lid = obj.get("openlid_v3")
                    if lid is None:
                        lid = obj.get("openlid-v3")
                    langs = lid.get("lang") if lid.__class__ is dict else None
                else:
                    langs = obj.get("lang")
                if langs.__class__ is list and langs and langs[0].__class__ is str and langs[0]:
                    lang = langs[0]
                else:
                    lang = "und"
                kept += 1
                yield new_record(HpltRecord, (line, id_, text, url, lang, pii_count))
    except _StreamBroken as e:
        reached = line + (1 if batches.pending else 0)
        raise CorruptShard(location, reached, e.reason, e.detail) from None
    finally:
        stats.read = read0 + line
        stats.kept = kept0 + kept
        chunks.close()


def _without_newline(raw: bytes | bytearray) -> bytes | bytearray:
    """The line as it stands in the file, without its terminator."""
    return raw[:-1] if raw[-1:] == b"\n" else raw


def _reject(
    shard: InputShard,
    line: int,
    raw: bytes | bytearray,
    reason: str,
    detail: str,
    fail: bool,
    quarantine: QuarantineWriter | None,
    stats: ReadStats,
) -> None:
    """Raise (fail mode) or count and quarantine one bad line; never drop it silently."""
    bad = BadRecord(shard.location, line, reason, detail)
    if fail:
        raise bad
    stats.quarantined[reason] = stats.quarantined.get(reason, 0) + 1
    quarantine.add(shard.source_id, bad, raw)  # type: ignore[union-attr]


# --------------------------------------------------------------------------
# Record -> contract Doc


def to_doc(rec: HpltRecord, shard: InputShard, license_spdx: str) -> Doc:
    """The contract's Doc for one record; see docs/hplt-mapping.md for every field."""
    from shard_pipeline.contract.shard import (
        Doc,  # imported here: shard.py pulls in pyarrow, the reader does not need it
    )

    return Doc(
        id=rec.id,
        text=rec.text,
        meta={
            "source_id": shard.source_id,
            "url": rec.url,
            "license_spdx": license_spdx,
            "lang": rec.lang,
            "pii_redactions": rec.pii_count,
            "pii": {"spans": rec.pii_count} if rec.pii_count > 0 else {},
        },
    )
