"""Putting OUT.tmp in place of OUT: one exchange, or two renames through a marked parking folder,
then the previous version removed by its manifest's list.

At every moment OUT is the complete old or the complete new version. What may be replaced, and
which staging and parking folders are this run's, is replace.py's to say; this module does the swap.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shard_pipeline.contract.beside import drop_work_folder
from shard_pipeline.contract.manifest import MANIFEST_NAME, load_manifest
from shard_pipeline.contract.previous import Holdings, counted, listed_sizes, shown
from shard_pipeline.contract.replace import (PARKED, TMP_MARKER, WRITE_SHARDS_OWNER, NotReplaceable,
                                             check_out_free_for, check_parking_free, check_replaceable,
                                             parking_dir_for, tmp_owner)
from shard_pipeline.errors import UserError
from shard_pipeline.files import file_sha256, fsync_dir


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


def remove_previous(old: Path, manifest: dict | None) -> tuple[str, ...]:
    """Delete a previous version of OUT, now at `old`, file by file: only what its manifest (checked before
    it left OUT) lists, the manifest last, then folders left empty. Anything else (a file written into OUT
    after it was checked, while the run swapped) is kept in `old`, and returned."""
    names = [] if manifest is None else sorted(listed_sizes(manifest)) + [MANIFEST_NAME]
    for name in names:
        path = old / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
    for folder in sorted((p for p in old.rglob("*") if p.is_dir() and not p.is_symlink()),
                         key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty
    try:
        old.rmdir()
    except FileNotFoundError:
        return ()
    except OSError:
        leaves = (p for p in old.rglob("*") if p.is_symlink() or not p.is_dir() or not any(p.iterdir()))
        return tuple(sorted(p.relative_to(old).as_posix() for p in leaves))
    return ()


def notice(text: str) -> str:
    """Print a warning the user must see (the finalize log) and return it, for validation.json and the console."""
    print(f"hplt-shard: warning: {text}", flush=True)
    return text


def kept_notice(old: Path, out: Path, kept: tuple[str, ...]) -> str:
    return notice(f"{old} keeps {counted(len(kept), 'file')} that appeared in {out} while a run replaced it "
                  f"({shown(kept)}); the previous output's own files were removed: move what you need out of "
                  f"{old}, then remove it")


def _park(out: Path, owner: str) -> Path:
    """Move OUT into a new marked OUT.replaced; the path it now has."""
    park = parking_dir_for(out)
    park.mkdir()  # exclusive: a folder that exists was checked to be ours and emptied before
    with open(park / TMP_MARKER, "w", encoding="utf-8") as f:
        f.write(owner + "\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(park.parent)
    os.rename(out, park / PARKED)
    return park / PARKED


def restore_parked(out: Path, owner: str) -> None:
    """Undo what a fallback swap stopped between its renames left in this run's OUT.replaced: the previous
    version goes back to OUT (OUT is again the complete old one) and the parking folder is removed.
    With something at OUT since (not an empty folder), neither is touched: refused, both named."""
    check_parking_free(out, owner)
    park = parking_dir_for(out)
    if not park.exists():
        return
    parked = park / PARKED
    if parked.exists():
        check_out_free_for(parked, out)
        if out.exists():
            out.rmdir()
        os.rename(parked, out)
    unpark(park)
    fsync_dir(out.parent)


def unpark(park: Path) -> None:
    """Remove the parking folder's marker (no run takes it for its own again) and the folder when empty."""
    (park / TMP_MARKER).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        park.rmdir()  # only when empty: files kept in it were named


def manifest_sha(folder: Path) -> str | None:
    """The sha256 of `folder`'s manifest, None without one."""
    try:
        return file_sha256(folder / MANIFEST_NAME)
    except OSError:
        return None


