"""ROOT's root manifest, `ROOT/_LANGUAGES.json`: the languages runs into ROOT were asked for, and which landed.

Folders cannot tell a failed language from one never asked for; this file can. A run of several languages
names them at submit (`ask`); each language's finalize records its landing with its manifest's sha256
(`land`), under a lock in the work folder beside ROOT.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from shard_pipeline.contract.beside import ROOT_MANIFEST_NAME, drop_root_work_folder, in_root, root_manifest_lock_path
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.errors import UserError
from shard_pipeline.files import file_sha256, short_lock, write_json_atomic

ROOT_MANIFEST_FORMAT = "hplt-shard-root/1"


class DamagedRootManifest(UserError, ValueError):
    """`ROOT/_LANGUAGES.json` is not what hplt-shard wrote."""


@dataclass(frozen=True)
class RootManifest:
    asked: tuple[str, ...] = ()  # every language a run into ROOT was asked for, in name order
    landed: dict[str, str] = field(default_factory=dict)  # language -> sha256 of its _MANIFEST.json as it landed

    def missing(self, outputs: Iterable[str]) -> tuple[str, ...]:
        """Languages asked for that have no landed output in ROOT."""
        there = set(outputs)
        return tuple(l for l in self.asked if l not in self.landed or l not in there)

    def unlisted(self, outputs: Iterable[str]) -> tuple[str, ...]:
        """Language outputs in ROOT that no run into ROOT was asked for."""
        return tuple(l for l in sorted(outputs) if l not in self.asked)

    def to_json(self) -> dict:
        return {"format": ROOT_MANIFEST_FORMAT, "asked": list(self.asked),
                "landed": [{"lang": l, "manifest_sha256": self.landed[l]} for l in sorted(self.landed)]}


def root_manifest_path(root: Path) -> Path:
    return Path(root) / ROOT_MANIFEST_NAME


def damaged(path: Path, why: str) -> DamagedRootManifest:
    return DamagedRootManifest(f"{path} is not a root manifest hplt-shard wrote ({why}); remove it, then run "
                               "the languages of ROOT again (or --resume their run) to write it anew")


def parse(doc: object, path: Path) -> RootManifest:
    """The root manifest as read, type-checked: a damaged one is a named refusal."""
    bad = lambda why: damaged(path, why)  # noqa: E731
    if not isinstance(doc, dict) or doc.get("format") != ROOT_MANIFEST_FORMAT:
        raise bad(f"format is not {ROOT_MANIFEST_FORMAT}")
    asked, landed = doc.get("asked"), doc.get("landed")
    if not isinstance(asked, list) or not all(isinstance(l, str) for l in asked):
        raise bad("`asked` is not a list of languages")
    if not isinstance(landed, list) or not all(
            isinstance(e, dict) and isinstance(e.get("lang"), str) and isinstance(e.get("manifest_sha256"), str)
            for e in landed):
        raise bad("`landed` is not a list of {lang, manifest_sha256}")
    return RootManifest(tuple(asked), {e["lang"]: e["manifest_sha256"] for e in landed})


def read_root_manifest(root: Path) -> RootManifest | None:
    """ROOT's root manifest; None when ROOT has none."""
    path = root_manifest_path(root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedRootManifest(f"{path} cannot be read ({exc}); check its permissions") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise damaged(path, f"not JSON: {exc}") from None
    return parse(doc, path)


@contextlib.contextmanager
def _updating(root: Path) -> Iterator[None]:
    """ROOT's root-manifest lock; the lock file and an emptied work folder go afterwards."""
    lock_file = root_manifest_lock_path(root)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with short_lock(lock_file):
            yield
    finally:
        lock_file.unlink(missing_ok=True)
        drop_root_work_folder(root)


def ask(root: Path, langs: Iterable[str], make: bool = True) -> None:
    """A run into ROOT was asked for these languages: they join the root manifest's list. `make` False (a run
    of one language into ROOT/LANG): only a root that has a root manifest gets one more language."""
    if not make and not root_manifest_path(root).is_file():
        return
    with _updating(root):
        now = read_root_manifest(root) or RootManifest()
        write_json_atomic(root_manifest_path(root),
                          RootManifest(tuple(sorted({*now.asked, *langs})), now.landed).to_json())


def take_back(root: Path, langs: Iterable[str]) -> None:
    """A submission that failed: the languages it added leave the list again (a landed one stays)."""
    with _updating(root):
        now = read_root_manifest(root)
        if now is not None:
            gone = set(langs) - set(now.landed)
            write_json_atomic(root_manifest_path(root),
                              RootManifest(tuple(l for l in now.asked if l not in gone), now.landed).to_json())


def land(out: Path) -> bool:
    """OUT, a language of a root that has a root manifest, has landed: its manifest's sha256 is recorded.
    False (nothing written) for any other OUT."""
    out = Path(out)
    if not in_root(out):
        return False
    sha = file_sha256(out / MANIFEST_NAME)
    with _updating(out.parent):
        now = read_root_manifest(out.parent) or RootManifest()
        write_json_atomic(root_manifest_path(out.parent), RootManifest(
            tuple(sorted({*now.asked, out.name})), {**now.landed, out.name: sha}).to_json())
    return True
