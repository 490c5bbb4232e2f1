"""Bulk Arrow builders of the partition buffer: the same arrays, and spill bytes, as per-object conversion."""
from __future__ import annotations

import hashlib
import random

import numpy as np
import pyarrow as pa
import pytest

from shard_pipeline import columns as C
from shard_pipeline.partition import _Buffer, val_flags
from shard_pipeline.shard import split_of
from shard_pipeline.spill import SPILL_SCHEMA, section_blob

INT32_OFFSETS = C.MAX_STRING_BYTES
STRINGS = [["a", "bc", "", "0123456789abcdef"], ["ascii", "ünï", "😀x", ""], []]


@pytest.mark.parametrize("strings", STRINGS)
def test_utf8_array_equals_per_object_conversion(strings):
    got = C.utf8_array(strings)
    assert got.equals(pa.array(strings, pa.string()))
    got.validate(full=True)


def test_string_array_is_large_past_int32_offsets(monkeypatch):
    monkeypatch.setattr(C, "MAX_STRING_BYTES", 4)
    assert C.string_array(b"abcd", np.array([2, 2])).type == pa.string()
    got = C.string_array(b"abcde", np.array([2, 3]))
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


def _fill(buf: _Buffer, docs) -> dict[str, list]:
    """Fill the buffer as read_into does; return the columns as the former per-object buffer held them."""
    cols: dict[str, list] = {name: [] for name in SPILL_SCHEMA.names}
    for line, (id_, text, url, lang, pii) in enumerate(docs, 1):
        raw = text.encode()
        digest = hashlib.sha256(raw).digest()
        for lst, v in ((buf.ids, id_), (buf.texts, raw), (buf.lines, line), (buf.urls, url), (buf.langs, lang),
                       (buf.n_chars, len(text)), (buf.shas, digest), (buf.piis, pii)):
            lst.append(v)
        row = dict(id=id_, text_bytes=len(raw), text=text, source=buf.source, line=line, url=url, lang=lang,
                   n_chars=len(text), sha256=digest, pii_redactions=pii,
                   val=int.from_bytes(digest[:8], "big") % 1000 < buf.val_permille)
        for k, v in row.items():
            cols[k].append(v)
    return cols


@pytest.mark.parametrize("max_string_bytes", [INT32_OFFSETS, 1000])
def test_buffer_table_and_spill_bytes_equal_from_pydict(monkeypatch, max_string_bytes):
    """Also with large_string columns (a run past 2 GiB, simulated with a low limit): same spill bytes."""
    monkeypatch.setattr(C, "MAX_STRING_BYTES", max_string_bytes)
    rng = random.Random(1)
    docs = [(f"{rng.getrandbits(64):016x}" + ("é" if i % 7 == 0 else ""), "text " * rng.randrange(50) + "😀" * (i % 3),
             f"https://example.org/{i}" + ("/ü" if i % 5 == 0 else ""), "eng_Latn" if i % 4 else "und", i % 3)
            for i in range(300)]
    buf = _Buffer(val_permille=300)
    buf.source = 7
    reference = pa.Table.from_pydict(_fill(buf, docs), schema=SPILL_SCHEMA)
    table = buf.table()
    table.validate(full=True)
    assert table.cast(SPILL_SCHEMA).equals(reference)
    assert (table.schema == SPILL_SCHEMA) == (max_string_bytes == INT32_OFFSETS)
    assert section_blob(table, "lz4").equals(section_blob(reference, "lz4"))


def test_stage_processes_run_without_pandas():
    """stages/_common.py keeps pandas out; pyarrow then converts Python objects without it."""
    import subprocess
    import sys
    from pathlib import Path

    stages = Path(__file__).resolve().parent.parent / "stages"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import _common, pyarrow as pa; "
            "assert pa.array([1, None]).null_count == 1; pa.Table.from_pydict({'a': ['x']}); "
            "assert 'pandas' not in sys.modules")
    subprocess.run([sys.executable, "-c", code, str(stages)], check=True)


def test_large_string_run_spills_the_same_bytes(tmp_path, monkeypatch):
    """A run sorted as large_string (past 2 GiB of text, simulated) writes the same sections."""
    from shard_pipeline.partition import _spill
    from shard_pipeline.spill import SpillWriter

    rng = random.Random(2)
    docs = [(f"{rng.getrandbits(64):016x}", "word " * rng.randrange(40), f"https://e.org/{i}", "eng_Latn", 0)
            for i in range(500)]
    files = []
    for limit in (INT32_OFFSETS, 500):
        monkeypatch.setattr(C, "MAX_STRING_BYTES", limit)
        buf = _Buffer(val_permille=100)
        _fill(buf, docs)
        w = SpillWriter(0, tmp_path / f"{limit}.spill", tmp_path / f"{limit}.index.arrow")
        _spill(buf, w, [b"4", b"8", b"c"])
        w.close()
        files.append(((tmp_path / f"{limit}.spill").read_bytes(), w.sections))
    assert files[0] == files[1]
