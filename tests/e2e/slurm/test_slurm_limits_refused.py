"""Refused or made safe before anything runs on Slurm (issue 19, items 6 and 8): a --time the requeue
signal would eat, and run directories whose names Slurm would expand in the jobs' log paths."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shard_pipeline.submit import cli
from tests.pipeline_util import LANG, LICENSE, lang_dir, make_corpus
from tests.slurm_util import wait_for_jobs
from tests.e2e.slurm.test_pipeline_slurm import slurm_conf

TIMEOUT = 240


def slurm_argv(root: Path, out: Path, run_dir: Path, conf: Path, *extra: str) -> list[str]:
    return [LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(out), "--run-dir", str(run_dir),
            "--executor", "slurm", "--conf", str(conf), "--license", LICENSE, *extra]


def test_run_dir_with_percent_signs_gets_its_logs_and_finishes(slurm_cluster, tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=40)
    run_dir, out = tmp_path / "run%j-%u-%%A%a", tmp_path / "out"
    assert cli.main(slurm_argv(root, out, run_dir, slurm_conf(tmp_path), "--time", "00:10:00",
                               "--write-tasks", "2", "--shard-rows", "10")) == 0
    jobs = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    assert all("%%j-%%u-%%%%A%%a" in j["argv"][j["argv"].index("--output") + 1] for j in jobs)
    wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists(), capsys.readouterr()
    for j in jobs:  # every task's log sits in the run dir as it is spelled, named by its job and index
        assert (run_dir / "logs" / j["stage"] / f"{j['job_id']}_0.log").is_file(), j
    assert json.loads((out / "_MANIFEST.json").read_text())["rows"] == 40


@pytest.mark.parametrize("dry", [True, False])
def test_run_dir_with_a_backslash_is_refused_for_slurm(slurm_cluster, tmp_path, capsys, dry):
    root = make_corpus(tmp_path, n_docs=20)
    run_dir = tmp_path / "run\\x"
    rc = cli.main(slurm_argv(root, tmp_path / "out", run_dir, slurm_conf(tmp_path), *(["--dry-run"] if dry else [])))
    err = capsys.readouterr().err
    assert rc == 2 and "contains a backslash" in err and "Traceback" not in err
    assert not run_dir.exists() and not (tmp_path / "out.hplt-shard-claim").exists()


@pytest.mark.parametrize("limit", ["5", "00:05:00", "9:59", "0-00:09"])
def test_time_too_short_for_the_requeue_signal_is_refused(slurm_cluster, tmp_path, capsys, limit):
    root = make_corpus(tmp_path, n_docs=20)
    conf = slurm_conf(tmp_path)
    for extra in (["--dry-run"], []):
        rc = cli.main(slurm_argv(root, tmp_path / "out", tmp_path / "run", conf, "--time", limit, *extra))
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err, err
        assert "requeue" in err and "at least 10 minutes (--time 00:10:00)" in err and repr(limit) in err
        assert not (tmp_path / "run").exists()
    assert cli.main(slurm_argv(root, tmp_path / "out", tmp_path / "run", conf, "--time", "10", "--dry-run")) == 0


def test_resume_with_a_time_too_short_is_refused(slurm_cluster, tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    run_dir = tmp_path / "run"
    assert cli.main(slurm_argv(root, tmp_path / "out", run_dir, slurm_conf(tmp_path), "--time", "00:10:00")) == 0
    jobs = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    try:
        record = (run_dir / "run.json").read_bytes()
        capsys.readouterr()
        assert cli.main(["--resume", str(run_dir), "--time", "4:59", "--dry-run"]) == 2
        assert cli.main(["--resume", str(run_dir), "--time", "00:05:00"]) == 2
        err = capsys.readouterr().err
        assert err.count("at least 10 minutes (--time 00:10:00)") == 2 and "Traceback" not in err
        assert (run_dir / "run.json").read_bytes() == record  # nothing recorded, nothing queued
    finally:
        wait_for_jobs([j["job_id"] for j in jobs], timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists()
