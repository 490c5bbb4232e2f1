"""What an interrupted run still has to do, from the run directory alone: a task the done rule says is not done,
and every task after it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from shard_pipeline.errors import UserError
from shard_pipeline.input.corpus import why_changed
from shard_pipeline.run import live
from shard_pipeline.run.registry import STAGES, RunState
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.units import plural
from shard_pipeline.run.rundir import RunDir


class ResumeRefused(UserError):
    """The run cannot be resumed as it is (jobs still queued, inputs changed, ...)."""


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
    """Input shards whose size or mtime differ from shard_inventory.tsv (local inputs only), with how."""
    whys = ((ref.location, why_changed(ref.location, ref.size, ref.mtime)) for ref in cfg.content.inputs)
    return [f"{location} ({why})" for location, why in whys if why]


def plan_resume(run: RunDir) -> ResumePlan:
    """Per stage, the tasks that are not done, and every task after the first stage that has one."""
    state = RunState(run)
    rp = ResumePlan()
    if state.finished:
        rp.done = True
        return rp
    upstream = None  # the last stage with work left: every task after it is redone
    for stage in STAGES:
        for t in range(stage.tasks(state.cfg)):
            why = f"{upstream} redone" if upstream else stage.problem(state, t)
            if why:
                rp.add(stage.name, t, why)
        if rp.tasks.get(stage.name):
            upstream = stage.name
    return rp


def describe(rp: ResumePlan) -> str:
    lines = []
    for stage in (s.name for s in STAGES):
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


def refuse_live_tasks(*roots, local: bool, squeue_answered: bool, done: bool = False) -> None:
    """A resume never starts while a task of the run still runs: two writers of the same files would corrupt them.
    `local`: a record of another host is a task of another login node; else a Slurm task, stale once squeue
    answered (`squeue_answered`). A `done` run starts nothing, so a task elsewhere is no refusal."""
    scans = [live.scan(r) for r in roots]
    busy = [t for s in scans for t in s.alive()]
    hidden = [h for s in scans for h in s.hidden]
    away = [x for s in scans for x in s.elsewhere()] if local and not done else []
    if away and not busy:
        raise ResumeRefused(live.elsewhere_step(away))
    if hidden and not busy:
        raise ResumeRefused(f"{len(hidden)} task record(s) of this run cannot be read ("
                            + "; ".join(f"{h.path}: {h.why}" for h in hidden[:5]) + ("; ..." if len(hidden) > 5 else "")
                            + "): a task another user started may still run, and a second writer would corrupt its "
                            "files. Ask that user (ls -l names them); once no such task runs, remove those records, "
                            "then resume again")
    if busy:
        raise ResumeRefused(f"{plural(len(busy), 'task')} of this run {'is' if len(busy) == 1 else 'are'} still running: "
                            + "; ".join(t.describe() for t in busy[:10])
                            + ("; ..." if len(busy) > 10 else "")
                            + ". Wait for them to end or stop them, then resume again")
    for r in roots:
        live.prune(r, elsewhere=not local and squeue_answered)
