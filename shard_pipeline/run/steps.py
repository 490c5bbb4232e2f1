"""A run's next step as a value, and its one rendering. `decide` is the only place that says what comes next,
from the facts a run's view gathered; --status, the executors' end-of-run text and a landing render it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

from shard_pipeline.commands import command, resume_command, status_command
from shard_pipeline.run.outcome import Kind
from shard_pipeline.run.runstate import STUCK_FIX, STUCK_REASONS, RunPhase, is_stuck, refusal_next_step
from shard_pipeline.units import plural


@dataclass(frozen=True)
class Resume:
    """`--resume ROOT` with `options` (after OUT_OF_MEMORY, TIMEOUT; the local executor); `after`: what stopped
    the run ("failed", "interrupted", or "" for the bare command)."""

    root: Path
    options: tuple[str, ...] = ()
    after: str = ""

    def command(self) -> str:
        return resume_command(self.root, *self.options)


@dataclass(frozen=True)
class FixCause:
    """A task failed for a cause its log names (an input, a disk, a permission): fix it, then resume."""

    root: Path


@dataclass(frozen=True)
class CancelThenResume:
    """Jobs that cannot run as queued: cancel them, then resume. `reasons`: the stuck squeue reasons; none when
    `cut` tasks' jobs left the queue while others wait."""

    root: Path
    job_ids: tuple[str, ...]
    reasons: tuple[str, ...] = ()
    cut: int = 0


@dataclass(frozen=True)
class Wait:
    """The jobs (or a local process, `here`) still run or wait; what failed so far is resumed once they end.
    `cancel`: queued jobs that can never finish the run."""

    phase: RunPhase
    root: Path
    here: bool = False
    failed_tasks: int = 0
    failed_languages: tuple[str, ...] = ()
    cancel: CancelThenResume | None = None


@dataclass(frozen=True)
class Resubmit:
    """sbatch refused the last submission (run.json `refused_submissions`): nothing of it runs."""

    root: Path
    refusal: dict


@dataclass(frozen=True)
class NewRun:
    """A new run, after fixing `cause` (or, `quarantine`, with bad records set aside instead)."""

    kind: Kind  # what stopped the run (outcome.NEEDS_NEW_RUN)
    cause: str  # the failure, naming file and line
    fixed: str  # the new run after the input is fixed (the run's own command, a fresh --run-dir)
    quarantine: str | None = None  # for a bad record: the new run that sets bad records aside


@dataclass(frozen=True)
class EachLanguage:
    """A run of several that stopped ("failed" or "interrupted"): a resume finishes its `unfinished` languages
    but those of `new_runs` (language -> its new run)."""

    root: Path
    how: str
    unfinished: tuple[str, ...]
    new_runs: tuple[tuple[str, NewRun], ...] = ()
    brief: bool = False  # one line that points at --status for the new runs (a task's log)

    @property
    def resumable(self) -> tuple[str, ...]:
        fresh = dict(self.new_runs)
        return tuple(l for l in self.unfinished if l not in fresh)


@dataclass(frozen=True)
class Done:
    """Nothing to do. `out`: where the output is (one language); `notes`: what changed since, warnings."""

    out: Path | None = None
    notes: str = ""


Step = Union[Resume, FixCause, CancelThenResume, Wait, Resubmit, NewRun, EachLanguage, Done]


@dataclass(frozen=True)
class StepFacts:
    """What the next step depends on, gathered from a run's view (run/view.py)."""

    root: Path
    phase: RunPhase
    failed_tasks: int = 0
    failed_languages: tuple[str, ...] = ()  # a run of several: its failed languages
    pending_reasons: tuple[str, ...] = ()
    queued_ids: tuple[str, ...] = ()
    cut: int = 0  # tasks that will not run: their jobs left the queue
    here: bool = False  # a process here runs it, with nothing queued
    refusal: dict | None = None
    local: bool = False  # the local executor ran it
    slurm_resume: Resume | None = None  # the resume a Slurm reason (OUT_OF_MEMORY, TIMEOUT) calls for
    new_runs: tuple[tuple[str, NewRun], ...] = ()  # per language ("" for a run of one) whose resume cannot help
    unfinished: tuple[str, ...] | None = None  # a run of several: its unfinished languages
    done: Done = Done()


def decide(f: StepFacts) -> Step:
    """The run's next step: the one switch on its phase."""
    if f.phase is RunPhase.DONE:
        return f.done
    if f.phase is RunPhase.STUCK:
        return CancelThenResume(f.root, f.queued_ids, f.pending_reasons)
    if f.phase in (RunPhase.RUNNING, RunPhase.QUEUED):
        cancel = (CancelThenResume(f.root, f.queued_ids, cut=f.cut)
                  if f.cut and f.queued_ids and not f.failed_tasks else None)
        return Wait(f.phase, f.root, f.here, f.failed_tasks, f.failed_languages, cancel)
    if f.refusal is not None:
        return Resubmit(f.root, f.refusal)
    if f.unfinished is not None:
        return EachLanguage(f.root, "interrupted" if f.phase is RunPhase.INTERRUPTED else "failed", f.unfinished,
                            f.new_runs)
    if f.phase is RunPhase.FAILED:
        return (f.new_runs[0][1] if f.new_runs else f.slurm_resume or FixCause(f.root))
    return Resume(f.root, ("--executor", "local") if f.local else (), "interrupted")


