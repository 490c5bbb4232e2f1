"""Shared pytest fixtures for hplt-shard. Add new fixtures in their own section below."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipeline_util import make_corpus, run_cli, tree_bytes

# --------------------------------------------------------------------------------------------
# Defaults that name a place (runs/, counts-index/) go to a folder of each test, never
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


@pytest.fixture(autouse=True)
def own_home(isolated_home, tmp_path_factory, monkeypatch):
    """Each test its own HPLT_SHARD_HOME: a default run dir an earlier test finished there (the README's first
    command, a --help example) would refuse this test's run, whatever order the tests run in."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HPLT_SHARD_HOME", str(home))
    return home


# --------------------------------------------------------------------------------------------
# Signal dispositions and the signal mask are the session's: a test that changes them in this
# process (the local executor's stop handlers, a fork's mask) leaves them as it found them, or a
# later test's child would start with what it left (an ignored SIGINT survives exec).
# --------------------------------------------------------------------------------------------

_WATCHED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)


def _signal_state() -> tuple:
    return (tuple(signal.getsignal(s) for s in _WATCHED_SIGNALS),
            frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, [])))


@pytest.fixture(autouse=True)
def signals_restored():
    before = _signal_state()
    yield
    after = _signal_state()
    if after != before:
        for sig, handler in zip(_WATCHED_SIGNALS, before[0]):
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, before[1])
        pytest.fail(f"the test left the signal dispositions or mask changed: {before} -> {after}", pytrace=False)


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


# --------------------------------------------------------------------------------------------
# The fast tier: `pytest -m "not slow"` runs the unit-level tests in well under a minute.
#
# A test is end-to-end, and marked `slow`, when it starts the pipeline's task processes, Slurm,
# rclone or pip. Three rules keep the tier honest without a list to maintain:
#   - modules of end-to-end tests carry `pytestmark = pytest.mark.slow`, and a mixed module marks
#     each such test with `@pytest.mark.slow`;
#   - a test that takes a fixture of E2E_FIXTURES (the real cluster, a shared finished run) is
#     marked slow here, at collection;
#   - a test without the mark that starts such a process anyway (in its body or in the setup of
#     any fixture it takes, of any scope) fails at that moment, naming the program and the mark
#     to add: a new end-to-end test cannot slip into the fast tier.
# Programs that only record argv (the fake_slurm fixture's sbatch, scontrol, ...) are allowed.
# --------------------------------------------------------------------------------------------

E2E_FIXTURES = frozenset({"slurm_cluster", "reference_run", "finished_run"})
E2E_PROGRAMS = frozenset({"rclone", "pip", "pip3", "sbatch", "srun", "squeue", "sacct", "sacctmgr", "scontrol",
                          "scancel", "sinfo"})
# what the fake_slurm fixture puts first on PATH
FAKE_SLURM = ("sbatch", "scontrol", "squeue", "scancel", "sinfo", "sacctmgr")
_PYTHON = re.compile(r"python[0-9.]*")


def e2e_program(args: object, faked: tuple[str, ...] = ()) -> str | None:
    """The end-to-end program a Popen of `args` starts (a Python process, rclone, pip, Slurm), or None."""
    argv0 = str(args if isinstance(args, (str, bytes, os.PathLike)) else next(iter(args), ""))
    name = os.path.basename(argv0.split()[0] if argv0.strip() else argv0)
    if argv0 == sys.executable or _PYTHON.fullmatch(name):
        return "a Python process (a pipeline task, a script or pip)"
    if name in E2E_PROGRAMS and name not in faked:
        return name
    return None


