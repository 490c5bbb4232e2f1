"""`--status RUNDIR` of a multi-language run: a row per language, from each language's own run dir.

One squeue call for the whole chain; each language's row is status.stage_statuses of its run
dir, whose run.json holds the chain's chunks in its own task numbers (submit/multi_start.py).
With C units per array task, the chain's array indices are translated to the language's task
numbers first (`language_queue`). Each language is in one of five states (`language_state`):
landed (with the time of its DONE marker), running, waiting, failed, or stopped.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from shard_pipeline.run import multi
from shard_pipeline.run.multi import language_queue
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.run.status import (
    StageStatus,
    held_by_a_process,
    latest_jobs,
    squeue_states,
    stage_statuses,
)

LANDED, RUNNING, WAITING, FAILED, STOPPED = "landed", "running", "waiting", "failed", "stopped"


def landed_at(run: RunDir) -> str | None:
    """When the language landed: its DONE marker's time (UTC), None if it has not."""
    try:
        t = run.done_marker.stat().st_mtime
    except OSError:
        return None
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def language_state(run: RunDir, sts: list[StageStatus], chain_alive: bool) -> str:
    """landed / running / waiting / failed / stopped, from its DONE, its tasks, and whether the chain lives.

    A language with a failed task and none running is failed even while other languages' jobs
    still run: its finalize can only name it (afterany), and --resume is what redoes it."""
    when = landed_at(run)
    if when is not None:
        return f"{LANDED} {when}"
    if any(st.running for st in sts):
        return RUNNING
    failed = [st.stage for st in sts if st.failed]
    if failed:
        return f"{FAILED} ({failed[0]})"
    if chain_alive or any(st.pending for st in sts):
        return WAITING
    return STOPPED


def _cell(st: StageStatus) -> str:
    return f"{st.done}/{st.total}" + (f" {len(st.failed)}F" if st.failed else "")


def multi_status_report(root: Path) -> tuple[str, int]:
    """The --status text of a multi-language run and its exit code (0 all landed, 1 failed or stopped, 3 busy)."""
    m = multi.load(root)
    jobs = latest_jobs(read_json(Path(root) / "run.json"))
    queue = squeue_states([j["job_id"] for chunks in jobs.values() for j in chunks])
    alive = bool(queue) or held_by_a_process(RunDir(root))  # a chain job queued, or the local executor running it
    lines = [f"run {m.root}  {len(m.langs)} languages",
             f"{'language':<14}{'partition':>11}{'plan':>7}{'write':>11}{'finalize':>10}{'rows':>14}  state"]
    states, failures = {}, []
    for lang in m.langs:
        run = RunDir(m.lang_dir(lang))
        sts = stage_statuses(run, language_queue(m, lang, latest_jobs(read_json(run.run_json)), queue))
        states[lang] = language_state(run, sts, alive)
        rows = read_json(run.validation_json)["rows"] if run.done_marker.exists() and run.validation_json.exists() else None
        lines.append(f"{lang:<14}" + "".join(f"{_cell(st):>{w}}" for st, w in zip(sts, (11, 7, 11, 10)))
                     + f"{(f'{rows:,}' if rows is not None else '-'):>14}  {states[lang]}")
        failures += [(lang, st.stage, t, log, err) for st in sts for t, log, err in st.failed[:1]]
    for lang, stage, t, log, err in failures[:20]:
        lines.append(f"FAILED {lang} {stage} task {t}: {err}\n       log: {log}")
    count = {s: sum(1 for v in states.values() if v.split()[0] == s) for s in (LANDED, RUNNING, WAITING, FAILED, STOPPED)}
    lines.append(f"languages landed {count[LANDED]}/{len(m.langs)}"
                 + "".join(f", {count[s]} {s}" for s in (RUNNING, WAITING, FAILED, STOPPED) if count[s]))
    busy = count[RUNNING] + count[WAITING] > 0
    if count[LANDED] == len(m.langs):
        lines.append("state: done")
        return "\n".join(lines), 0
    unfinished = [l for l, s in states.items() if not s.startswith(LANDED)]
    if busy:
        lines.append("state: in progress" + (f"; failed so far: {', '.join(l for l, s in states.items() if s.startswith(FAILED))} "
                                              f"(after the chain ends: ./hplt-shard --resume {m.root})"
                                              if count[FAILED] else ""))
        return "\n".join(lines), 3
    lines.append(f"state: unfinished ({', '.join(unfinished)}): "
                 f"./hplt-shard --resume {m.root}  (details: ./hplt-shard --status {m.root}/<LANG>)")
    return "\n".join(lines), 1
