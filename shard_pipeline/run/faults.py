"""Fault injection for the fault tests (CONTRIBUTING.md): HPLT_SHARD_FAULT=<point>[:<task>][:<action>][:<lang>].
Unset, `fault_point` costs one dict lookup. `oom` takes memory until a memory limit kills the task.
"""
from __future__ import annotations

import errno
import os
import signal
import time

from shard_pipeline import slurm


def fault_point(point: str, task: int | None = None) -> None:
    spec = os.environ.get("HPLT_SHARD_FAULT")
    if not spec:
        return
    parts = spec.split(":")
    name, want_task, action = parts[0], (parts[1] if len(parts) > 1 else ""), (parts[2] if len(parts) > 2 else "kill")
    if name != point or (want_task and task is not None and int(want_task) != task):
        return
    if len(parts) > 3 and parts[3] != os.environ.get("HPLT_SHARD_LANG"):
        return
    if action == "hang-once" and slurm.restart_count() != 0:
        return
    print(f"hplt-shard: fault injected at {point} (task {task}): {action}", flush=True)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action in ("hang", "hang-once"):
        while True:
            time.sleep(1)
    elif action == "oom":
        held = []
        while True:  # touched pages, 64 MiB at a time: a cgroup's limit kills the task, as for a real need
            held.append(bytearray(64 << 20))
    elif action == "enospc":
        raise OSError(errno.ENOSPC, "No space left on device (injected)")
