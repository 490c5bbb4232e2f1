#!/usr/bin/env python3
"""The partition stage over many small input files: its cost per input must not grow with the inputs.

    .venv/bin/python bench/partition_many_inputs.py --files 20000 --dir /tmp/many-inputs

Makes FILES one-document v4 shards (cached in DIR/corpus-FILES), creates a run of one partition
task over all of them with the project's own submitter (`scope.prepare` + `create.create_run`,
nothing is started), then times `run_partition` in this process, and with --repeat the same task again
(a partition task is idempotent: it rewrites its own spill). A checkpoint that rewrites every
receipt so far made this quadratic (issue #19, item 11): time per input then grows with the count.
Prints the wall time, the time per input, and the per-input time of the first and last tenth.
"""
from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import orjson  # noqa: E402

from shard_pipeline.input.synth import make_record, write_jsonl_zst  # noqa: E402
from shard_pipeline.run.rundir import RunDir  # noqa: E402
from shard_pipeline.submit import create, scope  # noqa: E402
from shard_pipeline.submit.args import build_parser  # noqa: E402

LANG = "eng_Latn"


def make_corpus(root: Path, files: int) -> Path:
    """FILES shards `9_<n>.cc.jsonl.zst`, one small document each (kept between runs)."""
    lang = root / "clean" / LANG
    if (root / ".complete").exists():
        return root / "clean"
    shutil.rmtree(root, ignore_errors=True)
    lang.mkdir(parents=True)
    rng = random.Random(1)
    for n in range(1, files + 1):
        rec = make_record(n, rng, corpus="v4", text_bytes=200)
        write_jsonl_zst(lang / f"9_{n}.cc.jsonl.zst", [orjson.dumps(rec)])
    (root / ".complete").touch()
    return root / "clean"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/many-inputs"))
    ap.add_argument("--repeat", type=int, default=1, help="time the same task this many times")
    a = ap.parse_args()
    clean = make_corpus(a.dir / f"corpus-{a.files}", a.files)
    work = a.dir / f"run-{a.files}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    argv = [LANG, "--corpus", "v4", "--local-root", str(clean), "--out", str(work / "out"),
            "--run-dir", str(work / "run"), "--executor", "local", "--license", "CC0-1.0",
            "--partition-tasks", "1", "--counts-index", str(work / "counts"), "--jobs", "1"]
    args = build_parser().parse_args(argv)
    settings = scope.resolve_settings(args)
    t = time.perf_counter()
    sc = scope.prepare(args, settings, "local", scope.local_budget(args.jobs, settings.cpus_per_task))
    create.create_run(args, argv, settings, "local", sc, (work / "out").resolve(), RunDir((work / "run").resolve()))
    print(f"submitter (list, sample heads, run dir): {time.perf_counter() - t:.1f} s")

    from shard_pipeline.stages import partition
    from shard_pipeline.run.tasklog import log

    stamps: list[float] = []

    class Stamp(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stamps.append(time.perf_counter())

    log.addHandler(Stamp())
    log.setLevel(logging.INFO)
    log.propagate = False
    run = RunDir((work / "run").resolve())
    for attempt in range(1, a.repeat + 1):
        stamps.clear()
        t = time.perf_counter()
        receipt = partition.run_partition(run, 0)
        wall = time.perf_counter() - t
        assert len(receipt.inputs) == a.files and receipt.rows == a.files, (len(receipt.inputs), receipt.rows)
        tenth = max(1, len(stamps) // 10)
        first = (stamps[tenth - 1] - t) / tenth if stamps else float("nan")
        last = (stamps[-1] - stamps[-tenth - 1]) / tenth if len(stamps) > tenth else float("nan")
        print(f"partition, 1 task, {a.files} inputs (run {attempt}): {wall:.1f} s, {wall / a.files * 1e3:.2f} ms per input;"
              f" first tenth {first * 1e3:.2f} ms/input, last tenth {last * 1e3:.2f} ms/input; spill sha256 "
              f"{receipt.spill_sha256[:16]}")


if __name__ == "__main__":
    main()
