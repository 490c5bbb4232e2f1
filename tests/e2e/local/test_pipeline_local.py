"""End to end on the local executor: the pipeline's OUT equals write_shards byte for byte."""
from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from shard_pipeline.contract.shard import read_shards
from tests.manifest_schema import assert_valid_manifest
from shard_pipeline.submit import cli
from tests.pipeline_util import (
    lang_dir,
    LANG,
    LICENSE,
    config_sha,
    expected_output,
    make_corpus,
    manifest,
    records,
    run_cli,
    tree_bytes,
    write_records,
)

pytestmark = pytest.mark.slow  # end-to-end: every test runs the pipeline


@pytest.mark.parametrize(
    "tasks",
    [
        ("--partition-tasks", "1", "--write-tasks", "1", "--buckets", "1"),
        ("--partition-tasks", "3", "--write-tasks", "4", "--buckets", "7", "--spill-bytes", "20000"),
        ("--partition-tasks", "4", "--write-tasks", "2", "--buckets", "13", "--spill-bytes", "5000"),
    ],
)
def test_matches_write_shards_for_any_task_count(tmp_path, tasks):
    root = make_corpus(tmp_path)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run_dir, "--shard-rows", "50", "--val-permille", "200", "--row-group-bytes", "4000", *tasks) == 0
    expected = tmp_path / "expected"
    m = expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=50, val_permille=200, row_group_bytes=4000)
    assert tree_bytes(out) == tree_bytes(expected)
    assert manifest(out) == m
    assert m["rows"] == 240 and len(m["shards"]) == 5
    assert_valid_manifest(m)
    # spills really happened in several runs and several buckets when asked to
    receipts = [json.loads(p.read_text()) for p in (lang_dir(run_dir) / "partition").glob("*.receipt.json")]
    if "--spill-bytes" in tasks:
        assert max(r["runs"] for r in receipts) > 1
    validation = json.loads((lang_dir(run_dir) / "validation.json").read_text())
    assert validation["conservation"]["read"] == validation["conservation"]["kept"] == 240


@pytest.mark.parametrize("id_style", ["hex", "web", "sorted", "prefix"])
def test_order_is_right_for_any_id_distribution(tmp_path, id_style):
    root = make_corpus(tmp_path, id_style=id_style, n_docs=180)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run_dir, "--shard-rows", "40", "--partition-tasks", "3", "--write-tasks", "3",
                   "--buckets", "6", "--spill-bytes", "8000") == 0
    ids = [d.id for d in read_shards(out)]
    assert ids == sorted(ids, key=lambda s: s.encode()) and len(ids) == 180
    expected = tmp_path / "expected"
    expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=40)
    assert tree_bytes(out) == tree_bytes(expected)


def test_same_documents_in_another_order_give_the_same_shards(tmp_path):
    recs = records(150, seed=3, text_bytes=400)
    a, b = tmp_path / "a" / "clean" / LANG, tmp_path / "b" / "clean" / LANG
    write_records(a / "9_1.jsonl.zst", recs[:70])
    write_records(a / "9_2.jsonl.zst", recs[70:])
    write_records(b / "9_1.jsonl.zst", list(reversed(recs[:70])), frames=3)
    write_records(b / "9_2.jsonl.zst", list(reversed(recs[70:])))
    outs = []
    for name, parts in (("a", ("--partition-tasks", "1")), ("b", ("--partition-tasks", "2", "--spill-bytes", "3000"))):
        out = tmp_path / f"out-{name}"
        assert run_cli(tmp_path / name / "clean", out, tmp_path / f"run-{name}", "--shard-rows", "40", *parts) == 0
        outs.append(out)
    shards_a = {k: v for k, v in tree_bytes(outs[0]).items() if k.endswith(".parquet")}
    shards_b = {k: v for k, v in tree_bytes(outs[1]).items() if k.endswith(".parquet")}
    assert shards_a == shards_b and len(shards_a) == 4


def test_exact_copies_land_in_the_same_split(tmp_path):
    recs = records(60, seed=5, text_bytes=300)
    for k in range(0, 60, 3):  # every third document repeats the text of the one before, under its own id
        recs[k + 1]["text"] = recs[k]["text"]
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs)
    out = tmp_path / "out"
    assert run_cli(tmp_path / "clean", out, tmp_path / "run", "--shard-rows", "7", "--val-permille", "500",
                   "--partition-tasks", "1", "--write-tasks", "3") == 0
    by_text: dict[str, set[str]] = {}
    for d in read_shards(out):
        by_text.setdefault(d.text, set()).add(d.meta["split"])
    assert all(len(s) == 1 for s in by_text.values())
    assert len([t for t in by_text if t in {r["text"] for r in recs[0:60:3]}]) == 20


def test_single_document_and_empty_selection(tmp_path):
    write_records(tmp_path / "one" / "clean" / LANG / "9_1.jsonl.zst", records(1))
    out = tmp_path / "out1"
    assert run_cli(tmp_path / "one" / "clean", out, tmp_path / "run1", "--write-tasks", "3") == 0
    m = manifest(out)
    assert m["rows"] == 1 and [s["name"] for s in m["shards"]] == ["shard-00000-of-00001.parquet"]
    # a shard file that holds no document still gives one empty shard
    write_records(tmp_path / "empty" / "clean" / LANG / "9_1.jsonl.zst", [])
    out0 = tmp_path / "out0"
    assert run_cli(tmp_path / "empty" / "clean", out0, tmp_path / "run0") == 0
    m0 = manifest(out0)
    assert m0["rows"] == 0 and len(m0["shards"]) == 1
    assert pq.ParquetFile(out0 / m0["shards"][0]["name"]).metadata.num_rows == 0
    expected = tmp_path / "exp0"
    expected_output(tmp_path / "empty" / "clean", expected, config_sha256=config_sha(tmp_path / "run0"), shard_rows=1_000_000)
    assert tree_bytes(out0) == tree_bytes(expected)


