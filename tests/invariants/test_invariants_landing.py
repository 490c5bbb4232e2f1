"""A language's later stage waits on its earlier ones by the registry's done rule (run/registry.py), the rule
--status and --resume apply: a unit of a stage whose receipt is there but no longer agrees with its files is
not done, so the stage after it does not start on it. Runs made in process (tests/inprocess.py)."""
from __future__ import annotations


import pytest

from shard_pipeline.worker.landing import upstream_problem
from tests.inprocess import make_run
from tests.invariants.test_invariants_done import first_shard


@pytest.fixture
def written(tmp_path, in_process):
    """Every partition, plan and write task finished; finalize did not run."""
    made = make_run(tmp_path, in_process, "finalize")
    assert made.code == 1
    return made.run


def test_finalize_may_start_when_every_write_unit_is_done(written):
    assert upstream_problem(written, "finalize") is None and upstream_problem(written, "write") is None


def test_a_write_unit_whose_shard_changed_holds_finalize_though_its_receipt_is_there(written):
    shard = first_shard(written, 1)
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert written.write_receipt(1).exists()
    assert upstream_problem(written, "finalize") is not None


def test_a_plan_that_is_not_done_holds_the_writes(written):
    written.plan_json.write_text("{}")
    assert upstream_problem(written, "write") is not None


def test_a_partition_unit_without_its_receipt_holds_the_plan(written):
    written.partition_receipt(0).unlink()
    assert upstream_problem(written, "plan") is not None and upstream_problem(written, "partition") is None


def test_a_chmod_of_the_shared_run_dir_holds_no_stage(written):
    """A `chmod -R g+w` changes every file's ctime alone: counted by size and mtime, as --status counts it (the
    stage that reads a file re-hashes it), so a shared run dir's languages still land."""
    for folder in (written.root, written.root.parent / "out.tmp"):
        for path in folder.rglob("*"):
            path.chmod(path.stat().st_mode | 0o020)
    assert upstream_problem(written, "plan") is None and upstream_problem(written, "finalize") is None
