#!/usr/bin/env python3
"""What `--status` costs per finished file: the done check with an unchanged ctime (a stat) against
a touched file's check at `--resume` (its ctime changed, e.g. a chmod: sha256 of its bytes).

    .venv/bin/python bench/status_check.py --files 20 --mb 50 --dir /tmp/status-bench

The files are written once and read from the page cache: the hash side is its best case; on
Lustre, reading the bytes back dominates (bench/RESULTS.md 9).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from shard_pipeline.files import file_sha256  # noqa: E402
from shard_pipeline.run.registry import file_matches  # noqa: E402
from shard_pipeline.run.receipts import file_stamp  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/status-bench"))
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(a.files):
        p = a.dir / f"shard-{i:05d}.parquet"
        if not p.exists() or p.stat().st_size != a.mb << 20:
            p.write_bytes(os.urandom(a.mb << 20))
        files.append((p, file_stamp(p), file_sha256(p)))  # also warms the page cache
    for label, stamp_of, rehash in (("recorded ctime, --status (stat only)", lambda s: s, False),
                                    ("recorded ctime, --resume (untouched: stat only)", lambda s: s, True),
                                    ("touched (ctime changed), --resume (sha256)",
                                     lambda s: replace(s, ctime_ns=s.ctime_ns - 1), True)):
        t = time.perf_counter()
        bad = [p for p, s, h in files if file_matches(p, stamp_of(s), h, rehash) is not None]
        dt = time.perf_counter() - t
        assert not bad, bad
        print(f"{label:<50} {a.files} files x {a.mb} MB: {dt * 1e3:9.2f} ms  ({dt / a.files * 1e6:9.1f} us per file)")


if __name__ == "__main__":
    main()