def render(step: Step) -> str:
    """The words of a next step, the same wherever it is shown."""
    if isinstance(step, Resume):
        if step.after == "interrupted":
            return f"interrupted before the end (not a failure): to continue: {step.command()}"
        return f"{step.after}: {step.command()}" if step.after else step.command()
    if isinstance(step, FixCause):
        return f"failed: fix the cause named above, then {resume_command(step.root)}"
    if isinstance(step, CancelThenResume):
        return _render_cancel(step)
    if isinstance(step, Wait):
        return _render_wait(step)
    if isinstance(step, Resubmit):
        return _render_resubmit(step)
    if isinstance(step, NewRun):
        return _render_new_run(step)
    if isinstance(step, EachLanguage):
        return _render_languages(step)
    return (f"done: output at {step.out}" if step.out is not None else "done") + step.notes


def _render_cancel(step: CancelThenResume) -> str:
    """Stuck: why, then the scancel of its jobs and the resume with what fits; or the jobs left the queue."""
    if step.reasons:
        known = sorted({r.split(",")[0].strip() for r in step.reasons if is_stuck(r)})
        why = "; ".join(f"{r}: {STUCK_REASONS[r]}" for r in known)
        fix = "; ".join(f"for {r}: {STUCK_FIX[r]}" for r in known)
        cancel = command("scancel", *step.job_ids) if step.job_ids else "scancel the run's jobs"
        return (f"stuck: jobs pend for a reason that does not clear by itself ({why}). Cancel them and resume "
                f"with what fits:\n    {cancel}\n    {resume_command(step.root)} ...  ({fix})")
    return (f"but {plural(step.cut, 'task')} will not run (their jobs left the queue, e.g. scancel): the run cannot "
            f"finish as queued; {command('scancel', *step.job_ids)}, then {resume_command(step.root)}")


def _render_resubmit(step: Resubmit) -> str:
    n = len(step.refusal.get("cancelled", []))
    cancelled = f"the {plural(n, 'job')} it had queued {'was' if n == 1 else 'were'} cancelled, " if n else ""
    message = step.refusal.get("message", "")
    return (f"not queued: sbatch refused the last submission ({message}); {cancelled}nothing of it "
            f"runs. {refusal_next_step(step.root, message)}")


def _render_wait(step: Wait) -> str:
    text = step.phase.value + (" (an hplt-shard process is running or resuming it here)" if step.here else "")
    failed = ", ".join(step.failed_languages) or (plural(step.failed_tasks, "task") if step.failed_tasks else "")
    if failed:
        text += f"; failed so far: {failed} (after the jobs end: {resume_command(step.root)})"
    return text + (f"; {_render_cancel(step.cancel)}" if step.cancel is not None else "")


def _render_languages(step: EachLanguage) -> str:
    unfinished = ", ".join(step.unfinished)
    if step.brief:
        fresh = [lang for lang, _ in step.new_runs]
        return "; ".join(([f"fix the cause, then {resume_command(step.root)}"] if step.resumable else [])
                         + ([f"a resume cannot finish {', '.join(fresh)}: {status_command(step.root)} gives the new run"]
                            if fresh else []))
    if step.resumable:
        details = status_command(step.root / step.unfinished[0]) if len(step.unfinished) == 1 else \
            f"{status_command(step.root)}/LANG"
        head = f"{step.how}, unfinished ({unfinished}): {resume_command(step.root)}  (details: {details})"
    else:
        head = (f"{step.how}, unfinished ({unfinished}): a resume cannot finish "
                f"{'it' if len(step.unfinished) == 1 else 'them'}; the next step of each:")
    return "\n".join([head, *(f"{lang}: {_render_new_run(new)}" for lang, new in step.new_runs)])


def _render_new_run(step: NewRun) -> str:
    if step.kind is Kind.SHORT_INPUT:  # the refusal names the files and both ways on itself
        return f"stopped: {step.cause}"
    if step.kind is Kind.REPEATED_ID:
        return (f"stopped at a {step.cause}\n"
                "  --resume cannot go past it (it reads the same lines and refuses a changed input). Keep one "
                "of the two documents in the input, then start a new run:\n"
                f"    {step.fixed}")
    if step.kind is Kind.BROKEN_INPUT:
        return (f"stopped at an input that cannot be read to its end: {step.cause}\n"
                "  --resume cannot go past it (it reads the same file, and a repaired file is a changed input, "
                "which a resume refuses). Replace that file with a whole copy (fetch it again), then start a "
                f"new run:\n    {step.fixed}")
    return (f"stopped at a bad record (--bad-records fail): {step.cause}\n"
            "  --resume cannot go past it (it reads the same line, refuses a changed input, and --bad-records "
            "decides the content). Either fix that input file and start a new run:\n"
            f"    {step.fixed}\n"
            f"  or keep the input and set bad records aside (counted, kept verbatim in RUNDIR/quarantine/):\n"
            f"    {step.quarantine}")
