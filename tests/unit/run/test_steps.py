"""The next step of a run is decided once (steps.decide) from its facts; tests assert on the typed value,
with one golden text per family of step messages (the others are in test_runstate.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from shard_pipeline.run.outcome import Kind
from shard_pipeline.run.runstate import RunPhase
from shard_pipeline.run.steps import (
    CancelThenResume,
    Done,
    EachLanguage,
    FixCause,
    NewRun,
    Resubmit,
    Resume,
    StepFacts,
    Wait,
    decide,
    render,
)

ROOT = Path("/runs/r")
NEW = NewRun(Kind.REPEATED_ID, "repeated document id 'a'", "./hplt-shard x --run-dir /runs/r-fixed")


@pytest.mark.parametrize("facts,step", [
    (StepFacts(ROOT, RunPhase.DONE, done=Done(Path("/out"))), Done(Path("/out"))),
    (StepFacts(ROOT, RunPhase.STUCK, pending_reasons=("PartitionConfig",), queued_ids=("7",)),
     CancelThenResume(ROOT, ("7",), ("PartitionConfig",))),
    (StepFacts(ROOT, RunPhase.RUNNING, failed_tasks=2), Wait(RunPhase.RUNNING, ROOT, failed_tasks=2)),
    (StepFacts(ROOT, RunPhase.RUNNING, failed_tasks=2, failed_languages=("de",)),
     Wait(RunPhase.RUNNING, ROOT, failed_tasks=2, failed_languages=("de",))),
    (StepFacts(ROOT, RunPhase.QUEUED, queued_ids=("7",), cut=3),
     Wait(RunPhase.QUEUED, ROOT, cancel=CancelThenResume(ROOT, ("7",), cut=3))),
    (StepFacts(ROOT, RunPhase.RUNNING, here=True), Wait(RunPhase.RUNNING, ROOT, here=True)),
    (StepFacts(ROOT, RunPhase.INTERRUPTED, refusal={"message": "m"}), Resubmit(ROOT, {"message": "m"})),
    (StepFacts(ROOT, RunPhase.FAILED, failed_tasks=1, new_runs=(("", NEW),)), NEW),
    (StepFacts(ROOT, RunPhase.FAILED, failed_tasks=1, slurm_resume=Resume(ROOT, ("--mem", "8G"), "failed")),
     Resume(ROOT, ("--mem", "8G"), "failed")),
    (StepFacts(ROOT, RunPhase.FAILED, failed_tasks=1), FixCause(ROOT)),
    (StepFacts(ROOT, RunPhase.INTERRUPTED, local=True), Resume(ROOT, ("--executor", "local"), "interrupted")),
    (StepFacts(ROOT, RunPhase.INTERRUPTED), Resume(ROOT, (), "interrupted")),
    (StepFacts(ROOT, RunPhase.FAILED, failed_tasks=1, failed_languages=("de",), new_runs=(("de", NEW),), unfinished=("de", "fr")),
     EachLanguage(ROOT, "failed", ("de", "fr"), (("de", NEW),))),
    (StepFacts(ROOT, RunPhase.INTERRUPTED, unfinished=("fr",)), EachLanguage(ROOT, "interrupted", ("fr",))),
])
def test_the_next_step_is_one_decision_over_the_runs_facts(facts, step):
    assert decide(facts) == step


def test_a_failed_language_that_needs_a_new_run_is_not_resumable():
    step = EachLanguage(ROOT, "failed", ("de", "fr"), (("de", NEW),))
    assert step.resumable == ("fr",)


def test_a_run_that_still_runs_says_what_failed_so_far_and_the_resume_after():
    """Golden text of the waiting family."""
    assert render(Wait(RunPhase.RUNNING, ROOT, failed_tasks=2)) == (
        "running; failed so far: 2 tasks (after the jobs end: ./hplt-shard --resume /runs/r)")
    assert render(Wait(RunPhase.QUEUED, ROOT, failed_tasks=2, failed_languages=("de", "fr"))) == (
        "queued; failed so far: de, fr (after the jobs end: ./hplt-shard --resume /runs/r)")
    assert render(Wait(RunPhase.QUEUED, ROOT, cancel=CancelThenResume(ROOT, ("7", "8"), cut=3))) == (
        "queued; but 3 tasks will not run (their jobs left the queue, e.g. scancel): the run cannot finish as "
        "queued; scancel 7 8, then ./hplt-shard --resume /runs/r")


def test_a_run_of_several_names_the_resume_and_each_new_run():
    """Golden text of the languages family: in full (--status, the executor) and in one line (a landing's log)."""
    step = EachLanguage(ROOT, "failed", ("de", "fr"), (("de", NEW),))
    assert render(step).splitlines()[0] == ("failed, unfinished (de, fr): ./hplt-shard --resume /runs/r  "
                                            "(details: ./hplt-shard --status /runs/r/LANG)")
    assert render(step).splitlines()[1] == "de: stopped at a repeated document id 'a'"
    assert render(EachLanguage(ROOT, "failed", ("de", "fr"), (("de", NEW),), brief=True)) == (
        "fix the cause, then ./hplt-shard --resume /runs/r; "
        "a resume cannot finish de: ./hplt-shard --status /runs/r gives the new run")
