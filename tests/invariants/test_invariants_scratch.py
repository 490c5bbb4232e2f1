"""What a run costs in scratch: a partition task's buffered text stays under its spill budget whatever
its input's size; scratch files grow with tasks, not tasks x buckets; each text byte is read back
once (each spilled batch decompressed once) and a writer orders each bucket once."""
from __future__ import annotations

from collections import Counter

import pytest

from shard_pipeline.stages import partition, write
from shard_pipeline.stages.spill import SpillReader, read_arrow
from tests.inprocess import make_run

BUDGET = 3000  # text bytes; the corpus's documents have ~600


@pytest.mark.parametrize("native", [True, False], ids=["native-scan", "python-loop"])
def test_a_partition_task_spills_a_run_whenever_its_text_reaches_the_budget(tmp_path, in_process, monkeypatch, native):
    if not native:
        monkeypatch.setattr(partition, "native_scan", None)
    made = make_run(tmp_path, in_process, "plan", "--spill-bytes", str(BUDGET), n_docs=60)
    per_run = Counter()
    for t in range(2):
        for s in read_arrow(made.run.spill_index(t)).to_pylist():
            per_run[(t, s["run"])] += s["text_bytes"]
    largest_document = 2 * 600
    assert len(per_run) >= sum(per_run.values()) // (BUDGET + largest_document)
    assert max(per_run.values()) < BUDGET + largest_document and len(per_run) > 6


def test_scratch_holds_one_spill_index_and_receipt_per_task_whatever_the_buckets(tmp_path, in_process):
    made = make_run(tmp_path, in_process, "finalize", "--buckets", "9", "--spill-bytes", str(BUDGET), n_docs=60)
    run = made.run
    per_task = {f.name for t in range(2) for f in (run.spill_file(t), run.spill_index(t), run.partition_receipt(t))}
    assert {p.name for p in (run.root / "partition").iterdir()} == per_task
    assert {p.name for p in (run.root / "write").iterdir()} == {run.write_receipt(t).name for t in range(2)}
    sections = [s for t in range(2) for s in read_arrow(run.spill_index(t)).to_pylist()]
    runs = {(s["task"], s["run"]) for s in sections}
    assert len(runs) > 6 and 0 < len(sections) < 9 * len(runs)  # runs of ~5 documents: most of 9 buckets empty
    assert all(s["rows"] > 0 for s in sections)  # a section per (run, bucket) that has rows, never an empty one


class CountingBatches:
    """A section's IPC reader that counts each batch it decompresses, by (task, section offset, batch)."""

    def __init__(self, reader, key, seen: Counter) -> None:
        self._reader, self._key, self._seen = reader, key, seen

    def get_batch(self, i: int):
        self._seen[(*self._key, i)] += 1
        return self._reader.get_batch(i)


def test_every_spilled_batch_is_decompressed_once_and_each_writer_orders_a_bucket_once(tmp_path, in_process,
                                                                                      monkeypatch):
    """Row groups of a few rows and shards smaller than buckets: a batch straddles row groups and a bucket
    straddles shards; a writer still decompresses each batch once and orders each bucket once."""
    batches, orders = Counter(), Counter()
    real_reader, real_order = SpillReader._reader, write.BucketOrder

    def counted_reader(self, s):
        return CountingBatches(real_reader(self, s), (s.task, s.offset), batches)

    def counted_order(b, *args, **kw):
        orders[b] += 1
        return real_order(b, *args, **kw)

    monkeypatch.setattr(SpillReader, "_reader", counted_reader)
    monkeypatch.setattr(write, "BucketOrder", counted_order)
    made = make_run(tmp_path, in_process, "finalize", "--write-tasks", "1", "--row-group-bytes", "1500",
                    "--shard-rows", "7", n_docs=60)
    assert made.code == 1 and batches and set(batches.values()) == {1}
    assert sum(orders.values()) > 0 and set(orders.values()) == {1}
