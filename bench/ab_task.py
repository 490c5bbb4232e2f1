#!/usr/bin/env python3
"""A/B one task of a kept run: the working tree against a git revision, interleaved.

    .venv/bin/python bench/ab_task.py RUNDIR partition --task 0 --base b4859f0 [--repeat 3]

Exports `--base` with `git archive` into a temporary directory and runs
`stages/<stage>.py RUNDIR --task N` from each tree in turn (base, head, base, head, ...) with
the same Python, each in a fresh process. Prints per run wall, CPU and max RSS (`wait4`) and
peak RssAnon (sampled), then the medians and head/base ratios, and what each run wrote (the
partition receipt's spill sha256, or the write receipt's shard sha256s): equal digests mean
the change is byte-neutral for that task. A partition or write task rewrites its own files, so
the run directory stays usable (bench/run.py --keep --repeat 1 makes one).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from run import TreeSampler  # noqa: E402


def export(rev: str, dest: Path) -> Path:
    """The tree of `rev` (committed files only) under `dest`."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def output_digest(rundir: Path, stage: str, task: int) -> str:
    """What the task wrote, as digests read from its receipt."""
    if stage == "partition":
        return json.loads((rundir / "partition" / f"task-{task:05d}.receipt.json").read_text())["spill_sha256"][:16]
    shards = json.loads((rundir / "write" / f"task-{task:05d}.receipt.json").read_text())["shards"]
    return ",".join(s["sha256"][:12] for s in shards)


def run_once(tree: Path, rundir: Path, stage: str, task: int) -> dict:
    t0 = time.perf_counter()
    with TreeSampler() as ts:
        p = subprocess.Popen([sys.executable, str(tree / "stages" / f"{stage}.py"), str(rundir), "--task", str(task)],
                             stdout=subprocess.DEVNULL)
        ts.roots.add(p.pid)
        _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{tree}: {stage} task {task} failed")
    return {"wall_s": time.perf_counter() - t0, "cpu_s": ru.ru_utime + ru.ru_stime, "max_rss_mib": ru.ru_maxrss / 1024,
            "anon_mib": ts.task_anon.get(p.pid, 0) / 2**20, "digest": output_digest(rundir, stage, task)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rundir", type=Path)
    ap.add_argument("stage", choices=("partition", "write"))
    ap.add_argument("--task", type=int, default=0)
    ap.add_argument("--base", required=True, help="git revision to compare the working tree with")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rundir = a.rundir.resolve()
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"base": export(a.base, Path(tmp)), "head": REPO}
        for i in range(a.repeat):
            for name, tree in trees.items():
                r = run_once(tree, rundir, a.stage, a.task)
                runs[name].append(r)
                print(f"[{i}] {name}: wall {r['wall_s']:.2f} s  cpu {r['cpu_s']:.2f} s  max RSS {r['max_rss_mib']:.0f} MiB"
                      f"  anon {r['anon_mib']:.0f} MiB  wrote {r['digest']}", flush=True)
    med = {n: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "max_rss_mib", "anon_mib")}
           for n, rs in runs.items()}
    for k in ("wall_s", "cpu_s", "max_rss_mib", "anon_mib"):
        print(f"median {k:12} base {med['base'][k]:8.2f}  head {med['head'][k]:8.2f}  head/base {med['head'][k] / med['base'][k]:.3f}")
    same = len({r["digest"] for rs in runs.values() for r in rs}) == 1
    print(f"outputs identical: {same}; load average {os.getloadavg()[0]:.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
