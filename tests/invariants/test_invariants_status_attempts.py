"""--status describes a task's last attempt only: an outcome record of an earlier attempt is never shown as its
end, a damaged or unreadable record is named (never a traceback), a task's own failure is never read as a Slurm
reason from its log's words, and an appended unit log shows the error of its last attempt. Runs made in process
(tests/inprocess.py)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from shard_pipeline.run import outcome
from shard_pipeline.run.outcome import Kind, UnitExit
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.tasklog import last_error_line
from tests.invariants.conftest import statuses


def finalize_log(run: RunDir, text: str) -> Path:
    log = run.local_log("finalize", 0)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text)
    return log


def exited(log: Path, start: float, returncode: int = 1) -> None:
    outcome.record_exit(log, UnitExit("finalize group 0", 0, returncode, start, start + 1, 0.1, 10.0,
                                      log.stat().st_size))


# ---------------------------------------------------------------------------- an earlier attempt's outcome


def test_an_outcome_older_than_the_units_last_start_is_not_its_end(written):
    ended = outcome.record(written, "finalize", 0, OSError("the earlier attempt's disk")).ended
    log = finalize_log(written, "ERROR: RuntimeError: this attempt\n")
    exited(log, ended - 10)  # the outcome is this attempt's own
    assert [f.last_line for f in statuses(written)["finalize"].failed] == ["ERROR: OSError: the earlier attempt's disk"]
    exited(log, ended + 1)  # this attempt started after it ended, and left none
    assert [f.last_line for f in statuses(written)["finalize"].failed] == ["ERROR: RuntimeError: this attempt"]


def multi(tmp_path: Path, monkeypatch, why: str | None):
    """landing.run_entry's surroundings for one unit of language `fin_Latn`: its run dir with a stale outcome."""
    from shard_pipeline.worker import landing

    lang = RunDir(tmp_path / "fin_Latn")
    (lang.root / "tasks").mkdir(parents=True)
    outcome.record(lang, "write", 0, OSError("an earlier attempt's cause"))
    monkeypatch.setattr(landing, "load", lambda root: SimpleNamespace(langs=("fin_Latn",)))
    monkeypatch.setattr(landing, "resolve", lambda root, stage, g: (lang.root, g))
    monkeypatch.setattr(landing, "upstream_problem", lambda run, stage: why)
    monkeypatch.setattr(landing, "next_steps", lambda m, causes: "--resume")
    return landing, lang


def test_a_unit_skipped_for_its_languages_earlier_stage_records_why(tmp_path, monkeypatch):
    landing, lang = multi(tmp_path, monkeypatch, "no plan.json: an earlier stage of this language failed")
    assert landing.run_entry("write", lambda r, t: None, tmp_path, [0]) == 1
    ended = outcome.read(lang, "write", 0)
    assert ended.kind is Kind.UPSTREAM and not ended.needs_new_run and "no plan.json" in ended.detail


def test_a_unit_runs_without_its_last_attempts_outcome(tmp_path, monkeypatch):
    landing, lang = multi(tmp_path, monkeypatch, None)
    seen = []
    assert landing.run_entry("write", lambda r, t: seen.append(outcome.read(r, "write", t)), tmp_path, [0]) == 0
    assert seen == [None] and outcome.read(lang, "write", 0).kind is Kind.OK


@pytest.mark.parametrize("fails", [False, True])
def test_a_language_finalized_by_its_last_write_unit_has_finalizes_outcome(tmp_path, monkeypatch, fails):
    from shard_pipeline.worker import landing

    run = RunDir(tmp_path)
    (run.root / "tasks").mkdir()
    outcome.record(run, "finalize", 0, OSError("an earlier attempt's cause"))
    monkeypatch.setattr(landing, "written", lambda r: True)

    def finalize(r):
        assert outcome.read(r, "finalize", 0) is None  # forgotten before it runs
        if fails:
            raise ValueError("finalize failed here")
        return {"rows": 3}
    assert landing.land_if_written(run, finalize) is not fails
    ended = outcome.read(run, "finalize", 0)
    assert (ended.kind, ended.error_type) == ((Kind.FAILED, "ValueError") if fails else (Kind.OK, ""))