def test_failed_run_leaves_previous_out_untouched(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=40)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run1", "--shard-rows", "10") == 0
    before = tree_bytes(out)
    # a bad line appears in one input: the partition task fails, nothing later runs
    bad = root / LANG / "9_1.ia.jsonl.zst"
    write_records(bad, records(5) + [b"{not json"])
    assert run_cli(root, out, tmp_path / "run2", "--shard-rows", "10") == 1
    err = capsys.readouterr().err
    assert "9_1.ia.jsonl.zst:6" in err and "not_json" in err
    assert tree_bytes(out) == before
    assert not (tmp_path / "run2" / "plan.json").exists()


def test_repeated_id_across_files_is_an_error_naming_both(tmp_path, capsys):
    recs = records(20, seed=9)
    recs[15]["id"] = recs[2]["id"]
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs[:10])
    write_records(tmp_path / "clean" / LANG / "9_2.jsonl.zst", recs[10:])
    out = tmp_path / "out"
    assert run_cli(tmp_path / "clean", out, tmp_path / "run", "--partition-tasks", "2") == 1
    err = capsys.readouterr().err
    assert recs[2]["id"] in err and "9_1.jsonl.zst:3" in err and "9_2.jsonl.zst:6" in err
    assert not out.exists()


def test_new_run_refuses_existing_run_dir_and_held_out(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run1") == 0
    for dry in ((), ("--dry-run",)):  # --dry-run refuses what the run would, with the same message
        assert run_cli(root, out, tmp_path / "run1", *dry) == 2
        assert f"add --run-dir {tmp_path / 'run1-new'}" in capsys.readouterr().err  # a done run: a new run dir
    claim = out.with_name("out.hplt-shard-claim")
    claim.write_text(str(tmp_path / "other-run") + "\n")
    for dry in ((), ("--dry-run",)):
        assert run_cli(root, out, tmp_path / "run2", *dry) == 2
        assert f"{out} is held by run {tmp_path / 'other-run'}" in capsys.readouterr().err
    # a run of several languages into a root that a queued run of one language holds: refused, not failed at its end
    shutil.copytree(root / LANG, root / "fin_Latn")
    queued = tmp_path / "queued"  # not made yet: the run of one language that holds it has not finished
    queued.with_name("queued.hplt-shard-claim").write_text(str(tmp_path / "other-run") + "\n")
    several = [f"{LANG},fin_Latn", "--corpus", "v4", "--local-root", str(root), "--out", str(queued),
               "--run-dir", str(tmp_path / "run3"), "--executor", "local", "--license", LICENSE]
    for dry in ((), ("--dry-run",)):
        assert cli.main([*several, *dry]) == 2
        assert f"{queued} is held by run {tmp_path / 'other-run'}" in capsys.readouterr().err
    assert not (tmp_path / "run2").exists() and not (tmp_path / "run3").exists()
    shutil.rmtree(tmp_path / "run1")


def test_resume_of_a_done_run_says_so_and_names_an_output_gone_since(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    out, run = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run) == 0
    capsys.readouterr()
    assert cli.main(["--resume", str(run)]) == 0
    said = capsys.readouterr().out
    assert f"{run}: already done; output at {out}\n" in said and "; but " not in said, said
    shutil.rmtree(out)  # deleted after the run: "already done" alone would hide it
    assert cli.main(["--resume", str(run)]) == 0
    said = capsys.readouterr().out
    assert (f"{run}: already done; output at {out}\n  {LANG}: done; but {out} holds no readable _MANIFEST.json now "
            f"(No such file or directory): ./hplt-shard --verify {out} checks what it holds now") in said, said


def test_a_done_run_names_a_shard_removed_since(tmp_path, capsys):
    """The manifest alone would still match: a shard gone is named too (one listing of OUT)."""
    root = make_corpus(tmp_path, n_docs=20)
    out, run = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run) == 0
    shard = sorted(out.rglob("*.parquet"))[0]
    shard.rename(tmp_path / shard.name)
    capsys.readouterr()
    assert cli.main(["--status", str(run)]) == 0
    said = capsys.readouterr().out
    assert f"state: done: output at {out}; but {shard}, which its manifest lists, is gone: " in said, said
    assert cli.main(["--resume", str(run)]) == 0
    said = capsys.readouterr().out
    assert f"already done; output at {out}\n  {LANG}: done; but {shard}, which its manifest lists, is gone: " in said, said


def test_a_done_run_removes_its_spill_unless_asked_to_keep_it_and_still_says_done(tmp_path, capsys):
    """The spill is the bulk of a run directory (1.3-1.6x the compressed input): nothing reads it once the run
    is done, so a done run removes it; --keep-spill keeps it; both outputs are the same bytes."""
    from shard_pipeline.run.rundir import RunDir

    root = make_corpus(tmp_path, n_docs=40)
    assert run_cli(root, tmp_path / "out1", tmp_path / "run1", "--shard-rows", "10") == 0
    assert run_cli(root, tmp_path / "out2", tmp_path / "run2", "--shard-rows", "10", "--keep-spill") == 0
    gone, kept = RunDir(lang_dir(tmp_path / "run1")), RunDir(lang_dir(tmp_path / "run2"))
    assert not gone.spill_file(0).exists() and kept.spill_file(0).exists()
    assert gone.partition_receipt(0).exists()  # the records stay
    assert cli.main(["--status", str(gone.root)]) == 0 and cli.main(["--resume", str(gone.root)]) == 0
    assert tree_bytes(tmp_path / "out1") == tree_bytes(tmp_path / "out2")
