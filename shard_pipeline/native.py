"""The compiled parts (setup.py), used only when built from the source beside them.

After a `git pull` that changed a `.c` file, an editable install's old module would be called with another
signature: each module records its source's sha256, and one that differs is not used (the Python path
runs, to the same bytes) until `pip install -e .` builds it again.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType
from typing import Any

PACKAGE = Path(__file__).resolve().parent


def compiled(built: ModuleType | None, name: str, source: str) -> Any | None:
    """`built`'s `name` when the module was built from `source` (relative to the package), else None (`built`
    None: an install without a C compiler)."""
    if built is None:
        return None
    try:
        current = hashlib.sha256((PACKAGE / source).read_bytes()).hexdigest()
    except OSError:  # an installed wheel ships no source: what was built is what there is
        return getattr(built, name)
    return getattr(built, name) if getattr(built, "SOURCE_SHA256", None) == current else None
