"""--status reads how a task's last attempt ended, and what it used, from typed records (run/outcome.py: the
task's outcome record, and the exit record its group writes beside its log), never from its log's text: a log
edited to say something else changes nothing. Runs made in process (tests/inprocess.py)."""
from __future__ import annotations

import time

from shard_pipeline.input.failures import RepeatedId
from shard_pipeline.run import outcome
from shard_pipeline.run.outcome import Kind, TaskFigures, UnitExit
from shard_pipeline.run.rundir import RunDir
from tests.invariants.conftest import statuses

FIGURES = [TaskFigures(61.0, 50.0, 812_000_000), TaskFigures(3725.0, 70.0, 90_500_000)]


def finished_with(run: RunDir, monkeypatch, stage: str, figures: list[TaskFigures]) -> None:
    """Each task of `stage` ended well, measuring `figures[task]`, and logged a figures line saying otherwise."""
    for task, fig in enumerate(figures):
        monkeypatch.setattr(outcome, "own_figures", lambda fig=fig: fig)
        outcome.record(run, stage, task, None)
        log = run.local_log(stage, task)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"2026-12-02T19:20:01 {stage} task {task} figures: wall 1.0 s, cpu 1.0 s, max rss 1.0 MB\n")


def test_figures_come_from_the_outcome_records(written, monkeypatch):
    finished_with(written, monkeypatch, "write", FIGURES)
    assert statuses(written)["write"].figures == FIGURES
    outcome.forget(written, "write", 1)  # a task done by its receipts but with no outcome: no figures, no guess
    assert statuses(written)["write"].figures == FIGURES[:1]


def test_a_damaged_outcome_record_counts_as_none(written, monkeypatch):
    finished_with(written, monkeypatch, "write", FIGURES)
    written.outcome("write", 0).write_text('{"stage": "write", "task": 0, "kind": "ok"}')
    written.outcome("write", 1).write_text("{not json")
    assert statuses(written)["write"].figures == []


def failed_finalize(run: RunDir, exc: BaseException | None, log_text: str) -> None:
    if exc is not None:
        outcome.record(run, "finalize", 0, exc)
    log = run.local_log("finalize", 0)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(log_text)


def test_the_failed_line_is_the_outcome_records_error_whatever_the_log_says(written):
    failed_finalize(written, RepeatedId("repeated document id 'a'"), "ERROR: OSError: something else entirely\n")
    [failed] = statuses(written)["finalize"].failed
    ended = outcome.read(written, "finalize", 0)
    assert ended.kind is Kind.REPEATED_ID and failed.last_line == ended.error_line()
    assert ended.error_type == "RepeatedId" and ended.detail == "repeated document id 'a'"


def test_a_failure_record_keeps_a_task_failed_and_without_any_record_it_is_orphaned(written):
    """A local task that no process runs and that left neither an outcome nor an exit record lost its
    submitter (interrupted); its own failure record keeps it failed, whatever its log holds."""
    failed_finalize(written, OSError("disk on fire"), "just a line\n")
    assert [f.task for f in statuses(written)["finalize"].failed] == [0]
    outcome.forget(written, "finalize", 0)
    st = statuses(written)["finalize"]
    assert (st.failed, st.interrupted) == ([], [0])


def test_a_unit_killed_by_a_signal_is_failed_by_its_exit_record(written):
    failed_finalize(written, None, "")
    log = written.local_log("finalize", 0)
    now = time.time()
    outcome.record_exit(log, UnitExit("finalize group 0", 0, -9, now - 5, now, 1.0, 100.0, 0))
    [failed] = statuses(written)["finalize"].failed
    assert failed.last_line.startswith("killed by SIGKILL (signal 9)")
    assert outcome.read_exit(log) == UnitExit("finalize group 0", 0, -9, now - 5, now, 1.0, 100.0, 0)


def test_a_task_that_ended_well_but_whose_files_are_gone_is_said_so_by_its_record(written, monkeypatch):
    finished_with(written, monkeypatch, "write", FIGURES)
    written.write_receipt(0).unlink()
    [failed] = statuses(written)["write"].failed
    assert failed.task == 0 and failed.last_line.startswith("it finished, but ")
    outcome.forget(written, "write", 0)  # the log's figures line alone says nothing of how it ended: orphaned
    st = statuses(written)["write"]
    assert (st.failed, st.interrupted) == ([], [0])
