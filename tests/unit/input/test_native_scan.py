"""The native read loop (shard_pipeline/input/_scan.c) against the strict path, and partition with it
against partition without it.

The scan may take a line only when the strict path (orjson + the field checks) accepts it, with the
same id, text, url, language, PII count and character count; every other line is left to the
strict path. Checked on the decoder corpus of test_decoder_diff (tricky values, random
combinations, random byte damage), on random strings built to cross the scan's 8-byte steps, and
through a partition task, whose spill must be byte for byte the Python loop's.
"""

from __future__ import annotations

import hashlib
import random
import struct

import pytest

from shard_pipeline.input import reader
from shard_pipeline.input.records import HpltRecord, strict_record
from tests.pipeline_util import compiled
from tests.unit.input.test_decoder_diff import corpus, good_fields, render


def _scan():
    return compiled(reader.native_scan, "shard_pipeline.input._scan")


def scan_one(raw, v4: bool, line: int = 1):
    """(record, characters) the scan makes of one line, or None when it leaves the line."""
    scan = _scan()
    texts = bytearray(b"junk")
    ids, urls, langs, meta = [], [], [], bytearray()
    nxt, fill, refused = scan([raw], line, 0, v4, texts, 4, 1 << 40, ids, urls, langs, meta)
    if refused:
        assert (nxt, fill, bytes(texts), ids, urls, langs, bytes(meta)) == (0, 4, b"junk", [], [], [], b"")
        return None
    assert nxt == 1 and len(texts) == fill
    end, number, chars, pii = struct.unpack("4q", meta)
    assert end == fill
    return HpltRecord(number, ids[0], texts[4:end].decode("utf-8"), urls[0], langs[0], pii), chars


def check_line(raw: bytes, n: int, v4: bool) -> bool:
    """Assert the scan agrees with the strict path on `raw` (as bytes, with a newline, as bytearray);
    True if the scan took it."""
    strict = strict_record(raw, n, v4)
    took = False
    for variant in (raw, raw + b"\n", bytearray(raw + b"\r\n")):
        got = scan_one(variant, v4, n)
        if got is not None:
            took = True
            rec, chars = got
            assert isinstance(strict, HpltRecord), (raw[:300], strict)
            assert tuple(rec) == tuple(strict), raw[:300]
            assert chars == len(strict.text)
    return took


@pytest.mark.parametrize("v4", [True, False], ids=["v4", "v3"])
def test_scan_takes_only_what_strict_accepts(v4: bool) -> None:
    lines = corpus(v4)
    took = sum(check_line(raw, n, v4) for n, raw in enumerate(lines, 1))
    strict_ok = sum(isinstance(strict_record(raw, 1, v4), HpltRecord) for raw in lines)
    # meaningful only if the scan takes most good lines: it refuses only what it is unsure of
    assert took > 0.85 * strict_ok and took > 1000, (took, strict_ok)


def test_scan_language_choice() -> None:
    """Which language the strict path keeps when both openlid keys, or repeated keys, are there."""
    base = [(k, v) for k, v in good_fields(1, True) if k != b"openlid_v3"]
    lines = [
        render(base + [(b"openlid_v3", b'{"lang":["fin_Latn"]}'), (b"openlid-v3", b'{"lang":["swe_Latn"]}')]),
        render(base + [(b"openlid-v3", b'{"lang":["swe_Latn"]}'), (b"openlid_v3", b'{"lang":["fin_Latn"]}')]),
        render(base + [(b"openlid_v3", b'{"prob":[1]}'), (b"openlid-v3", b'{"lang":["swe_Latn"]}')]),
        render(base + [(b"openlid_v3", b"[]"), (b"openlid-v3", b'{"lang":["swe_Latn"]}')]),
        render(base + [(b"openlid_v3", b'{"lang":null}'), (b"openlid-v3", b'{"lang":["swe_Latn"]}')]),
        render(base + [(b"openlid_v3", b'{"lang":["fin_Latn"],"lang":["est_Latn"]}')]),
        render(base + [(b"openlid_v3", b'{"lang":["fin_Latn"],"lang":null}')]),
        render(base + [(b"openlid_v3", b'{"lang":["", "fin_Latn"]}')]),
        render(base + [(b"openlid_v3", b'{"lang":[["fin_Latn"]]}')]),
        render(base + [(b"openlid_v3", b'{"lang":["fin_Latn",]}')]),  # trailing commas: not JSON
        render(base + [(b"openlid_v3", b'{"lang":["fin_Latn" , ]}')]),
        render(base + [(b"openlid_v3", b'{"lang":[,"fin_Latn"]}')]),
        render(base + [(b"openlid_v3", b'{"lang":["fin_Latn","x",]}')]),
    ]
    langs = set()
    for n, raw in enumerate(lines, 1):
        check_line(raw, n, True)
        rec = strict_record(raw, n, True)
        langs.add(rec.lang if isinstance(rec, HpltRecord) else rec[0])
    assert langs == {"fin_Latn", "est_Latn", "und", "not_json"}  # the cases mean something: each answer occurs


