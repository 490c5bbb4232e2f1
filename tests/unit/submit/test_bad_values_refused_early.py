"""The smaller edges of #11: content options refused before --dry-run, stream errors without
"line 0", repeated JSON keys documented as last-wins."""
from __future__ import annotations

import pytest
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



@pytest.mark.parametrize("flag,value,said", [
    ("--spill-bytes", "-5", "--spill-bytes must be at least 1, got -5"),
    ("--jobs", "-3", "--jobs must be at least 1, got -3"),
    ("--jobs", "0", "--jobs must be at least 1, got 0"),
    ("--partition-tasks", "0", "--partition-tasks must be at least 1, got 0"),
    ("--write-tasks", "0", "--write-tasks must be at least 1, got 0"),
    ("--buckets", "-1", "--buckets must be at least 1, got -1"),
    ("--write-tasks", "100000000", "--write-tasks 100,000,000 is more than the about 20 documents of this run and the 6 tasks"),
    ("--dp-ranks", "1000", "the shard count must be a multiple of 1,000 (their lcm), but this run has only 20"),
])
def test_numbers_a_run_cannot_use_are_refused_at_dry_run(tmp_path, capsys, flag, value, said):
    root = make_corpus(tmp_path, n_docs=20)
    for extra in (("--dry-run",), ()):
        assert run_cli(root, tmp_path / "out", tmp_path / "run", flag, value, *extra) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["abc", "-1"])
def test_a_bad_clean_value_of_the_conf_is_refused_at_dry_run(tmp_path, capsys, value):
    root = make_corpus(tmp_path, n_docs=20)
    conf = tmp_path / "c.conf"
    conf.write_text(f"CLEAN_MAX_BYTES={value}\n")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--conf", str(conf), "--dry-run") == 2
    err = capsys.readouterr().err
    assert f"{conf}:1: CLEAN_MAX_BYTES: expected a positive integer, got '{value}'" in err  # the file and line


def test_dp_ranks_beyond_estimated_documents_are_said_not_refused():
    from types import SimpleNamespace

    from shard_pipeline.submit.guards import dp_ranks_note

    column = {"split_layout": "column", "val_permille": 5}
    note = dp_ranks_note(SimpleNamespace(dp_ranks="128,448", **column), est_docs=500, docs_known=False)
    assert "multiple of 896" in note and "an estimated 500 documents" in note and "says so when it is done" in note
    assert dp_ranks_note(SimpleNamespace(dp_ranks="128,448", **column), est_docs=5000, docs_known=True) is None
    assert dp_ranks_note(SimpleNamespace(dp_ranks=None, **column), est_docs=1, docs_known=True) is None


def test_dp_ranks_that_a_set_of_the_dirs_layout_cannot_meet_are_said_at_submit_and_when_done():
    """--split-layout dirs cuts each set on its own: validation (0.5% by default) fell short of the lcm with exit 0
    and no word but balance.json's `unbalanced_rank_counts`."""
    from types import SimpleNamespace

    from shard_pipeline.stages.finalize import rank_shortfalls
    from shard_pipeline.submit.guards import dp_ranks_note

    dirs = SimpleNamespace(lang="fin_Latn", dp_ranks="16", split_layout="dirs", val_permille=5)
    note = dp_ranks_note(dirs, est_docs=3000, docs_known=True)
    assert note.startswith("fin_Latn: --dp-ranks 16 with --split-layout dirs: each set's shard count must be a multiple "
                           "of 16 (their lcm), but validation/ will hold about 15 documents (--val-permille 5)")
    assert "validation/ will hold about 0 documents" in dp_ranks_note(dirs, est_docs=100, docs_known=True)
    assert dp_ranks_note(dirs, 100_000, True) is None
    assert dp_ranks_note(SimpleNamespace(lang="x", dp_ranks="16", split_layout="dirs", val_permille=0), 3000, True) is None
    manifest = {"params": {"split_layout": "dirs"},
                "shards": [{"name": f"train/shard-{i:05d}-of-00016.parquet", "rows": 187} for i in range(16)]
                + [{"name": "validation/shard-00000-of-00001.parquet", "rows": 11}]}
    assert rank_shortfalls((16,), manifest) == [
        "--dp-ranks 16: validation/ has 1 shard, not a multiple of 16 (their lcm): it holds only 11 documents and a "
        "shard is never empty, so 16 ranks cannot take equal numbers of its shards (OUT/__balance/balance.json)"]
    assert rank_shortfalls((), manifest) == [] and rank_shortfalls((1,), manifest) == []
    column = {"params": {"split_layout": "column"}, "shards": manifest["shards"][:16]}
    assert rank_shortfalls((4, 8), column) == []


def test_negative_jobs_on_resume_is_refused(tmp_path, capsys):
    from shard_pipeline.submit import cli

    root = make_corpus(tmp_path, n_docs=20)
    assert run_cli(root, tmp_path / "out", tmp_path / "run") == 0
    capsys.readouterr()
    assert cli.main(["--resume", str(tmp_path / "run"), "--jobs", "-3"]) == 2
    assert "--jobs must be at least 1, got -3" in capsys.readouterr().err
