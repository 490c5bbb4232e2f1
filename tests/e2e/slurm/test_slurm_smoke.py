"""Smoke tests of the real single-node Slurm: the features the pipeline's submission relies on
(job arrays, afterok dependencies, --kill-on-invalid-dep). If these fail, fix the cluster
(tests/slurm/cluster.sh), not the pipeline."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.slurm_util import (
    job_records,
    job_state,
    sbatch,
    squeue_reasons,
    wait_for_jobs,
)

pytestmark = pytest.mark.usefixtures("slurm_cluster")

# Generous: other engineers' jobs may share the 2-core test cluster.
WAIT = 240


def _common(tmp_path: Path, name: str) -> list[str]:
    return [
        "--partition", "small", "--mem", "300M", "--time", "5",
        "--chdir", str(tmp_path), "--job-name", f"smoke-{name}",
    ]


def _outputs(tmp_path: Path) -> str:
    """Job logs, for assertion messages."""
    return "\n".join(f"--- {p.name}:\n{p.read_text()}" for p in sorted(tmp_path.glob("*.out")))


def test_array_then_afterok_dependent(tmp_path: Path) -> None:
    d = shlex.quote(str(tmp_path))
    # Each task sleeps so the dependent is surely still queued when squeue is read below,
    # then records its index and when it finished.
    array_id = sbatch([
        *_common(tmp_path, "array"), "--array=0-3", "--output", "task-%A_%a.out",
        "--wrap", f"sleep 2; echo $SLURM_ARRAY_TASK_ID $(date +%s.%N) > {d}/task_$SLURM_ARRAY_TASK_ID",
    ])
    dep_id = sbatch([
        *_common(tmp_path, "dependent"), f"--dependency=afterok:{array_id}", "--output", "dep-%j.out",
        "--wrap", f"date +%s.%N > {d}/dep.start; ls {d} | grep -c '^task_' > {d}/dep.seen",
    ])
    assert squeue_reasons([dep_id]) == {dep_id: "Dependency"}

    wait_for_jobs([array_id, dep_id], timeout=WAIT)
    logs = _outputs(tmp_path)

    tasks = sorted(int(p.read_text().split()[0]) for p in tmp_path.glob("task_*"))
    assert tasks == [0, 1, 2, 3], logs
    assert (tmp_path / "dep.seen").read_text().strip() == "4", logs
    dep_start = float((tmp_path / "dep.start").read_text())
    task_ends = [float(p.read_text().split()[1]) for p in tmp_path.glob("task_*")]
    assert dep_start >= max(task_ends), logs

    assert {r["JobState"] for r in job_records(array_id)} == {"COMPLETED"}
    assert job_state(dep_id) == ("COMPLETED", "None")


def test_failed_job_cancels_afterok_dependent(tmp_path: Path) -> None:
    marker = tmp_path / "dependent.ran"
    failing_id = sbatch([*_common(tmp_path, "fail"), "--output", "fail-%j.out", "--wrap", "exit 3"])
    dep_id = sbatch([
        *_common(tmp_path, "never"), "--output", "never-%j.out",
        f"--dependency=afterok:{failing_id}", "--kill-on-invalid-dep=yes",
        "--wrap", f"touch {shlex.quote(str(marker))}",
    ])

    # The dependent leaves the queue without running: Slurm cancels it once its dependency
    # can never be satisfied (about a second after the failure on this cluster).
    wait_for_jobs([failing_id, dep_id], timeout=WAIT)

    assert not marker.exists(), _outputs(tmp_path)
    assert not list(tmp_path.glob("never-*.out")), "the dependent started"
    assert job_state(failing_id) == ("FAILED", "NonZeroExitCode")
    assert job_records(failing_id)[0]["ExitCode"] == "3:0"
    # None: already forgotten (only after MinJobAge = 300 s, so unlikely here).
    assert job_state(dep_id) in (("CANCELLED", "DependencyNeverSatisfied"), None)