PIECES = ["a", "Z", " ", "é", "中", "😀", "\u2028", "\x7f", "\\", '"', "/", "\n", "\t", "\x00", "\x1f"]
LONE = ["\ud800", "\udfff"]


def random_string(rng: random.Random) -> bytes:
    """A JSON string of random pieces, each raw UTF-8 or escaped, at random lengths around 8-byte steps."""
    out = [b'"']
    for _ in range(rng.randint(0, 40)):
        ch = rng.choice(LONE if rng.random() < 0.005 else PIECES)
        run = rng.choice([1, 1, 1, 7, 8, 9, 15, 16, 17])
        for _ in range(run):
            how = rng.random()
            if "\ud800" <= ch <= "\udfff":
                out.append(b"\\u%04x" % ord(ch))  # a lone surrogate: refused by both
            elif ch in '"\\' or ord(ch) < 0x20:
                out.append(b"\\u%04X" % ord(ch) if how < 0.5 else {"\"": b'\\"', "\\": b"\\\\", "\n": b"\\n",
                                                                     "\t": b"\\t"}.get(ch, b"\\u%04x" % ord(ch)))
            elif how < 0.15:
                cp = ord(ch)
                if cp > 0xFFFF:
                    hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
                    out.append(b"\\u%04x\\u%04X" % (hi, lo))
                else:
                    out.append(b"\\u%04x" % cp)
            elif how < 0.2:
                out.append(b"\\/" if ch == "/" else ch.encode("utf-8"))
            else:
                out.append(ch.encode("utf-8"))
    if rng.random() < 0.05:  # a raw control character: refused by both
        out.insert(rng.randint(1, len(out)), bytes([rng.choice([0, 9, 10, 0x1F])]))
    out.append(b'"')
    return b"".join(out)


@pytest.mark.parametrize("v4", [True, False], ids=["v4", "v3"])
def test_scan_random_strings(v4: bool) -> None:
    rng = random.Random(23 + v4)
    took = 0
    for n in range(1, 1501):
        fields = dict(good_fields(n, v4))
        for key in rng.sample([b"text", b"u", b"id", b"xml", b"md", b"c"], rng.randint(1, 3)):
            fields[key] = random_string(rng)
        raw = render(list(fields.items()))
        if rng.random() < 0.3:  # and a damaged byte
            pos = rng.randrange(len(raw))
            raw = raw[:pos] + bytes([rng.choice(b'\xff\xc3\xed\xf4\x80"\\\x00 ')]) + raw[pos + 1:]
        took += check_line(raw, n, v4)
    assert took > 500, took


@pytest.mark.parametrize("v4", [True, False], ids=["v4", "v3"])
def test_scan_structural_mutations(v4: bool) -> None:
    """At every structural byte of good lines (brackets, braces, commas, colons, quotes): deleted,
    doubled, or followed by a comma or a closing bracket; each variant judged like the strict path."""
    fields = dict(good_fields(5, v4))
    fields[b"n"] = b'[1, [2, {"a": [null, true]}], {}]'
    if v4:
        fields[b"openlid_v3"] = b'{"lang": ["swe_Latn", "x"], "prob": [0.5]}'
    else:
        fields[b"lang"] = b'["deu_Latn" , "x"]'
    lines = [render(list(fields.items())), render(list(fields.items()), b" , ")]
    took = 0
    for raw in lines:
        for i, b in enumerate(raw):
            if b not in b'[]{},:"':
                continue
            for variant in (raw[:i] + raw[i + 1:], raw[:i + 1] + raw[i:], raw[:i + 1] + b"," + raw[i + 1:],
                            raw[:i + 1] + b"]" + raw[i + 1:], raw[:i + 1] + b" ," + raw[i + 1:],
                            raw[:i + 1] + b" \t" + raw[i + 1:]):  # the last one stays valid JSON
                took += check_line(variant, i, v4)
    assert took > 100  # whitespace after any structural byte: valid, and taken


