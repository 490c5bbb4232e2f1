"""The shared counts index: exact documents per input shard.

Same layout as the HPLT sampler's, so one index serves both tools:
``<root>/<corpus>/<subset>/<lang>.tsv`` (e.g. ``v4/clean/eng_Latn.tsv``,
``v3/sorted/fin_Latn.tsv``) with the header
``shard bytes mtime docs method counted``. A local shard's row is trusted
only while its size and mtime still match; URL shards have no stat and are
trusted by name, as the sampler does. Writers merge under a file lock and
replace the file atomically, so concurrent runs and users never lose rows.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from shard_pipeline.files import shared_mode, write_bytes_atomic
from shard_pipeline.input.corpus import SUFFIX, InputShard

HEADER = ("shard", "bytes", "mtime", "docs", "method", "counted")
HEADER_LINE = "\t".join(HEADER)
LOCK_TIMEOUT = 600.0  # seconds; a stuck writer should fail a job, not hang it forever
_DIGITS_RE = re.compile(r"(\d+)")


@dataclass(frozen=True)
class CountRow:
    """One shard's exact document count and the file state it was counted from."""

    shard: str  # file name as in the directory, e.g. "8_30.ia.jsonl.zst"
    bytes: int
    mtime: int
    docs: int
    method: str  # how it was counted, e.g. "hplt-shard-read"
    counted: str  # ISO 8601 UTC date-time, e.g. "2026-10-15T12:00:00Z"

    def to_line(self) -> str:
        for name in ("shard", "method", "counted"):
            value = getattr(self, name)
            if not value or any(c in value for c in "\t\r\n"):
                raise ValueError(f"counts index {name} {value!r} must be non-empty without tabs or newlines")
        if self.bytes < 0 or self.docs < 0:
            raise ValueError(f"counts index row for {self.shard}: negative bytes or docs")
        return "\t".join((self.shard, str(self.bytes), str(self.mtime), str(self.docs), self.method, self.counted))


def index_path(root: Path, corpus: str, subset: str, lang: str) -> Path:
    """``<root>/<corpus>/<subset>/<lang>.tsv``; corpus is the sampler's ``v3``/``v4``."""
    for part in (corpus, subset, lang):
        if not part or "/" in part or part.startswith("."):
            raise ValueError(f"bad counts index path component {part!r}")
    return Path(root) / corpus / subset / f"{lang}.tsv"


def _parse_row(line: str) -> CountRow | None:
    """A row, or None when it is not one of ours (kept verbatim by writers, ignored by readers)."""
    fields = line.split("\t")
    if len(fields) != len(HEADER):
        return None
    shard, size, mtime, docs, method, counted = fields
    try:
        return CountRow(shard, int(size), int(mtime), int(docs), method, counted)
    except ValueError:
        return None


def _read(path: Path) -> list[str]:
    """Data lines of an index file ([] when absent); a foreign header is an error, not a miss."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # no index there (yet): nothing known
        return []
    lines = text.splitlines()
    if not lines:
        return []
    if lines[0] != HEADER_LINE:
        raise ValueError(f"{path}: header is {lines[0]!r}, expected {HEADER_LINE!r}")
    return [line for line in lines[1:] if line.strip()]


def read_rows(root: Path, corpus: str, subset: str, lang: str) -> dict[str, CountRow]:
    """The rows of one index file by shard file name (a later row for the same shard wins); {} when there
    is none. Malformed rows are ignored, which only means a recount."""
    rows: dict[str, CountRow] = {}
    for line in _read(index_path(root, corpus, subset, lang)):
        row = _parse_row(line)
        if row is not None:
            rows[row.shard] = row
    return rows


def lookup(rows: dict[str, CountRow], shards: Sequence[InputShard]) -> dict[str, int]:
    """Known exact counts: ``InputShard.name`` -> docs, for shards the index still describes.

    A local shard's row counts only while its bytes and mtime equal the
    shard's current stat (a changed file is counted again). URL shards
    (size and mtime None) are trusted by file name.
    """
    known: dict[str, int] = {}
    for shard in shards:
        row = rows.get(shard.name + SUFFIX)
        if row is None:
            continue
        if shard.size is None and shard.mtime is None:
            known[shard.name] = row.docs
        elif row.bytes == shard.size and row.mtime == shard.mtime:
            known[shard.name] = row.docs
    return known


@dataclass(frozen=True)
class Disagreement:
    """An index row whose size or mtime differs from the file it names: HPLT releases are
    immutable, so this means the file was replaced or the index is wrong; never passed over in silence."""

    shard: InputShard
    row: CountRow
    docs_now: int | None  # the file's document count, when already known (a head sample read it whole)

    def describe(self) -> str:
        now = f"{self.docs_now} documents" if self.docs_now is not None else "documents not counted yet"
        return (f"{self.shard.location}: the counts index says {self.row.bytes} bytes, mtime {self.row.mtime}, "
                f"{self.row.docs} documents; the file has {self.shard.size} bytes, mtime {self.shard.mtime}, {now}")

    def to_json(self) -> dict:
        return {"file": self.shard.location, "index_bytes": self.row.bytes, "file_bytes": self.shard.size,
                "index_mtime": self.row.mtime, "file_mtime": self.shard.mtime, "index_docs": self.row.docs,
                "file_docs": self.docs_now}


def disagreements(rows: dict[str, CountRow], shards: Sequence[InputShard],
                  docs_now: dict[str, int] | None = None) -> list[Disagreement]:
    """Local shards whose index row records another size or mtime than the file has now."""
    out = []
    for shard in shards:
        row = rows.get(shard.name + SUFFIX)
        if row is None or shard.size is None or shard.mtime is None:
            continue
        if row.bytes != shard.size or row.mtime != shard.mtime:
            out.append(Disagreement(shard, row, (docs_now or {}).get(shard.name)))
    return out


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS_RE.split(name))


def _file_mode(path: Path) -> int:
    """Keep an existing file's mode; new files get 0666 minus the umask (the index is shared)."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return shared_mode()


