"""The compiled parts: partition's read loop (shard_pipeline/input/_scan.c) and the byte gather of
partition and write (shard_pipeline/stages/_gather.c).

Both are optional: without a C compiler the install still succeeds and the stages use their Python
paths, which give the same bytes (tests/test_native_scan.py, tests/test_columns.py), only slower.
"""
from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(ext_modules=[
    Extension("shard_pipeline.input._scan", ["shard_pipeline/input/_scan.c"], optional=True, extra_compile_args=FLAGS),
    Extension("shard_pipeline.stages._gather", ["shard_pipeline/stages/_gather.c"], optional=True,
              extra_compile_args=FLAGS),
])
