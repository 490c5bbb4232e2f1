"""The corpus-shard contract (docs/formats/corpus-shard.md), tested through shard_pipeline.contract.shard.

The first fourteen tests are the seed's section 4 table, under its names; the rest are the
author's list ("Your tests"). Property-style tests draw documents from random.Random(seed).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shard_pipeline.contract.swap as swap_mod

import shard_pipeline.contract.replace as replace_mod
import shard_pipeline.contract.shard as shard_mod
from shard_pipeline.contract.manifest import DEDUP_DEFAULTS
from shard_pipeline.contract.rules import (
    DEFAULT_ROW_GROUP_BYTES,
    SCHEMA,
    Doc,
    cluster_column,
    row_group_bounds,
    shard_name,
    split_of,
)
from shard_pipeline.contract.shard import TamperedShard, read_shards, write_shards
from shard_pipeline.files import out_json_bytes
from tests.manifest_schema import assert_valid_manifest, manifest_errors

MANIFEST = "_MANIFEST.json"

# Written out independently of shard.SCHEMA, so a change there is caught here.
EXPECTED_SCHEMA = pa.schema(
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
DICTIONARY_COLUMNS = {"source_id", "license_spdx", "lang", "split"}
MANIFEST_KEYS = [
    "format", "dataset", "version", "config_sha256", "rows", "text_bytes", "splits",
    "params", "shards", "counts", "pii", "ledger", "files",
]


# ---------------------------------------------------------------- helpers



def test_the_contract_interface_is_one_module():
    """The contract's section 4 names one module; code written against it imports everything from there."""
    import inspect

    from shard_pipeline.contract import manifest, rules

    seed = ["SCHEMA", "DEFAULT_ROW_GROUP_BYTES", "DEDUP_DEFAULTS", "Doc", "split_of", "shard_name", "write_shards",
            "read_shards"]
    assert set(seed) <= set(shard_mod.__all__)
    assert all(hasattr(shard_mod, name) for name in shard_mod.__all__)
    # the same objects the rules define, not copies that could drift
    assert shard_mod.SCHEMA is rules.SCHEMA and shard_mod.split_of is rules.split_of
    assert shard_mod.DEDUP_DEFAULTS is manifest.DEDUP_DEFAULTS and shard_mod.Doc is rules.Doc
    assert isinstance(shard_mod.SCHEMA, pa.Schema) and shard_mod.DEFAULT_ROW_GROUP_BYTES == 64 * 1024 * 1024
    assert list(inspect.signature(shard_mod.split_of).parameters) == ["sha256", "val_permille"]
    assert list(inspect.signature(shard_mod.shard_name).parameters) == ["i", "n"]
    assert list(inspect.signature(shard_mod.read_shards).parameters) == ["out", "split"]
    w = inspect.signature(shard_mod.write_shards).parameters
    assert list(w) == ["docs", "out", "dataset", "version", "shard_rows", "val_permille", "row_group_bytes", "filters",
                       "dedup", "ledger_ref", "config_sha256"]
    assert [w[k].default for k in ("val_permille", "row_group_bytes", "filters", "dedup", "ledger_ref",
                                   "config_sha256")] == [5, shard_mod.DEFAULT_ROW_GROUP_BYTES, None, None,
                                                         "corpus/LEDGER.jsonl", "0" * 64]

def doc(id_: str, text: str, **meta) -> Doc:
    meta.setdefault("url", f"https://example.org/{id_}")
    meta.setdefault("license_spdx", "CC0-1.0")
    return Doc(id_, text, meta)


def write(docs, out: Path, **kw) -> dict:
    kw.setdefault("dataset", "test-corpus")
    kw.setdefault("version", "1")
    kw.setdefault("shard_rows", 10)
    return write_shards(docs, out, **kw)


def u64_be(text: str) -> int:
    """The contract's rule, written out here: first 8 bytes of SHA-256, big-endian."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def expected_split(text: str, val_permille: int) -> str:
    return "val" if u64_be(text) % 1000 < val_permille else "train"


def shard_files(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.name != MANIFEST)


def all_rows(out: Path) -> list[dict]:
    """Every row, read with pyarrow (not read_shards), in manifest order."""
    m = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    rows = []
    for entry in m["shards"]:
        rows.extend(pq.read_table(out / entry["name"]).to_pylist())
    return rows


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under root, by relative path."""
    snap: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            snap[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            snap[os.path.relpath(p, root)] = Path(p).read_bytes()
    return snap


def output_is_complete(out: Path) -> bool:
    """out holds a manifest and every shard it lists, with matching hashes."""
    try:
        m = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        return all(
            hashlib.sha256((out / e["name"]).read_bytes()).hexdigest() == e["sha256"] for e in m["shards"]
        )
    except (OSError, ValueError, KeyError):
        return False


ALPHABET = "abcxyzAZ:éßø漢字😀 .!-0123456789"
SOURCES = ["web", "books", "news", "Wiki", "ü", "a"]
PII_KINDS = ["email", "phone", "ip_address", "iban"]


def random_docs(rng: random.Random, n: int, *, dup_share=0.1, tag_share=0.2, pii_share=0.3, max_len=60) -> list[Doc]:
    ids: set[str] = set()
    docs: list[Doc] = []
    while len(docs) < n:
        id_ = f"{rng.choice(SOURCES)}:{rng.randrange(10 ** rng.randint(1, 4))}"
        if id_ in ids:
            continue
        ids.add(id_)
        if docs and rng.random() < dup_share:
            text = rng.choice(docs).text
        else:
            text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, max_len)))
        meta = {
            "url": f"https://example.org/{id_}",
            "license_spdx": rng.choice(["CC0-1.0", "CC-BY-4.0", "CC-BY-SA-4.0"]),
            "source_id": id_.split(":")[0],
        }
        if rng.random() < 0.7:
            meta["lang"] = rng.choice(["en", "nb", "de"])
        if docs and rng.random() < tag_share:
            meta["minhash_cluster"] = rng.choice(docs).id
        if rng.random() < pii_share:
            meta["pii"] = {k: rng.randint(0, 5) for k in rng.sample(PII_KINDS, rng.randint(1, 3))}
            meta["pii_redactions"] = sum(meta["pii"].values())
        docs.append(Doc(id_, text, meta))
    return docs


def hand_docs() -> list[Doc]:
    return [
        doc("web:2", "Tom has a red ball.", minhash_cluster="web:10"),
        doc("web:10", "Tom has a red ball!", minhash_cluster="web:10"),
        doc("books:0", "Mia naps."),
    ]


