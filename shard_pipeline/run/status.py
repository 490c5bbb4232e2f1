"""--status: a run's view (run/view.py) rendered (run/render.py), with its state line and exit code.

A run of several languages gets a row per language, each from the language's own run dir, and one
squeue call for the chain. Each language's phase is view.language_state's: landed (with the time of
its DONE marker), running, waiting, failed, interrupted or stuck.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from shard_pipeline.errors import ExitCode, UsageError
from shard_pipeline.run import unit_table
from shard_pipeline.run.next_step import check_this_version, each_language, new_run
from shard_pipeline.run.queue import latest_jobs, squeue_states
from shard_pipeline.run.receipts import Validation
from shard_pipeline.run.registry import done_warnings, run_history, since_done
from shard_pipeline.run.render import cell, progress, render, requeued_line, touched_line, unread_line
from shard_pipeline.run.runconfig import load_config
from shard_pipeline.run.rundir import RunDir, check_whole, read_json
from shard_pipeline.run.runstate import RunPhase, run_phase
from shard_pipeline.run.steps import Done, Step, StepFacts, decide
from shard_pipeline.run.steps import render as render_step
from shard_pipeline.run.view import (
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


def run_step(run: RunDir, statuses: list[StageStatus]) -> tuple[RunPhase, Step]:
    """The phase of a run of one language and its next step (steps.decide), from its view."""
    ex = load_config(run).execution
    record = read_json(run.run_json) if run.run_json.exists() else {}
    phase = phase_of(run, statuses)
    failed = sum(len(st.failed) for st in statuses)
    done = Done()
    if phase is RunPhase.DONE:
        done = Done(Path(ex.out), since_done(run, Path(ex.out)) + "".join(f"; warning: {w}" for w in done_warnings(run)))
    new = new_run(run) if phase is RunPhase.FAILED else None
    slurm_resume = next((replace(r, after="failed") for st in statuses for r in st.resumes), None)
    facts = StepFacts(run.root, phase, plural(failed, "task") if failed else "",
                      tuple(r for st in statuses for _, r in st.reasons), tuple(queued_job_ids(run, statuses)),
                      cut=sum(len(st.interrupted) for st in statuses),
                      here=not any(st.running or st.pending for st in statuses),
                      refusal=last_refusal(record), local=ex.executor == "local", slurm_resume=slurm_resume,
                      new_runs=(("", new),) if new is not None else (), done=done)
    return phase, decide(facts)


def run_state(run: RunDir, statuses: list[StageStatus]) -> tuple[str, int]:
    """The one-line state with its next step, and the exit code of --status (docs/operations.md)."""
    phase, step = run_step(run, statuses)
    text = render_step(step)
    record = read_json(run.run_json) if run.run_json.exists() else {}
    if phase is not RunPhase.DONE and (away := elsewhere(record, run.root)):
        text += f"; {away}"
    return text, int(phase.exit_code)


def status_report(run: RunDir) -> tuple[str, int]:
    """The --status text and its exit code (errors.ExitCode: 0 done, 1 failed or interrupted, 3 busy, 4 stuck)."""
    statuses = stage_statuses(run, strict=not run.done_marker.exists())  # a finished run needs no squeue
    state, code = run_state(run, statuses)
    return render(run, statuses, progress(run, moving=code == ExitCode.BUSY), state, code), code


def report(root: Path) -> tuple[str, int]:
    """--status of any run dir: one language's stages, or a row per language of a run of several."""
    run = RunDir(root)
    check_whole(root)
    if not unit_table.is_multi(root) and not run.config_json.exists():
        raise UsageError(f"{run.root} is not a hplt-shard run directory (no config.json)")
    if run.run_json.exists():
        check_this_version(root, read_json(run.run_json))
    if unit_table.is_multi(root):
        return languages_report(root)
    return status_report(run)


@dataclass(frozen=True)
class LanguageRow:
    """One language of a run of several: its view, phase and the word its row shows."""

    lang: str
    run: RunDir
    phase: RunPhase
    word: str
    stages: tuple[StageStatus, ...]


