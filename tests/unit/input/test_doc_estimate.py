"""How many documents a shard holds, from its compressed size: measured past the start of its zstd
stream, whose first blocks compress worse (no history to match) and which the decompressor reads
ahead of the records. The head sample's own count put v4 English at 0.41x its documents, and the
layout then gave plan and write half the memory they need (bench/RESULTS.md 7)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import zstandard

from shard_pipeline.input.corpus import find_shards
from shard_pipeline.input.synth import generate_corpus
from shard_pipeline.input.zstd_stream import DEEP_BYTES, WARM_BYTES, head_density, steady_density
from shard_pipeline.stages.buckets import sample_heads
from shard_pipeline.submit.layout import estimate_docs

LANG = "eng_Latn"


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> tuple[Path, int]:
    """Two shards of ~1.5 MiB compressed each: past DEEP_BYTES, as HPLT's are."""
    root = tmp_path_factory.mktemp("big")
    n = 7000
    generate_corpus(root, LANG, n_docs=n, shard_names=["9_1", "9_2"], seed=5, text_bytes=2000)
    assert all(p.stat().st_size > DEEP_BYTES for p in (root / LANG).iterdir())
    return root, n


def test_the_steady_rate_is_the_files_and_the_head_is_not(big):
    root, n = big
    path = root / LANG / "9_1.jsonl.zst"
    data = path.read_bytes()
    true = len(data) / (n // 2)
    b, docs = steady_density(data[:DEEP_BYTES])
    assert abs(b / docs / true - 1) < 0.05, (b / docs, true)
    hb, hdocs = head_density(data[:128 << 10])
    assert hb / hdocs > 1.2 * true  # what the head alone says: why it is not used
    assert head_density(data[:100]) is None  # no whole block yet
    assert steady_density(data[:WARM_BYTES]) is None  # nothing past the warm-up


def test_whole_blocks_of_several_frames_decompress_exactly(tmp_path):
    lines = [b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * (i % 300)) for i in range(3000)]
    frames = [zstandard.ZstdCompressor(level=3).compress(b"".join(lines[i:i + 1000])) for i in range(0, 3000, 1000)]
    data = b"".join(frames)
    assert head_density(data) == (len(data), 3000)
    end, docs = head_density(data[:len(frames[0]) + len(frames[1]) + 5])  # into the third frame's header
    assert end == len(frames[0]) + len(frames[1]) and docs == 2000


@pytest.mark.parametrize("per_shard", [20, 500])
def test_the_sample_estimates_the_documents_however_few_records_it_reads(big, per_shard):
    root, n = big
    shards = find_shards(LANG, corpus="v4", local_root=root)
    sample = sample_heads(shards, corpus="v4", per_shard=per_shard)
    est = estimate_docs([os.path.getsize(s.location) for s in shards], sample.complete, sample.compressed_per_doc)
    assert abs(est / n - 1) < 0.05, (est, n)
