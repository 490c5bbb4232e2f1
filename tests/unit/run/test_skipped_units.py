"""A unit that skipped because an earlier stage of its language is not done (outcome kind UPSTREAM) is a
consequence, not a cause: the language's phase and next step follow the cause (interrupted: resume; a real
failure of an earlier unit: failed, naming that unit's stage)."""
from __future__ import annotations

from pathlib import Path

from shard_pipeline.run.outcome import Kind
from shard_pipeline.run.render import cell, only_skipped, skipped_lines, task_list
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.runstate import RunPhase
from shard_pipeline.run.stage_status import FailedTask, StageStatus, counts, language_state
from shard_pipeline.run.steps import FixCause, Resume, StepFacts, decide


def _stages(tmp_path: Path, partition_failed: Kind | None) -> list[StageStatus]:
    """partition: task 0 done, task 1 scancelled (or failed by itself with `partition_failed`); plan, write and
    finalize ran after it (afterany) and skipped: UPSTREAM."""
    log = tmp_path / "x.log"
    part = StageStatus("partition", 2, done=1, unfinished=[1])
    if partition_failed is None:
        part.interrupted.append(1)
    else:
        part.failed.append(FailedTask(1, log, "ERROR: boom", kind=partition_failed))
    skipped = [StageStatus(stage, 1, failed=[FailedTask(0, log, "ERROR: upstream", kind=Kind.UPSTREAM)], unfinished=[0])
               for stage in ("plan", "write", "finalize")]
    return [part, *skipped]


def _phase_and_step(tmp_path: Path, sts: list[StageStatus]):
    phase, _word = language_state(RunDir(tmp_path), sts, chain_alive=False)
    return phase, decide(StepFacts(tmp_path, phase, failed_tasks=counts(sts).failed))


def test_units_skipped_after_an_interruption_leave_the_language_interrupted(tmp_path):
    sts = _stages(tmp_path, None)
    c = counts(sts)
    assert (c.failed, c.skipped, c.interrupted) == (0, 3, 1)
    phase, step = _phase_and_step(tmp_path, sts)
    assert phase is RunPhase.INTERRUPTED
    assert isinstance(step, Resume) and step.after == "interrupted"


def test_units_skipped_after_a_real_failure_leave_the_language_failed_by_it(tmp_path):
    sts = _stages(tmp_path, Kind.FAILED)
    assert (counts(sts).failed, counts(sts).skipped) == (1, 3)
    phase, word = language_state(RunDir(tmp_path), sts, chain_alive=False)
    assert phase is RunPhase.FAILED and word == "failed (partition)"
    assert isinstance(_phase_and_step(tmp_path, sts)[1], FixCause)


def test_skipped_units_are_said_once_per_stage_naming_the_first_unfinished_stage(tmp_path):
    """The one golden text of the SKIPPED family: a consequence, not a FAILED line per unit."""
    sts = _stages(tmp_path, Kind.FAILED)
    assert skipped_lines(sts, "swe_Latn ") == [
        f"SKIPPED swe_Latn {stage} task 0: partition task 1 not done (the next step runs it)"
        for stage in ("plan", "write", "finalize")]
    assert [(st.stage, len(st.causes()), st.skipped()) for st in sts] == [
        ("partition", 1, []), ("plan", 0, [0]), ("write", 0, [0]), ("finalize", 0, [0])]
    assert [cell(st) for st in sts] == ["1/2 1F", "0/1", "0/1", "0/1"]


def test_a_failed_task_that_only_skipped_is_not_a_cause_of_the_end_of_run(tmp_path):
    sts = {"swe_Latn": _stages(tmp_path, Kind.FAILED), "fin_Latn": _stages(tmp_path, None)}
    assert only_skipped("finalize", [("swe_Latn", 0), ("fin_Latn", 0)], sts)  # a single job over both
    assert not only_skipped("partition", [("swe_Latn", 1)], sts)
    assert not only_skipped("partition", [("fin_Latn", 1)], sts)  # interrupted: neither skipped nor a cause


def test_task_numbers_are_listed_in_runs():
    assert task_list([3]) == "task 3"
    assert task_list([9, 0, 1, 2, 5, 7, 8]) == "tasks 0-2, 5, 7-9"
    assert task_list(list(range(0, 40, 2))).endswith(", 18 ...")
