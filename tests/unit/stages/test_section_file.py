"""The read window of a spill section: the same bytes as the file holds, whatever the reads' sizes and order."""
from __future__ import annotations

import os
import random

from shard_pipeline.stages.spill import READ_WINDOW, Section, _SectionFile


def test_section_file_reads_what_the_file_holds_through_its_window(tmp_path):
    rng = random.Random(3)
    data = rng.randbytes(5 * READ_WINDOW + 123)
    path = tmp_path / "spill"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset, length in ((0, len(data)), (1000, 3 * READ_WINDOW + 7), (len(data) - 10, 10)):
            f = _SectionFile(fd, Section(0, 0, 0, offset, length, 0, 0, 0, 0))
            section = data[offset:offset + length]
            for _ in range(300):
                pos = rng.randrange(length + 1)
                n = rng.choice([-1, 0, 1, 8, 100, READ_WINDOW - 1, READ_WINDOW, 2 * READ_WINDOW])
                f.seek(pos)
                got = f.read(n)
                assert got == (section[pos:] if n < 0 else section[pos:pos + n])
                assert f.tell() == pos + len(got)
            f.seek(0)
            assert b"".join(iter(lambda: f.read(rng.randint(1, 50)), b"")) == section  # front to back in small reads
    finally:
        os.close(fd)
