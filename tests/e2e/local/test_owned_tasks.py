"""The local executor owns its tasks (issue 19, item 5): when the submitter dies (SIGHUP of a closed
session, SIGTERM, SIGKILL) its tasks die with it, and no resume starts while a task of the run lives.

Real processes throughout: the submitter is `python -m shard_pipeline.submit.cli`, a task is held
alive by HPLT_SHARD_FAULT=...:hang, and liveness is read from /proc.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shard_pipeline.run import live
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.submit import cli
from tests.pipeline_util import LANG, LICENSE, as_from_a_terminal, lang_dir, make_corpus

pytestmark = pytest.mark.slow  # end-to-end: runs the pipeline

REPO = Path(__file__).resolve().parents[3]
WAIT = 120  # generous: other work shares the machine; a condition ends every wait


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {WAIT} s: {what}")


def submitter(tmp_path: Path, root: Path, fault: str, *langs: str, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, Path]:
    run_dir = tmp_path / "run"
    env = {**os.environ, "HPLT_SHARD_FAULT": fault}
    argv = [sys.executable, "-m", "shard_pipeline.submit.cli", ",".join(langs) or LANG, "--corpus", "v4",
            "--local-root", str(root), "--out", str(tmp_path / "out"), "--run-dir", str(run_dir),
            "--executor", "local", "--license", LICENSE, "--jobs", "2", "--partition-tasks", "2", *extra]
    p = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=as_from_a_terminal)  # as a login shell's job: its own group, like a terminal gives it
    return p, run_dir


def hanging_task(run_root: Path, stage: str = "partition") -> live.LiveTask:
    """The task of `stage` the fault holds alive, once it has recorded itself."""
    found: list[live.LiveTask] = []

    def seen() -> bool:
        found[:] = [t for t in live.scan(run_root).alive() if t.stage == stage]
        return bool(found)

    wait_for(seen, f"a live {stage} task recorded in {run_root}/live")
    return found[0]


def gone(t: live.LiveTask) -> bool:
    return not live.is_alive(t)


@pytest.mark.parametrize("sig,extra", [(signal.SIGHUP, ()), (signal.SIGTERM, ()),
                                       (signal.SIGHUP, ("--cpus-per-task", "2"))])  # a group runs 2 units at once
def test_sighup_or_sigterm_of_the_submitter_stops_its_tasks(tmp_path, sig, extra):
    root = make_corpus(tmp_path, n_docs=40)
    p, run_dir = submitter(tmp_path, root, "partition-after-input:0:hang", extra=extra)
    task = hanging_task(run_dir)
    p.send_signal(sig)
    _, err = p.communicate(timeout=WAIT)
    assert p.returncode == 128 + sig, err
    assert "Traceback" not in err and f"./hplt-shard --resume {run_dir} --executor local" in err
    assert ("SIGHUP" if sig == signal.SIGHUP else "SIGTERM") in err and "every task process was stopped" in err
    assert gone(task), "a task outlived its submitter"
    assert not (tmp_path / "out.hplt-shard-claim").exists()
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    assert json.loads((tmp_path / "out" / "_MANIFEST.json").read_text())["rows"] == 40


@pytest.mark.parametrize("stage,fault,extra", [
    ("partition", "partition-after-input:1:hang", ("--partition-tasks", "4")),  # two tasks still queued
    ("write", "write-start:0:hang", ("--cpus-per-task", "2", "--shard-rows", "10")),  # a group of 2 units
])
def test_a_burst_of_ctrl_c_stops_once_with_one_true_message(tmp_path, stage, fault, extra):
    """Ctrl-C pressed again and again (a few ms apart): the first one stops the run, the others are ignored,
    so no later one breaks off the stop, its message or the interpreter's exit with a traceback."""
    root = make_corpus(tmp_path, n_docs=40)
    p, run_dir = submitter(tmp_path, root, fault, extra=extra)
    task = hanging_task(run_dir, stage)
    for _ in range(6):
        p.send_signal(signal.SIGINT)
        time.sleep(0.003)
    _, err = p.communicate(timeout=WAIT)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err and "did not start" not in err, err
    finished = "none" if stage == "partition" else "partition, plan"
    assert f"Stages finished: {finished}; {stage} stopped after" in err, err
    assert err.count("to continue: ") == 1 and f"./hplt-shard --resume {run_dir} --executor local" in err, err
    assert gone(task)
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    assert json.loads((tmp_path / "out" / "_MANIFEST.json").read_text())["rows"] == 40


