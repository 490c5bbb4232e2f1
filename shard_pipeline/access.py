"""Who may do what on a shared filesystem (LUMI's project and scratch folders): the owner of what stops
this user, the way on, and the checks a run makes before it relies on writing, renaming or deleting.

They run at --dry-run and at submit, so a run never learns after every stage that it cannot swap OUT
or delete the previous output. Root passes them all.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from shard_pipeline.commands import command


def owner_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user {uid}"


def nearest_visible(path: Path) -> tuple[Path, os.stat_result] | None:
    """`path`, or the nearest folder above it, that this user can look at: what stops the user is there."""
    for at in (path, *path.parents):
        try:
            return at, at.stat()
        except OSError:
            continue
    return None


def access_step(path: Path, reading: bool) -> str:
    """The way on from a permission error at `path`: whose it is, and for a command that only reads
    (`reading`) the chmod that opens it to the user's group (when the group is one of the user's), else a
    folder of the user's own."""
    seen = nearest_visible(path)
    if seen is None:
        return "this user may not read it"
    at, st = seen
    if st.st_uid == os.geteuid():
        return f"it is this user's: give yourself access ({command('chmod', '-R', 'u+rwX', str(at))}), then run this again"
    owner = owner_name(st.st_uid)
    if not reading:
        return f"it belongs to {owner}: use a folder of your own, or ask {owner} for access"
    if st.st_gid in (os.getegid(), *os.getgroups()):
        return (f"it belongs to {owner}: ask them to open it to your group ({command('chmod', '-R', 'g+rX', str(at))}), "
                f"or run this as {owner}")
    return f"it belongs to {owner}, in a group you are not in: ask them to share it with a group of yours, or run this as {owner}"


def write_refusal(folder: Path) -> str | None:
    """Why this user cannot make entries in `folder` (or, while it does not exist, in the nearest folder above
    it that does, where it would be made); None when it can."""
    at = folder
    while not os.path.lexists(at) and at != at.parent:
        at = at.parent
    if not at.is_dir() or os.access(at, os.W_OK | os.X_OK):
        return None  # a file in the way: making the folder names it (a true "Not a directory")
    return f"this user cannot write in {at} ({access_step(at, reading=False)})"


def place_refusal(folder: Path, what: str, option: str) -> str | None:
    """The one message for a path (`what`: "--out OUT cannot be written here") this user cannot make in `folder`,
    with the option that chooses another place; None when it can. Said at --dry-run and submit, and again by the
    claim beside OUT, since permissions can change in between."""
    why = write_refusal(folder)
    return None if why is None else f"{what}: {why}; {option} chooses another place"


def _mine(st: os.stat_result) -> bool:
    return os.geteuid() in (0, st.st_uid)


def replace_refusal(out: Path, tree: Iterable[tuple[str, list[str], list[str]]] | None = None) -> str | None:
    """Why this user could not put a new output in place of the previous one in `out` and delete that one
    after the swap; None when it can. In a sticky folder (+t, as /tmp and many scratch folders) only an
    entry's owner (or the folder's) may rename or delete it; a folder this user may not write is one whose
    files it cannot delete. `tree`: OUT as `os.walk` gives it, when the caller has it (`Holdings.tree`)."""
    if os.geteuid() == 0:
        return None
    parent = out.parent
    try:
        sp, so = parent.stat(), out.stat()
    except OSError as exc:
        return f"{exc.filename} cannot be looked at ({exc.strerror})"
    if sp.st_mode & stat.S_ISVTX and not (_mine(sp) or _mine(so)):
        return (f"{parent} is sticky (only an entry's owner may rename or delete it there) and {out} belongs to "
                f"{owner_name(so.st_uid)}")
    problems: list[str] = []
    for folder, dirs, files in tree if tree is not None else os.walk(
            out, onerror=lambda exc: problems.append(f"{exc.filename} cannot be listed ({exc.strerror})")):
        if problems:
            break
        if dirs or files:  # an empty folder goes with its parent's right
            problems += _folder_refusal(Path(folder), files)[:1]
    return problems[0] if problems else None


def _folder_refusal(here: Path, files: list[str]) -> list[str]:
    """Why the previous output's files in `here` could not be deleted by this user (one stat of the folder, one
    lstat per file only in a sticky folder of someone else's)."""
    try:
        st = here.stat()
    except FileNotFoundError:
        return []  # a listed folder already gone: nothing in it to delete
    except OSError as exc:
        return [f"{here} cannot be looked at ({exc.strerror})"]
    if not os.access(here, os.W_OK | os.X_OK):
        return [f"{here} is {owner_name(st.st_uid)}'s and not writable for this user, so the previous output's "
                "files in it could not be deleted"]
    if not (st.st_mode & stat.S_ISVTX) or _mine(st):
        return []
    for name in files:
        try:
            fst = (here / name).lstat()
        except FileNotFoundError:
            continue  # a listed file already gone: nothing to delete
        except OSError as exc:
            return [f"{here / name} cannot be looked at ({exc.strerror})"]
        if not _mine(fst):
            return [f"{here} is sticky and {here / name} belongs to {owner_name(fst.st_uid)}, so it could not be deleted"]
    return []


def resume_refusal(root: Path) -> str | None:
    """Why this user cannot resume the run in `root`: a folder of it this user may not write (a colleague's run
    made under `umask 022`: its folders are 755), found before anything is locked or written; None when it can.
    Cost: a listing of each of the run dir's folders, once per resume."""
    if os.geteuid() == 0:
        return None
    stack = [root]
    while stack:
        folder = stack.pop()
        if not os.access(folder, os.W_OK | os.X_OK):
            return _not_resumable(root, folder)
        try:
            with os.scandir(folder) as entries:
                stack += sorted((Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)), reverse=True)
        except OSError:
            return _not_resumable(root, folder)
    return None


def _not_resumable(root: Path, folder: Path) -> str:
    from shard_pipeline.commands import resume_command

    seen = nearest_visible(folder)
    owner = owner_name(seen[1].st_uid) if seen else "its owner"
    return (f"this user cannot resume {root}: it cannot write in {folder}, which is {owner}'s; ask {owner} to resume it "
            f"({resume_command(root)}), or to open the run to your group ({command('chmod', '-R', 'g+rwX', str(root))}); "
            "nothing was started")


def share_like(folder: Path) -> str | None:
    """Give what this process writes from now on the group permissions of `folder`, when it is another user's,
    so a colleague's --resume under `umask 077` leaves the run readable, resumable and verifiable by its owner.
    Only group bits the folder grants are opened; tasks inherit the umask. Files take the folder's group
    only when it is setgid (as LUMI's project folders are); else the returned warning says how. None when
    nothing needs saying."""
    try:
        st = folder.stat()
    except OSError:
        return None
    if st.st_uid == os.geteuid():
        return None
    current = os.umask(0)
    os.umask(current & ~(st.st_mode & 0o070))
    if st.st_mode & stat.S_ISGID or st.st_gid == os.getegid():
        return None
    group = group_name(st.st_gid)
    return (f"{folder} is {owner_name(st.st_uid)}'s and its files' group is {group}, but what this resume writes gets "
            f"your primary group ({group_name(os.getegid())}), which {owner_name(st.st_uid)} may not be in; to keep "
            f"them in {group}: {command('newgrp', group)}, then resume from that shell (Ctrl-C stops this resume), or ask "
            f"{owner_name(st.st_uid)} to {command('chmod', 'g+s', str(folder))}")


def group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"group {gid}"
