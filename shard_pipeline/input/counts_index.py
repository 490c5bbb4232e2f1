"""The shared counts index: exact documents per input shard, in the HPLT sampler's layout so one index serves both.

``<root>/<corpus>/<subset>/<lang>.tsv``, header ``shard bytes mtime docs method counted``. A local shard's
row is trusted only while its size and mtime match; URL shards by name, as the sampler does. Writers merge
under a file lock and replace the file atomically; an impossible row is named and ignored, and a row is
never replaced by a smaller one unless the release changed.
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
from shard_pipeline.input.corpus import SUFFIX, InputShard, natural_order

HEADER = ("shard", "bytes", "mtime", "docs", "method", "counted")
HEADER_LINE = "\t".join(HEADER)
RELEASE_CHANGED = "--release-changed"  # the option that says a smaller file is right (input/index_check.py)
LOCK_TIMEOUT = 600.0  # seconds; a stuck writer should fail a job, not hang it forever


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
        why = impossible_reason(self.bytes, self.docs)
        if why is not None:
            raise ValueError(f"counts index row for {self.shard}: {why}")
        return "\t".join((self.shard, str(self.bytes), str(self.mtime), str(self.docs), self.method, self.counted))

    def state(self) -> str:
        return f"{self.bytes} bytes, mtime {self.mtime}, {self.docs} documents"

    def larger_than(self, new: "CountRow") -> bool:
        """This row knows the file as larger (bytes) or with more documents than `new` does."""
        return self.bytes > new.bytes or self.docs > new.docs


@dataclass(frozen=True)
class ImpossibleRow:
    """A row whose numbers no file can have: ignored (the run counts that file itself), named, and replaced by the
    next full read. Kept verbatim by writers until then, so no one's row is lost in silence."""

    shard: str
    line: str  # as it stands in the index file
    reason: str

    def describe(self, path: Path) -> str:
        return (f"the counts index file {path}: the row of {self.shard} cannot be true ({self.reason}): "
                f"{self.line!r}; ignored: this run counts that file itself")

    def to_json(self) -> dict:
        return {"shard": self.shard, "row": self.line, "reason": self.reason}


# An HPLT document's id is 32 hex digits of a 128-bit hash: no compressor stores 128 random bits in fewer
# than 16 bytes (zstd -19 of such ids with one-byte texts: 16.5 per document; real shards hold about 1,700,
# synthetic HPLT-shaped ones at least 140). The floor is half that bound, a margin for shorter ids.
MIN_BYTES_PER_DOC = 8


def _below_floor(size: int, docs: int) -> bool:
    return size >= 0 and docs > 0 and size < docs * MIN_BYTES_PER_DOC


def impossible_reason(size: int, docs: int) -> str | None:
    """Why a row's size and count can describe no HPLT `.jsonl.zst` file, or None: negative numbers, or
    fewer compressed bytes per document than an HPLT id alone needs (MIN_BYTES_PER_DOC)."""
    if size < 0 or docs < 0:
        return f"a negative {'size' if size < 0 else 'document count'}"
    if size == 0 and docs > 0:
        return f"{docs} documents in a file of 0 bytes"
    if _below_floor(size, docs):
        return (f"{docs} documents in {size} bytes, {size / docs:.2g} bytes per document (an HPLT document "
                f"needs at least {MIN_BYTES_PER_DOC})")
    return None


def index_path(root: Path, corpus: str, subset: str, lang: str) -> Path:
    """``<root>/<corpus>/<subset>/<lang>.tsv``; corpus is the sampler's ``v3``/``v4``."""
    for part in (corpus, subset, lang):
        if not part or "/" in part or part.startswith("."):
            raise ValueError(f"bad counts index path component {part!r}")
    return Path(root) / corpus / subset / f"{lang}.tsv"


def _whole_number(value: str) -> int | None:
    return int(value) if re.fullmatch(r"-?[0-9]+", value) else None


def _parse_row(line: str) -> CountRow | ImpossibleRow | None:
    """A row, an impossible one (named by readers, kept verbatim by writers), or None when the line is
    not a row of this layout (another field count: kept verbatim by writers, ignored by readers)."""
    fields = line.split("\t")
    if len(fields) != len(HEADER):
        return None
    shard, size, mtime, docs, method, counted = fields
    numbers = {"size": _whole_number(size), "mtime": _whole_number(mtime), "document count": _whole_number(docs)}
    bad = [f"{name} {value!r} is not a whole number" for (name, n), value in zip(numbers.items(), (size, mtime, docs))
           if n is None]
    why = "; ".join(bad) or impossible_reason(numbers["size"], numbers["document count"])
    if why:
        return ImpossibleRow(shard, line, why)
    return CountRow(shard, numbers["size"], numbers["mtime"], numbers["document count"], method, counted)


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


@dataclass(frozen=True)
class IndexRows:
    """One index file as read: its rows, and the rows that cannot be true, by shard file name."""

    path: Path
    rows: dict[str, CountRow]
    impossible: dict[str, ImpossibleRow]

    def impossible_of(self, shards: Sequence[InputShard]) -> list[ImpossibleRow]:
        """The impossible rows of these shards: the ones a run over them names."""
        return [self.impossible[s.name + SUFFIX] for s in shards if s.name + SUFFIX in self.impossible]


