"""Which run holds an output folder: a small claim file beside OUT, taken under a file lock.

Slurm jobs of one run live in many processes over hours, so a process lock cannot express
"this run owns OUT": the claim is a file naming the run directory, released by finalize.
"""
from __future__ import annotations

from pathlib import Path

from filelock import FileLock

from shard_pipeline.errors import UsageError, UserError
from shard_pipeline.run.rundir import RunDir


class OutHeld(UserError):
    """Another unfinished run holds this OUT."""


def claim_path(out: Path) -> Path:
    return out.with_name(out.name + ".hplt-shard-claim")


def holder(out: Path) -> str | None:
    p = claim_path(out)
    return p.read_text().strip() if p.exists() else None


def claim(out: Path, rundir: Path) -> None:
    """Mark OUT as held by `rundir`, refusing one that another unfinished run holds."""
    p = claim_path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(p) + ".lock"):
        current = holder(out)
        if current and current != str(rundir) and not (Path(current) / "DONE").exists():
            raise OutHeld(f"{out} is held by run {current}; finish it with --resume {current}, or remove {p}")
        p.write_text(str(rundir) + "\n")


def release(out: Path, rundir: Path) -> None:
    """Drop the claim if `rundir` holds it (never another run's)."""
    p = claim_path(out)
    with FileLock(str(p) + ".lock"):
        if holder(out) == str(rundir):
            p.unlink()
    Path(str(p) + ".lock").unlink(missing_ok=True)


def run_lock(root: Path):
    """Held while this process runs or submits the run: a second resume of the same run is refused."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(RunDir(root).lock_file), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(f"{root} is being run or resumed by another hplt-shard process") from None
    return _Held(lock)


class _Held:
    def __init__(self, lock):
        self.lock = lock

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lock.release()
