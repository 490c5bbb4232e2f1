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

from shard_pipeline.run import group
from shard_pipeline.run.claim import release
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import RunDir, read_json, write_json_atomic
from shard_pipeline.submit.executors import task_argv


class StageFailed(Exception):
    """One or more tasks of a stage exited non-zero; the message names each log and its last error."""


@dataclass(frozen=True)
class TaskResult:
    stage: str
    task: int
    returncode: int
    log: Path


def last_error_line(log: Path) -> str:
    try:
        lines = [l for l in log.read_text(errors="replace").splitlines() if l.strip()]
    except FileNotFoundError:
        return "(no log)"
    errors = [l for l in lines if l.startswith("ERROR") or "Error" in l]
    return (errors or lines or ["(empty log)"])[-1]


def run_task(python: str, stage: str, rundir: Path, task: int) -> TaskResult:
    log = rundir / "logs" / stage / f"local_{task}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as f:
        rc = subprocess.run(task_argv(python, stage, rundir, task), stdout=f, stderr=subprocess.STDOUT).returncode
    return TaskResult(stage, task, rc, log)


def run_group(python: str, stage: str, rundir: Path, index: int, units: Sequence[int]) -> list[TaskResult]:
    """One group of units at once, as an array task with C cores runs them (run/group.py)."""
    runs = group.run_units(lambda u: task_argv(python, stage, rundir, u), units,
                           lambda u: rundir / "logs" / stage / f"local_{u}.log", f"{stage} group {index}", append=False)
    return [TaskResult(stage, r.unit, r.returncode, r.log) for r in runs]


def run_stage(python: str, stage: str, rundir: Path, tasks: Sequence[int], jobs: int,
              progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
              cpus: int = 1) -> None:
    """The stage's tasks, `jobs` cores at a time: one process per task, or groups of `cpus` tasks."""
    done = 0
    failed: list[TaskResult] = []
    if cpus > 1:  # jobs // cpus groups at once, each running its units in parallel
        groups = [(g, [t for t in tasks if t // cpus == g]) for g in group.groups_of(tasks, cpus)]
        work, workers = (lambda gu: run_group(python, stage, rundir, *gu)), max(1, jobs // cpus)
    else:
        groups = [(t, [t]) for t in tasks]
        work, workers = (lambda gu: [run_task(python, stage, rundir, gu[0])]), max(1, jobs)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for rs in pool.map(work, groups):
            for r in rs:
                done += 1
                if r.returncode != 0:
                    failed.append(r)
            progress(f"{stage:<9} {done}/{len(tasks)} tasks" + (f", {len(failed)} failed" if failed else ""))
    if failed:
        lines = [f"  task {r.task}: {last_error_line(r.log)}  (log: {r.log})" for r in failed]
        raise StageFailed(f"{stage}: {len(failed)} of {len(tasks)} tasks failed\n" + "\n".join(lines))


def run_all(python: str, rundir: Path, layout: dict[str, Sequence[int]], jobs: int,
            cpus: dict[str, int] | None = None) -> None:
    """Run partition -> plan -> write -> finalize; a failed stage stops the chain (like afterok)."""
    for stage in ("partition", "plan", "write", "finalize"):
        if layout.get(stage):  # a resume runs only what is unfinished
            run_stage(python, stage, rundir, layout[stage], jobs, cpus=group.group_size(cpus or {}, stage))


def run_local(run: RunDir, cfg: RunConfig, tasks: dict[str, list[int]], jobs: int, out: Path) -> int:

    from shard_pipeline.submit.executors.local import StageFailed, run_all

    record = read_json(run.run_json)
    record["submissions"].append({"kind": "local", "submitted_at": time.time(), "tasks": tasks, "jobs": []})
    write_json_atomic(run.run_json, record)
    try:
        run_all(sys.executable, run.root, tasks, jobs, cfg.execution.cpus)
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
