"""How a run of several languages runs its units: one language's failure never stops the others,
and each language lands as soon as its last write unit is done.

Every stage after the first waits with afterany, so a unit whose language has an unfinished
earlier stage says so and fails at once (`upstream_problem`), and `--resume RUNDIR` redoes it.
A write unit that ends well finalizes its language when every write unit of that language is
done (`land_if_written`); the finalize job at the end of the chain only takes what is left.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from shard_pipeline.commands import command
from shard_pipeline.errors import ExitCode
from shard_pipeline.run import live, outcome
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.worker.taskcmd import task_argv
from shard_pipeline.run.unit_table import UnitTable, load, resolve, selected

LANG_ENV = "HPLT_SHARD_LANG"  # set while a unit runs: fault injection can aim at one language


def upstream_problem(run: RunDir, stage: str) -> str | None:
    """Why a unit cannot start because an earlier stage of its language is unfinished, by the registry's done
    rule (the one --status and --resume apply): its plan, or a unit of the stage before, is not done."""
    from shard_pipeline.run.registry import RunState
    from shard_pipeline.run.registry import stage as registered

    # A file whose ctime alone changed (a chmod -R of a shared run dir) counts by size and mtime, as in --status:
    # the stage that reads it re-hashes it anyway, and a gate reading every byte would cost a whole re-read.
    state = RunState(run, rehash=False, trust_touched=True)
    if stage in ("write", "finalize") and state.plan is None:
        return "no plan.json: an earlier stage of this language failed"
    if stage in ("plan", "finalize"):
        before = registered("partition" if stage == "plan" else "write")
        problems = {t: p for t in range(before.tasks(state.cfg)) if (p := before.problem(state, t)) is not None}
        if problems:
            first = next(iter(problems.values()))
            return f"{before.name} task(s) {', '.join(map(str, list(problems)[:10]))} not done ({first})"
    return None


def run_entry(stage: str, fn: Callable[[RunDir, int], Any], rundir: Path, units: Sequence[int],
              finalize: Callable[[RunDir], Any] | None = None) -> int:
    """Run these global units of a multi-language run in turn; 1 if any failed (the others still ran).

    `finalize` (given for write): a language whose last write unit this was lands right here."""
    m = load(rundir)
    failed: list[str] = []
    causes: dict[str, str] = {}
    for g in units:
        lang_dir, task = resolve(rundir, stage, g)
        run, lang = RunDir(lang_dir), lang_dir.name
        alone = task_argv(stage, run.root, task)
        print(f"# unit {g} = {lang} {stage} task {task}; this unit alone: {command(*alone)}", flush=True)
        if stage == "finalize" and run.done_marker.exists():
            print(f"# {lang} landed before (its last write unit finalized it), skipped", flush=True)
            continue
        outcome.forget(run, stage, task)  # this attempt's end is not known yet, whichever way it goes
        why = upstream_problem(run, stage)
        if why:
            causes[lang] = f"{stage} task {task} skipped: {why}"
            outcome.record(run, stage, task, outcome.UpstreamUnfinished(causes[lang]))
            print(f"ERROR: {lang}: {causes[lang]}", file=sys.stderr, flush=True)
            failed.append(lang)
            continue
        os.environ[LANG_ENV] = lang
        try:
            with live.recorded(run.root, stage, task):  # the language's --status and --resume see it alive
                result = fn(run, task)
            outcome.record(run, stage, task, None)
            print(f"# {lang} {stage} task {task} done: {result}", flush=True)
        except Exception as exc:  # one language's failure must not stop the others
            outcome.record(run, stage, task, exc)
            causes[lang] = f"{type(exc).__name__}: {exc}"
            print(f"ERROR: {lang}: {causes[lang]}", file=sys.stderr, flush=True)
            failed.append(lang)
            continue
        else:
            if finalize is not None:
                land_if_written(run, finalize)
        finally:
            os.environ.pop(LANG_ENV, None)
    if failed:
        print(f"ERROR: {stage} failed for {', '.join(sorted(set(failed)))} ("
              + "; ".join(f"{l}: {causes[l][:300]}" for l in sorted(causes)) + "); "
              + ("the other languages went on; " if len(m.langs) > 1 else "") + next_steps(m, causes), file=sys.stderr, flush=True)
        return ExitCode.FAILED
    return ExitCode.OK


def next_steps(m: UnitTable, causes: dict[str, str]) -> str:
    """What comes next for the failed languages (run/next_step.py each_language, rendered in one line): the
    exact --resume for those a resume finishes, and --status for those it cannot, which names the new run."""
    from shard_pipeline.run.next_step import each_language
    from shard_pipeline.run.steps import render

    return render(each_language(m.root, {lang: m.lang_dir(lang) for lang in sorted(causes)}, brief=True))


def written(run: RunDir) -> bool:
    """Every write unit of this language is done by the registry's rule (receipts agree with their files)."""
    from shard_pipeline.run.registry import RunState
    from shard_pipeline.run.registry import stage as registered

    state, write = RunState(run, rehash=False), registered("write")
    return state.plan is not None and all(write.problem(state, t) is None for t in range(write.tasks(state.cfg)))


def land_if_written(run: RunDir, finalize: Callable[[RunDir], Any]) -> bool:
    """Finalize this language now if its write units are all done; True when it landed here.

    Under the language's land lock, so two write units finishing together finalize it once (the
    second sees DONE). A finalize that fails here leaves the language to the finalize job at the
    end of the chain, which retries it and names it with the --resume command: the write unit
    itself has succeeded (its receipt holds), so its exit status stays 0.
    """
    from filelock import FileLock

    try:
        with FileLock(str(run.land_lock)):  # held by a live process only (flock): never a stale lock
            if run.done_marker.exists() or not written(run):
                return False
            print(f"# {run.root.name}: every write unit is done: finalizing it now", flush=True)
            result = _finalize(run, finalize)
    except Exception as exc:  # the lock, the check or finalize itself
        print(f"WARNING: {run.root.name}: finalize after its last write unit failed ({type(exc).__name__}: "
              f"{str(exc)[:300]}); the finalize job of this run tries it again", file=sys.stderr, flush=True)
        return False
    print(f"# {run.root.name} landed: {result.get('rows') if isinstance(result, dict) else result} rows in place",
          flush=True)
    return True


def _finalize(run: RunDir, finalize: Callable[[RunDir], Any]) -> Any:
    """Finalize the language as its finalize task would: its outcome record forgotten first, then written."""
    outcome.forget(run, "finalize", 0)
    try:
        with live.recorded(run.root, "finalize", 0):
            result = finalize(run)
    except Exception as exc:
        outcome.record(run, "finalize", 0, exc)
        raise
    outcome.record(run, "finalize", 0, None)
    return result


def run_task(stage: str, entry: Callable[..., Any], finalize: Callable[[RunDir], Any], rundir: Path, index: int,
             array: bool) -> int:
    """One unit of a run of several languages (`--task G` names one global unit, as by hand), or a single
    job's selected languages in turn."""
    units = [index] if array else selected(rundir, stage)
    fn = (lambda r, t: entry(r, t)) if array else (lambda r, t: entry(r))
    return run_entry(stage, fn, rundir, units, finalize if stage == "write" else None)