def test_a_task_refused_before_it_starts_forgets_its_last_outcome(tmp_path):
    from shard_pipeline.worker import task

    run = RunDir(tmp_path)
    (run.root / "tasks").mkdir()
    outcome.record(run, "plan", 0, OSError("an earlier attempt's cause"))
    run.run_json.write_text("{not json")
    assert task.main(["plan", str(tmp_path)]) == 1  # an unreadable run.json: refused, and this attempt's refusal recorded
    assert outcome.read(run, "plan", 0).kind is Kind.REFUSED
    run.run_json.unlink()  # no run.json: not a run dir hplt-shard made, so nothing is written in it
    assert task.main(["plan", str(tmp_path)]) == 1 and not run.outcome("plan", 0).exists()
    (run.root / "tasks").rename(run.root / "elsewhere")
    assert task.main(["plan", str(tmp_path)]) == 1 and not (run.root / "tasks").exists()


# ---------------------------------------------------------------------------- damaged and unreadable records


GOOD = {"stage": "finalize", "task": 0, "kind": "failed", "detail": "disk", "ended": 1.7e9, "error_type": "OSError",
        "figures": {"wall_s": 1.0, "cpu_s": 0.5, "max_rss_bytes": 1000}}


@pytest.mark.parametrize("text", [
    json.dumps({**GOOD, "figures": {**GOOD["figures"], "wall_s": float("nan")}}),
    json.dumps({**GOOD, "figures": {**GOOD["figures"], "cpu_s": float("inf")}}),
    json.dumps(GOOD).replace('"max_rss_bytes": 1000', '"max_rss_bytes": 1e400'),
    json.dumps({**GOOD, "ended": 10 ** 400}),
    json.dumps({**GOOD, "ended": -1.0}),
    json.dumps({**GOOD, "task": 1}),  # another task's record
    json.dumps({**GOOD, "stage": "write"}),
])
def test_a_damaged_outcome_is_no_record_never_a_traceback(written, text):
    written.outcome("finalize", 0).write_text(text)
    with pytest.raises(outcome.DamagedOutcome):
        outcome.read(written, "finalize", 0)
    assert outcome.failures(written) == []
    exited(finalize_log(written, "ERROR: RuntimeError: from the log\n"), 1.0)  # its group saw it end
    assert [f.last_line for f in statuses(written)["finalize"].failed] == ["ERROR: RuntimeError: from the log"]


@pytest.mark.parametrize("field,value", [("start", float("nan")), ("end", 1e300), ("cpu_s", float("inf")),
                                         ("wrote_bytes", 10 ** 400), ("returncode", True)])
def test_a_damaged_exit_record_is_no_record(written, field, value):
    log = finalize_log(written, "ERROR: RuntimeError: from the log\n")
    now = time.time()
    data = {"label": "finalize group 0", "unit": 0, "returncode": -9, "start": now, "end": now, "cpu_s": 0.0,
            "max_rss_mib": 1.0, "wrote_bytes": 0, field: value}
    outcome.exit_path(log).write_text(json.dumps(data))
    assert outcome.read_exit(log) is None
    statuses(written)  # no traceback


def test_an_unreadable_outcome_record_is_reported_as_unread(written, monkeypatch):
    outcome.record(written, "finalize", 0, OSError("disk"))
    real = outcome.read_json

    def refused(path):
        if path.name.endswith(".outcome.json"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)
    monkeypatch.setattr(outcome, "read_json", refused)
    assert statuses(written)["finalize"].unread == {0: written.outcome("finalize", 0)}


# ---------------------------------------------------------------------------- Slurm's reasons


