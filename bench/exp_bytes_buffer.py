#!/usr/bin/env python3
"""Experiment behind bench/RESULTS.md section 6.1: partition with the text buffered as UTF-8 bytes.

    .venv/bin/python bench/exp_bytes_buffer.py CORPUS_ROOT [--mem 1G] [--workdir bench/work]

Prepares one run (the CLI's own submitter, local executor layout) and runs partition task 0
twice in fresh processes: stock, and with `read_into` rebuilt from its own source with the one
line `texts.append(rec.text)` -> `texts.append(raw)`. Prints wall, CPU, max RSS (wait4), peak
RssAnon and the spill file's sha256 (equal when the change is byte-neutral). Edits no file.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

PATCHED_STAGE = r"""
import inspect, runpy, sys, textwrap
sys.path.insert(0, REPO); sys.path.insert(0, REPO + "/stages")
import shard_pipeline.partition as P
src = textwrap.dedent(inspect.getsource(P.read_into))
assert src.count("texts.append(rec.text)") == 1, "read_into changed: update the experiment"
ns = dict(vars(P))
exec(compile(src.replace("texts.append(rec.text)", "texts.append(raw)"), "<read_into bytes>", "exec"), ns)
P.read_into = ns["read_into"]
sys.argv = [REPO + "/stages/partition.py", *sys.argv[1:]]
runpy.run_path(REPO + "/stages/partition.py", run_name="__main__")
"""


def main() -> int:
    import run as B

    ap = argparse.ArgumentParser()
    ap.add_argument("corpus_root", type=Path)
    ap.add_argument("--mem", default="1G")
    ap.add_argument("--workdir", type=Path, default=HERE / "work")
    a = ap.parse_args()
    work = a.workdir.resolve()
    for mode in ("stock", "bytes"):
        out, rd = work / f"exp-out-{mode}", work / f"exp-run-{mode}"
        for d in (out, rd):
            shutil.rmtree(d, ignore_errors=True)
        B._prepare_run(["eng_Latn", "--corpus", "v4", "--local-root", str(a.corpus_root.resolve()), "--out", str(out),
                        "--run-dir", str(rd), "--executor", "local", "--license", "CC0-1.0", "--shard-rows", "100000",
                        "--mem", a.mem, "--counts-index", str(work / "counts-index")])
        argv = ([sys.executable, str(REPO / "stages" / "partition.py")] if mode == "stock"
                else [sys.executable, "-c", f"REPO = {str(REPO)!r}\n" + PATCHED_STAGE])
        t0 = time.perf_counter()
        with B.TreeSampler() as ts:
            p = subprocess.Popen([*argv, str(rd), "--task", "0"], stdout=subprocess.DEVNULL)
            ts.roots.add(p.pid)
            _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        rec = json.loads((rd / "partition" / "task-00000.receipt.json").read_text())
        print(f"{mode:5}: exit {os.waitstatus_to_exitcode(status)} wall {wall:.1f} s  cpu {ru.ru_utime + ru.ru_stime:.1f} s  "
              f"max RSS {ru.ru_maxrss / 1024:.0f} MiB  peak RssAnon {ts.task_anon.get(p.pid, 0) / 2**20:.0f} MiB  "
              f"rows {rec['rows']}  runs {rec['runs']}  spill sha256 {rec['spill_sha256'][:16]}", flush=True)
        shutil.rmtree(rd, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        for f in (Path(str(out) + ".hplt-shard-claim"), Path(str(out) + ".hplt-shard-claim.lock")):
            f.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
