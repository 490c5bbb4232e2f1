"""Replacing OUT atomically: OUT.tmp is filled, then exchanged with OUT in one step.

At every moment OUT is the complete old or the complete new version; anything that is not a
previous output is never replaced (a typo must not delete $HOME).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import shutil
from pathlib import Path

from shard_pipeline.contract.manifest import MANIFEST_FORMAT, MANIFEST_NAME, load_manifest
from shard_pipeline.contract.previous import Holdings, foreign_message, holdings
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


def check_replaceable(out: Path) -> Holdings | None:
    """Refuse to replace anything that is not a previous output (a typo must not delete $HOME).

    Returns what OUT holds (None: absent or empty). A previous output is a folder whose manifest
    lists every entry in it (contract/previous.py); one whose listed files are missing or of
    another size is a damaged previous output, replaced as well: re-running is how it is repaired.
    """
    check_not_mounted(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise NotReplaceable(f"{out} exists and is not a directory; refusing to replace it")
    if not out.exists() or not any(out.iterdir()):
        return None
    try:
        manifest = load_manifest(out)
    except (OSError, ValueError):
        raise NotReplaceable(f"{out} exists, is not empty and holds no {MANIFEST_FORMAT} manifest; "
                             "refusing to replace it") from None
    try:
        held = holdings(out, manifest)
    except ValueError as exc:
        raise NotReplaceable(f"{out} holds a {MANIFEST_NAME} but is not a previous output: {exc}; "
                             "refusing to replace it") from None
    except OSError as exc:
        raise NotReplaceable(f"{out} cannot be read to prove it is a previous output: {exc}; "
                             "refusing to replace it") from None
    if held.foreign:
        raise NotReplaceable(foreign_message(held))
    return held


def mount_points() -> frozenset[str]:
    """Every mount point of this process (/proc/self/mountinfo, field 5): bind mounts of one
    filesystem included, which os.path.ismount does not see."""
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return frozenset()
    unescape = lambda f: re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f)  # noqa: E731
    return frozenset(unescape(line.split()[4]) for line in lines if len(line.split()) > 4)


def check_not_mounted(out: Path) -> None:
    """Refuse an OUT (or OUT.tmp) that is a mount point: the swap renames it, and the kernel refuses
    that (EBUSY) only after every stage has run. OUT.tmp is made beside OUT, so the two share a
    filesystem unless one of them is a mount point (rename across filesystems fails, EXDEV)."""
    tmp = tmp_dir_for(out)
    for path, what in ((out, f"--out {out}"), (tmp, f"{tmp}, the staging folder of --out {out},")):
        if path.is_symlink() or not path.is_dir():
            continue
        if os.path.ismount(path) or os.path.abspath(path) in mount_points():
            raise NotReplaceable(f"{what} is a mount point: a run puts its output in place by renaming "
                                 f"{tmp.name} to {out.name}, which the kernel refuses for a mount point; "
                                 f"give a folder inside it (e.g. --out {out}/NAME)")


class SwapFailed(UserError):
    """The rename that puts OUT.tmp in place failed: OUT is as it was, OUT.tmp keeps its marker."""


SWAP_HINT = "fix the cause, then resume the run: it redoes only the swap"
SWAP_HINTS = {
    errno.EBUSY: "OUT is a mount point or in use; a run cannot replace a mount point: start a new run with "
                 "--out a folder inside it",
    errno.EXDEV: "OUT and OUT.tmp lie on different filesystems (one is a mount point); start a new run with "
                 "--out a folder inside the mount",
}


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


def swap_into_place(tmp: Path, out: Path) -> Holdings | None:
    """Make `tmp` the new `out`; at every moment `out` is the complete old or the complete new one.

    With an existing `out`, the two directories are exchanged in one renameat2(RENAME_EXCHANGE)
    and the old version (now at `tmp`) is deleted. Filesystems without it (some network
    filesystems) fall back to rename(out, out.old) + rename(tmp, out), which leaves a window of
    two syscalls in which `out` is absent but `out.old` is complete. The marker travels with
    the shards and is removed from the new `out` right after: a failed rename leaves `tmp`
    marked as its run's, so that run can resume. Returns what OUT held before (None: nothing).
    """
    held = check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    old = None
    try:
        if not out.exists():
            os.rename(tmp, out)
        elif _exchange(tmp, out):
            old = tmp
        else:
            old = out.with_name(out.name + ".old")
            if old.is_symlink() or old.exists():
                check_replaceable(old)  # only a previous output (a manifest) or an empty folder is removed
                shutil.rmtree(old)
            os.rename(out, old)
            try:
                os.rename(tmp, out)
            except OSError:
                os.rename(old, out)  # OUT back as it was
                raise
    except NotReplaceable:
        raise
    except OSError as exc:
        raise SwapFailed(f"cannot put {tmp} in place of {out}: {exc}; {out} is as it was and {tmp} keeps this "
                         f"run's output (still marked as this run's); {SWAP_HINTS.get(exc.errno, SWAP_HINT)}") from exc
    (out / TMP_MARKER).unlink(missing_ok=True)  # the marker never stays in OUT
    fsync_dir(out)
    if old is not None:
        shutil.rmtree(old)
    fsync_dir(out.parent)
    return held
