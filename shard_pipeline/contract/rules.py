"""The contract's rules: schema, split rule, order, naming, shard sets and row groups.

Pure functions and constants, so the pipeline and the in-memory `write_shards` cut, name and
split rows the same way by construction. The rules are in docs/formats/corpus-shard.md.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import pyarrow as pa

SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("source_id", pa.string(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("license_spdx", pa.string(), nullable=False),
        pa.field("lang", pa.string(), nullable=False),
        pa.field("n_chars", pa.int32(), nullable=False),
        pa.field("sha256", pa.binary(32), nullable=False),
        pa.field("minhash_cluster", pa.int64(), nullable=False),
        pa.field("pii_redactions", pa.int32(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
    ]
)
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)
DEFAULT_ROW_GROUP_BYTES = 64 * 1024 * 1024
SPLITS = ("train", "val")
# --split-layout: "column" is one shard set with a split column; "dirs" writes one shard set per
# split into these folders (each named by the contract, each row still carrying its split).
SPLIT_LAYOUTS = ("column", "dirs")
SPLIT_DIRS = {"train": "train", "val": "validation"}
# Low-cardinality columns only: dictionary-encoding `text` or `id` costs CPU and never pays.
DICTIONARY_COLUMNS = ["source_id", "license_spdx", "lang", "split"]
_INT32_MAX = 2**31 - 1


@dataclass
class Doc:
    """One document as the corpus pipeline hands it over: the contract's input record."""

    id: str
    text: str
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ShardFile:
    """What writing one shard produced: the manifest's entry for it, plus its split counts."""

    name: str
    rows: int
    bytes: int
    sha256: str
    text_bytes: int
    train: int
    val: int

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rows": self.rows,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "text_bytes": self.text_bytes,
        }


def split_of(sha256: bytes, val_permille: int) -> str:
    """'val' when the first 8 bytes of the text's SHA-256, big-endian, mod 1000 are < val_permille: a function
    of the text alone, so exact copies never straddle train and val."""
    check_val_permille(val_permille)
    if not isinstance(sha256, (bytes, bytearray)) or len(sha256) != 32:
        raise ValueError("sha256 must be the 32-byte SHA-256 digest of the text")
    u = int.from_bytes(sha256[:8], "big")
    return "val" if u % 1000 < val_permille else "train"


def check_val_permille(val_permille: int) -> None:
    if isinstance(val_permille, bool) or not isinstance(val_permille, int):
        raise ValueError(f"val_permille must be an int in [0, 1000], got {val_permille!r}")
    if not 0 <= val_permille <= 1000:
        raise ValueError(f"val_permille must be in [0, 1000], got {val_permille}")


def check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def shard_name(i: int, n: int) -> str:
    if not 0 <= i < n:
        raise ValueError(f"shard index {i} out of range for {n} shards")
    return f"shard-{i:05d}-of-{n:05d}.parquet"


def shard_sets(split_layout: str) -> list[tuple[str, str | None]]:
    """The shard sets of a layout, in manifest order: (folder in OUT, the split its rows hold; None = all)."""
    if split_layout == "column":
        return [("", None)]
    if split_layout == "dirs":
        return [(SPLIT_DIRS[s], s) for s in SPLITS]
    raise ValueError(f"split_layout must be one of {SPLIT_LAYOUTS}, got {split_layout!r}")


def set_shard_name(folder: str, i: int, n: int) -> str:
    """A shard's name relative to OUT: the contract's name, inside its set's folder if it has one."""
    name = shard_name(i, n)
    return f"{folder}/{name}" if folder else name


def shard_count(rows: int, shard_rows: int) -> int:
    """ceil(rows / shard_rows), but at least 1: an empty corpus still has one (empty) shard."""
    return max(1, math.ceil(rows / shard_rows))


def shard_bounds(rows: int, shard_rows: int) -> list[tuple[int, int]]:
    """Global row range [start, stop) of each shard."""
    n = shard_count(rows, shard_rows)
    return [(i * shard_rows, min((i + 1) * shard_rows, rows)) for i in range(n)]


