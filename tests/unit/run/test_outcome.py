"""A task's outcome record: what its last attempt ended with, typed, and the next step decided from it
(never from a log's text)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shard_pipeline.files import write_json_atomic
from shard_pipeline.input.failures import BadRecord, CorruptShard, RepeatedId
from shard_pipeline.run import outcome
from shard_pipeline.run.next_step import new_run
from shard_pipeline.run.outcome import DamagedOutcome, Kind, kind_of
from shard_pipeline.run.records import OtherCode, Problem, Why
from shard_pipeline.run.rundir import RunDir


def test_each_failure_has_its_kind():
    assert kind_of(BadRecord("/c/eng/1.jsonl.zst", 7, "not_json", "x")) is Kind.BAD_RECORD
    assert kind_of(RepeatedId("repeated document id 'a'")) is Kind.REPEATED_ID
    assert kind_of(CorruptShard("/c/eng/1.jsonl.zst", 3, "truncated", "cut")) is Kind.BROKEN_INPUT
    # an HTTP body cut short may come whole next time: a resume fetches it again
    assert kind_of(CorruptShard("https://h/eng/1.jsonl.zst", 3, "truncated", "cut")) is Kind.FAILED
    assert kind_of(CorruptShard("/c/eng/1.jsonl.zst", 3, "short_read", "cut")) is Kind.FAILED
    assert kind_of(OSError("disk full")) is Kind.FAILED
    assert kind_of(OtherCode(Problem(Why.OTHER_CODE, Path("/r"), "code 1; this code is 2"))) is Kind.REFUSED
    from shard_pipeline.input.index_check import InputShorterThanIndex
    assert kind_of(InputShorterThanIndex([], Path("/i/eng_Latn.tsv"), "fetch it again")) is Kind.SHORT_INPUT
    assert {k for k in Kind if k in outcome.NEEDS_NEW_RUN} == {Kind.BAD_RECORD, Kind.REPEATED_ID, Kind.BROKEN_INPUT,
                                                               Kind.SHORT_INPUT}


def test_an_outcome_is_written_read_back_and_forgotten_when_a_new_attempt_starts(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "tasks").mkdir()
    written = outcome.record(run, "partition", 2, BadRecord("/c/1.jsonl.zst", 7, "not_json", "x"))
    assert outcome.read(run, "partition", 2) == written and written.needs_new_run
    assert outcome.failures(run) == [written]
    outcome.forget(run, "partition", 2)
    assert outcome.read(run, "partition", 2) is None
    ok = outcome.record(run, "partition", 2, None)
    assert ok.kind is Kind.OK and outcome.failures(run) == []
    assert outcome.read(run, "partition", 2).figures == ok.figures and ok.figures.max_rss_bytes > 0
    run.outcome("write", 1).write_text(json.dumps(GOOD))
    assert outcome.read(run, "write", 1).figures.max_rss_bytes == 1000


GOOD = {"stage": "write", "task": 1, "kind": "ok", "detail": "", "ended": 1.0, "error_type": "",
        "figures": {"wall_s": 1.0, "cpu_s": 0.5, "max_rss_bytes": 1000}}


@pytest.mark.parametrize("data", [[], {**GOOD, "task": "1"}, {**GOOD, "kind": "exploded"}, {**GOOD, "figures": None},
                                  {**GOOD, "figures": {**GOOD["figures"], "max_rss_bytes": "1000"}},
                                  {k: v for k, v in GOOD.items() if k != "error_type"}])
def test_a_damaged_or_mistyped_outcome_is_named_not_a_traceback(tmp_path, data):
    run = RunDir(tmp_path)
    (tmp_path / "tasks").mkdir()
    run.outcome("write", 1).write_text(json.dumps(data))
    with pytest.raises(DamagedOutcome, match=str(run.outcome("write", 1))):
        outcome.read(run, "write", 1)
    run.outcome("write", 1).write_text("{not json")
    with pytest.raises(DamagedOutcome):
        outcome.read(run, "write", 1)


def _run(tmp_path: Path, bad_records: str) -> RunDir:
    """The records new_run reads: config.json's content and OUT, run.json's command line, RUNDIR's run.json
    (its --out is the language's OUT)."""
    run = RunDir(tmp_path / "run" / "eng_Latn")
    (run.root / "tasks").mkdir(parents=True)
    write_json_atomic(run.root.parent / "run.json", {"out_is_root": False})
    write_json_atomic(run.config_json, {"content": {"bad_records": bad_records},
                                        "execution": {"out": str(tmp_path / "out")}})
    write_json_atomic(run.run_json, {"argv": ["hplt-shard", "eng_Latn", "--out", str(tmp_path / "out"),
                                              "--bad-records", bad_records], "executor": "local", "submissions": []})
    return run


@pytest.mark.parametrize("exc,bad_records,new_run_expected", [
    (BadRecord("/c/1.jsonl.zst", 7, "not_json", "x"), "fail", True),
    (BadRecord("/c/1.jsonl.zst", 7, "not_json", "x"), "quarantine", False),  # not a stop of --bad-records fail
    (RepeatedId("repeated document id 'a'"), "quarantine", True),
    (CorruptShard("/c/1.jsonl.zst", 3, "truncated", "cut"), "fail", True),
    (OSError("No space left on device"), "fail", False),  # fix the cause, then --resume
])
def test_the_next_step_comes_from_the_outcome_kind(tmp_path, exc, bad_records, new_run_expected):
    run = _run(tmp_path, bad_records)
    failed = [outcome.record(run, "partition", 0, exc)]
    step = new_run(run, failed)
    assert (step is not None) == new_run_expected
    if step is not None:
        assert step.kind is failed[0].kind and step.cause == str(exc)
        assert step.fixed.endswith(f"--run-dir {run.root.parent}-fixed")  # a new run dir, never this one again
        assert (step.quarantine is not None) == (step.kind is Kind.BAD_RECORD)
    # the same decision when new_run reads the records itself
    assert (new_run(run) is not None) == new_run_expected


def test_a_log_that_says_bad_record_decides_nothing(tmp_path):
    """Only the outcome record is read: a log line that looks like a failure is no outcome."""
    run = _run(tmp_path, "fail")
    (run.root / "logs").mkdir()
    (run.root / "logs" / "partition.log").write_text("ERROR: BadRecord: /c/1.jsonl.zst:7: not_json: x\n")
    assert new_run(run, []) is None and new_run(run) is None

