#!/usr/bin/env python3
"""What fresh memory costs on this machine, and a run without transparent huge pages.

    .venv/bin/python bench/cold_pages.py touch [--mib 1024] [--sleep 6] [--repeat 3]
    .venv/bin/python bench/cold_pages.py no-thp -- ./hplt-shard eng_Latn ...

`touch` maps MIB of anonymous memory, writes one byte per 4 KiB page, unmaps it and does it again,
first right away and then after SLEEP seconds. On a VM whose balloon reports free pages to the
host (virtio-balloon free page reporting: `/sys/module/page_reporting`), memory freed for ~2 s is
handed back, and the next touch makes the host fault it in again: bench/RESULTS.md section 5
measured that here as ~1 s per GiB, which is why a run after another program's takes longer than
the same run right after itself. It prints the kernel's reporting order too (free blocks of at
least 2^order pages are reported): smaller blocks stay with the guest.

`no-thp` runs a command with PR_SET_THP_DISABLE (no transparent huge pages for it and every
process it starts): how RESULTS.md section 4 measured a run without them.
"""
from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import sys
import time
from pathlib import Path

PR_SET_THP_DISABLE = 41
REPORTING_ORDER = Path("/sys/module/page_reporting/parameters/page_reporting_order")


def touch(nbytes: int) -> float:
    """Seconds to map `nbytes` of fresh anonymous memory and write a byte in each of its pages."""
    m = mmap.mmap(-1, nbytes)
    t = time.perf_counter()
    for off in range(0, nbytes, mmap.PAGESIZE):
        m[off] = 1
    took = time.perf_counter() - t
    m.close()
    return took


def cmd_touch(a: argparse.Namespace) -> int:
    order = REPORTING_ORDER.read_text().strip() if REPORTING_ORDER.exists() else "none (no page_reporting module)"
    print(f"free page reporting order: {order}; {a.mib} MiB, one write per {mmap.PAGESIZE} B page")
    n = a.mib << 20
    for _ in range(a.repeat):
        touch(n)
        hot = touch(n)
        time.sleep(a.sleep)
        cold = touch(n)
        print(f"  right after freeing it: {hot / a.mib * 1024:.2f} s/GiB   after {a.sleep:g} s: {cold / a.mib * 1024:.2f} s/GiB")
    return 0


def cmd_no_thp(a: argparse.Namespace) -> int:
    argv = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not argv:
        print("cold_pages.py no-thp: give the command after --", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        print(f"cold_pages.py: prctl(PR_SET_THP_DISABLE): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"cold_pages.py: {argv[0]}: {e.strerror}", file=sys.stderr)
        return 126 if isinstance(e, PermissionError) else 127


def at_least(kind: type, low: float) -> object:
    """An argparse type: a number of `kind`, `low` or more."""
    def parse(text: str) -> int | float:
        value = kind(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {low:g} or more, not {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names it in "invalid int value"
    return parse


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("touch", help="time writing to fresh memory, right after freeing it and after a pause")
    t.add_argument("--mib", type=at_least(int, 1), default=1024)
    t.add_argument("--sleep", type=at_least(float, 0), default=6.0)
    t.add_argument("--repeat", type=at_least(int, 1), default=3)
    n = sub.add_parser("no-thp", help="run a command without transparent huge pages")
    n.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    return cmd_touch(a) if a.what == "touch" else cmd_no_thp(a)


if __name__ == "__main__":
    sys.exit(main())
