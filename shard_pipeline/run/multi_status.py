"""`--status RUNDIR` of a multi-language run: a row per language, from each language's own run dir.

One squeue call for the whole chain; each language's row is status.stage_statuses of its run
dir, whose run.json holds the chain's chunks in its own task numbers (submit/multi_start.py).
With C units per array task, the chain's array indices are translated to the language's task
numbers first (`language_queue`). Each language's phase is runstate.run_phase's (`language_state`),
shown as landed (with the time of its DONE marker), running, waiting, failed, interrupted or stuck.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from shard_pipeline.run import multi
from shard_pipeline.run.multi import language_queue
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.run.runstate import RunPhase, resume_command, run_phase, stuck_step
from shard_pipeline.run.status import (
    StageStatus,
    counts,
    held_by_a_process,
    latest_jobs,
    squeue_states,
    stage_statuses,
)
from shard_pipeline.units import plural



def landed_at(run: RunDir) -> str | None:
    """When the language landed: its DONE marker's time (UTC), None if it has not."""
    try:
        t = run.done_marker.stat().st_mtime
    except OSError:
        return None
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


ROW = {RunPhase.RUNNING: "running", RunPhase.QUEUED: "waiting", RunPhase.INTERRUPTED: "interrupted",
       RunPhase.STUCK: "stuck", RunPhase.FAILED: "failed", RunPhase.DONE: "landed"}


def language_state(run: RunDir, sts: list[StageStatus], chain_alive: bool) -> tuple[RunPhase, str]:
    """The language's phase (runstate.run_phase; `chain_alive` counts as a holder) and its row's word.

    A language with a failed task and none running is failed even while other languages' jobs
    still run: its finalize can only name it (afterany), and --resume is what redoes it."""
    phase = run_phase(counts(sts), done_marker=run.done_marker.exists(), held=chain_alive)
    failed = [st.stage for st in sts if st.failed]
    if failed and phase in (RunPhase.RUNNING, RunPhase.QUEUED) and not any(st.running for st in sts):
        phase = RunPhase.FAILED
    if phase is RunPhase.DONE:
        return phase, f"landed {landed_at(run)}"
    return phase, ROW[phase] + (f" ({failed[0]})" if phase is RunPhase.FAILED else "")


def _cell(st: StageStatus) -> str:
    return f"{st.done}/{st.total}" + (f" {len(st.failed)}F" if st.failed else "")


def multi_status_report(root: Path) -> tuple[str, int]:
    """The --status text of a multi-language run and its exit code (errors.ExitCode, as a single run's)."""
    m = multi.load(root)
    jobs = latest_jobs(read_json(RunDir(root).run_json))
    queue = squeue_states([j["job_id"] for chunks in jobs.values() for j in chunks])
    alive = bool(queue) or held_by_a_process(RunDir(root))  # a chain job queued, or the local executor running it
    lines = [f"run {m.root}  {plural(len(m.langs), 'language')}",
             f"{'language':<14}{'partition':>11}{'plan':>7}{'write':>11}{'finalize':>10}{'rows':>14}  state"]
    phases, every, failures, reasons = {}, [], [], []
    for lang in m.langs:
        run = RunDir(m.lang_dir(lang))
        sts = stage_statuses(run, language_queue(m, lang, latest_jobs(read_json(run.run_json)), queue))
        phases[lang], word = language_state(run, sts, alive)
        every += sts
        reasons += [r for st in sts for _, r in st.reasons]
        rows = read_json(run.validation_json)["rows"] if run.done_marker.exists() and run.validation_json.exists() else None
        lines.append(f"{lang:<14}" + "".join(f"{_cell(st):>{w}}" for st, w in zip(sts, (11, 7, 11, 10)))
                     + f"{(f'{rows:,}' if rows is not None else '-'):>14}  {word}")
        failures += [(lang, st.stage, t, log, err) for st in sts for t, log, err in st.failed[:1]]
    for lang, stage, t, log, err in failures[:20]:
        lines.append(f"FAILED {lang} {stage} task {t}: {err}\n       log: {log}")
    count = {p: sum(1 for v in phases.values() if v is p) for p in RunPhase}
    lines.append(f"languages landed {count[RunPhase.DONE]}/{len(m.langs)}"
                 + "".join(f", {count[p]} {ROW[p]}" for p in ROW if p is not RunPhase.DONE and count[p]))
    phase = run_phase(counts(every), done_marker=count[RunPhase.DONE] == len(m.langs), held=alive)
    failed = [l for l, p in phases.items() if p is RunPhase.FAILED]
    unfinished = [l for l, p in phases.items() if p is not RunPhase.DONE]
    if phase is RunPhase.DONE:
        lines.append("state: done")
    elif phase is RunPhase.STUCK:
        ids = list(dict.fromkeys(k.partition("_")[0] for k in queue))
        lines.append(f"state: {stuck_step(m.root, reasons, ids)}")
    elif phase in (RunPhase.RUNNING, RunPhase.QUEUED):
        lines.append(f"state: {phase.value}" + (f"; failed so far: {', '.join(failed)} "
                                                 f"(after the chain ends: {resume_command(m.root)})" if failed else ""))
    else:
        how = "interrupted" if phase is RunPhase.INTERRUPTED else "failed"
        lines.append(f"state: {how}, unfinished ({', '.join(unfinished)}): {resume_command(m.root)}  "
                     f"(details: ./hplt-shard --status {m.root}/<LANG>)")
    return "\n".join(lines), int(phase.exit_code)
