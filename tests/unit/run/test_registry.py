"""The stage registry: one sequence of stages, one rule for "done" that --status and --resume share."""
from __future__ import annotations

import pytest

import json
import os
from pathlib import Path

from shard_pipeline.run import outcome
from shard_pipeline.run.registry import STAGE_NAMES, STAGES, RunState
from shard_pipeline.run.resume import plan_resume
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.view import status_report
from shard_pipeline.run.stage_status import stage_statuses
from tests.pipeline_util import lang_dir, make_corpus, run_cli

ARGS = ("--shard-rows", "25", "--partition-tasks", "2", "--write-tasks", "3", "--buckets", "4")


def stopped_before_the_swap(tmp_path, monkeypatch) -> RunDir:
    """A local run whose every partition, plan and write task finished; finalize was killed before the swap."""
    root = make_corpus(tmp_path, n_docs=90)
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-before-swap")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", *ARGS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    return RunDir(lang_dir(tmp_path / "run"))


def test_the_stage_sequence():
    assert STAGE_NAMES == ("partition", "plan", "write", "finalize")
    assert [s.array for s in STAGES] == [True, False, True, False]


@pytest.mark.slow
def test_a_changed_file_under_a_receipt_is_not_done_for_resume_and_touched_for_status(tmp_path, monkeypatch):
    run = stopped_before_the_swap(tmp_path, monkeypatch)
    write = STAGES[STAGE_NAMES.index("write")]
    assert all(write.problem(RunState(run), t) is None for t in range(3))

    # write task 1's first shard: same size, other bytes, its receipt untouched
    receipt = json.loads(run.write_receipt(1).read_text())
    shard = Path(json.loads(run.plan_json.read_text())["tmp_dir"]) / receipt["shards"][0]["name"]
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, receipt["shards"][0]["stamp"]["mtime_ns"]))  # even with its old mtime

    assert write.problem(RunState(run), 1) and write.problem(RunState(run), 0) is None
    assert "sha256 differs" in write.problem(RunState(run), 1)
    assert "touched after its receipt" in write.problem(RunState(run, rehash=False), 1)  # --status reads nothing
    rp = plan_resume(run)
    assert rp.tasks["write"] == [1] and rp.tasks["finalize"] == [0]
    assert "partition" not in rp.tasks and "plan" not in rp.tasks
    # --status reads no file: same size and mtime count as done, and it says the file was touched since
    by_stage = {s.stage: s for s in stage_statuses(run, queue={})}
    assert by_stage["write"].done == 3 and by_stage["write"].touched == [1]
    assert by_stage["partition"].done == 2 and by_stage["plan"].done == 1

    # a partition spill rewritten after its receipt: both call partition task 0 (and all after it) not done
    spill = run.spill_file(0)
    spill.write_bytes(spill.read_bytes())
    os.utime(spill, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    rp = plan_resume(run)
    assert rp.tasks["partition"] == [0] and rp.tasks["write"] == [0, 1, 2]
    assert {s.stage: s.done for s in stage_statuses(run, queue={})}["partition"] == 1


@pytest.mark.slow
def test_status_reads_no_file_and_resume_rehashes_only_what_was_touched(tmp_path, monkeypatch):
    """--status is a stat per file (it runs often, on terabytes); --resume re-hashes only files whose
    ctime changed since they were finished, and keeps them when their bytes are the same."""
    import shard_pipeline.run.registry as registry

    run = stopped_before_the_swap(tmp_path, monkeypatch)
    hashed = []
    real = registry.file_sha256
    monkeypatch.setattr(registry, "file_sha256", lambda p: hashed.append(p) or real(p))
    by_stage = {s.stage: s for s in stage_statuses(run, queue={})}
    assert (by_stage["partition"].done, by_stage["write"].done) == (2, 3)
    assert plan_resume(run).tasks == {"finalize": [0]} and hashed == []  # nothing touched: nothing read

    # a chmod after the receipt changes the ctime, not the bytes: --status counts the task done by size
    # and mtime and says so (a `chmod -R g+w` of a shared run dir must not turn finished tasks into failed ones)
    spill = run.spill_file(1)
    os.chmod(spill, spill.stat().st_mode)
    by_stage = {s.stage: s for s in stage_statuses(run, queue={})}
    assert (by_stage["partition"].done, by_stage["partition"].touched, by_stage["partition"].failed) == (2, [1], [])
    assert hashed == []
    text, _ = status_report(run)
    assert "TOUCHED partition 1 task (1): " in text and "--resume re-checks their sha256" in text, text
    assert "FAILED partition" not in text and hashed == []
    assert plan_resume(run).tasks == {"finalize": [0]} and hashed == [spill]  # re-hashed, same bytes: kept


@pytest.mark.slow
def test_status_of_a_finished_task_whose_files_are_gone_says_so_not_its_exit_0_line(tmp_path, monkeypatch):
    """A task that ended well but whose receipt or file is gone since is not a failure of its own: --status
    names what is missing and that --resume does it again, not the unit's 'exit 0' trailer."""
    run = stopped_before_the_swap(tmp_path, monkeypatch)
    run.spill_file(0).unlink()
    failed = {s.stage: s.failed for s in stage_statuses(run, queue={})}["partition"]
    said = f"it finished, but {run.spill_file(0).name} missing: --resume does it again"
    assert [(f.task, f.last_line) for f in failed] == [(0, said)]
    # a Slurm job of one unit runs in no group, which leaves no exit record: its outcome record says the same
    log = run.root / "logs" / "partition" / "local_0.log"
    assert outcome.read_exit(log) is not None
    outcome.exit_path(log).unlink()
    assert [f.last_line for f in {s.stage: s.failed for s in stage_statuses(run, queue={})}["partition"]] == [said]
    assert plan_resume(run).tasks["partition"] == [0]


@pytest.mark.slow
def test_touched_shards_in_out_after_the_swap_are_told_for_the_write_task_that_made_them(tmp_path, monkeypatch):
    """Finalize stopped after the exchange, then a chmod of one shard in OUT: --status names the write task
    whose shard it is (not the first task that asked whether OUT is swapped), and every task stays done."""
    root = make_corpus(tmp_path, n_docs=90)
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-after-swap")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", *ARGS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    run = RunDir(lang_dir(tmp_path / "run"))
    name = json.loads(run.write_receipt(2).read_text())["shards"][0]["name"]
    shard = tmp_path / "out" / name
    os.chmod(shard, shard.stat().st_mode)
    write = {s.stage: s for s in stage_statuses(run, queue={})}["write"]
    assert (write.done, write.touched) == (3, [2])
