#!/usr/bin/env python3
"""Projected wall time of HPLT v4 English under LUMI's job cap for several --cpus-per-task C.

The table in docs/DESIGN.md ("Cores per array task") is this script's output. It uses the job
layout the submitter would queue (layout.lay_out_jobs, 200 array tasks: MAX_TASKS of the lumi
preset under SUBMIT_LIMIT=220) and the per-core rates of submit/projection.py.

    .venv/bin/python bench/project_cpus.py [--mem 4G] [--lustre-gbs 50]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shard_pipeline.submit.layout import lay_out_jobs  # noqa: E402
from shard_pipeline.submit.projection import LOADED_SLOWDOWN, hms, project, total_seconds  # noqa: E402

V4_ENGLISH = [16_382_767_553] * 1108  # 18.15 TB in 1,108 shards, 7.86 B documents


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mem", default="4G", help="WORKER_MEM per unit (lumi preset: 4G)")
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--lustre-gbs", type=float, default=50.0, help="scratch throughput for the Lustre-bound column")
    ap.add_argument("--cpus", default="1,8,16,32")
    a = ap.parse_args()
    lustre = a.lustre_gbs * 1e9
    print(f"| C | array tasks (partition + write + 2) | units P / W | partition | plan | write | finalize | "
          f"whole run, compute-bound | Lustre needed: partition / write | whole run at {a.lustre_gbs:g} GB/s | "
          f"at the loaded rates (x{LOADED_SLOWDOWN}) | memory per array task: partition / write |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for c in (int(x) for x in a.cpus.split(",")):
        lay = lay_out_jobs(V4_ENGLISH, {}, shard_rows=1_000_000, task_budget=a.budget, worker_mem=a.mem, cpus=c)
        st = {s.stage: s for s in project(lay)}
        loaded = sum(s.seconds * (LOADED_SLOWDOWN if s.stage in ("partition", "write") else 1) for s in st.values())
        print(f"| {c} | {lay.partition_groups} + {lay.write_groups} + 2 = {lay.partition_groups + lay.write_groups + 2} "
              f"| {lay.partition_tasks:,} / {lay.write_tasks:,} | {hms(st['partition'].seconds)} | {hms(st['plan'].seconds)} "
              f"| {hms(st['write'].seconds)} | {hms(st['finalize'].seconds)} | **{hms(total_seconds(list(st.values())))}** "
              f"| {st['partition'].lustre_bytes_s / 1e9:.0f} / {st['write'].lustre_bytes_s / 1e9:.0f} GB/s "
              f"| {hms(total_seconds(list(st.values()), lustre))} | {hms(loaded)} "
              f"| {lay.resources['partition'].mem} / {lay.resources['write'].mem} |")
    lay = lay_out_jobs(V4_ENGLISH, {}, shard_rows=1_000_000, task_budget=a.budget, worker_mem=a.mem)
    st = project(lay)
    print("\nbytes moved (any C): " + "; ".join(f"{s.stage} reads {s.read_bytes / 1e12:.2f} TB, writes "
                                             f"{s.write_bytes / 1e12:.2f} TB" for s in st))


if __name__ == "__main__":
    main()
