"""Validate a `_MANIFEST.json` dict against docs/formats/corpus-manifest.schema.json.

    from tests.manifest_schema import assert_valid_manifest
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "docs" / "formats" / "corpus-manifest.schema.json"


@functools.lru_cache(maxsize=1)
def manifest_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def manifest_errors(manifest: Any) -> list[str]:
    """Every violation as 'path: message', sorted by path; [] when valid."""
    errors = sorted(manifest_validator().iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def assert_valid_manifest(manifest: Any) -> None:
    """Raise AssertionError listing every schema violation of `manifest`."""
    errors = manifest_errors(manifest)
    assert not errors, "manifest does not match corpus-manifest.schema.json:\n  " + "\n  ".join(errors)
