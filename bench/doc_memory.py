#!/usr/bin/env python3
"""Peak RSS of a partition and a write task against the size of the largest document.

    .venv/bin/python bench/doc_memory.py --mb 0 25 50 100 [--xml] --dir /tmp/doc-memory

For each size S, a one-shard v4 corpus of 20 small documents and one document whose text is S MB
(with --xml, its `xml` and `md` fields are S MB each too, as a real HPLT v4 record's would be).
The run's partition stage runs in the local executor (stopped at plan with HPLT_SHARD_FAULT),
then `stages/partition.py` (idempotent) and, after the plan, `stages/write.py` each run once
more under os.wait4, which gives the task's max RSS. The multiplier is (peak - peak at S=0) / S:
what `layout.DOC_MEMORY_*` takes for the largest document the head sample saw.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import orjson  # noqa: E402

from shard_pipeline.input.synth import make_record, write_jsonl_zst  # noqa: E402


def corpus(root: Path, mb: float, xml: bool) -> Path:
    rng = random.Random(1)
    recs = [make_record(i, rng, corpus="v4", text_bytes=600) for i in range(21)]
    if mb:
        n = int(mb * 1e6)
        words = "lorem ipsum dolor sit amet consectetur "
        big = (words * (n // len(words) + 1))[:n]
        recs[10]["text"] = big
        if xml:
            recs[10]["xml"], recs[10]["md"] = big, big
    write_jsonl_zst(root / "clean" / "eng_Latn" / "10_1.cc.jsonl.zst", [orjson.dumps(r) for r in recs])
    return root / "clean"


def peak_rss(argv: list[str]) -> int:
    """Max RSS in bytes of the process tree `argv` runs as (ru_maxrss of the child)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{argv} failed: {proc.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss * 1024


def measure(work: Path, mb: float, xml: bool) -> tuple[int, int]:
    shutil.rmtree(work, ignore_errors=True)
    clean = corpus(work / "corpus", mb, xml)
    run = work / "run"
    env = {**os.environ, "HPLT_SHARD_FAULT": "plan-start"}
    subprocess.run([sys.executable, str(REPO / "hplt-shard"), "eng_Latn", "--corpus", "v4", "--local-root", str(clean),
                    "--out", str(work / "out"), "--run-dir", str(run), "--executor", "local", "--license", "CC0-1.0",
                    "--jobs", "1", "--counts-index", str(work / "counts")], env=env, capture_output=True)
    part = peak_rss([sys.executable, str(REPO / "stages" / "partition.py"), str(run), "--task", "0"])
    subprocess.run([sys.executable, str(REPO / "stages" / "plan.py"), str(run)], check=True, capture_output=True)
    write = peak_rss([sys.executable, str(REPO / "stages" / "write.py"), str(run), "--task", "0"])
    return part, write


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[0, 25, 50, 100])
    ap.add_argument("--xml", action="store_true", help="the big document's xml and md are as large as its text")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/doc-memory"))
    a = ap.parse_args()
    base = None
    print(f"{'doc MB':>7} {'partition MB':>13} {'write MB':>9} {'part x':>7} {'write x':>8}")
    for mb in a.mb:
        part, write = measure(a.dir / f"s{mb:g}", mb, a.xml)
        if base is None:
            base = (part, write)
        px = (part - base[0]) / (mb * 1e6) if mb else 0
        wx = (write - base[1]) / (mb * 1e6) if mb else 0
        print(f"{mb:7g} {part / 1e6:13.0f} {write / 1e6:9.0f} {px:7.2f} {wx:8.2f}", flush=True)


if __name__ == "__main__":
    main()
