"""A task's log: where it is, and the last error line a failed task leaves there for --status."""
from __future__ import annotations

from pathlib import Path


def last_error_line(log: Path) -> str:
    """The log's last `ERROR: Type: message` line (or, failing that, its last line)."""
    try:
        lines = [l for l in log.read_text(errors="replace").splitlines() if l.strip()]
    except FileNotFoundError:
        return "(no log)"
    errors = [l for l in lines if l.startswith("ERROR") or "Error" in l]
    return (errors or lines or ["(empty log)"])[-1]
