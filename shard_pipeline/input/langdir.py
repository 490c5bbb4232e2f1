"""Everything a language folder holds: the shards a run reads, and what it says about the rest.

A run reads only ``<lang>/<name>.jsonl.zst`` directly in the folder. Every other entry is named:

- *refused*: it looks like data that would not be read (``.JSONL.ZST``, ``.jsonl``, ``.jsonl.gz``, ...,
  or a subfolder of such files): reading 75 documents while 375 sit beside them is silent data loss;
- *silent*: HPLT's own side files (hplt-format.md sections 1.3, 2.1, 2.2) and checksum files, which sit
  beside every shard: a warning per language would teach users to ignore warnings;
- *warned*: anything else, in one warning line; the run goes on.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable

SUFFIX = ".jsonl.zst"
SHOWN = 5  # entries named in a message; the rest are counted

_COMPANION = re.compile(
    r"^(counts\.json"
    r"|\.counts\.json|\.filter\.json|\.duplicate\.ids|\.(domains|urls|signatures)\.zst"
    r"|\..+\.(counts\.json|filter\.json|jsonl\.md5|ids\.zst)"
    r"|.+\.(md5|sha1|sha256|sha512))$"
)
_DATA_MARKERS = (".jsonl", ".ndjson")
_DATA_SUFFIXES = (".zst", ".zstd", ".zstandard", ".gz", ".gzip", ".bz2", ".xz", ".lz4", ".lzma", ".br",
                  ".zip", ".tar", ".tgz", ".7z")


def is_companion(name: str) -> bool:
    """One of HPLT's documented side files, which a run leaves alone without a word."""
    return _COMPANION.match(name) is not None


def looks_like_data(name: str) -> bool:
    """A name that suggests JSON Lines or a compressed file, whatever its case."""
    low = name.lower()
    return any(m in low for m in _DATA_MARKERS) or low.endswith(_DATA_SUFFIXES)


@dataclass
class FolderScan:
    """A language folder sorted into the shards to read and everything else, by kind."""

    shards: dict[str, os.DirEntry] = field(default_factory=dict)  # name without SUFFIX -> entry
    broken: list[str] = field(default_factory=list)  # named like shards, not readable files (path and why)
    refused: list[str] = field(default_factory=list)  # look like data that would not be read
    strays: list[str] = field(default_factory=list)  # neither read nor known side files


def _data_below(path: str) -> tuple[int, str | None, str | None]:
    """(count, first such file relative to `path`, listing error) of data-like files anywhere below `path`."""
    count, first, error = 0, None, None

    def failed(exc: OSError) -> None:
        nonlocal error
        error = error or f"{exc.filename}: {exc.strerror or exc}"

    for top, dirs, files in os.walk(path, onerror=failed):
        dirs.sort()
        for name in sorted(files):
            if looks_like_data(name) or name.endswith(SUFFIX):
                count += 1
                first = first or os.path.relpath(os.path.join(top, name), path)
    return count, first, error


def _sort_entry(entry: os.DirEntry, scan: FolderScan, why_not_shard: Callable[[str], str | None]) -> None:
    name = entry.name
    hidden = name.startswith(".")
    if not hidden and name.endswith(SUFFIX):
        why = why_not_shard(entry.path)  # follows symlinks, as catalogue copies may use them
        if why:
            scan.broken.append(f"{entry.path} ({why})")
        else:
            scan.shards[name[: -len(SUFFIX)]] = entry
        return
    if is_companion(name):
        return
    try:
        is_dir = entry.is_dir()  # a link to a folder counts as a folder
    except OSError:
        is_dir = False
    if hidden:
        scan.strays.append(name + ("/" if is_dir else ""))
    elif is_dir:
        count, first, error = _data_below(entry.path)
        if error:
            scan.refused.append(f"{name}/ (cannot be listed: {error})")
        elif count:
            scan.refused.append(f"{name}/ ({count} data file{'s' if count > 1 else ''}, e.g. {first})")
        else:
            scan.strays.append(name + "/")
    elif looks_like_data(name):
        scan.refused.append(name)
    else:
        scan.strays.append(name)


def scan_folder(lang_dir: str, why_not_shard: Callable[[str], str | None]) -> FolderScan:
    """Sort every entry of `lang_dir` (OSError when it cannot be listed)."""
    scan = FolderScan()
    with os.scandir(lang_dir) as it:
        for entry in sorted(it, key=lambda e: e.name):
            _sort_entry(entry, scan, why_not_shard)
    return scan


def first_few(items: list[str]) -> str:
    """The first SHOWN items, then how many more."""
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def refusal(lang_dir: str, refused: list[str]) -> str:
    """The one message that stops a submit over entries that look like data but would not be read."""
    n = len(refused)
    return (f"{n} entr{'ies' if n > 1 else 'y'} in {lang_dir} look{'' if n > 1 else 's'} like corpus data but "
            f"would not be read (a run reads only <name>{SUFFIX} files directly in the language folder, "
            f"lower-case suffix): {first_few(refused)}. Rename them to <name>{SUFFIX} (zstd-compressed JSON Lines), "
            "move them out of the folder, or point --local-root at a copy holding only the shards to read; "
            "nothing was started")


def warning(lang_dir: str, strays: list[str]) -> str:
    """One line naming the entries a run leaves alone that are not HPLT side files."""
    n = len(strays)
    return (f"{lang_dir}: {n} entr{'ies are' if n > 1 else 'y is'} not read (neither <name>{SUFFIX} nor an "
            f"HPLT side file): {first_few(strays)}; they are left as they are")
