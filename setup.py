"""The one compiled part: partition's native read loop (shard_pipeline/input/_scan.c).

It is optional: without a C compiler the install still succeeds and partition reads with its
Python path, which gives the same bytes (tests/test_native_scan.py), only slower.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("shard_pipeline.input._scan", ["shard_pipeline/input/_scan.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
