"""HPLT v3's release checksums, checked while a local input is read.

v3 publishes `<lang>.md5` (over the compressed `.jsonl.zst`) and `<lang>/.<bin>_<n>.jsonl.md5` (over the
decoded lines); a name ending in `.zst` or `.jsonl` says which bytes a line covers. Without a checksum
file nothing changes. The hashes come from the chunks the reader reads anyway: about 6% of a partition
task's CPU for the compressed file, 25% for the decoded lines.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from shard_pipeline.input.failures import CorruptShard
from shard_pipeline.input.fetch import is_url

COMPRESSED = "compressed"  # the .jsonl.zst file's bytes
DECODED = "decoded"  # the .jsonl lines the zstd stream decodes to
_LINE = re.compile(r"^([0-9a-fA-F]{32})(?:\s+\*?(.+?))?\s*$")


@dataclass(frozen=True)
class ReleaseChecksum:
    """One published MD5 that applies to an input: over which bytes, and from which file."""

    covers: str  # COMPRESSED or DECODED
    expected: str  # lowercase hex
    source: str  # the checksum file it was read from


class ChecksumMismatch(CorruptShard):
    """A local input whose MD5 is not the one its release published: the copy is damaged or another file."""

    def __init__(self, location: str, line: int, checksum: ReleaseChecksum, got: str) -> None:
        super().__init__(location, line, "checksum_mismatch",
                         f"MD5 of the {checksum.covers} bytes is {got}, {checksum.source} says {checksum.expected}",
                         between=True)
        self.checksum = checksum
        self.expected = checksum.expected
        self.got = got


def _entries(path: str) -> list[tuple[str, str | None]]:
    """(hex, named file or None) for each md5sum line of ``path``, the whole file; [] when it is absent or
    unreadable. A byte-order mark and CRLF line ends are an editor's, not the release's."""
    found = []
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as fh:
            for raw in fh:
                if m := _LINE.match(raw.strip()):
                    found.append((m.group(1).lower(), m.group(2)))
    except OSError:
        return []
    return found


def _names_this(named: str, folder: str, names: tuple[str, ...]) -> bool:
    """A line's file is this input: its name is one of ``names``, and a folder it names is the input's own
    (a `<lang>.md5` of another language's shards, or a line for `fra_Latn/10_1.jsonl.zst`, is not this one)."""
    head, base = os.path.split(os.path.normpath(named.replace("\\", "/")))
    return base in names and (head in ("", ".") or os.path.basename(head) == os.path.basename(folder))


def _covers(named: str | None, default: str) -> str:
    if named is None or named == "-":
        return default
    return COMPRESSED if named.endswith(".zst") else DECODED if named.endswith(".jsonl") else default


def release_checksums(location: str) -> tuple[ReleaseChecksum, ...]:
    """The published checksums found beside a local input (none for a URL or without checksum files). With
    both, the one over the compressed bytes alone: a quarter of the bytes to hash, and a copy whose decoded
    lines differ differs there too."""
    if is_url(location):
        return ()
    folder, name = os.path.split(os.path.abspath(location))
    stem = name[:-len(".zst")] if name.endswith(".zst") else name
    found = []
    own = os.path.join(folder, f".{stem}.md5")
    for hexdigest, named in _entries(own):
        if named is None or named == "-" or _names_this(named, folder, (stem, name)):
            found.append(ReleaseChecksum(_covers(named, DECODED), hexdigest, own))
            break
    lang = folder + ".md5"
    for hexdigest, named in _entries(lang):
        if named is not None and _names_this(named, folder, (name, stem)):
            found.append(ReleaseChecksum(_covers(named, COMPRESSED), hexdigest, lang))
            break
    return tuple([c for c in found if c.covers == COMPRESSED] or found)


class StreamHashes:
    """MD5s of an input's compressed and decoded chunks as the reader passes them on, then the check."""

    def __init__(self, location: str, checksums: tuple[ReleaseChecksum, ...]) -> None:
        self.location = location
        self.checksums = checksums
        self.md5 = {c.covers: hashlib.md5() for c in checksums}

    def tap(self, covers: str, chunks: Iterator[bytes]) -> Iterator[bytes]:
        """``chunks`` unchanged, hashed on the way when a checksum covers those bytes."""
        md5 = self.md5.get(covers)
        if md5 is None:
            return chunks
        return _tapped(md5, chunks)

    def check(self, lines: int) -> None:
        """Raise :class:`ChecksumMismatch` for the first checksum the read bytes do not match."""
        for checksum in self.checksums:
            got = self.md5[checksum.covers].hexdigest()
            if got != checksum.expected:
                raise ChecksumMismatch(self.location, lines, checksum, got)


def _tapped(md5, chunks: Iterator[bytes]) -> Iterator[bytes]:  # type: ignore[no-untyped-def]
    update = md5.update
    try:
        for chunk in chunks:
            update(chunk)
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def stream_hashes(location: str) -> StreamHashes | None:
    """The hashes to take while reading ``location``; None when no release checksum applies to it."""
    checksums = release_checksums(location)
    return StreamHashes(location, checksums) if checksums else None
