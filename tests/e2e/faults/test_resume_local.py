"""Faults, --resume and --status on the local executor: a resumed run gives the uninterrupted bytes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shard_pipeline.submit import cli
from tests.conftest import REFERENCE_ARGS
from tests.pipeline_util import lang_dir, LANG, make_corpus, run_cli, tree_bytes

pytestmark = pytest.mark.slow  # end-to-end: every test runs the pipeline

ARGS = REFERENCE_ARGS  # reference_run (conftest): the uninterrupted bytes every resumed run must reproduce


def resume(run_dir: Path, *extra: str) -> int:
    return cli.main(["--resume", str(run_dir), "--executor", "local", "--jobs", "2", *extra])


def interrupted(tmp_path, monkeypatch, root, fault: str, old_out: dict | None = None) -> tuple[Path, Path]:
    out, run_dir = tmp_path / "out", tmp_path / "run"
    if old_out is not None:
        out.mkdir()
        for name, data in old_out.items():
            (out / name).write_bytes(data)
    monkeypatch.setenv("HPLT_SHARD_FAULT", fault)
    assert run_cli(root, out, run_dir, *ARGS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    return out, run_dir


@pytest.mark.parametrize("fault", ["partition-after-input:1", "plan-start", "write-mid-shard:2", "write-start:0"])
def test_killed_task_resumes_to_the_same_bytes(tmp_path, monkeypatch, reference_run, fault):
    root, expected = reference_run
    out, run_dir = interrupted(tmp_path, monkeypatch, root, fault)
    assert not out.exists()  # nothing reached OUT
    if fault.startswith("write-mid-shard"):
        partial = list(Path(json.loads((lang_dir(run_dir) / "plan.json").read_text())["tmp_dir"]).glob(".*.partial"))
        assert partial, "the writer died in the middle of a Parquet file"
    if fault.startswith("partition-after-input"):
        assert (lang_dir(run_dir) / "partition" / "task-00001.checkpoint.json").exists()
    assert resume(run_dir) == 0
    assert tree_bytes(out) == expected
    assert (lang_dir(run_dir) / "DONE").exists()


def test_partition_resumes_from_its_checkpoint(tmp_path, monkeypatch, reference_run):
    root, expected = reference_run
    out, run_dir = interrupted(tmp_path, monkeypatch, root, "partition-after-input:1")
    cp = json.loads((lang_dir(run_dir) / "partition" / "task-00001.checkpoint.json").read_text())
    done_input = cp["inputs"][0]["index"]
    assert resume(run_dir) == 0
    log = (lang_dir(run_dir) / "logs" / "partition" / "local_1.log").read_text()
    assert "done" in log
    receipt = json.loads((lang_dir(run_dir) / "partition" / "task-00001.receipt.json").read_text())
    assert receipt["inputs"][0]["index"] == done_input and len(receipt["inputs"]) == len(
        json.loads((lang_dir(run_dir) / "tasks" / "partition-00001.json").read_text())["inputs"])
    assert tree_bytes(out) == expected


@pytest.mark.parametrize("when", ["finalize-before-swap", "finalize-after-swap"])
def test_finalize_killed_around_the_swap(tmp_path, monkeypatch, reference_run, when):
    root, expected = reference_run
    old = {"_MANIFEST.json": b"", "x": b""}
    # an older complete output: made by a real run on fewer documents
    small = make_corpus(tmp_path / "small", n_docs=30)
    assert run_cli(small, tmp_path / "old", tmp_path / "run-old", "--shard-rows", "10") == 0
    old = tree_bytes(tmp_path / "old")
    out, run_dir = interrupted(tmp_path, monkeypatch, root, when, old_out=old)
    # at every moment OUT is the complete old or the complete new version
    assert tree_bytes(out) == (old if when == "finalize-before-swap" else expected)
    assert not (lang_dir(run_dir) / "DONE").exists()
    assert resume(run_dir) == 0
    assert tree_bytes(out) == expected
    assert not Path(str(out) + ".tmp").exists()


def test_damaged_receipt_and_damaged_shard_are_redone(tmp_path, monkeypatch, reference_run):
    root, expected = reference_run
    out, run_dir = interrupted(tmp_path, monkeypatch, root, "finalize-before-swap")
    # a partition receipt cut short, and a finished shard with a flipped byte
    (lang_dir(run_dir) / "partition" / "task-00002.receipt.json").write_text('{"task": 2, "inp')
    tmp = Path(json.loads((lang_dir(run_dir) / "plan.json").read_text())["tmp_dir"])
    shard = sorted(tmp.glob("shard-*.parquet"))[1]
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert resume(run_dir, "--dry-run") == 0
    assert resume(run_dir) == 0
    assert tree_bytes(out) == expected


def test_damaged_shard_found_by_finalize_is_rewritten_on_resume(tmp_path, monkeypatch, reference_run):
    root, expected = reference_run
    out, run_dir = interrupted(tmp_path, monkeypatch, root, "finalize-before-swap")
    tmp = Path(json.loads((lang_dir(run_dir) / "plan.json").read_text())["tmp_dir"])
    shard = sorted(tmp.glob("shard-*.parquet"))[0]
    stat = shard.stat()
    data = bytearray(shard.read_bytes())
    data[200] ^= 0xFF
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and mtime: only a hash sees it
    from shard_pipeline.run.rundir import RunDir
    from shard_pipeline.stages.finalize import FinalizeError, run_finalize

    with pytest.raises(FinalizeError, match="sha256"):
        run_finalize(RunDir(lang_dir(run_dir)))
    assert resume(run_dir) == 0
    assert tree_bytes(out) == expected


def test_full_disk_fails_cleanly_and_resumes(tmp_path, monkeypatch, reference_run, capsys):
    root, expected = reference_run
    out, run_dir = interrupted(tmp_path, monkeypatch, root, "write-mid-shard:1:enospc")
    err = capsys.readouterr().err
    assert "No space left on device" in err and "write" in err
    assert not out.exists()
    assert resume(run_dir) == 0
    assert tree_bytes(out) == expected


def test_resume_refuses_changed_inputs(tmp_path, monkeypatch, capsys):
    local = make_corpus(tmp_path / "c", n_docs=60)
    out, run_dir = interrupted(tmp_path, monkeypatch, local, "plan-start")
    shard = local / LANG / "9_1.ia.jsonl.zst"
    os.utime(shard, (time.time() + 100, time.time() + 100))
    assert resume(run_dir) == 2
    err = capsys.readouterr().err
    assert "9_1.ia.jsonl.zst" in err and "changed" in err


def test_after_changed_inputs_the_printed_new_run_works_as_printed(tmp_path, monkeypatch, capsys):
    """The run stopped after its plan made OUT.tmp: the new run it prints drops that staging folder (and
    the claim) first, or the new run would be refused in favour of the very run being abandoned."""
    local = make_corpus(tmp_path / "c", n_docs=60)
    out, run_dir = interrupted(tmp_path, monkeypatch, local, "write-start")
    assert out.with_name("out.tmp").is_dir()
    shard = local / LANG / "9_1.ia.jsonl.zst"
    os.utime(shard, (time.time() + 100, time.time() + 100))
    assert resume(run_dir) == 2
    err = capsys.readouterr().err
    (line,) = [l.strip() for l in err.splitlines() if l.strip().startswith("rm ")]
    assert f"rm -r {out.with_name('out.tmp')} && " in line and "--run-dir" in line, line
    repo = Path(__file__).resolve().parents[3]
    p = subprocess.run(["sh", "-c", line], cwd=repo, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "_MANIFEST.json").is_file() and cli.main(["--verify", str(out)]) == 0

def test_run_of_another_format_is_refused_by_resume_status_and_its_tasks(tmp_path, monkeypatch, reference_run, capsys):
    """A run directory made by a version of another RUN_FORMAT (the previous one: 2, before ctimes in
    receipts and per-stage resources) is not read by this one: --resume, --status and a task queued by
    that version each refuse it with one message naming the version and the next step."""
    import subprocess
    import sys

    from shard_pipeline.worker.taskcmd import task_argv
    from shard_pipeline.submit.executors import task_env

    root, expected = reference_run
    out, run_dir = interrupted(tmp_path, monkeypatch, root, "write-start:0")
    record = json.loads((run_dir / "run.json").read_text())
    record["run_format"] = 2
    record["code"] = {"commit": "3ac88af", "dirty": False, "version": "0.1.0"}
    (run_dir / "run.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert resume(run_dir) == 2
    err = capsys.readouterr().err
    assert "(hplt-shard 3ac88af, whose run directories have format 2" in err and "start a new run" in err
    assert cli.main(["--status", str(run_dir)]) == 2
    assert "format 2; this version reads format" in capsys.readouterr().err
    p = subprocess.run(task_argv("write", run_dir, 0, python=sys.executable), capture_output=True, text=True,
                       env=task_env(), timeout=120)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1].startswith("ERROR: OtherFormat: ")
    assert not out.exists() and not (lang_dir(run_dir) / "write" / "task-00000.receipt.json").exists()


def test_second_resume_of_a_run_is_refused(tmp_path, monkeypatch, reference_run):
    root, expected = reference_run
    out, run_dir = interrupted(tmp_path, monkeypatch, root, "plan-start")
    (run_dir / "logs" / "plan" / "local_0.log").unlink()  # the interrupted run's log also says "fault injected"
    env = {**os.environ, "HPLT_SHARD_FAULT": "plan-start:0:hang"}
    first = subprocess.Popen([sys.executable, "hplt-shard", "--resume", str(run_dir), "--executor", "local"],
                             cwd=Path(__file__).resolve().parents[3], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        log = run_dir / "logs" / "plan" / "local_0.log"
        while not log.exists() or "fault injected" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.2)
        second = subprocess.run([sys.executable, "hplt-shard", "--resume", str(run_dir), "--executor", "local"],
                                cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and "another hplt-shard process" in second.stderr
    finally:
        first.kill()
        first.wait()
        subprocess.run(["pkill", "-f", f"shard_pipeline.worker.task plan {run_dir}"])
    assert resume(run_dir) == 0
    assert tree_bytes(out) == expected


def test_status_shows_failures_then_done(tmp_path, monkeypatch, reference_run, capsys):
    root, expected = reference_run
    out, run_dir = interrupted(tmp_path, monkeypatch, root, "write-mid-shard:1:enospc")
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 1  # stopped with failures (#11: not 0)
    text = capsys.readouterr().out
    lines = {l.split()[0]: l.split()[1:] for l in text.splitlines() if l.split() and l.split()[0] in
             ("partition", "plan", "write", "finalize")}
    assert lines["partition"][:2] == ["3", "3"] and lines["write"][0] == "3"
    assert "FAILED write task 1" in text and "No space left on device" in text and "local_1.log" in text
    assert "120 documents" in text and "--resume" in text
    assert resume(run_dir) == 0
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert "state: done" in text and "FAILED" not in text