def row_groups_text_bytes(path: Path) -> list[list[int]]:
    """Per row group of a file, the UTF-8 byte length of each row's text, read back with pyarrow."""
    pf = pq.ParquetFile(path)
    return [
        [len(t.encode("utf-8")) for t in pf.read_row_group(i, columns=["text"]).column("text").to_pylist()]
        for i in range(pf.num_row_groups)
    ]


def assert_groups_fit_and_are_maximal(groups: list[list[int]], budget: int) -> None:
    for gi, g in enumerate(groups):
        assert g, "empty row group"
        assert sum(g) <= budget or len(g) == 1, f"group {gi} overflows the budget: {g}"
        if gi + 1 < len(groups):
            nxt = groups[gi + 1][0]
            assert sum(g) + nxt > budget, f"group {gi} {g} was cut early: the next row ({nxt} bytes) fits"


# ---------------------------------------------------------------- the section 4 table


def test_hand_example(tmp_path):
    texts = {"web:2": "Tom has a red ball.", "web:10": "Tom has a red ball!", "books:0": "Mia naps."}
    expect = {
        "web:2": ("ba7f5216fe451c81", 13438550071805549697, 697, "train"),
        "web:10": ("39777282a7bff242", 4140904287876149826, 826, "train"),
        "books:0": ("fcd7f3a1b48b4158", 18219298693394940248, 248, "val"),
    }
    for id_, (prefix, u, mod, split) in expect.items():
        h = hashlib.sha256(texts[id_].encode("utf-8")).digest()
        assert h[:8].hex() == prefix
        assert int.from_bytes(h[:8], "big") == u
        assert u % 1000 == mod
        assert split_of(h, 300) == split

    out = tmp_path / "out"
    m = write(hand_docs(), out, shard_rows=2, val_permille=300)
    assert [p.name for p in shard_files(out)] == ["shard-00000-of-00002.parquet", "shard-00001-of-00002.parquet"]
    assert [e["name"] for e in m["shards"]] == [p.name for p in shard_files(out)]
    assert [pq.ParquetFile(p).metadata.num_rows for p in shard_files(out)] == [2, 1]
    assert [e["rows"] for e in m["shards"]] == [2, 1]

    rows = all_rows(out)
    assert [r["id"] for r in rows] == ["books:0", "web:10", "web:2"]
    assert [r["split"] for r in rows] == ["val", "train", "train"]
    assert [r["minhash_cluster"] for r in rows] == [0, 1, 1]
    assert [r["n_chars"] for r in rows] == [9, 19, 19]
    assert [r["text"] for r in rows] == ["Mia naps.", "Tom has a red ball!", "Tom has a red ball."]
    assert m["rows"] == 3 and m["splits"] == {"train": 2, "val": 1}
    assert m["text_bytes"] == 9 + 19 + 19

    # The boundary: 248 < 248 is false.
    mia = hashlib.sha256(b"Mia naps.").digest()
    assert split_of(mia, 248) == "train"
    assert split_of(mia, 249) == "val"
    out248 = tmp_path / "out248"
    m248 = write(hand_docs(), out248, shard_rows=2, val_permille=248)
    assert [r["split"] for r in all_rows(out248)] == ["train", "train", "train"]
    assert m248["splits"] == {"train": 3, "val": 0}


