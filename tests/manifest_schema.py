"""Validate a `_MANIFEST.json` dict against the packaged corpus-manifest.schema.json, as --verify does.

    from tests.manifest_schema import assert_valid_manifest
"""
from __future__ import annotations

from typing import Any

from shard_pipeline.contract.verify_manifest import schema_problems


def manifest_errors(manifest: Any) -> list[str]:
    """Every violation as 'path: message', sorted by path; [] when valid."""
    return schema_problems(manifest)


def assert_valid_manifest(manifest: Any) -> None:
    """Raise AssertionError listing every schema violation of `manifest`."""
    errors = manifest_errors(manifest)
    assert not errors, "manifest does not match corpus-manifest.schema.json:\n  " + "\n  ".join(errors)
