"""The shard contract: schema, split rule, order, naming, row groups, manifest, atomic replace.

Everything hplt-shard writes goes through the functions here, so the pipeline and the
in-memory `write_shards` produce the same bytes by construction. The rules are in
docs/formats/corpus-shard.md; the manifest's shape in docs/formats/corpus-manifest.schema.json.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import json
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

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
# Counts of what an upstream dedup stage removed; callers override the keys they know.
DEDUP_DEFAULTS: dict[str, Any] = {"exact_removed": 0, "near_removed": 0, "near_kept_tagged": 0}
MANIFEST_NAME = "_MANIFEST.json"
MANIFEST_FORMAT = "hplt-shard/corpus-shard/1"
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


# ---------------------------------------------------------------- rules


def split_of(sha256: bytes, val_permille: int) -> str:
    """'val' when the first 8 bytes of the text's SHA-256, big-endian, mod 1000 are < val_permille.

    A function of the text alone: exact copies never straddle train and val.
    """
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


def manifest_sets(manifest: dict[str, Any]) -> list[tuple[str, str | None, list[dict[str, Any]]]]:
    """(folder, split, shard entries) of each shard set a manifest lists, in manifest order.

    An entry belongs to the set whose folder it is in; one in no set's folder is in none (the
    verifier reports it).
    """
    sets = shard_sets(manifest["params"].get("split_layout", "column"))
    if sets == [("", None)]:
        return [("", None, list(manifest["shards"]))]
    return [(folder, split, [e for e in manifest["shards"] if e["name"].startswith(folder + "/")])
            for folder, split in sets]


def shard_count(rows: int, shard_rows: int) -> int:
    """ceil(rows / shard_rows), but at least 1: an empty corpus still has one (empty) shard."""
    return max(1, math.ceil(rows / shard_rows))


def shard_bounds(rows: int, shard_rows: int) -> list[tuple[int, int]]:
    """Global row range [start, stop) of each shard."""
    n = shard_count(rows, shard_rows)
    return [(i * shard_rows, min((i + 1) * shard_rows, rows)) for i in range(n)]


def row_group_bounds(text_bytes: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """Cut consecutive rows into groups whose text bytes sum to at most `budget`.

    A group is cut *before* it would overflow; a row longer than the budget gets a group of
    its own (also when it is the first row of a shard).
    """
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


# ---------------------------------------------------------------- documents to rows


def doc_row(doc: Doc, val_permille: int) -> dict[str, Any]:
    """Validate one Doc and compute its columns (all but minhash_cluster, which needs the order).

    Returns the row plus two private keys: `_cluster` (the cluster key) and `_pii` (per-kind counts).
    """
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


# ---------------------------------------------------------------- files


class _HashingSink:
    """A write-only file object that hashes what passes through, so a shard is hashed as written."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        mv = memoryview(data)
        self.sha256.update(mv)
        self.size += mv.nbytes
        return self._f.write(mv)

    def flush(self) -> None:
        self._f.flush()

    @property
    def closed(self) -> bool:
        return self._f.closed

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:  # the owner closes the real file after fsync
        pass


def write_shard_file(path: Path, groups: Iterable[pa.Table]) -> ShardFile:
    """Write one shard: one Parquet row group per table in `groups`, zstd, the contract schema.

    Each table is written as exactly one row group (combined into single chunks first, so the
    bytes do not depend on how the caller's arrays were chunked). The file is fsynced.
    """
    rows = text_bytes = val = 0
    with open(path, "wb") as f:
        sink = _HashingSink(f)
        writer = pq.ParquetWriter(
            pa.PythonFile(sink, mode="w"),
            SCHEMA,
            compression="zstd",
            use_dictionary=DICTIONARY_COLUMNS,
        )
        try:
            for table in groups:
                if table.num_rows == 0:
                    continue
                table = table.select(COLUMNS).cast(SCHEMA).combine_chunks()
                writer.write_table(table, row_group_size=table.num_rows)
                rows += table.num_rows
                text_bytes += _utf8_bytes(table.column("text"))
                val += _count_val(table.column("split"))
        finally:
            writer.close()
        f.flush()
        os.fsync(f.fileno())
    return ShardFile(
        name=path.name,
        rows=rows,
        bytes=sink.size,
        sha256=sink.sha256.hexdigest(),
        text_bytes=text_bytes,
        train=rows - val,
        val=val,
    )


