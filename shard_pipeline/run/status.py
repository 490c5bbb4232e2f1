"""--status: a run's view (run/view.py) rendered, with its state line and exit code; the table of a
language's stages is run/render.py's (a run of one language shows its language's), the rows of a run of
several are here.
"""
from __future__ import annotations

from pathlib import Path

from shard_pipeline.errors import ExitCode, UsageError
from shard_pipeline.run import unit_table
from shard_pipeline.run.next_step import check_this_version
from shard_pipeline.run.receipts import Validation
from shard_pipeline.run.registry import done_warnings, run_history, since_done
from shard_pipeline.run.render import (cell, failed_line, progress, refused_line, render, requeued_line, skipped_lines,
                                       touched_line, unread_line)
from shard_pipeline.run.runconfig import load_config
from shard_pipeline.run.rundir import RunDir, check_whole
from shard_pipeline.run.runstate import RunPhase
from shard_pipeline.run.stage_status import LANGUAGE_WORD
from shard_pipeline.run.steps import render as render_step
from shard_pipeline.run.view import LanguageRow, RunView, languages_view, run_view
from shard_pipeline.units import plural
from shard_pipeline.run.run_json import read_run_json


def state_line(view: RunView) -> str:
    """The state line: the next step, and what this host cannot see."""
    return render_step(view.step) + (f"; {view.elsewhere}" if view.elsewhere and not view.languages else "")


def status_report(run: RunDir, queue: dict[str, str] | None = None) -> tuple[str, int]:
    """The --status text and its exit code (errors.ExitCode: 0 done, 1 failed or interrupted, 3 busy, 4 stuck)."""
    view = run_view(run, queue)
    code = int(view.phase.exit_code)
    prog = progress(run, moving=code == ExitCode.BUSY)
    return render(run, list(view.stages), prog, state_line(view), code, view.refused), code


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

