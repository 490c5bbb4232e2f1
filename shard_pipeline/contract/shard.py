"""The shard contract's interface under the names docs/formats/corpus-shard.md (section 4) gives it:
`SCHEMA`, `DEFAULT_ROW_GROUP_BYTES`, `DEDUP_DEFAULTS`, `Doc`, `split_of`, `shard_name`, `write_shards`
and `read_shards`. The in-memory writer and the verifying reader are defined here; the rest is
`rules`', `manifest`'s, `writer`'s and `replace`'s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import pyarrow.parquet as pq

from shard_pipeline.contract.manifest import (
    DEDUP_DEFAULTS,
    build_manifest,
    check_manifest_args,
    load_manifest,
    manifest_sets,
    write_manifest,
)
from shard_pipeline.contract.replace import check_replaceable, check_tmp_free, fresh_tmp_dir, write_shards_owner
from shard_pipeline.contract.swap import swap_into_place
from shard_pipeline.contract.rules import (
    DEFAULT_ROW_GROUP_BYTES,
    SCHEMA,
    SPLITS,
    Doc,
    ShardFile,
    check_positive,
    check_val_permille,
    cluster_column,
    doc_row,
    row_group_bounds,
    rows_to_table,
    shard_bounds,
    shard_name,
    split_of,
    sum_counts,
)
from shard_pipeline.contract.writer import write_shard_file
from shard_pipeline.files import sha256_of

__all__ = [
    "SCHEMA",
    "DEFAULT_ROW_GROUP_BYTES",
    "DEDUP_DEFAULTS",
    "Doc",
    "split_of",
    "shard_name",
    "write_shards",
    "read_shards",
    "TamperedShard",
]


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
    """Write `docs` as contract shards into `out`, atomically; return the manifest. Reads every document
    first (it sorts); every check runs before anything is written."""
    out = Path(out)
    check_positive("shard_rows", shard_rows)
    check_positive("row_group_bytes", row_group_bytes)
    check_val_permille(val_permille)
    check_manifest_args(dataset=dataset, version=version, config_sha256=config_sha256, filters=filters, dedup=dedup,
                        ledger_ref=ledger_ref)
    check_replaceable(out)
    owner = write_shards_owner()
    check_tmp_free(out, owner)
    rows, pii = _sorted_rows(docs, val_permille)
    tmp = fresh_tmp_dir(out, owner)
    manifest = build_manifest(dataset=dataset, version=version, config_sha256=config_sha256, shard_rows=shard_rows,
                              val_permille=val_permille, row_group_bytes=row_group_bytes,
                              shards=_write_files(tmp, rows, shard_rows, row_group_bytes), filters=filters, dedup=dedup,
                              pii=pii, ledger_ref=ledger_ref)
    write_manifest(tmp, manifest)
    swap_into_place(tmp, out)
    return manifest


def _sorted_rows(docs: Iterable[Doc], val_permille: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Every document as a row, sorted by id, with its cluster; and the PII counts of them all. A repeated id is refused."""
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
    return rows, pii


def _write_files(tmp: Path, rows: list[dict[str, Any]], shard_rows: int, row_group_bytes: int) -> list[ShardFile]:
    """The shard files of sorted `rows` in `tmp`, every `shard_rows` rows, row groups cut by text bytes."""
    bounds = shard_bounds(len(rows), shard_rows)
    files = []
    for i, (start, stop) in enumerate(bounds):
        shard_rows_ = rows[start:stop]
        groups = row_group_bounds([r["_text_bytes"] for r in shard_rows_], row_group_bytes)
        tables = (rows_to_table(shard_rows_[a:b]) for a, b in groups)
        files.append(write_shard_file(tmp / shard_name(i, len(bounds)), tables))
    return files


class TamperedShard(Exception):
    """A shard's bytes differ from what the manifest recorded."""


def _verified_open(out: Path, entry: dict[str, Any]) -> BinaryIO:
    """Open a shard, hash it through that same open file, and return it rewound: the open file keeps the
    verified inode, so a replace of OUT between the check and the read cannot slip other bytes in."""
    path = Path(out) / entry["name"]
    f = open(path, "rb")
    _, digest = sha256_of(f)
    if digest != entry["sha256"]:
        f.close()
        raise TamperedShard(f"{path}: sha256 {digest} differs from the manifest's {entry['sha256']}")
    f.seek(0)
    return f


def read_shards(out: Path, split: str | None = None) -> Iterator[Doc]:
    """Yield the rows of every shard in manifest order, each file verified against its hash first; the
    arguments and the manifest are checked when called, not on first iteration."""
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
