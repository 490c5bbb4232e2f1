"""What a run may replace at OUT, and which staging and parking folders beside it are its own.

OUT.tmp is filled, then exchanged with OUT in one step (contract/swap.py); anything that is not a
previous output is never replaced (a typo must not delete $HOME), and a folder beside OUT is removed
only when its marker names the run that removes it.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path

from shard_pipeline.access import access_step, replace_refusal
from shard_pipeline.contract.beside import PARKING_SUFFIX, TMP_SUFFIX, beside, in_root
from shard_pipeline.commands import resume_command, status_command
from shard_pipeline.contract.manifest import MANIFEST_FORMAT, MANIFEST_NAME, load_manifest
from shard_pipeline.contract.previous import Holdings, foreign_message, holdings
from shard_pipeline.errors import UserError


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
NEW_RUN_STEP = "move it away or choose another --out"  # about a folder in the way of a run not yet started


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


def check_tmp_free(out: Path, owner: str, step: str = NEW_RUN_STEP, of_a_root: bool = False) -> None:
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


def fresh_tmp_dir(out: Path, owner: str, step: str = NEW_RUN_STEP) -> Path:
    """`out.tmp`, empty but for its marker naming `owner`: one left by the same owner is removed first; one
    without the marker, or marked by another owner, is refused and never removed."""
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
    """Refuse to replace anything that is not a previous output (a typo must not delete $HOME); return what
    OUT holds (None: absent or empty). A damaged previous output (contract/previous.py) is replaced too:
    re-running repairs it. `new_run` False: a run under way, so no message offers another --out."""
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


def parking_dir_for(out: Path, of_a_root: bool = False) -> Path:
    """Where the fallback swap parks the previous OUT between its renames: a folder this run makes exclusively
    and marks, never `OUT.old`, where users keep a previous output by hand."""
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


def check_out_free_for(parked: Path, out: Path) -> None:
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
        check_out_free_for(parked, out)
    else:
        check_replaceable(out, new_run=False)
