"""Bulk Arrow builders of the partition buffer: the same arrays, and spill bytes, as per-object conversion."""
from __future__ import annotations

import hashlib
import random

import numpy as np
import orjson
import pyarrow as pa
import pytest

from shard_pipeline.contract.rules import split_of
from shard_pipeline.stages import columns as C
from shard_pipeline.stages.partition import _Buffer, val_flags
from tests.pipeline_util import compiled
from shard_pipeline.stages.spill import SPILL_SCHEMA, blob_bound, section_blob

INT32_OFFSETS = C.MAX_STRING_BYTES
STRINGS = [["a", "bc", "", "0123456789abcdef"], ["ascii", "ünï", "😀x", ""], []]


@pytest.mark.parametrize("strings", STRINGS)
def test_utf8_array_equals_per_object_conversion(strings):
    got = C.utf8_array(strings)
    assert got.equals(pa.array(strings, pa.string()))
    got.validate(full=True)


def test_string_array_is_large_past_int32_offsets(monkeypatch):
    monkeypatch.setattr(C, "MAX_STRING_BYTES", 4)
    assert C.string_array(b"abcd", C.offsets_of(np.array([2, 2]))).type == pa.string()
    got = C.string_array(b"abcde", C.offsets_of(np.array([2, 3])))
    assert got.type == pa.large_string() and got.to_pylist() == ["ab", "cde"]


def test_fixed_bool_binary_arrays():
    assert C.fixed_array(pa.int32(), np.array([1, -2, 3], np.int32)).equals(pa.array([1, -2, 3], pa.int32()))
    flags = np.array([True, False, True] * 7)
    assert C.bool_array(flags).equals(pa.array(flags.tolist(), pa.bool_()))
    digests = [hashlib.sha256(bytes([i])).digest() for i in range(5)]
    assert C.binary_array(32, b"".join(digests)).equals(pa.array(digests, pa.binary(32)))


def test_val_flags_follow_split_of():
    rng = random.Random(6)
    digests = [rng.randbytes(32) for _ in range(2000)]
    edge = (999).to_bytes(8, "big") + bytes(24), (1000).to_bytes(8, "big") + bytes(24), b"\xff" * 32
    digests += list(edge)
    for vp in (0, 1, 249, 500, 1000):
        want = [split_of(d, vp) == "val" for d in digests]
        assert val_flags(b"".join(digests), vp).tolist() == want


def _read(tmp_path, docs, val_permille: int, budget: int = 1 << 40, spill=lambda buf: None) -> tuple[_Buffer, pa.Table]:
    """read_into on a shard of `docs`; and the table the former per-object buffer made of the same records."""
    from types import SimpleNamespace

    from shard_pipeline.input.corpus import InputShard
    from shard_pipeline.input.reader import ReadStats, iter_records
    from shard_pipeline.input.synth import write_jsonl_zst
    from shard_pipeline.stages.partition import read_into

    path = tmp_path / f"in-{len(docs)}.jsonl.zst"
    write_jsonl_zst(path, [orjson.dumps({"id": i, "text": t, "u": u, "openlid-v3": {"lang": [lang]}, "pii": [[0, 1]] * p})
                           for i, t, u, lang, p in docs], frames=2)
    inp = SimpleNamespace(name="in", location=str(path), size=None, mtime=None, source_id="src")
    cfg = SimpleNamespace(content=SimpleNamespace(clean=None, corpus="v4", bad_records="fail", annotations=()))
    buf = _Buffer(val_permille)
    read_into(buf, inp, 7, cfg, None, lambda: spill(buf), budget)
    cols: dict[str, list] = {name: [] for name in SPILL_SCHEMA.names}
    for rec in iter_records(InputShard("in", str(path), None, None, "src"), corpus="v4", stats=ReadStats()):
        raw = rec.text.encode()
        digest = hashlib.sha256(raw).digest()
        row = dict(id=rec.id, text_bytes=len(raw), text=rec.text, source=7, line=rec.line, url=rec.url, lang=rec.lang,
                   n_chars=len(rec.text), sha256=digest, pii_redactions=rec.pii_count,
                   val=int.from_bytes(digest[:8], "big") % 1000 < val_permille)
        for k, v in row.items():
            cols[k].append(v)
    return buf, pa.Table.from_pydict(cols, schema=SPILL_SCHEMA)