def test_schema_compression_and_manifest(tmp_path):
    rng = random.Random(6)
    docs = random_docs(rng, 57)
    out = tmp_path / "out"
    m = write(docs, out, shard_rows=20, val_permille=400, row_group_bytes=200)
    files = shard_files(out)
    assert len(files) == 3

    # Exact Arrow schema, physical types, zstd everywhere, dictionary only on the four columns.
    assert EXPECTED_SCHEMA.equals(SCHEMA)
    for path in files:
        pf = pq.ParquetFile(path)
        arrow = pf.schema_arrow
        assert arrow.equals(EXPECTED_SCHEMA), f"{path.name}: {arrow}"
        assert arrow.names == EXPECTED_SCHEMA.names
        assert all(not f.nullable for f in arrow)
        col = pf.schema.column(EXPECTED_SCHEMA.get_field_index("sha256"))
        assert col.physical_type == "FIXED_LEN_BYTE_ARRAY" and col.length == 32
        assert pf.metadata.num_row_groups >= 2  # the budget forced several groups
        for g in range(pf.metadata.num_row_groups):
            rg = pf.metadata.row_group(g)
            assert rg.num_columns == len(EXPECTED_SCHEMA)
            for c in range(rg.num_columns):
                chunk = rg.column(c)
                assert chunk.compression == "ZSTD", (path.name, g, chunk.path_in_schema, chunk.compression)
                dictionary = "RLE_DICTIONARY" in chunk.encodings or "PLAIN_DICTIONARY" in chunk.encodings
                assert dictionary == (chunk.path_in_schema in DICTIONARY_COLUMNS), (chunk.path_in_schema, chunk.encodings)

    # Manifest: valid against the JSON schema, equal on disk and returned, every number true.
    raw = (out / MANIFEST).read_bytes()
    on_disk = json.loads(raw)
    assert on_disk == m
    assert_valid_manifest(on_disk)
    assert list(on_disk) == MANIFEST_KEYS
    assert [e["name"] for e in on_disk["shards"]] == [p.name for p in files]
    total_text = 0
    for entry in on_disk["shards"]:
        data = (out / entry["name"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["bytes"] == len(data) == (out / entry["name"]).stat().st_size
        table = pq.read_table(out / entry["name"])
        assert entry["rows"] == table.num_rows == pq.ParquetFile(out / entry["name"]).metadata.num_rows
        tb = sum(len(t.encode("utf-8")) for t in table.column("text").to_pylist())
        assert entry["text_bytes"] == tb
        total_text += tb
    assert on_disk["rows"] == len(docs) == sum(e["rows"] for e in on_disk["shards"])
    assert on_disk["text_bytes"] == total_text == sum(len(d.text.encode("utf-8")) for d in docs)
    splits = [r["split"] for r in all_rows(out)]
    assert on_disk["splits"] == {"train": splits.count("train"), "val": splits.count("val")}
    assert on_disk["params"] == {"shard_rows": 20, "val_permille": 400, "row_group_bytes": 200}

    # No stray files, in out or next to it.
    assert sorted(os.listdir(out)) == sorted([MANIFEST] + [e["name"] for e in on_disk["shards"]])
    assert os.listdir(tmp_path) == ["out"]

    # The JSON schema can fail.
    bad = [
        {**on_disk, "created_at": "2024-01-01"},
        {**on_disk, "shards": [{**on_disk["shards"][0], "sha256": "ABC"}]},
        {**on_disk, "shards": [{**on_disk["shards"][0], "name": "shard-0-of-1.parquet"}]},
        {**on_disk, "shards": []},
        {**on_disk, "counts": {"filters": {}, "dedup": {"exact_removed": 0}}},
        {**on_disk, "params": {**on_disk["params"], "val_permille": 1001}},
        {k: v for k, v in on_disk.items() if k != "ledger"},
        {**on_disk, "files": [{"name": "x"}]},
    ]
    for b in bad:
        assert manifest_errors(b)
        with pytest.raises(AssertionError):
            assert_valid_manifest(b)
    ok_files = {**on_disk, "files": [{"name": "_LEDGER.jsonl", "bytes": 3, "sha256": "0" * 64, "rows": 1}]}
    assert_valid_manifest(ok_files)


def test_sorted_by_id_in_byte_order(tmp_path):
    ids = ["a:2", "a:10", "a:9", "a:100", "B:1", "a", "é:1", "z:0", "😀:1", "\uffff:1", "ä:1", "a:1"]
    rng = random.Random(1)
    shuffled = ids[:]
    rng.shuffle(shuffled)
    docs = [doc(i, f"text of {i}") for i in shuffled]
    out = tmp_path / "out"
    write(docs, out, shard_rows=5)
    got = [r["id"] for r in all_rows(out)]
    by_bytes = sorted(ids, key=lambda s: s.encode("utf-8"))
    assert got == by_bytes == sorted(ids)
    assert got.index("a:10") < got.index("a:2") < got.index("a:9")  # string, not numeric
    assert got.index("B:1") < got.index("a")  # no case folding
    assert got.index("\uffff:1") < got.index("😀:1")  # code points / UTF-8 bytes, not UTF-16 units

    # Property: random ids, all shards concatenated are in UTF-8 byte order.
    rdocs = random_docs(random.Random(2), 200)
    out2 = tmp_path / "out2"
    write(rdocs, out2, shard_rows=17)
    got2 = [r["id"] for r in all_rows(out2)]
    assert got2 == sorted((d.id for d in rdocs), key=lambda s: s.encode("utf-8"))

    # n_chars in code points, lang default, untagged rows their own cluster, other defaults.
    text = "héllo 😀"  # 7 code points, 11 UTF-8 bytes, 8 UTF-16 units
    docs3 = [
        doc("x:1", text),
        doc("x:2", "plain", lang="nb", source_id="src", pii_redactions=4),
        doc("x:3", "", lang=None),
        doc("x:0", "ß"),
    ]
    out3 = tmp_path / "out3"
    write(docs3, out3)
    rows = {r["id"]: r for r in all_rows(out3)}
    assert rows["x:1"]["n_chars"] == 7
    assert rows["x:0"]["n_chars"] == 1 and rows["x:3"]["n_chars"] == 0
    assert rows["x:1"]["lang"] == "und" and rows["x:3"]["lang"] == "und" and rows["x:2"]["lang"] == "nb"
    assert [r["minhash_cluster"] for r in all_rows(out3)] == [0, 1, 2, 3]
    assert rows["x:1"]["pii_redactions"] == 0 and rows["x:2"]["pii_redactions"] == 4
    assert rows["x:1"]["source_id"] == "" and rows["x:2"]["source_id"] == "src"
    assert rows["x:1"]["url"] == "https://example.org/x:1" and rows["x:1"]["license_spdx"] == "CC0-1.0"


def test_split_follows_the_hash(tmp_path):
    rng = random.Random(42)
    base = random_docs(rng, 300, dup_share=0.0)
    # Exact copies under other ids (and other metadata).
    copies = [doc(f"copy:{i}", d.text, source_id="mirror", license_spdx="CC-BY-4.0") for i, d in enumerate(rng.sample(base, 60))]
    docs = base + copies
    for v in (137, 500):
        out = tmp_path / f"out{v}"
        write(docs, out, shard_rows=50, val_permille=v)
        rows = all_rows(out)
        assert len(rows) == len(docs)
        le_disagrees = 0
        for r in rows:
            h = hashlib.sha256(r["text"].encode("utf-8")).digest()
            assert r["sha256"] == h
            assert r["split"] == ("val" if int.from_bytes(h[:8], "big") % 1000 < v else "train"), r["id"]
            le = "val" if int.from_bytes(h[:8], "little") % 1000 < v else "train"
            le_disagrees += le != r["split"]
        assert le_disagrees > 0, "the data cannot tell big- from little-endian"
        by_text: dict[str, set[str]] = {}
        for r in rows:
            by_text.setdefault(r["text"], set()).add(r["split"])
        assert all(len(s) == 1 for s in by_text.values()), "exact copies straddle train and val"
        assert sum(1 for d in docs if d.id.startswith("copy:")) == 60
        split_by_id = {r["id"]: r["split"] for r in rows}

        # Stable under reordering and subsets.
        for trial in range(3):
            sub = rng.sample(docs, rng.randint(1, len(docs)))
            out_sub = tmp_path / f"sub{v}-{trial}"
            write(sub, out_sub, shard_rows=7, val_permille=v)
            assert all(split_by_id[r["id"]] == r["split"] for r in all_rows(out_sub))

    # split_of itself, on random digests and every permille edge.
    for _ in range(2000):
        h = rng.randbytes(32)
        v = rng.choice([0, 1, 999, 1000, rng.randint(0, 1000)])
        assert split_of(h, v) == ("val" if int.from_bytes(h[:8], "big") % 1000 < v else "train")
    for _ in range(100):
        h = rng.randbytes(32)
        assert split_of(h, 0) == "train" and split_of(h, 1000) == "val"
        u = int.from_bytes(h[:8], "big") % 1000
        assert split_of(h, u) == "train" and split_of(h, u + 1) == "val"


def test_val_share_matches_permille(tmp_path):
    rng = random.Random(4000)
    docs = [doc(f"d:{i}", f"document {i} {rng.random()}") for i in range(4000)]
    out = tmp_path / "out"
    m = write(docs, out, shard_rows=1000, val_permille=100)
    val = sum(r["split"] == "val" for r in all_rows(out))
    assert m["splits"]["val"] == val and m["splits"]["train"] == 4000 - val
    sd = math.sqrt(4000 * 0.1 * 0.9)
    assert abs(val - 400) <= 4 * sd, f"{val} val docs, expected 400 ± {4 * sd:.0f}"

    digest = hashlib.sha256(b"x").digest()
    for bad in (-1, 1001, 1.5, True, False, "100", None):
        with pytest.raises(ValueError):
            split_of(digest, bad)
        target = tmp_path / f"bad-permille-{bad!r}"
        with pytest.raises(ValueError):
            write(docs[:3], target, val_permille=bad)
        assert not target.exists()
    for bad in (0, -1, True, 1.5, None):
        target = tmp_path / f"bad-rows-{bad!r}"
        with pytest.raises(ValueError):
            write(docs[:3], target, shard_rows=bad)
        assert not target.exists()
    for bad in (0, -5, True):
        target = tmp_path / f"bad-rg-{bad!r}"
        with pytest.raises(ValueError):
            write(docs[:3], target, row_group_bytes=bad)
        assert not target.exists()
    for bad in (b"short", hashlib.sha256(b"x").hexdigest()):
        with pytest.raises(ValueError):
            split_of(bad, 5)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "out"]
    assert leftovers == [], leftovers


def test_shards_and_names(tmp_path):
    assert shard_name(0, 1) == "shard-00000-of-00001.parquet"
    assert shard_name(2, 3) == "shard-00002-of-00003.parquet"
    assert shard_name(41, 12345) == "shard-00041-of-12345.parquet"
    for i, n in ((1, 1), (-1, 3), (3, 3)):
        with pytest.raises(ValueError):
            shard_name(i, n)

    docs = [doc(f"r:{i:02d}", f"row {i}") for i in range(23)]
    random.Random(3).shuffle(docs)
    out = tmp_path / "out"
    m = write(docs, out, shard_rows=10)
    names = ["shard-00000-of-00003.parquet", "shard-00001-of-00003.parquet", "shard-00002-of-00003.parquet"]
    assert [p.name for p in shard_files(out)] == names
    assert [e["name"] for e in m["shards"]] == names
    per_file = [[r["id"] for r in pq.read_table(out / n).to_pylist()] for n in names]
    assert [len(ids) for ids in per_file] == [10, 10, 3]
    assert per_file == [[f"r:{i:02d}" for i in range(a, b)] for a, b in ((0, 10), (10, 20), (20, 23))]

    for n_docs, shard_rows, expected in ((20, 10, [10, 10]), (1, 10, [1]), (5, 1, [1] * 5), (10, 100, [10])):
        o = tmp_path / f"o{n_docs}-{shard_rows}"
        mm = write(docs[:n_docs], o, shard_rows=shard_rows)
        n = len(expected)
        assert [e["name"] for e in mm["shards"]] == [f"shard-{i:05d}-of-{n:05d}.parquet" for i in range(n)]
        assert [e["rows"] for e in mm["shards"]] == expected
        assert len(shard_files(o)) == n

    # Empty corpus: exactly one empty shard that pyarrow opens.
    empty = tmp_path / "empty"
    me = write([], empty, shard_rows=10)
    assert sorted(os.listdir(empty)) == [MANIFEST, "shard-00000-of-00001.parquet"]
    pf = pq.ParquetFile(empty / "shard-00000-of-00001.parquet")
    assert pf.metadata.num_rows == 0
    assert pf.schema_arrow.equals(EXPECTED_SCHEMA)
    assert pq.read_table(empty / "shard-00000-of-00001.parquet").num_rows == 0
    assert me["rows"] == 0 and me["text_bytes"] == 0 and me["splits"] == {"train": 0, "val": 0}
    assert len(me["shards"]) == 1 and me["shards"][0]["rows"] == 0
    assert_valid_manifest(me)
    assert list(read_shards(empty)) == []


def test_row_groups_are_cut_by_text_bytes(tmp_path):
    budget = 100
    # Text byte lengths per row, in id order; "é" is two bytes, so chars and bytes differ.
    lengths = [40, 60, 1, 150, 30, 30, 200, 50, 50, 10, 99, 2]
    docs = [doc(f"r:{i:02d}", "é" * (n // 2) + "x" * (n % 2)) for i, n in enumerate(lengths)]
    assert [len(d.text.encode("utf-8")) for d in docs] == lengths
    out = tmp_path / "out"
    m = write(docs, out, shard_rows=6, row_group_bytes=budget)
    assert m["params"]["row_group_bytes"] == budget
    groups = [row_groups_text_bytes(p) for p in shard_files(out)]
    assert groups == [
        [[40, 60], [1], [150], [30, 30]],  # 40+60 = 100 fits exactly; 150 alone
        [[200], [50, 50], [10], [99], [2]],  # a long document first in a shard, alone
    ], groups
    for g in groups:
        assert_groups_fit_and_are_maximal(g, budget)

    # Property: random texts and budgets; every group fits (or is one long row) and is maximal.
    rng = random.Random(10)
    for trial in range(12):
        rdocs = random_docs(rng, rng.randint(1, 80), max_len=rng.choice([5, 40, 200]))
        b = rng.choice([1, 20, 64, 150, 500, 10_000])
        sr = rng.randint(1, 30)
        o = tmp_path / f"r{trial}"
        write(rdocs, o, shard_rows=sr, row_group_bytes=b)
        total_rows = 0
        by_id = {d.id: len(d.text.encode("utf-8")) for d in rdocs}
        ids = sorted(by_id)
        for p in shard_files(o):
            g = row_groups_text_bytes(p)
            assert_groups_fit_and_are_maximal(g, b)
            flat = [x for grp in g for x in grp]
            assert flat == [by_id[i] for i in ids[total_rows : total_rows + len(flat)]]
            total_rows += len(flat)
        assert total_rows == len(rdocs)

    # The helper itself.
    assert row_group_bounds([], 10) == []
    assert row_group_bounds([11], 10) == [(0, 1)]
    assert row_group_bounds([5, 5, 5], 10) == [(0, 2), (2, 3)]
    assert row_group_bounds([0, 0, 10, 0, 1], 10) == [(0, 4), (4, 5)]
    assert DEFAULT_ROW_GROUP_BYTES == 64 * 1024 * 1024


def test_output_is_deterministic(tmp_path):
    rng = random.Random(7)
    docs = random_docs(rng, 150, tag_share=0.3, pii_share=0.5)
    kw = dict(shard_rows=40, val_permille=250, row_group_bytes=300, filters={"short": 3, "lang": 1}, dedup={"near_removed": 2})
    a = tmp_path / "a" / "out"
    write(docs, a, **kw)
    time.sleep(1.1)  # a timestamp with one-second resolution would now differ
    shuffled = docs[:]
    rng.shuffle(shuffled)
    b = tmp_path / "b" / "out"
    write(shuffled, b, **kw)
    snap_a, snap_b = snapshot(a), snapshot(b)
    assert sorted(snap_a) == sorted(snap_b)
    for name in snap_a:
        assert snap_a[name] == snap_b[name], f"{name} differs"
    # A generator in reverse order, written over the previous output in place.
    write((d for d in reversed(docs)), a, **kw)
    assert snapshot(a) == snap_b


def test_cluster_column_from_near_dedup(tmp_path):
    assert cluster_column([]) == []
    assert cluster_column(["a", "b", "a", "c", "b", "a"]) == [0, 1, 0, 3, 1, 0]
    docs = [
        doc("x:1", "root, untagged"),  # root without its own tag
        doc("y:0", "near copy 1", minhash_cluster="x:1"),
        doc("x:2", "near copy 2", minhash_cluster="x:1"),
        doc("c:1", "root tagged with itself", minhash_cluster="c:1"),
        doc("b:9", "copy of c:1", minhash_cluster="c:1"),
        doc("m:1", "root dropped upstream", minhash_cluster="gone:0"),
        doc("m:2", "root dropped upstream 2", minhash_cluster="gone:0"),
        doc("a:5", "alone"),
    ]
    # Sorted: a:5 b:9 c:1 m:1 m:2 x:1 x:2 y:0  -> rows 0..7
    out = tmp_path / "out"
    write(docs, out, shard_rows=3)
    rows = all_rows(out)
    assert [r["id"] for r in rows] == ["a:5", "b:9", "c:1", "m:1", "m:2", "x:1", "x:2", "y:0"]
    assert [r["minhash_cluster"] for r in rows] == [0, 1, 1, 3, 3, 5, 5, 5]  # global, across shards

    # Property against an independent computation.
    rng = random.Random(44)
    rdocs = random_docs(rng, 250, tag_share=0.4)
    out2 = tmp_path / "out2"
    write(rdocs, out2, shard_rows=33)
    rows = all_rows(out2)
    key = {d.id: d.meta.get("minhash_cluster", d.id) for d in rdocs}
    first: dict[str, int] = {}
    for i, r in enumerate(rows):
        first.setdefault(key[r["id"]], i)
    for i, r in enumerate(rows):
        c = r["minhash_cluster"]
        assert c == first[key[r["id"]]]
        assert c <= i and key[rows[c]["id"]] == key[r["id"]]


def test_pii_totals(tmp_path):
    docs = [
        doc("p:1", "a", pii={"phone": 1, "email": 2}, pii_redactions=3),
        doc("p:2", "b", pii={"email": 3}, pii_redactions=3),
        doc("p:3", "c", pii={"ip_address": 4, "phone": 0}, pii_redactions=4),
        doc("p:4", "d"),
    ]
    out = tmp_path / "out"
    m = write(docs, out)
    assert m["pii"] == {"email": 5, "ip_address": 4, "phone": 1}
    assert list(m["pii"]) == ["email", "ip_address", "phone"]  # sorted keys
    assert json.loads((out / MANIFEST).read_text(encoding="utf-8"))["pii"] == m["pii"]
    assert {r["id"]: r["pii_redactions"] for r in all_rows(out)} == {"p:1": 3, "p:2": 3, "p:3": 4, "p:4": 0}
    assert write([doc("q:1", "x")], tmp_path / "none")["pii"] == {}

    # Property: random docs, sums match, files hash true.
    rng = random.Random(5)
    rdocs = random_docs(rng, 120, pii_share=0.6)
    out2 = tmp_path / "out2"
    m2 = write(rdocs, out2, shard_rows=25)
    expect: dict[str, int] = {}
    for d in rdocs:
        for k, v in d.meta.get("pii", {}).items():
            expect[k] = expect.get(k, 0) + v
    assert m2["pii"] == expect and list(m2["pii"]) == sorted(expect)
    by_id = {d.id: d.meta.get("pii_redactions", 0) for d in rdocs}
    assert all(r["pii_redactions"] == by_id[r["id"]] for r in all_rows(out2))
    for e in m2["shards"]:
        assert hashlib.sha256((out2 / e["name"]).read_bytes()).hexdigest() == e["sha256"]


def test_counts_and_key_order(tmp_path):
    assert DEDUP_DEFAULTS == {"exact_removed": 0, "near_removed": 0, "near_kept_tagged": 0}
    defaults_before = dict(DEDUP_DEFAULTS)
    filters = {"too_short": 7, "lang": 3, "boilerplate": 0}  # deliberately unsorted
    dedup = {"near_removed": 5, "exact_removed": 2, "extra_stage": 1}
    out = tmp_path / "out"
    m = write(
        hand_docs(), out, shard_rows=2, val_permille=300, filters=filters, dedup=dedup,
        dataset="korpus-ø", version="2024.1", ledger_ref="ledger/L.jsonl", config_sha256="ab" * 32,
    )
    raw = (out / MANIFEST).read_bytes()
    on_disk = json.loads(raw)
    assert raw == (json.dumps(on_disk, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    assert raw.endswith(b"}\n") and not raw.endswith(b"\n\n")
    assert "korpus-ø".encode("utf-8") in raw and b"\\u00f8" not in raw
    assert on_disk == m
    assert list(on_disk) == MANIFEST_KEYS
    assert list(on_disk["splits"]) == ["train", "val"]
    assert list(on_disk["params"]) == ["shard_rows", "val_permille", "row_group_bytes"]
    assert all(list(e) == ["name", "rows", "bytes", "sha256", "text_bytes"] for e in on_disk["shards"])
    assert list(on_disk["counts"]) == ["filters", "dedup"]

    assert on_disk["format"] == "hplt-shard/corpus-shard/1"
    assert (on_disk["dataset"], on_disk["version"]) == ("korpus-ø", "2024.1")
    assert on_disk["config_sha256"] == "ab" * 32
    assert on_disk["ledger"] == "ledger/L.jsonl"
    assert on_disk["files"] == []
    assert on_disk["counts"]["filters"] == filters
    assert list(on_disk["counts"]["filters"]) == list(filters)  # as given
    assert on_disk["counts"]["dedup"] == {"exact_removed": 2, "near_removed": 5, "near_kept_tagged": 0, "extra_stage": 1}
    assert list(on_disk["counts"]["dedup"]) == ["exact_removed", "near_removed", "near_kept_tagged", "extra_stage"]
    assert DEDUP_DEFAULTS == defaults_before
    assert_valid_manifest(on_disk)

    m0 = write(hand_docs(), tmp_path / "defaults", shard_rows=2)
    assert m0["counts"] == {"filters": {}, "dedup": DEDUP_DEFAULTS}
    assert list(m0["counts"]["dedup"]) == list(DEDUP_DEFAULTS)
    assert m0["ledger"] == "corpus/LEDGER.jsonl" and m0["config_sha256"] == "0" * 64
    assert m0["params"]["val_permille"] == 5 and m0["params"]["row_group_bytes"] == DEFAULT_ROW_GROUP_BYTES


def test_rejects_bad_input(tmp_path):
    good = [doc("g:1", "fine"), doc("g:2", "also fine")]
    cases = {
        "no url": Doc("b:1", "t", {"license_spdx": "CC0-1.0"}),
        "empty url": doc("b:1", "t", url=""),
        "no license": Doc("b:1", "t", {"url": "https://e.org/b"}),
        "empty license": doc("b:1", "t", license_spdx=""),
        "None license": doc("b:1", "t", license_spdx=None),
        "empty id": doc("", "t"),
        "text not str": doc("b:1", b"bytes"),
        "negative pii_redactions": doc("b:1", "t", pii_redactions=-1),
        "bool pii_redactions": doc("b:1", "t", pii_redactions=True),
        "bad cluster tag": doc("b:1", "t", minhash_cluster=7),
        "bad pii": doc("b:1", "t", pii={"email": "two"}),
        "lone surrogate": doc("b:1", "bad \ud800 text"),
    }
    for name, bad in cases.items():
        target = tmp_path / name.replace(" ", "-")
        with pytest.raises(ValueError):
            write(good + [bad], target)
        assert not target.exists(), name
    # Repeated id: same text or different text, from different sources.
    for dup in ([doc("g:1", "fine")], [doc("g:1", "other text", source_id="mirror")]):
        target = tmp_path / "dup"
        with pytest.raises(ValueError, match="repeated"):
            write(good + dup, target)
        assert not target.exists()
    with pytest.raises(ValueError):
        write(good, tmp_path / "rows0", shard_rows=0)
    assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)

    # Bad input over an existing output leaves it byte-identical, and no out.tmp appears.
    out = tmp_path / "out"
    write(good, out)
    before = snapshot(out)
    for bad in (cases["no license"], cases["no url"], doc("g:2", "dup")):
        with pytest.raises(ValueError):
            write(good + [bad], out)
        assert snapshot(out) == before
    assert os.listdir(tmp_path) == ["out"]


def test_atomic_replace(tmp_path, monkeypatch):
    rng = random.Random(13)
    v1 = random_docs(rng, 30)
    v2 = [Doc(f"v2/{d.id}", d.text, d.meta) for d in random_docs(rng, 8)]  # ids disjoint from v1
    out = tmp_path / "out"
    m1 = write(v1, out, shard_rows=10)
    assert len(m1["shards"]) == 3
    before = snapshot(out)
    rows_before = [(d.id, d.text) for d in read_shards(out)]
    assert len(rows_before) == 30

    # 1. A failing write (missing license) leaves the previous out byte-identical and usable.
    with pytest.raises(ValueError):
        write(v2 + [Doc("bad:1", "no license", {"url": "https://e.org"})], out, shard_rows=10)
    assert snapshot(out) == before
    assert [(d.id, d.text) for d in read_shards(out)] == rows_before

    # 2. An exception in the middle of writing shards (the 2nd shard) does too.
    real = shard_mod.write_shard_file
    calls = []

    def failing(path, groups):
        calls.append(path)
        if len(calls) == 2:
            raise RuntimeError("disk full (injected)")
        return real(path, groups)

    monkeypatch.setattr(shard_mod, "write_shard_file", failing)
    with pytest.raises(RuntimeError, match="injected"):
        write(v1 + v2, out, shard_rows=5)
    monkeypatch.setattr(shard_mod, "write_shard_file", real)
    assert len(calls) == 2
    assert all(Path(p).parent != out for p in calls), "shards were written straight into out"
    assert snapshot(out) == before
    assert [(d.id, d.text) for d in read_shards(out)] == rows_before

    # 3. A stale out.tmp with junk (the crashed run's, plus more) is cleared by the next success:
    # it carries the marker write_shards leaves (an unmarked one is refused, below).
    tmp = tmp_path / "out.tmp"
    tmp.mkdir(exist_ok=True)
    (tmp / replace_mod.TMP_MARKER).write_text(replace_mod.WRITE_SHARDS_OWNER + "\n")
    (tmp / "junk.txt").write_text("junk")
    (tmp / "sub").mkdir()
    (tmp / "sub" / "deeper.parquet").write_bytes(b"PAR1junk")
    (tmp / MANIFEST).write_text("{}")

    # Every deletion happens while out is complete (old or new), never half of each.
    seen = []

    def checked_rmtree(path, *a, **k):
        assert Path(path) != out, "the live output is deleted instead of swapped"
        seen.append((output_is_complete(out), json.loads((out / MANIFEST).read_text())["rows"]))
        return shutil_rmtree(path, *a, **k)

    import shutil

    shutil_rmtree = shutil.rmtree
    remove_previous = swap_mod.remove_previous

    def checked_remove(old, listed):
        assert Path(old) != out, "the live output is deleted instead of swapped"
        seen.append((output_is_complete(out), json.loads((out / MANIFEST).read_text())["rows"]))
        return remove_previous(old, listed)

    monkeypatch.setattr(replace_mod, "shutil", SimpleNamespace(rmtree=checked_rmtree))
    monkeypatch.setattr(swap_mod, "remove_previous", checked_remove)
    m2 = write(v2, out, shard_rows=10)
    monkeypatch.setattr(replace_mod, "shutil", shutil)
    assert seen and all(ok for ok, _ in seen)
    assert seen[-1][1] == 8  # the old version is deleted only once the new one is in place
    assert not tmp.exists()
    assert sorted(os.listdir(tmp_path)) == ["out"]
    assert sorted(os.listdir(out)) == [MANIFEST, "shard-00000-of-00001.parquet"]  # no v1 shard left
    fresh = tmp_path / "fresh" / "out"
    write(v2, fresh, shard_rows=10)
    assert snapshot(out) == snapshot(fresh)
    assert sorted(d.id for d in read_shards(out)) == sorted(d.id for d in v2)
    assert m2["rows"] == 8

    # An out.tmp that is a plain file was not made by hplt-shard: refused and kept (#11).
    tmp.write_text("not a directory")
    with pytest.raises(FileExistsError, match="not made by hplt-shard"):
        write(v1, out, shard_rows=10)
    assert tmp.read_text() == "not a directory"
    tmp.unlink()
    # An out.tmp holding an earlier output (a replaced version a run could not delete, or a copy): said so,
    # never called "not made by hplt-shard", and kept.
    shutil.copytree(out, tmp)
    with pytest.raises(FileExistsError, match=r"holds an earlier output \(its _MANIFEST.json\): one a run replaced"):
        write(v1, out, shard_rows=10)
    assert snapshot(tmp) == snapshot(out)
    shutil.rmtree(tmp)
    write(v1, out, shard_rows=10)
    assert not tmp.exists() and snapshot(out) == before

    # 4. The two-rename fallback (no renameat2 exchange) also replaces completely.
    monkeypatch.setattr(swap_mod, "_exchange", lambda a, b: False)
    write(v2, out, shard_rows=10)
    assert snapshot(out) == snapshot(fresh)
    assert sorted(os.listdir(tmp_path)) == ["fresh", "out"]  # no out.tmp, no out.old
    monkeypatch.undo()

    # 5. Replacing a non-empty directory without a manifest is refused; it is left untouched.
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    (precious / "data").mkdir()
    (precious / "data" / "x.bin").write_bytes(b"\x00\x01")
    keep = snapshot(precious)
    with pytest.raises(FileExistsError):
        write(v2, precious, shard_rows=10)
    assert snapshot(precious) == keep
    assert not (tmp_path / "precious.tmp").exists()
    # A regular file in the way is refused too.
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    with pytest.raises(FileExistsError):
        write(v2, a_file, shard_rows=10)
    assert a_file.read_text() == "not a directory"
    # An empty directory may be replaced.
    empty = tmp_path / "empty"
    empty.mkdir()
    write(v2, empty, shard_rows=10)
    assert snapshot(empty) == snapshot(fresh)


def test_read_shards(tmp_path):
    out = tmp_path / "out"
    write(hand_docs(), out, shard_rows=2, val_permille=300)
    got = list(read_shards(out))
    assert [d.id for d in got] == ["books:0", "web:10", "web:2"]
    assert all(isinstance(d, Doc) for d in got)
    assert got[0].text == "Mia naps."
    assert got[0].meta == {
        "source_id": "",
        "url": "https://example.org/books:0",
        "license_spdx": "CC0-1.0",
        "lang": "und",
        "n_chars": 9,
        "sha256": hashlib.sha256(b"Mia naps.").hexdigest(),
        "minhash_cluster": 0,
        "pii_redactions": 0,
        "split": "val",
    }
    assert [d.meta["minhash_cluster"] for d in got] == [0, 1, 1]
    assert [d.meta["n_chars"] for d in got] == [9, 19, 19]
    assert [d.id for d in read_shards(out, "val")] == ["books:0"]
    assert [d.id for d in read_shards(out, "train")] == ["web:10", "web:2"]
    with pytest.raises(ValueError):
        list(read_shards(out, "test"))

    # Random docs over many shards: manifest order, row order, the split filter partitions.
    rng = random.Random(21)
    rdocs = random_docs(rng, 90)
    out2 = tmp_path / "out2"
    m = write(rdocs, out2, shard_rows=12, val_permille=300, row_group_bytes=100)
    read = list(read_shards(out2))
    assert [d.id for d in read] == [r["id"] for r in all_rows(out2)] == sorted(d.id for d in rdocs)
    src = {d.id: d for d in rdocs}
    for d in read:
        assert d.text == src[d.id].text
        assert d.meta["url"] == src[d.id].meta["url"]
        assert d.meta["license_spdx"] == src[d.id].meta["license_spdx"]
        assert d.meta["lang"] == (src[d.id].meta.get("lang") or "und")
        assert d.meta["split"] == expected_split(d.text, 300)
    val = [d.id for d in read_shards(out2, "val")]
    train = [d.id for d in read_shards(out2, "train")]
    assert val == [d.id for d in read if d.meta["split"] == "val"]
    assert train == [d.id for d in read if d.meta["split"] == "train"]
    assert len(val) + len(train) == m["rows"] and val and train

    # A rewritten shard (same row count, other content) raises before any of its rows.
    target = out2 / m["shards"][2]["name"]
    table = pq.read_table(target)
    texts = table.column("text").to_pylist()
    texts[0] = "injected text"
    table = table.set_column(table.schema.get_field_index("text"), "text", pa.array(texts, pa.string()))
    pq.write_table(table.cast(SCHEMA), target, compression="zstd")
    assert pq.ParquetFile(target).metadata.num_rows == m["shards"][2]["rows"]
    yielded = []
    with pytest.raises(TamperedShard):
        for d in read_shards(out2):
            yielded.append(d.id)
    assert yielded == [r["id"] for r in all_rows(out2)][: m["shards"][0]["rows"] + m["shards"][1]["rows"]]

    # A tampered first shard: not one row comes out.
    first = out2 / m["shards"][0]["name"]
    first.write_bytes(first.read_bytes() + b"\0")
    it = read_shards(out2)
    with pytest.raises(TamperedShard):
        next(it)

    # Row counts are checked too (hash right, manifest count wrong).
    out3 = tmp_path / "out3"
    write(hand_docs(), out3, shard_rows=2)
    mf = json.loads((out3 / MANIFEST).read_text(encoding="utf-8"))
    mf["shards"][0]["rows"] = 3
    (out3 / MANIFEST).write_bytes(out_json_bytes(mf))
    with pytest.raises(TamperedShard):
        next(read_shards(out3))

    # Not an output at all.
    with pytest.raises(FileNotFoundError):
        next(read_shards(tmp_path / "nowhere"))


# ---------------------------------------------------------------- the author's list ("Your tests")


def test_split_is_a_function_of_the_text(tmp_path):
    text = "The same words, under three ids."
    docs = [
        doc("web:1", text, source_id="web", lang="en"),
        doc("news:7", text, source_id="news", license_spdx="CC-BY-4.0"),
        doc("a:0", text, minhash_cluster="zzz"),
    ]
    for v in range(0, 1001, 37):
        out = tmp_path / f"v{v}"
        write(docs, out, val_permille=v)
        splits = {r["split"] for r in all_rows(out)}
        assert splits == {expected_split(text, v)}
        assert expected_split(text, v) == ("val" if int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % 1000 < v else "train")


def test_248_boundary():
    h = hashlib.sha256("Mia naps.".encode("utf-8")).digest()
    assert int.from_bytes(h[:8], "big") % 1000 == 248
    assert split_of(h, 248) == "train"
    assert split_of(h, 249) == "val"
    assert split_of(h, 247) == "train"


def test_string_order_of_ids(tmp_path):
    out = tmp_path / "out"
    write([doc("a:2", "two"), doc("a:10", "ten"), doc("a:1", "one")], out, shard_rows=2)
    assert [d.id for d in read_shards(out)] == ["a:1", "a:10", "a:2"]
    assert [e["rows"] for e in json.loads((out / MANIFEST).read_text())["shards"]] == [2, 1]


def test_missing_license_raises(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="license_spdx"):
        write([doc("a:1", "x"), Doc("a:2", "y", {"url": "https://e.org/a2"})], out)
    assert not out.exists() and not (tmp_path / "out.tmp").exists()


def test_stale_tmp_cleared_on_success(tmp_path):
    out = tmp_path / "out"
    stale = tmp_path / "out.tmp"
    stale.mkdir()
    (stale / "shard-00000-of-00009.parquet").write_bytes(b"half a shard")
    with pytest.raises(FileExistsError, match="not made by hplt-shard"):  # unmarked: never removed (#11)
        write([doc("a:1", "x")], out)
    assert (stale / "shard-00000-of-00009.parquet").read_bytes() == b"half a shard"
    (stale / replace_mod.TMP_MARKER).write_text(replace_mod.WRITE_SHARDS_OWNER + "\n")  # a crashed write_shards'
    write([doc("a:1", "x")], out)
    assert not stale.exists()
    assert sorted(os.listdir(out)) == [MANIFEST, "shard-00000-of-00001.parquet"]


def test_pii_totals_and_file_hashes(tmp_path):
    out = tmp_path / "out"
    m = write([doc("a:1", "x", pii={"email": 1}), doc("a:2", "y", pii={"email": 2, "phone": 5})], out, shard_rows=1)
    assert m["pii"] == {"email": 3, "phone": 5}
    for e in m["shards"]:
        data = (out / e["name"]).read_bytes()
        assert (e["sha256"], e["bytes"]) == (hashlib.sha256(data).hexdigest(), len(data))


def test_same_input_same_bytes(tmp_path):
    docs = random_docs(random.Random(99), 40)
    write(docs, tmp_path / "a", shard_rows=15)
    write(list(reversed(docs)), tmp_path / "b", shard_rows=15)
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")


def test_column_defaults(tmp_path):
    out = tmp_path / "out"
    write([doc("a:1", "x"), doc("a:0", "y", minhash_cluster="a:1")], out)
    rows = all_rows(out)
    assert [r["lang"] for r in rows] == ["und", "und"]
    assert [r["pii_redactions"] for r in rows] == [0, 0]
    assert [r["source_id"] for r in rows] == ["", ""]
    assert [r["minhash_cluster"] for r in rows] == [0, 0]  # a:1 (untagged root) joins a:0's cluster
    out2 = tmp_path / "out2"
    write([doc("a:1", "x"), doc("a:0", "y")], out2)
    assert [r["minhash_cluster"] for r in all_rows(out2)] == [0, 1]  # untagged: their own cluster


def test_recorded_counts(tmp_path):
    m = write([doc("a:1", "x")], tmp_path / "out", filters={"b": 1, "a": 2}, dedup={"near_kept_tagged": 4})
    assert list(m["counts"]["filters"].items()) == [("b", 1), ("a", 2)]
    assert m["counts"]["dedup"] == {"exact_removed": 0, "near_removed": 0, "near_kept_tagged": 4}


def test_repeated_ids_raise_and_nothing_written(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="repeated"):
        write([doc("a:1", "x"), doc("b:1", "y"), doc("a:1", "z")], out)
    assert os.listdir(tmp_path) == []


def test_tampered_shard_raises(tmp_path):
    out = tmp_path / "out"
    m = write([doc("a:1", "x"), doc("a:2", "y")], out)
    path = out / m["shards"][0]["name"]
    t = pq.read_table(path)
    pq.write_table(t.set_column(1, "text", pa.array(["X", "Y"], pa.string())).cast(SCHEMA), path, compression="zstd")
    it = read_shards(out)
    with pytest.raises(TamperedShard):
        next(it)


# ---------------------------------------------------------------- gaps found in review, now closed


def test_negative_pii_count_is_rejected(tmp_path):
    out = tmp_path / "out"
    try:
        m = write([doc("a:1", "x", pii={"email": -3})], out)
    except ValueError:
        assert not out.exists()
        return
    assert_valid_manifest(m)


def test_manifest_arguments_are_checked(tmp_path):
    out = tmp_path / "out"
    try:
        m = write([doc("a:1", "x")], out, config_sha256="not-a-hash")
    except ValueError:
        assert not out.exists()
        return
    assert_valid_manifest(m)


def test_a_second_write_shards_call_on_one_out_is_refused_while_the_first_lives(tmp_path):
    """Each call marks OUT.tmp with its host and pid: a live call's staging folder is never cleared by another
    call (which would leave a corrupt OUT); one whose process is gone is, as before."""
    import socket

    out = tmp_path / "out"
    tmp = tmp_path / "out.tmp"
    tmp.mkdir()
    live = f"{replace_mod.WRITE_SHARDS_OWNER} {socket.gethostname()} {os.getppid()}"
    (tmp / replace_mod.TMP_MARKER).write_text(live + "\n")
    (tmp / "shard-00000-of-00002.parquet").write_bytes(b"being written")
    with pytest.raises(replace_mod.NotReplaceable, match="being written by another write_shards call"):
        write(hand_docs(), out)
    assert (tmp / "shard-00000-of-00002.parquet").read_bytes() == b"being written" and not out.exists()
    gone = os.fork()
    if gone == 0:
        os._exit(0)
    os.waitpid(gone, 0)  # reaped: no process has that pid now
    (tmp / replace_mod.TMP_MARKER).write_text(f"{replace_mod.WRITE_SHARDS_OWNER} {socket.gethostname()} {gone}\n")
    write(hand_docs(), out)  # that call is over: its staging folder is cleared
    assert not tmp.exists() and output_is_complete(out)


def test_remove_replaced_finishes_a_removal_stopped_after_the_manifest_and_leaves_others(tmp_path):
    from shard_pipeline.contract.manifest import MANIFEST_NAME

    """A removal stopped after its last file (the manifest) left folders: the same folder, its manifest
    gone, gets its empty folders removed and any file in it named; another folder there is left alone."""
    old, out = tmp_path / "out.tmp", tmp_path / "out"
    (old / "train").mkdir(parents=True)
    (old / MANIFEST_NAME).write_text('{"shards": []}')
    previous = swap_mod.folder_identity(old)
    (old / MANIFEST_NAME).unlink()  # the stopped removal's last step
    assert swap_mod.remove_replaced(old, out, previous) == () and not old.exists()

    (old / "train").mkdir(parents=True)
    (old / MANIFEST_NAME).write_text('{"shards": []}')
    previous = swap_mod.folder_identity(old)
    (old / MANIFEST_NAME).unlink()
    (old / "train" / "notes.txt").write_text("mine")  # not listed anywhere now: kept, named
    said = swap_mod.remove_replaced(old, out, previous)
    assert len(said) == 1 and "train/notes.txt" in said[0] and (old / "train" / "notes.txt").read_text() == "mine"

    other = tmp_path / "other"
    other.mkdir()
    (other / "empty").mkdir()
    said = swap_mod.remove_replaced(other, out, previous)  # another inode: not the folder the swap moved
    assert "is not the previous version" in said[0] and (other / "empty").is_dir()
