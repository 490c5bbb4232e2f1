"""zstd decompression across frames in bounded pieces, with truncation and corruption detection.

``inflate`` turns compressed chunks into decompressed chunks of at most ``OUT_SIZE`` bytes and
raises :class:`StreamBroken` unless the input ends exactly at a frame boundary;
``open_decompressed`` is the same as a file-like view for callers that read a shard as a stream.
"""

from __future__ import annotations

import io
import os
from collections.abc import Generator, Iterator
from typing import BinaryIO

import zstandard

from shard_pipeline.input.failures import CorruptShard, StreamBroken
from shard_pipeline.input.fetch import (
    HTTP_BACKOFF,
    HTTP_RETRIES,
    compressed_chunks,
    is_url,
)

_FEED_SIZE = 1 << 17  # compressed bytes the decompressor pulls at a time
OUT_SIZE = 1 << 18  # decompressed bytes per chunk: bounds memory whatever the compression ratio

_ZSTD_MAGIC = 0xFD2FB528
_BLOCK_MAX = 128 * 1024  # RFC 8878 Block_Maximum_Size upper bound
_DID_BYTES = (0, 1, 2, 4)
_FCS_BYTES = ((0, 1), (2, 2), (4, 4), (8, 8))  # [FCS flag][Single_Segment_flag]


class _FrameWalker:
    """Follows zstd frame and block headers (RFC 8878) over the compressed bytes, without decompressing.
    ``stream_reader`` returns a short stream, without an error, when its input stops inside a frame (and
    ``decompressobj`` cannot bound its output): this walker says whether the input ended at a frame boundary
    and names the first byte that is not a frame. A cut at a boundary takes a known size or count to catch."""

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
        self.error: StreamBroken | None = None
        self.whole = 0  # offset just past the last whole block (or frame): all its content can be decompressed

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
                if not self.skip:
                    self.whole = self.offset + pos
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

    def _header(self, h: bytes) -> StreamBroken | None:
        state = self.state
        if state == "magic":
            magic = int.from_bytes(h, "little")
            if magic == _ZSTD_MAGIC:
                self.state, self.need = "descriptor", 1
            elif 0x184D2A50 <= magic <= 0x184D2A5F:
                self.state, self.need = "skippable", 4
            elif self.hdr_start == 0:
                return StreamBroken("not_zstd", f"starts with {h!r}, not a zstd frame")
            else:
                return StreamBroken(
                    "corrupt_frame", f"no zstd frame at compressed byte {self.hdr_start} (after {self.frames} frames)"
                )
        elif state == "descriptor":
            fhd = h[0]
            if fhd & 0x08:
                return StreamBroken("corrupt_frame", f"reserved bit set in frame header at byte {self.hdr_start}")
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
                return StreamBroken("corrupt_frame", f"bad block header at compressed byte {self.hdr_start}")
            self.skip = 1 if kind == 1 else size  # an RLE block stores one byte
            if last:
                self.skip += 4 if self.checksum else 0
                self.state, self.need = "magic", 4
                self.frames += 1
            if not self.skip:  # an empty raw block: whole at its header's end
                self.whole = self.hdr_start + 3
        elif state == "skippable":
            self.skip = int.from_bytes(h, "little")
            self.state, self.need = "magic", 4
            self.frames += 1
        return None

    def end_problem(self) -> StreamBroken | None:
        """Why the input may not end here, or None at a frame boundary."""
        if self.offset == 0:
            return StreamBroken("empty_file", "0 bytes")
        if self.frames == 0 and self.state in ("magic", "descriptor"):
            return StreamBroken("not_zstd", f"{self.offset} bytes, not even a zstd frame header")
        if not self.at_boundary():
            where = "header" if self.hdr else "block"
            return StreamBroken(
                "truncated",
                f"input ends inside a {where} of zstd frame {self.frames + 1} after {self.offset} compressed bytes",
            )
        return None


class _WalkedSource:
    """The file-like source ``stream_reader`` pulls from: compressed chunks, walked as they pass. Bytes after
    a structural error are withheld, so all before it is still yielded and the error raised where it is."""

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


def inflate(chunks: Iterator[bytes]) -> Generator[bytes, None, None]:
    """Decompress every frame in ``chunks`` in bounded pieces; fail unless the input ends at a frame boundary."""
    source = _WalkedSource(chunks)
    reader = zstandard.ZstdDecompressor().stream_reader(source, read_size=_FEED_SIZE, read_across_frames=True)
    try:
        while True:
            try:
                out = reader.read(OUT_SIZE)
            except zstandard.ZstdError as e:
                w = source.walker
                raise StreamBroken(
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


WARM_BYTES = 256 << 10  # compressed bytes after which a stream compresses at its steady rate (bench/RESULTS.md 7)
DEEP_BYTES = 1 << 20  # what `steady_density` reads of a shard


def head_density(prefix: bytes) -> tuple[int, float] | None:
    """(compressed bytes, lines) of the whole zstd blocks at the start of a shard, measured exactly, or
    None when `prefix` does not hold one whole block. The prefix is cut at its last whole block
    (`_FrameWalker.whole`), whose content decompresses exactly; the last line, cut there, counts as
    the fraction of an average line that it is."""
    walker = _FrameWalker()
    walker.feed(prefix)
    end = walker.whole
    if end <= 0:
        return None
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(prefix[:end]), read_across_frames=True)
    lines = size = tail = 0
    try:
        while out := reader.read(OUT_SIZE):  # bounded: a prefix may expand a thousandfold
            size += len(out)
            newlines = out.count(b"\n")
            lines += newlines
            tail = len(out) - 1 - out.rfind(b"\n") if newlines else tail + len(out)
    except zstandard.ZstdError:
        return None
    if lines == 0:
        return (end, 1.0) if size else None  # a prefix inside one long line: at most one document
    return end, lines + tail / ((size - tail) / lines)


def steady_density(prefix: bytes) -> tuple[int, float] | None:
    """(compressed bytes, lines) of a shard past its first WARM_BYTES, at zstd's steady rate; None when
    `prefix` reaches no further. A head compresses with no history (the bench's first 128 KiB: 1.6x the
    bytes per document); between 256 KiB and 1 MiB the rate is the file's within 1-2%."""
    warm, whole = head_density(prefix[:WARM_BYTES]), head_density(prefix)
    if warm is None or whole is None or whole[0] <= warm[0] or whole[1] <= warm[1]:
        return None
    return whole[0] - warm[0], whole[1] - warm[1]


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
            except StreamBroken as e:
                line = self._newlines + (1 if self._partial else 0)
                self._error = CorruptShard(self._location, line, e.reason, e.detail, between=not self._partial)
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
    """A local ``.jsonl.zst`` path or an http(s) URL as a decompressed binary stream across frames;
    :class:`CorruptShard` when it is empty, not zstd, corrupt, truncated or (HTTP) still short after retries."""
    if not is_url(location) and not os.path.exists(location):
        raise FileNotFoundError(f"{location}: no such shard")
    raw = _DecompressedRaw(location, inflate(compressed_chunks(location, retries, backoff, None)))
    return io.BufferedReader(raw, buffer_size=OUT_SIZE)  # type: ignore[return-value]