def _arrow_sorted(table: pa.Table) -> pa.Table:
    """What partition did before sorting in Python: Arrow's stable sort by id, then take."""
    import pyarrow.compute as pc

    return table.take(pc.sort_indices(table, sort_keys=[("id", "ascending")]))


def test_sorted_table_is_arrows_stable_sort(tmp_path):
    """Repeated ids (stability) and ids across the planes (U+FFFF < U+1F600 in code points and in
    UTF-8 bytes, not in UTF-16): Python's sort gives Arrow's order, and the same spill bytes."""
    odd = ["a", "\uffff", "\U0001f600", "\u00e9", "z", "a\u0301", "A", "\U0010fffd", "\ufb01"]
    docs = [(odd[i % len(odd)] + ("" if i % 3 else "-dup"), f"text {i} " * (i % 5), f"https://e.org/{i}", "eng_Latn", i % 2)
            for i in range(200)]
    buf, reference = _read(tmp_path, docs, val_permille=500)
    reference = _arrow_sorted(reference)
    table = buf.sorted_table()
    assert table.equals(reference)
    assert section_blob(table, "lz4").equals(section_blob(reference, "lz4"))


@pytest.mark.parametrize("kind", ["text", "incompressible", "empty", "one", "large_string"])
def test_section_blob_into_a_kept_buffer_is_the_same_bytes_within_its_bound(tmp_path, monkeypatch, kind):
    rng = random.Random(5)
    if kind == "incompressible":  # random code points from every plane: lz4 cannot shrink them
        docs = [(f"{i:08x}", "".join(chr(rng.choice([rng.randrange(0x20, 0xD800), rng.randrange(0x10000, 0x10FFFF)]))
                                    for _ in range(rng.randrange(0, 400))), "https://e.org/", "eng_Latn", 0)
                for i in range(300)]
    else:
        docs = {"empty": [], "one": _docs(2, 1)}.get(kind, _docs(3, 300))
    if kind == "large_string":
        monkeypatch.setattr(C, "MAX_STRING_BYTES", 1000)
    buf, _ = _read(tmp_path, docs, val_permille=300) if docs else (_Buffer(300), None)
    table = buf.sorted_table()
    want = section_blob(table, "lz4")
    bound = blob_bound(table)
    assert want.size <= bound
    into = np.full(bound + 7, 0xAB, np.uint8)  # stale bytes from an earlier section
    got = section_blob(table, "lz4", into)
    assert got.equals(want)
    assert pa.ipc.open_file(got).read_all().num_rows == len(docs)


def _docs(seed: int, n: int) -> list[tuple]:
    rng = random.Random(seed)
    return [(f"{rng.getrandbits(64):016x}" + ("é" if i % 7 == 0 else ""), "text " * rng.randrange(50) + "😀" * (i % 3),
             f"https://example.org/{i}" + ("/ü" if i % 5 == 0 else ""), "eng_Latn" if i % 4 else "und", i % 3)
            for i in range(n)]


@pytest.mark.parametrize("max_string_bytes", [INT32_OFFSETS, 1000])
def test_buffer_table_and_spill_bytes_equal_from_pydict(tmp_path, monkeypatch, max_string_bytes):
    """Also with large_string columns (a run past 2 GiB, simulated with a low limit): same spill values."""
    monkeypatch.setattr(C, "MAX_STRING_BYTES", max_string_bytes)
    buf, reference = _read(tmp_path, _docs(1, 300), val_permille=300)
    reference = _arrow_sorted(reference)
    table = buf.sorted_table()
    table.validate(full=True)
    assert table.cast(SPILL_SCHEMA).equals(reference)
    assert (table.schema == SPILL_SCHEMA) == (max_string_bytes == INT32_OFFSETS)
    blob = section_blob(table, "lz4")
    assert pa.ipc.open_file(blob).read_all().equals(reference)
    if max_string_bytes == INT32_OFFSETS:
        assert blob.equals(section_blob(reference, "lz4"))


