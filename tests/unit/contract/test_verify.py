"""shard_pipeline.contract.verify: a correct output verifies; each kind of damage is found and named.

Outputs come from write_shards on random documents (random.Random, fixed seeds) with small
shard_rows and row_group_bytes, so there are several shards and several row groups per shard.
Each damage test changes one thing and, where a hash would otherwise give it away, updates the
manifest to match, so the check under test is the one that has to notice.
"""
from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_pipeline.contract.rules import DICTIONARY_COLUMNS, SCHEMA, Doc, row_group_bounds, shard_name
from shard_pipeline.contract.shard import write_shards
from shard_pipeline.contract.verify import main, verify_output
from shard_pipeline.contract.verify_manifest import ROW_PROBLEM_CAP, Problem
from shard_pipeline.contract.verify_rows import GroupCutChecker

MANIFEST = "_MANIFEST.json"
SHARD_ROWS = 12
ROW_GROUP_BYTES = 300
VAL_PERMILLE = 300
ROOT = Path(__file__).resolve().parents[3]

WORDS = ["the", "cat", "naps", "Tom", "has", "a", "red", "ball", "café", "naïve", "Zürich", "日本語", "😀", "ok"]


def random_docs(seed: int = 7, n: int = 53) -> list[Doc]:
    rng = random.Random(seed)
    ids = rng.sample(range(10_000), n)
    docs = []
    for k, num in enumerate(ids):
        id_ = f"{rng.choice(['web', 'books', 'Wiki'])}:{num}"
        words = rng.randint(0, 120) if k % 9 == 0 else rng.randint(0, 25)  # some overflow the budget
        text = " ".join(rng.choice(WORDS) for _ in range(words))
        meta = {"url": f"https://example.org/{num}", "license_spdx": rng.choice(["CC0-1.0", "CC-BY-4.0"]),
                "source_id": f"src-{num % 3}", "pii_redactions": rng.randint(0, 3)}
        if rng.random() < 0.7:
            meta["lang"] = rng.choice(["en", "de", "ja"])
        docs.append(Doc(id_, text, meta))
    for d in rng.sample(docs, 8):  # near duplicates tagged with another document's id
        d.meta["minhash_cluster"] = rng.choice(docs).id
    return docs


def make_output(tmp_path: Path, name: str = "out", **kw) -> Path:
    out = tmp_path / name
    kw.setdefault("shard_rows", SHARD_ROWS)
    kw.setdefault("row_group_bytes", ROW_GROUP_BYTES)
    kw.setdefault("val_permille", VAL_PERMILLE)
    write_shards(random_docs(), out, dataset="test-corpus", version="1", **kw)
    return out


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return make_output(tmp_path)


def load(out: Path) -> dict:
    return json.loads((out / MANIFEST).read_text(encoding="utf-8"))


def save(out: Path, m: dict, indent: int = 2) -> None:
    (out / MANIFEST).write_bytes((json.dumps(m, indent=indent, ensure_ascii=False) + "\n").encode("utf-8"))


def groups_of(out: Path, i: int) -> list[pa.Table]:
    pf = pq.ParquetFile(out / load(out)["shards"][i]["name"])
    return [pf.read_row_group(g) for g in range(pf.num_row_groups)]


def first_row(out: Path, i: int) -> int:
    return sum(e["rows"] for e in load(out)["shards"][:i])


def rewrite_shard(out: Path, i: int, groups: list[pa.Table], *, compression: str = "zstd",
                  schema: pa.Schema = SCHEMA, use_dictionary: bool | list[str] = DICTIONARY_COLUMNS) -> str:
    """Write shard i anew, one row group per table, and record its true size and hash in the manifest."""
    m = load(out)
    name = m["shards"][i]["name"]
    path = out / name
    with pq.ParquetWriter(path, schema, compression=compression, use_dictionary=use_dictionary) as w:
        for t in groups:
            t = t.cast(schema).combine_chunks()
            w.write_table(t, row_group_size=t.num_rows)
    data = path.read_bytes()
    m["shards"][i]["bytes"] = len(data)
    m["shards"][i]["sha256"] = hashlib.sha256(data).hexdigest()
    save(out, m)
    return name


