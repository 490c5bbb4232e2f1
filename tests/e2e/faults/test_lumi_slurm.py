"""What LUMI does to a run, met for real on the LUMI-like test cluster (tests/slurm/cluster.sh):
the association's submit cap (account `capped`, MaxSubmitJobs=HPLT_SHARD_SLURM_CAP, default 5),
cgroup-enforced --mem (OUT_OF_MEMORY named from sacct), an admin's `scontrol requeue` and a running
task's time limit met (it is signalled and requeues itself)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from shard_pipeline.submit import cli
from tests.pipeline_util import lang_dir, LANG, LICENSE, make_corpus, run_cli, tree_bytes
from tests.slurm_util import wait_for_jobs
from tests.e2e.slurm.test_pipeline_slurm import slurm_conf
from tests.e2e.faults.test_resume_slurm import all_jobs, wait_for_log

pytestmark = pytest.mark.slow

TIMEOUT = 300
CAP = int(os.environ.get("HPLT_SHARD_SLURM_CAP", "5"))  # what cluster.sh gave the `capped` account
ARGS = ("--shard-rows", "25", "--buckets", "3")
FIXED = ("--partition-tasks", "4", "--write-tasks", "2")  # 4 + plan + 2 + finalize = 8 jobs: above the cap


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("ref")
    root = make_corpus(base, n_docs=80)
    assert run_cli(root, base / "out", base / "run", *ARGS, *FIXED) == 0
    return root, tree_bytes(base / "out")


def submit_argv(root: Path, tmp_path: Path, conf: Path, *extra: str) -> list[str]:
    return [LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out"),
            "--run-dir", str(tmp_path / "run"), "--executor", "slurm", "--conf", str(conf), "--license", LICENSE,
            "--time", "00:10:00", *ARGS, *extra]


def capped_conf(tmp_path: Path) -> Path:
    conf = slurm_conf(tmp_path)
    conf.write_text(conf.read_text() + "ACCOUNT=capped\n")
    return conf


def capped_queue() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-A", "capped", "-o", "%i"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return out.split()


def test_the_association_cap_lays_the_run_out_or_refuses_it_before_queuing(slurm_cluster, tmp_path, reference, capsys):
    root, _ = reference
    assert capped_queue() == []  # no other test uses the capped account
    conf = capped_conf(tmp_path)
    # given task counts above the cap: refused before anything is queued, naming the association
    assert cli.main(submit_argv(root, tmp_path, conf, *FIXED)) == 2
    err = capsys.readouterr().err
    assert f"only {CAP} of the {CAP} jobs you may have queued (MaxSubmitJobs of association" in err, err
    assert capped_queue() == []
    # left to itself, the layout fits under the cap sacctmgr reports
    assert cli.main(submit_argv(root, tmp_path, conf)) == 0
    jobs = json.loads((tmp_path / "run" / "run.json").read_text())["submissions"][-1]["jobs"]
    try:
        assert sum(j["tasks"] for j in jobs) <= CAP
    finally:
        subprocess.run(["scancel", *[j["job_id"] for j in jobs]], check=False)
        wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT)


def test_sbatch_refusing_midway_cancels_records_and_resumes(slurm_cluster, tmp_path, monkeypatch, reference, capsys):
    """sacctmgr unreadable (here: a stand-in that fails as without accounting access), so the submitter
    cannot know the cap: the real sbatch refuses the write array with AssocMaxSubmitJobLimit."""
    root, expected = reference
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sacctmgr").write_text("#!/bin/sh\necho 'sacctmgr: error: Problem talking to the database' >&2\nexit 1\n")
    (fake / "sacctmgr").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    conf = capped_conf(tmp_path)
    run_dir = tmp_path / "run"
    assert cli.main(submit_argv(root, tmp_path, conf, *FIXED)) == 2
    err = capsys.readouterr().err
    assert "AssocMaxSubmitJobLimit" in err and f"--resume {run_dir} --cpus-per-task" in err, err
    record = json.loads((run_dir / "run.json").read_text())
    refused = record["refused_submissions"][-1]
    assert record["submissions"] == [] and len(refused["cancelled"]) == 2  # partition and plan had been queued
    assert "AssocMaxSubmitJobLimit" in refused["message"]
    assert capped_queue() == []  # cancelled, not left pending for ever
    assert cli.main(["--status", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "state: not queued: sbatch refused the last submission" in out and f"--resume {run_dir}" in out, out
    assert "When your queue has room" in out and "MaxSubmitJobs" in out, out
    # an account the cluster does not know: refused with what to change, and the next resume does not inherit it
    table_before = (run_dir / "languages.json").read_bytes()
    assert cli.main(["--resume", str(run_dir), "--cpus-per-task", "2", "--account", "nosuch"]) == 2
    assert (run_dir / "languages.json").read_bytes() == table_before  # nor its grouping of units (C)
    err = capsys.readouterr().err
    assert "Change what sbatch refused" in err and "cap on submitted jobs" not in err, err
    assert "nosuch" not in json.dumps(json.loads((run_dir / "run.json").read_text()).get("resources", {}))
    assert cli.main(["--status", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "Change what sbatch refused" in out and "--account" in out and "queue has room" not in out, out
    # two units per array task: 2 partition + plan + 1 write + finalize = 5 jobs, under the cap
    assert cli.main(["--resume", str(run_dir), "--cpus-per-task", "2"]) == 0
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists()
    assert tree_bytes(tmp_path / "out") == expected


def test_out_of_memory_is_named_and_its_resume_gives_the_same_bytes(slurm_cluster, tmp_path, reference, capsys,
                                                                  monkeypatch):
    """A partition task that takes more than its --mem: the cgroup kills it; --status reads OUT_OF_MEMORY
    (sacct) and gives the resume with more memory, which ends with the bytes of an uninterrupted run."""
    root, expected = reference
    run_dir = tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "partition-after-input:0:oom")  # sbatch exports it to the jobs
    assert cli.main(submit_argv(root, tmp_path, slurm_conf(tmp_path), *FIXED, "--mem", "300M")) == 0
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "FAILED partition task 0: OUT_OF_MEMORY (./hplt-shard --resume" in out, out
    step = out.split("state: failed: ", 1)[1].splitlines()[0]
    argv = shlex.split(step)
    assert argv[:3] == ["./hplt-shard", "--resume", str(run_dir)] and argv[3] == "--mem", step
    assert cli.main(argv[1:]) == 0
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists()
    assert tree_bytes(tmp_path / "out") == expected
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 0
    out = capsys.readouterr().out  # the figures to size the next run by, from the tasks' own logs
    assert "FINISHED partition " in out and "FINISHED write 2 tasks" in out, out  # from the tasks of either attempt



def test_requeued_partition_tasks_give_the_same_bytes(slurm_cluster, tmp_path, monkeypatch, reference):
    """Both partition tasks hang on their first start. Task 0 is requeued as an admin (or a node failure
    with --requeue) does: `scontrol requeue`. Task 1 meets its time limit: --time under 10 minutes is
    refused, so its limit is lowered to 1 minute while it runs; Slurm signals it (--signal=B:USR1@300) and
    the job script requeues it. One wait of ~2 min (a requeued job's BeginTime) covers both; the run then
    ends by itself with the bytes of an uninterrupted run."""
    root, expected = reference
    run_dir = tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "partition-after-input::hang-once")  # every partition task
    assert cli.main(submit_argv(root, tmp_path, slurm_conf(tmp_path), "--partition-tasks", "2",
                                "--write-tasks", "2")) == 0
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    jobs = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    part = jobs[0]["job_id"]
    logs = [wait_for_log(run_dir / "logs" / "partition" / f"{part}_{t}.log", "fault injected") for t in (0, 1)]
    subprocess.run(["scontrol", "requeue", f"{part}_0"], check=True, timeout=30)
    subprocess.run(["scontrol", "update", f"JobId={part}_1", "TimeLimit=1"], check=True, timeout=30)
    wait_for_log(logs[1], "time limit near; requeueing", timeout=90)
    # the requeued task keeps the lowered limit: give the 10 minutes back, or every start is signalled at once
    subprocess.run(["scontrol", "update", f"JobId={part}_1", "TimeLimit=10"], check=True, timeout=30)
    wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT + 200)
    assert all("restart 1" in log.read_text() for log in logs)  # each task ran again, appending to its log
    assert (lang_dir(run_dir) / "DONE").exists()
    assert tree_bytes(tmp_path / "out") == expected  # 2 partition / 2 write tasks: the same bytes as 4 / 2
