"""The run-dir cases of a run bound to what made it, through the command line: an edited config, a damaged
index and a checkout changed under a stopped run each end in one named refusal or a redo to the uninterrupted
bytes, with the exit code of docs/operations.md and never a traceback."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_ARGS
from tests.pipeline_util import lang_dir, LANG, LICENSE, run_cli, tree_bytes

pytestmark = pytest.mark.slow  # end-to-end: runs the pipeline and the command line in Python processes

REPO = Path(__file__).resolve().parents[3]


def hplt_shard(*argv: str, checkout: Path = REPO) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, str(checkout / "hplt-shard"), *argv], cwd=checkout, capture_output=True,
                       text=True, timeout=300)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    return p


def stopped_before_plan(tmp_path, monkeypatch, root: Path) -> tuple[Path, Path]:
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "plan-start")
    assert run_cli(root, out, run_dir, *REFERENCE_ARGS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    return out, run_dir


def test_a_config_edited_after_partition_is_refused_by_status_and_resume(tmp_path, monkeypatch, reference_run):
    root, _ = reference_run
    out, run_dir = stopped_before_plan(tmp_path, monkeypatch, root)
    cfg = json.loads((lang_dir(run_dir) / "config.json").read_text())
    cfg["content"]["val_permille"] = 500  # the split partition computed no longer matches the config
    (lang_dir(run_dir) / "config.json").write_text(json.dumps(cfg))
    for command in ("--status", "--resume"):
        p = hplt_shard(command, str(run_dir), "--executor", "local") if command == "--resume" else \
            hplt_shard(command, str(run_dir))
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert f"{lang_dir(run_dir) / 'config.json'} was changed after the run was made" in p.stderr
    assert not out.exists() and not (lang_dir(run_dir) / "plan.json").exists()  # nothing ran over it


def test_a_damaged_index_is_redone_by_resume_to_the_uninterrupted_bytes(tmp_path, monkeypatch, reference_run):
    root, expected = reference_run
    out, run_dir = stopped_before_plan(tmp_path, monkeypatch, root)
    index = lang_dir(run_dir) / "partition" / "task-00001.index.arrow"
    index.write_bytes(index.read_bytes()[:64])
    p = hplt_shard("--status", str(run_dir))
    assert p.returncode == 1 and "task-00001.index.arrow has 64 bytes" in p.stdout, p.stdout
    p = hplt_shard("--resume", str(run_dir), "--executor", "local")
    assert p.returncode == 0, p.stderr
    assert "partition redo 1  [1: task-00001.index.arrow has 64 bytes" in p.stdout
    assert tree_bytes(out) == expected


def checkout_copy(tmp_path: Path) -> Path:
    """A copy of this checkout elsewhere (the same code version: codeversion.py), as a user's own clone is."""
    copy = tmp_path / "checkout"
    shutil.copytree(REPO / "shard_pipeline", copy / "shard_pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("hplt-shard", "pyproject.toml"):
        shutil.copy(REPO / name, copy / name)
    return copy


def test_a_checkout_changed_under_a_stopped_run_refuses_it_until_the_code_is_back(tmp_path, reference_run):
    """A `git pull` while jobs wait: a task started by the changed code fails with that cause before it reads
    anything, --status and --resume refuse with the next step; the code that made the run finishes it, and the
    finished run is anyone's to look at."""
    root, expected = reference_run
    copy = checkout_copy(tmp_path)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    argv = [LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(out), "--run-dir", str(run_dir),
            "--executor", "local", "--license", LICENSE, "--jobs", "2", *REFERENCE_ARGS]
    stopped = subprocess.run([sys.executable, str(copy / "hplt-shard"), *argv], cwd=copy, capture_output=True,
                               text=True, env={**os.environ, "HPLT_SHARD_FAULT": "plan-start"})
    assert stopped.returncode == 1, stopped.stderr
    source = copy / "shard_pipeline" / "stages" / "plan.py"
    original = source.read_bytes()
    source.write_bytes(original + b"\n# a later commit\n")

    task = subprocess.run([sys.executable, "-m", "shard_pipeline.worker.task", "plan", str(run_dir)], cwd=copy,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(copy)})
    assert task.returncode == 1 and task.stderr.strip().splitlines()[-1].startswith("ERROR: OtherCode: "), task.stderr
    assert not (lang_dir(run_dir) / "plan.json").exists()
    for command in (("--status", str(run_dir)), ("--resume", str(run_dir), "--executor", "local")):
        p = hplt_shard(*command, checkout=copy)
        assert p.returncode == 2 and "was made by another code version" in p.stderr, p.stderr
        assert "start a new run with this code" in p.stderr
    source.write_bytes(original)  # the code that made the run
    assert hplt_shard("--resume", str(run_dir), "--executor", "local", checkout=copy).returncode == 0
    assert tree_bytes(out) == expected
    source.write_bytes(original + b"\n# a later commit\n")
    p = hplt_shard("--status", str(run_dir), checkout=copy)
    assert p.returncode == 0 and "state: done" in p.stdout, p.stdout + p.stderr
