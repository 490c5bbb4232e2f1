"""A unit that skipped because an earlier stage of its language is not done (outcome kind UPSTREAM) is a
consequence, not a cause: the language's phase and next step follow the cause (interrupted: resume; a real
failure of an earlier unit: failed, naming that unit's stage)."""
from __future__ import annotations

from pathlib import Path

from shard_pipeline.run.outcome import Kind
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.runstate import RunPhase
from shard_pipeline.run.stage_status import FailedTask, StageStatus, counts, language_state
from shard_pipeline.run.steps import FixCause, Resume, StepFacts, decide


def _stages(tmp_path: Path, partition_failed: Kind | None) -> list[StageStatus]:
    """partition: task 0 done, task 1 scancelled (or failed by itself with `partition_failed`); plan, write and
    finalize ran after it (afterany) and skipped: UPSTREAM."""
    log = tmp_path / "x.log"
    part = StageStatus("partition", 2, done=1)
    if partition_failed is None:
        part.interrupted.append(1)
    else:
        part.failed.append(FailedTask(1, log, "ERROR: boom", kind=partition_failed))
    skipped = [StageStatus(stage, 1, failed=[FailedTask(0, log, "ERROR: upstream", kind=Kind.UPSTREAM)])
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
