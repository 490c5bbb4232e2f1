"""What a person watching a run on the real test cluster sees (#21): squeue's default view tells
every stage of every run apart, a task log's first line reruns the task, and a resume may change
--cpus-per-task without changing a byte."""
from __future__ import annotations

import json
import shlex
import subprocess
import time

from shard_pipeline.run.rundir import RunDir
from shard_pipeline.worker.task import rerun_argv
from shard_pipeline.submit import cli
from shard_pipeline.submit.executors.slurm import job_names
from tests.pipeline_util import LANG, config_sha, expected_output, lang_dir, make_corpus, tree_bytes
from tests.slurm_util import wait_for_jobs
from tests.e2e.slurm.test_pipeline_slurm import TIMEOUT, slurm_conf, submit
from tests.e2e.faults.test_resume_slurm import all_jobs

ARGS = ("--shard-rows", "25", "--partition-tasks", "2", "--write-tasks", "2", "--buckets", "3")


def default_squeue() -> list[tuple[str, str]]:
    """(JOBID, NAME) of every row of plain `squeue --me`, in its default format (NAME is 8 characters wide)."""
    p = subprocess.run(["squeue", "--me"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    header, *rows = p.stdout.splitlines()
    assert header.split()[:3] == ["JOBID", "PARTITION", "NAME"], header
    return [(r.split()[0], r.split()[2]) for r in rows if r.split()]


def test_two_runs_of_one_language_are_told_apart_in_squeues_default_view(slurm_cluster, tmp_path, monkeypatch,
                                                                          capsys):
    root = make_corpus(tmp_path, n_docs=60)
    runs = [tmp_path / "run-a", tmp_path / "run-b"]
    conf = slurm_conf(tmp_path)
    assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out-a"), "--run-dir",
                     str(runs[0]), "--executor", "slurm", "--conf", str(conf), "--license", "CC0-1.0", "--dry-run",
                     *ARGS]) == 0
    dry = capsys.readouterr().out
    monkeypatch.setenv("HPLT_SHARD_FAULT", "partition-after-input:0:hang")  # both runs stay queued
    jobs = {}
    try:
        for i, run in enumerate(runs):
            jobs[run] = submit(root, tmp_path / f"out-{i}", run, conf, *ARGS)
        monkeypatch.delenv("HPLT_SHARD_FAULT")
        names = {run: job_names(run.resolve(), LANG) for run in runs}
        assert " ".join(names[runs[0]].values()) in dry  # the dry run showed the names the jobs got
        owner = {j["job_id"]: (run, j["stage"]) for run in runs for j in jobs[run]}
        deadline = time.monotonic() + 60
        while True:  # until every job of both runs is in squeue (the hanging task keeps them there)
            seen = default_squeue()
            ours = [(job, name) for job, name in seen if job.split("_")[0] in owner]
            if {job.split("_")[0] for job, _ in ours} == set(owner) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert {job.split("_")[0] for job, _ in ours} == set(owner), seen
        for job, name in ours:  # the name alone says which run and which stage
            run, stage = owner[job.split("_")[0]]
            assert name == names[run][stage], (job, name, names)
        shown = {name for _, name in ours}
        assert len(shown) == 8 and len({n for n in names[runs[0]].values()} & set(names[runs[1]].values())) == 0
        others = {name for job, name in seen if job.split("_")[0] not in owner}
        assert not shown & others  # nobody else's job (other runs on the cluster) reads like ours
    finally:
        ids = [j["job_id"] for js in jobs.values() for j in js]
        subprocess.run(["scancel", *ids], check=False)
        wait_for_jobs(ids, timeout=TIMEOUT)


def test_a_task_logs_first_line_reruns_it_and_a_resume_may_change_cpus_per_task(slurm_cluster, tmp_path,
                                                                                  monkeypatch):
    """C = 2 with a write unit failing on a full disk, resumed with C = 1: the bytes of write_shards.
    Every log's first line is the command that reruns its task (a group's: --group G)."""
    root = make_corpus(tmp_path, n_docs=120)
    conf = slurm_conf(tmp_path)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-mid-shard:1:enospc")
    jobs = submit(root, out, run_dir, conf, "--cpus-per-task", "2", "--shard-rows", "20", "--partition-tasks", "2",
                  "--write-tasks", "3", "--buckets", "3", "--row-group-bytes", "6000")
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
    assert not (lang_dir(run_dir) / "DONE").exists()
    rd = run_dir.resolve()
    part = next(j["job_id"] for j in jobs if j["stage"] == "partition")
    logs = rd / "logs" / "partition"
    assert (logs / f"{part}_0.log").read_text().splitlines()[0] == shlex.join(rerun_argv("partition", rd, 0, True))
    unit1 = RunDir(rd).unit_log_dir("partition") / f"{part}_1.log"  # a group's units log apart, by unit
    assert unit1.read_text().splitlines()[0] == shlex.join(rerun_argv("partition", rd, 1))
    plan = next(j["job_id"] for j in jobs if j["stage"] == "plan")
    first = (rd / "logs" / "plan" / f"{plan}_0.log").read_text().splitlines()
    assert first[0] == shlex.join(rerun_argv("plan", rd, None)) and f"(job {plan}_0 on " in first[1]

    assert cli.main(["--resume", str(run_dir), "--conf", str(conf), "--cpus-per-task", "1"]) == 0
    resumed = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    write = next(j for j in resumed if j["stage"] == "write")
    assert write["array"].split("%")[0] == "1"  # unit 1 alone, as array task 1 now that C = 1
    wait_for_jobs([j["job_id"] for j in resumed], timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists()
    expected = tmp_path / "expected"
    expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=20, row_group_bytes=6000)
    assert tree_bytes(out) == tree_bytes(expected)
    unit_log = rd / "logs" / "write" / f"{write['job_id']}_1.log"
    line = unit_log.read_text().splitlines()[0]
    assert line == shlex.join(rerun_argv("write", rd, 1))
    # runs as written; the run is done, so the writer writes nothing (no unmarked OUT.tmp beside OUT)
    p = subprocess.run(shlex.split(line), capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "this run is done: its shards are in" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "out.tmp").exists() and tree_bytes(out) == tree_bytes(expected)
