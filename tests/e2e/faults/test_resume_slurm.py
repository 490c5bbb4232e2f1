"""Faults on the real test cluster: scancel a task of each stage, requeue on signal, --resume."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from shard_pipeline.run import outcome
from shard_pipeline.run.outcome import Kind
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.runstate import RunPhase
from shard_pipeline.run.steps import Resume
from shard_pipeline.run.view import run_view
from shard_pipeline.submit import cli
from tests.pipeline_util import lang_dir, make_corpus, run_cli, tree_bytes
from tests.slurm_util import wait_for_jobs
from tests.e2e.slurm.test_pipeline_slurm import slurm_conf, submit

TIMEOUT = 300
ARGS = ("--shard-rows", "25", "--partition-tasks", "2", "--write-tasks", "2", "--buckets", "3")
STAGES = ["partition", "plan", "write", "finalize"]
TASKS = {"plan": 1, "write": 2, "finalize": 1}  # ARGS's


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("ref")
    root = make_corpus(base, n_docs=80)
    assert run_cli(root, base / "out", base / "run", *ARGS) == 0
    return root, tree_bytes(base / "out")


def all_jobs(run_dir: Path) -> list[str]:
    record = json.loads((run_dir / "run.json").read_text())
    return [j["job_id"] for s in record["submissions"] for j in s["jobs"]]


def wait_for_log(path_glob: Path, text: str, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in path_glob.parent.glob(path_glob.name):
            if text in p.read_text(errors="replace"):
                return p
        time.sleep(0.5)
    raise TimeoutError(f"no {path_glob} with {text!r}")


@pytest.mark.parametrize("stage,task", [("partition", 1), ("plan", 0), ("write", 1), ("finalize", 0)])
def test_scancel_one_task_then_resume(slurm_cluster, tmp_path, monkeypatch, reference, stage, task):
    """scancel of one running task of a stage: the later stages run (afterany) and skip; --status says
    interrupted with the resume as next step; the resume redoes that task alone (sparse) and the rest after it,
    and the output is the bytes of an uninterrupted run."""
    root, expected = reference
    point = {"partition": "partition-after-input", "plan": "plan-start", "write": "write-start",
             "finalize": "finalize-before-swap"}[stage]
    monkeypatch.setenv("HPLT_SHARD_FAULT", f"{point}:{task}:hang")
    out, run_dir = tmp_path / "out", tmp_path / "run"
    jobs = submit(root, out, run_dir, slurm_conf(tmp_path), *ARGS)
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    job = next(j for j in jobs if j["stage"] == stage)
    if stage == "finalize":  # the last write unit to end lands its language: finalize's hang is met there first
        w = next(j for j in jobs if j["stage"] == "write")
        landing = wait_for_log(run_dir / "logs" / "write" / f"{w['job_id']}_*.log", "fault injected")
        subprocess.run(["scancel", landing.stem], check=True)  # its receipt is written: the finalize job lands it
    wait_for_log(run_dir / "logs" / stage / f"{job['job_id']}_{task}.log", "fault injected")
    # a resume is refused while the run's jobs are still queued or running
    assert cli.main(["--resume", str(run_dir)]) == 2
    subprocess.run(["scancel", f"{job['job_id']}_{task}"], check=True)
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
    lang = RunDir(lang_dir(run_dir))
    later = STAGES[STAGES.index(stage) + 1:]
    for s in later:  # the chain after the cancelled task ran (afterany) and each of its units skipped at once
        assert [outcome.read(lang, s, t).kind for t in range(TASKS[s])] == [Kind.UPSTREAM] * TASKS[s]
    assert not (lang_dir(run_dir) / "DONE").exists()
    # the skipped units are a consequence: the run is interrupted (by the scancel), and its next step is the resume
    view = run_view(lang)
    assert view.phase is RunPhase.INTERRUPTED and view.step == Resume(run_dir, (), "interrupted"), view
    assert cli.main(["--resume", str(run_dir), "--conf", str(slurm_conf(tmp_path))]) == 0
    resumed = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    assert resumed[0]["stage"] == stage
    if stage in ("partition", "write"):
        assert resumed[0]["array"].split("%")[0] == str(task)  # sparse: the task keeps its index and log name
    wait_for_jobs([j["job_id"] for j in resumed], timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists()
    assert tree_bytes(out) == expected


def test_requeue_on_signal_resumes_the_task(slurm_cluster, tmp_path, monkeypatch, reference):
    """USR1 (what --signal=B:USR1@300 sends near the time limit) requeues the task; the chain waits."""
    root, expected = reference
    monkeypatch.setenv("HPLT_SHARD_FAULT", "partition-after-input:0:hang-once")
    out, run_dir = tmp_path / "out", tmp_path / "run"
    jobs = submit(root, out, run_dir, slurm_conf(tmp_path), *ARGS)
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    part = jobs[0]["job_id"]
    log = wait_for_log(run_dir / "logs" / "partition" / f"{part}_0.log", "fault injected")
    subprocess.run(["scancel", "--batch", "--signal=USR1", f"{part}_0"], check=True)
    wait_for_log(log, "requeueing", timeout=60)
    wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT + 200)
    text = log.read_text()
    assert "restart 1" in text, text  # the same task ran again, appending to its log
    assert (lang_dir(run_dir) / "DONE").exists()
    assert tree_bytes(out) == expected


def test_status_reads_squeue_while_the_run_is_queued(slurm_cluster, tmp_path, monkeypatch, reference, capsys):
    root, _ = reference
    monkeypatch.setenv("HPLT_SHARD_FAULT", "partition-after-input:0:hang")
    out, run_dir = tmp_path / "out", tmp_path / "run"
    jobs = submit(root, out, run_dir, slurm_conf(tmp_path), *ARGS)
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    try:
        wait_for_log(run_dir / "logs" / "partition" / f"{jobs[0]['job_id']}_0.log", "fault injected")
        capsys.readouterr()
        assert cli.main(["--status", str(run_dir)]) == 3  # still queued or running (#11)
        text = capsys.readouterr().out
        rows = {l.split()[0]: [int(x) for x in l.split()[1:]] for l in text.splitlines()
                if l.split() and l.split()[0] in ("partition", "plan", "write", "finalize")}
        # columns: tasks done running pending failed interrupted waiting
        assert rows["partition"][0] == 2 and rows["partition"][2] >= 1  # task 0 hangs: running
        assert rows["plan"][3] == 1 and rows["write"][3] == 2 and rows["finalize"][3] == 1  # waiting on afterany
        assert "state: running" in text
    finally:
        subprocess.run(["scancel", *all_jobs(run_dir)], check=False)
        wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
