"""--cpus-per-task 2 on the real test cluster: a partition array task holds 2 CPUs and runs 2 units at once."""
from __future__ import annotations

import json
import re
import subprocess
import time

from shard_pipeline.submit import cli
from tests.pipeline_util import lang_dir, config_sha, expected_output, make_corpus, tree_bytes
from tests.slurm_util import wait_for_jobs
from tests.unit.worker.test_group import unit_interval
from tests.e2e.slurm.test_pipeline_slurm import TIMEOUT, slurm_conf, submit
from tests.e2e.faults.test_resume_slurm import all_jobs, wait_for_log


def scontrol_job(job: str) -> dict[str, str]:
    """Every key=value of `scontrol show job -o` for one array task (kept 300 s after it ends)."""
    p = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return dict(re.findall(r"(\w+)=(\S*)", p.stdout))


def test_partition_job_holds_two_cpus_and_runs_two_units_at_once(slurm_cluster, tmp_path):
    root = make_corpus(tmp_path, n_docs=30_000, text_bytes=2000)  # ~1 s of partition per unit: CPU time shows
    out, run_dir = tmp_path / "out", tmp_path / "run"
    jobs = submit(root, out, run_dir, slurm_conf(tmp_path), "--cpus-per-task", "2", "--shard-rows", "4000",
                  "--partition-tasks", "4", "--write-tasks", "3", "--buckets", "4", "--mem", "300M")
    by_stage = {j["stage"]: j for j in jobs}
    assert by_stage["partition"]["array"].startswith("0-1") and by_stage["write"]["array"].startswith("0-1")
    wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists(), sorted(p.name for p in (run_dir / "logs" / "partition").iterdir())
    expected = tmp_path / "expected"
    expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=4000)
    assert tree_bytes(out) == tree_bytes(expected)

    part = by_stage["partition"]["job_id"]
    for g in (0, 1):
        rec = scontrol_job(f"{part}_{g}")
        assert rec["JobState"] == "COMPLETED" and rec["NumCPUs"] == "2", rec
        assert "cpu=2" in rec["TRES"] and "mem=600M" in rec["TRES"], rec["TRES"]
        logs = run_dir / "logs" / "partition"
        a, b = (unit_interval(logs / "units" / f"{part}_{u}.log") for u in (2 * g, 2 * g + 1))
        assert max(a[0], b[0]) < min(a[1], b[1]), (a, b)  # both units of the group ran at the same time
        group_log = (logs / f"{part}_{g}.log").read_text()
        busy = re.search(r"2 units, wall ([\d.]+) s, cpu ([\d.]+) s \(([\d.]+) cores busy", group_log)
        assert busy, group_log
        print(f"partition group {g}: wall {busy[1]} s, cpu {busy[2]} s, {busy[3]} cores busy")  # recorded, not asserted


def test_failed_unit_of_a_group_is_resubmitted_alone(slurm_cluster, tmp_path, monkeypatch, capsys):
    root = make_corpus(tmp_path, n_docs=120)
    conf = slurm_conf(tmp_path)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-mid-shard:1:enospc")
    jobs = submit(root, out, run_dir, conf, "--cpus-per-task", "2", "--shard-rows", "20", "--partition-tasks", "2",
                  "--write-tasks", "3", "--buckets", "3", "--row-group-bytes", "6000")
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
    assert not (lang_dir(run_dir) / "DONE").exists()
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 1  # failed: EXIT_STOPPED
    status = capsys.readouterr().out
    write = next(j for j in jobs if j["stage"] == "write")["job_id"]
    assert "FAILED write task 1" in status and f"units/{write}_1.log" in status and "No space left" in status
    assert cli.main(["--resume", str(run_dir), "--conf", str(conf)]) == 0
    resumed = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    assert [(j["stage"], j["array"].split("%")[0]) for j in resumed] == [("write", "0"), ("finalize", "0")]
    wait_for_jobs([j["job_id"] for j in resumed], timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists()
    group_log = (run_dir / "logs" / "write" / f"{resumed[0]['job_id']}_0.log").read_text()
    assert "unit 0: finished before" in group_log and "1 units, wall" in group_log  # only unit 1 ran again
    expected = tmp_path / "expected"
    expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=20, row_group_bytes=6000)
    assert tree_bytes(out) == tree_bytes(expected)


def test_requeued_group_skips_its_finished_unit(slurm_cluster, tmp_path, monkeypatch):
    """USR1 near the time limit: the batch script TERMs the group, which TERMs its units, then requeues."""
    root = make_corpus(tmp_path, n_docs=120)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "partition-after-input:1:hang-once")
    jobs = submit(root, out, run_dir, slurm_conf(tmp_path), "--cpus-per-task", "2", "--shard-rows", "20",
                  "--partition-tasks", "2", "--write-tasks", "2", "--buckets", "3")
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    part = jobs[0]["job_id"]
    wait_for_log(run_dir / "logs" / "partition" / "units" / f"{part}_1.log", "fault injected")
    unit0 = lang_dir(run_dir) / "partition" / "task-00000.receipt.json"
    deadline = time.monotonic() + 60
    while not unit0.exists():  # unit 0 finishes while unit 1 hangs
        assert time.monotonic() < deadline
        time.sleep(0.2)
    subprocess.run(["scancel", "--batch", "--signal=USR1", f"{part}_0"], check=True)
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT + 200)
    assert (lang_dir(run_dir) / "DONE").exists()
    group_log = (run_dir / "logs" / "partition" / f"{part}_0.log").read_text()
    assert "restart 1" in group_log and "unit 0: finished before" in group_log, group_log
    assert "exit -15" in (run_dir / "logs" / "partition" / "units" / f"{part}_1.log").read_text()  # TERM reached it
    expected = tmp_path / "expected"
    expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=20)
    assert tree_bytes(out) == tree_bytes(expected)
