"""A multi-language output root (`--out ROOT` of a run of several languages) told apart from anything else.

A root holds no `_MANIFEST.json`, and a root manifest (`_LANGUAGES.json`) or at least one real subfolder
holding a manifest: its language outputs. Everything else in it is named, never passed over (an unfinished
language's marked `.tmp`, other folders, which is how a language whose manifest is gone looks, other files).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from shard_pipeline.commands import status_command
from shard_pipeline.contract.beside import BOOKKEEPING_SUFFIXES, ROOT_MANIFEST_NAME, TMP_SUFFIX, root_work_folder
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract.replace import tmp_owner

# How a language folder of a root is usually named (HPLT: ISO 639-3 and the script, `fin_Latn`); a folder
# of outputs named otherwise is no root a person meant, whatever it holds.
LANG_CODE = re.compile(r"[a-z]{2,3}(_[A-Z][a-z]{3})?")

@dataclass(frozen=True)
class Staged:
    """`ROOT/<lang>.tmp`, marked: a run (`owner`, its run dir) is writing this language."""

    lang: str
    owner: str


@dataclass(frozen=True)
class RootEntries:
    root: Path
    languages: tuple[str, ...]  # subfolders holding _MANIFEST.json: the language outputs
    unlanded: tuple[Staged, ...]  # a marked LANG.tmp with no LANG/ output: not landed yet
    replacing: tuple[Staged, ...]  # a marked LANG.tmp beside LANG/: a run is writing its next version
    other_folders: tuple[str, ...]  # folders (and symbolic links) that are no language output
    other_files: tuple[str, ...]  # files that are neither an output nor hplt-shard's bookkeeping


def is_language_output(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink() and (p / MANIFEST_NAME).is_file()


def staged_in(folder: Path) -> list[Staged]:
    """The marked `<name>.tmp` folders in `folder`: outputs being written."""
    try:
        entries = sorted(Path(folder).iterdir(), key=lambda p: p.name)
    except OSError:
        return []
    return [Staged(p.name[: -len(TMP_SUFFIX)], owner) for p in entries
            if p.name.endswith(TMP_SUFFIX) and p.is_dir() and not p.is_symlink() and (owner := tmp_owner(p)) is not None]


def scan(root: Path) -> RootEntries:
    """What ROOT holds, entry by entry, and the languages being written in the work folder beside it
    (one listing each; the language outputs are not read here)."""
    entries = sorted(Path(root).iterdir(), key=lambda p: p.name)
    langs = [p.name for p in entries if is_language_output(p)]
    staged = {s.lang: s for s in staged_in(root) + staged_in(root_work_folder(Path(root)))}
    folders, files = [], []
    for p in entries:
        name = p.name
        plain_file = p.is_file() and not p.is_symlink()
        if name in langs or (plain_file and (name.endswith(BOOKKEEPING_SUFFIXES) or name == ROOT_MANIFEST_NAME)):
            continue
        if name.endswith(TMP_SUFFIX) and name[: -len(TMP_SUFFIX)] in staged:
            continue
        if p.is_symlink() or p.is_dir():
            folders.append(f"{name}/" if not p.is_symlink() else f"{name} (a symbolic link)")
        else:
            files.append(name)
    unlanded = tuple(s for s in staged.values() if s.lang not in langs)
    replacing = tuple(s for s in staged.values() if s.lang in langs)
    return RootEntries(Path(root), tuple(langs), unlanded, replacing, tuple(folders), tuple(files))


def is_root(folder: Path) -> bool:
    """A folder without a manifest that holds a root manifest or at least one language output."""
    folder = Path(folder)
    if not folder.is_dir() or (folder / MANIFEST_NAME).exists() or (folder / MANIFEST_NAME).is_symlink():
        return False
    try:
        return (folder / ROOT_MANIFEST_NAME).is_file() or any(is_language_output(p) for p in folder.iterdir())
    except OSError:
        return False


NO_OUTPUT_HINT = (f"and no language outputs (LANG/{MANIFEST_NAME}): it is neither an output nor a multi-language "
                  "root; give a run's --out (or ROOT/LANG of a run of several languages)")


def staged_line(s: Staged) -> str:
    """One unfinished language, with the command that shows its run."""
    return f"{s.lang}.tmp is the unfinished output of run {s.owner} ({status_command(s.owner)})"
