"""The fast decoder (msgspec) against the strict one (orjson + checks), line by line.

A line the fast path accepts must be a line the strict path accepts, with identical values;
everything else is decided by the strict path. Checked on hand-made tricky lines (escapes,
surrogates, numbers at and beyond double range, nulls, missing and extra fields, nested and
wrong types, repeated keys), on random combinations of them, and on random byte damage; then
through ``iter_records`` itself, which must yield and reject exactly what the strict path says.
"""

from __future__ import annotations

import random

import orjson
import pytest

from shard_pipeline.input.corpus import InputShard
from shard_pipeline.input.reader import QuarantineWriter, ReadStats, iter_records
from shard_pipeline.input.records import MAX_ID_CHARS, FastError, HpltRecord, fast_decoder, strict_record
from tests.unit.input.test_input_reader import compress

# JSON texts of values, as bytes: some valid, some not JSON at all, some beyond double range.
STRINGS = [
    b'"plain"', b'"caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80"', b'"a\\nb\\tc\\"d\\\\e\\/f"', b'"\\u0000x"',
    b'"\\u001f"', b'"\\u00e9"', b'"\\ud83d\\ude00"', b'"\\uD83D\\uDE00"', b'"\\ud800"', b'"x\\udc00y"',
    b'"\\ude00\\ud83d"', b'"\\ud800\\u0041"', b'"\\ud800\\ud800"', b'"\xff"', b'"\xc0\xaf"', b'"\xed\xa0\x80"',
    b'"\xe2\x82"', b'"\xf4\x90\x80\x80"', b'"\x01"', b'"\x7f"', b'"\\x"', b'"\\u12"', b'""', b'"\\u2028"',
    b'"\xe2\x80\xa8"', b'"\xc2\xa0"', b'"a b"', b'"\\u0069d"', b"'single'", b'"unterminated',
]
NUMBERS = [
    b"0", b"-0", b"1", b"-1", b"0.5", b"1e308", b"1.7976931348623157e308", b"1.8e308", b"1e309", b"1e400",
    b"-1e400", b"1E+400", b"1e-400", b"0.0000001e-999", b"123456789012345678901234567890", b"9" * 99,
    b"9" * 100, b"9" * 309, b"9" * 400, b"0." + b"1" * 500, b"1" * 200 + b"e99", b"18446744073709551616",
    b"-9223372036854775809", b"NaN", b"Infinity", b"-Infinity", b"01", b"1.", b".5", b"+1", b"1e", b"0x10",
]
OTHERS = [b"null", b"true", b"false", b"[]", b"{}", b"[1,2]", b'["x"]', b'{"a":1}', b"[[0,3],[5,9]]",
          b'[["a"]]', b"[[0,1,2]]", b"[1e400]", b"[[1e400]]", b'{"lang":["eng_Latn"]}', b'{"lang":[]}',
          b'{"lang":[""]}', b'{"lang":[1,"x"]}', b'{"lang":"eng"}', b'{"lang":["x"],"prob":[0.5]}',
          b'{"lang":["x"],"extra":1}', b'{"lang":["fin_Latn"],"prob":[1e400]}', b"[" * 40 + b"]" * 40,
          b"[" * 600 + b"]" * 600, b"[" * 1100 + b"]" * 1100, b"[1,]", b"{,}"]
VALUES = STRINGS + NUMBERS + OTHERS

V4_KEYS = [b"f", b"o", b"s", b"rs", b"c", b"ts", b"de", b"crawl_id", b"xml", b"md", b"openlid_v2", b"glotlid_v3",
           b"seg_langs_openlid_v3", b"cluster_size", b"filter", b"noise", b"doc_scores", b"web-register",
           b"htmllang", b"metalang", b"allowed", b"bsc-edu", b"propella-4b", b"unknown_key", b"lang", b"prob"]


