"""Every guard of plan and finalize is triggered by a hand-made run dir: deleting one fails a test (#11, 6)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.registry import RunState
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.stages.finalize import FinalizeError, already_swapped, run_finalize
from shard_pipeline.stages.plan import PlanError, run_plan
from tests.pipeline_util import lang_dir, make_corpus, run_cli

pytestmark = pytest.mark.slow  # end-to-end: every test runs the pipeline

ARGS = ("--shard-rows", "10", "--partition-tasks", "2", "--write-tasks", "2", "--buckets", "3")


def stopped_at(tmp_path, monkeypatch, fault: str) -> RunDir:
    root = make_corpus(tmp_path, n_docs=40)
    monkeypatch.setenv("HPLT_SHARD_FAULT", fault)
    assert run_cli(root, tmp_path / "out", tmp_path / "run", *ARGS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    return RunDir(lang_dir(tmp_path / "run"))


@pytest.fixture
def before_plan(tmp_path, monkeypatch) -> RunDir:
    return stopped_at(tmp_path, monkeypatch, "plan-start:0:enospc")


def edit_receipt(run: RunDir, task: int, fn) -> None:
    rc = read_json(run.partition_receipt(task))
    fn(rc)
    write_json_atomic(run.partition_receipt(task), rc)


def plan_error(run: RunDir) -> str:
    with pytest.raises(PlanError) as e:
        run_plan(run)
    assert not run.plan_json.exists()
    return str(e.value)


def test_untouched_receipts_plan(before_plan):
    assert run_plan(before_plan).rows == 40


def test_an_input_read_twice(before_plan):
    other = read_json(before_plan.partition_receipt(1))["inputs"][0]
    edit_receipt(before_plan, 0, lambda rc: rc["inputs"].append(other))
    assert f"input {other['source_id']} read by two tasks" in plan_error(before_plan)


def test_read_not_kept_plus_quarantined(before_plan):
    def more_read(rc):
        rc["inputs"][0]["read"] += 1
    edit_receipt(before_plan, 0, more_read)
    inp = read_json(before_plan.partition_receipt(0))["inputs"][0]
    assert f"{inp['source_id']}: read {inp['read']} != kept {inp['kept']} + quarantined 0" in plan_error(before_plan)


def test_kept_not_spilled(before_plan):
    def more_kept(rc):
        rc["inputs"][0]["read"] += 1
        rc["inputs"][0]["kept"] += 1  # read = kept + quarantined still holds
    edit_receipt(before_plan, 0, more_kept)
    rows = read_json(before_plan.partition_receipt(0))["rows"]
    assert f"partition task 0: kept {rows + 1} but spilled {rows} rows" in plan_error(before_plan)


def test_an_input_never_read(before_plan):
    dropped = {}

    def drop(rc):
        dropped.update(rc["inputs"].pop())
    edit_receipt(before_plan, 1, drop)
    assert f"inputs never read: {dropped['source_id']}" in plan_error(before_plan)


def test_sections_outside_the_buckets(before_plan):
    cfg = read_json(before_plan.config_json)
    cfg["execution"]["buckets"] = 1  # execution is not hashed: the plan must catch it itself
    write_json_atomic(before_plan.config_json, cfg)
    assert "sections name buckets outside 0..0" in plan_error(before_plan)


@pytest.fixture
def before_swap(tmp_path, monkeypatch) -> RunDir:
    return stopped_at(tmp_path, monkeypatch, "finalize-before-swap:0:enospc")


def test_stray_file_in_out_tmp_stops_finalize(before_swap):
    tmp = Path(read_json(before_swap.plan_json)["tmp_dir"])
    (tmp / "stray.parquet").write_bytes(b"left by someone")
    with pytest.raises(FinalizeError, match=r"unexpected files stray\.parquet"):
        run_finalize(before_swap)
    assert not Path(read_json(before_swap.config_json)["execution"]["out"]).exists()
    (tmp / "stray.parquet").unlink()
    assert run_finalize(before_swap)["rows"] == 40  # the same run dir finalizes once the stray is gone


def test_a_killed_finalizes_temporary_manifest_is_removed_and_only_it(before_swap):
    """A finalize killed (SIGKILL, SIGTERM) while it wrote _MANIFEST.json leaves atomic_file's temporary
    file in OUT.tmp: the next finalize removes it and finishes; a name that is not one of those stays a stray."""
    tmp = Path(read_json(before_swap.plan_json)["tmp_dir"])
    left = tmp / "._MANIFEST.json.k1ll_3d0.tmp"
    left.write_bytes(b'{"half": ')
    look_alike = tmp / "._MANIFEST.json.notes.tmp"  # not a name atomic_file makes: someone else's
    look_alike.write_bytes(b"mine")
    with pytest.raises(FinalizeError, match=r"unexpected files \._MANIFEST\.json\.notes\.tmp \(not this run.s: move them out of it\)$"):
        run_finalize(before_swap)
    assert not left.exists() and look_alike.exists()
    look_alike.unlink()
    left.write_bytes(b'{"half": ')
    assert run_finalize(before_swap)["rows"] == 40
    out = Path(read_json(before_swap.config_json)["execution"]["out"])
    assert not left.exists() and sorted(p.name for p in out.iterdir() if p.name.startswith("."))== []


def test_already_swapped_finishes_and_only_for_this_runs_output(tmp_path, monkeypatch):
    run = stopped_at(tmp_path, monkeypatch, "finalize-after-swap:0:enospc")
    state = RunState(run)
    cfg, plan = state.cfg, state.plan
    out = Path(cfg.execution.out)
    assert not Path(plan.tmp_dir).exists() and not run.done_marker.exists()
    assert already_swapped(run, cfg, plan, out) is not None
    # OUT whose manifest names another shard hash is not this run's: never taken as swapped
    good = (out / "_MANIFEST.json").read_text()
    m = json.loads(good)
    m["shards"][0]["sha256"] = "0" * 64
    (out / "_MANIFEST.json").write_text(json.dumps(m))
    assert already_swapped(run, cfg, plan, out) is None
    m = json.loads(good)
    m["config_sha256"] = "1" * 64
    (out / "_MANIFEST.json").write_text(json.dumps(m))
    assert already_swapped(run, cfg, plan, out) is None
    m = json.loads(good)
    m["rows"] += 1
    (out / "_MANIFEST.json").write_text(json.dumps(m))
    assert already_swapped(run, cfg, plan, out) is None
    (out / "_MANIFEST.json").write_text(json.dumps(json.loads(good)))  # the same content, other bytes: not the one written
    assert already_swapped(run, cfg, plan, out) is None
    (out / "_MANIFEST.json").write_text(good)
    assert run_finalize(run)["rows"] == 40 and run.done_marker.exists()
