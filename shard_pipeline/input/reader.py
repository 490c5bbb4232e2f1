"""A strict streaming reader for HPLT ``.jsonl.zst`` shards.

Every line is yielded as an :class:`HpltRecord` or reported as a :class:`BadRecord` with its reason, so the
pipeline can prove ``read == kept + quarantined``; a stream that cannot be read to its end is a
:class:`CorruptShard`. Memory does not depend on the shard's size: decompression runs in bounded chunks and
only the line being parsed is held whole (a 200 MB document peaks at about three times its size).
The parts: ``fetch``, ``zstd_stream``, ``records``, ``quarantine``, ``failures``.
"""

from __future__ import annotations

import io
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shard_pipeline.input.failures import (
    REASONS,
    STREAM_REASONS,
    BadRecord,
    CorruptShard,
    StreamBroken,
)
from shard_pipeline.input.fetch import (
    HTTP_BACKOFF,
    HTTP_RETRIES,
    compressed_chunks,
    is_url,
)
from shard_pipeline.input.quarantine import QuarantineWriter
from shard_pipeline.input.release_md5 import COMPRESSED, DECODED, stream_hashes
from shard_pipeline.input.records import (
    MAX_ID_CHARS,
    FastError,
    HpltRecord,
    fast_decoder,
    strict_record,
    without_newline,
)
from shard_pipeline.input.zstd_stream import inflate, open_decompressed
from shard_pipeline.native import compiled

# the compiled read loop (setup.py); without it (or built from another source) partition reads with
# iter_records, to the same bytes
try:
    from shard_pipeline.input import _scan
except ImportError:  # pragma: no cover - an install without a C compiler
    _scan = None
native_scan = compiled(_scan, "scan", "input/_scan.c")

if TYPE_CHECKING:  # pragma: no cover
    from shard_pipeline.contract.rules import Doc
    from shard_pipeline.input.corpus import (
        InputShard,  # or anything with .location and .source_id (InputRef)
    )

__all__ = [
    "BAD_RECORD_MODES", "CORPORA", "MAX_ID_CHARS", "REASONS", "STREAM_REASONS", "BadRecord", "CorruptShard",
    "HpltRecord", "QuarantineWriter", "ReadStats", "ShardLines", "head_records", "iter_records", "native_scan", "open_decompressed",
    "to_doc",
]

BAD_RECORD_MODES = ("fail", "quarantine")
_GIVE_UP_MISSES = 256  # after this many lines the fast path did not accept, stop trying it if they are 1 in 4
CORPORA = ("v3", "v4")


@dataclass
class ReadStats:
    """Per-shard counts; after a full read ``read == kept + sum(quarantined.values())``."""

    read: int = 0
    kept: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    json_bytes: int = 0
    compressed_bytes: int = 0
    longest_line: int = 0  # bytes of the longest line seen: the head sample sizes memory by it


def iter_records(
    shard: InputShard,
    *,
    corpus: str,
    bad_records: str = "fail",
    quarantine: QuarantineWriter | None = None,
    stats: ReadStats,
    annotations: tuple[str, ...] = (),
) -> Iterator[HpltRecord]:
    """Yield every good record of ``shard``; report every other line (split on ``b"\\n"`` only), checking
    the arguments before the first line. ``bad_records="fail"`` raises :class:`BadRecord` at the first bad
    line; ``"quarantine"`` counts it by reason and writes it to ``quarantine``. With ``annotations`` each
    record carries those fields, and every line takes the strict path."""
    return _records(ShardLines(shard, corpus=corpus, bad_records=bad_records, quarantine=quarantine, stats=stats,
                               annotations=annotations))


def head_records(shard: InputShard, *, corpus: str, quarantine: QuarantineWriter, stats: ReadStats
                 ) -> Iterator[tuple[int, str, int]]:
    """(line, id, UTF-8 bytes of the text) of every good record, for the head sample: :func:`iter_records`'
    records and counts in quarantine mode, from the native scan when it is built (no text `str` is made)."""
    if native_scan is None:
        for rec in iter_records(shard, corpus=corpus, bad_records="quarantine", quarantine=quarantine, stats=stats):
            yield rec.line, rec.id, len(rec.text.encode("utf-8"))
        return
    lines = ShardLines(shard, corpus=corpus, bad_records="quarantine", quarantine=quarantine, stats=stats)
    v4, read0, last = lines.v4, stats.read, 0
    texts, meta, ids, urls, langs, taken = bytearray(), bytearray(), [], [], [], array("q")
    try:
        for first, batch in lines:
            i, n = 0, len(batch)
            while i < n:
                i, _, refused = native_scan(batch, first, i, v4, texts, 0, 1 << 62, ids, urls, langs, meta)
                taken.frombytes(meta)
                start = 0
                for k, id_ in enumerate(ids):
                    end, last = taken[4 * k], taken[4 * k + 1]
                    stats.kept += 1
                    yield last, id_, end - start
                    start = end
                del meta[:], taken[:], ids[:], urls[:], langs[:]
                if refused:
                    last = first + i
                    rec = lines.decide(batch[i], last)
                    i += 1
                    if rec is not None:
                        yield last, rec.id, len(rec.text.encode("utf-8"))
            last = first + n - 1
    finally:
        stats.read = read0 + last