def good_fields(i: int, v4: bool) -> list[tuple[bytes, bytes]]:
    fields = [
        (b"f", b'"./segments/x.warc.gz"'), (b"o", b"39075652"), (b"u", b'"https://example.org/%d"' % i),
        (b"ts", b'"2024-01-01T00:00:00Z"'), (b"id", b'"%032x"' % i),
        (b"text", b'"Doc %d: caf\xc3\xa9 \\n second \\u00e9 \\ud83d\\ude00"' % i),
        (b"pii", b"[[0,3],[4,7]]" if i % 2 else b"[]"), (b"doc_scores", b"[0.9,0.8,1e-05,10]"),
        (b"web-register", b'{"OP":0.434,"LY":0.611}'), (b"cluster_size", b"18"),
    ]
    if v4:
        fields += [(b"openlid_v3", b'{"lang":["fin_Latn","est_Latn"],"prob":[0.9,0.1]}'),
                   (b"xml", b'"<doc>x</doc>"'), (b"md", b'"x"'), (b"seg_langs_openlid_v3", b'["fin_Latn"]')]
    else:
        fields += [(b"lang", b'["deu_Latn","eng_Latn"]'), (b"prob", b"[0.8,0.1]"), (b"seg_langs", b'["deu_Latn"]')]
    return fields


def render(fields: list[tuple[bytes, bytes]], sep: bytes = b",") -> bytes:
    return b"{" + sep.join(b'"' + k + b'":' + v for k, v in fields) + b"}"


def mutations(i: int, v4: bool) -> list[bytes]:
    """One line per single change to a good record, plus whole-line oddities."""
    base = good_fields(i, v4)
    out = [render(base), render(base, b" , "), b"  " + render(base) + b" \t\r", b"\xef\xbb\xbf" + render(base),
           render(base) + b" x", render(base) + b"\x00", b"", b"   ", b"\r", b"[]", b'"x"', b"1", b"null",
           render(base)[:-1], render(base)[:40]]
    for k, _ in base:  # each field missing, null, and replaced by every value
        out.append(render([(kk, vv) for kk, vv in base if kk != k]))
        for v in VALUES:
            out.append(render([(kk, v if kk == k else vv) for kk, vv in base]))
    for k in V4_KEYS:  # extra (or schema) keys with every value
        for v in VALUES:
            out.append(render(base + [(k, v)]))
    for k in (b"id", b"text", b"u", b"pii", b"openlid_v3", b"lang"):  # repeated keys, first or last odd
        for v in (b"5", b"null", b'"x"', b"[]", b'{"lang":["swe_Latn"]}', b'["nld_Latn"]'):
            out.append(render(base + [(k, v)]))
            out.append(render([(k, v)] + base))
    long_id = b'"' + b"a" * (MAX_ID_CHARS + 1) + b'"'
    for v in (long_id, b'"' + b"a" * MAX_ID_CHARS + b'"', b'"a\\nb"', b'"a\\u2028b"', b'"a\xc2\xa0b"', b'"a b"',
              b'"a\\u0085b"', b'"a\\u200bb"'):
        out.append(render([(k, v if k == b"id" else vv) for k, vv in base]))
    out.append(render([(b"\\u0069d" if k == b"id" else k, v) for k, v in base]))
    out.append(render(base + [(b"\\u0069d", b'"other"')]))
    out.append(render([(k, v) for k, v in base if k != b"openlid_v3"] + [(b"openlid-v3", b'{"lang":["swe_Latn"]}')]))
    out.append(render(base + [(b"openlid_v3", b"null"), (b"openlid-v3", b'{"lang":["swe_Latn"]}')]))
    return out


def fast_record(decode, raw: bytes, line: int, v4: bool) -> HpltRecord | None:
    """The fast path of ``reader._records`` for one line (kept in step with it by test_iter_records_agrees)."""
    try:
        r = decode(raw)
    except FastError:
        return None
    if not (r.id and r.u and len(r.id) <= MAX_ID_CHARS and r.id.isprintable()):
        return None
    lid = (r.openlid_v3 if r.openlid_v3 is not None else r.openlid_dash) if v4 else None
    langs = (None if lid is None else lid.lang) if v4 else r.lang
    return HpltRecord(line, r.id, r.text, r.u, langs[0] if langs and langs[0] else "und",
                      0 if r.pii is None else len(r.pii))


def damaged(rng: random.Random, line: bytes) -> bytes:
    b = bytearray(line)
    for _ in range(rng.randint(1, 3)):
        pos = rng.randrange(len(b) + 1)
        choice = rng.random()
        byte = rng.choice(b'\\"{}[]:,0e9-.u \xff\xc3\xed\x80\x00\x7f')
        if choice < 0.4:
            b[pos:pos] = bytes([byte])
        elif choice < 0.8 and pos < len(b):
            b[pos] = byte
        elif pos < len(b):
            del b[pos]
    return bytes(b)


