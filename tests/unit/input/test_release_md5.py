"""Release checksums (v3's `<lang>.md5` and `.<bin>_<n>.jsonl.md5`) are checked while partition reads a local
copy: a match changes nothing, a mismatch stops the run as a broken input, absent files change nothing."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import zstandard

from shard_pipeline.input.corpus import InputShard
from shard_pipeline.input.reader import ReadStats, iter_records
from shard_pipeline.input.release_md5 import COMPRESSED, ChecksumMismatch, release_checksums, stream_hashes
from shard_pipeline.run.outcome import Kind, kind_of
from tests.inprocess import make_run
from tests.pipeline_util import LANG, records, write_records


def _shard(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / LANG / "9_1.jsonl.zst"
    path.parent.mkdir(parents=True)
    write_records(path, records(30))
    return path, zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())


def _read(path: Path) -> ReadStats:
    stats = ReadStats()
    st = path.stat()
    shard = InputShard("9_1", str(path), st.st_size, int(st.st_mtime), "x")
    for _ in iter_records(shard, corpus="v4", stats=stats):
        pass
    return stats


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def test_without_checksum_files_nothing_is_hashed(tmp_path):
    path, _ = _shard(tmp_path)
    assert stream_hashes(str(path)) is None
    assert stream_hashes("https://example.org/x/9_1.jsonl.zst") is None
    assert _read(path).read == 30


def test_matching_checksums_read_as_before_and_of_two_the_compressed_ones_is_taken(tmp_path):
    path, decoded = _shard(tmp_path)
    (path.parent / ".9_1.jsonl.md5").write_text(f"{_md5(decoded)}  9_1.jsonl\n")
    (tmp_path / f"{LANG}.md5").write_text(f"{'0' * 32}  {LANG}/8_1.jsonl.zst\n"
                                          f"{_md5(path.read_bytes())}  {LANG}/9_1.jsonl.zst\n")
    found = release_checksums(str(path))
    assert [c.covers for c in found] == [COMPRESSED]  # a quarter of the bytes to hash
    assert _read(path).read == 30


def test_a_line_of_another_language_is_not_this_inputs_and_the_whole_file_is_read(tmp_path):
    """Lines are matched by folder and name, in a checksum file of any length, with a byte-order mark."""
    path, _ = _shard(tmp_path)
    filler = "".join(f"{i:032x}  {LANG}/5_{i}.jsonl.zst\n" for i in range(40_000))  # past 1 MiB
    (tmp_path / f"{LANG}.md5").write_text("\ufeff" + f"{'0' * 32}  fra_Latn/9_1.jsonl.zst\n" + filler
                                          + f"{_md5(path.read_bytes())}  ./{LANG}/9_1.jsonl.zst\r\n", encoding="utf-8")
    assert [(c.covers, c.expected) for c in release_checksums(str(path))] == [(COMPRESSED, _md5(path.read_bytes()))]
    assert _read(path).read == 30


@pytest.mark.parametrize("which", ["own", "lang"])
def test_a_mismatch_names_file_expected_and_got_and_stops_as_a_broken_input(tmp_path, which):
    path, decoded = _shard(tmp_path)
    if which == "own":  # a bare hex: the per-file checksum covers the decoded lines
        (path.parent / ".9_1.jsonl.md5").write_text("f" * 32 + "\n")
        got = _md5(decoded)
    else:
        (tmp_path / f"{LANG}.md5").write_text(f"{'f' * 32}  9_1.jsonl.zst\n")
        got = _md5(path.read_bytes())
    with pytest.raises(ChecksumMismatch) as caught:
        _read(path)
    err = caught.value
    assert (err.location, err.expected, err.got, err.line) == (str(path), "f" * 32, got, 30)
    assert kind_of(err) is Kind.BROKEN_INPUT  # the next step: fetch the file again, then a new run


def test_a_run_with_checksums_gives_the_same_bytes_and_a_wrong_one_stops_partition(tmp_path, in_process):
    plain = make_run(tmp_path / "plain", in_process)
    root = plain.root
    sums = []
    for shard in (root / LANG).glob("*.jsonl.zst"):
        decoded = zstandard.ZstdDecompressor().decompressobj().decompress(shard.read_bytes())
        (shard.parent / f".{shard.name[:-4]}.md5").write_text(f"{_md5(decoded)}  {shard.name[:-4]}\n")
        sums.append(f"{_md5(shard.read_bytes())}  {LANG}/{shard.name}\n")
    (root / f"{LANG}.md5").write_text("".join(sums))  # beside the language folder, as v3 publishes it
    checked = make_run(tmp_path / "checked", in_process, None, corpus_root=root)
    assert checked.code == 0
    shards = sorted(p.name for p in plain.out.glob("*.parquet"))
    assert shards and shards == sorted(p.name for p in checked.out.glob("*.parquet"))
    for name in shards:
        assert (plain.out / name).read_bytes() == (checked.out / name).read_bytes()
    (root / f"{LANG}.md5").write_text("".join("0" * 32 + line[32:] for line in sums))
    in_process.errors.clear()
    broken = make_run(tmp_path / "broken", in_process, None, corpus_root=root)
    assert broken.code != 0
    # partition fails on the mismatch; the language's later units fail at once, naming that (Slurm's afterany chain)
    assert {k: type(e) for k, e in in_process.errors.items() if k[0] == "partition"} == {
        ("partition", 0): ChecksumMismatch, ("partition", 1): ChecksumMismatch}
    assert all("an earlier stage" in str(e) or "not done" in str(e)
               for k, e in in_process.errors.items() if k[0] != "partition")