def test_scan_stops_at_the_budget_and_at_a_refused_line() -> None:
    scan = _scan()
    good = [render(good_fields(i, True)) + b"\n" for i in range(6)]
    lines = good[:3] + [b"not json\n"] + good[3:]
    texts, ids, urls, langs, meta = bytearray(), [], [], [], bytearray()
    first_text = len(strict_record(good[0], 1, True).text.encode("utf-8"))
    nxt, fill, refused = scan(lines, 10, 0, True, texts, 0, first_text + 1, ids, urls, langs, meta)
    assert (nxt, refused, len(ids)) == (2, False, 2)  # the record that reaches the budget is taken, then it stops
    nxt, fill, refused = scan(lines, 10, nxt, True, texts, fill, 1 << 40, ids, urls, langs, meta)
    assert (nxt, refused, len(ids)) == (3, True, 3)  # lines[3] is left for the strict path
    nxt, fill, refused = scan(lines, 10, nxt + 1, True, texts, fill, 1 << 40, ids, urls, langs, meta)
    assert (nxt, refused, len(ids), fill, len(texts)) == (7, False, 6, fill, fill)
    numbers = struct.unpack(f"{len(meta) // 8}q", meta)[1::4]
    assert numbers == (10, 11, 12, 14, 15, 16)  # the shard's line numbers, the refused one skipped


def test_scan_keeps_texts_memory_and_refuses_a_viewed_buffer() -> None:
    scan = _scan()
    line = render(good_fields(1, True)) + b"\n"
    texts = bytearray(b"x" * 100_000)
    nxt, fill, _ = scan([line], 1, 0, True, texts, 0, 1 << 40, [], [], [], bytearray())
    assert len(texts) == 100_000 and 0 < fill < 1000  # a reused buffer keeps its length, as slice assignment does
    with pytest.raises(ValueError):  # found by a review: a negative start read before the list
        scan([line], 1, -1, True, texts, 0, 1 << 40, [], [], [], bytearray())
    with pytest.raises(ValueError):
        scan([line], 1, 0, True, texts, len(texts) + 1, 1 << 40, [], [], [], bytearray())
    view = memoryview(texts)
    with pytest.raises(BufferError):  # it never writes through a buffer someone else is viewing
        scan([line] * 100, 1, 0, True, texts, 99_999, 1 << 40, [], [], [], bytearray())
    view.release()


@pytest.fixture
def planned(tmp_path, monkeypatch):
    """A run stopped before plan whose one partition task read a corpus with the decoder corpus's
    lines (good, tricky, damaged) added to one input, bad lines quarantined, in many small runs."""
    from shard_pipeline.input.zstd_stream import open_decompressed
    from tests.pipeline_util import lang_dir, make_corpus, run_cli, write_records

    root = make_corpus(tmp_path, n_docs=120, names=("10_1.cc", "9_1.ia", "9_2.cc"))
    shard = next((root / "eng_Latn").glob("9_1*.jsonl.zst"))
    with open_decompressed(str(shard)) as f:
        lines = f.read().splitlines()
    write_records(shard, lines + corpus(True)[::7])
    monkeypatch.setenv("HPLT_SHARD_FAULT", "plan-start")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--partition-tasks", "1", "--buckets", "3",
                   "--spill-bytes", "20000", "--bad-records", "quarantine") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    return lang_dir(tmp_path / "run")


def _partition(run_path, monkeypatch, native: bool):
    from shard_pipeline.run.rundir import RunDir
    from shard_pipeline.stages import partition

    monkeypatch.setattr(partition, "native_scan", reader.native_scan if native else None)
    run = RunDir(run_path)
    receipt = partition.run_partition(run, 0)
    return (receipt, hashlib.sha256(run.spill_file(0).read_bytes()).hexdigest(), run.spill_index(0).read_bytes(),
            run.quarantine_file(0).read_bytes())


