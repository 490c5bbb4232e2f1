"""--annotations: which fields, their types, the refusals, and --verify of the annotation files (fast, in-process)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_pipeline.contract.annotations import (
    ANNOTATIONS_DIR,
    AnnotationWriter,
    annotation_name,
    order_problem,
    shard_of,
)
from shard_pipeline.contract.extras import reader_problem
from shard_pipeline.contract.manifest import MANIFEST_NAME
from shard_pipeline.contract.rules import Doc
from shard_pipeline.contract.shard import write_shards
from shard_pipeline.contract.verify import verify_output
from shard_pipeline.files import out_json_bytes
from shard_pipeline.input.annotations import (
    AbsentField,
    UnknownField,
    annotation_table,
    annotation_values,
    probe_fields,
    resolve_fields,
    schema_of,
)
from shard_pipeline.input.records import HpltRecord, strict_record
from shard_pipeline.run.runconfig import Content, InputRef

V4 = {"id": "a1", "text": "t", "u": "https://x.org/", "doc_scores": [0.5, 1, 0.25], "cluster_size": 3,
      "web-register": {"NA": 0.7, "IN": 1}, "openlid-v3": {"lang": ["eng_Latn"], "prob": [0.9]},
      "propella-4b": {"content_quality": 3.5, "content_safety": "safe"}}


def test_presets_expand_in_order_each_field_once() -> None:
    assert resolve_fields("quality,register,doc_scores", "v4") == ("doc_scores", "web-register")
    assert resolve_fields("lid", "v3") == ("lang", "prob", "seg_langs")
    assert resolve_fields("lid", "v4") == ("openlid_v3", "glotlid_v3", "seg_langs_openlid_v3")


def test_a_name_of_neither_kind_is_refused_naming_it() -> None:
    with pytest.raises(UnknownField) as exc:
        resolve_fields("quality,openlid_v3", "v3")  # a v4 field asked of v3 records
    assert exc.value.name == "openlid_v3"


def test_values_are_typed_by_their_field_absent_ones_null() -> None:
    fields = ("doc_scores", "cluster_size", "web-register", "openlid_v3", "glotlid_v3", "propella-4b")
    values = orjson.loads(annotation_values(V4, fields, "v4"))
    assert values[0] == [0.5, 1.0, 0.25] and isinstance(values[0][1], float)  # a float column takes 1 as 1.0
    assert values[1] == 3 and isinstance(values[1], int)
    assert values[2] == {"NA": 0.7, "IN": 1.0}
    assert values[3] == {"lang": ["eng_Latn"], "prob": [0.9]}  # the pool spelling openlid-v3, read as openlid_v3
    assert values[4] is None
    assert json.loads(values[5]) == V4["propella-4b"]  # an object of mixed values, as its JSON text


def test_a_value_of_another_type_is_a_bad_record() -> None:
    assert annotation_values({**V4, "doc_scores": "high"}, ("doc_scores",), "v4")[0] == "annotation_type"
    assert annotation_values({**V4, "cluster_size": 2.5}, ("cluster_size",), "v4")[0] == "annotation_type"
    raw = orjson.dumps({**V4, "cluster_size": [1]})
    assert strict_record(raw, 1, True, ("cluster_size",))[0] == "annotation_type"


def test_the_strict_path_carries_the_fields_only_when_asked() -> None:
    raw = orjson.dumps(V4)
    assert strict_record(raw, 1, True).annotations is None
    rec = strict_record(raw, 1, True, ("cluster_size",))
    assert isinstance(rec, HpltRecord) and orjson.loads(rec.annotations) == [3]


def test_annotation_table_has_the_ids_then_the_typed_fields() -> None:
    fields = ("doc_scores", "web-register", "openlid_v3", "cluster_size")
    blobs = pa.array([annotation_values(V4, fields, "v4"), annotation_values({}, fields, "v4")], pa.large_binary())
    t = annotation_table(pa.array(["a1", "b2"]), blobs, fields, "v4")
    assert t.schema == schema_of(fields, "v4") and t.column_names[0] == "id"
    assert t.column("web-register")[0].as_py() == [{"key": "NA", "value": 0.7}, {"key": "IN", "value": 1.0}]
    assert t.column("cluster_size").null_count == 1


def test_the_dry_run_refuses_a_field_no_record_carries_and_sizes_the_rest() -> None:
    heads = [("in/9_1.jsonl.zst", [V4, {**V4, "bsc-edu": 2.0}])]
    with pytest.raises(AbsentField) as exc:
        probe_fields(heads, ("doc_scores", "jql"))
    assert exc.value.name == "jql" and "doc_scores" in exc.value.carried
    assert probe_fields(heads, ("doc_scores", "bsc-edu")) > 0  # carried by one record of two: kept, null elsewhere


def _content(**kw) -> Content:
    return Content("v4", "clean", "eng_Latn", "d", "1", "CC0-1.0", 10, 5, 1 << 20, "fail",
                   (InputRef("9_1", "/x", 1, 1, "s"),), **kw)


def test_the_config_hash_changes_only_when_annotations_are_asked() -> None:
    plain = _content()
    doc_without = dataclasses.replace(plain, annotations=())
    assert plain.sha256() == doc_without.sha256()
    assert _content(annotations=("doc_scores",)).sha256() != plain.sha256()
    assert _content(annotations=("doc_scores",)).sha256() != _content(annotations=("web-register",)).sha256()


def test_annotation_files_are_out_of_every_readers_glob() -> None:
    assert reader_problem(annotation_name("shard-00000-of-00001.parquet")) is None
    assert reader_problem(annotation_name("train/shard-00000-of-00001.parquet")) is None
    assert shard_of(annotation_name("train/shard-00000-of-00001.parquet")) == "train/shard-00000-of-00001.parquet"


# ---------------------------------------------------------------- --verify


def _annotated_out(tmp_path: Path) -> tuple[Path, str]:
    """An output of two shards with an annotation file each, listed in its manifest as finalize lists them."""
    docs = [Doc(id=f"{i:032x}", text=f"text {i}", meta={"source_id": "s", "url": f"https://x.org/{i}",
                                                        "license_spdx": "CC0-1.0", "lang": "eng_Latn",
                                                        "pii_redactions": 0, "pii": {}}) for i in range(10)]
    out = tmp_path / "out"
    write_shards(docs, out, dataset="d", version="1", shard_rows=5, ledger_ref=None)
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    fields = ("cluster_size",)
    for e in manifest["shards"]:
        ids = pq.read_table(out / e["name"], columns=["id"]).column("id").combine_chunks()
        blobs = pa.array([orjson.dumps([k]) for k in range(len(ids))], pa.large_binary())
        w = AnnotationWriter(out / annotation_name(e["name"]), schema_of(fields, "v4"))
        w.write(annotation_table(ids, blobs, fields, "v4"))
        rows, size, sha = w.close()
        manifest["files"].append({"name": annotation_name(e["name"]), "bytes": size, "sha256": sha, "rows": rows})
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return out, annotation_name(manifest["shards"][0]["name"])


def test_verify_accepts_annotation_files_in_their_shards_order(tmp_path: Path) -> None:
    out, _ = _annotated_out(tmp_path)
    assert verify_output(out) == []


def test_verify_refuses_a_reordered_annotation_file_even_with_its_hash_updated(tmp_path: Path) -> None:
    out, name = _annotated_out(tmp_path)
    path = out / name
    pq.write_table(pq.read_table(path).take([1, 0, 2, 3, 4]), path)
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    from shard_pipeline.files import file_sha256

    entry = next(f for f in manifest["files"] if f["name"] == name)
    entry.update(bytes=path.stat().st_size, sha256=file_sha256(path))
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    problems = verify_output(out)
    assert [p.file for p in problems] == [name]
    assert order_problem(out / name.removeprefix(ANNOTATIONS_DIR + "/"), path) is not None


def test_verify_refuses_an_edited_annotation_file(tmp_path: Path) -> None:
    out, name = _annotated_out(tmp_path)
    path = out / name
    t = pq.read_table(path)
    pq.write_table(t.set_column(1, "cluster_size", pa.array([9] * t.num_rows, pa.int64())), path)
    assert name in {p.file for p in verify_output(out)}


def test_a_field_named_like_a_shard_column_gets_its_own_column_name() -> None:
    assert schema_of(("lang", "prob"), "v3").names == ["id", "hplt_lang", "prob"]  # the shard's lang is lang[0]


EXAMPLE = Path(__file__).resolve().parents[3] / "examples/hplt-v4/clean"


def _dry_run(*extra: str) -> int:
    from shard_pipeline.submit import cli

    return cli.main(["eng_Latn", "--corpus", "v4", "--local-root", str(EXAMPLE), "--license", "CC0-1.0",
                     "--dry-run", "--executor", "local", *extra])


def test_dry_run_refuses_a_field_the_records_do_not_carry(capsys) -> None:
    assert _dry_run("--annotations", "quality,jql") == 2
    err = capsys.readouterr().err
    assert "'jql'" in err and "doc_scores" in err  # the field, and what the records carry


def test_dry_run_shows_the_extra_volume(capsys) -> None:
    assert _dry_run("--annotations", "quality,register") == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("annotations ")]
    assert len(shown) == 1 and "quality,register" in shown[0]


def test_fields_missing_from_some_records_are_reported_when_done(tmp_path: Path) -> None:
    from shard_pipeline.contract.annotations import FIELDS_NAME, fields_report, null_notes

    fields = ("doc_scores", "web-register")
    report = fields_report(fields, schema_of(fields, "v4"), 200, {"doc_scores": 0, "web-register": 19})
    (tmp_path / FIELDS_NAME).parent.mkdir(parents=True)
    (tmp_path / FIELDS_NAME).write_bytes(out_json_bytes(report))
    notes = null_notes(tmp_path)
    assert len(notes) == 1 and "'web-register'" in notes[0]


def test_partition_carries_each_records_fields_into_its_spill_row(tmp_path: Path) -> None:
    """With --annotations the read keeps every record's fields (the compiled loop does not: it is not taken),
    and the sorted run carries them beside their rows."""
    from types import SimpleNamespace

    from shard_pipeline.input.synth import write_jsonl_zst
    from shard_pipeline.stages.partition import _Buffer, read_into
    from shard_pipeline.stages.spill import ANNOTATED_SPILL_SCHEMA, ANNOTATIONS

    recs = [{**V4, "id": f"{9 - i:032x}", "cluster_size": i} for i in range(6)]
    path = tmp_path / "in.jsonl.zst"
    write_jsonl_zst(path, [orjson.dumps(r) for r in recs])
    inp = SimpleNamespace(name="in", location=str(path), size=None, mtime=None, source_id="src")
    cfg = SimpleNamespace(content=SimpleNamespace(clean=None, corpus="v4", bad_records="fail",
                                                  annotations=("cluster_size",)))
    buf = _Buffer(5, annotated=True)
    read_into(buf, inp, 0, cfg, None, lambda: None, 1 << 30)
    table = buf.sorted_table()
    assert table.schema == ANNOTATED_SPILL_SCHEMA
    by_id = dict(zip(table.column("id").to_pylist(), table.column(ANNOTATIONS).to_pylist()))
    assert by_id == {r["id"]: orjson.dumps([r["cluster_size"]]) for r in recs}


def test_a_written_shards_annotation_file_must_be_the_one_its_receipt_names(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from shard_pipeline.contract.annotations import annotations_differ
    from shard_pipeline.files import file_sha256

    path = tmp_path / annotation_name("shard-00000-of-00001.parquet")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"written")
    shard = SimpleNamespace(name="shard-00000-of-00001.parquet", annotations_sha256=file_sha256(path))
    assert annotations_differ(tmp_path, shard) is None
    assert annotations_differ(tmp_path, SimpleNamespace(name=shard.name, annotations_sha256=None)) is None
    path.write_bytes(b"edited!")
    assert annotations_differ(tmp_path, shard) is not None
    path.unlink()
    assert annotations_differ(tmp_path, shard) is not None


@pytest.mark.parametrize("corpus", ["v4", "v3"])
def test_partition_reads_the_same_with_and_without_the_native_scan(tmp_path: Path, monkeypatch, corpus: str) -> None:
    """The native scan keeps the fields as the strict path takes them: the same runs (rows, annotations, order) and
    the same quarantine, with a mistyped value among good lines (the scan's records before it are undone)."""
    from types import SimpleNamespace

    from shard_pipeline.input.reader import QuarantineWriter, native_scan
    from shard_pipeline.input.synth import make_record, write_jsonl_zst
    from shard_pipeline.stages import partition

    if native_scan is None:
        pytest.skip("the compiled read loop is not built")
    recs = [make_record(i, __import__("random").Random(i), corpus=corpus, text_bytes=200) for i in range(40)]
    for k in (0, 17, 18, 39):
        recs[k]["cluster_size"] = 2.5  # not an int: a bad record, annotation_type
    path = tmp_path / "in.jsonl.zst"
    write_jsonl_zst(path, [orjson.dumps(r) for r in recs])
    inp = SimpleNamespace(name="in", location=str(path), size=None, mtime=None, source_id="src")
    fields = resolve_fields("quality,register,lid,cluster_size", corpus)
    cfg = SimpleNamespace(content=SimpleNamespace(clean=None, corpus=corpus, bad_records="quarantine", annotations=fields))

    def read(native) -> tuple:
        monkeypatch.setattr(partition, "native_scan", native)
        buf, runs = partition._Buffer(5, annotated=True), []
        with QuarantineWriter(tmp_path / f"q-{native is None}.jsonl") as q:
            stats = partition.read_into(buf, inp, 0, cfg, q, lambda: runs.append(buf.sorted_table().to_pylist())
                                        or buf.clear(), 3000)  # a run's texts are a view: read before the next
        runs.append(buf.sorted_table().to_pylist())
        return runs, stats.quarantined, (tmp_path / f"q-{native is None}.jsonl").read_bytes()

    native, python = read(native_scan), read(None)
    assert native == python and native[1] == {"annotation_type": 4} and len(native[0]) > 3
