"""Issue 7 end to end: --clean quarantine kept in OUT, --dataset-card with a ledger, --verify."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from shard_pipeline.contract.shard import read_shards
from shard_pipeline.submit import cli
from tests.manifest_schema import assert_valid_manifest
from tests.pipeline_util import lang_dir, LANG, records, run_cli, write_records


def corpus(tmp_path):
    recs = records(40, seed=21, text_bytes=400)
    recs[3]["text"] = "x" * 12_000  # an identical-character run longer than 10,000
    recs[7]["text"] = ("same line\n" * 300)  # repeated-line content in a long document
    recs[11]["text"] = "\x01\x02 control " * 50  # excessive control characters
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs[:25])
    write_records(tmp_path / "clean" / LANG / "9_2.jsonl.zst", recs[25:])
    return tmp_path / "clean", recs


@pytest.mark.slow
def test_clean_quarantines_keeps_and_counts(tmp_path):
    root, recs = corpus(tmp_path)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run_dir, "--clean", "--shard-rows", "10", "--partition-tasks", "2") == 0
    m = json.loads((out / "_MANIFEST.json").read_text())
    assert_valid_manifest(m)
    assert m["rows"] == 37
    assert m["counts"]["filters"]["clean:documents"] == 3
    assert m["counts"]["filters"]["clean:char_run"] == 1 and m["counts"]["filters"]["clean:repeated_lines"] == 1
    assert m["counts"]["filters"]["clean:control_chars"] == 1
    q = pq.read_table(out / "__quarantine" / "clean" / "documents.parquet").to_pylist()
    assert sorted(r["id"] for r in q) == sorted(recs[k]["id"] for k in (3, 7, 11))
    assert [r["id"] for r in q] == sorted(r["id"] for r in q)  # id order: deterministic
    assert {r["id"]: r["text"] for r in q}[recs[3]["id"]] == recs[3]["text"]  # whole, never rewritten
    policy = json.loads((out / "__quarantine/clean/policy.json").read_text())
    assert policy["thresholds"]["max_char_run"] == 10_000 and policy["quarantined"] == 3
    listed = {f["name"] for f in m["files"]}
    assert listed == {"__quarantine/clean/documents.parquet", "__quarantine/clean/policy.json"}
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert on_disk == listed | {"_MANIFEST.json"} | {s["name"] for s in m["shards"]}
    assert m["ledger"] is None  # no card, no ledger: the manifest points at nothing that is not there
    validation = json.loads((lang_dir(run_dir) / "validation.json").read_text())
    for inp in validation["inputs"]:
        assert inp["read"] == inp["kept"] + sum(inp["quarantined"].values()) + inp["cleaned"]
    assert cli.main(["--verify", str(out)]) == 0


@pytest.mark.slow
def test_clean_threshold_from_the_conf(tmp_path):
    root, recs = corpus(tmp_path)
    conf = tmp_path / "c.conf"
    conf.write_text("CLEAN_MAX_CHAR_RUN=20000\n")
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run", "--clean", "--conf", str(conf)) == 0
    m = json.loads((out / "_MANIFEST.json").read_text())
    assert "clean:char_run" not in m["counts"]["filters"] and m["counts"]["filters"]["clean:documents"] == 2


@pytest.mark.slow
def test_dataset_card_loads_with_datasets_and_duckdb(tmp_path, monkeypatch):
    duckdb = pytest.importorskip("duckdb")  # a test extra: without it only this test skips
    root, recs = corpus(tmp_path)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run", "--dataset-card", "--val-permille", "300", "--shard-rows", "15") == 0
    m = json.loads((out / "_MANIFEST.json").read_text())
    assert m["ledger"] == "_LEDGER.jsonl" and {f["name"] for f in m["files"]} == {"README.md", "_LEDGER.jsonl"}
    ledger = [json.loads(l) for l in (out / "_LEDGER.jsonl").read_text().splitlines()]
    assert [r["documents"] for r in ledger] == [25, 15] and all(r["license_spdx"] == "CC0-1.0" for r in ledger)
    code = json.loads((tmp_path / "run" / "run.json").read_text())["code"]
    commit_row = next(line for line in (out / "README.md").read_text().splitlines() if line.startswith("| tool commit |"))
    assert code["commit"] and code["commit"] in commit_row  # the card names the commit run.json recorded
    assert ("uncommitted changes" in commit_row) == bool(code["dirty"])
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    assert ds["train"].num_rows == m["splits"]["train"]
    assert set(ds["train"]["split"]) == {"train"}
    val = datasets.load_dataset(str(out), "validation", cache_dir=str(tmp_path / "cache"))
    assert sum(v.num_rows for v in val.values()) == m["splits"]["val"] > 0
    n, v = duckdb.sql(f"SELECT count(*), sum(CASE WHEN split = 'val' THEN 1 ELSE 0 END) "
                      f"FROM read_parquet('{out}/shard-*.parquet')").fetchall()[0]
    assert (n, v) == (m["rows"], m["splits"]["val"])
    assert cli.main(["--verify", str(out)]) == 0
    # every file in OUT is listed; a stray one is found by --verify
    (out / "notes.txt").write_text("hello")
    assert cli.main(["--verify", str(out)]) == 1


@pytest.mark.slow
def test_verify_finds_a_damaged_pipeline_shard(tmp_path, capsys):
    root, _ = corpus(tmp_path)
    out = tmp_path / "out"
    assert run_cli(root, out, tmp_path / "run", "--shard-rows", "10") == 0
    shard = sorted(out.glob("shard-*.parquet"))[2]
    data = bytearray(shard.read_bytes())
    data[50] ^= 1
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert cli.main(["--verify", str(out)]) == 1
    assert shard.name in capsys.readouterr().out


@pytest.mark.slow
def test_dp_ranks_give_a_multiple_of_the_lcm_balanced_by_bytes(tmp_path):
    import numpy as np

    from tests.pipeline_util import byte_balanced_cuts

    recs = records(120, seed=31, text_bytes=300)
    for k in range(0, 120, 7):  # uneven sizes, so byte balance differs from row balance
        recs[k]["text"] = recs[k]["text"] * 6
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs[:70])
    write_records(tmp_path / "clean" / LANG / "9_2.jsonl.zst", recs[70:])
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert run_cli(tmp_path / "clean", out, run_dir, "--dp-ranks", "4,6", "--shard-rows", "10", "--buckets", "5",
                   "--partition-tasks", "2", "--write-tasks", "3") == 0
    m = json.loads((out / "_MANIFEST.json").read_text())
    assert len(m["shards"]) % 12 == 0 and len(m["shards"]) == 12  # ceil(120/10) = 12, a multiple of lcm(4, 6)
    # the cuts are exactly the byte-balanced rule over all rows in id order
    docs = list(read_shards(out))
    sizes = np.array([len(d.text.encode()) for d in docs])
    expected = [b - a for a, b in byte_balanced_cuts(sizes, 12)]
    assert [s["rows"] for s in m["shards"]] == expected
    assert [d.id for d in docs] == sorted(r["id"] for r in recs)
    balance = json.loads((out / "__balance/balance.json").read_text())
    assert set(balance["ranks"]) == {"4", "6"} and balance["ranks"]["4"]["shards_per_rank"] == 3
    loads = [sum(s["text_bytes"] for s in m["shards"][r * 3:(r + 1) * 3]) for r in range(4)]
    dev = max(abs(x - sum(loads) / 4) for x in loads) / (sum(loads) / 4)
    assert abs(balance["ranks"]["4"]["max_relative_load_deviation"] - round(dev, 6)) < 1e-6
    assert "__balance/balance.json" in {f["name"] for f in m["files"]}
    assert cli.main(["--verify", str(out)]) == 0
    # the same documents cut by rows: the same rows in the same order
    out2 = tmp_path / "out2"
    assert run_cli(tmp_path / "clean", out2, tmp_path / "run2", "--shard-rows", "10") == 0
    assert [d.id for d in read_shards(out2)] == [d.id for d in docs]


@pytest.mark.slow
def test_shard_bytes_cuts_by_bytes(tmp_path):
    recs = records(60, seed=32, text_bytes=500)
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs)
    out = tmp_path / "out"
    total = sum(len(r["text"].encode()) for r in recs)
    assert run_cli(tmp_path / "clean", out, tmp_path / "run", "--shard-bytes", str(total // 5 + 1)) == 0
    m = json.loads((out / "_MANIFEST.json").read_text())
    assert len(m["shards"]) == 5 and m["rows"] == 60
    assert max(s["text_bytes"] for s in m["shards"]) - min(s["text_bytes"] for s in m["shards"]) <= 2 * max(
        len(r["text"].encode()) for r in recs)
    assert cli.main(["--verify", str(out)]) == 0


def test_finalize_allows_the_folders_of_expected_files_and_nothing_else(tmp_path):
    """The stray-file check before the swap: `__quarantine/` and `__quarantine/clean/` hold expected files."""
    from shard_pipeline.stages.collect import unexpected_files

    for rel in ("shard-00000-of-00001.parquet", "__quarantine/clean/documents.parquet", "__quarantine/left.txt",
                "__quarantine/clean/old.parquet", "train/x"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    expected = {"shard-00000-of-00001.parquet", "__quarantine/clean/documents.parquet"}
    assert unexpected_files(tmp_path, expected) == ["__quarantine/clean/old.parquet", "__quarantine/left.txt",
                                                   "train", "train/x"]
