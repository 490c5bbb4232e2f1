"""The compiled parts: partition's read loop (shard_pipeline/input/_scan.c) and the byte gather of
partition and write (shard_pipeline/stages/_gather.c).

Both are optional: without a C compiler the install still succeeds and the stages use their Python
paths, which give the same bytes (tests/unit/input/test_native_scan.py, tests/unit/stages/test_columns.py),
only slower.
"""
import hashlib
from pathlib import Path

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]


def extension(name: str, source: str) -> Extension:
    """A compiled module that knows the sha256 of the source it was built from: an import of one built from
    another source (an editable install after a `git pull`) is not used (shard_pipeline/native.py)."""
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    return Extension(name, [source], optional=True, extra_compile_args=FLAGS,
                     define_macros=[("SOURCE_SHA256", f'"{digest}"')])


setup(ext_modules=[
    extension("shard_pipeline.input._scan", "shard_pipeline/input/_scan.c"),
    extension("shard_pipeline.stages._gather", "shard_pipeline/stages/_gather.c"),
])