def language_rows(m: unit_table.UnitTable, queue: dict[str, str], strict: bool, alive: bool) -> list[LanguageRow]:
    """Each language's view, from its own run dir and the chain's queue; a failed language that a new run of
    it alone rebuilt (its next step, taken) is landed."""
    rows = []
    for lang in m.langs:
        run = RunDir(m.lang_dir(lang))
        record = read_json(run.run_json)
        sts = stage_statuses(run, unit_table.language_queue(m, lang, latest_jobs(record), queue), strict=strict,
                             record=record)
        phase, word = language_state(run, sts, alive)
        if phase in (RunPhase.FAILED, RunPhase.INTERRUPTED) and (again := rebuilt_by(m.root, lang, run)):
            phase, word, sts = RunPhase.DONE, f"landed by {again}", []
        rows.append(LanguageRow(lang, run, phase, word, tuple(sts)))
    return rows


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


def languages_step(m: unit_table.UnitTable, rows: list[LanguageRow], queue: dict[str, str],
                   alive: bool) -> tuple[RunPhase, Step]:
    """The phase of a run of several and its next step (steps.decide), from its languages' views."""
    every = [st for row in rows for st in row.stages]
    landed = all(row.phase is RunPhase.DONE for row in rows)
    phase = run_phase(counts(every), done_marker=landed, held=alive)
    failed = [row.lang for row in rows if row.phase is RunPhase.FAILED]
    settled = phase not in (RunPhase.RUNNING, RunPhase.QUEUED, RunPhase.DONE, RunPhase.STUCK)
    new_runs = each_language(m.root, {lang: m.lang_dir(lang) for lang in failed}).new_runs if settled else ()
    facts = StepFacts(m.root, phase, ", ".join(failed), tuple(r for st in every for _, r in st.reasons),
                      tuple(dict.fromkeys(k.partition("_")[0] for k in queue)),
                      refusal=last_refusal(read_json(RunDir(m.root).run_json)), new_runs=new_runs,
                      unfinished=tuple(row.lang for row in rows if row.phase is not RunPhase.DONE))
    return phase, decide(facts)


def languages_report(root: Path) -> tuple[str, int]:
    """The --status text of a multi-language run and its exit code (errors.ExitCode, as a single run's)."""
    m = unit_table.load(root)
    jobs = latest_jobs(read_json(RunDir(root).run_json))
    landed = all(RunDir(m.lang_dir(lang)).done_marker.exists() for lang in m.langs)  # then no squeue is needed
    queue = squeue_states([j["job_id"] for chunks in jobs.values() for j in chunks], strict=not landed)
    # A local executor running the chain holds the run; queued Slurm jobs are in each language's counts
    # (pending or running, with Slurm's reason), so a held or waiting job is never shown as running.
    alive = held_by_a_process(RunDir(root))
    rows = language_rows(m, queue, not landed, alive)
    lines = [f"run {m.root}  {plural(len(m.langs), 'language')}",
             f"{'language':<14}{'partition':>11}{'plan':>7}{'write':>11}{'finalize':>10}{'rows':>14}  state",
             *map(_row_line, rows)]
    notes = [_row_notes(row) for row in rows]
    lines += [l for n in notes for l in n[0]][:20] + [l for n in notes for l in n[1]][:20] + [l for n in notes for l in n[2]]
    unread = [(f"{row.lang} {st.stage}", t, log) for row in rows for st in row.stages for t, log in sorted(st.unread.items())]
    if unread:
        lines.append(unread_line(unread, any(st.unread and st.done < st.total for row in rows for st in row.stages)))
    failures = [(row.lang, st.stage, *st.failed[0]) for row in rows for st in row.stages if st.failed]
    lines += [f"FAILED {lang} {stage} task {t}: {err}\n       log: {log}" for lang, stage, t, log, err in failures[:20]]
    count = {p: sum(1 for row in rows if row.phase is p) for p in RunPhase}
    lines.append(f"languages landed {count[RunPhase.DONE]}/{len(m.langs)}"
                 + "".join(f", {count[p]} {LANGUAGE_WORD[p]}" for p in LANGUAGE_WORD if p is not RunPhase.DONE and count[p]))
    phase, step = languages_step(m, rows, queue, alive)
    lines.append(f"state: {render_step(step)}")
    record = read_json(RunDir(root).run_json)
    if phase is not RunPhase.DONE and (away := elsewhere(record, root, *(m.lang_dir(l) for l in m.langs))):
        lines.append(away)
    return "\n".join(lines), int(phase.exit_code)
