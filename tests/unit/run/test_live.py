"""Live-task records (run/live.py): what --status and a resume make of a record they cannot check."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shard_pipeline.run import live


def _record_elsewhere(run_root: Path, stage: str, task: int) -> Path:
    """A live record written on another host: its pid means nothing here."""
    import socket

    p = live.live_dir(run_root) / f"{stage}-{task:05d}.424242.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"stage": stage, "task": task, "pid": 424242, "start": 1, "pgid": 424242,
                             "host": "nid00" + socket.gethostname()}))
    return p


def test_a_record_of_another_host_blocks_a_local_resume_and_is_stale_after_slurm(tmp_path):
    """Another host's record is a task on another login node after a local submission (it may run: refuse,
    keep it), and a Slurm compute node's after a Slurm one, once squeue holds no job of the run (stale: drop)."""
    from shard_pipeline.run.resume import ResumeRefused, refuse_live_tasks

    rec = _record_elsewhere(tmp_path, "partition", 3)
    scan = live.scan(tmp_path)
    assert scan.running(local=True) == {("partition", 3)} and scan.running(local=False) == set()
    assert scan.killed() == set()  # not this host's to call killed
    with pytest.raises(ResumeRefused, match=r"partition task 3 on nid00.* \(pid 424242\)\. This host cannot see"):
        refuse_live_tasks(tmp_path, local=True, squeue_answered=True)
    assert rec.exists()
    refuse_live_tasks(tmp_path, local=False, squeue_answered=False)  # no squeue to ask: left alone
    assert rec.exists()
    refuse_live_tasks(tmp_path, local=True, squeue_answered=True, done=True)  # a done run starts nothing
    assert rec.exists()
    refuse_live_tasks(tmp_path, local=False, squeue_answered=True)
    assert not rec.exists()


def test_a_unit_of_several_languages_recorded_twice_is_one_task_and_its_records_paste(tmp_path):
    """A multi-language unit records itself in the run's live/ and its language's: one process, one task;
    the records to remove are one pasteable rm, whatever the run dir's name."""
    import shlex

    root = tmp_path / "my run"
    a = _record_elsewhere(root, "write", 0)
    b = _record_elsewhere(root / "fin_Latn", "write", 0)
    away = [x for r in (root, root / "fin_Latn") for x in live.scan(r).elsewhere()]
    text = live.elsewhere_step(away)
    assert text.startswith("1 task of this run was started on another host and may still run there: write task 0 ")
    rm = text.split("remove their records (")[1].removesuffix("), then resume again")
    assert shlex.split(rm) == ["rm", str(a), str(b)]