def row_group_bounds(text_bytes: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """Cut consecutive rows into groups whose text bytes sum to at most `budget`, each cut *before* it would
    overflow; a row longer than the budget gets a group of its own."""
    bounds: list[tuple[int, int]] = []
    start, acc = 0, 0
    for i, b in enumerate(text_bytes):
        if i > start and acc + b > budget:
            bounds.append((start, i))
            start, acc = i, 0
        acc += b
    if len(text_bytes) > start:
        bounds.append((start, len(text_bytes)))
    return bounds


def doc_row(doc: Doc, val_permille: int) -> dict[str, Any]:
    """Validate one Doc and compute its columns but minhash_cluster (it needs the order), plus two private
    keys: `_cluster` (the cluster key) and `_pii` (per-kind counts)."""
    if not isinstance(doc, Doc):
        raise TypeError(f"expected Doc, got {type(doc).__name__}")
    if not isinstance(doc.id, str) or not doc.id:
        raise ValueError(f"document id must be a non-empty str, got {doc.id!r}")
    if not isinstance(doc.text, str):
        raise ValueError(f"document {doc.id!r}: text must be a str")
    meta = doc.meta
    if not isinstance(meta, dict):
        raise ValueError(f"document {doc.id!r}: meta must be a dict")
    for key in ("url", "license_spdx"):
        value = meta.get(key)
        if not isinstance(value, str) or not value:
            raise ValueError(f"document {doc.id!r}: meta[{key!r}] is missing or empty; the ledger could not trace it")
    source_id = meta.get("source_id", "")
    lang = meta.get("lang") or "und"
    if not isinstance(source_id, str) or not isinstance(lang, str):
        raise ValueError(f"document {doc.id!r}: source_id and lang must be str")
    pii_redactions = meta.get("pii_redactions", 0)
    if isinstance(pii_redactions, bool) or not isinstance(pii_redactions, int) or not 0 <= pii_redactions <= _INT32_MAX:
        raise ValueError(f"document {doc.id!r}: pii_redactions must be a non-negative int")
    pii = meta.get("pii") or {}
    if not isinstance(pii, dict) or not all(_is_count(v) and isinstance(k, str) for k, v in pii.items()):
        raise ValueError(f"document {doc.id!r}: pii must map kinds (str) to counts (non-negative int)")
    cluster = meta.get("minhash_cluster")
    if cluster is not None and (not isinstance(cluster, str) or not cluster):
        raise ValueError(f"document {doc.id!r}: minhash_cluster must be a root id (non-empty str)")
    try:
        raw = doc.text.encode("utf-8")
        doc.id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"document {doc.id!r}: not encodable as UTF-8 ({exc.reason})") from None
    if len(doc.text) > _INT32_MAX:
        raise ValueError(f"document {doc.id!r}: text longer than an int32 can count")
    digest = hashlib.sha256(raw).digest()
    return {
        "id": doc.id,
        "text": doc.text,
        "source_id": source_id,
        "url": meta["url"],
        "license_spdx": meta["license_spdx"],
        "lang": lang,
        "n_chars": len(doc.text),
        "sha256": digest,
        "minhash_cluster": -1,
        "pii_redactions": pii_redactions,
        "split": split_of(digest, val_permille),
        "_text_bytes": len(raw),
        "_cluster": cluster if cluster is not None else doc.id,
        "_pii": pii,
    }


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def cluster_column(cluster_keys: Sequence[str]) -> list[int]:
    """For rows in output order, the smallest row index among rows sharing the cluster key."""
    first: dict[str, int] = {}
    out = []
    for i, key in enumerate(cluster_keys):
        out.append(first.setdefault(key, i))
    return out


def sum_counts(total: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v


def rows_to_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pydict({c: [r[c] for r in rows] for c in COLUMNS}, schema=SCHEMA)
