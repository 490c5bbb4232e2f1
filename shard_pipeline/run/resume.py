"""What an interrupted run still has to do, decided from the run directory alone.

A task is finished only when its receipt parses and agrees with the files it names: sizes and
mtimes always, sha256 for files up to HASH_MAX_BYTES (bigger ones are re-hashed by finalize
before anything reaches OUT; a mismatch there drops the writer's receipt so the next
--resume redoes it). Everything downstream of a redone task is redone too.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shard_pipeline.contract.shard import file_sha256
from shard_pipeline.errors import UserError
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import RunDir, read_json

HASH_MAX_BYTES = 1 << 30


class ResumeRefused(UserError):
    """The run cannot be resumed as it is (jobs still queued, inputs changed, ...)."""


def file_matches(path: Path, stamp: dict[str, Any], sha256: str | None) -> str | None:
    """None when `path` is what its receipt recorded, else why not."""
    if not path.is_file():
        return f"{path.name} missing"
    st = path.stat()
    if st.st_size != stamp.get("bytes"):
        return f"{path.name} has {st.st_size} bytes, its receipt {stamp.get('bytes')}"
    if "mtime_ns" in stamp and st.st_mtime_ns != stamp["mtime_ns"]:
        return f"{path.name} was modified after its receipt was written"
    if sha256 and st.st_size <= HASH_MAX_BYTES and file_sha256(path) != sha256:
        return f"{path.name} sha256 differs from its receipt"
    return None


def _receipt(path: Path) -> dict[str, Any] | None:
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def partition_problem(run: RunDir, task: int) -> str | None:
    rc = _receipt(run.partition_receipt(task))
    if rc is None:
        return "no receipt" if not run.partition_receipt(task).exists() else "receipt unreadable"
    if not run.spill_index(task).is_file():
        return "index missing"
    return file_matches(run.spill_file(task), rc.get("spill_stamp", {}), rc.get("spill_sha256"))


def write_problem(run: RunDir, task: int, tmp_dir: Path) -> str | None:
    rc = _receipt(run.write_receipt(task))
    if rc is None:
        return "no receipt" if not run.write_receipt(task).exists() else "receipt unreadable"
    for s in rc["shards"]:
        why = file_matches(tmp_dir / s["name"], s.get("stamp", {"bytes": s["bytes"]}), s["sha256"])
        if why:
            return why
    return None


@dataclass
class ResumePlan:
    """Tasks to run again, per stage, and why."""

    tasks: dict[str, list[int]] = field(default_factory=dict)
    reasons: dict[str, dict[int, str]] = field(default_factory=dict)
    done: bool = False

    def add(self, stage: str, task: int, why: str) -> None:
        self.tasks.setdefault(stage, []).append(task)
        self.reasons.setdefault(stage, {})[task] = why

    def empty(self) -> bool:
        return not any(self.tasks.values())


def changed_inputs(run: RunDir, cfg: RunConfig) -> list[str]:
    """Input shards whose size or mtime differ from shard_inventory.tsv (local inputs only)."""
    changed = []
    for ref in cfg.content.inputs:
        if ref.size is None or ref.mtime is None:
            continue
        try:
            st = os.stat(ref.location)
        except OSError:
            changed.append(f"{ref.location} (missing)")
            continue
        if st.st_size != ref.size or int(st.st_mtime) != ref.mtime:
            changed.append(f"{ref.location} (size {ref.size} -> {st.st_size}, mtime {ref.mtime} -> {int(st.st_mtime)})")
    return changed


def plan_resume(run: RunDir) -> ResumePlan:
    cfg = RunConfig.from_json(read_json(run.config_json))
    ex = cfg.execution
    rp = ResumePlan()
    if run.done_marker.exists():
        rp.done = True
        return rp
    for t in range(ex.partition_tasks):
        why = partition_problem(run, t)
        if why:
            rp.add("partition", t, why)
    plan_ok = not rp.tasks.get("partition") and _receipt(run.plan_json) is not None and run.sections.is_file()
    if not plan_ok:
        rp.add("plan", 0, "partition redone" if rp.tasks.get("partition") else "no plan")
        for t in range(ex.write_tasks):
            rp.add("write", t, "plan redone")
    elif _swapped(run, cfg):
        pass  # finalize was stopped after the exchange: only its last steps remain
    else:
        tmp = Path(read_json(run.plan_json)["tmp_dir"])
        for t in range(ex.write_tasks):
            why = write_problem(run, t, tmp)
            if why:
                rp.add("write", t, why)
    rp.add("finalize", 0, "not done")
    return rp


def _swapped(run: RunDir, cfg: RunConfig) -> bool:
    from shard_pipeline.stages.finalize import already_swapped

    plan = read_json(run.plan_json)
    return already_swapped(run, cfg, plan, Path(cfg.execution.out)) is not None


def describe(rp: ResumePlan) -> str:
    lines = []
    for stage in ("partition", "plan", "write", "finalize"):
        tasks = rp.tasks.get(stage, [])
        if not tasks:
            lines.append(f"  {stage:<9} all done")
            continue
        sample = ", ".join(f"{t}: {rp.reasons[stage][t]}" for t in tasks[:5])
        more = f" (+{len(tasks) - 5} more)" if len(tasks) > 5 else ""
        lines.append(f"  {stage:<9} redo {len(tasks)}  [{sample}{more}]")
    return "\n".join(lines)


def run_job_ids(run: RunDir) -> list[str]:
    """Every Slurm job id this run submitted (array ids)."""
    try:
        record = json.loads(run.run_json.read_text())
    except (OSError, ValueError):
        return []
    return [j["job_id"] for s in record.get("submissions", []) for j in s.get("jobs", [])]
