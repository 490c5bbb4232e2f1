"""The fast tier's rule (tests/conftest.py): which started programs make a test end-to-end."""
from __future__ import annotations

import sys

from tests.conftest import FAKE_SLURM, e2e_program


def test_python_processes_rclone_pip_and_slurm_are_end_to_end():
    assert e2e_program([sys.executable, "-m", "shard_pipeline.worker.task", "write", "RUN", "--task", "0"])
    assert e2e_program(["/usr/bin/python3.11", "-c", "pass"])
    assert e2e_program("python3 -m pip install .")
    assert e2e_program(["/opt/venv/bin/pip", "install", "."]) == "pip"
    assert e2e_program(["rclone", "copy", "a", "b"]) == "rclone"
    assert e2e_program(["sbatch", "--parsable", "job.sh"]) == "sbatch"


def test_git_and_the_fake_slurm_commands_are_not():
    assert e2e_program(["git", "-C", ".", "rev-parse", "HEAD"]) is None
    assert e2e_program(["ldconfig", "-p"]) is None
    assert all(e2e_program([name, "x"], FAKE_SLURM) is None for name in FAKE_SLURM)
    assert e2e_program(["srun", "x"], FAKE_SLURM) == "srun"  # not faked: the real one
