"""User-facing message defects from the adversarial pass: each failure is one true message with
the next step, and what a run holds is released exactly.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from shard_pipeline.run.claim import claim, holder, release


def test_a_run_dir_ending_in_a_space_releases_its_claim(tmp_path):
    out, run = tmp_path / "out", tmp_path / "run "
    claim(out, run)
    assert holder(out) == str(run)
    release(out, run)
    assert holder(out) is None
