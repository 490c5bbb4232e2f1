"""ShardRanks: a write unit orders each bucket once, whatever its shards and row groups, and writes the same bytes."""
from __future__ import annotations

import json

import numpy as np
import pytest

from shard_pipeline.run.rundir import RunDir
from shard_pipeline.stages import write
from tests.pipeline_util import lang_dir, make_corpus, manifest, run_cli


@pytest.mark.slow  # runs the pipeline end to end first
def test_one_write_unit_orders_each_bucket_once_and_writes_the_same_shards(tmp_path, monkeypatch):
    root = make_corpus(tmp_path / "corpus", n_docs=240)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    # shards of 50 rows over 3 buckets of ~80 rows: shards straddle buckets; row groups of ~10 rows
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-before-swap")  # the write task reruns only in an unfinished run
    assert run_cli(root, out, run_dir, "--shard-rows", "50", "--buckets", "3", "--write-tasks", "1",
                   "--row-group-bytes", "6000") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    orders = []
    real = write.BucketOrder

    def counted(b, *args, **kw):
        orders.append(b)
        return real(b, *args, **kw)

    monkeypatch.setattr(write, "BucketOrder", counted)
    receipt = write.run_write(RunDir(lang_dir(run_dir)), 0)  # again, in process: the plan still holds
    plan = json.loads((lang_dir(run_dir) / "plan.json").read_text())
    from shard_pipeline.submit import cli

    assert cli.main(["--resume", str(run_dir)]) == 0
    assert sorted(orders) == [b for b, bk in enumerate(plan["sets"][0]["buckets"]) if bk["rows"]]
    assert [s.sha256 for s in receipt.shards] == [s["sha256"] for s in manifest(out)["shards"]]


def test_shard_ranks_joined_keeps_rank_order_and_sections_by_bucket():
    a = write.ShardRanks(np.array([0, 0]), np.array([1, 0]), np.array([5, 2]), np.array([10, 20], np.int32), {0: ["s0"]})
    b = write.ShardRanks(np.array([2]), np.array([0]), np.array([7]), np.array([30], np.int32), {2: ["s2"]})
    j = write.ShardRanks.joined([a, b])
    assert j.bucket.tolist() == [0, 0, 2] and j.row.tolist() == [5, 2, 7] and j.text_bytes.tolist() == [10, 20, 30]
    assert j.sections == {0: ["s0"], 2: ["s2"]}
    assert len(write.ShardRanks.joined([]).bucket) == 0


def test_runs_of_gives_the_slices_of_equal_neighbours():
    """A row group's ranks are split by bucket and section with slices, not a mask per value."""
    assert write.runs_of(np.array([], np.int64)) == []
    assert write.runs_of(np.array([7])) == [(0, 1)]
    assert write.runs_of(np.array([1, 1, 2, 5, 5, 5])) == [(0, 2), (2, 3), (3, 6)]
    values = np.sort(np.random.default_rng(1).integers(0, 50, 400))
    slices = write.runs_of(values)
    assert [int(values[lo]) for lo, _ in slices] == np.unique(values).tolist()  # one slice per value, in order
    assert all((values[lo:hi] == values[lo]).all() for lo, hi in slices) and slices[-1][1] == len(values)
