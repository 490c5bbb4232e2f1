"""The partition checkpoint stays the same size whatever the inputs done (issue #19, item 11a),
and a task restarted from it, in any state a crash can leave, writes the uninterrupted bytes."""
from __future__ import annotations

import json

import pytest

from shard_pipeline.run.records import HEADER
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.runconfig import load_config
from shard_pipeline.run.render import progress_counts
from shard_pipeline.stages import partition as partition_mod
from tests.pipeline_util import lang_dir, make_corpus, run_cli

pytestmark = pytest.mark.slow  # end-to-end: runs the pipeline

NAMES = ("10_1.cc", "9_1.ia", "9_2.cc", "9_3.cc", "8_1.ab", "8_2.cc")


class Stop(Exception):
    pass


@pytest.fixture
def finished(tmp_path, monkeypatch):
    """A run whose one partition task read all six inputs (stopped at plan), and that task's receipt."""
    root = make_corpus(tmp_path, n_docs=90, names=NAMES)
    monkeypatch.setenv("HPLT_SHARD_FAULT", "plan-start")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--partition-tasks", "1", "--buckets", "3",
                   "--spill-bytes", "3000", "--bad-records", "quarantine") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    run = RunDir(lang_dir(tmp_path / "run"))
    receipt = json.loads(run.partition_receipt(0).read_text())
    assert len(receipt["inputs"]) == len(NAMES)
    return run, receipt


def _stop_after(monkeypatch, n: int) -> None:
    seen = []

    def point(name, task=None):
        if name == "partition-after-input":
            seen.append(task)
            if len(seen) == n:
                raise Stop

    monkeypatch.setattr(partition_mod, "fault_point", point)


def _same(receipt: dict, again: dict) -> None:
    drop = ("spill_stamp", "index_stamp", *HEADER)  # the files' times, and the header the receipt's file carries
    assert {k: v for k, v in again.items() if k not in drop} == {k: v for k, v in receipt.items() if k not in drop}


def test_checkpoint_holds_only_the_last_input_and_the_log_one_line_per_input(finished, monkeypatch):
    run, receipt = finished
    run.partition_receipt(0).unlink()
    sizes = {}
    for n in (1, 4):
        _stop_after(monkeypatch, n)
        run.partition_checkpoint(0).unlink(missing_ok=True)
        with pytest.raises(Stop):
            partition_mod.run_partition(run, 0)
        cp = json.loads(run.partition_checkpoint(0).read_text())
        assert cp["inputs_done"] == n and [r["index"] for r in cp["inputs"]] == [receipt["inputs"][n - 1]["index"]]
        assert cp["log_bytes"] == run.partition_receipts_log(0).stat().st_size
        assert len(run.partition_receipts_log(0).read_bytes().splitlines()) == n
        assert progress_counts(run.partition_checkpoint(0), load_config(run)) == (  # what --status shows while the task runs
            sum(r["read"] for r in receipt["inputs"][:n]), sum(r["compressed_bytes"] for r in receipt["inputs"][:n]))
        sizes[n] = len(json.dumps({k: v for k, v in cp.items() if k != "inputs"}))
    assert sizes[4] - sizes[1] < 40  # only the numbers grow, never a list
    monkeypatch.setattr(partition_mod, "fault_point", lambda *a, **k: None)
    _same(receipt, json.loads(json.dumps(partition_mod.run_partition(run, 0).__dict__, default=lambda o: o.__dict__)))
    assert not run.partition_checkpoint(0).exists() and not run.partition_receipts_log(0).exists()


def test_a_log_line_past_the_checkpoint_is_cut_and_its_input_read_again(finished, monkeypatch):
    run, receipt = finished
    _stop_after(monkeypatch, 3)
    with pytest.raises(Stop):
        partition_mod.run_partition(run, 0)
    with open(run.partition_receipts_log(0), "ab") as f:  # a crash after the log line, before the checkpoint
        f.write(b'{"inputs": [{"index": 99}], "sections": []}\n{"inpu')
    monkeypatch.setattr(partition_mod, "fault_point", lambda *a, **k: None)
    again = partition_mod.run_partition(run, 0)
    _same(receipt, json.loads(json.dumps(again.__dict__, default=lambda o: o.__dict__)))


def test_a_checkpoint_of_another_configuration_is_not_continued(finished, monkeypatch):
    """A checkpoint copied from another run (another config_sha256) is not this task's: the task starts over,
    and writes the uninterrupted bytes."""
    run, receipt = finished
    _stop_after(monkeypatch, 2)
    with pytest.raises(Stop):
        partition_mod.run_partition(run, 0)
    cp = json.loads(run.partition_checkpoint(0).read_text())
    run.partition_checkpoint(0).write_text(json.dumps({**cp, "config_sha256": "0" * 64}))
    restored = []  # how many inputs each restore kept (the task appends to the list it returns)
    real = partition_mod.PartitionCheckpoint.restore

    def restore(self, writer):
        got = real(self, writer)
        restored.append((len(got[0]), got[1]))
        return got

    monkeypatch.setattr(partition_mod.PartitionCheckpoint, "restore", restore)
    monkeypatch.setattr(partition_mod, "fault_point", lambda *a, **k: None)
    again = partition_mod.run_partition(run, 0)
    assert restored == [(0, 0)]  # nothing of the foreign checkpoint was kept
    _same(receipt, json.loads(json.dumps(again.__dict__, default=lambda o: o.__dict__)))
