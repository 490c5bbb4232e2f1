"""--split-layout dirs: train/ and validation/, each its own contract shard set.

Each set must be byte for byte what `write_shards` makes of that split's documents alone, and the
top-level manifest must list both sets and every file, so --verify, read_shards, `datasets` and
DuckDB all read it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from shard_pipeline.contract.manifest import build_manifest, write_manifest
from shard_pipeline.contract.rules import ShardFile, split_of
from shard_pipeline.contract.shard import read_shards, write_shards
from shard_pipeline.contract.verify import verify_output
from shard_pipeline.submit import cli
from tests.manifest_schema import assert_valid_manifest
from tests.pipeline_util import (
    lang_dir,
    LANG,
    byte_balanced_cuts,
    config_sha,
    expected_output,
    make_corpus,
    manifest,
    records,
    run_cli,
    tree_bytes,
    write_records,
)

VAL = 100  # permille: enough validation rows for several shards
DIRS = ("--split-layout", "dirs", "--val-permille", str(VAL))


def prefixed(folder: str, m: dict) -> list[dict]:
    return [{**e, "name": f"{folder}/{e['name']}"} for e in m["shards"]]


@pytest.mark.slow
@pytest.mark.parametrize("tasks", [("1", "1", "1"), ("3", "4", "5")])
def test_each_set_is_write_shards_over_its_split(tmp_path, tasks):
    """Same bytes as the in-memory writer over each split alone, whatever the task and bucket counts."""
    partition_tasks, write_tasks, buckets = tasks
    root = make_corpus(tmp_path, n_docs=240)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run_dir, *DIRS, "--shard-rows", "7", "--row-group-bytes", "3000",
                   "--partition-tasks", partition_tasks, "--write-tasks", write_tasks, "--buckets", buckets) == 0
    m = manifest(out)
    assert_valid_manifest(m)
    assert m["params"]["split_layout"] == "dirs"
    got = tree_bytes(out)
    exp_manifests = {}
    for folder, split in (("train", "train"), ("validation", "val")):
        exp = tmp_path / f"exp-{folder}"
        exp_manifests[folder] = expected_output(root, exp, config_sha256=config_sha(run_dir), shard_rows=7,
                                                val_permille=VAL, row_group_bytes=3000, split=split)
        for name, data in tree_bytes(exp).items():
            if name != "_MANIFEST.json":
                assert got[f"{folder}/{name}"] == data, f"{folder}/{name} differs from write_shards over split {split}"
    assert m["shards"] == prefixed("train", exp_manifests["train"]) + prefixed("validation", exp_manifests["validation"])
    assert m["splits"] == {"train": exp_manifests["train"]["rows"], "val": exp_manifests["validation"]["rows"]}
    assert m["rows"] == 240 and m["splits"]["val"] > 7  # several validation shards
    assert set(got) == {"_MANIFEST.json"} | {e["name"] for e in m["shards"]}
    assert verify_output(out) == []
    # read_shards: the whole output, or one split without opening the other set
    val_ids = [d.id for d in read_shards(tmp_path / "exp-validation")]
    assert [d.id for d in read_shards(out, split="val")] == val_ids
    assert [d.id for d in read_shards(out)] == [d.id for d in read_shards(tmp_path / "exp-train")] + val_ids


@pytest.mark.slow
def test_dirs_is_the_column_layout_split_in_two(tmp_path):
    """Same rows as the default layout; only the cut into files and the row indexes differ."""
    root = make_corpus(tmp_path, n_docs=120)
    col, dirs = tmp_path / "col", tmp_path / "dirs"
    assert run_cli(root, col, tmp_path / "run-col", "--val-permille", str(VAL), "--shard-rows", "20") == 0
    assert run_cli(root, dirs, tmp_path / "run-dirs", *DIRS, "--shard-rows", "20") == 0
    col_docs = list(read_shards(col))
    for split in ("train", "val"):
        want = [(d.id, d.text, d.meta["split"]) for d in col_docs if d.meta["split"] == split]
        got = list(read_shards(dirs, split=split))
        assert [(d.id, d.text, d.meta["split"]) for d in got] == want
        assert [d.meta["minhash_cluster"] for d in got] == list(range(len(got)))  # a row index in its own set
    mc, md = manifest(col), manifest(dirs)
    assert (mc["rows"], mc["text_bytes"], mc["splits"], mc["pii"]) == (md["rows"], md["text_bytes"], md["splits"], md["pii"])
    assert mc["config_sha256"] != md["config_sha256"]  # the layout is part of the content config


@pytest.mark.slow
def test_dirs_with_dp_ranks_balances_each_set(tmp_path):
    recs = records(160, seed=51, text_bytes=300)
    for k in range(0, 160, 5):
        recs[k]["text"] = recs[k]["text"] * 5
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs[:90])
    write_records(tmp_path / "clean" / LANG / "9_2.jsonl.zst", recs[90:])
    out = tmp_path / "out"
    assert run_cli(tmp_path / "clean", out, tmp_path / "run", "--split-layout", "dirs", "--val-permille", "200",
                   "--dp-ranks", "2,3", "--shard-rows", "10", "--buckets", "4", "--write-tasks", "3") == 0
    m = manifest(out)
    balance = json.loads((out / "__balance/balance.json").read_text())
    assert set(balance["sets"]) == {"train", "validation"}
    for folder, split in (("train", "train"), ("validation", "val")):
        entries = [e for e in m["shards"] if e["name"].startswith(folder + "/")]
        assert len(entries) % 6 == 0, f"{folder}: {len(entries)} shards, not a multiple of lcm(2, 3)"
        sizes = np.array([len(d.text.encode()) for d in read_shards(out, split=split)])
        assert [e["rows"] for e in entries] == [b - a for a, b in byte_balanced_cuts(sizes, len(entries))]
        assert set(balance["sets"][folder]["ranks"]) == {"2", "3"}
    assert verify_output(out) == []


@pytest.mark.slow
def test_dirs_card_loads_with_datasets_and_duckdb(tmp_path, monkeypatch):
    duckdb = pytest.importorskip("duckdb")  # a test extra: without it only this test skips
    root = make_corpus(tmp_path, n_docs=120)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run", *DIRS, "--shard-rows", "30", "--dataset-card") == 0
    m = manifest(out)
    assert {f["name"] for f in m["files"]} == {"README.md", "_LEDGER.jsonl"}
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    assert ds["train"].num_rows == m["splits"]["train"] and set(ds["train"]["split"]) == {"train"}
    assert ds["validation"].num_rows == m["splits"]["val"] > 0 and set(ds["validation"]["split"]) == {"val"}
    for folder, split in (("train", "train"), ("validation", "val")):
        n, k = duckdb.sql(f"SELECT count(*), count(DISTINCT split) FROM read_parquet('{out}/{folder}/shard-*.parquet') "
                          f"WHERE split = '{split}'").fetchall()[0]
        assert (n, k) == (m["splits"][split], 1)
    assert verify_output(out) == []


@pytest.mark.slow
def test_all_validation_loads_with_datasets(tmp_path, monkeypatch):
    """An empty train split is left out of the card, so datasets still loads the output."""
    root = make_corpus(tmp_path, n_docs=30)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run", "--split-layout", "dirs", "--val-permille", "1000", "--dataset-card") == 0
    assert manifest(out)["splits"] == {"train": 0, "val": 30} and verify_output(out) == []
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    assert list(ds) == ["validation"] and ds["validation"].num_rows == 30


@pytest.mark.slow
def test_empty_validation_set_has_one_empty_shard(tmp_path):
    root = make_corpus(tmp_path, n_docs=40)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run", "--split-layout", "dirs", "--val-permille", "0", "--shard-rows", "15") == 0
    m = manifest(out)
    assert [e["name"] for e in m["shards"]] == ["train/shard-00000-of-00003.parquet", "train/shard-00001-of-00003.parquet",
                                               "train/shard-00002-of-00003.parquet", "validation/shard-00000-of-00001.parquet"]
    assert m["shards"][-1]["rows"] == 0 and m["splits"] == {"train": 40, "val": 0}
    assert verify_output(out) == []


def _texts_in_both_splits(permille: int) -> tuple[str, str]:
    """Two texts whose hashes put one in train and one in val."""
    found: dict[str, str] = {}
    k = 0
    while len(found) < 2:
        text = f"a document about topic {k}"
        found.setdefault(split_of(hashlib.sha256(text.encode()).digest(), permille), text)
        k += 1
    return found["train"], found["val"]


@pytest.mark.slow
def test_a_repeated_id_across_the_two_sets_is_an_error(tmp_path, capsys):
    """Equal ids must meet even when their texts put them in different sets."""
    recs = records(30, seed=52, text_bytes=200)
    train_text, val_text = _texts_in_both_splits(VAL)
    recs[4]["text"], recs[20]["text"] = train_text, val_text
    recs[20]["id"] = recs[4]["id"]
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs[:15])
    write_records(tmp_path / "clean" / LANG / "9_2.jsonl.zst", recs[15:])
    out = tmp_path / "out"
    assert run_cli(tmp_path / "clean", out, tmp_path / "run", *DIRS, "--write-tasks", "2") == 1
    err = capsys.readouterr().err + "".join(p.read_text() for p in (tmp_path / "run" / "logs").rglob("*.log"))
    assert f"repeated document id {recs[4]['id']!r}" in err and "9_1.jsonl.zst:5" in err and "9_2.jsonl.zst:6" in err
    assert not out.exists()


def _hand_made_dirs_output(tmp_path, *, misplace: bool = False, id_in_both: bool = False, sets=("train", "validation")):
    """A dirs output assembled from write_shards sets, to show what --verify checks."""
    from shard_pipeline.contract.rules import Doc

    recs = records(30, seed=53, text_bytes=200)
    docs = [Doc(r["id"], r["text"], {"url": r["u"], "license_spdx": "CC0-1.0"}) for r in recs]
    split = {d.id: split_of(hashlib.sha256(d.text.encode()).digest(), VAL) for d in docs}
    if id_in_both:  # a val document that reuses a train document's id
        train_id = next(d.id for d in docs if split[d.id] == "train")
        docs.append(Doc(train_id, _texts_in_both_splits(VAL)[1], {"url": "https://x.invalid/", "license_spdx": "CC0-1.0"}))
    out = tmp_path / "out"
    out.mkdir()
    entries = []
    for folder, want in (("train", "train"), ("validation", "val")):
        if folder not in sets:
            continue
        chosen = [d for d in docs if (split_of(hashlib.sha256(d.text.encode()).digest(), VAL) == want)
                  != (misplace and folder == "validation")]
        m = write_shards(chosen, tmp_path / folder, dataset="d", version="1", shard_rows=10, val_permille=VAL)
        (tmp_path / folder / "_MANIFEST.json").unlink()
        (tmp_path / folder).rename(out / folder)
        entries += [ShardFile(f"{folder}/{e['name']}", e["rows"], e["bytes"], e["sha256"], e["text_bytes"],
                              e["rows"] if want == "train" else 0, e["rows"] if want == "val" else 0)
                    for e in m["shards"]]
    manifest_ = build_manifest(dataset="d", version="1", config_sha256="0" * 64, shard_rows=10, val_permille=VAL,
                               row_group_bytes=64 << 20, shards=entries, filters=None, dedup=None, pii={},
                               ledger_ref="corpus/LEDGER.jsonl", split_layout="dirs")
    write_manifest(out, manifest_)
    return out


def test_verify_checks_each_set_on_its_own(tmp_path):
    out = _hand_made_dirs_output(tmp_path)
    assert verify_output(out) == []
    (out / "validation" / "notes.txt").write_text("x")
    assert any(p.file == "validation/notes.txt" for p in verify_output(out))


def test_verify_finds_an_id_in_both_sets(tmp_path):
    out = _hand_made_dirs_output(tmp_path, id_in_both=True)
    problems = [f"{p.file}: {p.what}" for p in verify_output(out)]
    assert any(p.startswith("validation/shard-00000-of-00001.parquet") and "is also in train/" in p
               for p in problems), problems


def test_verify_needs_every_set_of_the_layout(tmp_path):
    out = _hand_made_dirs_output(tmp_path, sets=("train",))
    problems = [f"{p.file}: {p.what}" for p in verify_output(out)]
    assert any("lists no shard in validation/" in p for p in problems), problems


def test_verify_finds_rows_in_the_wrong_set(tmp_path):
    out = _hand_made_dirs_output(tmp_path, misplace=True)
    problems = [f"{p.file}: {p.what}" for p in verify_output(out)]
    assert any("validation/shard-00000" in p and "in the shard set of split 'val'" in p for p in problems), problems


@pytest.mark.slow
def test_resumed_dirs_run_gives_the_same_bytes(tmp_path, monkeypatch):
    root = make_corpus(tmp_path, n_docs=120)
    args = (*DIRS, "--shard-rows", "9", "--row-group-bytes", "1500", "--write-tasks", "3", "--buckets", "4",
            "--partition-tasks", "2")
    ref = tmp_path / "ref"
    assert run_cli(root, ref, tmp_path / "run-ref", *args) == 0
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-mid-shard:2")  # the last writer spans the end of train/ and validation/
    assert run_cli(root, out, run_dir, *args) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    assert not out.exists()
    plan = json.loads((lang_dir(run_dir) / "plan.json").read_text())
    a, b = plan["write_tasks"][2]["shards"]
    assert {plan["shard_list"][i]["set"] for i in range(a, b)} == {0, 1}
    assert list(Path(plan["tmp_dir"]).rglob(".*.partial")), "the writer died in the middle of a Parquet file"
    assert cli.main(["--resume", str(run_dir), "--executor", "local", "--jobs", "2"]) == 0
    assert tree_bytes(out) == tree_bytes(ref)


def test_a_previous_outputs_tree_from_its_manifest_is_what_a_walk_of_it_finds(tmp_path):
    """check_replaceable does not list OUT a second time for its permission check: the tree it gives that check,
    built from the manifest, must be the folders and files OUT holds."""
    import os

    from shard_pipeline.contract.manifest import load_manifest
    from shard_pipeline.contract.previous import holdings

    out = _hand_made_dirs_output(tmp_path)
    held = holdings(out, load_manifest(out))
    walked = {f: (sorted(d), sorted(n)) for f, d, n in os.walk(out)}
    assert {f: (sorted(d), sorted(n)) for f, d, n in held.tree()} == walked
    assert set(walked) == {str(out), str(out / "train"), str(out / "validation")}
