#!/usr/bin/env python3
"""Profile one task of a stage of a kept run directory (bench/run.py --keep --repeat 1).

    .venv/bin/python bench/profile_stage.py RUNDIR partition [--task 0] [--top 25] [--py-spy]

Reruns `stages/<stage>.py RUNDIR --task N` (a partition or write task is idempotent: it rewrites
its own spill file / shard files) under cProfile and prints the top functions by own time; with
--py-spy it also samples the task with py-spy (native frames included) and prints the leaf
functions where the samples landed.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import runpy
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rundir", type=Path)
    ap.add_argument("stage", choices=("partition", "plan", "write", "finalize"))
    ap.add_argument("--task", type=int, default=0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--py-spy", action="store_true")
    a = ap.parse_args()
    script = REPO / "stages" / f"{a.stage}.py"
    argv = [str(script), str(a.rundir), "--task", str(a.task)]
    if a.stage in ("plan", "finalize"):
        argv = argv[:2]
    sys.path.insert(0, str(REPO / "stages"))
    sys.argv = argv
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit:
        pass
    prof.disable()
    wall = time.perf_counter() - t0
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s)
    print(f"== cProfile {a.stage} task {a.task}: {wall:.2f} s under the profiler ==")
    st.sort_stats("tottime").print_stats(a.top)
    print("\n".join(l for l in s.getvalue().splitlines() if l.strip())[:12000])
    if a.py_spy:
        out = Path(f"/tmp/pyspy-{a.stage}-{a.task}.txt")
        cmd = [str(REPO / ".venv" / "bin" / "py-spy"), "record", "--native", "--format", "raw", "--rate", "200",
               "-o", str(out), "--", sys.executable, *argv]
        subprocess.run(cmd, check=True, capture_output=True)
        leaf: collections.Counter = collections.Counter()
        total = 0
        for line in out.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            n = int(n)
            total += n
            frames = stack.split(";")
            # first Python-level frame from the leaf, plus the native leaf
            py = next((f for f in reversed(frames) if ".py" in f), frames[-1])
            leaf[(py.split(" (")[0] + " @ " + py.split("/")[-1].rstrip(")"), frames[-1].split(" (")[0])] += n
        print(f"\n== py-spy {a.stage} task {a.task}: {total} samples; top leaf (python frame | native leaf) ==")
        for (py, nat), n in leaf.most_common(a.top):
            print(f"{100 * n / total:6.1f}%  {py:<70} | {nat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