def _utf8_bytes(column: pa.ChunkedArray) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.binary_length(column)).as_py() or 0)


def _count_val(column: pa.ChunkedArray) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.equal(column, "val").cast(pa.int64())).as_py() or 0)


def file_sha256(path: Path, chunk: int = 8 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                return h.hexdigest()
            h.update(block)


# ---------------------------------------------------------------- manifest


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
    """The manifest, keys in the documented order (docs/formats/corpus-shard.md).

    `params.split_layout` appears only for "dirs", so column-layout manifests keep their bytes.
    """
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


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    path = directory / MANIFEST_NAME
    with open(path, "wb") as f:
        f.write(manifest_bytes(manifest))
        f.flush()
        os.fsync(f.fileno())


def load_manifest(out: Path) -> dict[str, Any]:
    path = Path(out) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no manifest; not a hplt-shard output") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{path}: not a {MANIFEST_FORMAT} manifest")
    return manifest


# ---------------------------------------------------------------- atomic output


def tmp_dir_for(out: Path) -> Path:
    return out.with_name(out.name + ".tmp")


def fresh_tmp_dir(out: Path) -> Path:
    """`out.tmp`, emptied: a stale one from a crashed run is removed first."""
    tmp = tmp_dir_for(out)
    if tmp.is_symlink() or tmp.is_file():
        tmp.unlink()
    elif tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def check_replaceable(out: Path) -> None:
    """Refuse to replace anything that is not a previous output (a typo must not delete $HOME)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise FileExistsError(f"{out} exists and is not a directory; refusing to replace it")
    if out.exists() and any(out.iterdir()):
        try:
            load_manifest(out)
        except (OSError, ValueError):
            raise FileExistsError(f"{out} exists, is not empty and holds no {MANIFEST_FORMAT} manifest; "
                                  "refusing to replace it") from None


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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def swap_into_place(tmp: Path, out: Path) -> None:
    """Make `tmp` the new `out`; at every moment `out` is the complete old or the complete new one.

    With an existing `out`, the two directories are exchanged in one renameat2(RENAME_EXCHANGE)
    and the old version (now at `tmp`) is deleted. Filesystems without it (some network
    filesystems) fall back to rename(out, out.old) + rename(tmp, out), which leaves a window of
    two syscalls in which `out` is absent but `out.old` is complete.
    """
    check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        os.rename(tmp, out)
    elif _exchange(tmp, out):
        shutil.rmtree(tmp)
    else:
        old = out.with_name(out.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old)
    _fsync_dir(out.parent)


# ---------------------------------------------------------------- the in-memory writer and reader


def write_shards(
    docs: Iterable[Doc],
    out: Path,
    *,
    dataset: str,
    version: str,
    shard_rows: int,
    val_permille: int = 5,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    filters: dict[str, Any] | None = None,
    dedup: dict[str, Any] | None = None,
    ledger_ref: str | None = "corpus/LEDGER.jsonl",
    config_sha256: str = "0" * 64,
) -> dict[str, Any]:
    """Write `docs` as contract shards into `out`, atomically; return the manifest.

    Reads every document first (it sorts): the end of a streaming pipeline. Every check runs
    before anything is written, so bad input leaves `out` and `out.tmp` untouched.
    """
    out = Path(out)
    check_positive("shard_rows", shard_rows)
    check_positive("row_group_bytes", row_group_bytes)
    check_val_permille(val_permille)
    check_manifest_args(dataset=dataset, version=version, config_sha256=config_sha256, filters=filters, dedup=dedup,
                        ledger_ref=ledger_ref)
    check_replaceable(out)
    rows = [doc_row(d, val_permille) for d in docs]
    rows.sort(key=lambda r: r["id"])
    for a, b in zip(rows, rows[1:]):
        if a["id"] == b["id"]:
            raise ValueError(f"repeated document id {a['id']!r} (sources {a['source_id']!r} and {b['source_id']!r})")
    for row, cluster in zip(rows, cluster_column([r["_cluster"] for r in rows])):
        row["minhash_cluster"] = cluster
    pii: dict[str, int] = {}
    for row in rows:
        sum_counts(pii, row["_pii"])

    tmp = fresh_tmp_dir(out)
    bounds = shard_bounds(len(rows), shard_rows)
    files = []
    for i, (start, stop) in enumerate(bounds):
        shard_rows_ = rows[start:stop]
        groups = row_group_bounds([r["_text_bytes"] for r in shard_rows_], row_group_bytes)
        tables = (rows_to_table(shard_rows_[a:b]) for a, b in groups)
        files.append(write_shard_file(tmp / shard_name(i, len(bounds)), tables))
    manifest = build_manifest(
        dataset=dataset,
        version=version,
        config_sha256=config_sha256,
        shard_rows=shard_rows,
        val_permille=val_permille,
        row_group_bytes=row_group_bytes,
        shards=files,
        filters=filters,
        dedup=dedup,
        pii=pii,
        ledger_ref=ledger_ref,
    )
    write_manifest(tmp, manifest)
    swap_into_place(tmp, out)
    return manifest


class TamperedShard(Exception):
    """A shard's bytes differ from what the manifest recorded."""


