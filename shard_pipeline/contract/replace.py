"""Replacing OUT atomically: OUT.tmp is filled, then exchanged with OUT in one step.

At every moment OUT is the complete old or the complete new version; anything that is not a
previous output is never replaced (a typo must not delete $HOME).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
from pathlib import Path

from shard_pipeline.contract.manifest import MANIFEST_FORMAT, load_manifest
from shard_pipeline.errors import UserError
from shard_pipeline.files import fsync_dir


class NotReplaceable(UserError, FileExistsError):
    """OUT exists and is not a previous output: it is never replaced."""


def tmp_dir_for(out: Path) -> Path:
    return out.with_name(out.name + ".tmp")


# The marker a writer leaves inside `out.tmp` when it creates it: its text names the owner (a run
# directory, or WRITE_SHARDS_OWNER). Only a marked `out.tmp` with the same owner is ever removed:
# a folder the user made (`mydata.tmp/notes.txt`) or another run's is refused and left alone.
TMP_MARKER = ".hplt-shard-tmp"
WRITE_SHARDS_OWNER = "write_shards"


def tmp_owner(tmp: Path) -> str | None:
    """Who made `tmp` (the marker's text), or None when it holds no marker (or is not a directory)."""
    try:
        return (tmp / TMP_MARKER).read_text(encoding="utf-8").strip() or None
    except (NotADirectoryError, FileNotFoundError):
        return None


def check_tmp_free(out: Path, owner: str) -> None:
    """Refuse an existing `out.tmp` that `owner` did not make; nothing is removed here."""
    tmp = tmp_dir_for(out)
    if not (tmp.is_symlink() or tmp.exists()):
        return
    made_by = None if tmp.is_symlink() or not tmp.is_dir() else tmp_owner(tmp)
    if made_by == owner:
        return
    if made_by is None:
        raise NotReplaceable(f"{tmp} exists and was not made by hplt-shard (no {TMP_MARKER} marker); "
                             f"it is the staging folder of --out {out}: move it away or choose another --out")
    raise NotReplaceable(f"{tmp} belongs to another run ({made_by}); finish that run with --resume {made_by}, "
                         f"or remove {tmp} if that run is abandoned")


def fresh_tmp_dir(out: Path, owner: str = WRITE_SHARDS_OWNER) -> Path:
    """`out.tmp`, empty but for its marker naming `owner`: one left by the same owner is removed first.

    An `out.tmp` without the marker, or marked by another owner, is refused and never removed.
    """
    check_tmp_free(out, owner)
    tmp = tmp_dir_for(out)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    with open(tmp / TMP_MARKER, "w", encoding="utf-8") as f:
        f.write(owner + "\n")
        f.flush()
        os.fsync(f.fileno())
    return tmp


def check_replaceable(out: Path) -> None:
    """Refuse to replace anything that is not a previous output (a typo must not delete $HOME)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise NotReplaceable(f"{out} exists and is not a directory; refusing to replace it")
    if out.exists() and any(out.iterdir()):
        try:
            load_manifest(out)
        except (OSError, ValueError):
            raise NotReplaceable(f"{out} exists, is not empty and holds no {MANIFEST_FORMAT} manifest; "
                                  "refusing to replace it") from None


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"renameat2({a}, {b}, RENAME_EXCHANGE): {os.strerror(err)}")


def swap_into_place(tmp: Path, out: Path) -> None:
    """Make `tmp` the new `out`; at every moment `out` is the complete old or the complete new one.

    With an existing `out`, the two directories are exchanged in one renameat2(RENAME_EXCHANGE)
    and the old version (now at `tmp`) is deleted. Filesystems without it (some network
    filesystems) fall back to rename(out, out.old) + rename(tmp, out), which leaves a window of
    two syscalls in which `out` is absent but `out.old` is complete.
    """
    check_replaceable(out)
    (tmp / TMP_MARKER).unlink(missing_ok=True)  # the marker never reaches OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        os.rename(tmp, out)
    elif _exchange(tmp, out):
        shutil.rmtree(tmp)
    else:
        old = out.with_name(out.name + ".old")
        if old.is_symlink() or old.exists():
            check_replaceable(old)  # only a previous output (a manifest) or an empty folder is removed
            shutil.rmtree(old)
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old)
    fsync_dir(out.parent)
