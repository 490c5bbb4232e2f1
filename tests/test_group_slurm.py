"""--cpus-per-task 2 on the real test cluster: a partition array task holds 2 CPUs and runs 2 units at once."""
from __future__ import annotations

import re
import subprocess

from tests.pipeline_util import config_sha, expected_output, make_corpus, tree_bytes
from tests.slurm_util import wait_for_jobs
from tests.test_group import unit_interval
from tests.test_pipeline_slurm import TIMEOUT, slurm_conf, submit


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
    assert (run_dir / "DONE").exists(), sorted(p.name for p in (run_dir / "logs" / "partition").iterdir())
    expected = tmp_path / "expected"
    expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=4000)
    assert tree_bytes(out) == tree_bytes(expected)

    part = by_stage["partition"]["job_id"]
    for g in (0, 1):
        rec = scontrol_job(f"{part}_{g}")
        assert rec["JobState"] == "COMPLETED" and rec["NumCPUs"] == "2", rec
        assert "cpu=2" in rec["TRES"] and "mem=600M" in rec["TRES"], rec["TRES"]
        logs = run_dir / "logs" / "partition"
        a, b = (unit_interval(logs / f"{part}_{g}.unit{u}.log") for u in (2 * g, 2 * g + 1))
        assert max(a[0], b[0]) < min(a[1], b[1]), (a, b)  # both units of the group ran at the same time
        group_log = (logs / f"{part}_{g}.log").read_text()
        busy = re.search(r"2 units, wall ([\d.]+) s, cpu ([\d.]+) s \(([\d.]+) cores busy", group_log)
        assert busy, group_log
        print(f"partition group {g}: wall {busy[1]} s, cpu {busy[2]} s, {busy[3]} cores busy")  # recorded, not asserted
