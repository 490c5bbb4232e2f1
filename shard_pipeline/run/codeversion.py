"""The code version every run-dir record carries: a sha256 of the package's own source.

Two checkouts of one commit, or an installed copy of it, have the same code version wherever they
are; a `git pull` or any edit of a source file changes it, committed or not. A record made by one
version is never read as done by another (run/records.py), because the two may read or write it
differently. Computed once per process (~100 files, under 1 MB): a task compares it with its run's
before it reads anything, and a unit forked by a group inherits its group's.
"""
from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from shard_pipeline.paths import PACKAGE_DIR

# The package's source: code, the C it compiles, its batch script, presets, schema and card template. Compiled
# extensions (built from the .c files) and __pycache__ are not source; hidden files (an editor's) are skipped.
SOURCE_SUFFIXES = (".py", ".c", ".sh", ".conf", ".json", ".md")


@cache
def code_version() -> str:
    """This process's code version: `source_version` of the package it runs."""
    return source_version(PACKAGE_DIR)


def source_version(package: Path) -> str:
    """sha256 over the sorted relative paths and bytes of the source files under `package`."""
    h = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if _is_source(p.relative_to(package).parts) and p.is_file()):
        data = path.read_bytes()
        rel = path.relative_to(package).as_posix().encode()
        h.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def _is_source(parts: tuple[str, ...]) -> bool:
    return (parts[-1].endswith(SOURCE_SUFFIXES) and "__pycache__" not in parts
            and not any(p.startswith(".") for p in parts))


def short(version: str) -> str:
    """The first 12 hex digits: how messages name a code version."""
    return version[:12]
