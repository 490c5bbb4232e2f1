"""Replacing OUT atomically: OUT.tmp is filled, then exchanged with OUT in one step.

At every moment OUT is the complete old or the complete new version; anything that is not a
previous output is never replaced (a typo must not delete $HOME).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import re
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shard_pipeline.access import access_step, replace_refusal
from shard_pipeline.contract.beside import PARKING_SUFFIX, TMP_SUFFIX, beside, drop_work_folder, in_root
from shard_pipeline.commands import resume_command, status_command
from shard_pipeline.contract.manifest import MANIFEST_FORMAT, MANIFEST_NAME, load_manifest
from shard_pipeline.contract.previous import Holdings, counted, foreign_message, holdings, listed_sizes, shown
from shard_pipeline.errors import UserError
from shard_pipeline.files import file_sha256, fsync_dir


class NotReplaceable(UserError, FileExistsError):
    """OUT exists and is not a previous output: it is never replaced."""


def tmp_dir_for(out: Path, of_a_root: bool = False) -> Path:
    """OUT's staging folder: `OUT.tmp`, or `ROOT.hplt-shard/LANG.tmp` for a language of a root (contract/beside.py)."""
    return beside(out, TMP_SUFFIX, of_a_root)


# The marker a writer leaves inside `out.tmp` when it creates it: its text names the owner (a run
# directory, or WRITE_SHARDS_OWNER). Only a marked `out.tmp` with the same owner is ever removed:
# a folder the user made (`mydata.tmp/notes.txt`) or another run's is refused and left alone.
TMP_MARKER = ".hplt-shard-tmp"
WRITE_SHARDS_OWNER = "write_shards"  # followed by the host and pid of the call (write_shards_owner)


def write_shards_owner() -> str:
    """The owner one `write_shards` call writes in its marker: two calls on one OUT never share a staging folder."""
    return f"{WRITE_SHARDS_OWNER} {socket.gethostname()} {os.getpid()}"


