"""A run's view, built by one function (`view_of`) for a run of one language or several: its phase, each
stage's tasks by state (run/stage_status.py), a row per language, the failures by kind (the outcome records) and
the next step as a typed value (run/steps.py). --status renders it (run/status.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from shard_pipeline.run import outcome, unit_table
from shard_pipeline.run.next_step import each_language, new_run
from shard_pipeline.run.outcome import Kind, Outcome
from shard_pipeline.run.queue import latest_jobs, squeue_states
from shard_pipeline.run.registry import done_warnings, since_done
from shard_pipeline.run.runconfig import load_config
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.runstate import RunPhase, run_phase
from shard_pipeline.run.steps import Done, Step, StepFacts, decide
from shard_pipeline.run.run_json import read_run_json
from shard_pipeline.run.stage_status import (
    StageStatus,
    counts,
    elsewhere,
    held_by_a_process,
    language_state,
    last_refusal,
    phase_of,
    queued_job_ids,
    rebuilt_by,
    stage_statuses,
)


@dataclass(frozen=True)
class LanguageRow:
    """One language of a run of several: its stages, phase and the word its row shows."""

    lang: str
    run: RunDir
    phase: RunPhase
    word: str
    stages: tuple[StageStatus, ...]


@dataclass(frozen=True)
class RunView:
    """Where a run stands and what comes next. `stages`: a run of one language's; `languages`: a run of
    several's rows; `failures`: the outcome records of its failed tasks; `elsewhere`: the words for tasks
    recorded on another host (a local run whose run dir is shared)."""

    root: Path
    phase: RunPhase
    step: Step
    stages: tuple[StageStatus, ...] = ()
    languages: tuple[LanguageRow, ...] = ()
    failures: tuple[Outcome, ...] = ()
    elsewhere: str = ""
    refused: tuple[Outcome, ...] = ()  # array tasks of the last submission refused before they read the unit table

    def by_kind(self) -> dict[Kind, list[Outcome]]:
        """The failed tasks' outcomes, by their error kind."""
        found: dict[Kind, list[Outcome]] = {}
        for o in self.failures:
            found.setdefault(o.kind, []).append(o)
        return found


def view_of(root: Path) -> RunView:
    """The view of the run in `root`, of one language or several."""
    return languages_view(root) if unit_table.is_run_root(root) else run_view(RunDir(root))


def run_view(run: RunDir, queue: dict[str, str] | None = None) -> RunView:
    """The view of one language's run dir (`queue`: squeue's answer, when the caller has it)."""
    statuses = tuple(stage_statuses(run, queue, strict=not run.done_marker.exists()))  # done: no squeue
    ex = load_config(run).execution
    record = read_run_json(run.run_json) if run.run_json.exists() else {}
    phase = phase_of(run, list(statuses))
    failures = tuple(outcome.failures(run))
    done = Done()
    if phase is RunPhase.DONE:
        done = Done(Path(ex.out), since_done(run, Path(ex.out)) + "".join(f"; warning: {w}" for w in done_warnings(run)))
    new = new_run(run, failures) if phase is RunPhase.FAILED else None
    whole = run.root.parent if unit_table.is_run_root(run.root.parent) else run.root  # a resume resumes the run
    whole_record = record if whole == run.root else read_run_json(RunDir(whole).run_json)
    facts = StepFacts(whole, phase, failed_tasks=counts(list(statuses)).failed,
                      pending_reasons=tuple(r for st in statuses for _, r in st.reasons),
                      queued_ids=tuple(queued_job_ids(run, list(statuses))),
                      cut=sum(len(st.interrupted) for st in statuses),
                      here=not any(st.running or st.pending for st in statuses),
                      refusal=last_refusal(whole_record),
                      local=ex.executor == "local",  # sbatch refuses a submission of the run: its run.json keeps it
                      slurm_resume=next((replace(f.resume, after="failed") for st in statuses for f in st.failed if f.resume), None),
                      new_runs=(("", new),) if new is not None else (), done=done)
    away = elsewhere(record, run.root) if phase is not RunPhase.DONE else ""
    refused = refused_tasks(whole, whole_record) if phase is not RunPhase.DONE else ()
    return RunView(run.root, phase, decide(facts), stages=statuses, failures=failures, elsewhere=away, refused=refused)


