"""Shared pytest fixtures for hplt-shard. Add new fixtures in their own section below."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

# --------------------------------------------------------------------------------------------
# Real Slurm (tests/slurm/cluster.sh)
#
# Tests that take the `slurm_cluster` fixture get the `slurm` marker (so `-m "not slurm"`
# deselects them). Without a cluster they skip, unless HPLT_SHARD_REQUIRE_SLURM=1 (CI), where
# a missing cluster is a failure rather than a silently green run.
# --------------------------------------------------------------------------------------------

START_HINT = "start one with tests/slurm/cluster.sh start"


def _slurm_problem() -> str | None:
    """Why Slurm cannot be used here, or None if the cluster answers."""
    if shutil.which("sbatch") is None:
        return f"no Slurm: sbatch not on PATH ({START_HINT})"
    try:
        proc = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no Slurm: sinfo -h did not answer ({exc}; {START_HINT})"
    if proc.returncode != 0 or not proc.stdout.strip():
        detail = proc.stderr.strip() or "no partitions"
        return f"no Slurm: sinfo -h failed: {detail} ({START_HINT})"
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    problem = _slurm_problem()
    if problem is not None:
        if os.environ.get("HPLT_SHARD_REQUIRE_SLURM") == "1":
            pytest.fail(f"HPLT_SHARD_REQUIRE_SLURM=1 but {problem}", pytrace=False)
        pytest.skip(problem)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
