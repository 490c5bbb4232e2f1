"""Which run holds an output folder: a claim file beside OUT (contract/beside.py), naming the run directory.

A run lives in many processes over hours, so no process lock can say "this run owns OUT": finalize releases
the claim. --publish, one process, holds a shared flock on OUT.hplt-shard-publish instead; both are taken under
the claim's lock, so a run never claims an OUT being published and a publish never starts on one a run holds.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path


from shard_pipeline.access import place_refusal
from shard_pipeline.contract.beside import (CLAIM_LOCK_SUFFIX, CLAIM_SUFFIX, PUBLISH_SUFFIX, beside, drop_work_folder,
                                            in_root, work_folder)
from shard_pipeline.commands import command, program, resume_command, status_command
from shard_pipeline.errors import UsageError, UserError
from shard_pipeline.files import short_lock, write_json_atomic
from shard_pipeline.run.rundir import RunDir, read_json


class OutHeld(UserError):
    """Another unfinished run holds this OUT."""


def claim_path(out: Path) -> Path:
    return beside(out, CLAIM_SUFFIX)


def holder(out: Path) -> str | None:
    """The run directory named in OUT's claim, exactly as claim() wrote it (a name may end in a space)."""
    p = claim_path(out)
    if not p.exists():
        return None
    text = p.read_text()
    return text[:-1] if text.endswith("\n") else text


@contextlib.contextmanager
def _locked(out: Path):
    """OUT's claim lock, bounded: a lock that cannot be taken ends in a message, never a hang."""
    lock_file = claim_lock_path(out)
    make_work_folder(out)
    probe_writable(lock_file, out)
    with short_lock(lock_file):
        yield


class OutBeingPublished(UserError):
    """A --publish is reading this OUT: a run must not replace it now."""


def publish_lock_path(out: Path) -> Path:
    return beside(out, PUBLISH_SUFFIX)


