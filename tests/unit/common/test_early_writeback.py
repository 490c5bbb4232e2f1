"""files.EarlyWriteback: a large file's bytes go to the kernel, and the disk starts on them, while
it is being written (the spill, the shards); what is written is unchanged."""
from __future__ import annotations

import os

from shard_pipeline import files
from shard_pipeline.files import EarlyWriteback


def test_every_n_bytes_the_buffer_is_flushed_and_writeback_started(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(files, "_sync_file_range", lambda: lambda fd, off, n, flags: calls.append((fd, off, n, flags)))
    path = tmp_path / "f"
    with open(path, "wb") as f:
        wb = EarlyWriteback(f, every=10)
        f.write(b"abcdef")
        wb.wrote(6)
        assert os.path.getsize(path) == 0 and calls == []  # below `every`: still in Python's buffer
        f.write(b"ghijk")
        wb.wrote(5)
        assert os.path.getsize(path) == 11 and calls == [(f.fileno(), 0, 0, 2)]  # the whole file, WRITE only
        f.write(b"lmn")
        wb.wrote(3)
        assert len(calls) == 1  # counted afresh from the last start
    assert path.read_bytes() == b"abcdefghijklmn"


def test_without_the_call_it_only_flushes(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_sync_file_range", lambda: None)  # not Linux
    path = tmp_path / "f"
    with open(path, "wb") as f:
        wb = EarlyWriteback(f, every=1)
        f.write(b"x")
        wb.wrote(1)
        assert os.path.getsize(path) == 1


def test_the_real_call_is_found_and_accepted_on_linux(tmp_path):
    call = files._sync_file_range()
    if os.uname().sysname != "Linux":
        assert call is None
        return
    with open(tmp_path / "f", "wb") as f:
        f.write(b"y" * 4096)
        f.flush()
        assert call(f.fileno(), 0, 0, 2) == 0
