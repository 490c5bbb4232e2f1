"""--status: a run's view (run/view.py) rendered (run/render.py), with its state line and exit code.

A run of several languages gets a row per language, each from the language's own run dir, and one
squeue call for the chain. Each language's phase is view.language_state's: landed (with the time of
its DONE marker), running, waiting, failed, interrupted or stuck.
"""
from __future__ import annotations

import re
from pathlib import Path

from shard_pipeline.commands import command, resume_command, status_command
from shard_pipeline.errors import ExitCode, UsageError
from shard_pipeline.run import unit_table
from shard_pipeline.run.next_step import check_this_version, new_run_step
from shard_pipeline.run.queue import latest_jobs, squeue_states
from shard_pipeline.run.receipts import Validation
from shard_pipeline.run.registry import done_warnings, run_history, since_done
from shard_pipeline.run.render import progress, render, requeued_line, touched_line, unread_line, cell
from shard_pipeline.run.runconfig import load_config
from shard_pipeline.run.rundir import RunDir, check_whole, read_json
from shard_pipeline.run.runstate import RunPhase, interrupted_step, refused_step, run_phase, stuck_step
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


def run_state(run: RunDir, statuses: list[StageStatus]) -> tuple[str, int]:
    """The one-line state with its next step, and the exit code of --status (docs/operations.md)."""
    ex = load_config(run).execution
    record = read_json(run.run_json) if run.run_json.exists() else {}
    phase = phase_of(run, statuses)
    resume = resume_command(run.root)
    failed = [err for st in statuses for _, _, err in st.failed]
    if phase is RunPhase.DONE:
        text = f"done: output at {ex.out}" + since_done(run, Path(ex.out))
        text += "".join(f"; warning: {w}" for w in done_warnings(run))
    elif phase is RunPhase.STUCK:
        text = stuck_step(run.root, [r for st in statuses for _, r in st.reasons], queued_job_ids(run, statuses))
    elif phase in (RunPhase.RUNNING, RunPhase.QUEUED):
        held = "" if any(st.running or st.pending for st in statuses) else \
            " (an hplt-shard process is running or resuming it here)"
        text = f"{phase.value}{held}" + (f"; {len(failed)} failed so far: after the jobs end, {resume}"
                                         if failed else "")
        cut = sum(len(st.interrupted) for st in statuses)
        queued_ids = queued_job_ids(run, statuses)
        if cut and queued_ids and not failed:  # a later stage's job cancelled while an earlier one waits: no end
            text += (f"; but {plural(cut, 'task')} will not run (their jobs left the queue, e.g. scancel): the run cannot "
                     f"finish as queued; {command('scancel', *queued_ids)}, then {resume}")
    elif phase is RunPhase.FAILED:
        hint = reason_hint(failed)
        text = (new_run_step(run)
                or (f"failed: {hint}" if hint else f"failed: fix the cause named above, then {resume}"))
    else:
        refusal = last_refusal(record)
        text = refused_step(run.root, refusal) if refusal else interrupted_step(run.root, ex.executor)
    if phase is not RunPhase.DONE and (away := elsewhere(record, run.root)):
        text += f"; {away}"
    return text, int(phase.exit_code)


def reason_hint(failed: list[str]) -> str | None:
    """The resume command of the first failed task whose Slurm reason has one (`REASON (CMD); last line: ...`,
    stage_statuses), read back whole: the quoted run dir may hold a parenthesis."""
    return next((m[1] for err in failed for m in [re.match(r"[A-Z_]+ \((.+ --resume .*?)\); last line: ", err)] if m), None)


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


