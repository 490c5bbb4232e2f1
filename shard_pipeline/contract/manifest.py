"""The manifest `_MANIFEST.json`: its arguments checked, built, written and read.

Its shape is docs/formats/corpus-manifest.schema.json (shipped as shard_pipeline/contract/).
"""
from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

from shard_pipeline.contract.rules import ShardFile, _is_count, set_shard_name, shard_sets
from shard_pipeline.files import out_json_bytes, write_bytes_atomic

# Counts of what an upstream dedup stage removed; callers override the keys they know.
DEDUP_DEFAULTS: dict[str, Any] = {"exact_removed": 0, "near_removed": 0, "near_kept_tagged": 0}
MANIFEST_NAME = "_MANIFEST.json"
MANIFEST_FORMAT = "hplt-shard/corpus-shard/1"


def manifest_sets(manifest: dict[str, Any]) -> list[tuple[str, str | None, list[dict[str, Any]]]]:
    """(folder, split, shard entries) of each shard set a manifest lists, in manifest order; an entry in no
    set's folder is in none (the verifier reports it)."""
    sets = shard_sets(manifest["params"].get("split_layout", "column"))
    if sets == [("", None)]:
        return [("", None, list(manifest["shards"]))]
    return [(folder, split, [e for e in manifest["shards"] if e["name"].startswith(folder + "/")])
            for folder, split in sets]


def expected_shard_names(m: dict[str, Any]) -> list[str]:
    """The shard names the manifest must list, in order: each set named by the contract inside its folder."""
    return [set_shard_name(folder, i, len(entries)) for folder, _, entries in manifest_sets(m) for i in range(len(entries))]


def safe_relative(name: str) -> bool:
    """True for a plain relative path inside OUT (no '..', no absolute path, no backslash)."""
    p = PurePosixPath(name)
    return (not p.is_absolute() and "\\" not in name and str(p) == name
            and all(part not in ("", ".", "..") for part in p.parts))


def check_manifest_args(*, dataset: Any, version: Any, config_sha256: Any, filters: Any, dedup: Any, ledger_ref: Any) -> None:
    """Refuse, before anything is written, what would make a manifest its own schema rejects."""
    for name, value in (("dataset", dataset), ("version", version), ("ledger_ref", ledger_ref)):
        if name == "ledger_ref" and value is None:  # null: the output carries no ledger
            continue
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty str, got {value!r}")
    if not isinstance(config_sha256, str) or not re.fullmatch(r"[0-9a-f]{64}", config_sha256):
        raise ValueError(f"config_sha256 must be 64 lowercase hex digits, got {config_sha256!r}")
    for name, counts in (("filters", filters), ("dedup", dedup)):
        if counts is None:
            continue
        if not isinstance(counts, dict) or not all(isinstance(k, str) and _is_count(v) for k, v in counts.items()):
            raise ValueError(f"{name} must map names (str) to counts (non-negative int), got {counts!r}")


def build_manifest(
    *,
    dataset: str,
    version: str,
    config_sha256: str,
    shard_rows: int,
    val_permille: int,
    row_group_bytes: int,
    shards: Sequence[ShardFile],
    filters: dict[str, Any] | None,
    dedup: dict[str, Any] | None,
    pii: dict[str, int],
    ledger_ref: str | None,
    files: Sequence[dict[str, Any]] = (),
    split_layout: str = "column",
) -> dict[str, Any]:
    """The manifest, keys in the documented order; `params.split_layout` only for "dirs", so column-layout
    manifests keep their bytes."""
    params: dict[str, Any] = {"shard_rows": shard_rows, "val_permille": val_permille, "row_group_bytes": row_group_bytes}
    if split_layout != "column":
        shard_sets(split_layout)  # validates
        params["split_layout"] = split_layout
    return {
        "format": MANIFEST_FORMAT,
        "dataset": dataset,
        "version": version,
        "config_sha256": config_sha256,
        "rows": sum(s.rows for s in shards),
        "text_bytes": sum(s.text_bytes for s in shards),
        "splits": {"train": sum(s.train for s in shards), "val": sum(s.val for s in shards)},
        "params": params,
        "shards": [s.manifest_entry() for s in shards],
        "counts": {"filters": dict(filters or {}), "dedup": {**DEDUP_DEFAULTS, **(dedup or {})}},
        "pii": {k: pii[k] for k in sorted(pii)},
        "ledger": ledger_ref,
        "files": [dict(f) for f in files],
    }


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    write_bytes_atomic(directory / MANIFEST_NAME, out_json_bytes(manifest))


def load_manifest(out: Path) -> dict[str, Any]:
    path = Path(out) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no manifest; not a hplt-shard output") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{path}: not a {MANIFEST_FORMAT} manifest")
    return manifest