def being_published(out: Path) -> bool:
    """True while a --publish of OUT holds its lock (any host that shares the flock)."""
    try:
        fd = os.open(publish_lock_path(out), os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's lock


def _refuse_if_published(out: Path) -> None:
    if being_published(out):
        raise OutBeingPublished(f"{out} is being published now ({command(program(), '--publish')} holds "
                                f"{publish_lock_path(out)}): a run would replace it mid-upload. Wait for the "
                                "publish to end, then run this command again; nothing was started")


@contextlib.contextmanager
def held_for_publish(out: Path):
    """Hold OUT while it is published: refused while a run holds it; no run claims it meanwhile. Yields False
    (nothing held) when OUT's folder is not writable (someone else's output: no run of this user replaces it)."""
    folder = work_folder(out) if work_folder(out).is_dir() else work_folder(out).parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        yield False
        return
    fd = _take_publish_lock(out)
    try:
        yield True
    finally:
        _drop_publish_lock(out, fd)


def _take_publish_lock(out: Path) -> int:
    p = claim_path(out)
    with _locked(out):
        current = holder(out)
        if current and not RunDir(Path(current)).done_marker.exists():
            raise OutHeld(f"{out} is held by run {current}, which will replace it: publish once that run is "
                          f"done ({status_command(current)}); if it was abandoned, remove {p}. "
                          "Nothing was uploaded")
        fd = os.open(publish_lock_path(out), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # never waits: exclusive locks are only probes, taken under the claim lock
        except OSError as exc:
            os.close(fd)
            raise UsageError(f"cannot lock {publish_lock_path(out)}: {exc.strerror} (needed to hold OUT while it "
                             "is published)") from None
        return fd


def _drop_publish_lock(out: Path, fd: int) -> None:
    """Release our shared lock; the last publisher removes the file (under the claim lock, so no one races it)."""
    try:
        with _locked(out):
            fcntl.flock(fd, fcntl.LOCK_UN)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                publish_lock_path(out).unlink(missing_ok=True)
            except OSError:
                pass  # another publish of OUT still holds it
    except UserError:
        pass  # the lock file stays; a later probe finds it unlocked
    finally:
        os.close(fd)
    if holder(out) is None:  # no run holds OUT: the claim lock was this publish's
        tidy(out)


def check_not_held(out: Path, rundir: Path) -> None:
    """Refuse an OUT that another unfinished run holds (reads only: --dry-run says what the run would)."""
    current = holder(out)
    if current and current != str(rundir) and not RunDir(Path(current)).done_marker.exists():
        raise OutHeld(f"{out} is held by run {current}; finish it with {resume_command(current)}, or remove {claim_path(out)}")


def check_claimable(out: Path, rundir: Path) -> None:
    """Refuse (without writing anything) an OUT that another unfinished run holds, or whose folder cannot take a claim."""
    p = claim_path(out)
    if not p.parent.is_dir():
        if p.parent.exists():
            raise UsageError(f"--out {out} cannot be made here: {p.parent} is not a folder; "
                             "--out chooses another place")
        if (why := place_refusal(p.parent, f"--out {out} cannot be made here", "--out")) is not None:
            raise UsageError(why)
        return
    probe_writable(claim_lock_path(out), out)
    check_not_held(out, rundir)
    _refuse_if_published(out)


def claim_lock_path(out: Path) -> Path:
    return beside(out, CLAIM_LOCK_SUFFIX)


def probe_writable(lock_file: Path, out: Path) -> None:
    """Open (creating) the lock file once: filelock retries a file it cannot create until its timeout, so /proc
    would look like a held lock instead of an error."""
    existed = lock_file.exists()
    try:
        os.close(os.open(lock_file, os.O_CREAT | os.O_RDWR, 0o666))
        if not existed:
            lock_file.unlink()
    except OSError as exc:
        what = f"--out {out} cannot be written here"
        if isinstance(exc, PermissionError) and (why := place_refusal(lock_file.parent, what, "--out")) is not None:
            raise UsageError(why) from None  # the words of --dry-run's check (access.place_refusal)
        raise UsageError(f"{what}: {lock_file} cannot be made ({exc.strerror}; it claims the output folder); "
                         "--out chooses another place") from None


def claim(out: Path, rundir: Path) -> None:
    """Mark OUT as held by `rundir`, refusing one that another unfinished run holds."""
    p = claim_path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out):
        check_not_held(out, rundir)
        _refuse_if_published(out)
        p.write_text(str(rundir) + "\n")


def release(out: Path, rundir: Path) -> None:
    """Drop the claim if `rundir` holds it (never another run's)."""
    p = claim_path(out)
    with _locked(out):
        if holder(out) == str(rundir):
            p.unlink()
    tidy(out)


def tidy(out: Path) -> None:
    """Nothing stays behind: the claim lock goes, and the work folder beside ROOT once it is empty."""
    claim_lock_path(out).unlink(missing_ok=True)
    drop_work_folder(out)


def make_work_folder(out: Path) -> None:
    """The work folder beside ROOT, made when a language of ROOT first needs it (never ROOT's parent)."""
    if in_root(out) and out.parent.parent.is_dir():
        work_folder(out).mkdir(exist_ok=True)


@contextlib.contextmanager
def run_lock(root: Path):
    """Held while this process runs or submits the run: a second one is refused, naming this process."""
    from filelock import FileLock, Timeout

    run = RunDir(root)
    lock = FileLock(str(run.lock_file), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(f"{root} is being run or resumed by another hplt-shard process{_holder(run)}") from None
    try:
        write_json_atomic(run.lock_holder, {"pid": os.getpid(), "host": socket.gethostname()})
    except OSError:
        pass  # a refusal then names no process; the lock holds all the same
    try:
        yield
    finally:
        run.lock_holder.unlink(missing_ok=True)
        lock.release()


def _holder(run: RunDir) -> str:
    """`(pid N on HOST: ...)` of the process holding the run's lock, when it said so."""
    try:
        h = read_json(run.lock_holder)
        pid, host = int(h["pid"]), str(h["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    if host != socket.gethostname():
        return f" (pid {pid} on {host}, another host: wait for it to end, or stop it there, and resume again)"
    return f" (pid {pid} on this host: wait for it to end, or stop it ({command('kill', pid)}), and resume again)"
