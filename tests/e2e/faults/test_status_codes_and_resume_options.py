"""--status exit codes and Slurm's reasons; --resume applies resources, refuses content options (#11, 3-4)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shard_pipeline.run import outcome
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.errors import ExitCode
from shard_pipeline.run.queue import slurm_reason

EXIT_DONE, EXIT_STOPPED, EXIT_BUSY = ExitCode.OK, ExitCode.FAILED, ExitCode.BUSY
from shard_pipeline.submit import cli
from tests.pipeline_util import lang_dir, LANG, make_corpus, run_cli


def conf(tmp_path: Path) -> Path:
    c = tmp_path / "t.conf"
    c.write_text("PRESET=local\nACCOUNT=project_462000001\n")
    return c


@pytest.fixture
def failed_local_run(tmp_path, monkeypatch):
    root = make_corpus(tmp_path, n_docs=40)
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:enospc")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--shard-rows", "10") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    return tmp_path / "run"


@pytest.mark.slow
def test_status_exit_codes_done_stopped_busy(failed_local_run, capsys, fake_slurm):
    run_dir = failed_local_run
    assert (EXIT_DONE, EXIT_STOPPED, EXIT_BUSY) == (0, 1, 3)
    assert cli.main(["--status", str(run_dir)]) == EXIT_STOPPED
    from shard_pipeline.run.outcome import Kind
    from tests.pipeline_util import failures_by_kind, view_of
    from shard_pipeline.run.steps import FixCause

    view = view_of(lang_dir(run_dir))  # a full disk: fix the cause, then resume (RUNDIR)
    kinds = failures_by_kind(view)  # the write task's full disk; finalize (afterany) ended at once as UPSTREAM
    assert view.step == FixCause(run_dir) and list(kinds) == [Kind.FAILED, Kind.UPSTREAM]
    assert [(o.stage, o.task) for o in kinds[Kind.FAILED]] == [("write", 0)]
    assert [(o.stage, o.task) for o in kinds[Kind.UPSTREAM]] == [("finalize", 0)]
    # the same run seen while Slurm still holds one of its tasks: in progress
    record = json.loads((lang_dir(run_dir) / "run.json").read_text())  # its chunks, in its task numbers
    record["submissions"].append({"kind": "resume", "jobs": [{"stage": "write", "job_id": "777", "offset": 0}]})
    (lang_dir(run_dir) / "run.json").write_text(json.dumps(record))
    # (squeue's answer is passed in: the fake squeue knows no job states)
    from shard_pipeline.run import view as status_mod

    assert status_mod.status_report(RunDir(lang_dir(run_dir)), queue={"777_0": "RUNNING"})[1] == EXIT_BUSY
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == EXIT_DONE


@pytest.mark.slow
@pytest.mark.parametrize("line,reason", [
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=123.batch. Some of the step tasks have been OOM Killed.",
     "OUT_OF_MEMORY"),
    ("slurmstepd: error: *** JOB 123 ON nid001 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***", "TIMEOUT"),
    ("slurmstepd: error: *** JOB 123 ON nid001 CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE ***", "NODE_FAIL"),
])
def test_status_names_slurms_reason_and_the_flag_that_helps(failed_local_run, capsys, line, reason, monkeypatch,
                                                           fake_slurm, tmp_path):
    run_dir = failed_local_run
    monkeypatch.setenv("PATH", str(tmp_path / "fakebin"))  # a squeue that holds no job, no sacct: the log alone tells
    # the same run resumed on Slurm (job 123), whose write task Slurm ended: it left no outcome record
    lang = lang_dir(run_dir)
    record = json.loads((lang / "run.json").read_text())
    record["submissions"].append({"kind": "multi-resume", "tasks": {"write": [0]}, "jobs": [
        {"stage": "write", "job_id": "123", "array": "0", "tasks": [0], "offset": 0,
         "log_dir": str(run_dir / "logs" / "write")}]})
    (lang / "run.json").write_text(json.dumps(record))
    outcome.forget(RunDir(lang), "write", 0)
    log = run_dir / "logs" / "write" / "123_0.log"
    log.write_text("2026-01-01T00:00:00 write task 0 shard 1/2\n" + line + "\n")
    assert slurm_reason(log) == reason
    assert cli.main(["--status", str(run_dir)]) == EXIT_STOPPED
    text = capsys.readouterr().out
    assert f"FAILED write task 0: {reason}" in text
    hint = {"OUT_OF_MEMORY": f"--resume {run_dir} --mem ", "TIMEOUT": f"--resume {run_dir} --time ",
            "NODE_FAIL": f"./hplt-shard --resume {run_dir})"}[reason]
    assert hint in text
    assert f"\nstate: failed: ./hplt-shard --resume {run_dir}" in text  # the state line gives that step too


def test_sacct_state_wins_when_sacct_is_there(tmp_path, monkeypatch):
    log = tmp_path / "4242_3.log"
    log.write_text("# job 4242_3\nKilled\n")
    calls = []

    class P:  # what subprocess.run answers
        returncode, stdout, stderr = 0, "OUT_OF_MEMORY\n", ""

    def fake_run(argv, **kw):
        calls.append(argv)
        return P()

    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/" + name)
    assert slurm_reason(log, run=fake_run) == "OUT_OF_MEMORY"
    assert calls and "4242_3" in calls[0]


def test_resume_applies_mem_time_partition_and_records_them(tmp_path, fake_slurm, capsys):
    root = make_corpus(tmp_path, n_docs=40)
    base = [LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out"), "--run-dir",
            str(tmp_path / "run"), "--license", "CC0-1.0", "--conf", str(conf(tmp_path)), "--executor", "slurm"]
    assert cli.main(base) == 0
    n_first = len(fake_slurm("sbatch"))
    assert cli.main(["--resume", str(tmp_path / "run"), "--conf", str(conf(tmp_path)), "--mem", "16G",
                     "--time", "12:00:00", "--partition", "largemem", "--account", "project_9", "--max-tasks", "7"]) == 0
    again = fake_slurm("sbatch")[n_first:]
    assert again, "the resume queued nothing"
    for a in again:
        assert a[a.index("--mem") + 1] == "16G" and a[a.index("--time") + 1] == "12:00:00"
        assert a[a.index("--partition") + 1] == "largemem" and a[a.index("--account") + 1] == "project_9"
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["resources"] == {"mem": "16G", "time": "12:00:00", "worker_partition": "largemem",
                                   "account": "project_9", "max_tasks": 7}
    last = record["submissions"][-1]["resources"]
    assert last["stages"]["write"]["mem"] == "16G" and last["partition"] == "largemem" and last["max_tasks"] == 7


@pytest.mark.slow
@pytest.mark.parametrize("flag,value", [("--shard-rows", "5"), ("--val-permille", "9"), ("--license", "MIT"),
                                        ("--clean", None), ("--dataset-version", "2"), ("--wds", "9")])
def test_resume_refuses_content_options_by_name(failed_local_run, capsys, flag, value):
    argv = ["--resume", str(failed_local_run), "--executor", "local", flag] + ([value] if value else [])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert flag in err and "cannot change on resume" in err
    assert not (failed_local_run / "DONE").exists()


@pytest.mark.slow
def test_resume_ignores_a_content_option_given_as_the_run_was_made(failed_local_run, capsys):
    argv = ["--resume", str(failed_local_run), "--executor", "local", "--shard-rows", "10"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert (lang_dir(failed_local_run) / "DONE").exists()


@pytest.mark.slow
def test_status_is_busy_while_a_process_holds_the_run(failed_local_run, capsys):
    from shard_pipeline.run.claim import run_lock

    with run_lock(failed_local_run):
        assert cli.main(["--status", str(failed_local_run)]) == EXIT_BUSY
    assert "state: running" in capsys.readouterr().out
    assert cli.main(["--status", str(failed_local_run)]) == EXIT_STOPPED


@pytest.mark.slow
def test_resume_refuses_a_staging_folder_it_did_not_make_before_anything_runs(tmp_path, monkeypatch, capsys):
    """An OUT.tmp that appeared after the submission (someone's folder, no marker) would fail the plan after
    the whole partition stage; the resume refuses it up front, with a step a resume can take (not --out)."""
    root = make_corpus(tmp_path, n_docs=40)
    monkeypatch.setenv("HPLT_SHARD_FAULT", "partition-after-input:0:enospc")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--shard-rows", "10") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    staging = tmp_path / "out.tmp"
    staging.mkdir()
    (staging / "notes.txt").write_text("mine")
    before = (tmp_path / "run" / "run.json").read_text()
    capsys.readouterr()
    assert cli.main(["--resume", str(tmp_path / "run"), "--dry-run"]) == 2  # the dry run ends with the same refusal
    assert "dry run: nothing submitted" not in capsys.readouterr().out
    assert cli.main(["--resume", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{staging} exists and was not made by hplt-shard" in err, err
    assert f"move it away, then ./hplt-shard --resume {tmp_path / 'run'}; nothing was started" in err, err
    assert "another --out" not in err
    assert (tmp_path / "run" / "run.json").read_text() == before  # no submission recorded
    assert (staging / "notes.txt").read_text() == "mine"
    staging.rename(tmp_path / "kept")
    assert cli.main(["--resume", str(tmp_path / "run")]) == 0
    assert (tmp_path / "kept" / "notes.txt").read_text() == "mine" and (tmp_path / "out" / "_MANIFEST.json").is_file()


@pytest.mark.slow
def test_a_task_record_this_user_cannot_read_counts_as_running_and_stops_a_resume(failed_local_run, capsys):
    """In a group-shared run dir, a task another user started (a resume, or a task rerun by hand, under
    umask 077) leaves a live record this user cannot read: --status must not call that task failed and a
    resume must not start a second writer of its files. (As root, a folder where the record's file
    should be stands for an unreadable file.)"""
    run_dir = failed_local_run
    record = lang_dir(run_dir) / "live" / "write-00000.424242.json"  # where its language records its tasks
    record.mkdir(parents=True)
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == EXIT_BUSY
    out = capsys.readouterr().out
    assert "FAILED write task 0" not in out and "state: running" in out, out
    assert cli.main(["--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"1 task record(s) of this run cannot be read ({record}: " in err and "then resume again" in err, err
    record.rmdir()
    assert cli.main(["--resume", str(run_dir)]) == 0


@pytest.mark.slow
def test_a_task_recorded_on_another_login_node_counts_as_running_and_stops_a_resume(failed_local_run, capsys):
    """A local run's dir on shared scratch, seen from a second login node (LUMI has several): a task
    started on the first may still run there, and this host cannot see its process. --status must not
    call it failed, a resume must not start a second writer, and both name the host to ask."""
    import json
    import socket

    run_dir = failed_local_run
    record = lang_dir(run_dir) / "live" / "write-00000.424242.json"  # where its language records its tasks
    record.write_text(json.dumps({"stage": "write", "task": 0, "pid": 424242, "start": 1, "pgid": 424242,
                                  "host": "uan02-not-" + socket.gethostname()}))
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == EXIT_BUSY
    out = capsys.readouterr().out
    assert "FAILED write task 0" not in out and "state: running" in out, out
    assert "; 1 task of this run was started on another host and may still run there: write task 0 on uan02-not-" in out
    assert f"Resume from uan02-not-" in out and f"remove their records (rm {record}), then resume again" in out, out
    assert cli.main(["--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "1 task of this run was started on another host and may still run there: write task 0 on uan02-not-" in err
    assert "(pid 424242)" in err and f"remove their records (rm {record}), then resume again" in err, err
    assert record.exists()  # never removed by a host that cannot see its process
    done_task = lang_dir(run_dir) / "live" / "partition-00000.424242.json"  # a task already done, rerun there
    done_task_text = record.read_text().replace('"stage": "write"', '"stage": "partition"')
    done_task.write_text(done_task_text)
    record.unlink()
    assert cli.main(["--status", str(run_dir)]) == 1  # failed, and the way on says why a resume here refuses
    state = capsys.readouterr().out.split("\nstate: ")[1]
    assert state.startswith("failed: ") and "; 1 task of this run was started on another host and may still run " \
        "there: partition task 0 on uan02-not-" in state, state
    done_task.unlink()
    assert cli.main(["--resume", str(run_dir)]) == 0
    record.write_text(done_task_text)  # a done run starts nothing: it says so, as --status does
    capsys.readouterr()
    assert cli.main(["--resume", str(run_dir)]) == 0 and "already done" in capsys.readouterr().out
    assert cli.main(["--status", str(run_dir)]) == 0 and "another host" not in capsys.readouterr().out


@pytest.mark.slow
def test_the_next_steps_of_a_failed_run_can_be_pasted_with_a_space_in_its_run_dir(tmp_path, monkeypatch, capsys):
    """Every printed command names the run dir shell-quoted: the --status step as well as the --resume."""
    import shlex

    root = make_corpus(tmp_path, n_docs=40)
    run_dir = tmp_path / "run 3"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:enospc")
    assert run_cli(root, tmp_path / "out", run_dir, "--shard-rows", "10") == 1
    err = capsys.readouterr().err
    assert f"fix the cause, then ./hplt-shard --resume {shlex.quote(str(run_dir))}" in err, err
    assert f"(details: ./hplt-shard --status {shlex.quote(str(run_dir / LANG))})" in err, err


@pytest.mark.slow
def test_a_unit_whose_log_cannot_be_opened_is_reported_with_that_cause_not_an_older_attempts(failed_local_run, capsys):
    """A unit whose log this user cannot write (a colleague's log in a shared run dir; as root, a folder in its
    place) does not start: the run's report says so, not the last line of an older attempt's log."""
    run_dir = failed_local_run
    log = lang_dir(run_dir) / "logs" / "write" / "local_0.log"
    assert "enospc" in log.read_text().lower() or "No space left" in log.read_text()
    log.unlink()
    log.mkdir()
    capsys.readouterr()
    assert cli.main(["--resume", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert f"task 0 failed: ERROR: did not start: [Errno 21] Is a directory: '{log}'" in err, err
    assert "No space left" not in err
    log.rmdir()
    assert cli.main(["--resume", str(run_dir)]) == 0


@pytest.mark.slow
def test_a_writer_writes_only_into_its_own_runs_staging_folder(tmp_path, monkeypatch, capsys):
    """A write task never writes into a folder it cannot prove is its run's: OUT.tmp deleted after the plan is
    made again, marked, by the resume's writers (two at once); someone else's OUT.tmp there is refused and kept;
    a write task rerun by hand after the run is done writes nothing (no unmarked OUT.tmp left beside OUT)."""
    from shard_pipeline.worker import task as task_main

    root = make_corpus(tmp_path, n_docs=40)
    run_dir, out, staging = tmp_path / "run", tmp_path / "out", tmp_path / "out.tmp"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:enospc")
    assert run_cli(root, out, run_dir, "--shard-rows", "10", "--write-tasks", "2") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    staging.rename(tmp_path / "theirs")  # ours goes; someone's folder takes its name
    staging.mkdir()
    (staging / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert cli.main(["--resume", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert f"{staging} exists and was not made by hplt-shard" in err and "move it away, then --resume this run" in err, err
    assert sorted(os.listdir(staging)) == ["notes.txt"]
    staging.rename(tmp_path / "kept")
    assert cli.main(["--resume", str(run_dir)]) == 0  # both writers redo their shards into a marked OUT.tmp
    assert sorted(os.listdir(tmp_path / "kept")) == ["notes.txt"] and not staging.exists()
    assert cli.main(["--verify", str(out)]) == 0
    before = sorted(os.listdir(tmp_path))
    capsys.readouterr()
    assert task_main.main(["write", str(run_dir), "--task", "0"]) != 0
    assert "this run is done: its shards are in" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == before
