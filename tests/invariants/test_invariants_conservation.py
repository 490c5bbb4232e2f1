"""read = kept + quarantined: partition counts it per input shard, the plan proves it (and that every
input was read exactly once) before anything is written, finalize records it in validation.json."""
from __future__ import annotations

import json

import pytest

from shard_pipeline.input.zstd_stream import open_decompressed
from shard_pipeline.run.runconfig import RunConfig
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.stages.plan import PlanError, run_plan
from shard_pipeline.worker.entries import stage_main
from tests.inprocess import corpus, edit_json, make_run
from tests.pipeline_util import LANG, write_records


@pytest.fixture
def partitioned(tmp_path, in_process) -> RunDir:
    """Both partition tasks finished, each having read one of the two inputs; the plan did not run."""
    made = make_run(tmp_path, in_process, "plan")
    assert made.code == 1
    return made.run


def read_one_more(run: RunDir) -> None:
    """Task 0's receipt says it read a line more than it kept or quarantined."""
    edit_json(run.partition_receipt(0), lambda r: r["inputs"][0].update(read=r["inputs"][0]["read"] + 1))


def kept_one_less(run: RunDir) -> None:
    """Task 0's receipt: an input kept one row less (and quarantined it), but the task spilled them all."""
    def change(r):
        r["inputs"][0]["kept"] -= 1
        r["inputs"][0]["quarantined"]["invalid_json"] = r["inputs"][0]["quarantined"].get("invalid_json", 0) + 1
    edit_json(run.partition_receipt(0), change)


def one_row_more_than_spilled(run: RunDir) -> None:
    """Task 0's receipt adds up, but its index holds a row less than it says."""
    def change(r):
        r["rows"] += 1
        r["inputs"][0]["kept"] += 1
        r["inputs"][0]["read"] += 1
    edit_json(run.partition_receipt(0), change)


def repartition(run: RunDir, inputs: list[list[int]]) -> None:
    """Run the partition tasks again, task t reading `inputs[t]` (the submitter's task files rewritten)."""
    for t, these in enumerate(inputs):
        edit_json(run.task_file("partition", t), lambda spec: spec.update(inputs=these))
        for path in (run.partition_receipt(t), run.spill_file(t), run.spill_index(t)):
            path.unlink(missing_ok=True)
        stage_main("partition")(run, t)


def input_read_twice(run: RunDir) -> None:
    repartition(run, [[0], [0, 1]])


def input_never_read(run: RunDir) -> None:
    repartition(run, [[0], []])


def source(run: RunDir, index: int) -> str:
    return RunConfig.from_json(read_json(run.config_json)).content.inputs[index].source_id


def counts(run: RunDir, task: int) -> dict:
    """A task's rows and its first input's source id, read and kept, from its receipt."""
    receipt = json.loads(run.partition_receipt(task).read_text())
    return {"rows": receipt["rows"], **{k: receipt["inputs"][0][k] for k in ("source_id", "read", "kept")}}


@pytest.mark.parametrize("damage", [read_one_more, kept_one_less, one_row_more_than_spilled, input_read_twice,
                                    input_never_read])
def test_the_plan_refuses_partition_receipts_that_do_not_add_up_and_writes_nothing(partitioned, damage):
    damage(partitioned)
    with pytest.raises(PlanError):
        run_plan(partitioned)
    assert not partitioned.plan_json.exists() and not partitioned.sections.exists()


def test_why_the_plan_refuses_in_words(partitioned):
    """The one golden text of the plan's refusals: each names the input or task and the figures."""
    run = partitioned
    c, receipt = counts(run, 0), run.partition_receipt(0).read_bytes()
    said = {}
    for damage in (read_one_more, kept_one_less, one_row_more_than_spilled, input_read_twice, input_never_read):
        run.partition_receipt(0).write_bytes(receipt)
        damage(run)
        with pytest.raises(PlanError) as e:
            run_plan(run)
        said[damage.__name__] = str(e.value)
    assert said == {
        "read_one_more": f"{c['source_id']}: read {c['read'] + 1} != kept {c['kept']} + quarantined 0",
        "kept_one_less": f"partition task 0: kept {c['kept'] - 1} but spilled {c['rows']} rows",
        "one_row_more_than_spilled": "partition task 0: index rows differ from its receipt",
        "input_read_twice": f"input {source(run, 0)} read by two tasks",
        "input_never_read": f"inputs never read: {source(run, 1)}",
    }


def test_a_finished_run_records_read_kept_and_quarantined_in_validation(tmp_path, in_process):
    """Two lines that are not JSON in one input: read counts them, kept does not, quarantined names them."""
    root = corpus(tmp_path / "corpus", 40, ("10_1.cc", "9_1.ia"))
    shard = next((root / LANG).glob("9_1*.jsonl.zst"))
    with open_decompressed(str(shard)) as f:
        lines = f.read().splitlines()
    write_records(shard, [*lines, b"{not json", b"[1, 2"])
    made = make_run(tmp_path, in_process, None, "--bad-records", "quarantine", corpus_root=root)
    assert made.code == 0
    validation = json.loads(made.run.validation_json.read_text())
    conservation = validation["conservation"]
    assert (conservation["read"], conservation["kept"], sum(conservation["quarantined"].values())) == (42, 40, 2)
    per_input = {i["source_id"]: (i["read"], i["kept"], sum(i["quarantined"].values())) for i in validation["inputs"]}
    assert sorted(per_input.values()) == [(20, 20, 0), (22, 20, 2)]
