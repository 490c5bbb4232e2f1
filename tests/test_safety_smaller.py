"""The smaller edges of #11: content options refused before --dry-run, stream errors without
"line 0", repeated JSON keys documented as last-wins."""
from __future__ import annotations

import zstandard

from shard_pipeline.input.corpus import InputShard
from shard_pipeline.input.reader import CorruptShard, ReadStats, iter_records
from tests.pipeline_util import make_corpus, run_cli


def test_dp_ranks_zero_is_refused_at_dry_run(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--dry-run", "--dp-ranks", "0") == 2
    assert "--dp-ranks" in capsys.readouterr().err
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--dry-run", "--dp-ranks", "") == 2


def test_empty_dataset_version_is_refused(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--dataset-version", "") == 2
    assert "version must be a non-empty" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--dry-run", "--dataset-version", "") == 2


def _shard(tmp_path, payload: bytes) -> InputShard:
    path = tmp_path / "9_1.jsonl.zst"
    path.write_bytes(payload)
    st = path.stat()
    return InputShard("9_1", str(path), st.st_size, int(st.st_mtime), "hplt-v4/clean/x/9_1")


def test_stream_errors_never_say_line_0(tmp_path):
    for payload, reason in ((b"", "empty_file"), (b"plain text", "not_zstd"),
                            (zstandard.ZstdCompressor().compress(b"x" * 1000)[:9], "truncated")):
        try:
            list(iter_records(_shard(tmp_path, payload), corpus="v4", stats=ReadStats()))
        except CorruptShard as e:
            assert e.reason == reason and "line 0" not in str(e) and "before the first line" in str(e), str(e)
        else:
            raise AssertionError(f"{reason}: no error")


def test_repeated_keys_are_last_wins(tmp_path):
    line = (b'{"id":"first-id","id":"doc-1","text":"first","text":"second","u":"https://a.example/",'
            b'"u":"https://b.example/","pii":[[0,1]],"pii":[]}\n')
    recs = list(iter_records(_shard(tmp_path, zstandard.ZstdCompressor().compress(line)), corpus="v4",
                             stats=(stats := ReadStats())))
    assert [(r.id, r.text, r.url, r.pii_count) for r in recs] == [("doc-1", "second", "https://b.example/", 0)]
    assert stats.read == 1 and stats.kept == 1 and not stats.quarantined