class EndToEndInFastTier(BaseException):
    """Raised where an unmarked test starts an end-to-end program (a BaseException: no `except Exception` hides it)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "slurm_cluster" in fixtures:
            item.add_marker(pytest.mark.slurm)
        if fixtures & E2E_FIXTURES:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _guarded(item))  # the setup of every fixture the test takes, of any scope


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _guarded(item))


def _guarded(item: pytest.Item):
    """Run one phase of a test not marked slow with Popen refusing end-to-end programs."""
    if item.get_closest_marker("slow") is not None:
        return (yield)
    faked = FAKE_SLURM if "fake_slurm" in getattr(item, "fixturenames", ()) else ()
    started: list[str] = []
    real_init = subprocess.Popen.__init__

    def guarded_init(self, args, *a, **kw):
        program = e2e_program(args, faked)
        if program is not None:
            started.append(program)
            raise EndToEndInFastTier(_unmarked(item.nodeid, program))
        real_init(self, args, *a, **kw)

    subprocess.Popen.__init__ = guarded_init
    try:
        result = yield
    finally:
        subprocess.Popen.__init__ = real_init
    if started:  # started from a thread, or the exception was swallowed: the test still fails
        pytest.fail(_unmarked(item.nodeid, started[0]), pytrace=False)
    return result


def _unmarked(nodeid: str, program: str) -> str:
    return (f"{nodeid} starts {program}: an end-to-end test. Mark it @pytest.mark.slow (or its module: "
            "pytestmark = pytest.mark.slow) so that the fast tier (-m 'not slow') stays unit-level")


# --------------------------------------------------------------------------------------------
# Shared runs, built once per session and only read by the tests that take them (copy before
# changing anything). Taking one marks a test slow (E2E_FIXTURES).
# --------------------------------------------------------------------------------------------

REFERENCE_ARGS = ("--shard-rows", "25", "--partition-tasks", "3", "--write-tasks", "3", "--buckets", "4",
                  "--spill-bytes", "20000", "--row-group-bytes", "6000")


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    """(corpus root, OUT's bytes) of an uninterrupted local run of 120 documents with REFERENCE_ARGS.

    The bytes every resumed, grouped or faulted run of this corpus with the same shard rows and
    row group bytes must reproduce: the layout options (tasks, buckets, spill, cores) never change them.
    """
    base = tmp_path_factory.mktemp("reference-run")
    root = make_corpus(base, n_docs=120)
    assert run_cli(root, base / "out", base / "run", *REFERENCE_ARGS) == 0
    return root, tree_bytes(base / "out")


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> tuple[Path, Path]:
    """(OUT, RUNDIR) of a finished local run over 120 documents: 3 shards of 40 rows (~18 KB each)."""
    base = tmp_path_factory.mktemp("finished-run")
    root = make_corpus(base / "corpus", n_docs=120)
    assert run_cli(root, base / "out", base / "run", "--shard-rows", "40") == 0
    return base / "out", base / "run"


# --------------------------------------------------------------------------------------------
# A fake sbatch/scontrol/squeue/scancel that only records argv: for unit tests of the
# submitter's command lines (the real chain runs in test_pipeline_slurm).
# --------------------------------------------------------------------------------------------

FAKE = r'''#!PYTHON -S
import json, os, sys
log = os.environ["FAKE_SLURM_LOG"]
name = os.path.basename(sys.argv[0])
with open(log, "a") as f:
    f.write(json.dumps([name] + sys.argv[1:]) + "\n")
if name == "sbatch":
    n = sum(1 for l in open(log) if l.startswith('["sbatch"'))
    if str(n) == os.environ.get("FAKE_SBATCH_REFUSE_AT"):  # the cap met midway, in sbatch's words
        print("sbatch: error: AssocMaxSubmitJobLimit", file=sys.stderr)
        print("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy", file=sys.stderr)
        sys.exit(1)
    print(f"{1000 + n}")
elif name == "scontrol":
    print("MaxArraySize            = " + os.environ.get("FAKE_MAX_ARRAY", "1001"))
elif name == "sinfo":  # no node lines: the partition check finds no limit to apply
    print(os.environ.get("FAKE_SINFO", ""))
elif name == "squeue":
    for i in range(int(os.environ.get("FAKE_QUEUED", "0"))):
        print(f"{500 + i}")
elif name == "sacctmgr":  # no association rows by default: the conf's SUBMIT_LIMIT is the cap
    print(os.environ.get("FAKE_ASSOC" if "assoc" in sys.argv else "FAKE_DEFAULT_ACCOUNT", ""))
'''


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for name in FAKE_SLURM:
        p = bin_dir / name
        p.write_text(FAKE.replace("PYTHON", sys.executable, 1))  # not `env python3`: a pyenv shim costs 0.2 s a call
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


# --------------------------------------------------------------------------------------------
# The local executor with every task run in this process (tests/inprocess.py): `run_cli` then
# makes a real run dir, with the stages' own receipts, spills and shards, in tenths of a second.
# fsync is skipped (a test's files need no durability; it was a third of a run's time).
# --------------------------------------------------------------------------------------------


@pytest.fixture
def in_process(monkeypatch):
    from shard_pipeline.submit.executors import local
    from tests.inprocess import InProcess

    runner = InProcess()
    monkeypatch.setattr(local, "run_stage", runner.run_stage)
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    return runner