def read_index(root: Path, corpus: str, subset: str, lang: str) -> IndexRows:
    """The rows of one index file by shard file name (a later row for the same shard wins, as writers keep
    it); empty when there is none. Lines of another layout are ignored, which only means a recount."""
    path = index_path(root, corpus, subset, lang)
    last: dict[str, CountRow | ImpossibleRow] = {}
    for line in _read(path):
        row = _parse_row(line)
        if row is not None:
            last[row.shard] = row
    return IndexRows(path, {k: r for k, r in last.items() if isinstance(r, CountRow)},
                     {k: r for k, r in last.items() if isinstance(r, ImpossibleRow)})


def lookup(rows: dict[str, CountRow], shards: Sequence[InputShard]) -> dict[str, int]:
    """Known exact counts: ``InputShard.name`` -> docs, for shards the index still describes (a local shard
    while its bytes and mtime match, a URL shard by name)."""
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


@dataclass(frozen=True)
class Replacement:
    """An index row a full read met: replaced by the read's row, or kept because it knows the file as larger."""

    old: CountRow | ImpossibleRow
    new: CountRow

    @property
    def smaller(self) -> bool:
        """The read's row knows the file as smaller (bytes or documents): a cut file, unless the release changed."""
        return isinstance(self.old, CountRow) and self.old.larger_than(self.new)

    def describe(self) -> str:
        old = self.old.state() if isinstance(self.old, CountRow) else f"a row that cannot be true ({self.old.reason})"
        return f"{self.new.shard}: {old} -> {self.new.state()}"


@dataclass(frozen=True)
class Merge:
    """What a write did to rows already there: `replaced` (another size, mtime or count, said, never silent:
    a count that was wrong for the same file is worth a warning too), `kept` (smaller rows not written)."""

    replaced: tuple[Replacement, ...] = ()
    kept: tuple[Replacement, ...] = ()

    def warnings(self) -> list[str]:
        """What --status and the done message repeat: rows replaced by smaller ones (the run was given
        --release-changed), rows kept because they know a file as larger (written while the run ran)."""
        smaller = [f"the counts index row of {c.new.shard} was replaced by a smaller one ({RELEASE_CHANGED}): "
                   f"{c.old.state()} -> {c.new.state()}" for c in self.replaced if c.smaller]
        kept = [f"the counts index row of {c.new.shard} was kept ({c.old.state()}): it knows the file as larger than "
                f"this run read it ({c.new.state()}; a row written while this run ran?); if the release changed, a "
                f"run with {RELEASE_CHANGED} replaces it" for c in self.kept]
        return smaller + kept


def merge(lines: Sequence[str], rows: Sequence[CountRow], accept_smaller: bool) -> tuple[list[str], Merge]:
    """The index's data lines with `rows` merged in, in natural shard order, lines of another layout last. A
    row never replaces a larger one unless `accept_smaller`: a file cut short must not erase the evidence."""
    last: dict[str, CountRow | ImpossibleRow] = {}
    kept_lines: dict[str, str] = {}
    foreign: list[str] = []
    for line in lines:
        row = _parse_row(line)
        if row is None:
            foreign.append(line)  # not ours to judge: keep it verbatim
        else:
            last[row.shard], kept_lines[row.shard] = row, line
    replaced, kept = [], []
    for new in rows:
        old = last.get(new.shard)
        change = Replacement(old, new) if old is not None else None
        if change is not None and change.smaller and not accept_smaller:
            kept.append(change)
            continue
        if change is not None and (isinstance(old, ImpossibleRow) or
                                   (old.bytes, old.mtime, old.docs) != (new.bytes, new.mtime, new.docs)):
            replaced.append(change)
        kept_lines[new.shard] = new.to_line()
    ordered = [kept_lines[name] for name in sorted(kept_lines, key=lambda n: (natural_order(n), n))]
    return ordered + foreign, Merge(tuple(replaced), tuple(kept))


def record(root: Path, corpus: str, subset: str, lang: str, rows: Sequence[CountRow],
           accept_smaller: bool = False) -> Merge:
    """Merge rows from full reads into the index (`merge`) under ``<file>.lock``, replaced atomically: a
    reader sees the old or the new file. A lock that cannot be had in time is an OSError naming it."""
    from filelock import Timeout

    # a read of a file denser than any HPLT shard (not HPLT-shaped ids) is true, but the index is HPLT's:
    # left out, so readers never name it impossible
    rows = [r for r in rows if not _below_floor(r.bytes, r.docs)]
    if not rows:
        return Merge()
    for row in rows:
        row.to_line()  # a bad row is refused before the lock is taken
    path = index_path(root, corpus, subset, lang)
    make_root(Path(root))
    path.parent.mkdir(parents=True, exist_ok=True)
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
    try:
        lines, done = merge(_read(path), rows, accept_smaller)
        body = HEADER_LINE + "\n" + "".join(line + "\n" for line in lines)
        write_bytes_atomic(path, body.encode("utf-8"), _file_mode(path))
    finally:
        lock.release()
    return done
