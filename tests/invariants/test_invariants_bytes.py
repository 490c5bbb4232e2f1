"""Same documents, same bytes, in the right order for any id distribution: a run's output is
`write_shards`' over the same documents, whatever the task counts, buckets or the corpus's place;
the config hash covers every content field and nothing else; a repeated id stops the run."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil

import numpy as np
import pytest

from shard_pipeline.contract.rules import split_of
from shard_pipeline.input.zstd_stream import open_decompressed
from shard_pipeline.run.runconfig import Content, InputRef
from shard_pipeline.stages.order import RepeatedId
from shard_pipeline.stages.partition import val_flags
from tests.inprocess import corpus, make_run
from tests.pipeline_util import LANG, config_sha, expected_output, records, tree_bytes, write_records

LAYOUT = ("--shard-rows", "9", "--partition-tasks", "2", "--write-tasks", "3", "--buckets", "4",
          "--spill-bytes", "4000", "--row-group-bytes", "3000", "--val-permille", "200")


@pytest.mark.parametrize("id_style", ["hex", "prefix"])
def test_a_runs_output_is_write_shards_output_byte_for_byte(tmp_path, in_process, id_style):
    """Several spill runs per task, shards across buckets, a val split: the bytes of the contract writer."""
    root = corpus(tmp_path / "corpus", 60, ("10_1.cc", "9_1.ia", "9_2.cc"), id_style=id_style)
    made = make_run(tmp_path, in_process, None, corpus_root=root, args=LAYOUT)
    assert made.code == 0
    expected_output(root, tmp_path / "expected", config_sha256=config_sha(made.run.root), shard_rows=9,
                    val_permille=200, row_group_bytes=3000)
    assert tree_bytes(made.out) == tree_bytes(tmp_path / "expected")


def test_the_same_documents_elsewhere_with_other_tasks_and_buckets_give_the_same_bytes(tmp_path, in_process):
    root = corpus(tmp_path / "a" / "corpus", 40, ("10_1.cc", "9_1.ia"))
    moved = tmp_path / "b" / "elsewhere" / root.name
    shutil.copytree(root, moved)
    first = make_run(tmp_path / "a", in_process, None, corpus_root=root, args=LAYOUT)
    other = ("--partition-tasks", "1", "--write-tasks", "1", "--buckets", "7", "--spill-bytes", "100000")
    second = make_run(tmp_path / "b", in_process, None, *other, corpus_root=moved, args=LAYOUT)
    assert (first.code, second.code) == (0, 0)
    assert tree_bytes(first.out) == tree_bytes(second.out)


CONTENT = Content(corpus="v4", subset="clean", lang=LANG, dataset="d", version="1", license_spdx="CC0-1.0",
                  shard_rows=10, val_permille=5, row_group_bytes=1 << 20, bad_records="fail",
                  inputs=(InputRef("1_1", "/data/1_1.jsonl.zst", 100, 1700000000, "hplt-v4/clean/x/1_1"),))
OTHER_VALUES = {  # another value of every Content field
    "corpus": "v3", "subset": "noisy", "lang": "fin_Latn", "dataset": "e", "version": "2", "license_spdx": "MIT",
    "shard_rows": 11, "val_permille": 6, "row_group_bytes": 1 << 21, "bad_records": "quarantine",
    "inputs": (InputRef("1_1", "/data/1_1.jsonl.zst", 101, 1700000000, "hplt-v4/clean/x/1_1"),),
    "dataset_card": True, "clean": {"min_chars": 1}, "shard_bytes": 1000, "dp_ranks": (2,), "split_layout": "dirs",
    "hplt": False, "annotations": ("doc_scores",),
}


def test_the_config_hash_changes_with_every_content_field_and_not_with_where_inputs_are():
    assert set(OTHER_VALUES) == {f.name for f in dataclasses.fields(Content)}, "a new content field: add a value"
    for name, value in OTHER_VALUES.items():
        assert dataclasses.replace(CONTENT, **{name: value}).sha256() != CONTENT.sha256(), name
    elsewhere = (InputRef("1_1", "/scratch/copy/1_1.jsonl.zst", 100, 1800000000, "hplt-v4/clean/x/1_1"),)
    assert dataclasses.replace(CONTENT, inputs=elsewhere).sha256() == CONTENT.sha256()


def test_partitions_split_flag_is_the_contracts_for_every_digest():
    """Digests whose first 8 bytes are just below, at and above each val boundary, and random ones."""
    heads = [k * 1000 + permille + d for k in (0, 1, 987654321) for permille in (0, 5, 999) for d in (-1, 0, 1)
             if k * 1000 + permille + d >= 0]
    rng = random.Random(3)
    digests = [h.to_bytes(8, "big") + rng.randbytes(24) for h in heads]
    digests += [hashlib.sha256(str(i).encode()).digest() for i in range(2000)]
    for permille in (0, 5, 999, 1000):
        flags = val_flags(b"".join(digests), permille)
        assert flags.tolist() == [split_of(d, permille) == "val" for d in digests], permille
        assert isinstance(flags, np.ndarray)


def test_a_repeated_id_across_inputs_stops_the_writer_of_its_bucket(tmp_path, in_process):
    root = corpus(tmp_path / "corpus", 40, ("10_1.cc", "9_1.ia"))
    twice = records(1, seed=5)[0]
    for name in ("10_1.cc", "9_1.ia"):
        shard = root / LANG / f"{name}.jsonl.zst"
        with open_decompressed(str(shard)) as f:
            lines = f.read().splitlines()
        write_records(shard, [*lines, json.dumps(twice).encode()])
    made = make_run(tmp_path, in_process, None, "--write-tasks", "1", corpus_root=root)
    assert made.code == 1 and not made.out.exists()
    # the language's finalize fails at once, naming the write that did not finish (Slurm's afterany chain)
    assert {k: type(e) for k, e in in_process.errors.items()} == {("write", 0): RepeatedId, ("finalize", 0): RuntimeError}
    assert "write task(s) 0 not done" in str(in_process.errors[("finalize", 0)])