def folder_identity(folder: Path) -> dict[str, Any] | None:
    """What proves, after a swap, that a folder is the very one that was at OUT: its device and inode
    (a rename keeps both) and its manifest's sha256. None when nothing is there."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None
    return {"dev": st.st_dev, "ino": st.st_ino, "manifest_sha256": manifest_sha(folder)}


def remove_replaced(old: Path, out: Path, previous: dict[str, Any] | None) -> tuple[str, ...]:
    """Delete a version of OUT that a swap of this run moved to `old` (OUT.tmp after an exchange, or
    OUT.replaced/previous), proven by the identity finalize recorded of OUT before the swap
    (folder_identity: the same inode, the same manifest; an identical copy made elsewhere is not it).
    Anything else at `old` is not ours: left as it is, and named. Returns the warnings given."""
    if not old.exists() or old.is_symlink() or not old.is_dir():
        return ()
    now = folder_identity(old)
    if previous is None or now is None or (now["dev"], now["ino"]) != (previous["dev"], previous["ino"]) \
            or now["manifest_sha256"] not in (previous["manifest_sha256"], None):
        return (notice(f"{old} is not the previous version this run's swap moved there; it is left as it is"),)
    # The very folder. With no manifest left, an earlier removal stopped after its last file (the manifest
    # goes last): only folders it left empty go, and a file in it, not listed anywhere now, is kept, named.
    manifest = load_manifest(old) if now["manifest_sha256"] else None
    kept = remove_previous(old, manifest)
    return (kept_notice(old, out, kept),) if kept else ()


@dataclass(frozen=True)
class Swapped:
    """What a swap replaced (None: nothing) and the warnings it gave (files kept beside OUT)."""

    held: Holdings | None
    notices: tuple[str, ...] = ()


def swap_into_place(tmp: Path, out: Path) -> Swapped:
    """Make `tmp` the new `out`; at every moment `out` is the complete old or the complete new one.

    An existing `out` is exchanged with `tmp` in one renameat2(RENAME_EXCHANGE). Without it (some network
    filesystems), two renames through this run's marked OUT.replaced: between them `out` is absent and
    the old version complete in OUT.replaced/previous, which a resume puts back (restore_parked). The old
    version is then deleted by its manifest's list, so a file written into OUT after the check is kept
    and named. Returns what OUT held before, and the warnings the user must see.
    """
    owner = tmp_owner(tmp) or WRITE_SHARDS_OWNER
    restore_parked(out, owner)
    held = check_replaceable(out, new_run=False)  # the run's own finalize: its resume command follows the message
    out.parent.mkdir(parents=True, exist_ok=True)
    old = None
    try:
        if not out.exists():
            os.rename(tmp, out)
        elif _exchange(tmp, out):
            old = tmp
        else:
            old = _park(out, owner)
            try:
                os.rename(tmp, out)
            except OSError as exc:
                try:
                    os.rename(old, out)  # OUT back as it was
                except OSError:
                    raise SwapFailed(f"cannot put {tmp} in place of {out}: {exc}; {out} is absent now: the previous "
                                     f"version is complete in {old} and this run's output in {tmp}; fix the cause, "
                                     "then resume the run: it puts the previous version back and redoes the swap") from exc
                unpark(old.parent)
                raise
    except (NotReplaceable, SwapFailed):
        raise
    except OSError as exc:
        raise SwapFailed(f"cannot put {tmp} in place of {out}: {exc}; {out} is as it was and {tmp} keeps this "
                         f"run's output (still marked as this run's); {SWAP_HINTS.get(exc.errno, SWAP_HINT)}") from exc
    (out / TMP_MARKER).unlink(missing_ok=True)  # the marker never stays in OUT
    fsync_dir(out)
    notices: tuple[str, ...] = ()
    if old is not None:
        try:
            kept = remove_previous(old, held.manifest if held else None)
            notices = (kept_notice(old, out, kept),) if kept else ()
        except OSError as exc:  # OUT is the new version already: the swap stands
            notices = (notice(f"{out} holds the new version; the previous one, now at {old}, could not be deleted "
                              f"({exc}): remove {old} by hand"),)
        if old != tmp:  # parked: the parking folder goes; unmarked (never ours again) if it keeps files
            unpark(old.parent)
    fsync_dir(out.parent)
    drop_work_folder(out)  # empty once a run without a claim (write_shards) has swapped
    return Swapped(held, notices)
