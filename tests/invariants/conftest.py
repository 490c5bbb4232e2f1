"""What the --status invariants start from: a run made in process whose finalize failed at its start."""
from __future__ import annotations

import pytest

from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.stage_status import StageStatus, stage_statuses
from tests.inprocess import make_run


@pytest.fixture
def written(tmp_path, in_process) -> RunDir:
    """Every partition, plan and write task finished; finalize failed at its start."""
    made = make_run(tmp_path, in_process, "finalize")
    assert made.code == 1
    return made.run


def statuses(run: RunDir) -> dict[str, StageStatus]:
    return {s.stage: s for s in stage_statuses(run, queue={})}