def with_column(t: pa.Table, col: str, values: list) -> pa.Table:
    return t.set_column(t.schema.get_field_index(col), col, pa.array(values, type=t.schema.field(col).type))


def verify(out: Path, capsys, *args: str) -> tuple[int, list[str]]:
    code = main([str(out), *args])
    return code, capsys.readouterr().out.splitlines()


def files_of(problems: list[Problem]) -> set[str]:
    return {p.file for p in problems}


# ---------------------------------------------------------------- a correct output


def test_correct_output_verifies(out: Path, capsys) -> None:
    m = load(out)
    # The scenario really has what the checks are about.
    assert len(m["shards"]) == 5 and m["rows"] == 53
    assert m["splits"]["train"] > 0 and m["splits"]["val"] > 0
    assert max(len(groups_of(out, i)) for i in range(5)) >= 3
    rows = [r for i in range(5) for t in groups_of(out, i) for r in t.to_pylist()]
    assert any(r["minhash_cluster"] != k for k, r in enumerate(rows)), "no non-trivial cluster"
    assert any(len(r["text"].encode()) > ROW_GROUP_BYTES for r in rows), "no document over the budget"
    assert any(len(r["text"].encode()) != len(r["text"]) for r in rows), "no non-ASCII text"

    assert verify_output(out) == []
    assert verify_output(out, deep=False) == []
    assert verify(out, capsys) == (0, ["OK: 53 rows in 5 shards verified"])