@pytest.mark.slow
def test_partition_spill_is_the_python_loops(planned, monkeypatch) -> None:
    """The same spill bytes, index, quarantine and receipt with and without the scan."""
    _scan()
    native = _partition(planned, monkeypatch, True)
    python = _partition(planned, monkeypatch, False)
    assert native[1:] == python[1:]
    a, b = native[0], python[0]
    assert a.inputs == b.inputs and (a.rows, a.text_bytes, a.runs, a.sections, a.pii_spans) == (
        b.rows, b.text_bytes, b.runs, b.sections, b.pii_spans)
    assert a.runs > 3 and a.rows > 300
    assert sum(sum(r.quarantined.values()) for r in a.inputs) > 100  # the comparison covers bad lines too


@pytest.mark.parametrize("per", [10, 37, 200, 10_000])
def test_head_sample_is_the_python_loops(tmp_path, monkeypatch, per: int) -> None:
    """The submitter's head sample reads with the scan: the same ids, sizes, longest text and line,
    exact counts and estimates as with iter_records, bad lines (skipped) among the first records."""
    from dataclasses import asdict

    from shard_pipeline.input.corpus import find_shards
    from shard_pipeline.input.zstd_stream import open_decompressed
    from shard_pipeline.stages.buckets import sample_heads
    from tests.pipeline_util import LANG, make_corpus, write_records

    _scan()
    root = make_corpus(tmp_path, n_docs=300, names=("10_1.cc", "9_1.ia", "9_2.cc"))
    total = 0
    for k, shard in enumerate(sorted((root / LANG).glob("*.jsonl.zst"))):
        with open_decompressed(str(shard)) as f:
            lines = f.read().splitlines()
        bad = corpus(True)[k::11]
        written = [x for pair in zip(bad, lines) for x in pair] + lines[len(bad):]
        write_records(shard, written)
        total += len(written)
    shards = find_shards(LANG, corpus="v4", local_root=root)
    native = asdict(sample_heads(shards, corpus="v4", per_shard=per))
    monkeypatch.setattr(reader, "native_scan", None)
    python = asdict(sample_heads(shards, corpus="v4", per_shard=per))
    assert native == python
    if per == 10:
        assert len(native["ids"]) == 30 and not native["complete"] and native["compressed_per_doc"] > 0
    if per == 10_000:  # read to the end: every line counted, bad ones too
        assert len(native["complete"]) == 3 and sum(native["complete"].values()) == total > len(native["ids"])


MISTYPED = [b'{"id":"m1","text":"t","u":"x","doc_scores":"high"}', b'{"id":"m2","text":"t","u":"x","cluster_size":2.5}',
            b'{"id":"m3","text":"t","u":"x","web-register":{"NA":"x"}}', b'{"id":"m4","text":"t","u":"x","pii":[["a"]]}',
            b'{"id":"m5","text":"t","u":"x","openlid_v3":{"lang":"eng_Latn"}}', b'{"id":"m6","text":"t","u":"x","doc_scores":[[[[1]]]]}']


@pytest.mark.parametrize("v4", [True, False], ids=["v4", "v3"])
def test_scan_keeps_the_annotations_the_strict_path_takes(v4: bool) -> None:
    """--annotations: whatever line the scan takes, its kept values type to what the strict path gives the line
    (the same bytes, or the same bad-record reason)."""
    from shard_pipeline.input.annotations import from_scan, resolve_fields, scan_keys

    corpus_name = "v4" if v4 else "v3"
    fields = resolve_fields("quality,register,lid,cluster_size,pii", corpus_name)
    scan = _scan()
    took = mistyped = 0
    for n, raw in enumerate(corpus(v4) + MISTYPED, 1):
        kept: list = []
        _, _, refused = scan([raw], n, 0, v4, bytearray(), 0, 1 << 40, [], [], [], bytearray(), scan_keys(fields), kept)
        if refused:
            continue
        took += 1
        strict = strict_record(raw, n, v4, fields)
        got = from_scan(kept[0], fields, corpus_name)
        if isinstance(strict, HpltRecord):
            assert got == strict.annotations, raw[:300]
        else:
            mistyped += 1
            assert isinstance(got, tuple) and got[0] == strict[0] == "annotation_type", raw[:300]
    assert took > 1000 and mistyped >= len(MISTYPED)