def _check_args(shard: InputShard, corpus: str, bad_records: str, quarantine: QuarantineWriter | None) -> None:
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, not {corpus!r}")
    if bad_records not in BAD_RECORD_MODES:
        raise ValueError(f"bad_records must be one of {BAD_RECORD_MODES}, not {bad_records!r}")
    if bad_records == "quarantine" and quarantine is None:
        raise ValueError("bad_records='quarantine' needs a QuarantineWriter")
    if not is_url(shard.location) and not os.path.exists(shard.location):
        raise FileNotFoundError(f"{shard.location}: no such shard")


class ShardLines:
    """A shard's lines one decompressed chunk at a time, for partition's native scan, and the strict path's
    decision for each line it does not take (:meth:`decide`), under :func:`iter_records`' contract.
    ``stats.read`` counts the lines handed out; the caller adds the records it took to ``stats.kept``.
    """

    def __init__(self, shard: InputShard, *, corpus: str, bad_records: str, quarantine: QuarantineWriter | None,
                 stats: ReadStats, annotations: tuple[str, ...] = ()) -> None:
        _check_args(shard, corpus, bad_records, quarantine)
        self.annotations = annotations
        self.shard = shard
        self.v4 = corpus == "v4"
        self.fail = bad_records == "fail"
        self.quarantine = quarantine
        self.stats = stats

    def __iter__(self) -> Iterator[tuple[int, list]]:
        """(the shard's line number of the batch's first line, the batch's lines)."""
        stats = self.stats
        location = self.shard.location

        def count_compressed(n: int) -> None:
            stats.compressed_bytes += n

        hashes = stream_hashes(location)  # the release's checksums, when a local copy keeps them
        chunks = compressed_chunks(location, HTTP_RETRIES, HTTP_BACKOFF, count_compressed)
        if hashes is not None:
            chunks = hashes.tap(DECODED, inflate(hashes.tap(COMPRESSED, chunks)))
        else:
            chunks = inflate(chunks)
        batches = _LineBatches(chunks, stats)
        line = 0
        try:
            for batch in batches:
                stats.read += len(batch)
                yield line + 1, batch
                line += len(batch)
            if hashes is not None:
                hashes.check(line)
        except StreamBroken as e:
            cut = bool(batches.pending)  # inside a line, or after the last whole one
            raise CorruptShard(location, line + cut, e.reason, e.detail, between=not cut) from None
        finally:
            chunks.close()

    def decide(self, raw: bytes | bytearray, line: int) -> HpltRecord | None:
        """The strict path's record of a line, or None once it is reported (raised in fail mode)."""
        rec = strict_record(raw, line, self.v4, self.annotations)
        if rec.__class__ is HpltRecord:
            self.stats.kept += 1
            return rec  # type: ignore[return-value]
        _reject(self.shard, line, without_newline(raw), *rec, self.fail, self.quarantine, self.stats)  # type: ignore[misc]
        return None




class _LineBatches:
    """Complete lines (each keeps its b"\\n"), one list per decompressed chunk: ``BytesIO.readlines`` uses
    memchr (10x ``bytes.split``); a line longer than a chunk grows in one bytearray, held once."""

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
                longest = max(map(len, lines))  # C-level, once per chunk
                if longest > stats.longest_line:
                    stats.longest_line = longest
                yield lines
        if self.pending:  # a final line without a newline is a line
            final, self.pending = self.pending, bytearray()
            stats.longest_line = max(stats.longest_line, len(final))
            yield [final]


def _records(lines: ShardLines) -> Iterator[HpltRecord]:
    stats, v4 = lines.stats, lines.v4
    decode = fast_decoder(v4)
    new_record = tuple.__new__  # HpltRecord(...) would add a Python-level __new__ call per line
    max_id = MAX_ID_CHARS
    read0 = stats.read
    line = kept = misses = 0
    fast = not lines.annotations  # the Struct's numbers are floats: annotations are taken from the strict parse
    batches = iter(lines)
    try:
        for _, batch in batches:
            stats.kept += kept  # counted per batch for speed; made exact in ``finally``
            kept = 0
            if fast and misses > _GIVE_UP_MISSES and misses * 4 > line:
                fast = False  # records of a shape the Struct does not declare: the strict path alone is cheaper
            for raw in batch:
                line += 1
                if fast:
                    try:
                        r = decode(raw)
                    except FastError:
                        r = None
                    if r is not None:
                        id_, url = r.id, r.u
                        if id_ and url and len(id_) <= max_id and id_.isprintable():
                            if v4:
                                lid = r.openlid_v3
                                if lid is None:
                                    lid = r.openlid_dash
                                langs = None if lid is None else lid.lang
                            else:
                                langs = r.lang
                            pii = r.pii
                            kept += 1
                            yield new_record(HpltRecord, (line, id_, r.text, url, langs[0] if langs and langs[0] else "und",
                                                          0 if pii is None else len(pii), None))
                            continue
                # Whatever the fast path did not accept, the strict path decides (and names).
                misses += 1
                rec = lines.decide(raw, line)
                if rec is not None:
                    yield rec
    finally:
        stats.read = read0 + line
        stats.kept += kept
        batches.close()


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




def to_doc(rec: HpltRecord, shard: InputShard, license_spdx: str) -> Doc:
    """The contract's Doc for one record; see docs/hplt-mapping.md for every field."""
    from shard_pipeline.contract.rules import Doc

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
