"""Runs never stranded or told the wrong story (issue #11, section 3): a failed start leaves no
claim, lock waits end, messages say what OUT holds, OSErrors are one line, Ctrl-C stops the workers."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shard_pipeline.submit import cli
from tests.pipeline_util import LANG, LICENSE, as_from_a_terminal, lang_dir, make_corpus, manifest, run_cli, tree_bytes

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_run_dir_that_cannot_be_created_leaves_no_claim(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    (tmp_path / "a_file").write_text("x")
    rc = run_cli(root, tmp_path / "out", tmp_path / "a_file" / "run")
    err = capsys.readouterr().err
    errors = [l for l in err.splitlines() if "warning:" not in l]
    assert rc == 2 and len(errors) == 1 and "Traceback" not in err
    assert "creating the run directory" in err and str(tmp_path / "a_file") in err
    assert not (tmp_path / "out.hplt-shard-claim").exists()
    # the next run with a good run dir is not refused by a claim nobody holds
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--shard-rows", "10") == 0


def test_out_under_proc_ends_in_a_message_not_a_hang(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    t0 = time.monotonic()
    rc = run_cli(root, Path("/proc/hplt-shard-x"), tmp_path / "run")
    err = capsys.readouterr().err
    assert rc == 2 and "/proc/hplt-shard-x" in err and "Traceback" not in err
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "run").exists()


def test_unreadable_language_folder_is_one_line(tmp_path, capsys, monkeypatch):
    root = make_corpus(tmp_path, n_docs=20)
    lang_dir = root / LANG
    real_scandir = os.scandir

    def denied(path="."):  # what a folder without read permission gives a non-root user
        if Path(path) == lang_dir:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", denied)
    rc = run_cli(root, tmp_path / "out", tmp_path / "run")
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"cannot list the language folder {lang_dir}: Permission denied" in err


def test_oserror_anywhere_at_the_submitter_is_one_line(tmp_path, capsys, monkeypatch):
    from shard_pipeline.submit import launch

    root = make_corpus(tmp_path, n_docs=20)

    def broken(*a, **k):
        raise OSError(5, "Input/output error", str(tmp_path / "somewhere"))

    monkeypatch.setattr(launch.provenance, "code_state", broken)  # any unmapped OSError while the run is prepared
    rc = run_cli(root, tmp_path / "out", tmp_path / "run")
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"{tmp_path / 'somewhere'}: Input/output error" in err and "writing the run directory" in err
    assert not (tmp_path / "out.hplt-shard-claim").exists()
    assert not (tmp_path / "run").exists()  # the half-made run dir of this start is gone: a retry is not refused


@pytest.mark.slow
def test_failure_after_the_swap_says_out_was_replaced(tmp_path, capsys, monkeypatch):
    root = make_corpus(tmp_path, n_docs=40)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run1", "--shard-rows", "10") == 0
    before = tree_bytes(out)
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-after-swap:0:enospc")
    assert run_cli(root, out, tmp_path / "run2", "--shard-rows", "20") == 1
    err = capsys.readouterr().err
    assert tree_bytes(out) != before and manifest(out)["params"]["shard_rows"] == 20
    assert "now holds this run's complete output" in err and "untouched" not in err
    assert "as it was before" not in err
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    assert cli.main(["--resume", str(tmp_path / "run2"), "--executor", "local"]) == 0
    assert (lang_dir(tmp_path / "run2") / "DONE").exists()


@pytest.mark.slow
def test_failure_before_the_swap_says_out_is_as_it_was(tmp_path, capsys, monkeypatch):
    root = make_corpus(tmp_path, n_docs=40)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run1", "--shard-rows", "10") == 0
    before = tree_bytes(out)
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-before-swap:0:enospc")
    assert run_cli(root, out, tmp_path / "run2", "--shard-rows", "20") == 1
    err = capsys.readouterr().err
    assert tree_bytes(out) == before and "is as it was before this run" in err


def _procs_mentioning(text: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


@pytest.mark.slow
def test_ctrl_c_stops_the_workers_and_prints_the_resume_command(tmp_path):
    root = make_corpus(tmp_path, n_docs=40)
    run_dir = tmp_path / "run"
    env = {**os.environ, "HPLT_SHARD_FAULT": "partition-after-input:0:hang"}
    argv = [sys.executable, "-m", "shard_pipeline.submit.cli", LANG, "--corpus", "v4", "--local-root", str(root),
            "--out", str(tmp_path / "out"), "--run-dir", str(run_dir), "--executor", "local", "--license", LICENSE,
            "--jobs", "2", "--partition-tasks", "2"]
    p = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=as_from_a_terminal)
    log = lang_dir(run_dir) / "logs" / "partition" / "local_0.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and "fault injected" in log.read_text()):
        time.sleep(0.2)
    assert log.exists() and "fault injected" in log.read_text()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "Stages finished: none" in err and "partition stopped after" in err
    assert f"./hplt-shard --resume {run_dir} --executor local" in err
    time.sleep(0.5)
    assert _procs_mentioning(str(run_dir)) == [], "a task process outlived Ctrl-C"
    assert not (tmp_path / "out.hplt-shard-claim").exists()
    # the printed command finishes the run
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    assert json.loads((tmp_path / "out" / "_MANIFEST.json").read_text())["rows"] == 40


def test_lock_waits_are_bounded_and_end_in_a_message(tmp_path, monkeypatch):
    import pytest
    from filelock import FileLock

    from shard_pipeline import files
    from shard_pipeline.errors import UsageError
    from shard_pipeline.input import counts_index
    from shard_pipeline.run import claim as claim_mod

    out = tmp_path / "out"
    monkeypatch.setattr(files, "SHORT_LOCK_SECONDS", 0.3)
    held = FileLock(str(claim_mod.claim_path(out)) + ".lock")
    held.acquire()
    try:
        with pytest.raises(UsageError, match="could not lock .* within 0 s"):
            claim_mod.claim(out, tmp_path / "run")
    finally:
        held.release()
    claim_mod.claim(out, tmp_path / "run")  # free again: taken at once

    idx = tmp_path / "index"
    row = counts_index.CountRow("9_1.jsonl.zst", 1000, 0, 3, "hplt-shard-read", "2026-01-01T00:00:00Z")
    counts_index.record(idx, "v4", "clean", LANG, [row])
    monkeypatch.setattr(counts_index, "LOCK_TIMEOUT", 0.3)
    held = FileLock(str(counts_index.index_path(idx, "v4", "clean", LANG)) + ".lock")
    held.acquire()
    try:
        with pytest.raises(TimeoutError, match="could not lock the counts index"):
            counts_index.record(idx, "v4", "clean", LANG, [row])
    finally:
        held.release()
    # a folder where no lock file can be made (as /proc): an error at once, not a wait until the timeout
    monkeypatch.setattr(counts_index, "index_path", lambda *a: Path("/proc/hplt-shard-index.tsv"))
    with pytest.raises(OSError, match="cannot lock the counts index"):
        counts_index.record(idx, "v4", "clean", LANG, [row])


def test_a_run_dir_left_by_a_killed_submission_says_what_it_is_and_the_next_step(tmp_path, capsys):
    """A SIGKILL while the submitter writes the run dir leaves its folders without run.json (written last,
    before OUT is claimed): --resume, --status and a new run on it each say so, with the command that clears it."""
    root = make_corpus(tmp_path, n_docs=10)
    run = tmp_path / "run"
    for sub in ("tasks", "partition", "logs/partition"):
        (run / sub).mkdir(parents=True)
    for argv in (["--resume", str(run)], ["--status", str(run)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "stopped before it was complete (it has no run.json)" in err and f"rm -r {run}" in err, err
    assert run_cli(root, tmp_path / "out", run) == 2
    assert f"rm -r {run}" in capsys.readouterr().err and not (tmp_path / "out").exists()
    mine = tmp_path / "mine"  # a folder hplt-shard did not make is never called one of its run dirs
    mine.mkdir()
    assert cli.main(["--resume", str(mine)]) == 2
    assert "rm -r" not in capsys.readouterr().err
