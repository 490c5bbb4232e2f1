"""Files that are whole or absent: atomic writes, directory fsync, and the one file hash.

Every receipt, index, plan and manifest a reader may open while a task runs is written to a
temporary name in the same folder, fsynced, renamed over the target, and the folder fsynced:
a reader sees the old file or the new one, never half, even after a node crash.
"""
from __future__ import annotations

import hashlib
import json
import os
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


def shared_mode() -> int:
    """0666 less the umask: what open() would give (mkstemp makes 0600; run files are shared)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_file(path: Path, mode: int | None = None, sync_dir: bool = True) -> Iterator[BinaryIO]:
    """A binary file that appears at `path` only if the block ends without an exception.

    `sync_dir=False` leaves the rename itself undurable: only for a file whose previous
    version is as good after a crash (a partition checkpoint), to save one fsync per write.
    """
    path = Path(path)
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


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    with atomic_file(path, mode) as f:
        f.write(data)


def json_bytes(obj: Any) -> bytes:
    """The run dir's JSON: one-space indent, UTF-8, keys in the order given."""
    return (json.dumps(obj, indent=1, ensure_ascii=False, sort_keys=False) + "\n").encode("utf-8")


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