def test_large_string_run_spills_the_same_rows(tmp_path, monkeypatch):
    """A run sorted as large_string (past 2 GiB of text, simulated) writes the same sections and
    values (the 2.4 GB case was run by hand: bench/RESULTS.md section 7); the buffer is empty and
    reusable after a spill."""
    from shard_pipeline.stages.partition import _spill
    from shard_pipeline.stages.spill import SpillReader, SpillWriter

    runs = []
    for limit in (INT32_OFFSETS, 500):
        monkeypatch.setattr(C, "MAX_STRING_BYTES", limit)
        buf, _ = _read(tmp_path, _docs(2, 500), val_permille=100)
        w = SpillWriter(0, tmp_path / f"{limit}.spill", tmp_path / f"{limit}.index.arrow")
        _spill(buf, w, [b"4", b"8", b"c"])
        assert len(buf) == 0 and not buf.fill and not buf.shas
        w.close()
        reader = SpillReader(tmp_path / f"{limit}.spill")
        runs.append([((s.bucket, s.rows, s.text_bytes), reader.rows(s, 0, s.rows)) for s in w.sections])
        reader.close()
    assert [k for k, _ in runs[0]] == [k for k, _ in runs[1]] and len(runs[0]) == 4
    assert all(a.equals(b) for (_, a), (_, b) in zip(*runs))

def test_read_into_spills_at_the_budget(tmp_path):
    """The budget counts UTF-8 text bytes; the runs cover every document."""
    runs = []

    def spill(buf):
        runs.append((len(buf), buf.fill))
        buf.clear()

    buf, reference = _read(tmp_path, _docs(3, 200), val_permille=0, budget=2000, spill=spill)
    assert len(runs) > 3 and all(text_bytes >= 2000 for _, text_bytes in runs)
    assert sum(n for n, _ in runs) + len(buf) == reference.num_rows

@pytest.mark.slow
def test_stage_processes_run_without_pandas():
    """The task runner keeps pandas out; pyarrow then converts Python objects without it."""
    import subprocess
    import sys

    code = ("import sys; from shard_pipeline.worker.task import keep_pandas_out; keep_pandas_out(); import pyarrow as pa; "
            "assert pa.array([1, None]).null_count == 1; pa.Table.from_pydict({'a': ['x']}); "
            "assert 'pandas' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)



@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_gather_strings_equals_concat_then_take_on_random_chunks(native, monkeypatch):
    """Empty strings, astral characters, sliced chunks, empty chunks, repeated and adjacent positions;
    with the compiled gather and with the Python loop."""
    if native:
        _native_gather()
    else:
        monkeypatch.setattr(C, "native_gather", None)
    rng = random.Random(7)
    alphabet = ["a", "é", "€", "😀", "\U0010FFFF", " "]
    reused = C.ReusedBytes(keep=1 << 20)
    for _ in range(200):
        arrays = []
        for _ in range(rng.randint(1, 6)):
            values = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(0, 40))]
            a = pa.array(values, pa.string())
            if len(a) > 2 and rng.random() < 0.5:
                lo = rng.randint(0, len(a) - 1)
                a = a.slice(lo, rng.randint(0, len(a) - lo))
            arrays.append(a)
        n = sum(len(a) for a in arrays)
        if n and rng.random() < 0.3:
            positions = np.arange(n, dtype=np.int64)  # all adjacent: merged into runs
        else:
            positions = np.array([rng.randrange(n) for _ in range(rng.randint(0, 3 * n))] if n else [], np.int64)
        want = pa.concat_arrays(arrays).take(pa.array(positions, pa.int64()))
        for into in (None, reused):  # a fresh join, or the buffer kept from the last round
            got = C.gather_strings(arrays, positions, into)
            got.validate(full=True)
            assert got.equals(want)


