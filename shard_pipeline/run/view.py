"""A run's view, of one language or several: its phase, each stage's tasks by state, a row per language,
the failed tasks' outcome records and the next step as a typed value (run/steps.py); and --status, its
rendering with its exit code (the table of a language's stages is run/render.py's).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from shard_pipeline.errors import ExitCode, UsageError
from shard_pipeline.run import outcome, unit_table
from shard_pipeline.run.next_step import check_this_version, each_language, new_run
from shard_pipeline.run.outcome import Outcome
from shard_pipeline.run.queue import latest_jobs, squeue_states
from shard_pipeline.run.receipts import Validation
from shard_pipeline.run.registry import done_warnings, run_history, since_done
from shard_pipeline.run.render import (cell, failed_line, progress, refused_line, render, requeued_line, skipped_lines,
                                       touched_line, unread_line)
from shard_pipeline.run.runconfig import load_config
from shard_pipeline.run.rundir import RunDir, check_whole
from shard_pipeline.run.runstate import RunPhase, run_phase
from shard_pipeline.run.steps import Done, Step, StepFacts, decide
from shard_pipeline.run.steps import render as render_step
from shard_pipeline.run.run_json import read_run_json
from shard_pipeline.run.stage_status import (
    LANGUAGE_WORD,
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
from shard_pipeline.units import plural


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


def status_report(run: RunDir, queue: dict[str, str] | None = None) -> tuple[str, int]:
    """The --status text and its exit code (errors.ExitCode: 0 done, 1 failed or interrupted, 3 busy, 4 stuck)."""
    view = run_view(run, queue)
    code = int(view.phase.exit_code)
    prog = progress(run, moving=code == ExitCode.BUSY)
    state = render_step(view.step) + (f"; {view.elsewhere}" if view.elsewhere else "")  # what this host cannot see
    return render(run, list(view.stages), prog, state, code, view.refused), code


def report(root: Path) -> tuple[str, int]:
    """--status of RUNDIR (its languages) or of one language's run dir RUNDIR/<LANG> (its stages)."""
    run = RunDir(root)
    check_whole(root)
    if not run.run_json.exists():  # a run of another format is refused by its run.json (check_this_version)
        raise UsageError(f"{run.root} is not a hplt-shard run directory (no run.json)")
    check_this_version(root, read_run_json(run.run_json))
    if not unit_table.is_run_root(root):
        return status_report(run)
    langs = unit_table.load(root).langs
    return languages_report(root) if len(langs) > 1 else status_report(RunDir(root / langs[0]))  # its stages


def _row_line(row: LanguageRow) -> str:
    validation = run_history(row.run, row.run.validation_json, Validation) if row.run.done_marker.exists() else None
    rows = f"{validation.rows:,}" if validation is not None else "-"
    return (f"{row.lang:<14}" + "".join(f"{cell(st):>{w}}" for st, w in zip(row.stages, (11, 7, 11, 10)))
            + f"{rows:>14}  {row.word}")


def _row_notes(row: LanguageRow) -> tuple[list[str], list[str], list[str]]:
    """The requeued, touched and done-since lines of a language, as a single run's --status says them."""
    requeued = [requeued_line(f"{row.lang} {st.stage}", st.requeued) for st in row.stages if st.requeued]
    touched = [touched_line(f"{row.lang} {st.stage}", st.touched) for st in row.stages if st.touched]
    since = []
    if row.phase is RunPhase.DONE:
        if note := since_done(row.run, Path(load_config(row.run).execution.out)):
            since.append(f"{row.lang}: done{note}")
        since += [f"{row.lang}: warning: {w}" for w in done_warnings(row.run)]
    return requeued, touched, since


def languages_report(root: Path) -> tuple[str, int]:
    """The --status text of a multi-language run and its exit code (errors.ExitCode, as a single run's)."""
    view = languages_view(root)
    rows = view.languages
    lines = [f"run {view.root}  {plural(len(rows), 'language')}",
             f"{'language':<14}{'partition':>11}{'plan':>7}{'write':>11}{'finalize':>10}{'rows':>14}  state",
             *map(_row_line, rows)]
    notes = [_row_notes(row) for row in rows]
    lines += [l for n in notes for l in n[0]][:20] + [l for n in notes for l in n[1]][:20] + [l for n in notes for l in n[2]]
    unread = [(f"{row.lang} {st.stage}", t, log) for row in rows for st in row.stages for t, log in sorted(st.unread.items())]
    if unread:
        lines.append(unread_line(unread, any(st.unread and st.done < st.total for row in rows for st in row.stages)))
    failures = [(f"{row.lang} {st.stage}", st.causes()[0]) for row in rows for st in row.stages if st.causes()]
    lines += [failed_line(where, f) for where, f in failures[:20]]
    lines += [line for row in rows for line in skipped_lines(row.stages, f"{row.lang} ")][:20]
    lines += [refused_line(o) for o in view.refused[:20]]
    count = {p: sum(1 for row in rows if row.phase is p) for p in RunPhase}
    lines.append(f"languages landed {count[RunPhase.DONE]}/{len(rows)}"
                 + "".join(f", {count[p]} {LANGUAGE_WORD[p]}" for p in LANGUAGE_WORD if p is not RunPhase.DONE and count[p]))
    lines.append(f"state: {render_step(view.step)}")
    if view.elsewhere:
        lines.append(view.elsewhere)
    return "\n".join(lines), int(view.phase.exit_code)

