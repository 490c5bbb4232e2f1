"""--annotations end to end (local executor): the shards are the bytes of a run without it; the annotation files
hold the input records' values in the shards' row order; every reader opens the shards as before and joins the
two in the documented way; --verify and --resume keep them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from shard_pipeline.contract.annotations import ANNOTATIONS_DIR, FIELDS_NAME, annotation_name
from shard_pipeline.contract.verify import verify_output
from shard_pipeline.input.reader import open_decompressed
from shard_pipeline.input.synth import generate_corpus
from shard_pipeline.submit import cli
from tests.pipeline_util import LANG, run_cli, tree_bytes

pytestmark = pytest.mark.slow  # runs the pipeline

FIELDS = {
    "v4": "quality,register,lid,bsc-edu,cluster_size,pii,crawl_id,filter,ts,xml",
    "v3": "quality,register,lid,cluster_size,pii,crawl_id,filter,ts",
}
OPTIONS = ("--shard-rows", "40", "--val-permille", "100", "--row-group-bytes", "4000")


def _corpus(root: Path, corpus: str) -> Path:
    names = ["9_1.cc", "8_1.ia"] if corpus == "v4" else ["9_1", "8_1"]
    generate_corpus(root, LANG, corpus=corpus, n_docs=150, shard_names=names, seed=7, text_bytes=500, annotated=True)
    return root


def _input_records(root: Path) -> dict[str, dict]:
    """Every input record by id, from a plain JSON read of the inputs."""
    recs = {}
    for path in sorted((root / LANG).glob("*.jsonl.zst")):
        with open_decompressed(str(path)) as f:
            for line in f:
                obj = orjson.loads(line)
                recs[obj["id"]] = obj
    return recs


def _as_json(value: object, name: str) -> object:
    """An annotation column's value as the input record holds it (an object of scores is a list of key/value)."""
    if name == "web-register" and value is not None:
        return {kv["key"]: kv["value"] for kv in value}
    return value


@pytest.fixture(scope="module", params=["v4", "v3"])
def runs(request, tmp_path_factory) -> tuple[str, Path, Path, Path]:
    corpus = request.param
    base = tmp_path_factory.mktemp(f"annot-{corpus}")
    root = _corpus(base / "in", corpus)
    assert run_cli(root, base / "plain", base / "run-plain", *OPTIONS, corpus=corpus) == 0
    assert run_cli(root, base / "kept", base / "run-kept", *OPTIONS, "--annotations", FIELDS[corpus],
                   corpus=corpus) == 0
    return corpus, root, base / "plain", base / "kept"


def test_shards_are_the_bytes_of_a_run_without_annotations(runs) -> None:
    _, _, plain, kept = runs
    shards = {k: v for k, v in tree_bytes(kept).items() if not k.startswith(("__annotations/", "_MANIFEST"))}
    assert shards == {k: v for k, v in tree_bytes(plain).items() if k != "_MANIFEST.json"}
    m_plain, m_kept = (json.loads((d / "_MANIFEST.json").read_text()) for d in (plain, kept))
    assert m_kept["shards"] == m_plain["shards"]
    names = [f["name"] for f in m_kept["files"]]
    assert names == sorted([annotation_name(e["name"]) for e in m_kept["shards"]] + [FIELDS_NAME])


def test_values_equal_the_input_records_in_the_shards_order(runs) -> None:
    corpus, root, _, kept = runs
    recs = _input_records(root)
    fields = json.loads((kept / FIELDS_NAME).read_text())["fields"]
    nulls = dict.fromkeys([f["name"] for f in fields], 0)
    m = json.loads((kept / "_MANIFEST.json").read_text())
    for e in m["shards"]:
        ann = pq.read_table(kept / annotation_name(e["name"]))
        assert ann.column("id").equals(pq.read_table(kept / e["name"], columns=["id"]).column("id"))
        for row in ann.to_pylist():
            rec = recs[row["id"]]
            for f in fields:
                name = f["name"]
                got = _as_json(row[f["column"]], name)
                assert got == rec.get(name), (row["id"], name)
                nulls[name] += got is None
    assert {f["name"]: f["null_rows"] for f in fields} == nulls
    assert nulls["web-register"] > 0  # synth drops it from about one record in ten: counted, reported


def test_every_reader_opens_the_shards_alone_and_joins_the_annotations(runs, tmp_path) -> None:
    import duckdb
    import polars as pl
    from datasets import concatenate_datasets, load_dataset

    _, _, _, kept = runs
    rows = json.loads((kept / "_MANIFEST.json").read_text())["rows"]
    shards, annots = f"{kept}/*.parquet", f"{kept}/{ANNOTATIONS_DIR}/*.parquet"
    assert pads.dataset(kept, format="parquet").count_rows() == rows
    assert duckdb.sql(f"SELECT count(*) FROM '{shards}'").fetchall()[0][0] == rows
    assert pl.scan_parquet(shards).select(pl.len()).collect().item() == rows
    plain = load_dataset(str(kept), split="train", cache_dir=str(tmp_path / "c1"))
    assert plain.column_names == pq.read_schema(next(kept.glob("*.parquet"))).names

    # the documented joins (README, DESIGN "Annotations")
    joined = duckdb.sql(f"SELECT * FROM '{shards}' JOIN '{annots}' USING (id)")
    assert len(joined.fetchall()) == rows and "doc_scores" in joined.columns
    polars_joined = pl.read_parquet(shards).join(pl.read_parquet(annots), on="id")
    assert polars_joined.height == rows
    first = sorted(kept.glob("*.parquet"))[0]
    s, a = pq.read_table(first), pq.read_table(kept / annotation_name(first.name))
    side = pa.Table.from_arrays(s.columns + a.columns[1:], names=s.column_names + a.column_names[1:])
    assert side.column("id").equals(a.column("id"))
    ds_s = load_dataset("parquet", data_files=shards, split="train", cache_dir=str(tmp_path / "c2"))
    ds_a = load_dataset("parquet", data_files=annots, split="train", cache_dir=str(tmp_path / "c3"))
    both = concatenate_datasets([ds_s, ds_a.rename_column("id", "annotation_id")], axis=1)
    assert both["id"] == both["annotation_id"]


def test_verify_passes_and_fails_on_a_reordered_annotation_file(runs, tmp_path) -> None:
    _, _, _, kept = runs
    assert verify_output(kept) == []
    copy = tmp_path / "out"
    shutil.copytree(kept, copy)
    name = annotation_name(json.loads((copy / "_MANIFEST.json").read_text())["shards"][0]["name"])
    t = pq.read_table(copy / name)
    pq.write_table(t.take(list(range(t.num_rows))[::-1]), copy / name)
    assert name in {p.file for p in verify_output(copy)}


@pytest.mark.parametrize("fault", ["partition-after-input:0:kill", "write-mid-shard:0:kill", "finalize-before-swap::kill"])
def test_a_resume_after_a_kill_gives_the_same_bytes(runs, tmp_path, monkeypatch, fault: str) -> None:
    corpus, root, _, kept = runs
    monkeypatch.setenv("HPLT_SHARD_FAULT", fault)
    args = (*OPTIONS, "--annotations", FIELDS[corpus])
    assert run_cli(root, tmp_path / "out", tmp_path / "run", *args, corpus=corpus) != 0
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    assert cli.main(["--resume", str(tmp_path / "run")]) == 0
    assert tree_bytes(tmp_path / "out") == tree_bytes(kept)