def test_empty_corpus_and_single_shard_verify(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    write_shards([], empty, dataset="d", version="1", shard_rows=5)
    assert verify(empty, capsys) == (0, ["OK: 0 rows in 1 shard verified"])
    one = make_output(tmp_path, "one", shard_rows=1000)
    assert verify_output(one) == []


def test_extra_listed_files_verify_and_are_hashed(out: Path) -> None:
    (out / "_stats").mkdir()
    extra = out / "_stats" / "lengths.json"
    extra.write_text('{"max": 3}\n')
    m = load(out)
    m["files"] = [{"name": "_stats/lengths.json", "bytes": extra.stat().st_size,
                   "sha256": hashlib.sha256(extra.read_bytes()).hexdigest(), "kind": "stats"}]
    save(out, m)
    assert verify_output(out) == []
    extra.write_text('{"max": 4}\n')  # same size, other bytes
    problems = verify_output(out)
    assert files_of(problems) == {"_stats/lengths.json"} and "sha256" in problems[0].what


def _list_extra(out: Path, names: list[str], ledger: object = "corpus/LEDGER.jsonl") -> None:
    m = load(out)
    m["files"] = []
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(b"x\n")
        m["files"].append({"name": name, "bytes": 2, "sha256": hashlib.sha256(b"x\n").hexdigest()})
    m["ledger"] = ledger
    save(out, m)


@pytest.mark.parametrize("name", ["README.md", "_LEDGER.jsonl", ".meta/notes.txt", "__quarantine/clean/documents.parquet",
                                  ".cache/x/y.parquet", "_stats/deep/x.json", ".extra.json"])
def test_names_readers_skip_verify(out: Path, name: str) -> None:
    _list_extra(out, [name])
    assert verify_output(out) == ([] if name != "_LEDGER.jsonl" else
                                  [Problem(MANIFEST, "OUT holds the ledger _LEDGER.jsonl but ledger is 'corpus/LEDGER.jsonl'")])


@pytest.mark.parametrize("name, why", [
    ("stats/lengths.json", "does not start with '_' or '.'"),
    ("quarantine.parquet", "does not start with '_' or '.'"),
    ("_quarantine.parquet", "globs OUT/*.parquet and OUT/*/*.parquet would match it"),
    ("__quarantine/documents.parquet", "globs OUT/*.parquet and OUT/*/*.parquet would match it"),
    ("_quarantine/clean/documents.parquet", "datasets.load_dataset(OUT) skips those, not '_' ones"),
    ("train/README.md", "only README.md may stay at the root"),
    ("_balance.json", "JSON files outnumber them"),
])
def test_names_readers_would_take_for_data_are_reported_once(out: Path, name: str, why: str) -> None:
    """issue 13: a non-shard file pyarrow, Spark or a shard glob would read as data breaks the readers of OUT."""
    _list_extra(out, [name])
    problems = verify_output(out)
    assert [p.file for p in problems] == [name] and why in problems[0].what  # once: not again as a schema error


@pytest.mark.parametrize("ledger, listed, ok", [
    (None, [], True),                                  # a run without a card: no ledger
    ("corpus/LEDGER.jsonl", [], True),                 # write_shards' default: a ledger outside OUT
    ("_LEDGER.jsonl", ["_LEDGER.jsonl"], True),        # --dataset-card
    ("_LEDGER.jsonl", [], False),                      # points at a file OUT does not hold
    (None, ["_LEDGER.jsonl"], False),                  # holds one, says it has none
])
def test_the_ledger_field_points_at_what_out_holds(out: Path, ledger, listed, ok) -> None:
    _list_extra(out, listed, ledger=ledger)
    problems = verify_output(out)
    assert (problems == []) == ok, problems
    assert all(p.file == MANIFEST and "ledger" in p.what for p in problems)


# ---------------------------------------------------------------- damage the brief lists


def test_flipped_byte_in_a_shard(out: Path, capsys) -> None:
    name = shard_name(1, 5)
    path = out / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    problems = verify_output(out)
    assert any(p.file == name and "sha256" in p.what and "manifest" in p.what for p in problems)
    assert files_of(problems) <= {name, MANIFEST}
    code, lines = verify(out, capsys)
    assert code == 1 and any(line.startswith(f"{name}: sha256 ") for line in lines)


def test_changed_text_with_manifest_hash_updated(out: Path) -> None:
    i = 2
    groups = groups_of(out, i)
    g = next(g for g, t in enumerate(groups) if any("a" in s for s in t.column("text").to_pylist()))
    texts = groups[g].column("text").to_pylist()
    k = next(k for k, s in enumerate(texts) if "a" in s)
    texts[k] = texts[k].replace("a", "o", 1)  # same code points, same bytes: only the hash can tell
    groups[g] = with_column(groups[g], "text", texts)
    name = rewrite_shard(out, i, groups)
    problems = verify_output(out)
    idx = first_row(out, i) + sum(t.num_rows for t in groups[:g]) + k
    assert problems, "a changed text went unnoticed"
    assert files_of(problems) == {name}
    assert all(p.what.startswith(f"row {idx} ") for p in problems)
    assert any("sha256 column is not the SHA-256 of the text" in p.what for p in problems)
    assert all("sha256" in p.what or "split is" in p.what for p in problems)


@pytest.mark.parametrize("stray", ["notes.txt", ".hidden", "sub/extra.parquet"])
def test_stray_file(out: Path, stray: str, capsys) -> None:
    (out / stray).parent.mkdir(exist_ok=True)
    (out / stray).write_text("x")
    assert verify_output(out) == [Problem(stray, "stray file: not listed in the manifest")]
    assert verify(out, capsys) == (1, [f"{stray}: stray file: not listed in the manifest"])


def test_stray_empty_directory(out: Path) -> None:
    (out / "leftover").mkdir()
    assert files_of(verify_output(out)) == {"leftover"}


def test_missing_shard(out: Path, capsys) -> None:
    name = shard_name(3, 5)
    (out / name).unlink()
    assert verify_output(out) == [Problem(name, "missing: listed in the manifest but not in OUT")]
    code, lines = verify(out, capsys)
    assert code == 1 and lines == [f"{name}: missing: listed in the manifest but not in OUT"]


def test_rows_out_of_order(out: Path) -> None:
    i = next(i for i in range(5) if any(t.num_rows >= 3 for t in groups_of(out, i)))
    groups = groups_of(out, i)
    g = next(g for g, t in enumerate(groups) if t.num_rows >= 3)
    rows = groups[g].to_pylist()
    j = 1  # swap rows 1 and 2: the group's first row and byte total stay, so its cuts stay valid
    clusters = [r["minhash_cluster"] for r in rows]  # stays positional
    rows[j], rows[j + 1] = rows[j + 1], rows[j]
    for r, c in zip(rows, clusters):
        r["minhash_cluster"] = c
    groups[g] = pa.Table.from_pylist(rows, schema=SCHEMA)
    name = rewrite_shard(out, i, groups)
    idx = first_row(out, i) + sum(t.num_rows for t in groups[:g]) + j + 1
    problems = verify_output(out)
    assert len(problems) == 1
    assert problems[0].file == name
    assert problems[0].what.startswith(f"row {idx} (id {rows[j + 1]['id']!r}): id sorts before")


def test_repeated_id_across_a_shard_boundary(out: Path) -> None:
    last_of_0 = groups_of(out, 0)[-1].column("id").to_pylist()[-1]
    groups = groups_of(out, 1)
    ids = groups[0].column("id").to_pylist()
    ids[0] = last_of_0
    groups[0] = with_column(groups[0], "id", ids)
    name = rewrite_shard(out, 1, groups)
    problems = verify_output(out)
    assert [p.file for p in problems] == [name]
    assert problems[0].what.startswith(f"row {SHARD_ROWS} ") and "repeats" in problems[0].what


def test_wrong_split_value(out: Path) -> None:
    groups = groups_of(out, 0)
    splits = groups[0].column("split").to_pylist()
    old = splits[0]
    splits[0] = "val" if old == "train" else "train"
    groups[0] = with_column(groups[0], "split", splits)
    name = rewrite_shard(out, 0, groups)
    m = load(out)  # keep the totals true, so only the row itself is wrong
    m["splits"][old] -= 1
    m["splits"][splits[0]] += 1
    save(out, m)
    problems = verify_output(out)
    assert problems == [Problem(name, f"row 0 (id {groups[0].column('id')[0].as_py()!r}): split is "
                                      f"{splits[0]!r}, the text's hash at val_permille {VAL_PERMILLE} gives {old!r}")]
    assert verify_output(out, deep=False) == []  # a row-level check


def _shard_with_groups(out: Path, min_groups: int) -> int:
    return next(i for i in range(5) if len(groups_of(out, i)) >= min_groups)


def test_row_group_cut_after_overflow(out: Path) -> None:
    i = _shard_with_groups(out, 2)
    groups = groups_of(out, i)
    merged = [pa.concat_tables(groups[:2])] + groups[2:]  # the first group runs past the budget
    name = rewrite_shard(out, i, merged)
    problems = verify_output(out)
    assert files_of(problems) == {name}
    assert len(problems) == 1 and "over row_group_bytes" in problems[0].what
    assert problems[0].what.startswith("row group 0 holds")


def test_row_group_cut_early(out: Path) -> None:
    i, g = next((i, g) for i in range(5) for g, t in enumerate(groups_of(out, i)) if t.num_rows >= 2)
    groups = groups_of(out, i)
    split_up = groups[:g] + [groups[g].slice(0, 1), groups[g].slice(1)] + groups[g + 1:]
    name = rewrite_shard(out, i, split_up)
    problems = verify_output(out)
    assert files_of(problems) == {name}
    assert len(problems) == 1 and problems[0].what.startswith(f"row group {g} was cut early")


def test_manifest_with_other_indentation(out: Path, capsys) -> None:
    save(out, load(out), indent=4)
    problems = verify_output(out)
    assert len(problems) == 1 and problems[0].file == MANIFEST and "not serialized" in problems[0].what
    code, lines = verify(out, capsys)
    assert code == 1 and lines[0].startswith("_MANIFEST.json: not serialized as json.dumps")


def test_manifest_row_count_changed(out: Path) -> None:
    m = load(out)
    m["rows"] += 1
    save(out, m)
    assert verify_output(out) == [Problem(MANIFEST, "rows is 54, the shards hold 53")]


@pytest.mark.parametrize("key", ["text_bytes", "splits.train", "splits.val"])
def test_manifest_totals_changed(out: Path, key: str) -> None:
    m = load(out)
    parent, _, leaf = key.rpartition(".")
    obj = m[parent] if parent else m
    true = obj[leaf]
    obj[leaf] += 1
    save(out, m)
    assert verify_output(out) == [Problem(MANIFEST, f"{key} is {true + 1}, the shards hold {true}"
                                          + (f" {leaf} rows" if parent else ""))]
    problems = verify_output(out, deep=False)  # without the rows, the splits are checked against the row count
    assert len(problems) == 1 and problems[0].file == MANIFEST


def test_manifest_shard_entry_counts_changed(out: Path) -> None:
    m = load(out)
    m["shards"][1]["rows"] -= 1
    m["shards"][2]["text_bytes"] += 5
    save(out, m)
    problems = verify_output(out)
    assert Problem(shard_name(1, 5), f"{SHARD_ROWS} rows, the manifest says {SHARD_ROWS - 1}") in problems
    assert any(p.file == shard_name(2, 5) and "text bytes, the manifest says" in p.what for p in problems)


def test_non_zstd_shard(out: Path) -> None:
    name = rewrite_shard(out, 2, groups_of(out, 2), compression="snappy")
    problems = verify_output(out)
    assert len(problems) == 1 and problems[0].file == name
    assert "are not ZSTD-compressed" in problems[0].what and "SNAPPY" in problems[0].what


# ---------------------------------------------------------------- more damage


def test_dictionary_encoded_plain_columns(out: Path) -> None:
    name = rewrite_shard(out, 1, groups_of(out, 1), use_dictionary=True)
    problems = verify_output(out)
    assert len(problems) == 1 and problems[0].file == name
    assert "columns the contract keeps plain are dictionary-encoded (first: row group 0 column id)" in problems[0].what


def test_wrong_schema(out: Path) -> None:
    wide = SCHEMA.set(SCHEMA.get_field_index("n_chars"), pa.field("n_chars", pa.int64(), nullable=False))
    name = rewrite_shard(out, 1, groups_of(out, 1), schema=wide)
    problems = verify_output(out)
    assert [p.file for p in problems] == [name]
    assert "Arrow schema differs" in problems[0].what and "n_chars" in problems[0].what


def test_wrong_n_chars_and_empty_values(out: Path) -> None:
    groups = groups_of(out, 0)
    t = groups[0]
    t = with_column(t, "n_chars", [t.column("n_chars")[0].as_py() + 1] + t.column("n_chars").to_pylist()[1:])
    t = with_column(t, "url", [""] + t.column("url").to_pylist()[1:])
    groups[0] = t
    name = rewrite_shard(out, 0, groups)
    whats = [p.what for p in verify_output(out)]
    assert files_of(verify_output(out)) == {name} and len(whats) == 2
    assert "n_chars is" in whats[0] and "url is empty" in whats[1]


def test_minhash_cluster_must_name_a_root(out: Path) -> None:
    rows = [r for i in range(5) for t in groups_of(out, i) for r in t.to_pylist()]
    values = [r["minhash_cluster"] for r in rows]
    non_root = next(k for k, v in enumerate(values) if v != k)
    # A later row that is its own root and that no other row points at.
    t = next(k for k in range(non_root + 1, len(rows)) if values[k] == k and values.count(k) == 1)
    i, k_in = divmod(t, SHARD_ROWS)
    groups = groups_of(out, i)
    flat = pa.concat_tables(groups)
    bounds = row_group_bounds(pc_lengths(flat), ROW_GROUP_BYTES)
    clusters = flat.column("minhash_cluster").to_pylist()
    clusters[k_in] = non_root
    flat = with_column(flat, "minhash_cluster", clusters)
    name = rewrite_shard(out, i, [flat.slice(a, b - a) for a, b in bounds])
    problems = verify_output(out)
    assert [p.file for p in problems] == [name]
    assert problems[0].what.startswith(f"row {t} ") and f"minhash_cluster {non_root} names row {non_root}" in problems[0].what

    clusters[k_in] = t + 1  # beyond its own index
    flat = with_column(flat, "minhash_cluster", clusters)
    rewrite_shard(out, i, [flat.slice(a, b - a) for a, b in bounds])
    problems = verify_output(out)
    assert len(problems) == 1 and f"minhash_cluster {t + 1} is not a row index in 0..{t}" in problems[0].what


def pc_lengths(t: pa.Table) -> list[int]:
    return [len(s.encode()) for s in t.column("text").to_pylist()]


def test_row_problems_are_capped(tmp_path: Path) -> None:
    out = make_output(tmp_path, shard_rows=100)  # one shard of 53 rows
    groups = groups_of(out, 0)
    groups = [with_column(t, "sha256", [b"\0" * 32] * t.num_rows) for t in groups]
    name = rewrite_shard(out, 0, groups)
    problems = verify_output(out)
    assert len(problems) == ROW_PROBLEM_CAP + 1
    assert problems[-1] == Problem(name, f"... and {53 - ROW_PROBLEM_CAP} more sha256 problems (from this file on)")


def test_wrong_shard_names(out: Path) -> None:
    m = load(out)
    old = m["shards"][4]["name"]
    new = "shard-00004-of-00006.parquet"
    (out / old).rename(out / new)
    m["shards"][4]["name"] = new
    save(out, m)
    problems = verify_output(out)
    assert [p.file for p in problems] == [new] and "must be named 'shard-00004-of-00005.parquet'" in problems[0].what


def test_uneven_shard_sizes(out: Path) -> None:
    """Moving a row from shard 0 to shard 1 keeps order and groups plausible, not the shard sizes."""
    g0, g1 = groups_of(out, 0), groups_of(out, 1)
    f0, f1 = pa.concat_tables(g0), pa.concat_tables(g1)
    f1 = pa.concat_tables([f0.slice(f0.num_rows - 1), f1])
    f0 = f0.slice(0, f0.num_rows - 1)
    for i, f in ((0, f0), (1, f1)):
        rewrite_shard(out, i, [f.slice(a, b - a) for a, b in row_group_bounds(pc_lengths(f), ROW_GROUP_BYTES)])
    m = load(out)
    moved = len(f1.column("text")[0].as_py().encode())
    m["shards"][0]["rows"] -= 1
    m["shards"][1]["rows"] += 1
    m["shards"][0]["text_bytes"] -= moved
    m["shards"][1]["text_bytes"] += moved
    save(out, m)
    problems = verify_output(out)
    assert files_of(problems) == {shard_name(0, 5), shard_name(1, 5)}
    assert all("every shard but the last holds exactly shard_rows = 12" in p.what for p in problems)


def test_manifest_against_json_schema(out: Path) -> None:
    m = load(out)
    m["config_sha256"] = "ABC"
    save(out, m)
    problems = verify_output(out)
    assert problems and all(p.file == MANIFEST for p in problems)
    assert any("does not match corpus-manifest.schema.json: config_sha256" in p.what for p in problems)


def test_manifest_key_order(out: Path) -> None:
    m = load(out)
    m = {k: m[k] for k in ["format", "dataset", "version", "config_sha256", "text_bytes", "rows",
                           *[k for k in m if k not in ("format", "dataset", "version", "config_sha256", "text_bytes", "rows")]]}
    save(out, m)
    problems = verify_output(out)
    assert len(problems) == 1 and "keys of the manifest are not in the documented order" in problems[0].what


def test_manifest_timestamp(out: Path) -> None:
    m = load(out)
    (out / "_README").write_text("hi\n")
    m["files"] = [{"name": "_README", "bytes": 3, "sha256": hashlib.sha256(b"hi\n").hexdigest(), "written_at": 1}]
    save(out, m)
    assert verify_output(out) == [Problem(MANIFEST, "files[0].written_at: key looks like a timestamp (1)")]
    m["files"][0] = {"name": "_README", "bytes": 3, "sha256": m["files"][0]["sha256"], "note": "built 2025-01-02T03:04:05Z"}
    save(out, m)
    problems = verify_output(out)
    assert len(problems) == 1 and "value looks like a timestamp" in problems[0].what
    m["files"][0]["note"] = "v2025-01-02"  # a date alone is fine (versions are often dates)
    save(out, m)
    assert verify_output(out) == []


@pytest.mark.parametrize("content", [None, b"{not json", b"[]\n", b'{"format": "other/1"}\n'])
def test_missing_or_unreadable_manifest(out: Path, content: bytes | None, capsys) -> None:
    if content is None:
        (out / MANIFEST).unlink()
    else:
        (out / MANIFEST).write_bytes(content)
    code, lines = verify(out, capsys)
    assert code == 1 and lines and all(line.startswith("_MANIFEST.json: ") for line in lines)


def test_usage_and_missing_out(tmp_path: Path, capsys) -> None:
    assert main([]) == 2
    assert main(["a", "b"]) == 2
    assert main(["--no-such-flag", str(tmp_path)]) == 2
    capsys.readouterr()
    assert main([str(tmp_path / "nowhere")]) == 2  # #21: a path that is not there is a usage error, as documented
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [
        f"hplt-shard: --verify {tmp_path / 'nowhere'}: does not exist; give the output folder (the one holding {MANIFEST})"]
    (tmp_path / "file").write_text("x")
    assert main([str(tmp_path / "file")]) == 2 and "is not a directory" in capsys.readouterr().err


def test_shallow_skips_rows_only(out: Path, capsys) -> None:
    name = rewrite_shard(out, 2, groups_of(out, 2), compression="snappy")
    assert files_of(verify_output(out, deep=False)) == {name}
    code, lines = verify(out, capsys, "--shallow")
    assert code == 1 and lines[0].startswith(name)


@pytest.mark.slow
def test_run_as_module(out: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "shard_pipeline.contract.verify", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "OK: 53 rows in 5 shards verified\n")
    (out / "x").write_text("")
    proc = subprocess.run([sys.executable, "-m", "shard_pipeline.contract.verify", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (1, "x: stray file: not listed in the manifest\n")


def test_group_cut_checker_matches_row_group_bounds() -> None:
    """The streaming check accepts exactly the grouping row_group_bounds makes, and rejects others."""
    rng = random.Random(3)
    for _ in range(500):
        budget = rng.randint(1, 50)
        sizes = [rng.choice([0, rng.randint(0, 20), rng.randint(0, 80)]) for _ in range(rng.randint(1, 15))]
        right = row_group_bounds(sizes, budget)
        cuts = sorted(rng.sample(range(1, len(sizes)), rng.randint(0, len(sizes) - 1))) if len(sizes) > 1 else []
        other = list(zip([0, *cuts], [*cuts, len(sizes)]))
        for bounds in (right, other):
            checker = GroupCutChecker(budget)
            bad = [w for g, (a, b) in enumerate(bounds) for w in checker.group(g, sizes[a:b])]
            assert (not bad) == (bounds == right), (sizes, budget, bounds, right, bad)
