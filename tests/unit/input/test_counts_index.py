"""The shared counts index: sampler layout, stale rows not trusted, locked merges, atomic replace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shard_pipeline import files
from shard_pipeline.input.corpus import InputShard, find_shards
from shard_pipeline.input.counts_index import (
    HEADER,
    CountRow,
    ImpossibleRow,
    Merge,
    impossible_reason,
    index_path,
    lookup,
    merge,
    read_index,
    record,
)
from tests.pipeline_util import read_rows

REPO = Path(__file__).resolve().parents[3]
WHEN = "2026-10-15T12:00:00Z"


def corpus(tmp: Path, names: list[str]) -> list[InputShard]:
    root = tmp / "clean"
    (root / "eng_Latn").mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(names):
        (root / "eng_Latn" / f"{name}.jsonl.zst").write_bytes(b"z" * (1000 + k))  # more bytes than documents
    return find_shards("eng_Latn", corpus="v4", local_root=root)


def row_for(shard: InputShard, docs: int) -> CountRow:
    return CountRow(shard.name + ".jsonl.zst", shard.size or 0, shard.mtime or 0, docs, "hplt-shard-read", WHEN)


def test_layout_matches_the_sampler(tmp_path: Path) -> None:
    shards = corpus(tmp_path, ["8_30.ia", "9_1.cc"])
    idx = tmp_path / "idx"
    record(idx, "v4", "clean", "eng_Latn", [row_for(shards[0], 123)])
    path = idx / "v4" / "clean" / "eng_Latn.tsv"
    assert index_path(idx, "v4", "clean", "eng_Latn") == path
    lines = path.read_text().splitlines()
    assert lines[0] == "shard\tbytes\tmtime\tdocs\tmethod\tcounted" == "\t".join(HEADER)
    assert lines[1].split("\t") == [
        "8_30.ia.jsonl.zst",
        str(shards[0].size),
        str(shards[0].mtime),
        "123",
        "hplt-shard-read",
        WHEN,
    ]
    assert Path(str(path) + ".lock").exists()


def test_lookup_trusts_only_matching_stat(tmp_path: Path) -> None:
    shards = corpus(tmp_path, ["9_1.cc", "9_2.cc", "9_3.cc", "9_4.cc"])
    idx = tmp_path / "idx"
    record(idx, "v4", "clean", "eng_Latn", [row_for(s, 100 + k) for k, s in enumerate(shards[:3])])
    assert lookup(read_rows(idx, "v4", "clean", "eng_Latn"), shards) == {"9_1.cc": 100, "9_2.cc": 101, "9_3.cc": 102}

    # 9_1 grows (size differs), 9_2 is touched (mtime differs), 9_3 unchanged, 9_4 never counted.
    Path(shards[0].location).write_bytes(b"z" * 999)
    os.utime(shards[1].location, (shards[1].mtime + 50, shards[1].mtime + 50))
    fresh = find_shards("eng_Latn", corpus="v4", local_root=tmp_path / "clean")
    assert lookup(read_rows(idx, "v4", "clean", "eng_Latn"), fresh) == {"9_3.cc": 102}


def test_url_shards_are_trusted_by_name(tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    record(idx, "v3", "sorted", "fin_Latn", [CountRow("10_1.jsonl.zst", 5000, 0, 42, "hplt-sample-count", WHEN)])
    url = InputShard("10_1", "https://data.example/three/sorted/fin_Latn/10_1.jsonl.zst", None, None, "x")
    other = InputShard("9_1", "https://data.example/three/sorted/fin_Latn/9_1.jsonl.zst", None, None, "y")
    assert lookup(read_rows(idx, "v3", "sorted", "fin_Latn"), [url, other]) == {"10_1": 42}


def test_missing_index_is_empty(tmp_path: Path) -> None:
    shards = corpus(tmp_path, ["9_1.cc"])
    assert lookup(read_rows(tmp_path / "idx", "v4", "clean", "eng_Latn"), shards) == {}


def test_record_replaces_same_shard_and_keeps_others(tmp_path: Path) -> None:
    shards = corpus(tmp_path, ["9_1.cc", "9_2.cc", "9_10.cc"])
    idx = tmp_path / "idx"
    record(idx, "v4", "clean", "eng_Latn", [row_for(shards[0], 1), row_for(shards[1], 2)])
    path = index_path(idx, "v4", "clean", "eng_Latn")
    with open(path, "a") as fh:
        fh.write("foreign row we do not understand\n")
    merged = record(idx, "v4", "clean", "eng_Latn", [row_for(shards[1], 20), row_for(shards[2], 3)])
    # the same file (size, mtime) with another count: the old row was wrong, and the replacement is said
    old = row_for(shards[1], 2)
    assert [c.describe() for c in merged.replaced] == [f"{old.shard}: {old.bytes} bytes, mtime {old.mtime}, "
                                                       f"2 documents -> {old.bytes} bytes, mtime {old.mtime}, 20 documents"]
    assert record(idx, "v4", "clean", "eng_Latn", [row_for(shards[1], 20)]) == Merge()  # the same row again: nothing to say
    lines = path.read_text().splitlines()
    assert lines[1:] == [
        row_for(shards[0], 1).to_line(),
        row_for(shards[1], 20).to_line(),
        row_for(shards[2], 3).to_line(),  # 9_10 after 9_2: natural order
        "foreign row we do not understand",
    ]
    assert lookup(read_rows(idx, "v4", "clean", "eng_Latn"), shards) == {"9_1.cc": 1, "9_2.cc": 20, "9_10.cc": 3}


def test_foreign_header_is_refused(tmp_path: Path) -> None:
    shards = corpus(tmp_path, ["9_1.cc"])
    idx = tmp_path / "idx"
    path = index_path(idx, "v4", "clean", "eng_Latn")
    path.parent.mkdir(parents=True)
    path.write_text("name,count\n9_1.cc.jsonl.zst,5\n")
    with pytest.raises(ValueError, match="header"):
        lookup(read_rows(idx, "v4", "clean", "eng_Latn"), shards)
    with pytest.raises(ValueError, match="header"):
        record(idx, "v4", "clean", "eng_Latn", [row_for(shards[0], 1)])
    assert path.read_text() == "name,count\n9_1.cc.jsonl.zst,5\n"


def test_bad_rows_are_refused(tmp_path: Path) -> None:
    for bad in (
        CountRow("a\tb", 1000, 1, 1, "m", WHEN),
        CountRow("x", 1000, 1, -1, "m", WHEN),
        CountRow("x", 1000, 1, 1, "", WHEN),
    ):
        with pytest.raises(ValueError):
            record(tmp_path, "v4", "clean", "eng_Latn", [bad])
    with pytest.raises(ValueError):
        index_path(tmp_path, "../v4", "clean", "eng_Latn")


@pytest.mark.parametrize("size,docs,why", [
    (-5, 0, "negative size"), (100, -1, "negative document count"), (0, 3, "0 bytes"),
    (55_000, 10**11, "bytes per document"), (22_000_000_000, 22_000_000_000, "bytes per document"),
    (22_000_000_000, 22_000_000_000 // 7, "bytes per document"),
])
def test_a_row_that_cannot_be_true_is_named(size, docs, why) -> None:
    assert why in impossible_reason(size, docs)


@pytest.mark.parametrize("size,docs", [(0, 0), (1000, 125), (22_000_000_000, 13_000_000)])
def test_a_row_that_can_be_true_passes(size, docs) -> None:
    assert impossible_reason(size, docs) is None


def test_impossible_rows_are_read_apart_and_never_counted(tmp_path: Path) -> None:
    shards = corpus(tmp_path, ["9_1.cc", "9_2.cc", "9_3.cc", "9_4.cc"])
    idx = tmp_path / "idx"
    path = index_path(idx, "v4", "clean", "eng_Latn")
    path.parent.mkdir(parents=True)
    s = shards
    path.write_text("\t".join(HEADER) + "\n"
                    f"9_1.cc.jsonl.zst\t{s[0].size}\t{s[0].mtime}\t-7\tm\t{WHEN}\n"  # negative count
                    f"9_2.cc.jsonl.zst\t{s[1].size}\t{s[1].mtime}\t{s[1].size // 2}\tm\t{WHEN}\n"  # 2 bytes a document
                    f"9_3.cc.jsonl.zst\t{s[2].size}\t{s[2].mtime}\t4.5\tm\t{WHEN}\n"  # not a whole number
                    f"9_4.cc.jsonl.zst\t{s[3].size}\t{s[3].mtime}\t7\tm\t{WHEN}\n")
    index = read_index(idx, "v4", "clean", "eng_Latn")
    assert sorted(index.impossible) == ["9_1.cc.jsonl.zst", "9_2.cc.jsonl.zst", "9_3.cc.jsonl.zst"]
    assert [r.shard for r in index.impossible_of(shards[1:])] == ["9_2.cc.jsonl.zst", "9_3.cc.jsonl.zst"]
    assert "not a whole number" in index.impossible["9_3.cc.jsonl.zst"].reason
    assert lookup(index.rows, shards) == {"9_4.cc": 7}  # the run counts the others itself: nothing negative projected


def test_a_read_denser_than_the_floor_is_left_out_of_the_index(tmp_path: Path) -> None:
    shards = corpus(tmp_path, ["9_1.cc", "9_2.cc"])
    idx = tmp_path / "idx"
    record(idx, "v4", "clean", "eng_Latn", [row_for(shards[0], shards[0].size), row_for(shards[1], 3)])
    index = read_index(idx, "v4", "clean", "eng_Latn")
    assert (lookup(index.rows, shards), index.impossible) == ({"9_2.cc": 3}, {})


def test_a_smaller_row_never_replaces_a_larger_one_without_the_word(tmp_path: Path) -> None:
    shards = corpus(tmp_path, ["9_1.cc", "9_2.cc"])
    whole = CountRow("9_1.cc.jsonl.zst", 5000, 1, 40, "m", WHEN)
    cut = CountRow("9_1.cc.jsonl.zst", 3000, 2, 25, "m", WHEN)  # the same file cut at a frame boundary
    lines = [whole.to_line()]
    kept_lines, done = merge(lines, [cut], accept_smaller=False)
    assert kept_lines == lines and done.replaced == () and [c.old for c in done.kept] == [whole]
    assert done.kept[0].smaller and len(done.warnings()) == 1
    new_lines, done = merge(lines, [cut], accept_smaller=True)
    assert new_lines == [cut.to_line()] and done.kept == () and done.replaced[0].smaller
    assert "--release-changed" in done.warnings()[0]
    fewer_docs_only = CountRow("9_1.cc.jsonl.zst", 5000, 1, 39, "m", WHEN)
    assert merge(lines, [fewer_docs_only], accept_smaller=False)[0] == lines
    grown = CountRow("9_1.cc.jsonl.zst", 6000, 3, 41, "m", WHEN)  # a whole copy over a row of a cut one
    new_lines, done = merge(lines, [grown], accept_smaller=False)
    assert new_lines == [grown.to_line()] and not done.replaced[0].smaller and done.warnings() == []
    idx = tmp_path / "idx"
    record(idx, "v4", "clean", "eng_Latn", [row_for(shards[0], 30)])
    assert record(idx, "v4", "clean", "eng_Latn", [row_for(shards[0], 29)]).kept  # through the file, under its lock
    assert read_rows(idx, "v4", "clean", "eng_Latn")["9_1.cc.jsonl.zst"].docs == 30


def test_an_impossible_row_is_replaced_by_a_read_whatever_its_numbers() -> None:
    bad = "9_1.cc.jsonl.zst\t55000\t1\t100000000000\tm\t" + WHEN
    read = CountRow("9_1.cc.jsonl.zst", 55000, 1, 40, "m", WHEN)
    lines, done = merge([bad, "9_2.cc.jsonl.zst\t-1\t1\t1\tm\t" + WHEN], [read], accept_smaller=False)
    assert lines == [read.to_line(), "9_2.cc.jsonl.zst\t-1\t1\t1\tm\t" + WHEN]  # others' rows kept verbatim
    assert isinstance(done.replaced[0].old, ImpossibleRow) and not done.replaced[0].smaller


def test_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shards = corpus(tmp_path, ["9_1.cc", "9_2.cc"])
    idx = tmp_path / "idx"
    record(idx, "v4", "clean", "eng_Latn", [row_for(shards[0], 1)])
    path = index_path(idx, "v4", "clean", "eng_Latn")
    before = path.read_bytes()

    def boom(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", boom)  # the one atomic write (shard_pipeline.files)
    with pytest.raises(OSError, match="disk full"):
        record(idx, "v4", "clean", "eng_Latn", [row_for(shards[1], 2)])
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["eng_Latn.tsv", "eng_Latn.tsv.lock"]  # no temp left


def test_replace_is_atomic_for_open_readers(tmp_path: Path) -> None:
    shards = corpus(tmp_path, ["9_1.cc", "9_2.cc"])
    idx = tmp_path / "idx"
    record(idx, "v4", "clean", "eng_Latn", [row_for(shards[0], 1)])
    path = index_path(idx, "v4", "clean", "eng_Latn")
    old_inode = path.stat().st_ino
    with open(path) as reader:  # a reader that opened the old file keeps a whole old file
        record(idx, "v4", "clean", "eng_Latn", [row_for(shards[1], 2)])
        assert reader.read().count("\n") == 2
    assert path.stat().st_ino != old_inode and path.read_text().count("\n") == 3


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from shard_pipeline.input.counts_index import CountRow, record
    root, tag, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for k in range(n):
        row = CountRow(f"{k}_{tag}.jsonl.zst", 1000 * k, k, k, "test", "2026-01-01T00:00:00Z")
        record(root, "v4", "clean", "eng_Latn", [row])
    """
)


@pytest.mark.slow
def test_concurrent_writers_keep_every_row(tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    n = 40
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(idx), tag, str(n)], env=env) for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    lines = index_path(idx, "v4", "clean", "eng_Latn").read_text().splitlines()
    shards = {line.split("\t")[0] for line in lines[1:]}
    assert shards == {f"{k}_{t}.jsonl.zst" for k in range(n) for t in ("a", "b")}
    assert len(lines) == 2 * n + 1
