"""files.atomic_file's leftovers: what a process killed mid-write leaves, found by name and by nothing else."""
from __future__ import annotations

from shard_pipeline.files import atomic_file, atomic_leftovers


def test_the_file_being_written_is_what_a_kill_would_leave_and_only_it(tmp_path):
    path = tmp_path / "_MANIFEST.json"
    for other in ("._MANIFEST.json.notes.tmp", "._MANIFEST.json.abcdefgh.tmp.bak", ".README.md.abcdefgh.tmp",
                  "_MANIFEST.json.abcdefgh.tmp", "._MANIFEST.json.ABCDEFGH.tmp"):
        (tmp_path / other).write_bytes(b"someone else's")
    (tmp_path / "._MANIFEST.json.a_b_c_d1.tmp").mkdir()  # a folder is never a temporary file
    assert atomic_leftovers(path) == []
    with atomic_file(path) as f:
        f.write(b"{}")
        writing = atomic_leftovers(path)  # a SIGKILL here leaves exactly this file
        assert len(writing) == 1 and writing[0].name.startswith("._MANIFEST.json.")
    assert atomic_leftovers(path) == [] and path.read_bytes() == b"{}"
    assert atomic_leftovers(tmp_path / "missing" / "x.json") == []
