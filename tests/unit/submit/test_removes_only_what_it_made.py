"""A run removes or replaces only what it made: OUT.tmp carries a marker, and the run dir, the
input root, OUT and OUT.tmp never overlap (issue #11, section 1)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import shard_pipeline.contract.swap as swap_mod

from shard_pipeline.contract import replace as replace_mod
from shard_pipeline.contract.replace import TMP_MARKER, fresh_tmp_dir, tmp_owner
from shard_pipeline.contract.swap import swap_into_place
from shard_pipeline.errors import UsageError
from shard_pipeline.run.rulebook import check_no_overlap
from tests.pipeline_util import make_corpus, manifest, run_cli


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_user_folder_named_out_tmp_survives_and_nothing_is_left(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    notes = tmp_path / "mydata.tmp" / "notes.txt"
    notes.parent.mkdir()
    notes.write_text("my notes")
    rc = run_cli(root, tmp_path / "mydata", tmp_path / "run")
    err = capsys.readouterr().err
    assert rc == 2
    assert str(tmp_path / "mydata.tmp") in err and "not made by hplt-shard" in err
    assert notes.read_text() == "my notes"
    assert not (tmp_path / "run").exists() and not (tmp_path / "mydata.hplt-shard-claim").exists()


def test_input_root_as_out_tmp_is_refused_and_the_corpus_survives(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    corpus = tmp_path / "X.tmp"
    root.rename(corpus)
    before = snapshot(corpus)
    rc = run_cli(corpus, tmp_path / "X", tmp_path / "run")
    err = capsys.readouterr().err
    assert rc == 2 and f"input root {corpus}" in err and f"OUT.tmp {corpus}" in err
    assert snapshot(corpus) == before and not (tmp_path / "X").exists()


def test_run_dir_as_out_tmp_is_refused(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    rc = run_cli(root, tmp_path / "out", tmp_path / "out.tmp")
    err = capsys.readouterr().err
    assert rc == 2 and f"--run-dir {tmp_path / 'out.tmp'}" in err and "OUT.tmp" in err
    assert not (tmp_path / "out.tmp").exists() and not (tmp_path / "out.hplt-shard-claim").exists()


@pytest.mark.parametrize("a,b", [("x", "x"), ("x/in", "x"), ("x", "x/in")])
def test_every_overlap_is_refused_with_both_paths(tmp_path, a, b):
    names = ["--run-dir", "input root", "--out", "OUT.tmp"]
    for i, na in enumerate(names):
        for nb in names[i + 1:]:
            if {na, nb} == {"--out", "OUT.tmp"}:
                continue
            paths = {n: tmp_path / f"far-{k}" for k, n in enumerate(names)}
            paths[na], paths[nb] = tmp_path / a, tmp_path / b
            with pytest.raises(UsageError) as e:
                check_no_overlap(paths)
            assert str(tmp_path / a) in str(e.value) and str(tmp_path / b) in str(e.value)
            assert na in str(e.value) and nb in str(e.value)
    check_no_overlap({n: tmp_path / f"far-{k}" for k, n in enumerate(names)})  # apart: fine


def test_symlinked_out_is_refused(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert run_cli(root, tmp_path / "link", tmp_path / "run") == 2
    assert "symbolic link" in capsys.readouterr().err
    assert list((tmp_path / "real").iterdir()) == [] and not (tmp_path / "run").exists()


def test_out_tmp_of_another_run_is_refused_and_kept(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    fresh_tmp_dir(tmp_path / "out", owner=str(tmp_path / "other-run"))
    (tmp_path / "out.tmp" / "half.parquet").write_bytes(b"half")
    assert run_cli(root, tmp_path / "out", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "another run" in err and str(tmp_path / "other-run") in err
    assert (tmp_path / "out.tmp" / "half.parquet").read_bytes() == b"half"


def test_fresh_tmp_dir_removes_only_its_own_owners(tmp_path):
    out = tmp_path / "out"
    tmp = fresh_tmp_dir(out, owner="run-a")
    assert tmp_owner(tmp) == "run-a"
    (tmp / "x").write_text("x")
    assert fresh_tmp_dir(out, owner="run-a") == tmp and sorted(os.listdir(tmp)) == [TMP_MARKER]
    with pytest.raises(FileExistsError, match="another run"):
        fresh_tmp_dir(out, owner="run-b")
    (tmp / TMP_MARKER).unlink()
    (tmp / "user.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not made by hplt-shard"):
        fresh_tmp_dir(out, owner="run-a")
    assert (tmp / "user.txt").read_text() == "mine"
    tmp_file = tmp_path / "f.tmp"
    tmp_file.write_text("a file")
    with pytest.raises(FileExistsError):
        fresh_tmp_dir(tmp_path / "f", owner="run-a")
    assert tmp_file.read_text() == "a file"


def test_two_rename_fallback_never_removes_a_user_out_old(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    old = tmp_path / "out.old"
    old.mkdir()
    (old / "keep.txt").write_text("mine")
    tmp = fresh_tmp_dir(out, owner="run-a")
    monkeypatch.setattr(swap_mod, "_exchange", lambda a, b: False)
    swap_into_place(tmp, out)  # the fallback parks OUT in a folder of its own (OUT.replaced), never OUT.old
    assert (old / "keep.txt").read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.old"]


@pytest.mark.slow
def test_the_marker_never_reaches_out(tmp_path):
    root = make_corpus(tmp_path, n_docs=30)
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--shard-rows", "10") == 0
    assert not list((tmp_path / "out").rglob(TMP_MARKER)) and manifest(tmp_path / "out")["rows"] == 30


@pytest.mark.slow
def test_overlap_is_refused_at_dry_run_too(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    assert run_cli(root, tmp_path / "out", tmp_path / "out" / "run", "--dry-run") == 2
    assert "lies inside --out" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["out", "out.tmp", "input"])
def test_counts_index_inside_out_tmp_or_input_is_refused(tmp_path, capsys, where):
    root = make_corpus(tmp_path, n_docs=20)
    index = {"out": tmp_path / "out" / "ci", "out.tmp": tmp_path / "out.tmp" / "ci", "input": root / "ci"}[where]
    before = snapshot(root)
    for extra in (("--dry-run",), ()):
        rc = run_cli(root, tmp_path / "out", tmp_path / "run", "--counts-index", str(index), *extra)
        err = capsys.readouterr().err
        assert rc == 2 and f"--counts-index {index} lies inside" in err and "Traceback" not in err
    assert not index.exists() and not (tmp_path / "run").exists() and not (tmp_path / "out").exists()
    assert snapshot(root) == before


def test_counts_index_inside_the_run_dir_is_allowed(tmp_path):
    root = make_corpus(tmp_path, n_docs=20)
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--counts-index", str(tmp_path / "run" / "ci")) == 0
    assert any((tmp_path / "run" / "ci").rglob("*.tsv"))


def test_out_inside_another_output_is_refused(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    assert run_cli(root, tmp_path / "a", tmp_path / "run-a") == 0
    before = snapshot(tmp_path / "a")
    for extra in (("--dry-run",), ()):
        rc = run_cli(root, tmp_path / "a" / "sub" / "b", tmp_path / "run-b", *extra)
        err = capsys.readouterr().err
        assert rc == 2 and f"inside the output {tmp_path / 'a'}" in err and "Traceback" not in err
    assert snapshot(tmp_path / "a") == before and not (tmp_path / "run-b").exists()


def test_out_inside_another_runs_out_tmp_is_refused(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    fresh_tmp_dir(tmp_path / "a", owner=str(tmp_path / "other-run"))
    rc = run_cli(root, tmp_path / "a.tmp" / "b", tmp_path / "run-b", "--dry-run")
    err = capsys.readouterr().err
    assert rc == 2 and f"inside {tmp_path / 'a.tmp'}, the staging folder" in err
    assert sorted(p.name for p in (tmp_path / "a.tmp").iterdir()) == [TMP_MARKER]


def test_counts_index_inside_a_multi_language_root_is_refused(tmp_path, capsys):
    from tests.e2e.local.test_multi_local import make_langs, multi_cli

    root = make_langs(tmp_path, {"eng_Latn": (20, ("9_1.cc",)), "fin_Latn": (20, ("9_1",))})
    rc = multi_cli(root, "eng_Latn,fin_Latn", tmp_path / "out", tmp_path / "run", "--counts-index",
                   str(tmp_path / "out" / "ci"), "--dry-run")
    assert rc == 2 and f"--counts-index {tmp_path / 'out' / 'ci'} lies inside --out" in capsys.readouterr().err


def test_out_inside_a_marked_parking_folder_is_refused(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    park = tmp_path / "a.replaced"
    park.mkdir()
    (park / TMP_MARKER).write_text(str(tmp_path / "other-run"))
    assert run_cli(root, park / "b", tmp_path / "run-b", "--dry-run") == 2
    assert f"inside {park}, the staging folder of the run" in capsys.readouterr().err