def corpus(v4: bool) -> list[bytes]:
    rng = random.Random(14 + v4)
    lines = mutations(7, v4)
    base = good_fields(3, v4)
    for _ in range(1500):  # random combinations of several changes
        fields = list(base)
        for _ in range(rng.randint(1, 4)):
            k = rng.choice([k for k, _ in fields] + V4_KEYS)
            v = rng.choice(VALUES)
            fields = [(kk, vv) for kk, vv in fields if kk != k or rng.random() < 0.3] + [(k, v)]
            rng.shuffle(fields)
        lines.append(render(fields))
    good = [render(good_fields(i, v4)) for i in range(50)]
    lines += [damaged(rng, rng.choice(good)) for _ in range(1500)]
    return [ln for ln in lines if b"\n" not in ln]


@pytest.mark.parametrize("v4", [True, False], ids=["v4", "v3"])
def test_fast_accepts_only_what_strict_accepts(v4: bool) -> None:
    decode = fast_decoder(v4)
    lines = corpus(v4)
    accepted = strict_ok = 0
    for n, raw in enumerate(lines, 1):
        strict = strict_record(raw, n, v4)
        strict_ok += isinstance(strict, HpltRecord)
        for variant in (raw, raw + b"\n"):
            fast = fast_record(decode, variant, n, v4)
            if fast is not None:
                accepted += 1
                assert isinstance(strict, HpltRecord), (raw[:300], strict)
                assert tuple(fast) == tuple(strict), raw[:300]
                assert all(type(a) is type(b) for a, b in zip(fast, strict, strict=True))
    # the comparison means something only if both paths accept a good share of the lines
    assert accepted > 1000 and strict_ok > accepted // 2, (accepted, strict_ok, len(lines))


def _read_mix(tmp_path, lines: list[bytes], v4: bool, annotations: tuple[str, ...] = ()) -> tuple[list, ReadStats]:
    """The records iter_records yields from `lines` written as one 3-frame shard, in quarantine mode, and its stats."""
    path = tmp_path / "mix.jsonl.zst"
    path.write_bytes(compress(b"\n".join(lines) + b"\n", frames=3))
    stats = ReadStats()
    with QuarantineWriter(tmp_path / "q.jsonl") as q:
        got = list(iter_records(InputShard("mix", str(path), None, None, "src"), corpus="v4" if v4 else "v3",
                                bad_records="quarantine", quarantine=q, stats=stats, annotations=annotations))
    return got, stats


@pytest.mark.parametrize("v4", [True, False], ids=["v4", "v3"])
def test_iter_records_agrees_with_strict(tmp_path, v4: bool) -> None:
    """Through the real hot loop: the records it yields and the reasons it counts are the strict path's."""
    lines = corpus(v4)
    got, stats = _read_mix(tmp_path, lines, v4)
    want, reasons = [], {}
    for n, raw in enumerate(lines, 1):
        r = strict_record(raw, n, v4)
        if isinstance(r, HpltRecord):
            want.append(r)
        else:
            reasons[r[0]] = reasons.get(r[0], 0) + 1
    assert [tuple(r) for r in got] == [tuple(r) for r in want]
    assert stats.quarantined == reasons
    assert stats.read == len(lines) == stats.kept + sum(reasons.values())
    kept = [orjson.loads(ln)["raw"] for ln in (tmp_path / "q.jsonl").read_bytes().splitlines()]
    assert len(kept) == sum(reasons.values())


@pytest.mark.parametrize("v4", [True, False], ids=["v4", "v3"])
def test_annotations_are_the_plain_json_values_of_every_kept_line(tmp_path, v4: bool) -> None:
    """With --annotations every line takes the strict path: the same records and reasons, and each kept line's
    fields are the values a plain json.loads of it gives (absent or null: None)."""
    import json

    from shard_pipeline.input.annotations import ALIASES, resolve_fields

    fields = resolve_fields("quality,register,lid,cluster_size,pii", "v4" if v4 else "v3")
    lines = corpus(v4)
    got, _ = _read_mix(tmp_path, lines, v4, fields)
    want = [r for n, raw in enumerate(lines, 1) if isinstance(r := strict_record(raw, n, v4, fields), HpltRecord)]
    assert [tuple(r) for r in got] == [tuple(r) for r in want] and len(got) > 1000
    for rec in got:
        obj = json.loads(lines[rec.line - 1])
        plain = [obj.get(f) if obj.get(f) is not None else obj.get(ALIASES.get(f, f)) for f in fields]
        assert orjson.loads(rec.annotations) == plain, lines[rec.line - 1][:300]
