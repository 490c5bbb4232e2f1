"""Where the working files of an OUT live: one definition of every path a run or a publish keeps beside OUT.

A language of a root (ROOT/LANG, ROOT holding `_LANGUAGES.json`) keeps them in `ROOT.hplt-shard/`, so ROOT
holds only landed languages; that folder shares ROOT's filesystem, so the swap stays a rename. Any other OUT
keeps them beside itself (`OUT.tmp` and so on). docs/DESIGN.md, "Where the working files live".
"""
from __future__ import annotations

import contextlib
from pathlib import Path

ROOT_MANIFEST_NAME = "_LANGUAGES.json"  # in ROOT: the languages asked for and landed (a `_` file readers skip)

WORK_SUFFIX = ".hplt-shard"  # ROOT.hplt-shard/: the working files of ROOT's languages
TMP_SUFFIX = ".tmp"
PARKING_SUFFIX = ".replaced"
CLAIM_SUFFIX = ".hplt-shard-claim"
CLAIM_LOCK_SUFFIX = CLAIM_SUFFIX + ".lock"
PUBLISH_SUFFIX = ".hplt-shard-publish"
# hplt-shard's own files beside an OUT, never part of an output
BOOKKEEPING_SUFFIXES = (CLAIM_SUFFIX, CLAIM_LOCK_SUFFIX, PUBLISH_SUFFIX)


def in_root(out: Path) -> bool:
    """True when OUT is a language of a root (ROOT/LANG, ROOT holding a root manifest): its working files
    live beside ROOT."""
    out = Path(out)
    return out.parent.name not in ("", ".", "..") and (out.parent / ROOT_MANIFEST_NAME).is_file()


def root_work_folder(root: Path) -> Path:
    """`ROOT.hplt-shard`, beside ROOT."""
    root = Path(root)
    return root.with_name(root.name + WORK_SUFFIX)


def work_folder(out: Path, of_a_root: bool = False) -> Path:
    """The folder that holds OUT's working files: the work folder beside ROOT, or OUT's own folder.
    `of_a_root`: OUT is a language of a run of several, whose root manifest the submit writes before it
    claims anything: a dry-run and the submit's first checks look where the run will keep them."""
    out = Path(out)
    return root_work_folder(out.parent) if of_a_root or in_root(out) else out.parent


def beside(out: Path, suffix: str, of_a_root: bool = False) -> Path:
    """OUT's working file `OUT<suffix>` where it lives."""
    out = Path(out)
    return work_folder(out, of_a_root) / (out.name + suffix)


def drop_work_folder(out: Path) -> None:
    """Remove the work folder beside ROOT once it holds nothing (another language's files keep it)."""
    if in_root(Path(out)):
        drop_root_work_folder(Path(out).parent)


def drop_root_work_folder(root: Path) -> None:
    """Remove `ROOT.hplt-shard` once it holds nothing."""
    with contextlib.suppress(OSError):
        root_work_folder(Path(root)).rmdir()


def root_manifest_lock_path(root: Path) -> Path:
    """The lock under which a landing updates ROOT's root manifest: in the work folder, never in ROOT."""
    return root_work_folder(Path(root)) / (ROOT_MANIFEST_NAME + ".lock")
