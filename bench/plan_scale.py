#!/usr/bin/env python3
"""The plan job at HPLT scale: tens of millions of spill sections, measured without the data.

The plan reads only the partition tasks' indexes and receipts (never an id or a text in the
row-cut layouts), so its cost at HPLT v4 English can be measured on a synthetic run directory
whose indexes have the section counts of a real run (docs/DESIGN.md, "Sections"): P tasks x R
runs x B buckets. This builds one, runs `stages/plan.py` on it as its own process and reports
wall time, CPU and max RSS (`os.wait4`).

    .venv/bin/python bench/plan_scale.py --tasks 99 --runs 139 --buckets 1965 --workdir bench/work/plan
    .venv/bin/python bench/plan_scale.py ... --split-layout dirs   # a bucket plan per split instead of one
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from shard_pipeline.run.runconfig import Content, Execution, InputRef, RunConfig  # noqa: E402
from shard_pipeline.run.registry import STAGE_NAMES  # noqa: E402
from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.stages.spill import INDEX_SCHEMA, write_arrow  # noqa: E402

DOCS = 7_860_000_000  # HPLT v4 English
TEXT_PER_DOC = 3_500


def synthetic_index(task: int, runs: int, buckets: int, rows_per_section: int, rng: np.random.Generator) -> pa.Table:
    """R sorted runs, each cut into B bucket sections, with plausible sizes (rows vary +-50%)."""
    n = runs * buckets
    rows = rng.integers(rows_per_section // 2, rows_per_section * 3 // 2 + 1, n, dtype=np.int64)
    text = rows * TEXT_PER_DOC
    val = rows // 200  # 5 permille
    length = rows * 1_800
    offset = np.concatenate(([0], np.cumsum(length)[:-1]))
    cols = {
        "task": np.full(n, task, np.int32),
        "run": np.repeat(np.arange(runs, dtype=np.int32), buckets),
        "bucket": np.tile(np.arange(buckets, dtype=np.int32), runs),
        "offset": offset, "length": length, "rows": rows, "text_bytes": text,
        "val_rows": val, "val_text_bytes": val * TEXT_PER_DOC,
    }
    return pa.Table.from_pydict(cols, schema=INDEX_SCHEMA)


def build_run(root: Path, tasks: int, runs: int, buckets: int, split_layout: str, write_tasks: int) -> int:
    """A run directory whose plan stage has everything it reads; returns the total rows."""
    if root.exists():
        shutil.rmtree(root)
    run = RunDir(root)
    run.create(STAGE_NAMES)
    inputs = tuple(InputRef(f"{t}_1.jsonl.zst", f"/scratch/hplt/{t}_1.jsonl.zst", 16 << 30, 0, f"{t}_1")
                   for t in range(tasks))
    rows_per_section = max(2, DOCS // (tasks * runs * buckets))
    content = Content(corpus="v4", subset="clean", lang="eng_Latn", dataset="bench", version="1",
                      license_spdx="CC0-1.0", shard_rows=1_000_000, val_permille=5, row_group_bytes=64 << 20,
                      bad_records="fail", inputs=inputs, split_layout=split_layout)
    execution = Execution(executor="local", out=str(root.parent / "out"), partition_tasks=tasks,
                          write_tasks=write_tasks, buckets=buckets, spill_bytes=2 << 30, python=sys.executable)
    write_json_atomic(run.config_json, RunConfig(content, execution).to_json())
    rng = np.random.default_rng(7)
    total = 0
    for t in range(tasks):
        index = synthetic_index(t, runs, buckets, rows_per_section, rng)
        write_arrow(run.spill_index(t), index)
        rows = int(np.sum(index.column("rows").to_numpy()))
        total += rows
        write_json_atomic(run.partition_receipt(t), {
            "task": t, "rows": rows, "pii_spans": 0,
            "inputs": [{"index": t, "source_id": inputs[t].source_id, "read": rows, "kept": rows, "quarantined": {},
                        "cleaned": 0, "clean_reasons": {}}],
        })
    return total


def measure_plan(root: Path) -> dict:
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(REPO / "stages" / "plan.py"), str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"plan failed: {err}")
    return {"wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "max_rss_mib": round(usage.ru_maxrss / 1024)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=99)
    p.add_argument("--runs", type=int, default=139, help="sorted runs per task (T/P/S)")
    p.add_argument("--buckets", type=int, default=1965)
    p.add_argument("--write-tasks", type=int, default=99)
    p.add_argument("--split-layout", choices=("column", "dirs"), default="column")
    p.add_argument("--workdir", type=Path, default=REPO / "bench" / "work" / "plan")
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    root = a.workdir / "run"
    t0 = time.monotonic()
    rows = build_run(root, a.tasks, a.runs, a.buckets, a.split_layout, a.write_tasks)
    sections = a.tasks * a.runs * a.buckets
    index_bytes = sum(RunDir(root).spill_index(t).stat().st_size for t in range(a.tasks))
    built = time.monotonic() - t0
    result = {"sections": sections, "rows": rows, "index_bytes": index_bytes, "split_layout": a.split_layout,
              "build_s": round(built, 1), **measure_plan(root),
              "sections_arrow_bytes": RunDir(root).sections.stat().st_size,
              "plan_json_bytes": RunDir(root).plan_json.stat().st_size,
              "self_max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    plan = json.loads(RunDir(root).plan_json.read_text())
    result["shards"] = plan["shards"]
    print(json.dumps(result, indent=1))
    if not a.keep:
        shutil.rmtree(a.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