def languages_report(root: Path) -> tuple[str, int]:
    """The --status text of a multi-language run and its exit code (errors.ExitCode, as a single run's)."""
    m = unit_table.load(root)
    record = read_json(RunDir(root).run_json)
    jobs = latest_jobs(record)
    landed = all(RunDir(m.lang_dir(lang)).done_marker.exists() for lang in m.langs)  # then no squeue is needed
    queue = squeue_states([j["job_id"] for chunks in jobs.values() for j in chunks], strict=not landed)
    # A local executor running the chain holds the run; queued Slurm jobs are in each language's counts
    # (pending or running, with Slurm's reason), so a held or waiting job is never shown as running.
    alive = held_by_a_process(RunDir(root))
    lines = [f"run {m.root}  {plural(len(m.langs), 'language')}",
             f"{'language':<14}{'partition':>11}{'plan':>7}{'write':>11}{'finalize':>10}{'rows':>14}  state"]
    phases, every, failures, reasons, requeued, touched, since = {}, [], [], [], [], [], []
    per_lang: dict[str, list[StageStatus]] = {}
    for lang in m.langs:
        run = RunDir(m.lang_dir(lang))
        lang_record = read_json(run.run_json)
        lang_queue = unit_table.language_queue(m, lang, latest_jobs(lang_record), queue)
        sts = per_lang[lang] = stage_statuses(run, lang_queue, strict=not landed, record=lang_record)
        phases[lang], word = language_state(run, sts, alive)
        if phases[lang] in (RunPhase.FAILED, RunPhase.INTERRUPTED) and (again := rebuilt_by(m.root, lang, run)):
            phases[lang], word, sts = RunPhase.DONE, f"landed by {again}", []  # its next step was taken
        every += sts
        reasons += [r for st in sts for _, r in st.reasons]
        validation = run_history(run, run.validation_json, Validation) if run.done_marker.exists() else None
        rows = validation.rows if validation is not None else None
        lines.append(f"{lang:<14}" + "".join(f"{cell(st):>{w}}" for st, w in zip(sts, (11, 7, 11, 10)))
                     + f"{(f'{rows:,}' if rows is not None else '-'):>14}  {word}")
        failures += [(lang, st.stage, t, log, err) for st in sts for t, log, err in st.failed[:1]]
        requeued += [requeued_line(f"{lang} {st.stage}", st.requeued) for st in sts if st.requeued]
        touched += [touched_line(f"{lang} {st.stage}", st.touched) for st in sts if st.touched]
        if phases[lang] is RunPhase.DONE and (note := since_done(run, Path(load_config(run).execution.out))):
            since.append(f"{lang}: done{note}")  # as a resume of the done run says it
        if phases[lang] is RunPhase.DONE:
            since += [f"{lang}: warning: {w}" for w in done_warnings(run)]  # as --status of that language says them
    lines += requeued[:20] + touched[:20] + since
    unread = [(f"{lang} {st.stage}", t, log) for lang, sts in per_lang.items() for st in sts for t, log in sorted(st.unread.items())]
    if unread:
        lines.append(unread_line(unread, any(st.unread and st.done < st.total for st in every)))
    for lang, stage, t, log, err in failures[:20]:
        lines.append(f"FAILED {lang} {stage} task {t}: {err}\n       log: {log}")
    count = {p: sum(1 for v in phases.values() if v is p) for p in RunPhase}
    lines.append(f"languages landed {count[RunPhase.DONE]}/{len(m.langs)}"
                 + "".join(f", {count[p]} {LANGUAGE_WORD[p]}" for p in LANGUAGE_WORD if p is not RunPhase.DONE and count[p]))
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
    elif refusal := last_refusal(record):  # sbatch refused the chain: nothing of it was queued
        lines.append(f"state: {refused_step(m.root, refusal)}")
    else:
        how = "interrupted" if phase is RunPhase.INTERRUPTED else "failed"
        steps = {l: step for l in failed if (step := new_run_step(RunDir(m.lang_dir(l))))}
        resumable = [l for l in unfinished if l not in steps]
        if resumable:
            lines.append(f"state: {how}, unfinished ({', '.join(unfinished)}): {resume_command(m.root)}  "
                         f"(details: {status_command(m.root)}/LANG)")
        else:
            lines.append(f"state: {how}, unfinished ({', '.join(unfinished)}): a resume cannot finish "
                         f"{'it' if len(unfinished) == 1 else 'them'}; the next step of each:")
        lines += [f"{l}: {step}" for l, step in steps.items()]
    if phase is not RunPhase.DONE and (away := elsewhere(record, root, *(m.lang_dir(l) for l in m.langs))):
        lines.append(away)
    return "\n".join(lines), int(phase.exit_code)
