"""The strict streaming reader: every line is a record or a named, counted bad record;
every broken stream is a CorruptShard; memory does not grow with the shard."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest
import zstandard

from shard_pipeline.input.corpus import InputShard
from shard_pipeline.input.reader import (
    REASONS,
    BadRecord,
    CorruptShard,
    HpltRecord,
    QuarantineWriter,
    ReadStats,
    iter_records,
    open_decompressed,
    to_doc,
)

REPO = Path(__file__).resolve().parents[3]


# --------------------------------------------------------------------------
# helpers


def v4_line(i: int, **over: object) -> bytes:
    rec: dict = {
        "f": "./segments/x.warc.gz",
        "u": f"https://example.org/{i}",
        "ts": "2024-01-01T00:00:00Z",
        "id": f"{i:032x}",
        "text": f"Doc {i}: café 中文 😀\nsecond paragraph",
        "openlid_v3": {"lang": ["fin_Latn", "est_Latn"], "prob": [0.9, 0.1]},
        "pii": [[0, 3]] * (i % 3),
        "doc_scores": [0.9] * 11,
    }
    rec.update(over)
    return orjson.dumps({k: v for k, v in rec.items() if v is not _DROP})


def v3_line(i: int, **over: object) -> bytes:
    rec: dict = {
        "u": f"https://example.org/v3/{i}",
        "id": f"{i:032x}",
        "text": f"v3 doc {i}",
        "lang": ["deu_Latn", "eng_Latn"],
        "prob": [0.8, 0.1],
        "pii": [],
    }
    rec.update(over)
    return orjson.dumps({k: v for k, v in rec.items() if v is not _DROP})


_DROP = object()


def compress(data: bytes, frames: int = 1, checksum: bool = False) -> bytes:
    """Independent frames cut at line boundaries (t2sz style)."""
    cctx = zstandard.ZstdCompressor(level=3, write_checksum=checksum)
    if frames == 1:
        return cctx.compress(data)
    lines = data.splitlines(keepends=True)
    step = -(-len(lines) // frames)
    return b"".join(cctx.compress(b"".join(lines[k : k + step])) for k in range(0, len(lines), step))


def make_shard(tmp: Path, payload: bytes, name: str = "9_1", *, raw: bool = False) -> InputShard:
    """A shard file holding ``payload`` (compressed unless ``raw``)."""
    path = tmp / "clean" / "fin_Latn" / f"{name}.jsonl.zst"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload if raw else compress(payload))
    st = path.stat()
    return InputShard(name, str(path), st.st_size, int(st.st_mtime), f"hplt-v4/clean/fin_Latn/{name}")


def read_all(shard: InputShard, corpus: str = "v4", **kw: object) -> tuple[list[HpltRecord], ReadStats]:
    stats = ReadStats()
    return list(iter_records(shard, corpus=corpus, stats=stats, **kw)), stats  # type: ignore[arg-type]


# One example of every bad-record kind: (reason, line bytes).
BAD_LINES: list[tuple[str, bytes]] = [
    ("empty_line", b""),
    ("empty_line", b"   \r"),
    ("invalid_utf8", b'{"id":"a","text":"caf\xe9","u":"https://x"}'),
    ("not_json", b'{"id":"a","text":"x","u":"https://x"'),
    ("not_json", b'{"id":"a","text":NaN,"u":"https://x"}'),
    ("lone_surrogate", b'{"id":"a","text":"bad \\udcff here","u":"https://x"}'),
    ("lone_surrogate", b'{"id":"a","text":"high \\ud83d alone","u":"https://x"}'),
    ("not_object", b'["id","text","u"]'),
    ("not_object", b'"just a string"'),
    ("missing_id", b'{"text":"x","u":"https://x"}'),
    ("id_not_string", b'{"id":17,"text":"x","u":"https://x"}'),
    ("bad_id", b'{"id":"","text":"x","u":"https://x"}'),
    ("bad_id", b'{"id":"a\\nb","text":"x","u":"https://x"}'),
    ("bad_id", b'{"id":"a\\u0000b","text":"x","u":"https://x"}'),
    ("missing_text", b'{"id":"a","u":"https://x"}'),
    ("text_not_string", b'{"id":"a","text":["x"],"u":"https://x"}'),
    ("text_not_string", b'{"id":"a","text":null,"u":"https://x"}'),
    ("missing_u", b'{"id":"a","text":"x","url":"https://x"}'),
    ("u_not_string", b'{"id":"a","text":"x","u":5}'),
    ("empty_u", b'{"id":"a","text":"x","u":""}'),
    ("pii_not_list", b'{"id":"a","text":"x","u":"https://x","pii":"0-3"}'),
]


# --------------------------------------------------------------------------
# good records and the field mapping


def test_v4_fields_are_mapped(tmp_path: Path) -> None:
    lines = [v4_line(i) for i in range(5)]
    shard = make_shard(tmp_path, b"\n".join(lines) + b"\n")
    recs, stats = read_all(shard)
    assert [r.line for r in recs] == [1, 2, 3, 4, 5]
    for i, rec in enumerate(recs):
        src = orjson.loads(lines[i])
        assert rec.id == src["id"] and rec.text == src["text"] and rec.url == src["u"]
        assert rec.lang == "fin_Latn"
        assert rec.pii_count == len(src["pii"])
    assert stats.read == stats.kept == 5 and stats.quarantined == {}
    assert stats.json_bytes == sum(len(x) + 1 for x in lines)
    assert stats.compressed_bytes == shard.size


def test_lang_sources_and_und_fallback(tmp_path: Path) -> None:
    lines = [
        v4_line(0),
        v4_line(1, openlid_v3=_DROP, **{"openlid-v3": {"lang": ["swe_Latn"], "prob": [1.0]}}),  # pool spelling
        v4_line(2, openlid_v3=_DROP),
        v4_line(3, openlid_v3={"lang": []}),
        v4_line(4, openlid_v3={"lang": "fin_Latn"}),
        v4_line(5, openlid_v3=None, lang=["deu_Latn"]),  # a v3-style lang is not read in v4
    ]
    recs, _ = read_all(make_shard(tmp_path, b"\n".join(lines)))
    assert [r.lang for r in recs] == ["fin_Latn", "swe_Latn", "und", "und", "und", "und"]

    v3 = [v3_line(0), v3_line(1, lang=_DROP), v3_line(2, lang=[]), v3_line(3, lang="deu_Latn")]
    recs, _ = read_all(make_shard(tmp_path, b"\n".join(v3), name="10_1"), corpus="v3")
    assert [r.lang for r in recs] == ["deu_Latn", "und", "und", "und"]


def test_pii_absent_or_null_counts_zero(tmp_path: Path) -> None:
    lines = [v4_line(0, pii=_DROP), v4_line(1, pii=None), v4_line(2, pii=[[1, 2], [5, 9]])]
    recs, _ = read_all(make_shard(tmp_path, b"\n".join(lines)))
    assert [r.pii_count for r in recs] == [0, 0, 2]


def test_final_line_without_newline_is_a_line(tmp_path: Path) -> None:
    lines = [v4_line(i) for i in range(3)]
    recs, stats = read_all(make_shard(tmp_path, b"\n".join(lines)))  # no trailing newline
    assert [r.id for r in recs] == [orjson.loads(x)["id"] for x in lines]
    assert stats.read == 3


def test_only_newline_splits_lines(tmp_path: Path) -> None:
    # \r, \u2028 and \x85 inside a record must not split it (str.splitlines would).
    text = "a\u2028b\x85c\rd"
    line = v4_line(0, text=text)
    recs, stats = read_all(make_shard(tmp_path, line + b"\r\n" + v4_line(1) + b"\n"))
    assert stats.read == 2 and recs[0].text == text


def test_multi_frame_reads_like_single_frame(tmp_path: Path) -> None:
    payload = b"".join(v4_line(i) + b"\n" for i in range(500))
    single = make_shard(tmp_path, payload, name="9_1")
    multi = make_shard(tmp_path, compress(payload, frames=7), name="9_2", raw=True)
    assert os.path.getsize(multi.location) > os.path.getsize(single.location)  # really 7 frames
    a, sa = read_all(single)
    b, sb = read_all(multi)
    assert a == b and len(a) == 500 and sa.json_bytes == sb.json_bytes == len(payload)


def test_skippable_frame_is_passed_over(tmp_path: Path) -> None:
    skippable = (0x184D2A50).to_bytes(4, "little") + (8).to_bytes(4, "little") + b"metadata"
    payload = v4_line(0) + b"\n"
    shard = make_shard(tmp_path, skippable + compress(payload) + skippable, raw=True)
    recs, _ = read_all(shard)
    assert len(recs) == 1


def test_line_spanning_frames(tmp_path: Path) -> None:
    line = v4_line(0, text="x" * 300_000)
    cctx = zstandard.ZstdCompressor()
    data = cctx.compress(line[:1000]) + cctx.compress(line[1000:] + b"\n" + v4_line(1))
    recs, stats = read_all(make_shard(tmp_path, data, raw=True))
    assert [len(r.text) for r in recs] == [300_000, len(orjson.loads(v4_line(1))["text"])]


def test_non_printable_but_legal_id_is_kept(tmp_path: Path) -> None:
    # NBSP is not printable for str.isprintable() but is not a control character.
    recs, _ = read_all(make_shard(tmp_path, v4_line(0, id="web:\u00a0x")))
    assert recs[0].id == "web:\u00a0x"


def test_to_doc_carries_the_contract_meta(tmp_path: Path) -> None:
    shard = make_shard(tmp_path, v4_line(2) + b"\n" + v4_line(3))
    recs, _ = read_all(shard)
    doc = to_doc(recs[0], shard, "CC0-1.0")
    assert (doc.id, doc.text) == (recs[0].id, recs[0].text)
    assert doc.meta == {
        "source_id": "hplt-v4/clean/fin_Latn/9_1",
        "url": recs[0].url,
        "license_spdx": "CC0-1.0",
        "lang": "fin_Latn",
        "pii_redactions": 2,
        "pii": {"spans": 2},
    }
    assert to_doc(recs[1], shard, "CC0-1.0").meta["pii"] == {}


# --------------------------------------------------------------------------
# bad records


@pytest.mark.parametrize("reason,bad", BAD_LINES, ids=[f"{r}-{k}" for k, (r, _) in enumerate(BAD_LINES)])
def test_bad_record_fails_with_file_line_reason(tmp_path: Path, reason: str, bad: bytes) -> None:
    assert reason in REASONS
    payload = v4_line(0) + b"\n" + v4_line(1) + b"\n" + bad + b"\n" + v4_line(3) + b"\n"
    shard = make_shard(tmp_path, payload)
    stats = ReadStats()
    got = []
    with pytest.raises(BadRecord) as err:
        for rec in iter_records(shard, corpus="v4", stats=stats):
            got.append(rec)
    assert len(got) == 2
    e = err.value
    assert (e.location, e.line, e.reason) == (shard.location, 3, reason)
    assert str(e).startswith(f"{shard.location}:3: {reason}: ")
    assert stats.read == 3 and stats.kept == 2


def test_quarantine_counts_every_kind_and_keeps_it_verbatim(tmp_path: Path) -> None:
    lines = []
    expected = {}
    for k, (reason, bad) in enumerate(BAD_LINES):
        lines.append(v4_line(k))
        lines.append(bad)
        expected[len(lines)] = (reason, bad)
    lines.append(v4_line(999))
    shard = make_shard(tmp_path, b"\n".join(lines) + b"\n")
    qpath = tmp_path / "q" / "quarantine.jsonl"
    stats = ReadStats()
    with QuarantineWriter(qpath) as q:
        recs = list(iter_records(shard, corpus="v4", bad_records="quarantine", quarantine=q, stats=stats))
    assert len(recs) == len(BAD_LINES) + 1
    assert stats.read == len(lines) == stats.kept + sum(stats.quarantined.values())
    counts: dict[str, int] = {}
    for reason, _ in BAD_LINES:
        counts[reason] = counts.get(reason, 0) + 1
    assert stats.quarantined == counts

    rows = [json.loads(x) for x in qpath.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(BAD_LINES)
    for row in rows:
        reason, bad = expected[row["line"]]
        assert row["reason"] == reason
        assert row["source_id"] == shard.source_id and row["location"] == shard.location
        assert row["detail"]
        raw = row["raw"]
        got = base64.b64decode(raw["base64"]) if isinstance(raw, dict) else raw.encode("utf-8")
        assert got == bad
    assert isinstance(next(r for r in rows if r["reason"] == "invalid_utf8")["raw"], dict)


def test_quarantine_file_only_when_needed(tmp_path: Path) -> None:
    qpath = tmp_path / "q.jsonl"
    stats = ReadStats()
    with QuarantineWriter(qpath) as q:
        list(
            iter_records(
                make_shard(tmp_path, v4_line(0)), corpus="v4", bad_records="quarantine", quarantine=q, stats=stats
            )
        )
    assert not qpath.exists() and stats.kept == 1


def test_bad_final_line_without_newline_is_quarantined(tmp_path: Path) -> None:
    shard = make_shard(tmp_path, v4_line(0) + b"\n" + b'{"id":"tail","text":"x"')  # cut mid-record, no newline
    stats = ReadStats()
    with QuarantineWriter(tmp_path / "q.jsonl") as q:
        recs = list(iter_records(shard, corpus="v4", bad_records="quarantine", quarantine=q, stats=stats))
    assert len(recs) == 1 and stats.quarantined == {"not_json": 1} and stats.read == 2


def test_argument_errors_come_before_reading(tmp_path: Path) -> None:
    shard = make_shard(tmp_path, v4_line(0))
    with pytest.raises(ValueError, match="QuarantineWriter"):
        iter_records(shard, corpus="v4", bad_records="quarantine", stats=ReadStats())
    with pytest.raises(ValueError, match="bad_records"):
        iter_records(shard, corpus="v4", bad_records="skip", stats=ReadStats())
    with pytest.raises(ValueError, match="corpus"):
        iter_records(shard, corpus="v2", stats=ReadStats())
    missing = InputShard("9_9", str(tmp_path / "nope.jsonl.zst"), None, None, "x")
    with pytest.raises(FileNotFoundError, match="nope.jsonl.zst"):
        iter_records(missing, corpus="v4", stats=ReadStats())


def test_stats_are_exact_when_the_consumer_stops_early(tmp_path: Path) -> None:
    shard = make_shard(tmp_path, b"\n".join(v4_line(i) for i in range(100)))
    stats = ReadStats()
    it = iter_records(shard, corpus="v4", stats=stats)
    for _ in range(10):
        next(it)
    it.close()  # type: ignore[attr-defined]
    assert stats.read == stats.kept == 10


# --------------------------------------------------------------------------
# stream-level corruption


def _expect_corrupt(shard: InputShard, reason: str) -> tuple[CorruptShard, ReadStats, int]:
    stats = ReadStats()
    n = 0
    with pytest.raises(CorruptShard) as err:
        for _ in iter_records(shard, corpus="v4", stats=stats):
            n += 1
    e = err.value
    assert e.reason == reason and e.location == shard.location
    where = ("before the first line" if e.line == 0 else f"after line {e.line}" if e.between
             else f"line {e.line}")  # never "line 0" (#11)
    assert str(e).startswith(f"{shard.location}: {where}: {reason}: ")
    return e, stats, n


def test_empty_file_is_corrupt(tmp_path: Path) -> None:
    e, _, n = _expect_corrupt(make_shard(tmp_path, b"", raw=True), "empty_file")
    assert n == 0 and e.line == 0


def test_empty_zstd_frame_is_an_empty_shard(tmp_path: Path) -> None:
    recs, stats = read_all(make_shard(tmp_path, b""))  # a valid frame with no content
    assert recs == [] and stats.read == 0


def test_garbage_is_not_zstd(tmp_path: Path) -> None:
    _expect_corrupt(make_shard(tmp_path, b"this is plain text\n" * 50, raw=True), "not_zstd")
    _expect_corrupt(make_shard(tmp_path, b"\x28\xb5", name="9_2", raw=True), "not_zstd")


@pytest.mark.parametrize("frames", [1, 5])
def test_truncated_inside_a_frame(tmp_path: Path, frames: int) -> None:
    payload = b"".join(v4_line(i) + b"\n" for i in range(2000))
    data = compress(payload, frames=frames)
    for cut in (len(data) // 2, len(data) - 1):
        shard = make_shard(tmp_path, data[:cut], raw=True, name=f"9_{cut}")
        e, stats, n = _expect_corrupt(shard, "truncated")
        assert n < 2000 and stats.read == n  # records before the cut were seen, the rest is not faked
        assert e.line in (n, n + 1)


def test_truncated_at_a_frame_boundary_is_undetectable(tmp_path: Path) -> None:
    """Documented limit: a whole-frame prefix is a valid zstd stream; only a known size or count catches it."""
    lines = [v4_line(i) + b"\n" for i in range(100)]
    cctx = zstandard.ZstdCompressor()
    first = cctx.compress(b"".join(lines[:40]))
    recs, stats = read_all(make_shard(tmp_path, first, raw=True))
    assert len(recs) == 40 and stats.compressed_bytes == len(first)


def test_corrupt_frame(tmp_path: Path) -> None:
    payload = b"".join(v4_line(i) + b"\n" for i in range(2000))
    data = bytearray(compress(payload, checksum=True))
    data[len(data) // 2] ^= 0xFF
    data[len(data) // 2 + 7] ^= 0x55
    _expect_corrupt(make_shard(tmp_path, bytes(data), raw=True), "corrupt_frame")


def test_trailing_garbage_after_frames(tmp_path: Path) -> None:
    data = compress(v4_line(0) + b"\n") + b"GARBAGE!" * 4
    e, _, n = _expect_corrupt(make_shard(tmp_path, data, raw=True), "corrupt_frame")
    assert n == 1 and e.line == 1 and e.between  # every line was read: the message says "after line 1"
    assert f": after line 1: corrupt_frame: " in str(e)


def test_open_decompressed_crosses_frames_and_detects_truncation(tmp_path: Path) -> None:
    payload = b"".join(v4_line(i) + b"\n" for i in range(300))
    data = compress(payload, frames=4)
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(data)
    with open_decompressed(str(path)) as fh:
        assert fh.read() == payload
    path.write_bytes(data[: len(data) * 3 // 4])
    with open_decompressed(str(path)) as fh:
        got = b""
        with pytest.raises(CorruptShard) as err:
            while chunk := fh.read(4096):
                got += chunk
        assert err.value.reason == "truncated" and str(path) in str(err.value)
        assert payload.startswith(got) and len(got) < len(payload)
        # The line counts what was decompressed, including what the buffer held back.
        assert got.count(b"\n") < err.value.line <= payload.count(b"\n")
        with pytest.raises(CorruptShard):
            fh.read()  # still broken: never a clean, short EOF


# --------------------------------------------------------------------------
# HTTP: retries, Range resume, short reads. Served from 127.0.0.1 only.


class _Files:
    def __init__(
        self,
        files: dict[str, bytes],
        *,
        drop_once: frozenset = frozenset(),
        always_short: frozenset = frozenset(),
        ignore_range: frozenset = frozenset(),
    ) -> None:
        self.files = files
        self.drop_once = set(drop_once)
        self.always_short = always_short
        self.ignore_range = ignore_range
        self.requests: list[tuple[str, str | None]] = []


def _handler(state: _Files) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            rng = self.headers.get("Range")
            state.requests.append((self.path, rng))
            data = state.files.get(self.path)
            if data is None:
                self.send_error(404)
                return
            start = 0
            if rng and self.path not in state.ignore_range:
                start = int(rng.removeprefix("bytes=").split("-")[0])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", '"v1"')
            self.end_headers()
            if self.path in state.always_short or self.path in state.drop_once:
                state.drop_once.discard(self.path)
                self.wfile.write(body[: len(body) // 2])  # then close: Content-Length is not met
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@pytest.fixture
def http_files(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """start(state) -> base URL of a server on 127.0.0.1; start.sleeps records backoff sleeps."""
    import shard_pipeline.input.fetch as fetch_mod

    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    sleeps: list[float] = []
    monkeypatch.setattr(fetch_mod.time, "sleep", sleeps.append)
    servers = []

    def start(state: _Files) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
        threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()  # shutdown() waits one poll
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    start.sleeps = sleeps  # type: ignore[attr-defined]
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _url_shard(base: str, path: str) -> InputShard:
    return InputShard("10_1", base + path, None, None, "hplt-v3/sorted/fin_Latn/10_1")


def test_http_resumes_with_range_after_a_drop(http_files) -> None:  # type: ignore[no-untyped-def]
    payload = b"".join(v3_line(i) + b"\n" for i in range(3000))
    data = compress(payload, frames=3)
    state = _Files({"/fin_Latn/10_1.jsonl.zst": data}, drop_once=frozenset({"/fin_Latn/10_1.jsonl.zst"}))
    base = http_files(state)
    recs, stats = read_all(_url_shard(base, "/fin_Latn/10_1.jsonl.zst"), corpus="v3")
    assert len(recs) == 3000 and stats.read == 3000
    assert stats.compressed_bytes == len(data) and stats.json_bytes == len(payload)
    ranges = [r for _, r in state.requests]
    assert ranges[0] is None and len(ranges) == 2
    assert ranges[1] == f"bytes={len(data) // 2}-"
    assert http_files.sleeps == [1.0]


def test_http_server_ignoring_range_still_reads_exactly(http_files) -> None:  # type: ignore[no-untyped-def]
    path = "/fin_Latn/10_1.jsonl.zst"
    payload = b"".join(v3_line(i) + b"\n" for i in range(2000))
    data = compress(payload)
    state = _Files({path: data}, drop_once=frozenset({path}), ignore_range=frozenset({path}))
    recs, _ = read_all(_url_shard(http_files(state), path), corpus="v3")
    assert [r.id for r in recs] == [f"{i:032x}" for i in range(2000)]


def test_http_always_short_is_corrupt_not_short(http_files) -> None:  # type: ignore[no-untyped-def]
    sleeps = http_files.sleeps
    path = "/fin_Latn/10_1.jsonl.zst"
    data = compress(b"".join(v3_line(i) + b"\n" for i in range(2000)))
    state = _Files({path: data}, always_short=frozenset({path}), ignore_range=frozenset({path}))
    stats = ReadStats()
    with pytest.raises(CorruptShard) as err:
        list(iter_records(_url_shard(http_files(state), path), corpus="v3", stats=stats))
    assert err.value.reason == "short_read" and path in err.value.location
    assert len(sleeps) == 5 and sleeps == sorted(sleeps) and sleeps[-1] > sleeps[0]  # exponential backoff
    assert len(state.requests) == 6


def test_http_404_shard_is_an_error(http_files) -> None:  # type: ignore[no-untyped-def]
    state = _Files({})
    with pytest.raises(CorruptShard) as err:
        read_all(_url_shard(http_files(state), "/fin_Latn/10_1.jsonl.zst"), corpus="v3")
    assert err.value.reason == "http_error" and "404" in err.value.detail
    assert len(state.requests) == 1  # a 404 is not retried


# --------------------------------------------------------------------------
# memory: independent of shard size; a 200 MB document streams


_MEASURE = textwrap.dedent(
    """
    import resource, sys
    from shard_pipeline.input.corpus import InputShard
    from shard_pipeline.input.reader import ReadStats, iter_records
    shard = InputShard("9_1", sys.argv[1], None, None, "x")
    stats = ReadStats()
    it = iter_records(shard, corpus="v4", stats=stats)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    longest = 0
    for rec in it:
        longest = max(longest, len(rec.text))
        del rec
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(stats.read, stats.json_bytes, longest, (peak - base) * 1024)
    """
)


def _measure(path: Path) -> tuple[int, int, int, int]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    read, json_bytes, longest, growth = (int(x) for x in out)
    return read, json_bytes, longest, growth


def _stream_shard(path: Path, pieces: Iterator[bytes]) -> None:
    with open(path, "wb") as fh, zstandard.ZstdCompressor(level=1).stream_writer(fh) as w:
        for piece in pieces:
            w.write(piece)


@pytest.mark.slow
def test_memory_does_not_grow_with_the_shard(tmp_path: Path) -> None:
    line = v4_line(0, text="lorem ipsum dolor é " * 200) + b"\n"
    n = -(-300_000_000 // len(line))  # at least 300 MB of JSON
    path = tmp_path / "big.jsonl.zst"
    _stream_shard(path, (line for _ in range(n)))
    read, json_bytes, _, growth = _measure(path)
    assert read == n and json_bytes == n * len(line) >= 300_000_000
    assert growth < 64 * 2**20, f"peak RSS grew {growth / 2**20:.0f} MiB for a {json_bytes / 1e6:.0f} MB shard"


@pytest.mark.slow
def test_a_200mb_document_streams(tmp_path: Path) -> None:
    size = 200 * 2**20
    block = ("abcdefgh é ijklmn " * 4096).encode("utf-8")
    head = b'{"id":"big","u":"https://example.org/big","openlid_v3":{"lang":["fin_Latn"]},"text":"'

    def pieces() -> Iterator[bytes]:
        yield v4_line(1) + b"\n"
        yield head
        for _ in range(size // len(block)):
            yield block
        yield b'"}\n'
        yield v4_line(2) + b"\n"

    path = tmp_path / "huge.jsonl.zst"
    _stream_shard(path, pieces())
    read, _, longest, growth = _measure(path)
    text_chars = (size // len(block)) * len(block.decode("utf-8"))
    assert read == 3 and longest == text_chars
    # The line's bytes, orjson's transient buffer and the parsed str (1 byte per char here):
    # about 3x the document, measured 2.9x; never a pile of chunks plus their joined copy.
    assert growth < 4 * size, f"peak RSS grew {growth / 2**20:.0f} MiB for a {size / 2**20:.0f} MiB document"


# --------------------------------------------------------------------------
# the frame walker: every cut point of a multi-frame file is either detected or a frame boundary


def _frames_variety() -> list[bytes]:
    """Frames of every header and block shape: with/without checksum and content size, raw, RLE, multi-block."""
    rnd = __import__("random").Random(7)
    lines = [v4_line(i) + b"\n" for i in range(12)]
    noise = base64.b64encode(rnd.randbytes(200_000))  # incompressible: raw blocks
    big = v4_line(99, text=noise.decode()) + b"\n"
    rle = v4_line(98, text="z" * 300_000) + b"\n"  # RLE blocks
    frames = [
        zstandard.ZstdCompressor(level=3).compress(b"".join(lines[:4])),  # content size, single segment
        zstandard.ZstdCompressor(level=1, write_checksum=True, write_content_size=False).compress(b"".join(lines[4:8])),
        zstandard.ZstdCompressor(level=19, write_checksum=True).compress(big),  # several blocks
        zstandard.ZstdCompressor(level=3).compress(rle),
    ]
    stream = zstandard.ZstdCompressor(level=3, write_checksum=True).compressobj()
    frames.append(stream.compress(b"".join(lines[8:])) + stream.flush())  # streamed: no content size
    return frames


def test_every_cut_point_is_detected_or_a_frame_boundary(tmp_path: Path) -> None:
    frames = _frames_variety()
    data = b"".join(frames)
    ends = {}
    total = 0
    lines_so_far = 0
    for f in frames:
        total += len(f)
        lines_so_far += zstandard.ZstdDecompressor().decompressobj().decompress(f).count(b"\n")
        ends[total] = lines_so_far
    full, _ = read_all(make_shard(tmp_path, data, raw=True))
    assert len(full) == lines_so_far == 14
    cuts = set(range(0, 64)) | set(range(0, len(data), 509)) | {e + d for e in ends for d in (-2, -1, 0, 1, 2)}
    path = tmp_path / "cut.jsonl.zst"
    for cut in sorted(c for c in cuts if 0 <= c <= len(data)):
        path.write_bytes(data[:cut])
        shard = InputShard("9_1", str(path), cut, 0, "x")
        stats = ReadStats()
        if cut in ends:
            recs = list(iter_records(shard, corpus="v4", stats=stats))
            assert len(recs) == ends[cut], cut
            continue
        got: list[HpltRecord] = []
        with pytest.raises(CorruptShard) as err:
            got.extend(iter_records(shard, corpus="v4", stats=stats))
        expected = "empty_file" if cut == 0 else ("not_zstd" if cut <= 4 else "truncated")
        assert err.value.reason == expected, (cut, err.value)
        assert got == full[: len(got)]  # what was yielded before the error is real, never invented
