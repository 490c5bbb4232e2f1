"""--status of a local run is true at every moment (#21): running while the submitter lives (never
FAILED), interrupted after Ctrl-C (no ETA, the exact resume command, exit 1), done after the resume.

Real processes: the submitter is `python -m shard_pipeline.submit.cli`, a task is held alive by
HPLT_SHARD_FAULT=...:hang, Ctrl-C is a real SIGINT to the submitter.
"""
from __future__ import annotations

import json
import re
import shlex
import signal
import time

import pytest

from shard_pipeline.errors import ExitCode
from shard_pipeline.submit import cli
from tests.pipeline_util import lang_dir, make_corpus
from tests.e2e.local.test_owned_tasks import WAIT, gone, hanging_task, submitter

pytestmark = pytest.mark.slow  # end-to-end: runs the pipeline


def rows(text: str) -> dict[str, list[int]]:
    """The stage table: tasks done running pending failed interrupted waiting."""
    return {l.split()[0]: [int(x) for x in l.split()[1:]] for l in text.splitlines()
            if l.split() and l.split()[0] in ("partition", "plan", "write", "finalize")}


def elapsed(text: str) -> str:
    return re.search(r" in (\d+h\d+m\d+s|[\d.]+s) of partition", text)[1]


def test_status_of_a_local_run_running_then_interrupted_then_done(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=40)
    p, run_dir = submitter(tmp_path, root, "partition-after-input:1:hang")
    try:
        task = hanging_task(run_dir, "partition")
        assert cli.main(["--status", str(run_dir)]) == ExitCode.BUSY
        text = capsys.readouterr().out
        assert "FAILED" not in text and "state: running" in text, text
        assert rows(text)["partition"][2] >= 1 and rows(text)["partition"][3:5] == [0, 0], text
        p.send_signal(signal.SIGINT)  # Ctrl-C (a terminal sends it to the submitter)
        _, err = p.communicate(timeout=WAIT)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == ExitCode.INTERRUPTED and gone(task)
    resume = f"./hplt-shard --resume {shlex.quote(str(run_dir))} --executor local"
    assert f"to continue: {resume}" in err
    marker = json.loads((lang_dir(run_dir) / "INTERRUPTED.json").read_text())
    assert marker["signal"] == signal.SIGINT and marker["stage"] == "partition"

    assert cli.main(["--status", str(run_dir)]) == ExitCode.FAILED  # interrupted: 1, as the README lists
    text = capsys.readouterr().out
    assert "FAILED" not in text and f"state: interrupted before the end (not a failure): to continue: {resume}" in text
    assert rows(text)["partition"][5] >= 1, text  # the stopped task counts as interrupted
    assert "INTERRUPTED partition" in text and "partition ETA -" in text  # no ETA for a run that does not move
    time.sleep(1.5)
    assert cli.main(["--status", str(run_dir)]) == ExitCode.FAILED
    assert elapsed(capsys.readouterr().out) == elapsed(text)  # nor a growing elapsed time

    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    assert not (lang_dir(run_dir) / "INTERRUPTED.json").exists()
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == ExitCode.OK
    text = capsys.readouterr().out
    assert f"state: done: output at {tmp_path / 'out'}" in text and rows(text)["write"][1] == rows(text)["write"][0]


def test_status_of_a_slurm_run_without_an_answering_squeue(tmp_path, monkeypatch, capsys):
    """A run whose jobs went to Slurm, then was resumed here (--executor local): its unstarted tasks wait for the
    local executor, never 'interrupted' for jobs that left the queue; a controller that does not answer is said
    (exit 1, no state) until the run is done, and a done run needs no squeue at all."""
    from shard_pipeline import slurm
    from shard_pipeline.files import write_json_atomic
    from shard_pipeline.run.rundir import RunDir
    from shard_pipeline.run.stage_status import stage_statuses
    from tests.pipeline_util import run_cli

    root = make_corpus(tmp_path, n_docs=40)
    run_dir = tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:enospc")
    assert run_cli(root, tmp_path / "out", run_dir) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    record = json.loads((lang_dir(run_dir) / "run.json").read_text())
    slurm_sub = {"kind": "submit", "submitted_at": 1.0, "jobs": [
        {"stage": s, "job_id": str(900 + k), "offset": 0, "array": "0", "tasks": 1, "argv": []}
        for k, s in enumerate(("partition", "plan", "write", "finalize"))]}
    record["submissions"] = [slurm_sub, *record["submissions"]]  # Slurm first, then this local run
    write_json_atomic(lang_dir(run_dir) / "run.json", record)
    finalize = stage_statuses(RunDir(lang_dir(run_dir)), {}, strict=True)[-1]
    # the local executor ran it (it failed at once: its write failed), not a queued job that left the queue
    assert finalize.interrupted == [] and [f.task for f in finalize.failed] == [0]

    record["submissions"] = [slurm_sub]  # now its last submission went to Slurm, whose controller does not answer
    write_json_atomic(lang_dir(run_dir) / "run.json", record)
    monkeypatch.setattr(slurm, "call", lambda argv, *a, **k: slurm.Answer(tuple(argv), None, "", "squeue did not "
                                                                         "answer within 60 s"))
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == ExitCode.FAILED
    err = capsys.readouterr().err
    assert "Slurm did not answer (squeue did not answer within 60 s): whether this run's jobs are still queued" in err
    monkeypatch.undo()
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    monkeypatch.setattr(slurm, "call", lambda argv, *a, **k: slurm.Answer(tuple(argv), None, "", "no answer"))
    assert cli.main(["--status", str(run_dir)]) == ExitCode.OK  # done: no squeue is asked


def test_a_local_unit_whose_starter_was_killed_is_interrupted_not_failed(tmp_path, monkeypatch, capsys):
    """A SIGKILL of the submitter while it started units: a unit's log holds its first line and no trailer, no
    process runs it, and it had no live record yet. --status said FAILED and "fix the cause named above"."""
    import os

    from shard_pipeline.run import outcome
    from shard_pipeline.run.rundir import RunDir
    from shard_pipeline.submit import cli
    from tests.pipeline_util import lang_dir, make_corpus, run_cli

    root = make_corpus(tmp_path / "in", n_docs=40)
    run = tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:kill")
    assert run_cli(root, tmp_path / "out", run, "--shard-rows", "10") != 0
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    log = RunDir(lang_dir(run)).local_log("write", 0)
    capsys.readouterr()
    assert cli.main(["--status", str(run)]) == 1
    assert "FAILED write task 0: killed by SIGKILL" in capsys.readouterr().out  # its group's exit record says so
    log.write_text(log.read_text().splitlines()[0] + "\n")  # as a killed submitter leaves it: no trailer,
    outcome.exit_path(log).unlink()  # and no exit record
    for record in [*(run / "live").glob("*"), *(lang_dir(run) / "live").glob("*")]:
        os.unlink(record)
    assert cli.main(["--status", str(run)]) == 1
    out = capsys.readouterr().out
    assert "FAILED write task 0" not in out and "INTERRUPTED write 1 task: 0" in out
    # its language's finalize skipped at once (its outcome record: UPSTREAM): a consequence, not a FAILED line
    from shard_pipeline.run.stage_status import stage_statuses

    finalize = stage_statuses(RunDir(lang_dir(run)))[-1]
    assert (finalize.skipped(), finalize.causes()) == ([0], []) and "FAILED finalize" not in out
