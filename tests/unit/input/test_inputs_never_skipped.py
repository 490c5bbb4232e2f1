"""Inputs are never skipped or misread in silence (issue #11, section 2)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shard_pipeline.input.corpus import InputChanged, InputError, find_shards
from shard_pipeline.input.counts_index import CountRow, record
from shard_pipeline.input.synth import generate_corpus
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.stages import partition as partition_mod
from shard_pipeline.submit import cli
from tests.pipeline_util import lang_dir, LANG, LICENSE, index_file, make_corpus, run_cli

SHARD = "9_1.ia.jsonl.zst"


def test_dangling_symlink_named_like_a_shard_stops_the_submit(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    (root / LANG / "7_1.cc.jsonl.zst").symlink_to(tmp_path / "gone.jsonl.zst")
    assert run_cli(root, tmp_path / "out", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "7_1.cc.jsonl.zst" in err and "dangling symbolic link" in err
    assert not (tmp_path / "run").exists()


def test_directory_named_like_a_shard_stops_the_submit(tmp_path):
    root = make_corpus(tmp_path, n_docs=20)
    (root / LANG / "7_2.cc.jsonl.zst").mkdir()
    with pytest.raises(InputError, match=r"7_2\.cc\.jsonl\.zst \(a directory\)"):
        find_shards(LANG, corpus="v4", local_root=root)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file whatever its mode")
def test_unreadable_shard_stops_the_submit(tmp_path):
    root = make_corpus(tmp_path, n_docs=20)
    (root / LANG / SHARD).chmod(0)
    with pytest.raises(InputError, match="unreadable"):
        find_shards(LANG, corpus="v4", local_root=root)


def test_symlink_to_a_real_shard_is_read(tmp_path):
    root = make_corpus(tmp_path, n_docs=20)
    (root / LANG / SHARD).rename(tmp_path / "real.jsonl.zst")
    (root / LANG / SHARD).symlink_to(tmp_path / "real.jsonl.zst")
    assert "9_1.ia" in [s.name for s in find_shards(LANG, corpus="v4", local_root=root)]


def _submitted(tmp_path, fake_slurm) -> tuple[Path, Path]:
    root = make_corpus(tmp_path, n_docs=40)
    conf = tmp_path / "t.conf"
    conf.write_text("PRESET=local\nACCOUNT=p\n")
    assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out"),
                     "--run-dir", str(tmp_path / "run"), "--license", LICENSE, "--conf", str(conf),
                     "--executor", "slurm", "--partition-tasks", "1"]) == 0
    return root, lang_dir(tmp_path / "run")


def test_input_changed_before_its_task_fails_naming_both_values(tmp_path, fake_slurm):
    root, run_dir = _submitted(tmp_path, fake_slurm)
    path = root / LANG / SHARD
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\0" * 10)
    with pytest.raises(InputChanged) as e:
        partition_mod.run_partition(RunDir(run_dir), 0)
    assert str(path) in str(e.value) and f"size {size} -> {size + 10}" in str(e.value)
    assert not (run_dir / "partition" / "task-00000.receipt.json").exists()


def test_input_changed_while_read_fails_naming_both_values(tmp_path, fake_slurm, monkeypatch):
    root, run_dir = _submitted(tmp_path, fake_slurm)
    path = root / LANG / SHARD
    real = partition_mod.read_into

    def read_then_touch(buf, inp, *a, **k):
        stats = real(buf, inp, *a, **k)
        if inp.location == str(path):
            st = path.stat()
            os.utime(path, (st.st_atime, st.st_mtime + 100))
        return stats

    monkeypatch.setattr(partition_mod, "read_into", read_then_touch)
    with pytest.raises(InputChanged) as e:
        partition_mod.run_partition(RunDir(run_dir), 0)
    assert str(path) in str(e.value) and "while it was read" in str(e.value) and "mtime" in str(e.value)
    assert not (run_dir / "partition" / "task-00000.receipt.json").exists()


@pytest.mark.slow
def test_counts_index_row_that_disagrees_is_reported_and_recorded(tmp_path, capsys):
    """A row counted from a smaller copy (a cut download counted once), the file whole now: said, and replaced
    by the full read. (A row that knows the file as larger stops the run: test_short_inputs.py.)"""
    root = make_corpus(tmp_path, n_docs=40)
    path = root / LANG / SHARD
    st = path.stat()
    idx = tmp_path / "index"
    record(idx, *index_file(idx, root).relative_to(idx).parts[:2], LANG, [CountRow(SHARD, st.st_size - 5, int(st.st_mtime), 3, "hplt-shard-read",
                                               "2026-01-01T00:00:00Z")])
    args = ["--counts-index", str(idx), "--shard-rows", "10"]
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--dry-run", *args) == 0
    err = capsys.readouterr().err
    line = next(l for l in err.splitlines() if SHARD in l)
    assert f"{st.st_size - 5} bytes" in line and f"{st.st_size} bytes" in line and "3 documents" in line
    assert "documents" in line.split("the file has")[1]
    assert run_cli(root, tmp_path / "out", tmp_path / "run", *args) == 0
    assert SHARD in capsys.readouterr().err
    rec = json.loads((lang_dir(tmp_path / "run") / "run.json").read_text())["counts_index_disagreements"]
    assert rec[0]["file"] == str(path) and rec[0]["index_bytes"] == st.st_size - 5 and rec[0]["index_docs"] == 3
    assert rec[0]["file_bytes"] == st.st_size
    validation = json.loads((lang_dir(tmp_path / "run") / "validation.json").read_text())
    assert any(SHARD in r and "3 documents ->" in r for r in validation["counts_index_replaced"])


@pytest.mark.slow
def test_v4_records_with_corpus_v3_are_refused_naming_v4(tmp_path, capsys):
    generate_corpus(tmp_path / "clean", "fin_Latn", corpus="v4", n_docs=20, shard_names=["9_1", "9_2"])
    rc = cli.main(["fin_Latn", "--corpus", "v3", "--local-root", str(tmp_path / "clean"), "--out", str(tmp_path / "o"),
                   "--run-dir", str(tmp_path / "r"), "--executor", "local", "--license", LICENSE, "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2 and "use --corpus v4" in err and "openlid_v3" in err and "9_1.jsonl.zst" in err


def test_v3_records_with_corpus_v4_are_refused_naming_v3(tmp_path, capsys):
    generate_corpus(tmp_path / "sorted", "fin_Latn", corpus="v3", n_docs=20, shard_names=["9_1"])
    rc = cli.main(["fin_Latn", "--corpus", "v4", "--local-root", str(tmp_path / "sorted"), "--out", str(tmp_path / "o"),
                   "--run-dir", str(tmp_path / "r"), "--executor", "local", "--license", LICENSE])
    err = capsys.readouterr().err
    assert rc == 2 and "use --corpus v3" in err and not (tmp_path / "r").exists()


def test_v4_english_names_with_corpus_v3_are_refused(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--dry-run", corpus="v3") == 2
    assert "source tag" in capsys.readouterr().err


@pytest.mark.slow
def test_matching_shapes_pass(tmp_path):
    generate_corpus(tmp_path / "sorted", "fin_Latn", corpus="v3", n_docs=20, shard_names=["9_1"])
    assert cli.main(["fin_Latn", "--corpus", "v3", "--local-root", str(tmp_path / "sorted"), "--out",
                     str(tmp_path / "o"), "--run-dir", str(tmp_path / "r"), "--executor", "local",
                     "--license", LICENSE]) == 0



@pytest.mark.parametrize("odd,flag", [("9_1 copy.cc", ("--wds", "9")), ("9_4.CC", ("--sources", "cc")),
                                      ("12_1.cc", ("--wds", "9-10"))])
def test_a_filter_never_drops_a_file_it_cannot_classify(tmp_path, capsys, odd, flag):
    root = make_corpus(tmp_path, n_docs=20, names=("10_1.cc", "9_1.cc", odd))
    assert odd in [s.name for s in find_shards(LANG, corpus="v4", local_root=root)]  # unfiltered: read
    rc = run_cli(root, tmp_path / "out", tmp_path / "run", *flag, "--dry-run")
    err = capsys.readouterr().err
    assert rc == 2 and f"{odd}.jsonl.zst" in err and "cannot classify" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["a folder", "a foreign header"])
def test_a_counts_index_file_that_cannot_be_read_is_a_warning_and_the_run_counts_itself(tmp_path, capsys, damage):
    """A project-shared index one member made unreadable (umask 077; here a folder where the file should be,
    or a file that is not an index, since tests run as root) must not stop everyone else's runs: a warning
    naming the file, the inputs counted by the run itself, the same output as without an index."""
    root = make_corpus(tmp_path, n_docs=40)
    idx = tmp_path / "index"
    path = index_file(idx, root)
    path.parent.mkdir(parents=True)
    if damage == "a folder":
        path.mkdir()
    else:
        path.write_text("shard\tsomething else\n")
    args = ["--counts-index", str(idx), "--shard-rows", "10"]
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--dry-run", *args) == 0
    err = capsys.readouterr().err
    assert f"warning: the counts index file {path} cannot be read (" in err and "counts its inputs itself" in err, err
    assert run_cli(root, tmp_path / "out", tmp_path / "run", *args) == 0
    assert f"the counts index file {path} cannot be read" in capsys.readouterr().err
    assert run_cli(root, tmp_path / "plain", tmp_path / "run-plain", "--shard-rows", "10") == 0
    shards = lambda out: {f["name"]: f["sha256"] for f in json.loads((out / "_MANIFEST.json").read_text())["shards"]}
    assert shards(tmp_path / "out") == shards(tmp_path / "plain")
