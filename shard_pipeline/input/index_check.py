"""Inputs the counts index knows as larger: refused before anything is queued, unless the release changed.

HPLT releases are immutable, so a file known with more bytes or documents is a download cut short, which
at a frame boundary still reads as a valid stream. `--release-changed` says the smaller file is right.
Checked at submit and --dry-run, at a resume and by the plan (run/short_inputs.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from shard_pipeline.errors import UserError
from shard_pipeline.input.corpus import SUFFIX
from shard_pipeline.input.counts_index import RELEASE_CHANGED, CountRow, IndexRows

SHOWN = 10  # files a message lists by name


@dataclass(frozen=True)
class Shortfall:
    """One input with fewer bytes ("fewer-bytes") or documents ("fewer-documents") than its index row."""

    kind: str
    location: str
    row: CountRow
    file_bytes: int | None  # None: a URL input (no stat)
    file_docs: int | None  # None: not read to its end yet

    def describe(self) -> str:
        has = [f"{n} {what}" for n, what in ((self.file_bytes, "bytes"), (self.file_docs, "documents")) if n is not None]
        return (f"{self.location}: the index knows it as {self.row.bytes} bytes, {self.row.docs} documents; "
                f"the file has {', '.join(has)}")

    def to_json(self) -> dict:
        return {"kind": self.kind, "file": self.location, "index_bytes": self.row.bytes, "index_docs": self.row.docs,
                "file_bytes": self.file_bytes, "file_docs": self.file_docs}


def shortfalls(rows: dict[str, CountRow], inputs: Sequence, docs_now: dict[str, int] | None = None) -> list[Shortfall]:
    """The inputs (InputShard or InputRef: name, location, size) whose index row knows them as larger, by bytes
    or, for those read to their end (`docs_now`: documents by input name) and of the row's size, by documents."""
    out = []
    for inp in inputs:
        row = rows.get(inp.name + SUFFIX)
        if row is None:
            continue
        docs = (docs_now or {}).get(inp.name)
        if inp.size is not None and row.bytes > inp.size:
            out.append(Shortfall("fewer-bytes", inp.location, row, inp.size, docs))
        elif docs is not None and docs < row.docs and (inp.size is None or inp.size == row.bytes):
            # a larger file is not a cut one: its row counted an earlier state of it (the run counts it anew)
            out.append(Shortfall("fewer-documents", inp.location, row, inp.size, docs))
    return out


class InputShorterThanIndex(UserError):
    """The refusal: the short inputs, the index file that knows them as larger, and the way on."""

    kind = "input-shorter-than-index"

    def __init__(self, short: Sequence[Shortfall], index_file: Path, next_step: str) -> None:
        self.shortfalls = tuple(short)
        self.index_file = index_file
        self.next_step = next_step
        super().__init__(self.message())

    def message(self) -> str:
        n = len(self.shortfalls)
        listed = "; ".join(s.describe() for s in self.shortfalls[:SHOWN])
        more = f"; and {n - SHOWN} more" if n > SHOWN else ""
        return (f"{'an input is' if n == 1 else f'{n} inputs are'} smaller than the counts index {self.index_file} "
                f"knows {'it' if n == 1 else 'them'} (a download cut short; cut between zstd frames it still reads "
                f"as a whole file, without the documents after the cut): {listed}{more}; {self.next_step}")


def fetch_again(n: int) -> str:
    """The first way on: a download script that skips files already there keeps a cut one."""
    them = "it" if n == 1 else "them"
    return f"delete {them} and fetch {them} again (a download that skips existing files keeps a cut one)"


def submit_step(n: int) -> str:
    """The way on when a new run (or --dry-run) is refused."""
    them = "it" if n == 1 else "them"
    return (f"{fetch_again(n)}, then submit again; if the release really changed {them}, submit with "
            f"{RELEASE_CHANGED} (finalize then replaces the index's rows with this run's counts)")


def refuse_shortfalls(index: IndexRows | None, inputs: Sequence, docs_now: dict[str, int], accept: bool,
                      next_step: Callable[[int], str]) -> list[Shortfall]:
    """Raise InputShorterThanIndex for the `shortfalls` unless `accept` (--release-changed); returns them."""
    short = shortfalls(index.rows, inputs, docs_now) if index is not None else []
    if short and not accept:
        raise InputShorterThanIndex(short, index.path, next_step(len(short)))
    return short
