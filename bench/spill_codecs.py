#!/usr/bin/env python3
"""Every codec Arrow has, on a kept run's spill text, as partition compresses it (RESULTS.md section 5).

    .venv/bin/python bench/spill_codecs.py RUNDIR [--sections 4] [--repeat 3]

Reads the text buffers of the first sections of partition task 0's spill (the BATCH_ROWS-row batches
`spill.section_blob` compresses one by one), then compresses and decompresses each buffer with each
codec (`pa.Codec`, on this thread) and prints MB/s of CPU time both ways and the ratio. Best of
`--repeat` for compression. A kept run: `bench/run.py --keep --repeat 1`, or any run dir whose
partition stage finished.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from shard_pipeline.run.rundir import RunDir  # noqa: E402
from shard_pipeline.stages.spill import read_arrow  # noqa: E402

CODECS = (("lz4", None), ("lz4_raw", None), ("snappy", None), ("zstd", 1), ("zstd", -1), ("zstd", -3), ("zstd", -5))


def text_buffers(run: RunDir, sections: int) -> list[pa.Buffer]:
    """The text column's data buffer of every batch in the first `sections` sections of task 0's spill."""
    index = read_arrow(run.spill_index(0)).to_pylist()[:sections]
    data = run.spill_file(0).read_bytes()
    out = []
    for s in index:
        reader = ipc.open_file(pa.py_buffer(data[s["offset"]:s["offset"] + s["length"]]))
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            out.append(batch.column(batch.schema.get_field_index("text")).buffers()[2])
    return out


def measure(codec: pa.Codec, buffers: list[pa.Buffer], repeat: int) -> tuple[float, float, float]:
    """(compress MB/s, decompress MB/s, ratio), by this process's CPU time."""
    total = sum(b.size for b in buffers)
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        packed = [codec.compress(b) for b in buffers]
        best = min(best, time.process_time() - started)
    started = time.process_time()
    for b, p in zip(buffers, packed):
        codec.decompress(p, decompressed_size=b.size)
    back = time.process_time() - started
    return total / best / 1e6, total / back / 1e6, total / sum(p.size for p in packed)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rundir", type=Path)
    ap.add_argument("--sections", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    buffers = text_buffers(RunDir(a.rundir), a.sections)
    print(f"{sum(b.size for b in buffers) / 1e6:.1f} MB of text in {len(buffers)} buffers")
    for name, level in CODECS:
        codec = pa.Codec(name) if level is None else pa.Codec(name, compression_level=level)
        up, down, ratio = measure(codec, buffers, a.repeat)
        print(f"{name:<8}{'' if level is None else level:>4}  compress {up:6.0f} MB/s  decompress {down:6.0f} MB/s  "
              f"ratio {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
