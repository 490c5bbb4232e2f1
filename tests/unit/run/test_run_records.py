"""Every run-dir record is typed and bound to what made it (run/records.py): an edited config, another run's
partition/, another code version, an edited receipt, a damaged index and a wrong type each end in one named
refusal or a redo, never `done` over wrong data and never a traceback.

The run dirs are made by the code's own writers: a local submission whose executor is not started, then each
stage's function in this process, as its task would call it.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from shard_pipeline.run import codeversion
from shard_pipeline.run.next_step import check_this_version
from shard_pipeline.run.receipts import PartitionReceipt, Plan, WriteReceipt
from shard_pipeline.run.records import (
    DamagedRunFile,
    Made,
    Problem,
    RecordRefused,
    Why,
    made_here,
    read_record,
)
from shard_pipeline.run.typed import WrongType, parse_as
from shard_pipeline.run.registry import STAGES, RunState
from shard_pipeline.run.resume import plan_resume
from shard_pipeline.run.runconfig import load_config
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.run.view import report
from shard_pipeline.run.stage_status import stage_statuses
from shard_pipeline.stages.finalize import FinalizeError, run_finalize
from shard_pipeline.stages.partition import run_partition
from shard_pipeline.stages.plan import run_plan
from shard_pipeline.stages.spill import read_arrow
from shard_pipeline.stages.write import run_write
from shard_pipeline.submit import cli, launch
from tests.pipeline_util import lang_dir, LANG, LICENSE, make_corpus

STAGE_ORDER = ("partition", "plan", "write", "finalize")


def submitted(base: Path, *extra: str) -> RunDir:
    """A run of 40 documents in 2 partition and 2 write tasks, made by the submitter: nothing ran yet."""
    root = base / "corpus" / "clean"
    if not root.exists():
        root = make_corpus(base / "corpus", n_docs=40)
    run = base / f"run{len(list(base.glob('run*')))}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch, "start", lambda *a, **k: 0)  # the run dir is written; no task is started
        assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(base / f"out-{run.name}"),
                         "--run-dir", str(run), "--license", LICENSE, "--executor", "local",
                         "--partition-tasks", "2", "--write-tasks", "2", "--shard-rows", "15", *extra]) == 0
    return RunDir(lang_dir(run))


def through(run: RunDir, last: str) -> RunDir:
    """Run the stages up to and including `last`, in this process, as their tasks would."""
    cfg = load_config(run)
    for stage in STAGE_ORDER[:STAGE_ORDER.index(last) + 1]:
        if stage == "partition":
            [run_partition(run, t) for t in range(cfg.execution.partition_tasks)]
        elif stage == "plan":
            run_plan(run)
        elif stage == "write":
            [run_write(run, t) for t in range(cfg.execution.write_tasks)]
        else:
            run_finalize(run)
    return run


@pytest.fixture
def partitioned(tmp_path) -> RunDir:
    return through(submitted(tmp_path), "partition")


@pytest.fixture
def written(tmp_path) -> RunDir:
    return through(submitted(tmp_path), "write")


def edit(path: Path, fn) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def todo(run: RunDir) -> dict[str, list[int]]:
    return plan_resume(run).tasks


def refusal_of(fn) -> Problem:
    with pytest.raises(RecordRefused) as e:
        fn()
    return e.value.problem


# --- an edited config -------------------------------------------------------------------------------------


def test_a_config_edited_after_partition_is_refused_by_every_reader(partitioned):
    edit(partitioned.config_json, lambda c: c["content"].update(val_permille=500))
    for reader in (lambda: load_config(partitioned), lambda: todo(partitioned), lambda: report(partitioned.root),
                   lambda: run_plan(partitioned)):
        problem = refusal_of(reader)
        assert (problem.why, problem.path) == (Why.EDITED, partitioned.config_json)


def test_a_config_of_another_run_put_in_place_is_refused(tmp_path):
    """Self-consistent, but not the config run.json says the run was made with."""
    run, other = submitted(tmp_path), submitted(tmp_path, "--val-permille", "500")
    shutil.copy(other.config_json, run.config_json)
    problem = refusal_of(lambda: load_config(run))
    assert (problem.why, problem.path) == (Why.EDITED, run.config_json)


# --- a foreign partition/ ---------------------------------------------------------------------------------


def test_another_runs_partition_folder_is_not_done_and_the_plan_refuses_it(tmp_path):
    run = through(submitted(tmp_path), "partition")
    other = through(submitted(tmp_path, "--val-permille", "500"), "partition")
    shutil.rmtree(run.root / "partition")
    shutil.copytree(other.root / "partition", run.root / "partition")
    got = read_record(run.partition_receipt(0), PartitionReceipt, made_here(load_config(run).content.sha256()))
    assert isinstance(got, Problem) and got.why is Why.OTHER_CONFIG
    assert todo(run)["partition"] == [0, 1]  # redone, and everything after it
    assert refusal_of(lambda: run_plan(run)).why is Why.OTHER_CONFIG
    assert not run.plan_json.exists()


# --- another code version ---------------------------------------------------------------------------------


def test_a_run_of_another_code_version_is_refused_until_it_is_done(written, monkeypatch, capsys):
    record = read_json(written.run_json)
    monkeypatch.setattr(codeversion, "code_version", lambda: "f" * 64)  # a `git pull` since the run was made
    problem = refusal_of(lambda: check_this_version(written.root, record))
    assert (problem.why, problem.path) == (Why.OTHER_CODE, written.root)
    assert refusal_of(lambda: report(written.root)).why is Why.OTHER_CODE
    # a task started under the changed checkout (a job queued before the pull) fails with that cause
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the task keeps pandas out of its own process
    from shard_pipeline.worker import task

    assert task.main(["finalize", str(written.root)]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("ERROR: OtherCode: ")
    monkeypatch.undo()
    run_finalize(written)  # finished with the code that made it
    monkeypatch.setattr(codeversion, "code_version", lambda: "f" * 64)
    check_this_version(written.root, record)  # a finished run's records are history: any code reads them
    assert report(written.root)[1] == 0


def test_an_array_task_refused_before_it_reads_the_unit_table_records_its_outcome(written, monkeypatch, capsys):
    """A Slurm array task run by another code version (a git pull while it was queued) cannot tell which units
    its index names: it records its refusal under its own index in RUNDIR, and the view of the run names it."""
    from shard_pipeline.run.outcome import Kind, read
    from shard_pipeline.run.render import refused_line
    from shard_pipeline.run.view import run_view
    from tests.pipeline_util import view_of
    from shard_pipeline.worker import task

    root = written.root.parent
    monkeypatch.setattr(codeversion, "code_version", lambda: "f" * 64)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the task keeps pandas out of its own process
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    assert task.main(["write", str(root), "--task-offset", "1"]) == 1  # array index 1 of RUNDIR
    assert task.main(["finalize", str(written.root)]) == 1  # a language's task: its own outcome
    monkeypatch.undo()  # --status, with the code that made the run
    assert read(written, "finalize", 0).kind is Kind.REFUSED
    refused = run_view(written).refused
    assert [(o.stage, o.task, o.kind, o.error_type) for o in refused] == [("write", 1, Kind.REFUSED, "OtherCode")]
    assert view_of(root).refused == refused and refused_line(refused[0]) in report(root)[0]


@pytest.mark.parametrize("field,value,why", [("code_version", "e" * 64, Why.OTHER_CODE),
                                              ("config_sha256", "c" * 64, Why.OTHER_CONFIG),
                                              ("run_format", 3, Why.OTHER_FORMAT)])
def test_a_receipt_made_by_another_code_configuration_or_format_is_not_done(partitioned, field, value, why):
    edit(partitioned.partition_receipt(1), lambda r: r.update({field: value}))
    got = read_record(partitioned.partition_receipt(1), PartitionReceipt, RunState(partitioned).made)
    assert isinstance(got, Problem) and got.why is why
    assert todo(partitioned)["partition"] == [1]


def test_the_code_version_is_the_packages_source_wherever_it_is(tmp_path):
    from shard_pipeline.paths import PACKAGE_DIR

    copy = tmp_path / "elsewhere" / "shard_pipeline"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    assert codeversion.source_version(copy) == codeversion.code_version()  # a copy of the checkout
    (copy / "run" / "__pycache__").mkdir(exist_ok=True)
    (copy / "run" / "__pycache__" / "x.pyc").write_bytes(b"built")
    (copy / "run" / ".records.py.swp").write_bytes(b"an editor's")
    assert codeversion.source_version(copy) == codeversion.code_version()  # neither is source
    with open(copy / "run" / "records.py", "a") as f:
        f.write("\n")
    assert codeversion.source_version(copy) != codeversion.code_version()  # any edit is another version


# --- an edited receipt ------------------------------------------------------------------------------------


@pytest.mark.parametrize("field,delta,redo", [("train", -1, {1}), ("rows", 1, {1}), ("text_bytes", 7, {0, 1})])
def test_finalize_refuses_a_write_receipt_whose_counts_the_files_do_not_hold(written, field, delta, redo):
    """Rows and splits are read from each file; text bytes must add up to what partition counted (which of a
    set's receipts is wrong cannot be told without decompressing every text: each of its writers is redone)."""
    def change(r):
        r["shards"][0][field] += delta
        if field == "train":
            r["shards"][0]["val"] += 1  # the totals still add up: only the file can tell
    edit(written.write_receipt(1), change)
    with pytest.raises(FinalizeError) as e:
        run_finalize(written)
    assert e.value.redo == redo and not any(written.write_receipt(t).exists() for t in redo)
    assert not Path(load_config(written).execution.out).exists()
    assert todo(written) == {"write": sorted(redo), "finalize": [0]}  # --resume redoes exactly those writers


def test_the_manifest_counts_are_the_files(written):
    from shard_pipeline.contract.writer import shard_counts

    manifest = run_finalize(written)
    out = Path(load_config(written).execution.out)
    counts = [shard_counts(out / entry["name"]) for entry in manifest["shards"]]
    assert [e["rows"] for e in manifest["shards"]] == [c.rows for c in counts]
    assert manifest["splits"] == {"train": sum(c.train for c in counts), "val": sum(c.val for c in counts)}
    assert manifest["text_bytes"] == RunState(written).plan.text_bytes and manifest["rows"] == 40


# --- a damaged index or sections.arrow ---------------------------------------------------------------------


def test_a_damaged_index_is_not_done_and_any_reader_names_it(partitioned):
    index = partitioned.spill_index(0)
    index.write_bytes(index.read_bytes()[:50])
    assert index.name in STAGES[0].problem(RunState(partitioned), 0)
    assert todo(partitioned)["partition"] == [0]
    assert refusal_of(lambda: run_plan(partitioned)).path == index
    assert refusal_of(lambda: read_arrow(index)).path == index  # Arrow's own complaint, named


def test_an_index_that_is_arrow_but_not_its_tasks_is_refused_by_the_plan(tmp_path):
    """Another run's index (same rows, other split counts) read as this one's would plan other shards in silence."""
    run = through(submitted(tmp_path), "partition")
    other = through(submitted(tmp_path, "--val-permille", "500"), "partition")
    shutil.copy(other.spill_index(0), run.spill_index(0))
    assert read_arrow(run.spill_index(0)).num_rows  # a whole Arrow file
    assert todo(run)["partition"] == [0]
    problem = refusal_of(lambda: run_plan(run))
    assert (problem.why, problem.path) == (Why.DAMAGED, run.spill_index(0))


def test_a_sections_file_the_plan_did_not_write_is_not_done_and_the_writer_names_it(partitioned):
    from shard_pipeline.stages.spill import write_arrow

    run = through(partitioned, "plan")
    sections = read_arrow(run.sections)
    write_arrow(run.sections, sections.slice(0, sections.num_rows - 1))  # Arrow still, one section short
    assert "sections.arrow" in STAGES[1].problem(RunState(run), 0)
    assert todo(run)["plan"] == [0]
    assert refusal_of(lambda: run_write(run, 0)).path == run.sections


def test_a_damaged_spill_is_named_by_its_reader(partitioned):
    """Bytes changed below the filesystem (no stamp changes): whatever part of a section they hit, a writer's read
    of it fails naming the spill file, never with Arrow's bare complaint."""
    from shard_pipeline.stages.spill import Section, SectionCursor, SpillReader

    spill = partitioned.spill_file(0)
    first = read_arrow(partitioned.spill_index(0)).slice(0, 1).to_pylist()[0]
    section = Section(**first)
    good = spill.read_bytes()
    named = 0
    for at in range(section.offset, section.offset + section.length - 8, 61):
        data = bytearray(good)
        data[at:at + 8] = bytes(b ^ 0xFF for b in data[at:at + 8])
        spill.write_bytes(bytes(data))
        reader = SpillReader(spill)
        try:
            reader.order_columns(section)
            SectionCursor(reader, section).rows(0, section.rows)
        except DamagedRunFile as exc:
            assert exc.problem.path == spill
            named += 1
        finally:
            reader.close()
    assert named > 5


# --- a wrong type ------------------------------------------------------------------------------------------


def test_a_wrong_type_in_config_is_a_named_refusal(partitioned):
    edit(partitioned.config_json, lambda c: c["execution"].update(partition_tasks="two"))
    for reader in (lambda: load_config(partitioned), lambda: report(partitioned.root), lambda: todo(partitioned)):
        problem = refusal_of(reader)
        assert (problem.why, problem.path) == (Why.DAMAGED, partitioned.config_json)
        assert "execution.partition_tasks" in problem.detail


@pytest.mark.parametrize("edit_run_json, field", [
    (lambda r: r.update(submissions="oops"), "submissions"),
    (lambda r: r["submissions"].append({"kind": "submit", "submitted_at": 1, "tasks": {},
                                        "jobs": [{"stage": "partition", "job_id": ["7"]}]}), "submissions[0].jobs[0].job_id"),
    (lambda r: r.update(resources=[]), "resources"),
    (lambda r: r["submissions"].append({"kind": "submit", "submitted_at": 1, "tasks": {}}), "submissions[0].jobs"),
    (lambda r: r.pop("executor"), "executor"),
])
def test_a_wrong_type_in_run_json_is_a_named_refusal(partitioned, edit_run_json, field):
    """run.json's body is read by --status, --resume and the tasks: a wrong type is one named refusal there."""
    edit(partitioned.run_json, edit_run_json)
    args = cli.parse([f"--resume={partitioned.root}", "--executor", "local"])
    for reader in (lambda: report(partitioned.root), lambda: launch.resume_run(args, [])):
        problem = refusal_of(reader)
        assert (problem.why, problem.path) == (Why.DAMAGED, partitioned.run_json)
        assert problem.detail.startswith(field + " ")


def test_a_wrong_type_in_a_receipt_is_not_done(partitioned):
    edit(partitioned.partition_receipt(0), lambda r: r["inputs"][0].update(read="12"))
    got = read_record(partitioned.partition_receipt(0), PartitionReceipt, RunState(partitioned).made)
    assert isinstance(got, Problem) and got.why is Why.DAMAGED and "inputs[0].read" in got.detail
    assert "inputs[0].read" in plan_resume(partitioned).reasons["partition"][0]
    assert {s.stage: s.done for s in stage_statuses(partitioned, queue={})}["partition"] == 1  # --status reads on
    assert report(partitioned.root)[1] == 1  # its progress line too
    assert refusal_of(lambda: run_plan(partitioned)).why is Why.DAMAGED


def test_plan_and_write_receipts_are_read_as_their_dataclasses(written):
    state = RunState(written)
    assert isinstance(state.plan, Plan) and state.plan.rows == 40
    assert isinstance(read_record(written.write_receipt(0), WriteReceipt, state.made), WriteReceipt)


# --- the reader itself -------------------------------------------------------------------------------------


def test_parse_as_checks_every_field_against_its_dataclass():
    assert parse_as(Made, {"run_format": 4, "config_sha256": "a", "code_version": "b"}) == Made(4, "a", "b")
    for bad, said in (({"run_format": True, "config_sha256": "a", "code_version": "b"}, "run_format is true"),
                      ({"run_format": 4, "config_sha256": 5, "code_version": "b"}, "config_sha256 is 5, not a string"),
                      ({"run_format": 4, "config_sha256": "a"}, "code_version is missing"),
                      ({"run_format": 4, "config_sha256": "a", "code_version": "b", "x": 1}, "'x'")):
        with pytest.raises(WrongType, match=said):
            parse_as(Made, bad)
    assert parse_as(tuple[int, int], [1, 2]) == (1, 2) and parse_as(dict[str, int] | None, None) is None
    with pytest.raises(WrongType):
        parse_as(tuple[int, int], [1, 2, 3])


def test_a_record_that_is_not_json_is_damaged(partitioned):
    partitioned.partition_receipt(0).write_text("{")
    got = read_record(partitioned.partition_receipt(0), PartitionReceipt, RunState(partitioned).made)
    assert isinstance(got, Problem) and got.why is Why.DAMAGED
    with pytest.raises(DamagedRunFile):
        read_json(partitioned.partition_receipt(0))


def test_languages_json_of_a_wrong_type_is_a_named_refusal(tmp_path):
    from shard_pipeline.run import unit_table

    table = unit_table.table_of(tmp_path, [("a", 2, 1), ("b", 1, 1)])
    doc = table.to_json()
    doc["units"]["write"][0][1] = "0"
    RunDir(tmp_path).languages_json.write_text(json.dumps(doc))
    problem = refusal_of(lambda: unit_table.load(tmp_path))
    assert (problem.why, problem.path) == (Why.DAMAGED, RunDir(tmp_path).languages_json)


# --- progress records: a stopped task's checkpoint or progress that is not this run's is not continued ------


class Stop(Exception):
    pass


def test_a_partition_checkpoint_of_another_configuration_is_started_over(tmp_path, monkeypatch):
    from shard_pipeline.stages import partition

    run = submitted(tmp_path)

    def stop(name, task=None):
        raise Stop

    monkeypatch.setattr(partition, "fault_point", stop)
    with pytest.raises(Stop):
        run_partition(run, 0)
    edit(run.partition_checkpoint(0), lambda c: c.update(config_sha256="0" * 64))
    restored = []
    real = partition.PartitionCheckpoint.restore
    monkeypatch.setattr(partition.PartitionCheckpoint, "restore",
                        lambda self, w: (lambda got: restored.append(len(got[0])) or got)(real(self, w)))
    monkeypatch.setattr(partition, "fault_point", lambda *a, **k: None)
    run_partition(run, 0)
    assert restored == [0]


def test_write_progress_of_another_configuration_is_started_over(partitioned, monkeypatch):
    from shard_pipeline.stages import write

    run = through(partitioned, "plan")
    seen = []

    def stop_at_second_shard(name, task=None):
        seen.append(name)
        if name == "write-start" and seen.count("write-start") == 2:
            raise Stop

    monkeypatch.setattr(write, "fault_point", stop_at_second_shard)
    with pytest.raises(Stop):
        run_write(run, 1)  # of its two shards, the first is written
    first = json.loads(run.write_progress(1).read_text())["shards"][0]
    monkeypatch.setattr(write, "fault_point", lambda *a, **k: None)
    edit(run.write_progress(1), lambda p: p.update(config_sha256="0" * 64))
    receipt = run_write(run, 1)
    assert receipt.shards[0].name == first["name"] and receipt.shards[0].stamp.ctime_ns != first["stamp"]["ctime_ns"]


@pytest.mark.parametrize("command", ["--status", "--resume"])
def test_a_run_dir_of_the_one_language_layout_is_refused_as_another_format(tmp_path, command, capsys):
    """Format 4 kept a run of one language at RUNDIR itself (config.json, no languages.json): --status and --resume
    refuse it by its run.json's format, naming the way on (that version, or a new run), not with a traceback."""
    from shard_pipeline.run.records import RUN_FORMAT

    run = RunDir(tmp_path / "run")
    for sub in ("tasks", "logs"):
        (run.root / sub).mkdir(parents=True)
    run.config_json.write_text(json.dumps({"content": {}, "execution": {}}))
    run.run_json.write_text(json.dumps({"run_format": 4, "argv": ["hplt-shard", LANG], "executor": "local",
                                        "submissions": []}))
    assert RUN_FORMAT == 5
    assert cli.main([command, str(run.root)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "format 4" in err and f"reads format {RUN_FORMAT}" in err and "new run" in err