def refused_tasks(root: Path, record: dict) -> tuple[Outcome, ...]:
    """The tasks of the run's last submission (`record`: RUNDIR's run.json) refused before they read the unit table
    (Kind.REFUSED: another code version; a run.json they could not read), the only outcomes RUNDIR itself holds
    (worker/task.py): recorded under their own index, since which units an index runs is the table's to say."""
    since = max((s.get("submitted_at", 0) for s in record.get("submissions", [])), default=0)
    return tuple(o for o in outcome.failures(RunDir(root)) if o.ended >= since)


def language_rows(m: unit_table.UnitTable, queue: dict[str, str], strict: bool, alive: bool) -> list[LanguageRow]:
    """Each language's stages, from its own run dir and the chain's queue; a failed language that a new run
    of it alone rebuilt (its next step, taken) is landed."""
    rows = []
    for lang in m.langs:
        run = RunDir(m.lang_dir(lang))
        record = read_run_json(run.run_json)
        sts = stage_statuses(run, unit_table.language_queue(m, lang, latest_jobs(record), queue), strict=strict,
                             record=record)
        phase, word = language_state(run, sts, alive)
        if phase in (RunPhase.FAILED, RunPhase.INTERRUPTED) and (again := rebuilt_by(m.root, lang, run)):
            phase, word, sts = RunPhase.DONE, f"landed by {again}", []
        rows.append(LanguageRow(lang, run, phase, word, tuple(sts)))
    return rows


def languages_view(root: Path) -> RunView:
    """The view of a run of several languages: a row per language, one squeue call for the chain."""
    m = unit_table.load(root)
    record = read_run_json(RunDir(root).run_json)
    jobs = latest_jobs(record)
    landed = all(RunDir(m.lang_dir(lang)).done_marker.exists() for lang in m.langs)  # then no squeue is needed
    queue = squeue_states([j["job_id"] for chunks in jobs.values() for j in chunks], strict=not landed)
    # A local executor running the chain holds the run; queued Slurm jobs are in each language's counts
    # (pending or running, with Slurm's reason), so a held or waiting job is never shown as running.
    alive = held_by_a_process(RunDir(root))
    rows = language_rows(m, queue, not landed, alive)
    every = [st for row in rows for st in row.stages]
    phase = run_phase(counts(every), done_marker=all(row.phase is RunPhase.DONE for row in rows), held=alive)
    failed = [row.lang for row in rows if row.phase is RunPhase.FAILED]
    settled = phase not in (RunPhase.RUNNING, RunPhase.QUEUED, RunPhase.DONE, RunPhase.STUCK)
    facts = StepFacts(m.root, phase, failed_tasks=counts(every).failed, failed_languages=tuple(failed),
                      pending_reasons=tuple(r for st in every for _, r in st.reasons),
                      queued_ids=tuple(dict.fromkeys(k.partition("_")[0] for k in queue)), refusal=last_refusal(record),
                      new_runs=each_language(m.root, {l: m.lang_dir(l) for l in failed}).new_runs if settled else (),
                      unfinished=tuple(row.lang for row in rows if row.phase is not RunPhase.DONE))
    away = elsewhere(record, root, *(m.lang_dir(l) for l in m.langs)) if phase is not RunPhase.DONE else ""
    failures = tuple(o for row in rows for o in outcome.failures(row.run))
    refused = refused_tasks(root, record) if phase is not RunPhase.DONE else ()
    return RunView(m.root, phase, decide(facts), languages=tuple(rows), failures=failures, elsewhere=away,
                   refused=refused)