def abandoned_write_shards(made_by: str | None) -> bool:
    """True for the marker of a `write_shards` call that is over: its process on this host is gone (or the
    marker predates the host and pid). A live call's, or one on another host, is never taken."""
    parts = (made_by or "").split()
    if parts == [WRITE_SHARDS_OWNER]:
        return True
    if len(parts) != 3 or parts[0] != WRITE_SHARDS_OWNER or parts[1] != socket.gethostname() or not parts[2].isdigit():
        return False
    try:
        os.kill(int(parts[2]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def tmp_owner(tmp: Path) -> str | None:
    """Who made `tmp` (the marker's text), or None when it holds no marker (or is not a directory)."""
    try:
        return (tmp / TMP_MARKER).read_text(encoding="utf-8").strip() or None
    except (NotADirectoryError, FileNotFoundError):
        return None


def owned(path: Path, owner: str) -> tuple[bool, str | None]:
    """(True, owner) when `path` is absent or a folder marked by `owner`; else (False, whoever marked it, or None)."""
    if not (path.is_symlink() or path.exists()):
        return True, owner
    made_by = None if path.is_symlink() or not path.is_dir() else tmp_owner(path)
    return made_by == owner, made_by


def check_tmp_free(out: Path, owner: str, step: str = "move it away or choose another --out", of_a_root: bool = False) -> None:
    """Refuse an existing `out.tmp` or `out.replaced` that `owner` did not make; nothing is removed here.
    `step`: what to do about a folder not made by hplt-shard (a resume cannot choose another --out)."""
    check_parking_free(out, owner, of_a_root)
    tmp = tmp_dir_for(out, of_a_root)
    mine, made_by = owned(tmp, owner)
    if mine or (owner.startswith(WRITE_SHARDS_OWNER) and abandoned_write_shards(made_by)):
        return
    if made_by is None:
        if (tmp / MANIFEST_NAME).is_file() and not tmp.is_symlink():
            raise NotReplaceable(f"{tmp} holds an earlier output (its {MANIFEST_NAME}): one a run replaced and could "
                                 f"not delete (that run's warning said so), or a copy; it is the staging folder of "
                                 f"--out {out}: {step}")
        raise NotReplaceable(f"{tmp} exists and was not made by hplt-shard (no {TMP_MARKER} marker); "
                             f"it is the staging folder of --out {out}: {step}")
    if made_by.startswith(WRITE_SHARDS_OWNER):
        raise NotReplaceable(f"{tmp} is being written by another write_shards call ({made_by}); wait for it, or "
                             f"remove {tmp} if that call is over")
    raise NotReplaceable(f"{tmp} belongs to another run ({made_by}), which may still be running: see where it stands "
                         f"({status_command(made_by)}); once it has stopped, finish it with {resume_command(made_by)}, "
                         f"or remove {tmp} if that run is abandoned")


def fresh_tmp_dir(out: Path, owner: str, step: str = "move it away or choose another --out") -> Path:
    """`out.tmp`, empty but for its marker naming `owner`: one left by the same owner is removed first.

    An `out.tmp` without the marker, or marked by another owner, is refused and never removed.
    """
    check_tmp_free(out, owner, step)
    tmp = tmp_dir_for(out)
    if tmp.exists():
        check_tmp_free(out, owner, step)  # again, right before: another writer may have made it since
        shutil.rmtree(tmp)
    _make_marked(tmp, owner, out)
    return tmp


def staging_dir(out: Path, owner: str, step: str) -> Path:
    """`out.tmp` as `owner`'s writers find it: kept when it is theirs, made again (marked) when it is gone,
    refused when anyone else made it. A writer never writes into a folder it cannot prove is its run's."""
    check_tmp_free(out, owner, step)
    tmp = tmp_dir_for(out)
    if not tmp.exists():  # gone since the plan made it: made again whole (marker in), by one writer of the run
        making = tmp.with_name(f".{tmp.name}.{os.getpid()}.making")
        _make_marked(making, owner, out)
        try:
            os.rename(making, tmp)  # another writer of this run may win: then its folder is the one
        except OSError:
            shutil.rmtree(making, ignore_errors=True)
        check_tmp_free(out, owner, step)
    return tmp


def _make_marked(tmp: Path, owner: str, out: Path) -> None:
    try:
        tmp.mkdir(parents=True)  # exclusive: of two writers racing here, the second is refused
    except FileExistsError:
        raise NotReplaceable(f"{tmp} was just made by another writer of --out {out}; one writer at a time: wait for "
                             "it to finish") from None
    with open(tmp / TMP_MARKER, "w", encoding="utf-8") as f:
        f.write(owner + "\n")
        f.flush()
        os.fsync(f.fileno())


def check_replaceable(out: Path, new_run: bool = True) -> Holdings | None:
    """Refuse to replace anything that is not a previous output (a typo must not delete $HOME).

    `new_run` False: the run is under way (its resume, its finalize), so no message offers another --out.

    Returns what OUT holds (None: absent or empty). A previous output is a folder whose manifest
    lists every entry in it (contract/previous.py); one whose listed files are missing or of
    another size is a damaged previous output, replaced as well: re-running is how it is repaired.
    """
    check_not_mounted(out, new_run)
    if out.is_symlink():
        raise NotReplaceable(f"{out} is a symbolic link (to {os.readlink(out)}); a run never replaces what a link "
                             "points to: remove the link (its target stays as it is)"
                             + (", or choose another --out" if new_run else ", then resume the run"))
    if out.exists() and not out.is_dir():
        raise NotReplaceable(f"{out} exists and is not a directory; refusing to replace it")
    if not out.exists():
        return None
    if not any(out.iterdir()):
        if (why := replace_refusal(out)) is not None:  # an empty OUT is swapped out too
            raise NotReplaceable(f"--out {out} is an empty folder this user cannot replace: {why}; ask its owner to "
                                 + ("run this, or choose another --out" if new_run else "resume this run"))
        return None
    try:
        manifest = load_manifest(out)
    except PermissionError as exc:
        raise NotReplaceable(f"{out}/{MANIFEST_NAME} cannot be read by this user ({exc.strerror}), so {out} cannot be "
                             f"proved a previous output; refusing to replace it ({access_step(out / MANIFEST_NAME, reading=False)})"
                             ) from None
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
        raise NotReplaceable(foreign_message(held, new_run))
    why = replace_refusal(out, held.tree())
    if why is not None:  # found now, not after every stage: the swap or the deletion would fail at the end
        raise NotReplaceable(f"--out {out} holds a previous output this user cannot replace: {why}; ask its owner to "
                             + ("run this, or choose another --out" if new_run else "resume this run"))
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


def check_not_mounted(out: Path, new_run: bool = True) -> None:
    """Refuse an OUT (or OUT.tmp) that is a mount point: the swap renames it, and the kernel refuses
    that (EBUSY) only after every stage has run. OUT.tmp is made beside OUT, so the two share a
    filesystem unless one of them is a mount point (rename across filesystems fails, EXDEV).
    `new_run` False: a run under way, whose --out is fixed (check_replaceable)."""
    tmp = tmp_dir_for(out)
    places = [(out, f"--out {out}"), (tmp, f"{tmp}, the staging folder of --out {out},")]
    if in_root(out):  # the staging folder lives beside ROOT: ROOT and the work folder must share a filesystem
        places += [(out.parent, f"{out.parent}, the root of --out {out},"),
                   (tmp.parent, f"{tmp.parent}, the work folder of --out {out},")]
    for path, what in places:
        if path.is_symlink() or not path.is_dir():
            continue
        if os.path.ismount(path) or os.path.abspath(path) in mount_points():
            raise NotReplaceable(f"{what} is a mount point: a run puts its output in place by renaming "
                                 f"{tmp.name} to {out.name}, which the kernel refuses for a mount point; "
                                 + (f"give a folder inside it (e.g. --out {out}/NAME)" if new_run else
                                    f"unmount it, then resume the run (or start a new run with --out {out}/NAME)"))


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


def parking_dir_for(out: Path, of_a_root: bool = False) -> Path:
    """Where the fallback swap parks the previous OUT for the two syscalls between its renames.

    A folder this run makes (exclusively) and marks, never a name the user may already use:
    `OUT.old` is where users keep a previous output by hand, and it must never be deleted.
    """
    return beside(out, PARKING_SUFFIX, of_a_root)


PARKED = "previous"  # the previous OUT, inside the parking folder


def check_parking_free(out: Path, owner: str, of_a_root: bool = False) -> None:
    """Refuse an existing OUT.replaced that `owner` did not make; nothing is removed here."""
    park = parking_dir_for(out, of_a_root)
    mine, made_by = owned(park, owner)
    if mine:
        return
    whose = f"made by {made_by}" if made_by else f"no {TMP_MARKER} marker"
    raise NotReplaceable(f"{park} exists and is not this run's ({whose}); a run parks the previous --out {out} "
                         "there while it puts the new one in place on filesystems without an atomic exchange: "
                         "move it away, then resume or re-run")


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
        _check_out_free_for(parked, out)
        if out.exists():
            out.rmdir()
        os.rename(parked, out)
    unpark(park)
    fsync_dir(out.parent)


def _check_out_free_for(parked: Path, out: Path) -> None:
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise NotReplaceable(f"{parked} holds the previous version of --out {out}, parked by an interrupted swap, "
                             f"and {out} holds something else now; neither is touched: move what is at {out} "
                             f"away, then resume: the previous version goes back first")


def check_out_for_resume(out: Path, owner: str) -> None:
    """What the run's finalize would refuse at OUT, said by its --resume before any stage runs, by reading
    alone: a previous version parked by an interrupted swap goes back first (restore_parked), so then OUT
    must hold nothing else; otherwise OUT must be replaceable (check_replaceable, as at finalize)."""
    check_parking_free(out, owner)
    parked = parking_dir_for(out) / PARKED
    if parked.exists():
        _check_out_free_for(parked, out)
    else:
        check_replaceable(out, new_run=False)


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

    With an existing `out`, the two directories are exchanged in one renameat2(RENAME_EXCHANGE).
    Filesystems without it (some network filesystems) fall back to two renames through a marked
    folder of this run's (OUT.replaced): between them `out` is absent, the previous version complete
    in OUT.replaced/previous, and a resumed run puts it back before trying again (restore_parked).
    The old version is then deleted by its manifest's list (remove_previous): a file someone wrote into OUT after it
    was checked is kept, and named. The marker travels with the shards and is removed from the new
    `out` right after: a failed rename leaves `tmp` marked as its run's, so that run can resume.
    Returns what OUT held before, and the warnings the user must see.
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