def test_sigkill_of_the_submitter_kills_its_tasks(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=40)
    p, run_dir = submitter(tmp_path, root, "write-start:0:hang")
    task = hanging_task(run_dir, "write")
    p.kill()  # no handler runs: only the parent-death signal can end the task
    p.communicate(timeout=WAIT)
    wait_for(lambda: gone(task), f"task pid {task.pid} to die with its submitter")
    wait_for(lambda: not live.scan(run_dir).alive(), "every task of the run to die with its submitter")
    # status: stopped (not running, not done), the claim kept by the unfinished run; resume finishes it
    assert cli.main(["--status", str(run_dir)]) == 1
    assert "state: interrupted before the end" in capsys.readouterr().out
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    assert json.loads((tmp_path / "out" / "_MANIFEST.json").read_text())["rows"] == 40
    assert not list(live.live_dir(run_dir).glob("*.json"))  # the stale record was dropped


def test_no_resume_while_a_task_of_the_run_is_alive(tmp_path, monkeypatch, capsys):
    """A task that is not the submitter's child (started by hand from its log line) is seen all the same."""
    root = make_corpus(tmp_path, n_docs=40)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0")  # the run stops with write task 0 killed
    assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(out), "--run-dir", str(run_dir),
                     "--executor", "local", "--license", LICENSE, "--write-tasks", "2", "--shard-rows", "10"]) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    capsys.readouterr()
    env = {**os.environ, "HPLT_SHARD_FAULT": "write-start:0:hang"}
    orphan = subprocess.Popen([sys.executable, "-m", "shard_pipeline.worker.task", "write", str(run_dir), "--task", "0"],
                              env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        task = hanging_task(lang_dir(run_dir), "write")  # recorded where its language's --status looks
        assert (task.pid, task.stage, task.task) == (orphan.pid, "write", 0)
        assert cli.main(["--status", str(run_dir)]) == 3
        text = capsys.readouterr().out
        assert "FAILED write task 0" not in text and "state: running" in text
        assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 2
        err = capsys.readouterr().err
        assert f"write task 0 (pid {orphan.pid}; to stop it: kill -- -{orphan.pid})" in err and "still running" in err
        assert not out.exists()
    finally:
        os.killpg(orphan.pid, signal.SIGKILL)
        orphan.wait()
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    assert json.loads((out / "_MANIFEST.json").read_text())["rows"] == 40


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL])
def test_a_multi_language_run_stops_its_units_when_the_submitter_dies(tmp_path, sig):
    from tests.e2e.local.test_multi_local import make_langs

    root = make_langs(tmp_path, {"fin_Latn": (30, ("10_1",)), "est_Latn": (20, ("10_1",))})
    p, run_dir = submitter(tmp_path, root, "partition-after-input:0:hang", "fin_Latn", "est_Latn")
    task = hanging_task(run_dir)
    p.send_signal(sig)
    _, err = p.communicate(timeout=WAIT)
    if sig == signal.SIGHUP:
        assert p.returncode == 128 + signal.SIGHUP, err
        assert "SIGHUP" in err and "Traceback" not in err and gone(task)
    wait_for(lambda: gone(task), f"unit pid {task.pid} to die with its submitter")
    # every other unit dies too; the kernel signals each as the submitter's threads end, so not in one instant
    wait_for(lambda: not [t for d in (run_dir, run_dir / "fin_Latn", run_dir / "est_Latn") for t in live.scan(d).alive()],
             "every unit of both languages to die with its submitter")
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    assert all((RunDir(run_dir / lang).done_marker).exists() for lang in ("fin_Latn", "est_Latn"))

