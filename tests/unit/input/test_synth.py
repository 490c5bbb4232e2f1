"""The HPLT-shaped fixture generator: field sets per hplt-format.md, determinism, frames, atomic writes."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import zstandard

from shard_pipeline.input.synth import generate_corpus, make_record, write_jsonl_zst

REPO = Path(__file__).resolve().parents[3]
# Required keys measured in every record (hplt-format.md 1.2 and 1.3).
V3_KEYS = set(
    "f o s rs u c ts de crawl_id lang prob text cluster_size seg_langs id filter pii doc_scores web-register".split()
)
V4_KEYS = set(
    "f o s rs u c ts de id crawl_id text xml md openlid_v2 openlid_v3 glotlid_v3 seg_langs_openlid_v3 "
    "cluster_size filter pii doc_scores web-register".split()
)


def frames_in(data: bytes) -> int:
    """Count zstd frames by decoding one frame at a time."""
    count = 0
    while data:
        obj = zstandard.ZstdDecompressor().decompressobj()
        obj.decompress(data)
        assert obj.eof
        data = obj.unused_data
        count += 1
    return count


def read_lines(path: Path) -> list[bytes]:
    with open(path, "rb") as fh:
        data = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True).read()
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


def test_v4_record_shape() -> None:
    rng = random.Random(1)
    for i in range(50):
        rec = make_record(i, rng, corpus="v4", lang="fin_Latn")
        assert V4_KEYS <= set(rec) and "lang" not in rec and "prob" not in rec
        assert rec["openlid_v3"]["lang"][0] == "fin_Latn"
        assert len(rec["doc_scores"]) == 11 and all(0 <= x <= 1 for x in rec["doc_scores"])
        assert len(rec["seg_langs_openlid_v3"]) == rec["text"].count("\n") + 1
        assert re.fullmatch(r"[0-9a-f]{32}", rec["id"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rec["ts"])


def test_v3_record_shape() -> None:
    rng = random.Random(2)
    for i in range(50):
        rec = make_record(i, rng, corpus="v3", lang="deu_Latn")
        assert V3_KEYS <= set(rec) and "openlid_v3" not in rec
        assert rec["lang"][0] == "deu_Latn" and len(rec["prob"]) == len(rec["lang"])
        assert len(rec["doc_scores"]) == 10 and all(0 <= x <= 10 for x in rec["doc_scores"])
        assert len(rec["seg_langs"]) == rec["text"].count("\n") + 1


def test_text_is_mixed_and_pii_spans_point_at_pii() -> None:
    rng = random.Random(3)
    recs = [make_record(i, rng, text_bytes=2000) for i in range(200)]
    for rec in recs:
        text = rec["text"]
        assert "\n" in text and 1500 <= len(text.encode("utf-8")) <= 2600
        for start, end in rec["pii"]:
            assert "@" in text[start:end] and " " not in text[start:end]
    assert all(len(r["text"].encode("utf-8")) != len(r["text"]) for r in recs)  # non-ASCII everywhere
    assert any(any(ord(c) > 0xFFFF for c in r["text"]) for r in recs)  # astral emoji too
    assert 10 < sum(1 for r in recs if r["pii"]) < 100


def test_records_are_deterministic() -> None:
    a = [make_record(i, random.Random(9)) for i in range(3)]
    b = [make_record(i, random.Random(9)) for i in range(3)]
    c = [make_record(i, random.Random(10)) for i in range(3)]
    assert a == b and a != c


@pytest.mark.parametrize(
    "style,pattern",
    [
        ("hex", r"[0-9a-f]{32}"),
        ("web", r"web:\d+"),
        ("sorted", r"doc-\d{10}"),
        ("prefix", r"https://www\.example\.org/.{40,}"),
    ],
)
def test_id_styles(style: str, pattern: str) -> None:
    rng = random.Random(4)
    ids = [make_record(i, rng, id_style=style, text_bytes=100)["id"] for i in range(120)]
    assert all(re.fullmatch(pattern, x) for x in ids) and len(set(ids)) == 120
    if style == "sorted":
        assert ids == sorted(ids)
    if style == "prefix":
        assert len(os.path.commonprefix(ids)) >= 40
    if style == "web":
        assert sorted(ids) != ids  # "web:10" sorts before "web:2": the string order the contract uses
    with pytest.raises(ValueError):
        make_record(0, rng, id_style="uuid")


def test_write_jsonl_zst_frames_and_size(tmp_path: Path) -> None:
    lines = [orjson.dumps({"n": i}) for i in range(100)]
    path = tmp_path / "d" / "x.jsonl.zst"
    size = write_jsonl_zst(path, lines, frames=7)
    data = path.read_bytes()
    assert size == len(data) and frames_in(data) == 7
    assert read_lines(path) == lines
    assert write_jsonl_zst(path, iter(lines)) == path.stat().st_size and frames_in(path.read_bytes()) == 1
    assert read_lines(path) == lines


def test_write_is_atomic(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl.zst"
    write_jsonl_zst(path, [b"{}"])
    before = path.read_bytes()

    def failing():  # type: ignore[no-untyped-def]
        yield b'{"a":1}'
        raise RuntimeError("generator died")

    with pytest.raises(RuntimeError):
        write_jsonl_zst(path, failing())
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["x.jsonl.zst"]


def test_generate_corpus_layout_and_consistency(tmp_path: Path) -> None:
    names = ["10_1.cc", "9_1.ia", "8_2.ab", "7_1.cc"]
    paths = generate_corpus(
        tmp_path, "eng_Latn", n_docs=22, shard_names=names, seed=5, text_bytes=300, id_style="web", frames=3
    )
    assert paths == [tmp_path / "eng_Latn" / f"{n}.jsonl.zst" for n in names]
    per = {p.name: [orjson.loads(x) for x in read_lines(p)] for p in paths}
    assert [len(per[p.name]) for p in paths] == [6, 6, 5, 5]
    ids = [r["id"] for recs in per.values() for r in recs]
    assert len(set(ids)) == 22
    for name, recs in per.items():
        bin_, src = int(name.split("_")[0]), name.split(".")[1]
        for r in recs:
            assert int(r["doc_scores"][0] * 10) == bin_
            crawl = r["crawl_id"]
            assert {"ab": crawl == "archivebot", "ia": crawl.startswith("wide"), "cc": crawl.startswith("CC-MAIN-")}[
                src
            ]
    assert frames_in(paths[0].read_bytes()) == 3


def test_generate_corpus_is_deterministic(tmp_path: Path) -> None:
    kw = dict(n_docs=10, shard_names=["9_1", "10_1"], text_bytes=200, corpus="v3")
    a = generate_corpus(tmp_path / "a", "fin_Latn", seed=1, **kw)  # type: ignore[arg-type]
    b = generate_corpus(tmp_path / "b", "fin_Latn", seed=1, **kw)  # type: ignore[arg-type]
    c = generate_corpus(tmp_path / "c", "fin_Latn", seed=2, **kw)  # type: ignore[arg-type]
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert [p.read_bytes() for p in a] != [p.read_bytes() for p in c]
    assert orjson.loads(read_lines(a[0])[0])["lang"][0] == "fin_Latn"


@pytest.mark.slow
def test_cli(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = [sys.executable, "-m", "shard_pipeline.input.synth"]
    help_text = subprocess.run(run + ["--help"], capture_output=True, text=True, env=env, check=True).stdout
    for opt in ("--corpus", "--n-docs", "--shards", "--seed", "--text-bytes", "--id-style", "--frames"):
        assert opt in help_text
    out = subprocess.run(
        run
        + [
            str(tmp_path),
            "fin_Latn",
            "--corpus",
            "v3",
            "--n-docs",
            "7",
            "--shards",
            "10_1,9_1.jsonl.zst",
            "--seed",
            "3",
            "--text-bytes",
            "200",
            "--id-style",
            "sorted",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    assert out == [str(tmp_path / "fin_Latn" / "10_1.jsonl.zst"), str(tmp_path / "fin_Latn" / "9_1.jsonl.zst")]
    recs = [orjson.loads(x) for x in read_lines(Path(out[0]))]
    assert [r["id"] for r in recs] == [f"doc-{i:010d}" for i in range(4)] and "lang" in recs[0]
