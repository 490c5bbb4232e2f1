"""Sizes and times as people read them and as Slurm takes them."""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass


_DECIMAL = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def human_bytes(n: float) -> str:
    """Decimal units (1 kB = 1000 B) with two decimals, as `du --si` and storage quotas count. The dataset
    card prints it, so it is part of the output bytes: TB stays the largest unit."""
    for unit, size in _DECIMAL:
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


_MEM_UNITS = {"": 1 << 20, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class BadMemorySize(ValueError):
    """A memory size that is not one Slurm takes."""


# The least one unit of any stage runs in: its interpreter, pyarrow and numpy, and the smallest spill
# budget. Units peak at 140-170 MB on the smallest inputs (bench/RESULTS.md); below this a task is
# killed for memory whatever the data, so such a request is refused before anything is queued.
UNIT_MEMORY_FLOOR = 256 << 20


class BadWallTime(ValueError):
    """A time limit that is not one Slurm takes."""


@dataclass(frozen=True)
class Memory:
    """A Slurm memory size, the one way this code reads, compares, scales and prints one.

    Slurm's meaning: a bare number is megabytes (MiB), K/M/G/T binary multiples (4G = 4096M); no
    `B` suffix (sbatch refuses `4GB`). The text keeps the unit it was given in, so what sbatch
    gets is what the user wrote, scaled."""

    count: int
    unit: str  # "", K, M, G or T

    @classmethod
    def parse(cls, value: str) -> "Memory":
        m = re.fullmatch(r"([1-9][0-9]*)([KMGT]?)", str(value).strip())
        if not m:
            raise BadMemorySize(f"{str(value)[:40]!r} is not a Slurm memory size: a positive number of megabytes, "
                                "or one with a K, M, G or T suffix (e.g. 4000, 500M, 4G)")
        return cls(int(m.group(1)), m.group(2))

    @property
    def bytes(self) -> int:
        return self.count * _MEM_UNITS[self.unit]

    def times(self, k: int) -> "Memory":
        """k of this ('4G' x 8 = '32G'): an array task running k units asks for k units' memory."""
        return Memory(self.count * k, self.unit)

    def share(self, k: int) -> "Memory":
        """One k-th, rounded up ('32G' / 8 = '4G', '5G' / 2 = '2560M'): one unit's memory."""
        if k <= 1 or self.count % k == 0:
            return Memory(self.count // max(1, k), self.unit)
        return Memory(-(-self.bytes // k // (1 << 20)), "M")

    def __str__(self) -> str:
        return f"{self.count}{self.unit}"


@dataclass(frozen=True)
class WallTime:
    """A Slurm time limit, the one way this code reads, compares and prints one.

    Slurm's forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; minutes alone may exceed
    59, a field after the first may not. Printed as HH:MM:SS (hours may exceed 24)."""

    seconds: int

    _FORMS = (
        re.compile(r"(?P<m>\d+)"),
        re.compile(r"(?P<m>\d+):(?P<s>\d{1,2})"),
        re.compile(r"(?P<h>\d+):(?P<m>\d{1,2}):(?P<s>\d{1,2})"),
        re.compile(r"(?P<d>\d+)-(?P<h>\d{1,2})"),
        re.compile(r"(?P<d>\d+)-(?P<h>\d{1,2}):(?P<m>\d{1,2})"),
        re.compile(r"(?P<d>\d+)-(?P<h>\d{1,2}):(?P<m>\d{1,2}):(?P<s>\d{1,2})"),
    )

    @classmethod
    def parse(cls, value: str) -> "WallTime":
        text = str(value).strip()
        for form in cls._FORMS:
            m = form.fullmatch(text)
            if m is None:
                continue
            g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
            leading = "d" if "d" in g else ("h" if "h" in g else "m")
            if any(k != leading and v >= {"h": 24, "m": 60, "s": 60}[k] for k, v in g.items()):
                break
            return cls(g.get("d", 0) * 86400 + g.get("h", 0) * 3600 + g.get("m", 0) * 60 + g.get("s", 0))
        raise BadWallTime(f"{str(value)[:40]!r} is not a Slurm time: minutes, HH:MM:SS or D-HH:MM:SS")

    @classmethod
    def from_minutes(cls, minutes: float, at_least: int = 0) -> "WallTime":
        """Whole minutes, rounded up, never under `at_least`."""
        return cls(60 * max(at_least, int(math.ceil(minutes))))

    @property
    def minutes(self) -> float:
        return self.seconds / 60

    def times(self, k: int) -> "WallTime":
        return WallTime(self.seconds * k)

    def __str__(self) -> str:
        return f"{self.seconds // 3600:02d}:{self.seconds % 3600 // 60:02d}:{self.seconds % 60:02d}"


def parse_mem(value: str) -> int:
    """Bytes of a Slurm memory size (Memory.parse)."""
    return Memory.parse(value).bytes


def scale_mem(mem: str, k: int) -> str:
    """A Slurm --mem value times k (Memory.times)."""
    return str(Memory.parse(mem).times(k))


def share_of_mem(mem: str, k: int) -> str:
    """One k-th of a Slurm --mem value, rounded up (Memory.share)."""
    return str(Memory.parse(mem).share(k))


def slurm_minutes(t: str) -> float:
    """A Slurm time limit in minutes, to compare two limits (WallTime.parse)."""
    return WallTime.parse(t).minutes


# Seconds before the time limit at which Slurm sends USR1 to a task's batch shell, which requeues
# it (slurm_job.sh); the task then resumes from its last checkpoint.
REQUEUE_SIGNAL_SECONDS = 300
# The shortest --time a task may get: twice the signal's lead, so at least half of every attempt
# is work. A limit at or under the lead would be signalled at start and requeue forever.
MIN_TIME_MINUTES = 2 * REQUEUE_SIGNAL_SECONDS // 60


def too_short_for_requeue(t: str) -> str | None:
    """Why a valid Slurm time limit is too short for the requeue signal, or None when it is long enough."""
    minutes = WallTime.parse(t).minutes
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