def _native_gather():
    return compiled(C.native_gather, "shard_pipeline.stages._gather")


def _join(buf, *pieces: bytes):
    """ReusedBytes.join of whole byte strings, end to end."""
    n = len(pieces)
    return buf.join(list(pieces), np.arange(n), np.zeros(n, np.int64), np.array([len(p) for p in pieces], np.int64))


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_reused_bytes_keeps_its_buffer_and_never_changes_a_view_it_outgrew(native, monkeypatch):
    """A join no larger than the buffer's room reuses its memory; one past it takes a new buffer, so
    what an earlier table still views is not resized under it (the write stage holds the last row group's
    table while it gathers the next)."""
    if native:
        _native_gather()
    else:
        monkeypatch.setattr(C, "native_gather", None)
    buf = C.ReusedBytes(keep=10)
    first = _join(buf, b"abc", b"defg")
    assert bytes(first) == b"abcdefg"
    bigger = _join(buf, b"0123456789")
    assert bytes(bigger) == b"0123456789" and bytes(first) == b"abcdefg"  # outgrown: left as it was
    smaller = _join(buf, b"xy", b"", b"z")
    assert bytes(smaller) == b"xyz" and bytes(bigger[:3]) == b"xyz"  # the same memory, overwritten in place
    middle = buf.join([b"0123456789", bytearray(b"abc")], np.array([1, 0, 1]), np.array([1, 7, 0]), np.array([3, 9, 1]))
    assert bytes(middle) == b"bc78a"  # runs of several sources, in any order
    kept = bytes(bigger)
    large = _join(buf, b"A" * 11)  # over `keep`: a buffer of its own, the kept one untouched
    assert bytes(large) == b"A" * 11 and bytes(bigger) == kept


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_reused_bytes_has_room_for_a_join_a_little_larger_than_the_last(native, monkeypatch):
    """Runs and row groups differ by part of a document: a join up to a quarter larger than the
    first (and within `keep`) is written into the same memory, not a fresh buffer faulted in again."""
    if native:
        _native_gather()
    else:
        monkeypatch.setattr(C, "native_gather", None)
    buf = C.ReusedBytes(keep=1000)
    first = _join(buf, b"a" * 400)
    second = _join(buf, b"b" * 450, b"c" * 50)  # 500 bytes: the first join's 400 and a quarter
    assert bytes(second) == b"b" * 450 + b"c" * 50
    assert bytes(first) == b"b" * 400  # the same memory, overwritten in place
    third = _join(buf, b"d" * 501)  # past the room: a new buffer, the one viewed before left as it was
    assert bytes(third) == b"d" * 501 and bytes(second) == b"b" * 450 + b"c" * 50
    assert C.ReusedBytes(keep=1000).room(900) == 1000 and C.ReusedBytes(keep=1000).room(2000) == 2000


def test_native_gather_checks_every_run_before_copying():
    _native_gather()
    out = bytearray(b"-" * 8)
    src = [b"abcdef"]
    for owner, start, end in (([1], [0], [1]), ([0], [4], [7]), ([0], [3], [2]), ([-1], [0], [1]),
                              ([0, 0], [0, 0], [6, 6])):  # no such source, past its end, backwards, too much
        with pytest.raises(ValueError):
            C.native_gather(src, *(np.array(x, np.int64) for x in (owner, start, end)), out)
        assert out == b"-" * 8
    with pytest.raises(ValueError):
        C.native_gather(src, np.zeros(2, np.int64), np.zeros(1, np.int64), np.ones(2, np.int64), out)
    assert C.native_gather(src, np.zeros(2, np.int64), np.array([0, 2]), np.array([2, 4]), out) == 4
    assert out == b"abcd----"
