"""Sizes as people read them."""
from __future__ import annotations


def human_bytes(n: float) -> str:
    """Decimal units (1 KB = 1000 B), as `du --si` and storage quotas print them."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return str(n)
