"""A compiled module is used only when it was built from the source beside it (shard_pipeline/native.py)."""
from __future__ import annotations

import types

from shard_pipeline import native


def test_a_module_built_from_another_source_is_not_used():
    import hashlib

    current = hashlib.sha256((native.PACKAGE / "input/_scan.c").read_bytes()).hexdigest()
    for built_from, used in ((current, True), ("0" * 64, False), (None, False)):
        fake = types.ModuleType("fake_scan")
        fake.scan = lambda: None
        if built_from is not None:
            fake.SOURCE_SHA256 = built_from
        assert (native.compiled(fake, "scan", "input/_scan.c") is fake.scan) == used
    assert native.compiled(None, "scan", "input/_scan.c") is None  # no compiler: the Python path


def test_the_installed_modules_are_this_sources():
    from shard_pipeline.input.reader import native_scan
    from shard_pipeline.stages.columns import native_gather

    assert native_scan is not None and native_gather is not None  # `pip install -e .` builds both here