def slurm_run(run: RunDir) -> None:
    """run.json as if the last submission queued Slurm jobs (job 900, which left no log of its own)."""
    record = json.loads(run.run_json.read_text())
    record["submissions"].append({"kind": "resume", "jobs": [{"stage": "finalize", "job_id": "900", "offset": 0}]})
    run.run_json.write_text(json.dumps(record))


def test_a_task_that_failed_by_itself_has_no_slurm_reason(written):
    outcome.record(written, "finalize", 0, OSError("fetch failed: TimeoutError: timed out"))
    finalize_log(written, "ERROR: OSError: fetch failed: TimeoutError: timed out\n")
    assert [f.reason for f in statuses(written)["finalize"].failed] == [None]  # local
    slurm_run(written)
    assert [f.reason for f in statuses(written)["finalize"].failed] == [None]  # Slurm, but its outcome says why
    outcome.forget(written, "finalize", 0)  # killed from outside: Slurm's words in its log say why
    finalize_log(written, "slurmstepd: error: *** JOB 900 ON n1 CANCELLED AT 2026-12-07T10:00:00 DUE TO TIME LIMIT ***\n")
    assert [f.reason for f in statuses(written)["finalize"].failed] == ["TIMEOUT"]


def test_a_group_units_slurm_reason_is_its_groups(tmp_path, monkeypatch):
    from shard_pipeline.run import queue

    asked = []

    class Answer:
        stdout, stderr, returncode = "TIMEOUT\n", "", 0
    monkeypatch.setattr(queue.shutil, "which", lambda name: "/usr/bin/sacct")
    unit = tmp_path / "900_3.unit7.log"
    unit.write_text("ERROR: OSError: Timeout while reading\n")
    assert queue.slurm_reason(unit, run=lambda argv, **kw: asked.append(argv) or Answer()) == "TIMEOUT"
    assert asked[0][asked[0].index("-j") + 1] == "900_3"
    monkeypatch.setattr(queue.shutil, "which", lambda name: None)
    assert queue.slurm_reason(unit) is None  # the unit's own words are no Slurm reason
    (tmp_path / "900_3.log").write_text("slurmstepd: error: Detected 1 oom_kill event in StepId=900_3.batch\n")
    assert queue.slurm_reason(unit) == "OUT_OF_MEMORY"


# ---------------------------------------------------------------------------- a unit log's last attempt


def test_an_appended_unit_log_shows_its_last_attempts_error(tmp_path):
    log = tmp_path / "900_0.unit1.log"
    first = UnitExit("write group 0", 1, 1, 100.0, 101.0, 0.1, 10.0, 30)
    log.write_text("ERROR: OSError: first attempt\n" + f"# {first.line()}\n")
    second = "rerun line\nERROR: ValueError: second attempt\n"
    with open(log, "a") as f:
        f.write(second)
    ended = UnitExit("write group 0", 1, 1, 200.0, 201.0, 0.1, 10.0, len(second))
    with open(log, "a") as f:
        f.write(f"# {ended.line()}\n")
    outcome.record_exit(log, ended)
    assert last_error_line(log) == "ERROR: ValueError: second attempt"
    killed = UnitExit("write group 0", 1, -9, 300.0, 301.0, 0.1, 10.0, 0)
    with open(log, "a") as f:
        f.write(f"# {killed.line()}\n")
    outcome.record_exit(log, killed)  # the third attempt wrote nothing: its own end, not the earlier errors
    assert last_error_line(log).startswith("killed by SIGKILL")


def test_a_languages_error_line_is_its_own(tmp_path):
    log = tmp_path / "local_0.log"
    log.write_text("ERROR: fin_Latn: OSError: disk\nERROR: write failed for two\nERROR: eng_Latn: ValueError: bad\n")
    assert last_error_line(log, "fin_Latn") == "ERROR: fin_Latn: OSError: disk"
    assert "eng_Latn" not in last_error_line(log, "swe_Latn")
