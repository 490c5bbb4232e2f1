"""On the real test cluster (node vm: 2 CPUs, 22900 MiB; partition small): a layout the partition
cannot run is refused before anything is queued, and a job that can never start makes --status say
stuck (exit 4) with the scancel and resume that get the run going again (#21)."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from shard_pipeline.errors import ExitCode
from shard_pipeline.run.outcome import Kind
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.runstate import STUCK_REASONS
from shard_pipeline.run.stage_status import counts, stage_statuses
from shard_pipeline.submit import cli
from tests.pipeline_util import make_corpus
from tests.slurm_util import squeue_reasons, wait_for_jobs
from tests.e2e.slurm.test_pipeline_slurm import slurm_conf
from tests.e2e.slurm.test_slurm_limits_refused import slurm_argv

TIMEOUT = 240
STUCK = {"PartitionConfig", "BadConstraints"}  # what a job asking more memory than any node has pends for
FIVE = ("10_1.cc", "9_1.ia", "9_2.cc", "8_1.ab", "8_2.cc")


@pytest.mark.parametrize("extra,named", [
    (("--cpus-per-task", "5", "--partition-tasks", "5"),
     "partition asks 5 cores per array task; the largest node of partition small has 2: use --cpus-per-task 2"),
    (("--mem", "30G"), "plan asks 30G of memory per array task; the largest node of partition small allows 22900M: "
                       "use --mem 22900M"),
])
def test_a_layout_the_partition_cannot_run_is_refused_at_dry_run_and_submit(slurm_cluster, tmp_path, capsys, extra,
                                                                           named):
    root = make_corpus(tmp_path, n_docs=50, names=FIVE)
    run_dir, out = tmp_path / "run", tmp_path / "out"
    for dry in (["--dry-run"], []):
        rc = cli.main(slurm_argv(root, out, run_dir, slurm_conf(tmp_path), *extra, *dry))
        err = capsys.readouterr().err
        assert rc == ExitCode.USAGE and "cannot run on partition small" in err and named in err, err
        assert "Traceback" not in err and not run_dir.exists() and not Path(f"{out}.hplt-shard-claim").exists()
    assert cli.main(slurm_argv(root, out, run_dir, slurm_conf(tmp_path), "--dry-run")) == 0  # as the conf has it: fits
    assert "partition small: every stage fits (largest node 2 CPUs, 22900M; MaxTime UNLIMITED)" in capsys.readouterr().out


def test_a_multi_language_layout_the_partition_cannot_run_is_refused(slurm_cluster, tmp_path, capsys):
    from tests.e2e.local.test_multi_local import make_langs

    root = make_langs(tmp_path, {"fin_Latn": (20, ("9_1",)), "est_Latn": (10, ("9_1",))})
    argv = ["fin_Latn,est_Latn", "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out"),
            "--run-dir", str(tmp_path / "run"), "--executor", "slurm", "--conf", str(slurm_conf(tmp_path)),
            "--license", "CC0-1.0", "--mem", "30G"]
    for dry in (["--dry-run"], []):
        assert cli.main([*argv, *dry]) == ExitCode.USAGE
        err = capsys.readouterr().err
        assert "cannot run on partition small" in err and "use --mem 22900M" in err, err
        assert not (tmp_path / "run").exists()


def jobs_of(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]


def test_a_stuck_job_and_its_next_step(slurm_cluster, tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=40)
    run_dir, out = tmp_path / "run", tmp_path / "out"
    conf = slurm_conf(tmp_path)
    assert cli.main(slurm_argv(root, out, run_dir, conf, "--time", "00:10:00")) == 0
    resume = ["--resume", str(run_dir), "--conf", str(conf)]
    jobs = jobs_of(run_dir)
    plan = next(j["job_id"] for j in jobs if j["stage"] == "plan")
    ids = [j["job_id"] for j in jobs]
    try:
        # plan waits on partition (Dependency); now it asks more memory than the node has, for real
        subprocess.run(["scontrol", "update", f"jobid={plan}", "MinMemoryNode=100000"], capture_output=True, timeout=30)
        deadline = time.monotonic() + TIMEOUT
        while not STUCK & set(squeue_reasons(plan).values()):  # Slurm 22.05 says BadConstraints, others PartitionConfig
            assert time.monotonic() < deadline, squeue_reasons(ids)
            time.sleep(1)
        reason = (STUCK & set(squeue_reasons(plan).values())).pop()
        capsys.readouterr()
        assert cli.main(["--status", str(run_dir)]) == ExitCode.STUCK
        text = capsys.readouterr().out
        assert f"PENDING plan 1 task: {reason} (will not clear by itself)" in text, text
        assert f"state: stuck: jobs pend for a reason that does not clear by itself ({reason}: {STUCK_REASONS[reason]})" in text
        assert "--cpus-per-task and --mem that fit a node" in text
        waiting = [j["job_id"] for j in jobs if j["stage"] != "partition"]
        assert f"\n    scancel {' '.join(waiting)}\n    ./hplt-shard --resume {run_dir} ..." in text, text
        # the step is true: cancel, resume with what fits (the conf's own memory), and the run finishes
        subprocess.run(["scancel", *waiting], check=True, timeout=30)
        wait_for_jobs(ids, timeout=TIMEOUT)
        assert cli.main(["--status", str(run_dir)]) == ExitCode.FAILED  # cancelled before they started: interrupted
        assert "state: interrupted before the end" in capsys.readouterr().out
        assert cli.main([*resume, "--mem", "30G", "--dry-run"]) == ExitCode.USAGE  # a resume's resources are checked
        assert cli.main([*resume, "--mem", "30G"]) == ExitCode.USAGE
        assert capsys.readouterr().err.count("plan asks 30G of memory per array task") == 2
        assert cli.main(resume) == 0
        wait_for_jobs([j["job_id"] for j in jobs_of(run_dir)], timeout=TIMEOUT)
        assert cli.main(["--status", str(run_dir)]) == ExitCode.OK
    finally:
        subprocess.run(["scancel", *ids, *[j["job_id"] for j in jobs_of(run_dir)]], capture_output=True, timeout=30)
    assert json.loads((out / "_MANIFEST.json").read_text())["rows"] == 40


def set_cpu_minutes(account: str, limit: str) -> None:
    subprocess.run(["sacctmgr", "-i", "modify", "account", account, "set", f"GrpTRESMins=cpu={limit}"],
                   capture_output=True, timeout=60, check=True)


def test_an_allocation_used_up_is_stuck_and_another_account_finishes_the_run(slurm_cluster, tmp_path, capsys):
    """LUMI: a project whose allocation is used up queues jobs that wait until someone raises it."""
    root = make_corpus(tmp_path, n_docs=40)
    run_dir, out = tmp_path / "run", tmp_path / "out"
    conf = slurm_conf(tmp_path)
    few = ("--partition-tasks", "1", "--write-tasks", "1")  # 4 jobs: within the `capped` account's MaxSubmitJobs
    set_cpu_minutes("capped", "0")
    ids: list[str] = []
    try:
        assert cli.main(slurm_argv(root, out, run_dir, conf, "--account", "capped", *few)) == 0
        ids = [j["job_id"] for j in jobs_of(run_dir)]
        deadline = time.monotonic() + TIMEOUT
        while "AssocGrpCPUMinutesLimit" not in squeue_reasons(ids).values():
            assert time.monotonic() < deadline, squeue_reasons(ids)
            time.sleep(1)
        capsys.readouterr()
        assert cli.main(["--status", str(run_dir)]) == ExitCode.STUCK
        text = capsys.readouterr().out
        assert "(AssocGrpCPUMinutesLimit: the project's allocation (CPU minutes) is used up)" in text, text
        assert "--account of a project with allocation left" in text
        subprocess.run(["scancel", *ids], check=True, timeout=30)
        wait_for_jobs(ids, timeout=TIMEOUT)
        assert cli.main(["--resume", str(run_dir), "--conf", str(conf), "--account", "tests"]) == 0
        ids += [j["job_id"] for j in jobs_of(run_dir)]
        wait_for_jobs(ids, timeout=TIMEOUT)
        assert cli.main(["--status", str(run_dir)]) == ExitCode.OK
    finally:
        set_cpu_minutes("capped", "-1")
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30)
    assert json.loads((out / "_MANIFEST.json").read_text())["rows"] == 40


def interrupted_then_resumed(run_dir: Path, conf: Path, capsys) -> str:
    """Once every job has left the queue: --status says interrupted (its text is returned), --resume finishes."""
    assert cli.main(["--status", str(run_dir)]) == ExitCode.FAILED
    text = capsys.readouterr().out
    assert "state: interrupted before the end" in text, text
    assert cli.main(["--resume", str(run_dir), "--conf", str(conf)]) == 0
    wait_for_jobs([j["job_id"] for j in jobs_of(run_dir)], timeout=TIMEOUT)
    assert cli.main(["--status", str(run_dir)]) == ExitCode.OK
    return text


def test_tasks_whose_jobs_were_cancelled_before_they_started_are_interrupted_not_waiting(slurm_cluster, tmp_path,
                                                                                        capsys):
    """scancel of the plan job while partition is held: its task never runs, so --status counts it interrupted,
    not waiting; write and finalize run after it (afterany) and skip at once (UPSTREAM), a consequence that does
    not make the run failed. --status says the run cannot finish as queued, and the step it gives (scancel what
    is left, --resume) finishes the run."""
    root = make_corpus(tmp_path, n_docs=40)
    run_dir, out = tmp_path / "run", tmp_path / "out"
    conf = slurm_conf(tmp_path)
    assert cli.main(slurm_argv(root, out, run_dir, conf, "--time", "00:10:00")) == 0
    jobs = jobs_of(run_dir)
    ids = [j["job_id"] for j in jobs]
    part, plan = (next(j["job_id"] for j in jobs if j["stage"] == s) for s in ("partition", "plan"))
    try:
        held = subprocess.run(["scontrol", "hold", part], capture_output=True, timeout=30).returncode == 0
        subprocess.run(["scancel", plan], check=True, timeout=30)
        deadline = time.monotonic() + TIMEOUT
        while set(squeue_reasons(ids)) - {k for k in squeue_reasons(ids) if k.startswith(f"{part}_")}:
            assert time.monotonic() < deadline, squeue_reasons(ids)  # write and finalize leave with plan
            time.sleep(0.5)
        pending = bool(squeue_reasons(part))
        capsys.readouterr()
        code = cli.main(["--status", str(run_dir)])
        text = capsys.readouterr().out
        assert "INTERRUPTED plan 1 task" in text, text
        sts = {st.stage: st for st in stage_statuses(RunDir(run_dir / "eng_Latn"), strict=True)}
        assert [f.kind for s in ("write", "finalize") for f in sts[s].failed] == [Kind.UPSTREAM] * 2
        assert (counts(list(sts.values())).failed, counts(list(sts.values())).skipped) == (0, 2)
        if held and pending:  # partition still waits: queued, but the chain cannot end
            assert code == ExitCode.BUSY, text
            assert ("but 1 task will not run (their jobs left the queue, e.g. scancel): the run cannot finish as queued; "
                    f"scancel {part}, then ./hplt-shard --resume {run_dir}") in text, text
            subprocess.run(["scancel", part], check=True, timeout=30)
            wait_for_jobs(ids, timeout=TIMEOUT)
        interrupted_then_resumed(run_dir, conf, capsys)
    finally:
        subprocess.run(["scancel", *ids, *[j["job_id"] for j in jobs_of(run_dir)]], capture_output=True, timeout=30)
    assert json.loads((out / "_MANIFEST.json").read_text())["rows"] == 40


def test_one_waiting_task_scancelled_is_interrupted_at_once_and_resume_finishes(slurm_cluster, tmp_path, capsys):
    """scancel of one partition array task while the array waits (held): --status counts that task interrupted
    at once, not waiting; once the rest has run its course, the next step is --resume, which finishes the run."""
    root = make_corpus(tmp_path, n_docs=40)
    run_dir, out = tmp_path / "run", tmp_path / "out"
    conf = slurm_conf(tmp_path)
    assert cli.main(slurm_argv(root, out, run_dir, conf, "--time", "00:10:00", "--partition-tasks", "2")) == 0
    ids = [j["job_id"] for j in jobs_of(run_dir)]
    part = next(j["job_id"] for j in jobs_of(run_dir) if j["stage"] == "partition")
    try:
        if subprocess.run(["scontrol", "hold", part], capture_output=True, timeout=30).returncode != 0:
            pytest.skip("the partition job started before it could be held")
        subprocess.run(["scancel", f"{part}_1"], check=True, timeout=30)
        deadline = time.monotonic() + TIMEOUT
        while f"{part}_1" in squeue_reasons(part) or not squeue_reasons(part):
            assert time.monotonic() < deadline and squeue_reasons(part), squeue_reasons(ids)
            time.sleep(0.5)
        capsys.readouterr()
        code = cli.main(["--status", str(run_dir)])
        text = capsys.readouterr().out
        assert "INTERRUPTED partition 1 task" in text and "PENDING partition 1 task" in text, text  # at once
        assert code == ExitCode.BUSY and f"./hplt-shard --resume {run_dir}" in text, text  # the step: scancel, resume
        subprocess.run(["scontrol", "release", part], capture_output=True, timeout=30)
        wait_for_jobs(ids, timeout=TIMEOUT)
        assert f"--resume {run_dir}" in interrupted_then_resumed(run_dir, conf, capsys)
    finally:
        subprocess.run(["scancel", *ids, *[j["job_id"] for j in jobs_of(run_dir)]], capture_output=True, timeout=30)
    assert json.loads((out / "_MANIFEST.json").read_text())["rows"] == 40
