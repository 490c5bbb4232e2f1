"""--verify, check 2: OUT holds exactly the files its manifest lists, each of the listed size and hash."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from shard_pipeline.contract.extras import ledger_problems, reader_problem
from shard_pipeline.contract.manifest import MANIFEST_NAME, manifest_sets
from shard_pipeline.contract.manifest import expected_shard_names as _expected_names
from shard_pipeline.contract.manifest import safe_relative as _safe_relative
from shard_pipeline.contract.verify_manifest import _Report, _stream_sha256


def _check_files(out: Path, m: dict[str, Any], rep: _Report) -> None:
    """Check 2: OUT holds exactly the files the manifest lists, each of its size and hash."""
    listed = _listed(m, rep)
    _check_unlisted(out, listed, rep)
    _check_listed(out, listed, rep)


def _listed(m: dict[str, Any], rep: _Report) -> dict[str, dict[str, Any]]:
    """Every file the manifest lists, by name; names out of the layout's order, unusable or listed twice are said."""
    shards, files = m["shards"], m["files"]
    n = len(shards)
    names = _expected_names(m)
    listed: dict[str, dict[str, Any]] = {}
    for i, e in enumerate(shards):
        name = e["name"]
        expected = names[i] if i < len(names) else None
        if name != expected:
            where = f"listed as shards[{i}] of {n}; " + (f"that shard must be named {expected!r}" if expected
                                                        else "it belongs to no shard set of the layout")
            rep.add(name, where)
        if name in listed:
            rep.add(name, "listed twice in the manifest")
        listed[name] = e
    for folder, _, entries in manifest_sets(m):
        if folder and not entries:
            rep.add(MANIFEST_NAME, f"lists no shard in {folder}/: every set of the layout has one at least "
                    "(an empty split has one empty shard)")
    for i, e in enumerate(files):
        name = e["name"]
        if not _safe_relative(name) or name == MANIFEST_NAME:
            rep.add(MANIFEST_NAME, f"files[{i}] has an unusable name {name!r} (must be a plain relative path inside OUT)")
            continue
        why = reader_problem(name)
        if why:
            rep.add(name, why)
        if name in listed:
            rep.add(name, "listed twice in the manifest")
        listed[name] = e
    for what in ledger_problems(m.get("ledger"), {e["name"] for e in files}):
        rep.add(MANIFEST_NAME, what)
    return listed


def _check_unlisted(out: Path, listed: dict[str, dict[str, Any]], rep: _Report) -> None:
    """Everything on disk must be listed (a folder this user may not list is said, never taken as empty)."""
    def unlisted(exc: OSError) -> None:
        folder = Path(exc.filename)
        rel = folder.relative_to(out).as_posix() if folder != out else "."
        if isinstance(exc, PermissionError):
            rep.denied(rel, folder, exc)
        else:
            rep.add(rel, f"cannot be listed: {exc}")

    for root, dirs, names in os.walk(out, onerror=unlisted):
        rel_root = Path(root).relative_to(out)
        for d in sorted(dirs):
            p = Path(root) / d
            rel = (rel_root / d).as_posix()
            if p.is_symlink():
                rep.add(rel, "a symlink in OUT; an output holds only regular files")
            elif not any(p.iterdir()):
                rep.add(rel, "an empty directory not listed in the manifest")
        for f in sorted(names):
            rel = (rel_root / f).as_posix()
            if rel == MANIFEST_NAME:
                continue
            if rel not in listed:
                rep.add(rel, "stray file: not listed in the manifest")
            elif (Path(root) / f).is_symlink():
                rep.add(rel, "a symlink; an output holds only regular files")


def _check_listed(out: Path, listed: dict[str, dict[str, Any]], rep: _Report) -> None:
    """Everything listed must be on disk, with its size and hash."""
    for name, e in listed.items():
        path = out / name
        if not os.path.lexists(path):
            rep.add(name, "missing: listed in the manifest but not in OUT")
            continue
        if not path.is_file():
            rep.add(name, "not a regular file")
            continue
        try:
            size, digest = _stream_sha256(path)
        except PermissionError as exc:
            rep.denied(name, path, exc)
            continue
        except OSError as exc:
            rep.add(name, f"cannot be read: {exc}")
            continue
        if size != e["bytes"]:
            rep.add(name, f"{size} bytes, the manifest says {e['bytes']}")
        if digest != e["sha256"]:
            rep.add(name, f"sha256 {digest} differs from the manifest's {e['sha256']}")
