"""The code version every run-dir record carries: a sha256 of the package's own source, the same for every copy
of one commit and changed by any edit, committed or not. Computed once per process (~100 files, under 1 MB).
"""
from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from shard_pipeline.paths import PACKAGE_DIR

# The package's source: code, C, batch script, presets, schema, card template; not compiled or hidden files.
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
