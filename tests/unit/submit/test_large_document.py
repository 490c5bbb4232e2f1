"""A document too large for --mem is named at --dry-run, and the task memory accounts for it (issue #19, 11b)."""
from __future__ import annotations

import re

from shard_pipeline.stages.buckets import sample_heads
from shard_pipeline.input.corpus import find_shards
from shard_pipeline.submit.layout import doc_memory, lay_out_jobs
from tests.pipeline_util import LANG, make_corpus, records, run_cli, write_records

BIG = 5_000_000  # bytes of text: > --mem 300M's spill budget / 10, so a write task needs more than 300M


def _corpus(tmp_path, big: bool):
    root = make_corpus(tmp_path, n_docs=40)
    recs = records(5, seed=7)
    if big:
        recs[3]["text"] = ("large document " * (BIG // 15 + 1))[:BIG]
    write_records(root / LANG / "9_9.cc.jsonl.zst", recs)
    return root


def _stage_mem(out: str, stage: str) -> str:
    return re.search(rf"^\s+{stage}\s+\d+ tasks?\s+mem\s+(\S+)", out, re.M).group(1)


def test_dry_run_warns_naming_the_document_the_need_and_the_mem_that_fits(tmp_path, capsys):
    root = _corpus(tmp_path, big=True)
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--mem", "300M", "--dry-run") == 0
    cap = capsys.readouterr()
    lines = [l for l in cap.err.splitlines() if "single document" in l]
    assert len(lines) == 1, cap.err
    line = lines[0]
    assert "5.00 MB of text" in line and f"{root / LANG / '9_9.cc.jsonl.zst'} line 4" in line
    assert "more than --mem 300M" in line and "--mem 1G fits it" in line
    need = float(re.search(r"needs about ([\d.]+) MB", line).group(1))
    assert 300 < need < 1024
    assert _stage_mem(cap.out, "write") == "1G" and _stage_mem(cap.out, "partition") == "1G"
    assert not (tmp_path / "run").exists()


def test_small_documents_give_no_warning_and_the_mem_asked_for(tmp_path, capsys):
    root = _corpus(tmp_path, big=False)
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--mem", "300M", "--dry-run") == 0
    cap = capsys.readouterr()
    assert "single document" not in cap.err
    assert _stage_mem(cap.out, "partition") == "300M"


def test_the_head_sample_sees_the_largest_document_and_the_layout_sizes_by_it(tmp_path):
    root = _corpus(tmp_path, big=True)
    sample = sample_heads(find_shards(LANG, corpus="v4", local_root=root), corpus="v4")
    assert sample.largest_text == BIG and sample.largest_line > BIG
    assert sample.largest_at.endswith("9_9.cc.jsonl.zst line 4")
    part, write = doc_memory(sample.largest_text, sample.largest_line, 8 << 20)
    assert part > 4 * BIG and write > 10 * BIG
    lay = lay_out_jobs([1000] * 5, {}, shard_rows=100, task_budget=20, worker_mem="300M", spill_bytes=8 << 20,
                       largest_text=sample.largest_text, largest_line=sample.largest_line)
    plain = lay_out_jobs([1000] * 5, {}, shard_rows=100, task_budget=20, worker_mem="300M", spill_bytes=8 << 20)
    assert lay.doc_need == max(part, write) and plain.doc_need == 0
    assert lay.resources["partition"].mem == "1G" and plain.resources["partition"].mem == "300M"
