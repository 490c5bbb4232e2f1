"""A run directory is never reused; what is said instead depends on the run it holds."""
from __future__ import annotations

import pytest

from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.rundir import RunDir


def test_a_finished_runs_directory_points_to_a_new_one_an_unfinished_to_its_resume(tmp_path):
    from shard_pipeline.run.rundir import RunDirExists, check_new

    run = RunDir(tmp_path / "run")
    for sub in ("tasks", "logs"):
        (run.root / sub).mkdir(parents=True)
    write_json_atomic(run.run_json, {})
    with pytest.raises(RunDirExists) as unfinished:
        check_new(run.root)
    assert unfinished.value.fresh is None  # --resume finishes it
    run.done_marker.write_text("")
    (tmp_path / "run-new").mkdir()
    with pytest.raises(RunDirExists) as finished:
        check_new(run.root)
    assert finished.value.fresh == tmp_path / "run-new-2"  # never one that exists


def test_a_run_held_by_another_process_is_refused_naming_that_process(tmp_path):
    import os

    from shard_pipeline.errors import UsageError
    from shard_pipeline.run.claim import run_lock

    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    with run_lock(run.root):
        with pytest.raises(UsageError, match=f"pid {os.getpid()} on this host"), run_lock(run.root):
            pass
    assert not run.lock_holder.exists()  # released: nobody holds it
    with run_lock(run.root):  # and it can be taken again
        pass
