"""Local executor: the stages in order, each stage's tasks in a bounded process pool, blocking."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from shard_pipeline.run.claim import release
from shard_pipeline.run.registry import STAGES
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import RunDir, read_json, write_json_atomic
from shard_pipeline.run.tasklog import last_error_line
from shard_pipeline.submit.executors import task_argv, task_env


class StageFailed(Exception):
    """One or more tasks of a stage exited non-zero; the message names each log and its last error."""


@dataclass(frozen=True)
class TaskResult:
    stage: str
    task: int
    returncode: int
    log: Path


def run_task(python: str, stage: str, rundir: Path, task: int) -> TaskResult:
    log = RunDir(rundir).local_log(stage, task)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as f:
        rc = subprocess.run(task_argv(python, stage, rundir, task), stdout=f, stderr=subprocess.STDOUT,
                            env=task_env()).returncode
    return TaskResult(stage, task, rc, log)


def run_stage(python: str, stage: str, rundir: Path, tasks: Sequence[int], jobs: int,
              progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)) -> None:
    done = 0
    failed: list[TaskResult] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for r in pool.map(lambda t: run_task(python, stage, rundir, t), tasks):
            done += 1
            if r.returncode != 0:
                failed.append(r)
            progress(f"{stage:<9} {done}/{len(tasks)} tasks" + (f", {len(failed)} failed" if failed else ""))
    if failed:
        lines = [f"  task {r.task}: {last_error_line(r.log)}  (log: {r.log})" for r in failed]
        raise StageFailed(f"{stage}: {len(failed)} of {len(tasks)} tasks failed\n" + "\n".join(lines))


def run_all(python: str, rundir: Path, layout: dict[str, Sequence[int]], jobs: int) -> None:
    """Run the stages in order; a failed stage stops the chain (like afterok)."""
    for stage in STAGES:
        if layout.get(stage.name):  # a resume runs only what is unfinished
            run_stage(python, stage.name, rundir, layout[stage.name], jobs)


def run_local(run: RunDir, cfg: RunConfig, tasks: dict[str, list[int]], jobs: int, out: Path) -> int:
    record = read_json(run.run_json)
    record["submissions"].append({"kind": "local", "submitted_at": time.time(), "tasks": tasks, "jobs": []})
    write_json_atomic(run.run_json, record)
    try:
        run_all(sys.executable, run.root, tasks, jobs)
    except StageFailed as exc:
        release(out, run.root)
        print(f"hplt-shard: {exc}", file=sys.stderr)
        print(f"hplt-shard: run directory {run.root}; the previous {out} is untouched", file=sys.stderr)
        return 1
    manifest = json.loads((out / "_MANIFEST.json").read_text())
    print(f"done: {manifest['rows']:,} documents in {len(manifest['shards'])} shards "
          f"(train {manifest['splits']['train']:,}, val {manifest['splits']['val']:,})")
    print(f"output:  {out}  (manifest {out / '_MANIFEST.json'})")
    print(f"run dir: {run.root}  (validation.json, logs/)")
    return 0
