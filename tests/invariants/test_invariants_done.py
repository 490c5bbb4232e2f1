"""The done rule (run/registry.py): a task is done only when its receipt agrees with its files, and a resume
redoes every task that is not, and everything after it. Runs made in process (tests/inprocess.py), by the
stages' own writers."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shard_pipeline.run import registry
from shard_pipeline.run.registry import BY_NAME, RunState
from shard_pipeline.run.resume import plan_resume
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.stage_status import stage_statuses
from tests.inprocess import make_run

WRITE = BY_NAME["write"]


@pytest.fixture
def written(tmp_path, in_process) -> RunDir:
    """Every partition, plan and write task finished; finalize did not run."""
    made = make_run(tmp_path, in_process, "finalize")
    assert made.code == 1 and plan_resume(made.run).tasks == {"finalize": [0]}
    return made.run


def first_shard(run: RunDir, task: int) -> Path:
    """The first shard write task `task` finished, in OUT.tmp."""
    receipt = json.loads(run.write_receipt(task).read_text())
    return Path(json.loads(run.plan_json.read_text())["tmp_dir"]) / receipt["shards"][0]["name"]


def rewrite(path: Path, data: bytes, mtime_ns: int) -> None:
    """Replace a file's bytes and set its mtime: only its ctime says it was touched."""
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_a_shard_with_other_bytes_under_its_old_size_and_mtime_is_not_done(written):
    shard = first_shard(written, 1)
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    rewrite(shard, bytes(data), shard.stat().st_mtime_ns)
    assert WRITE.problem(RunState(written), 0) is None
    assert WRITE.problem(RunState(written), 1) is not None
    assert plan_resume(written).tasks == {"write": [1], "finalize": [0]}


def test_a_shard_with_a_new_mtime_is_not_done_even_with_the_same_bytes(written):
    shard = first_shard(written, 0)
    rewrite(shard, shard.read_bytes(), shard.stat().st_mtime_ns + 10**9)
    assert WRITE.problem(RunState(written), 0) is not None
    assert plan_resume(written).tasks == {"write": [0], "finalize": [0]}


def test_status_counts_a_shard_of_another_size_not_done_even_under_its_old_mtime(written):
    """--status reads no file: size and mtime are all it has for a touched file."""
    shard = first_shard(written, 1)
    rewrite(shard, shard.read_bytes() + b"\0", shard.stat().st_mtime_ns)
    by_stage = {s.stage: s for s in stage_statuses(written, queue={})}
    assert by_stage["write"].done == 1 and by_stage["write"].touched == []


def test_a_missing_shard_makes_its_write_task_not_done(written):
    first_shard(written, 0).unlink()
    assert plan_resume(written).tasks == {"write": [0], "finalize": [0]}


def test_untouched_files_are_done_without_reading_them_and_a_chmod_costs_one_hash(written, monkeypatch):
    """An unchanged ctime vouches for a file's bytes: --status and --resume read no untouched file; a
    file only chmod-ed is re-hashed by a resume (kept: same bytes) and named touched by --status."""
    hashed = []
    real = registry.file_sha256
    monkeypatch.setattr(registry, "file_sha256", lambda p: hashed.append(p) or real(p))
    by_stage = {s.stage: s for s in stage_statuses(written, queue={})}
    assert (by_stage["partition"].done, by_stage["write"].done, by_stage["write"].touched) == (2, 2, [])
    assert plan_resume(written).tasks == {"finalize": [0]} and hashed == []

    spill = written.spill_file(1)
    os.chmod(spill, spill.stat().st_mode)
    by_stage = {s.stage: s for s in stage_statuses(written, queue={})}
    assert (by_stage["partition"].done, by_stage["partition"].touched) == (2, [1]) and hashed == []
    assert plan_resume(written).tasks == {"finalize": [0]} and hashed == [spill]


def test_a_partition_task_without_its_index_is_redone_with_everything_after_it(written):
    written.spill_index(0).unlink()
    assert plan_resume(written).tasks == {"partition": [0], "plan": [0], "write": [0, 1], "finalize": [0]}


def test_a_plan_without_its_sections_is_redone_with_every_write(written):
    written.sections.unlink()
    assert plan_resume(written).tasks == {"plan": [0], "write": [0, 1], "finalize": [0]}


def test_why_a_task_is_not_done_in_words(written):
    """The one golden text of the done rule's reasons, as --status and --resume show them."""
    shard = first_shard(written, 1)
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    rewrite(shard, bytes(data), shard.stat().st_mtime_ns)
    assert WRITE.problem(RunState(written), 1) == f"{shard.name} sha256 differs from its receipt"
    assert WRITE.problem(RunState(written, rehash=False), 1) == (
        f"{shard.name} was touched after its receipt (its ctime changed); --resume re-hashes it")
    rewrite(shard, bytes(data), shard.stat().st_mtime_ns + 1)
    assert WRITE.problem(RunState(written), 1) == f"{shard.name} was modified after its receipt was written"
