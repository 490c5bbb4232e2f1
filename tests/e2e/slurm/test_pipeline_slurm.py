"""End to end on the real single-node Slurm: every stage queued at once, chained by afterany."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from shard_pipeline.submit import cli
from tests.pipeline_util import (
    lang_dir,
    LANG,
    LICENSE,
    config_sha,
    expected_output,
    index_file,
    make_corpus,
    records,
    tree_bytes,
    write_records,
)
from tests.slurm_util import job_records, squeue_reasons, wait_for_jobs

TIMEOUT = 240


def slurm_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "test.conf"
    conf.write_text(
        "# the project's own test cluster, with this interpreter on the (single) compute node\n"
        "PRESET=local\n"
        f"PYTHON={sys.executable}\n"
        "WORKER_MEM=400M\n"
        f"COUNTS_INDEX={tmp_path / 'counts-index'}\n"
    )
    return conf


def submit(root: Path, out: Path, run_dir: Path, conf: Path, *extra: str) -> list[dict]:
    argv = [LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(out), "--run-dir", str(run_dir),
            "--executor", "slurm", "--conf", str(conf), "--license", LICENSE, "--time", "00:10:00", *extra]
    assert cli.main(argv) == 0
    return json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]


def test_chain_is_queued_at_once_and_matches_local_and_write_shards(slurm_cluster, tmp_path):
    root = make_corpus(tmp_path, n_docs=200)
    out, run_dir = tmp_path / "out-slurm", tmp_path / "run-slurm"
    jobs = submit(root, out, run_dir, slurm_conf(tmp_path), "--shard-rows", "30", "--partition-tasks", "3",
                  "--write-tasks", "3", "--buckets", "5", "--spill-bytes", "20000")
    assert [j["stage"] for j in jobs] == ["partition", "plan", "write", "finalize"]
    # everything after partition waits on a dependency, submitted before partition could finish
    later = [j["job_id"] for j in jobs[1:]]
    deadline = time.monotonic() + 10  # the scheduler fills in reasons on its next pass
    reasons = squeue_reasons(later)
    while not any(r == "Dependency" for r in reasons.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        reasons = squeue_reasons(later)
    assert any(r == "Dependency" for r in reasons.values()), reasons
    deps = {j["stage"]: job_records(j["job_id"])[0]["Dependency"] for j in jobs[1:]}
    assert jobs[0]["job_id"] in deps["plan"] and jobs[1]["job_id"] in deps["write"]
    wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists(), sorted(p.name for p in (run_dir / "logs" / "partition").iterdir())
    # logs are named by job and task id, one per task
    assert {p.name for p in (run_dir / "logs" / "write").iterdir()} == {f"{jobs[2]['job_id']}_{t}.log" for t in range(3)}
    # same bytes as write_shards with the run's config hash, and as the local executor
    expected = tmp_path / "expected"
    expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=30)
    assert tree_bytes(out) == tree_bytes(expected)
    local_out = tmp_path / "out-local"
    assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(local_out), "--run-dir",
                     str(tmp_path / "run-local"), "--executor", "local", "--license", LICENSE, "--shard-rows", "30"]) == 0
    assert tree_bytes(local_out) == tree_bytes(out)
    # the counts index learned every shard's exact count from the full read
    index = index_file(tmp_path / "counts-index", root).read_text().splitlines()
    assert len(index) == 1 + 4 and sum(int(l.split("\t")[3]) for l in index[1:]) == 200


def test_failing_partition_fails_the_rest_of_the_chain_at_once_and_keeps_old_out(slurm_cluster, tmp_path, capsys):
    """afterany: each later stage runs and fails at once, naming the unfinished partition; OUT is untouched."""
    root = make_corpus(tmp_path, n_docs=40)
    conf = slurm_conf(tmp_path)
    out = tmp_path / "out"
    jobs = submit(root, out, tmp_path / "run1", conf, "--shard-rows", "10")
    wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT)
    before = tree_bytes(out)
    write_records(root / LANG / "9_1.ia.jsonl.zst", records(3) + [b"[1, 2]"])
    jobs = submit(root, out, tmp_path / "run2", conf, "--shard-rows", "10", "--partition-tasks", "2")
    wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT)
    states = {j["stage"]: {r["JobState"] for r in job_records(j["job_id"])} for j in jobs}
    assert "FAILED" in states["partition"]
    for stage in ("plan", "write", "finalize"):
        assert states[stage] == {"FAILED"}, states
    assert tree_bytes(out) == before
    plan_log = "".join(p.read_text() for p in (tmp_path / "run2" / "logs" / "plan").iterdir())
    assert f"{LANG}: plan task 0 skipped: partition task(s)" in plan_log, plan_log
    logs = "".join(p.read_text() for p in (tmp_path / "run2" / "logs" / "partition").iterdir())
    assert "9_1.ia.jsonl.zst:4" in logs and "not_object" in logs
    # --status names the failed task, its log and its error, from the run directory
    capsys.readouterr()
    assert cli.main(["--status", str(tmp_path / "run2")]) == 1  # failed (#11: not 0)
    status = capsys.readouterr().out
    assert "FAILED partition task" in status and "not_object" in status and f"{jobs[0]['job_id']}_" in status


@pytest.mark.parametrize("layout", ["column", "dirs"])
def test_training_ready_options_on_the_cluster(slurm_cluster, tmp_path, layout):
    """--clean, --dataset-card, --dp-ranks and --split-layout through the real chain give the local executor's bytes."""
    recs = records(90, seed=41, text_bytes=300)
    recs[5]["text"] = "y" * 11_000  # quarantined by --clean (identical-character run)
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs[:50])
    write_records(tmp_path / "clean" / LANG / "9_2.jsonl.zst", recs[50:])
    root = tmp_path / "clean"
    opts = ("--clean", "--dataset-card", "--dp-ranks", "2,3", "--shard-rows", "10", "--partition-tasks", "2",
            "--write-tasks", "2", "--buckets", "4", "--split-layout", layout, "--val-permille", "100")
    out, run_dir = tmp_path / "out-slurm", tmp_path / "run-slurm"
    jobs = submit(root, out, run_dir, slurm_conf(tmp_path), *opts)
    wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists()
    m = json.loads((out / "_MANIFEST.json").read_text())
    sets = [[e for e in m["shards"] if e["name"].startswith(f)] for f in (("train/", "validation/") if layout == "dirs" else ("",))]
    assert all(len(entries) % 6 == 0 for entries in sets), [len(entries) for entries in sets]
    assert m["rows"] == 89 and m["counts"]["filters"]["clean:documents"] == 1
    assert {f["name"] for f in m["files"]} == {"README.md", "_LEDGER.jsonl", "__quarantine/clean/documents.parquet",
                                               "__quarantine/clean/policy.json", "__balance/balance.json"}
    assert cli.main(["--verify", str(out)]) == 0
    local = tmp_path / "out-local"
    assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(local), "--run-dir",
                     str(tmp_path / "run-local"), "--executor", "local", "--license", LICENSE, *opts]) == 0
    assert tree_bytes(local) == tree_bytes(out)
