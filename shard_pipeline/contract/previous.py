"""What an existing OUT holds: is it a previous output, which a run may replace whole?

OUT qualifies only when its manifest names every entry it holds, checked by `stat` alone; listed files
missing or of another size make a damaged previous output, which a run replaces and says so
(docs/DESIGN.md, "Replacing OUT").
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from shard_pipeline.contract.extras import CARD_NAME, OLD_BALANCE_NAME
from shard_pipeline.contract.manifest import MANIFEST_NAME, expected_shard_names, safe_relative

SHOWN = 5  # paths named in a message; the count says how many more


@dataclass(frozen=True)
class Holdings:
    """OUT's entries against its manifest: what does not belong, what is missing or resized."""

    out: Path
    manifest: dict[str, Any]
    foreign: tuple[str, ...]  # entries no listed file explains (folders end in '/'): files, links, empty folders
    outputs_inside: tuple[str, ...]  # foreign folders that hold a manifest: language outputs under a root
    missing: tuple[str, ...]  # listed, absent or not a regular file
    resized: tuple[str, ...]  # listed, with another size

    @property
    def damaged(self) -> bool:
        return bool(self.missing or self.resized)

    def summary(self) -> str:
        """One line: which output OUT holds and whether it is whole (by size)."""
        m = self.manifest
        what = (f"a previous output: dataset {m.get('dataset')!r} version {m.get('version')!r}, "
                f"{m.get('rows')} rows in {len(m.get('shards', []))} shards")
        parts = [f"{counted(len(self.missing), 'listed file')} missing ({shown(self.missing)})" if self.missing else "",
                 f"{counted(len(self.resized), 'listed file')} of another size ({shown(self.resized)})"
                 if self.resized else ""]
        return what + "".join(f", damaged: {'; '.join(p for p in parts if p)}" if self.damaged else "")

    def tree(self) -> list[tuple[str, list[str], list[str]]]:
        """OUT's folders, each with its sub-folders and files, as `os.walk` gives them, from the manifest alone:
        what OUT holds when nothing in it is `foreign` (a missing file is still named), without listing OUT again."""
        names = [PurePosixPath(n) for n in (MANIFEST_NAME, *listed_sizes(self.manifest))]
        folders = sorted({p for n in names for p in n.parents})  # PurePosixPath(".") is OUT itself, first
        entries: dict[PurePosixPath, tuple[list[str], list[str]]] = {f: ([], []) for f in folders}
        for f in folders[1:]:
            entries[f.parent][0].append(f.name)
        for n in names:
            entries[n.parent][1].append(n.name)
        return [(str(self.out / f), dirs, files) for f, (dirs, files) in entries.items()]


def counted(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def shown(paths: tuple[str, ...] | list[str]) -> str:
    """The first few paths, and how many more."""
    head = ", ".join(paths[:SHOWN]) or "none"
    return head + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")


def listed_sizes(manifest: dict[str, Any]) -> dict[str, int]:
    """Every file the manifest lists (shards and other files), with its size; ValueError for a manifest
    no hplt-shard output carries: malformed entries, or names outside the contract's (a forged
    manifest must not make a user's `Documents/letter.odt` deletable)."""
    try:
        shards, files = list(manifest["shards"]), list(manifest["files"])
        names = set(expected_shard_names(manifest))
        sizes = {e["name"]: int(e["bytes"]) for e in shards + files}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"its manifest is malformed ({type(exc).__name__}: {exc})") from None
    odd = [e["name"] for e in shards if e["name"] not in names]
    odd += [e["name"] for e in files if not own_file_name(e["name"])]
    if odd:
        raise ValueError(f"its manifest lists {shown(odd)}, which no hplt-shard output holds")
    return sizes


def own_file_name(name: Any) -> bool:
    """A name finalize gives a file besides the shards (contract/extras.py; balance.json: older outputs)."""
    return (isinstance(name, str) and safe_relative(name) and name != MANIFEST_NAME
            and (name.startswith(("_", ".")) or name in (CARD_NAME, OLD_BALANCE_NAME)))


def holdings(out: Path, manifest: dict[str, Any]) -> Holdings:
    """Walk OUT (never following a link, never entering a folder no listed file lies in) and stat each listed
    file: one readdir per such folder, one lstat per listed file (~100 k at HPLT scale)."""
    sizes = listed_sizes(manifest)
    folders = {p.as_posix() for name in sizes for p in Path(name).parents} - {"."}
    foreign, inside = [], []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(out / rel_dir) as it:
            entries = list(it)
        for e in entries:
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            if e.is_dir(follow_symlinks=False):
                if rel in folders:
                    stack.append(rel)
                    continue
                foreign.append(rel + "/")
                if os.path.lexists(os.path.join(e.path, MANIFEST_NAME)):
                    inside.append(rel + "/")
            elif rel not in sizes and rel != MANIFEST_NAME:
                foreign.append(rel)
    missing, resized = [], []
    for name, size in sorted(sizes.items()):
        try:
            st = os.lstat(out / name)
        except FileNotFoundError:
            missing.append(name)
            continue
        if not stat.S_ISREG(st.st_mode):
            foreign.append(name)  # a link or a folder where a file is listed
        elif st.st_size != size:
            resized.append(name)
    return Holdings(out, manifest, tuple(sorted(set(foreign))), tuple(sorted(inside)), tuple(missing), tuple(resized))


def foreign_message(h: Holdings, new_run: bool = True) -> str:
    """Why OUT is not replaced: what it holds that its manifest does not list, and the next step (`new_run`
    False: a run already under way, which cannot choose another --out; its resume command follows)."""
    out = h.out
    if h.outputs_inside:
        return (f"{out} holds other outputs ({shown(h.outputs_inside)}): it is a multi-language root (or holds "
                "outputs), and a run replaces OUT whole; " + (f"give --out {out}/LANG, or a new folder" if new_run
                                                               else f"move them out of {out}, then resume the run"))
    return (f"{out} holds {counted(len(h.foreign), 'entry', 'entries')} its manifest does not list "
            f"({shown(h.foreign)}); a run replaces OUT whole and would delete them: move them out of {out}"
            + (", or choose another --out" if new_run else ", then resume the run"))
