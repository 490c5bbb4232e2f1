"""Where a run stands: per stage done / running / pending / failed, failures with their logs, an ETA.

Works from the run directory alone once the jobs have left the queue, and asks squeue about
the run's own job ids while they are in it.
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import STAGES, RunDir, read_json
from shard_pipeline.submit.executors.local import last_error_line


@dataclass
class StageStatus:
    stage: str
    total: int
    done: int = 0
    running: int = 0
    pending: int = 0
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (task, log, last error line)

    @property
    def not_started(self) -> int:
        return self.total - self.done - self.running - self.pending - len(self.failed)


def latest_jobs(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per stage, the array chunks of the most recent submission that included that stage."""
    out: dict[str, list[dict[str, Any]]] = {}
    for sub in record.get("submissions", []):
        stages = {j["stage"] for j in sub["jobs"]}
        for stage in stages:
            out[stage] = [j for j in sub["jobs"] if j["stage"] == stage]
    return out


def squeue_states(job_ids: list[str], run=subprocess.run) -> dict[str, str]:
    """'<array id>_<task>' -> state for the still-queued tasks of these arrays (-r: one line per task)."""
    if not job_ids:
        return {}
    try:
        p = run(["squeue", "-h", "-r", f"--jobs={','.join(job_ids)}", "-o", "%i|%T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    states = {}
    for line in p.stdout.splitlines():
        jid, _, state = line.strip().partition("|")
        states[jid] = state
    return states


def _done(run: RunDir, stage: str, task: int) -> bool:
    return {
        "partition": run.partition_receipt(task),
        "plan": run.plan_json,
        "write": run.write_receipt(task),
        "finalize": run.done_marker,
    }[stage].exists()


def _task_log(run: RunDir, stage: str, task: int, chunks: list[dict[str, Any]]) -> Path | None:
    for j in chunks:
        local = task - j["offset"]
        p = Path(j.get("log_dir") or run.log_dir(stage)) / f"{j['job_id']}_{local}.log"  # log_dir: multi-language run
        if p.exists():
            return p
    p = run.log_dir(stage) / f"local_{task}.log"
    return p if p.exists() else None


def stage_statuses(run: RunDir, queue: dict[str, str] | None = None) -> list[StageStatus]:
    cfg = RunConfig.from_json(read_json(run.config_json))
    record = read_json(run.run_json)
    jobs = latest_jobs(record)
    if queue is None:
        queue = squeue_states([j["job_id"] for chunks in jobs.values() for j in chunks])
    totals = {"partition": cfg.execution.partition_tasks, "plan": 1, "write": cfg.execution.write_tasks, "finalize": 1}
    out = []
    for stage in STAGES:
        st = StageStatus(stage, totals[stage])
        chunks = jobs.get(stage, [])
        for task in range(totals[stage]):
            if _done(run, stage, task):
                st.done += 1
                continue
            state = next((queue.get(f"{j['job_id']}_{task - j['offset']}") for j in chunks
                          if f"{j['job_id']}_{task - j['offset']}" in queue), None)
            if state in ("RUNNING", "COMPLETING", "CONFIGURING"):
                st.running += 1
                continue
            if state is not None:
                st.pending += 1
                continue
            log = _task_log(run, stage, task, chunks)
            if log is not None:
                st.failed.append((task, str(log), last_error_line(log)))
        out.append(st)
    return out


def progress(run: RunDir) -> dict[str, Any]:
    """Documents and bytes read so far (receipts and checkpoints), throughput, ETA of the partition stage."""
    cfg = RunConfig.from_json(read_json(run.config_json))
    docs = compressed = 0
    for t in range(cfg.execution.partition_tasks):
        for path in (run.partition_receipt(t), run.root / "partition" / f"task-{t:05d}.checkpoint.json"):
            if path.exists():
                inputs = read_json(path)["inputs"]
                docs += sum(i["read"] for i in inputs)
                compressed += sum(i["compressed_bytes"] for i in inputs)
                break
    total = sum(i.size or 0 for i in cfg.content.inputs)
    record = read_json(run.run_json)
    started = min((s.get("submitted_at", 0) for s in record.get("submissions", [])), default=0) or run.run_json.stat().st_mtime
    receipts = [run.partition_receipt(t) for t in range(cfg.execution.partition_tasks)]
    finished = all(p.exists() for p in receipts) and receipts
    end = max(p.stat().st_mtime for p in receipts) if finished else time.time()
    elapsed = max(1e-9, end - started)
    rate = compressed / elapsed
    eta = (total - compressed) / rate if rate > 0 and compressed < total else 0.0
    return {"docs": docs, "compressed": compressed, "total": total, "elapsed": elapsed, "rate": rate, "eta": eta}


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def render(run: RunDir, statuses: list[StageStatus], prog: dict[str, Any]) -> str:
    from shard_pipeline.units import human_bytes

    cfg = read_json(run.config_json)
    lines = [f"run {run.root}  config {cfg['config_sha256'][:12]}  executor {cfg['execution']['executor']}",
             f"{'stage':<10}{'tasks':>7}{'done':>7}{'running':>9}{'pending':>9}{'failed':>8}{'not started':>13}"]
    for st in statuses:
        lines.append(f"{st.stage:<10}{st.total:>7}{st.done:>7}{st.running:>9}{st.pending:>9}{len(st.failed):>8}{st.not_started:>13}")
    pct = 100 * prog["compressed"] / prog["total"] if prog["total"] else 100.0
    lines.append(f"read {prog['docs']:,} documents, {human_bytes(prog['compressed'])} of {human_bytes(prog['total'])} "
                 f"compressed ({pct:.1f}%) in {_hms(prog['elapsed'])} of partition; {human_bytes(prog['rate'])}/s; "
                 f"partition ETA {_hms(prog['eta']) if prog['eta'] else '-'}")
    failed = [(st.stage, t, log, err) for st in statuses for t, log, err in st.failed]
    for stage, t, log, err in failed[:20]:
        lines.append(f"FAILED {stage} task {t}: {err}\n       log: {log}")
    if len(failed) > 20:
        lines.append(f"... and {len(failed) - 20} more failed tasks")
    if run.done_marker.exists():
        state = f"done: output at {cfg['execution']['out']}"
    elif failed and not any(st.running or st.pending for st in statuses):
        state = f"stopped with failures: fix the cause, then ./hplt-shard --resume {run.root}"
    elif any(st.running or st.pending for st in statuses):
        state = "in progress"
    else:
        state = f"not running and not done: ./hplt-shard --resume {run.root}"
    lines.append(f"state: {state}")
    return "\n".join(lines)


def status_text(run: RunDir) -> str:
    return render(run, stage_statuses(run), progress(run))

