"""Replacing OUT requires proof that OUT is the output it claims to be (issue #19, items 1, 2 and 7).

A re-run over a damaged output swaps the fresh shards in (never "already swapped"); OUT holding
anything its manifest does not list is refused before anything runs and again at finalize; an
OUT on a mount point is refused, and a failed swap leaves OUT.tmp marked as its run's.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import shard_pipeline.contract.swap as swap_mod

from shard_pipeline.contract import replace as replace_mod
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract.replace import TMP_MARKER, tmp_owner
from shard_pipeline.contract.swap import SwapFailed
from shard_pipeline.contract.verify import verify_output
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.stages.finalize import run_finalize
from tests.pipeline_util import lang_dir, make_corpus, run_cli, tree_bytes

pytestmark = pytest.mark.slow  # end-to-end: runs the pipeline

ROWS = ("--shard-rows", "10")


def damage(out: Path) -> None:
    """Delete the first shard and overwrite bytes of the second (same size: only a hash tells)."""
    shards = sorted(out.glob("shard-*.parquet"))
    shards[0].unlink()
    with open(shards[1], "r+b") as f:
        f.seek(100)
        f.write(b"XXXX")


def rerun(capsys, root: Path, out: Path, run: Path, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = run_cli(root, out, run, *ROWS, *extra)
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


@pytest.fixture
def made(tmp_path) -> tuple[Path, Path, dict[str, bytes]]:
    root = make_corpus(tmp_path, n_docs=30)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run1", *ROWS) == 0
    return root, out, tree_bytes(out)


# --- 1. a re-run over a damaged output -------------------------------------------------------

def test_rerun_over_a_damaged_output_swaps_the_fresh_shards_in(tmp_path, made, capsys):
    root, out, whole = made
    damage(out)
    assert verify_output(out)  # the damage is real
    rc, said = rerun(capsys, root, out, tmp_path / "run2")
    assert rc == 0 and "damaged: 1 listed file missing" in said  # said at submit
    assert tree_bytes(out) == whole and not verify_output(out)
    assert not (tmp_path / "out.tmp").exists()
    # the language landed in its last write unit, or in the finalize job: its log says what it replaced
    log = "".join(p.read_text() for p in sorted((tmp_path / "run2").rglob("logs/*/local_*.log")))
    assert "replaced" in log and "shard-00000-of-00003.parquet" in log


def test_resumed_finalize_takes_out_as_swapped_only_when_its_files_are_this_runs(tmp_path, monkeypatch, capsys):
    root = make_corpus(tmp_path, n_docs=30)
    out, run = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-after-swap:0:enospc")
    assert run_cli(root, out, run, *ROWS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    whole = tree_bytes(out)
    damage(out)  # damaged after the swap, before the resume: OUT is no longer provably this run's
    capsys.readouterr()
    rc = cli_resume(run)
    said = "".join(capsys.readouterr())
    # not taken as swapped: every writer is redone into OUT.tmp and swapped in over the damaged OUT
    writers = json.loads((lang_dir(run) / "config.json").read_text())["execution"]["write_tasks"]
    assert rc == 0 and f"write     redo {writers}" in said, said
    assert tree_bytes(out) == whole and not verify_output(out) and not (tmp_path / "out.tmp").exists()


def test_marker_left_in_out_by_a_stop_right_after_the_exchange_is_removed(tmp_path, monkeypatch):
    root = make_corpus(tmp_path, n_docs=30)
    out, run = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-after-swap:0:enospc")
    assert run_cli(root, out, run, *ROWS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    (out / TMP_MARKER).write_text(str(lang_dir(run)) + "\n")  # as if stopped between the exchange and its removal
    assert run_finalize(RunDir(lang_dir(run)))["rows"] == 30
    assert not (out / TMP_MARKER).exists() and not verify_output(out)


def cli_resume(run: Path) -> int:
    from shard_pipeline.submit import cli

    return cli.main(["--resume", str(run), "--executor", "local"])


# --- 2. nothing but what the manifest lists --------------------------------------------------

def test_home_like_folder_with_a_copied_manifest_is_refused(tmp_path, made, capsys):
    root, out, _ = made
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (home / "Documents" / "letter.odt").write_text("dear")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("secret")
    shutil.copy(out / MANIFEST_NAME, home / MANIFEST_NAME)
    before = tree_bytes(home)
    for extra in (("--dry-run",), ()):
        rc, said = rerun(capsys, root, home, tmp_path / "run-home", *extra)
        assert rc == 2 and ".ssh/" in said and "Documents/" in said and "2 entries" in said, said
    assert tree_bytes(home) == before and not (tmp_path / "run-home").exists()
    # a forged manifest that lists the user's file is not an hplt-shard manifest
    m = json.loads((out / MANIFEST_NAME).read_text())
    m["files"].append({"name": "Documents/letter.odt", "bytes": 4, "sha256": "0" * 64})
    shutil.rmtree(home / ".ssh")
    (home / MANIFEST_NAME).write_text(json.dumps(m))
    rc, said = rerun(capsys, root, home, tmp_path / "run-home")
    assert rc == 2 and "which no hplt-shard output holds" in said and (home / "Documents" / "letter.odt").exists()


def test_notes_and_checkpoints_added_to_an_output_are_refused_before_and_at_finalize(tmp_path, made, monkeypatch,
                                                                                      capsys):
    root, out, whole = made
    (out / "notes.txt").write_text("mine")
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "step-100.pt").write_bytes(b"weights")
    for extra in (("--dry-run",), ()):
        rc, said = rerun(capsys, root, out, tmp_path / "run2", *extra)
        assert rc == 2 and "checkpoints/, notes.txt" in said and "would delete them" in said, said
    assert not (tmp_path / "run2").exists()
    shutil.rmtree(out / "checkpoints")
    (out / "notes.txt").unlink()
    # added while the run runs: finalize refuses, OUT and OUT.tmp are kept
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-before-swap:0:enospc")
    assert run_cli(root, out, tmp_path / "run2", *ROWS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert cli_resume(tmp_path / "run2") == 2  # the resume says what finalize would, before any stage
    assert "holds 1 entry its manifest does not list (notes.txt)" in capsys.readouterr().err
    with pytest.raises(replace_mod.NotReplaceable, match=r"holds 1 entry its manifest does not list \(notes.txt\)"):
        run_finalize(RunDir(lang_dir(tmp_path / "run2")))  # and finalize itself, for a file added while the run goes on
    assert (out / "notes.txt").read_text() == "mine" and tmp_owner(tmp_path / "out.tmp") == str(lang_dir(tmp_path / "run2"))
    (out / "notes.txt").unlink()
    assert cli_resume(tmp_path / "run2") == 0 and tree_bytes(out) == whole


def test_a_multi_language_root_is_not_replaced_by_a_single_run(tmp_path, made, capsys):
    root, out, _ = made
    multi = tmp_path / "multi"
    multi.mkdir()
    shutil.copytree(out, multi / "eng_Latn")
    shutil.copytree(out, multi / "deu_Latn")
    finished = tmp_path / "runs" / "x" / "eng_Latn"  # a claim left by a run that finished: it holds nothing
    finished.mkdir(parents=True)
    (finished / "DONE").write_text("")
    (multi / "eng_Latn.hplt-shard-claim").write_text(f"{finished}\n")
    before = tree_bytes(multi)
    rc, said = rerun(capsys, root, multi, tmp_path / "run-m")
    assert rc == 2 and f"--out {multi} is the root of a run of several languages" in said and f"--out {multi / 'eng_Latn'}" in said
    shutil.copy(out / MANIFEST_NAME, multi / MANIFEST_NAME)  # a root that is itself an output
    rc, said = rerun(capsys, root, multi, tmp_path / "run-m", "--dry-run")
    assert rc == 2 and "holds other outputs (deu_Latn/, eng_Latn/)" in said and "multi-language root" in said
    assert tree_bytes(multi) == {**before, MANIFEST_NAME: (out / MANIFEST_NAME).read_bytes()}
    # and a multi-language run does not write its languages into a folder that is itself an output
    from shard_pipeline.input.synth import generate_corpus
    from shard_pipeline.submit import cli

    generate_corpus(root, "deu_Latn", corpus="v4", n_docs=10, shard_names=["10_1"], seed=2)
    capsys.readouterr()
    assert cli.main(["eng_Latn,deu_Latn", "--corpus", "v4", "--local-root", str(root), "--out", str(out),
                     "--executor", "local", "--license", "CC0-1.0", "--dry-run"]) == 2
    assert f"--out {out} is itself an output" in capsys.readouterr().err
    # each OUT/<LANG> is checked as a single run's OUT, at --dry-run too (deu_Latn/ holds the eng output)
    (multi / MANIFEST_NAME).unlink()
    multi_argv = ["eng_Latn,deu_Latn", "--corpus", "v4", "--local-root", str(root), "--out", str(multi),
                  "--executor", "local", "--license", "CC0-1.0", "--dry-run"]
    assert cli.main(multi_argv) == 2
    assert "deu_Latn holds dataset 'hplt-v4-clean-eng_Latn', this run makes 'hplt-v4-clean-deu_Latn'" in \
        capsys.readouterr().err
    assert cli.main([*multi_argv, "--replace-other"]) == 0
    assert f"--out {multi}/deu_Latn holds a previous output" in capsys.readouterr().out
    assert tree_bytes(multi) == before


# --- 7. OUT on a mount point -------------------------------------------------------------------

@pytest.fixture
def tmpfs(tmp_path):
    """A real tmpfs mounted at tmp_path/out (needs root); unmounted at teardown."""
    point = tmp_path / "out"
    point.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(point)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {proc.stderr.strip()}")
    mounted = [True]

    def umount() -> None:
        if mounted[0]:
            subprocess.run(["umount", str(point)], check=True)
            mounted[0] = False

    yield point, umount
    umount()


def test_out_on_a_mount_point_is_refused_and_a_failed_swap_keeps_out_tmp_marked(tmp_path, tmpfs, monkeypatch,
                                                                                   capsys):
    point, umount = tmpfs
    root = make_corpus(tmp_path, n_docs=30)
    for extra in (("--dry-run",), ()):
        rc, said = rerun(capsys, root, point, tmp_path / "run0", *extra)
        assert rc == 2 and f"--out {point} is a mount point" in said and f"--out {point}/NAME" in said, said
    assert not (tmp_path / "run0").exists() and not (tmp_path / "out.tmp").exists()
    # mounted after the submit: finalize refuses; OUT.tmp stays this run's
    umount()
    run = tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-before-swap:0:enospc")
    assert run_cli(root, point, run, *ROWS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(point)], check=True)
    try:
        log = (run / "logs" / "finalize" / "local_0.log").read_text()
        assert cli_resume(run) == 2  # refused before finalize runs again, in words a resume can follow
        said = capsys.readouterr().err
        assert f"--out {point} is a mount point" in said and said.rstrip().endswith(
            f"unmount it, then resume the run (or start a new run with --out {point}/NAME); nothing was started")
        assert (run / "logs" / "finalize" / "local_0.log").read_text() == log
        assert tmp_owner(tmp_path / "out.tmp") == str(lang_dir(run))
        # a mount the guard does not see: the kernel's own refusal (EBUSY) leaves OUT.tmp marked too
        monkeypatch.setattr(replace_mod, "check_not_mounted", lambda out, new_run=True: None)
        with pytest.raises(SwapFailed, match="Device or resource busy"):
            run_finalize(RunDir(lang_dir(run)))
        monkeypatch.undo()
        assert tmp_owner(tmp_path / "out.tmp") == str(lang_dir(run)) and not list(point.iterdir())
    finally:
        subprocess.run(["umount", str(point)], check=True)
    capsys.readouterr()
    assert cli_resume(run) == 0  # recognised as this run's: the resume finishes the swap
    assert not (point / TMP_MARKER).exists() and not verify_output(point) and not (tmp_path / "out.tmp").exists()


# --- issue 21: an OUT holding another dataset ------------------------------------------------

def test_an_out_of_another_language_is_replaced_only_with_replace_other(tmp_path, made, capsys):
    from shard_pipeline.input.synth import generate_corpus
    from shard_pipeline.submit import cli

    root, out, whole = made
    generate_corpus(root, "deu_Latn", corpus="v4", n_docs=20, shard_names=["10_1"], seed=2)
    argv = ["deu_Latn", "--corpus", "v4", "--local-root", str(root), "--out", str(out), "--executor", "local",
            "--license", "CC0-1.0", *ROWS]
    for extra in (["--dry-run"], []):
        capsys.readouterr()
        assert cli.main([*argv, "--run-dir", str(tmp_path / "run-deu"), *extra]) == 2
        err = capsys.readouterr().err
        assert "holds dataset 'hplt-v4-clean-eng_Latn', this run makes 'hplt-v4-clean-deu_Latn'" in err, err
        assert "--replace-other" in err
    assert tree_bytes(out) == whole and not (tmp_path / "run-deu").exists()
    capsys.readouterr()
    assert cli.main([*argv, "--run-dir", str(tmp_path / "run-deu"), "--replace-other", "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert f"--out {out} holds a previous output: dataset 'hplt-v4-clean-eng_Latn'" in said  # what OUT holds now
    assert cli.main([*argv, "--run-dir", str(tmp_path / "run-deu"), "--replace-other"]) == 0
    assert json.loads((out / MANIFEST_NAME).read_text())["dataset"] == "hplt-v4-clean-deu_Latn"
    # an older version of the same dataset is replaced as before, without the flag
    assert cli.main([*argv, "--run-dir", str(tmp_path / "run-v2"), "--dataset-version", "2"]) == 0
    assert json.loads((out / MANIFEST_NAME).read_text())["version"] == "2"


def test_rerun_over_a_damaged_output_on_the_cluster(slurm_cluster, tmp_path):
    from tests.slurm_util import wait_for_jobs
    from tests.e2e.slurm.test_pipeline_slurm import TIMEOUT, slurm_conf, submit

    root = make_corpus(tmp_path, n_docs=30)
    conf, out = slurm_conf(tmp_path), tmp_path / "out"
    wait_for_jobs([j["job_id"] for j in submit(root, out, tmp_path / "run1", conf, *ROWS)], timeout=TIMEOUT)
    whole = tree_bytes(out)
    damage(out)
    wait_for_jobs([j["job_id"] for j in submit(root, out, tmp_path / "run2", conf, *ROWS)], timeout=TIMEOUT)
    assert (lang_dir(tmp_path / "run2") / "DONE").exists()
    assert tree_bytes(out) == whole and not verify_output(out) and not (tmp_path / "out.tmp").exists()


# --- 3. the fallback swap, the manifest after the swap, a file written during the swap ---------

def no_exchange(monkeypatch) -> None:
    """As on a filesystem without renameat2(RENAME_EXCHANGE): the two-rename fallback (forked units inherit it)."""
    monkeypatch.setattr(swap_mod, "_exchange", lambda a, b: False)


def test_fallback_swap_never_touches_a_kept_out_old(tmp_path, made, monkeypatch, capsys):
    root, out, whole = made
    kept = tmp_path / "out.old"
    out.rename(kept)  # the user keeps the previous output beside the new one
    assert run_cli(root, out, tmp_path / "run2", *ROWS) == 0
    no_exchange(monkeypatch)
    rc, said = rerun(capsys, root, out, tmp_path / "run3")
    assert rc == 0, said
    assert tree_bytes(kept) == whole and not verify_output(kept)  # untouched
    assert tree_bytes(out) == whole and not verify_output(out)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == ["out", "out.old"]


def test_fallback_swap_stopped_between_its_renames_is_finished_by_resume(tmp_path, made, monkeypatch, capsys):
    root, out, whole = made
    (out / MANIFEST_NAME).write_text((out / MANIFEST_NAME).read_text().replace('"version": "', '"version": "0'))
    previous = tree_bytes(out)  # another (older) version, to tell the two apart
    stop_between_the_renames(monkeypatch)
    run = tmp_path / "run2"
    capsys.readouterr()
    assert run_cli(root, out, run, *ROWS) != 0
    assert f"{out} is absent for now" in "".join(capsys.readouterr())
    assert not out.exists() and tree_bytes(tmp_path / "out.replaced" / "previous") == previous
    monkeypatch.undo()
    assert cli_resume(run) == 0, "".join(capsys.readouterr())
    assert tree_bytes(out) == whole and not verify_output(out)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == ["out"]


def test_a_second_rename_that_fails_puts_the_previous_output_back(tmp_path, made, monkeypatch):
    root, out, whole = made
    tmp = replace_mod.fresh_tmp_dir(out, owner="me")
    no_exchange(monkeypatch)
    real = swap_mod.os.rename

    def refuse_tmp(a, b):
        if Path(a) == tmp:
            raise OSError(13, "Permission denied")
        real(a, b)

    monkeypatch.setattr(swap_mod.os, "rename", refuse_tmp)
    with pytest.raises(SwapFailed, match="is as it was"):
        swap_mod.swap_into_place(tmp, out)
    assert tree_bytes(out) == whole and tmp_owner(tmp) == "me" and not (tmp_path / "out.replaced").exists()

    def refuse_both(a, b):
        if Path(a) == tmp or Path(b) == out:
            raise OSError(13, "Permission denied")
        real(a, b)

    monkeypatch.setattr(swap_mod.os, "rename", refuse_both)
    with pytest.raises(SwapFailed, match="is absent now: the previous version is complete in"):
        swap_mod.swap_into_place(tmp, out)
    assert not out.exists() and tree_bytes(tmp_path / "out.replaced" / "previous") == whole
    monkeypatch.setattr(swap_mod.os, "rename", real)
    (tmp / MANIFEST_NAME).write_text((tmp_path / "out.replaced" / "previous" / MANIFEST_NAME).read_text())
    swap_mod.swap_into_place(tmp, out)  # the retry puts the previous one back first, then swaps
    assert (out / MANIFEST_NAME).exists() and not (tmp_path / "out.replaced").exists() and not tmp.exists()


def test_an_out_replaced_the_run_did_not_make_is_refused_and_kept(tmp_path, made, capsys):
    root, out, whole = made
    foreign = tmp_path / "out.replaced"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("mine")
    rc, said = rerun(capsys, root, out, tmp_path / "run2")
    assert rc == 2 and "out.replaced exists and is not this run's" in said, said
    assert (foreign / "mine.txt").read_text() == "mine" and tree_bytes(out) == whole


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "fallback"])
def test_a_file_written_into_out_during_the_swap_is_kept(tmp_path, made, monkeypatch, capsys, exchange):
    root, out, whole = made
    tmp = replace_mod.fresh_tmp_dir(out, owner="me")
    for name, data in whole.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(data)
    real = swap_mod._exchange if exchange else (lambda a, b: False)

    def user_writes_then_exchange(a: Path, b: Path) -> bool:
        (out / "notes.txt").write_text("written after the check")  # the race: after check_replaceable
        return real(a, b)

    monkeypatch.setattr(swap_mod, "_exchange", user_writes_then_exchange)
    capsys.readouterr()
    result = swap_mod.swap_into_place(tmp, out)
    said = capsys.readouterr().out
    old = tmp if exchange else tmp_path / "out.replaced" / "previous"
    assert result.notices and "notes.txt" in result.notices[0]
    assert (old / "notes.txt").read_text() == "written after the check"
    assert sorted(p.name for p in old.iterdir()) == ["notes.txt"]  # the previous output's own files are gone
    assert "notes.txt" in said and "keeps 1 file" in said
    assert tree_bytes(out) == whole


def test_resume_over_an_out_whose_manifest_or_card_changed_after_the_swap_redoes_it(tmp_path, monkeypatch, capsys):
    root = make_corpus(tmp_path, n_docs=30)
    for victim in (MANIFEST_NAME, "README.md"):
        out, run = tmp_path / f"out-{victim}", tmp_path / f"run-{victim}"
        monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-after-swap:0:enospc")
        assert run_cli(root, out, run, *ROWS, "--dataset-card") == 1
        monkeypatch.delenv("HPLT_SHARD_FAULT")
        whole = tree_bytes(out)
        data = (out / victim).read_bytes()
        (out / victim).write_bytes(data[:50] + (b"X" if data[50:51] != b"X" else b"Y") + data[51:])  # same size
        assert verify_output(out)  # the damage is real
        capsys.readouterr()
        rc = cli_resume(run)
        said = "".join(capsys.readouterr())
        assert rc == 0 and "write     redo" in said, said
        assert tree_bytes(out) == whole and not verify_output(out)


def test_fallback_swap_stopped_before_deleting_the_previous_output_is_cleared_by_resume(tmp_path, made, monkeypatch,
                                                                                         capsys):
    root, out, whole = made
    no_exchange(monkeypatch)
    real = swap_mod.remove_previous

    def die(old, manifest):
        raise SystemExit(9)  # as if killed after the second rename

    monkeypatch.setattr(swap_mod, "remove_previous", die)
    run = tmp_path / "run2"
    assert run_cli(root, out, run, *ROWS) != 0
    assert (tmp_path / "out.replaced" / "previous" / MANIFEST_NAME).exists() and tree_bytes(out) == whole
    monkeypatch.setattr(swap_mod, "remove_previous", real)
    capsys.readouterr()
    assert cli_resume(run) == 0, "".join(capsys.readouterr())
    assert tree_bytes(out) == whole and not verify_output(out)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == ["out"]


def test_an_input_changed_after_partition_read_it_stops_finalize_before_the_swap(tmp_path, made, monkeypatch):
    import os

    from shard_pipeline.stages.finalize import FinalizeError

    root, out, whole = made
    run = tmp_path / "run2"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-before-swap:0:enospc")
    assert run_cli(root, out, run, *ROWS, "--dataset-version", "2") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    shard = sorted(root.rglob("*.jsonl.zst"))[0]
    st = shard.stat()
    os.utime(shard, (st.st_atime, st.st_mtime + 100))
    with pytest.raises(FinalizeError, match=rf"1 input shard changed after this run read it: .*{shard.name}"
                                            rf".*is as it was; restore the input and \./hplt-shard --resume {run}"):
        run_finalize(RunDir(lang_dir(run)))
    assert tree_bytes(out) == whole
    os.utime(shard, (st.st_atime, st.st_mtime))  # restored: the resume finishes
    assert cli_resume(run) == 0 and not verify_output(out)
    assert json.loads((out / MANIFEST_NAME).read_text())["version"] == "2"


def test_status_of_a_done_run_says_when_out_no_longer_holds_its_output(tmp_path, made, capsys):
    from shard_pipeline.submit import cli

    root, out, whole = made
    capsys.readouterr()
    assert cli.main(["--status", str(tmp_path / "run1")]) == 0
    said = capsys.readouterr().out
    assert f"done: output at {out}" in said and "no longer" not in said
    assert run_cli(root, out, tmp_path / "run2", "--shard-rows", "7") == 0  # a later run replaces OUT
    capsys.readouterr()
    assert cli.main(["--status", str(tmp_path / "run1")]) == 0
    said = capsys.readouterr().out
    assert "_MANIFEST.json is no longer the one this run wrote" in said and f"--verify {out}" in said, said
    assert cli.main(["--status", str(tmp_path / "run2")]) == 0
    assert "no longer" not in capsys.readouterr().out


def stop_between_the_renames(monkeypatch) -> None:
    """The fallback swap dies right after it parked OUT (as a kill there would): no rollback runs."""
    no_exchange(monkeypatch)
    park = swap_mod._park

    def park_then_die(o: Path, owner: str) -> Path:
        park(o, owner)
        raise SystemExit(9)

    monkeypatch.setattr(swap_mod, "_park", park_then_die)


def test_something_at_out_while_the_previous_version_is_parked_is_refused_and_both_kept(tmp_path, made, monkeypatch,
                                                                                        capsys):
    root, out, whole = made
    stop_between_the_renames(monkeypatch)
    run = tmp_path / "run2"
    assert run_cli(root, out, run, "--shard-rows", "7") != 0
    monkeypatch.undo()
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert cli_resume(run) != 0
    said = "".join(capsys.readouterr())
    assert "holds the previous version of --out" in said and "holds something else now" in said, said
    assert tree_bytes(tmp_path / "out.replaced" / "previous") == whole and (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    assert cli_resume(run) == 0 and not verify_output(out)  # moved away: the previous one goes back, then the swap
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == ["out"]


def test_a_resume_after_the_swap_never_deletes_an_output_it_did_not_replace(tmp_path, made, monkeypatch, capsys):
    root, out, whole = made
    run = tmp_path / "run2"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-after-swap:0:enospc")
    assert run_cli(root, out, run, "--shard-rows", "7") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    other = tmp_path / "out.tmp"  # someone's finished output lands where this run's exchange left the old one
    assert run_cli(root, other, tmp_path / "run3", *ROWS) == 0
    theirs = tree_bytes(other)
    capsys.readouterr()
    assert cli_resume(run) == 0
    assert tree_bytes(other) == theirs and "is not the previous version this run's swap moved there" in \
        "".join(capsys.readouterr()) + (run / "logs" / "finalize" / "local_0.log").read_text()


def test_a_resume_of_an_older_run_does_not_replace_a_newer_output_of_another_configuration(tmp_path, made,
                                                                                           monkeypatch, capsys):
    root, out, whole = made
    run = tmp_path / "run2"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-after-swap:0:enospc")
    assert run_cli(root, out, run, "--shard-rows", "7") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    assert run_cli(root, out, tmp_path / "run3", *ROWS, "--dataset-version", "9") == 0  # a newer output
    newer = tree_bytes(out)
    capsys.readouterr()
    assert cli_resume(run) != 0
    said = "".join(capsys.readouterr()) + (run / "logs" / "finalize" / "local_0.log").read_text()
    assert "holds another output now (dataset" in said and "this run does not replace a newer output" in said, said
    assert tree_bytes(out) == newer


def test_files_kept_by_a_swap_are_told_at_the_end_of_the_run_and_by_status(tmp_path, made, monkeypatch, capsys):
    from shard_pipeline.submit import cli

    root, out, whole = made
    real = swap_mod._exchange

    def user_writes_then_exchange(a: Path, b: Path) -> bool:
        (out / "notes.txt").write_text("written after the check")
        return real(a, b)

    monkeypatch.setattr(swap_mod, "_exchange", user_writes_then_exchange)
    rc, said = rerun(capsys, root, out, tmp_path / "run2", "--dataset-version", "3")
    assert rc == 0 and "warning:" in said and "keeps 1 file that appeared in" in said and "notes.txt" in said, said
    assert (tmp_path / "out.tmp" / "notes.txt").exists() and not verify_output(out)
    assert cli.main(["--status", str(tmp_path / "run2")]) == 0
    assert "; warning: " in capsys.readouterr().out
