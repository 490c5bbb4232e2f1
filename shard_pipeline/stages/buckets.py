"""Range buckets of the id space: the global order's coarse grain, fixed before partitioning.

Bucket b holds the ids in [boundaries[b-1], boundaries[b]) (UTF-8 byte order), so buckets in
order, each sorted, are the global order, and equal ids always meet in one bucket. Boundaries
only steer balance: any boundaries give the same output bytes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
HEX_PREFIX_DIGITS = 8


def is_uniform_hex(sample: Sequence[str]) -> bool:
    """HPLT ids are 32 lowercase hex digits of a hash: uniform, so no sample is needed."""
    return bool(sample) and all(_HEX32.match(i) for i in sample)


def hex_boundaries(buckets: int) -> list[str]:
    """Equal slices of the hex id space, as 8-digit prefixes."""
    space = 16**HEX_PREFIX_DIGITS
    return [format(j * space // buckets, f"0{HEX_PREFIX_DIGITS}x") for j in range(1, buckets)]


def sample_boundaries(sample: Sequence[str], buckets: int) -> list[str]:
    """Quantiles of a sample of ids; duplicates collapse, so there may be fewer buckets."""
    ids = sorted(set(sample), key=lambda s: s.encode("utf-8"))
    if len(ids) < 2 or buckets < 2:
        return []
    cuts = []
    for j in range(1, buckets):
        b = ids[j * len(ids) // buckets]
        if not cuts or b.encode() > cuts[-1].encode():
            cuts.append(b)
    return [c for c in cuts if c.encode() > ids[0].encode()] if cuts else []


def choose_boundaries(sample: Sequence[str], buckets: int) -> tuple[str, list[str]]:
    """(method, boundaries) for `buckets` buckets from a sample of ids."""
    if buckets < 2:
        return "single", []
    if is_uniform_hex(sample):
        return "hex-uniform", hex_boundaries(buckets)
    return "sample-quantiles", sample_boundaries(sample, buckets)


def boundary_keys(boundaries: Sequence[str]) -> list[bytes]:
    return [b.encode("utf-8") for b in boundaries]


def bucket_cuts(sorted_ids_utf8: Sequence[bytes], keys: Sequence[bytes]) -> list[int]:
    """Positions in a sorted id list where each bucket starts (len(keys) + 2 entries, first 0)."""
    from bisect import bisect_left

    cuts = [0]
    lo = 0
    for k in keys:
        lo = bisect_left(sorted_ids_utf8, k, lo)
        cuts.append(lo)
    cuts.append(len(sorted_ids_utf8))
    return cuts


@dataclass
class HeadSample:
    """Ids from the head of every input shard, and what reading them taught about the sizes."""

    ids: list[str] = field(default_factory=list)
    complete: dict[int, int] = field(default_factory=dict)  # shard index -> exact records, read to the end
    compressed_per_doc: float | None = None  # from the shards read only in part
    text_per_doc: float | None = None  # UTF-8 text bytes per record seen: sizes the later stages' memory
    largest_text: int = 0  # UTF-8 bytes of the longest text seen: one document's memory in partition and write
    largest_line: int = 0  # bytes of the longest JSON line seen (xml and md too: partition parses all of it)
    largest_at: str = ""  # "PATH line N" of the longest text


HEAD_RECORDS = 500  # per shard; at HPLT scale `total` rules (English: 100,000 / 1,108 shards = 90 a shard)
HEAD_TOTAL = 100_000


def sample_heads(shards, *, corpus: str, per_shard: int = HEAD_RECORDS, total: int = HEAD_TOTAL) -> HeadSample:
    """Read the first 500 records of every shard (a large run: by `total`), serially before any task starts:
    enough for quantiles. A shard read to its end has an exact count, the others an estimate from the
    compressed bytes per record. Bad records and corrupt streams are skipped: a sample steers balance and
    layout, never the output."""
    from shard_pipeline.input.reader import BadRecord, CorruptShard, ReadStats, head_records

    per = max(10, min(per_shard, total // max(1, len(shards))))
    sample = HeadSample()
    docs = compressed = 0
    texts = text_bytes = 0
    for index, shard in enumerate(shards):
        stats = ReadStats()
        it = head_records(shard, corpus=corpus, quarantine=_NullQuarantine(), stats=stats)  # type: ignore[arg-type]
        seen, ended = 0, False
        try:
            for line, id_, size in it:
                if seen >= per:
                    break
                sample.ids.append(id_)
                texts, text_bytes = texts + 1, text_bytes + size
                if size > sample.largest_text:
                    sample.largest_text, sample.largest_at = size, f"{shard.location} line {line}"
                seen += 1
            else:
                ended = True
        except (BadRecord, CorruptShard, OSError):
            pass
        finally:
            it.close()
        sample.largest_line = max(sample.largest_line, stats.longest_line)
        if ended:
            sample.complete[index] = stats.read
        elif stats.read:
            docs += stats.read
            compressed += stats.compressed_bytes
    partial = [shard for index, shard in enumerate(shards) if index not in sample.complete]
    deep = min(DEEP_SHARDS, max(1, len(partial) // 8))  # one shard of a small run, 16 of v4 English's 1,108
    steady = steady_rate(partial[:: max(1, -(-len(partial) // deep))][:deep])
    sample.compressed_per_doc = steady or (compressed / docs if docs else None)
    sample.text_per_doc = text_bytes / texts if texts else None
    return sample


DEEP_SHARDS = 16  # at most, shards read to zstd_stream.DEEP_BYTES for the documents per compressed byte (~8 ms each)


def steady_rate(shards) -> float | None:  # noqa: ANN001
    """Compressed bytes per document at zstd's steady rate, over these shards (`zstd_stream.steady_density`);
    None when none is large enough to say. The head sample's own bytes per record are the fallback."""
    from shard_pipeline.input.fetch import HTTP_BACKOFF, HTTP_RETRIES, compressed_chunks
    from shard_pipeline.input.zstd_stream import DEEP_BYTES, steady_density

    total_bytes, total_docs = 0, 0.0
    for shard in shards:
        prefix = bytearray()
        chunks = compressed_chunks(shard.location, HTTP_RETRIES, HTTP_BACKOFF, None)
        try:
            for chunk in chunks:
                prefix += chunk
                if len(prefix) >= DEEP_BYTES:
                    break
        except OSError:  # unreadable here: partition reports it
            continue
        finally:
            chunks.close()
        found = steady_density(bytes(prefix[:DEEP_BYTES]))
        if found is not None:
            total_bytes, total_docs = total_bytes + found[0], total_docs + found[1]
    return total_bytes / total_docs if total_docs else None


class _NullQuarantine:
    """Discards bad records during sampling (partition quarantines or fails on them for real)."""

    def add(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass
