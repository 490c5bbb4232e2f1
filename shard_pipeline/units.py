"""Sizes and times as people read them and as Slurm takes them."""
from __future__ import annotations

import re
import time


_DECIMAL = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def human_bytes(n: float) -> str:
    """Decimal units (1 kB = 1000 B) with two decimals, as `du --si` and storage quotas count.

    The dataset card prints it, so it is part of the output bytes: TB stays the largest unit.
    """
    for unit, size in _DECIMAL:
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


_MEM_UNITS = {"": 1 << 20, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class BadMemorySize(ValueError):
    """A memory size that is not one Slurm takes."""


def parse_mem(value: str) -> int:
    """A Slurm memory size in bytes, with Slurm's meaning: a bare number is megabytes (MiB),
    K/M/G/T are binary multiples (4G = 4096M). The layout sizes buffers from the same number
    sbatch gets, so `--mem 4000` and `--mem 4000M` are one budget."""
    m = re.fullmatch(r"([1-9][0-9]*)([KMGT]?)", value.strip())
    if not m:
        raise BadMemorySize(f"{value[:40]!r} is not a Slurm memory size: a positive number of megabytes, "
                           "or one with a K, M, G or T suffix (e.g. 4000, 500M, 4G)")
    return int(m.group(1)) * _MEM_UNITS[m.group(2)]


def scale_mem(mem: str, k: int) -> str:
    """A Slurm --mem value times k ('4G' x 8 = '32G'): an array task running k units asks for k units' memory."""
    digits = mem.rstrip("KMGTkmgtBb")
    return f"{int(digits) * k}{mem[len(digits):]}"


def share_of_mem(mem: str, k: int) -> str:
    """One k-th of a Slurm --mem value, rounded up ('32G' / 8 = '4G', '5G' / 2 = '2560M'): a unit's memory."""
    digits = mem.rstrip("KMGTkmgtBb")
    if k <= 1 or int(digits) % k == 0:
        return f"{int(digits) // max(1, k)}{mem[len(digits):]}"
    return f"{-(-parse_mem(mem) // k // (1 << 20))}M"


def slurm_minutes(t: str) -> float:
    """A Slurm time limit ([D-]HH:MM:SS, MM:SS, D-HH, or minutes) in minutes, to compare two limits."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", t.strip())
    if not m:
        return 0.0
    d, a, b, c = (int(x) if x else 0 for x in m.groups())
    if m.group(1) is not None and m.group(3) is None:
        return d * 1440 + a * 60  # D-HH
    if m.group(4) is not None:
        return d * 1440 + a * 60 + b + c / 60
    if m.group(3) is not None:
        return d * 1440 + a * 60 + b if m.group(1) is not None else a + b / 60  # D-HH:MM, or MM:SS
    return a


# Seconds before the time limit at which Slurm sends USR1 to a task's batch shell, which requeues
# it (slurm_job.sh); the task then resumes from its last checkpoint.
REQUEUE_SIGNAL_SECONDS = 300
# The shortest --time a task may get: twice the signal's lead, so at least half of every attempt
# is work. A limit at or under the lead would be signalled at start and requeue forever.
MIN_TIME_MINUTES = 2 * REQUEUE_SIGNAL_SECONDS // 60


def too_short_for_requeue(t: str) -> str | None:
    """Why a valid Slurm time limit is too short for the requeue signal, or None when it is long enough."""
    minutes = slurm_minutes(t)
    if minutes >= MIN_TIME_MINUTES:
        return None
    return (f"{t!r} is too short: Slurm signals a task to checkpoint and requeue {REQUEUE_SIGNAL_SECONDS // 60} "
            f"minutes before its time limit, so a shorter limit requeues it without end; give at least "
            f"{MIN_TIME_MINUTES} minutes (--time {MIN_TIME_MINUTES // 60:02d}:{MIN_TIME_MINUTES % 60:02d}:00)")


def iso_time(epoch: float) -> str:
    """Local time to the millisecond, in the format of every log line's timestamp (2026-12-03T08:30:01.250)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}"


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """'1 shard', '2 shards', '1,000 shards': a count with its noun, for every message that counts."""
    return f"{n:,} {noun if n == 1 else plural_form or noun + 's'}"
