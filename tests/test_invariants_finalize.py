"""OUT is always the complete old or the complete new version: writers write only into OUT.tmp, and
finalize swaps it in only when it holds every planned shard as its writer recorded it and nothing
else, the inputs are as listed, and OUT holds no newer output of another configuration."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import shard_pipeline.contract.swap as swap_mod

from shard_pipeline.contract.replace import NotReplaceable, tmp_dir_for
from shard_pipeline.contract.swap import SwapFailed, swap_into_place
from shard_pipeline.run.records import OtherConfig, Why
from shard_pipeline.run.resume import plan_resume
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import read_json
from shard_pipeline.stages.finalize import FinalizeError
from shard_pipeline.worker.entries import stage_main
from tests.inprocess import Made, corpus, edit_json, make_run, newer_output_at_out
from tests.pipeline_util import LANG, expected_output, tree_bytes

OTHER_CONFIG = "f" * 64


@pytest.fixture
def written(tmp_path, in_process) -> Made:
    """Every task but finalize finished, over a previous output of another configuration at OUT."""
    root = corpus(tmp_path / "corpus", 40, ("10_1.cc", "9_1.ia"))
    expected_output(root, tmp_path / "out", config_sha256=OTHER_CONFIG, shard_rows=7)
    made = make_run(tmp_path, in_process, "finalize", corpus_root=root)
    assert made.code == 1 and plan_resume(made.run).tasks == {"finalize": [0]}
    return made


def staging(made: Made) -> Path:
    return Path(json.loads(made.run.plan_json.read_text())["tmp_dir"])


def refused(made: Made, kind: type[Exception] = FinalizeError) -> Exception:
    """Finalize refuses and OUT keeps the previous output, byte for byte; the run is not done."""
    before = tree_bytes(made.out)
    with pytest.raises(kind) as e:
        stage_main("finalize")(made.run)
    assert tree_bytes(made.out) == before and not made.run.done_marker.exists()
    return e.value


def touch_input(made: Made) -> Path:
    shard = next((made.root / LANG).glob("9_1*.jsonl.zst"))
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
    return shard


def test_the_writers_leave_the_previous_output_as_it_was(written):
    """Every shard is written into OUT.tmp: until the swap, OUT is the previous output, untouched."""
    manifest = json.loads((written.out / "_MANIFEST.json").read_text())
    assert manifest["config_sha256"] == OTHER_CONFIG and staging(written) == tmp_dir_for(written.out)
    listed = ["_MANIFEST.json", *(s["name"] for s in manifest["shards"])]
    assert sorted(p.name for p in written.out.iterdir()) == sorted(listed)


def test_finalize_refuses_an_input_changed_since_it_was_read(written):
    touch_input(written)
    refused(written)
    assert plan_resume(written.run).tasks == {"finalize": [0]}  # the output is not wrong: the inputs are


def test_finalize_refuses_a_file_in_out_tmp_that_no_writer_made(written):
    (staging(written) / "notes.txt").write_text("mine\n")
    refused(written)
    assert (staging(written) / "notes.txt").read_text() == "mine\n"


def test_finalize_refuses_a_shard_whose_bytes_differ_and_a_resume_rewrites_only_its_writer(written):
    receipt = json.loads(written.run.write_receipt(1).read_text())
    shard = staging(written) / receipt["shards"][0]["name"]
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    st = shard.stat()
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    refused(written)
    assert plan_resume(written.run).tasks == {"write": [1], "finalize": [0]}


def test_finalize_refuses_a_write_receipt_that_disagrees_with_the_plan_even_when_the_total_agrees(written):
    def shift_a_row(receipt):
        receipt["shards"][0]["rows"] += 1
        receipt["shards"][1]["rows"] -= 1

    edit_json(written.run.write_receipt(0), shift_a_row)
    refused(written)


def test_finalize_refuses_a_plan_whose_shard_rows_its_writers_receipts_do_not_hold(written):
    """Receipts and files agree, the totals agree, but the plan cut shards 0 and 1 one row apart."""
    def move_a_cut(plan):
        first, second = plan["shard_list"][0], plan["shard_list"][1]
        first["rows"][1] -= 1
        second["rows"][0] -= 1

    edit_json(written.run.plan_json, move_a_cut)
    refused(written)


def test_a_shard_changed_without_a_trace_in_its_metadata_is_refused_and_its_writer_redone(written):
    """Bytes changed below the filesystem keep size, mtime and ctime: the done rule trusts the shard, finalize's
    hash does not, and it removes that writer's receipt so that the resume rewrites it (and not the others)."""
    def other_bytes(receipt):  # what finalize would hash on disk, seen from the receipt
        receipt["shards"][0]["sha256"] = "0" * 64

    edit_json(written.run.write_receipt(1), other_bytes)
    assert plan_resume(written.run).tasks == {"finalize": [0]}
    refused(written)
    assert plan_resume(written.run).tasks == {"write": [1], "finalize": [0]}


def test_finalize_refuses_a_plan_of_another_configuration(written):
    edit_json(written.run.plan_json, lambda plan: plan.update(config_sha256=OTHER_CONFIG))
    assert refused(written, OtherConfig).problem.why is Why.OTHER_CONFIG


def test_finalize_never_swaps_out_a_folder_that_is_not_a_previous_output(written):
    (written.out / "notes.txt").write_text("not an output's file\n")
    refused(written, NotReplaceable)


def test_a_resumed_finalize_does_not_replace_a_newer_output_of_another_configuration(written, monkeypatch):
    newer_output_at_out(written, monkeypatch)
    assert refused(written, NotReplaceable).refusal.kind == "newer-output"


def test_a_swap_whose_second_rename_fails_puts_the_previous_output_back(tmp_path, monkeypatch):
    """Without RENAME_EXCHANGE the swap is two renames: when the second fails, OUT is the old one again."""
    root = corpus(tmp_path / "corpus", 20, ("10_1.cc",))
    out, new = tmp_path / "out", tmp_path / "new"
    expected_output(root, out, config_sha256=OTHER_CONFIG, shard_rows=7)
    expected_output(root, new, config_sha256="e" * 64, shard_rows=9)
    before = tree_bytes(out)
    real = os.rename

    def second_fails(src, dst):
        if Path(src) == new:
            raise OSError(5, "Input/output error (injected)")
        real(src, dst)

    monkeypatch.setattr(swap_mod, "_exchange", lambda a, b: False)
    monkeypatch.setattr(swap_mod.os, "rename", second_fails)
    with pytest.raises(SwapFailed):
        swap_into_place(new, out)
    assert tree_bytes(out) == before and new.is_dir()


def test_why_finalize_refuses_in_words(written):
    """The one golden text of finalize's refusals (the two a user meets most): what, where, the next step."""
    shard = touch_input(written)
    listed = next(i for i in RunConfig.from_json(read_json(written.run.config_json)).content.inputs
                  if i.location == str(shard))
    now = shard.stat()
    assert str(refused(written)) == (
        f"1 input shard changed after this run read it: {shard} (size {listed.size} -> {now.st_size}, mtime "
        f"{listed.mtime} -> {int(now.st_mtime)}); {written.out} is as it was; restore the input and "
        f"./hplt-shard --resume {written.run.root} (it redoes only finalize), or start a new run to read the inputs "
        "as they are now")
    os.utime(shard, (listed.mtime, listed.mtime))
    (staging(written) / "notes.txt").write_text("mine\n")
    assert str(refused(written)) == (f"{staging(written)}: unexpected files notes.txt (not this run's: move them "
                                     "out of it)")
