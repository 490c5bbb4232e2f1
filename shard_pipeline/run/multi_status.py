"""`--status RUNDIR` of a multi-language run: a row per language, from each language's own run dir.

One squeue call for the whole chain; each language's row is status.stage_statuses of its run
dir, whose run.json holds the chain's chunks in its own task numbers (submit/multi_start.py).
"""
from __future__ import annotations

from pathlib import Path

from shard_pipeline.run import multi
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.run.status import (
    StageStatus,
    latest_jobs,
    squeue_states,
    stage_statuses,
)


def language_state(run: RunDir, sts: list[StageStatus]) -> str:
    if run.done_marker.exists():
        return "done"
    if any(st.running or st.pending for st in sts):
        return "in progress"
    failed = [st.stage for st in sts if st.failed]
    return f"failed ({failed[0]})" if failed else "not running"


def _cell(st: StageStatus) -> str:
    return f"{st.done}/{st.total}" + (f" {len(st.failed)}F" if st.failed else "")


def multi_status_report(root: Path) -> tuple[str, int]:
    """The --status text of a multi-language run and its exit code (0 done, 1 failed or stopped, 3 busy)."""
    m = multi.load(root)
    jobs = latest_jobs(read_json(Path(root) / "run.json"))
    queue = squeue_states([j["job_id"] for chunks in jobs.values() for j in chunks])
    lines = [f"run {m.root}  {len(m.langs)} languages",
             f"{'language':<14}{'partition':>11}{'plan':>7}{'write':>11}{'finalize':>10}{'rows':>14}  state"]
    states, failures = {}, []
    for lang in m.langs:
        run = RunDir(m.lang_dir(lang))
        sts = stage_statuses(run, queue)
        states[lang] = language_state(run, sts)
        rows = read_json(run.validation_json)["rows"] if run.done_marker.exists() and run.validation_json.exists() else None
        lines.append(f"{lang:<14}" + "".join(f"{_cell(st):>{w}}" for st, w in zip(sts, (11, 7, 11, 10)))
                     + f"{(f'{rows:,}' if rows is not None else '-'):>14}  {states[lang]}")
        failures += [(lang, st.stage, t, log, err) for st in sts for t, log, err in st.failed[:1]]
    for lang, stage, t, log, err in failures[:20]:
        lines.append(f"FAILED {lang} {stage} task {t}: {err}\n       log: {log}")
    done = sum(1 for s in states.values() if s == "done")
    busy = any(s == "in progress" for s in states.values())
    lines.append(f"languages done {done}/{len(m.langs)}")
    code = 0 if done == len(m.langs) else 3 if busy else 1
    if done == len(m.langs):
        lines.append("state: done")
    elif busy:
        lines.append("state: in progress")
    else:
        lines.append(f"state: unfinished ({', '.join(l for l, s in states.items() if s != 'done')}): "
                     f"./hplt-shard --resume {m.root}  (details: ./hplt-shard --status {m.root}/<LANG>)")
    return "\n".join(lines), code
