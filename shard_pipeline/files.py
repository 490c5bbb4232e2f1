"""Files that are whole or absent: atomic writes, directory fsync, and the one file hash.

Every receipt, index, plan and manifest a reader may open while a task runs is written to a
temporary name in the same folder, fsynced, renamed over the target, and the folder fsynced:
a reader sees the old file or the new one, never half, even after a node crash.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator

HASH_BLOCK = 8 << 20


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable; filesystems that refuse a directory fsync are fine."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(f: BinaryIO) -> None:
    """Make what was written to the open file `f` durable (flushed, then fsynced)."""
    f.flush()
    os.fsync(f.fileno())


class EarlyWriteback:
    """Starts the disk writing a large file while it is still being written, so that its fsync waits less:
    every `every` bytes, sync_file_range(SYNC_FILE_RANGE_WRITE) queues the dirty pages and returns. It
    promises no durability (the fsync does) and is skipped where the call is missing or fails."""

    EVERY = 8 << 20

    def __init__(self, f: BinaryIO, every: int = EVERY) -> None:
        self.f = f
        self.every = every
        self.pending = 0

    def wrote(self, n: int) -> None:
        self.pending += n
        if self.pending >= self.every:
            self.pending = 0
            self.f.flush()
            call = _sync_file_range()
            if call is not None:
                call(self.f.fileno(), 0, 0, 2)  # SYNC_FILE_RANGE_WRITE; an error is not ours to report


@functools.cache
def _sync_file_range():  # noqa: ANN202
    try:
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


def shared_mode() -> int:
    """0666 less the umask: what open() would give (mkstemp makes 0600; run files are shared)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def disk_figures(path: Path) -> str | None:
    """'N free of M' (and free inodes when none are left) on the filesystem holding `path`, as df says it."""
    from shard_pipeline.units import human_bytes

    try:
        st = os.statvfs(path)
    except OSError:
        return None
    figures = f"{human_bytes(st.f_bavail * st.f_frsize)} free of {human_bytes(st.f_blocks * st.f_frsize)}"
    return figures + (", no free inodes" if st.f_files and not st.f_favail else "")


def disk_is_full(path: Path) -> bool:
    """No room left for even a line of log (under 64 KiB, or no inode) on the filesystem holding `path`."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 << 10 or bool(st.f_files and not st.f_favail)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


class _NamedError(OSError):
    """An OSError without an errno that names its file: str() is its message, not `[Errno None] None: path`."""

    def __str__(self) -> str:
        return str(self.args[0])


def with_path(exc: OSError, path: Path) -> OSError:
    """`exc` naming `path`: a write on an open file, and pyarrow's sinks, raise errors that name none.
    A full disk also says what df says about it."""
    if exc.filename:
        return exc
    code = exc.errno
    if code is None:  # pyarrow: "... Detail: [errno 28] No space left on device"
        m = re.search(r"\[errno (\d+)\]", str(exc), re.I)
        code = int(m.group(1)) if m else None
    reason = os.strerror(code) if code else (exc.strerror or str(exc))
    if code == errno.ENOSPC:
        figures = disk_figures(_existing(Path(path).parent))
        reason += f" (the disk holding {Path(path).parent}: {figures})" if figures else ""
    if code is None:
        named = _NamedError(f"{path}: {reason}")
        named.filename = str(path)
        return named
    return OSError(code, reason, str(path))  # OSError(code, ...) gives the matching subclass


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """Every OSError of the block names `path` (the file being written) unless it names one already."""
    try:
        yield
    except OSError as exc:
        named = with_path(exc, path)
        if named is exc:
            raise
        raise named from exc


@contextmanager
def atomic_file(path: Path, mode: int | None = None, sync_dir: bool = True) -> Iterator[BinaryIO]:
    """A binary file that appears at `path` only if the block ends without an exception; its OSErrors name
    `path`. `sync_dir=False` leaves the rename undurable: only for a file whose previous version is as good
    after a crash (a partition checkpoint), to save one fsync per write."""
    path = Path(path)
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, shared_mode() if mode is None else mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    if sync_dir:
        fsync_dir(path.parent)


def atomic_leftovers(path: Path) -> list[Path]:
    """The temporary files `atomic_file(path)` leaves when its process is killed mid-write (SIGKILL,
    or SIGTERM, which runs no cleanup): mkstemp's names, `.<name>.` + 8 of [a-z0-9_] + `.tmp`.
    Only the one who writes `path` may remove them."""
    path = Path(path)
    named = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    try:
        return sorted(p for p in path.parent.iterdir() if named.fullmatch(p.name) and p.is_file())
    except FileNotFoundError:
        return []


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    with atomic_file(path, mode) as f:
        f.write(data)


def json_bytes(obj: Any) -> bytes:
    """The run dir's JSON: one-space indent, UTF-8, keys in the order given."""
    return (json.dumps(obj, indent=1, ensure_ascii=False, sort_keys=False) + "\n").encode("utf-8")


def out_json_bytes(obj: Any) -> bytes:
    """OUT's JSON files (manifest, balance, clean policy, annotation fields): two-space indent, UTF-8, a final newline."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_json_atomic(path: Path, obj: Any) -> None:
    """A receipt, plan or record: a reader never sees half of one."""
    write_bytes_atomic(path, json_bytes(obj))


def hash_into(h: "hashlib._Hash", f: BinaryIO) -> int:
    """Feed an open file, from its position to its end, to hasher `h`; return the bytes read."""
    size = 0
    while block := f.read(HASH_BLOCK):
        h.update(block)
        size += len(block)
    return size


def sha256_of(f: BinaryIO) -> tuple[int, str]:
    """(bytes read, hex sha256) of an open file from its position to its end."""
    h = hashlib.sha256()
    size = hash_into(h, f)
    return size, h.hexdigest()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return sha256_of(f)[1]


SHORT_LOCK_SECONDS = 60.0  # a lock held for milliseconds: a longer wait means a stuck lock


@contextmanager
def short_lock(lock_file: Path) -> Iterator[None]:
    """A lock held for milliseconds (an OUT's claim, a root's manifest), bounded: one that cannot be taken
    ends in a message, never a hang."""
    from filelock import FileLock, Timeout

    from shard_pipeline.errors import UsageError

    lock = FileLock(str(lock_file), timeout=SHORT_LOCK_SECONDS)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(f"could not lock {lock_file} within {SHORT_LOCK_SECONDS:.0f} s: another hplt-shard "
                         "process holds it, or the filesystem does not support locks") from None
    try:
        yield
    finally:
        lock.release()
