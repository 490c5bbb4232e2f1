"""Shared pytest fixtures for hplt-shard. Add new fixtures in their own section below."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess

import pytest

# --------------------------------------------------------------------------------------------
# Defaults that name a place (runs/, counts-index/) go to a folder of the test session, never
# into the checkout: a test must not read what an earlier test or run left there.
# --------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True, scope="session")
def isolated_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("hplt-shard-home")
    before = os.environ.get("HPLT_SHARD_HOME")
    os.environ["HPLT_SHARD_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("HPLT_SHARD_HOME", None)
    else:
        os.environ["HPLT_SHARD_HOME"] = before


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


# --------------------------------------------------------------------------------------------
# A fake sbatch/scontrol/squeue/scancel that only records argv: for unit tests of the
# submitter's command lines (the real chain runs in test_pipeline_slurm).
# --------------------------------------------------------------------------------------------

FAKE = r'''#!/usr/bin/env python3
import json, os, sys
log = os.environ["FAKE_SLURM_LOG"]
name = os.path.basename(sys.argv[0])
with open(log, "a") as f:
    f.write(json.dumps([name] + sys.argv[1:]) + "\n")
if name == "sbatch":
    n = sum(1 for l in open(log) if l.startswith('["sbatch"'))
    print(f"{1000 + n}")
elif name == "scontrol":
    print("MaxArraySize            = " + os.environ.get("FAKE_MAX_ARRAY", "1001"))
elif name == "squeue":
    for i in range(int(os.environ.get("FAKE_QUEUED", "0"))):
        print(f"{500 + i}")
'''


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for name in ("sbatch", "scontrol", "squeue", "scancel"):
        p = bin_dir / name
        p.write_text(FAKE)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "slurm-calls.jsonl"
    log.write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_LOG", str(log))

    def calls(name: str | None = None) -> list[list[str]]:
        rows = [json.loads(l) for l in log.read_text().splitlines()]
        return [r[1:] for r in rows if name is None or r[0] == name]

    return calls


# --------------------------------------------------------------------------------------------
# Hugging Face `datasets`, offline, with every cache under a folder of the test module: the
# readers' tests load the output as users do, without touching ~/.cache or the network.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_HOME", str(home))
        mp.setenv("HF_DATASETS_CACHE", str(home / "datasets"))
        datasets = pytest.importorskip("datasets")  # reads the variables above when first imported
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")  # if imported before they were set
        datasets.disable_progress_bars()
        yield datasets