def verified_shard(out: Path, entry: dict[str, Any]) -> Path:
    path = Path(out) / entry["name"]
    actual = file_sha256(path)
    if actual != entry["sha256"]:
        raise TamperedShard(f"{path}: sha256 {actual} differs from the manifest's {entry['sha256']}")
    return path


def _verified_open(out: Path, entry: dict[str, Any]) -> BinaryIO:
    """Open a shard, hash it through that same open file, and return it rewound.

    Parsing from the file object that was hashed means a replace of OUT between the check and
    the read cannot slip unverified bytes in: the open file keeps the verified inode.
    """
    path = Path(out) / entry["name"]
    f = open(path, "rb")
    h = hashlib.sha256()
    while block := f.read(8 << 20):
        h.update(block)
    if h.hexdigest() != entry["sha256"]:
        f.close()
        raise TamperedShard(f"{path}: sha256 {h.hexdigest()} differs from the manifest's {entry['sha256']}")
    f.seek(0)
    return f


def read_shards(out: Path, split: str | None = None) -> Iterator[Doc]:
    """Yield the rows of every shard in manifest order, each file verified against its hash first.

    Arguments and the manifest are checked when called, not on first iteration.
    """
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None, got {split!r}")
    manifest = load_manifest(out)
    return _rows(Path(out), manifest, split)


def _rows(out: Path, manifest: dict[str, Any], split: str | None) -> Iterator[Doc]:
    # A set whose rows are all of another split is not opened (dirs layout).
    entries = [e for _, set_split, es in manifest_sets(manifest) if split is None or set_split in (None, split) for e in es]
    for entry in entries:
        with _verified_open(out, entry) as f:
            pf = pq.ParquetFile(f)
            if pf.metadata.num_rows != entry["rows"]:
                raise TamperedShard(f"{out / entry['name']}: {pf.metadata.num_rows} rows, the manifest says {entry['rows']}")
            for i in range(pf.num_row_groups):
                for r in pf.read_row_group(i).to_pylist():
                    if split is not None and r["split"] != split:
                        continue
                    yield Doc(
                        id=r["id"],
                        text=r["text"],
                        meta={
                            "source_id": r["source_id"],
                            "url": r["url"],
                            "license_spdx": r["license_spdx"],
                            "lang": r["lang"],
                            "n_chars": r["n_chars"],
                            "sha256": r["sha256"].hex(),
                            "minhash_cluster": r["minhash_cluster"],
                            "pii_redactions": r["pii_redactions"],
                            "split": r["split"],
                        },
                    )