def make_root(root: Path) -> None:
    """Make the index folder itself, never its parents: a conf naming /projappl/<a project you are not in>/...
    or a mistyped path ends in an error here, not in a tree built where the run has no business."""
    if root.is_dir():
        return
    if not root.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, f"its parent folder {root.parent} does not exist "
                                "(a run makes only the index folder itself)", str(root))
    root.mkdir(exist_ok=True)


def record(root: Path, corpus: str, subset: str, lang: str, rows: Sequence[CountRow]) -> list[str]:
    """Merge rows into the index: same-shard rows are replaced, all others kept.

    Callers pass rows only from full reads. The merge runs under
    ``<file>.lock``; the new file is written next to the old one, fsynced and
    renamed over it, so a reader sees the old or the new file, never half.
    Returns the replaced rows that described another size, mtime or document count (said, never silent:
    a count that was wrong for the same file is worth a warning too).
    The lock wait is bounded: a lock that cannot be had ends in an OSError naming it.
    """
    from filelock import Timeout

    if not rows:
        return []
    path = index_path(root, corpus, subset, lang)
    make_root(Path(root))
    path.parent.mkdir(parents=True, exist_ok=True)
    new_lines = {row.shard: row.to_line() for row in rows}
    lock_file = str(path) + ".lock"
    try:
        os.close(os.open(lock_file, os.O_CREAT | os.O_RDWR, 0o666))  # an error now, not a wait until the timeout
    except OSError as exc:
        raise OSError(exc.errno, f"cannot lock the counts index: {exc.strerror}", lock_file) from None
    lock = FileLock(lock_file, timeout=LOCK_TIMEOUT, mode=0o666)
    try:
        lock.acquire()
    except Timeout:
        raise TimeoutError(f"could not lock the counts index {lock_file} within {LOCK_TIMEOUT:.0f} s "
                           "(another writer holds it)") from None
    replaced: list[str] = []
    by_shard = {r.shard: r for r in rows}
    try:
        merged: dict[str, str] = {}
        foreign: list[str] = []
        for line in _read(path):
            row = _parse_row(line)
            if row is None:
                foreign.append(line)  # not ours to judge: keep it verbatim
            else:
                merged[row.shard] = line
                new = by_shard.get(row.shard)
                if new is not None and (new.bytes, new.mtime, new.docs) != (row.bytes, row.mtime, row.docs):
                    replaced.append(f"{row.shard}: {row.bytes} bytes, mtime {row.mtime}, {row.docs} documents -> "
                                    f"{new.bytes} bytes, mtime {new.mtime}, {new.docs} documents")
        merged.update(new_lines)
        body = HEADER_LINE + "\n"
        body += "".join(merged[name] + "\n" for name in sorted(merged, key=lambda n: (_natural(n), n)))
        body += "".join(line + "\n" for line in foreign)
        write_bytes_atomic(path, body.encode("utf-8"), _file_mode(path))
    finally:
        lock.release()
    return replaced
