"""Messages carry their cause and their path (issue 19, item 12): a failed language's --status row
shows why; a full disk under the run dir or OUT says which disk and what df says; every ENOSPC
names the file being written. The full disks are real: a tmpfs mounted with a small size=.
"""
from __future__ import annotations

import errno
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.outcome import UnitExit, record_exit
from shard_pipeline.run.tasklog import last_error_line
from shard_pipeline.submit import cli
from tests.pipeline_util import LANG, make_corpus, run_cli

pytestmark = pytest.mark.slow  # end-to-end: runs the pipeline


@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem of a few hundred kB (tmpfs, size=); unmounted at teardown."""
    mounted = []

    def mount(size: str) -> Path:
        where = tmp_path / f"small{len(mounted)}"
        where.mkdir()
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {p.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(disk: Path) -> None:
    """Write until the disk refuses: it is full for real."""
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def failed_lines(status: str) -> list[str]:
    return [l for l in status.splitlines() if l.startswith("FAILED ")]


def test_a_failed_language_shows_its_cause_in_the_multi_status(tmp_path, monkeypatch, capsys):
    from tests.e2e.local.test_multi_local import make_langs, multi_cli

    root = make_langs(tmp_path, {"fin_Latn": (30, ("10_1",)), "swe_Latn": (20, ("9_1",))})
    run_dir = tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "plan-start::enospc:swe_Latn")  # plan: one job for both languages
    assert multi_cli(root, "fin_Latn,swe_Latn", tmp_path / "out", run_dir, "--shard-rows", "10") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 1
    status = capsys.readouterr().out
    assert "FAILED swe_Latn plan task 0: ERROR: swe_Latn: OSError: [Errno 28] No space left on device" in status
    assert not any("fix the cause" in l for l in failed_lines(status)), status
    assert "FAILED fin_Latn" not in status
    # the job's own summary line carries the cause too
    summary = [l for l in (run_dir / "logs" / "plan" / "local_0.log").read_text().splitlines()
               if l.startswith("ERROR: plan failed for")]
    assert summary and "swe_Latn: OSError: [Errno 28]" in summary[-1]


def test_full_disk_under_the_run_dir_says_which_disk_and_names_paths(tmp_path, small_disk, capsys):
    root = make_corpus(tmp_path, n_docs=400)
    run_dir = small_disk("150k") / "run"
    assert run_cli(root, tmp_path / "out", run_dir, "--write-tasks", "2") == 1
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 1
    failed = failed_lines(capsys.readouterr().out)
    assert failed
    for line in failed:  # each failure names the file it could not write, or says its log could not be written
        named = re.search(r"No space left on device \(the disk holding \S+: [\d.]+ \S*B free of [\d.]+ kB\): '/\S+'", line)
        unwritten = (re.search(rf"the log could not be written: the disk holding {re.escape(str(run_dir))}(/{LANG})?/logs/",
                               line) is not None and "free of" in line)  # a unit's log in its language, a job's in RUNDIR
        skipped = re.search(rf"ERROR: {LANG}: \w+ task \d+ skipped: ", line) is not None  # its language failed before
        assert named or unwritten or skipped, line
        assert "(empty log)" not in line


def test_full_disk_under_out_names_the_shard(tmp_path, small_disk, capsys):
    root = make_corpus(tmp_path, n_docs=400)
    disk = small_disk("60k")
    assert run_cli(root, disk / "out", tmp_path / "run", "--write-tasks", "2", "--shard-rows", "100") == 1
    err = capsys.readouterr().err
    tasks = [l for l in err.splitlines() if re.match(r"hplt-shard: write \S+ task \d+ failed: ", l)]
    assert tasks and all(re.search(rf"disk holding {disk}/out.tmp: .* free of .*\): '{disk}/out.tmp/\.shard-\S+\.partial'", l)
                         for l in tasks), err


def test_atomic_writes_and_spills_name_their_path_on_a_full_disk(tmp_path, small_disk):
    from shard_pipeline.stages.spill import SPILL_SCHEMA, SpillWriter

    disk = small_disk("64k")
    fill(disk)
    with pytest.raises(OSError) as got:
        write_json_atomic(disk / "receipt.json", {"rows": list(range(10000))})
    assert got.value.errno == errno.ENOSPC and got.value.filename == str(disk / "receipt.json")
    assert f"the disk holding {disk}: 0 B free of" in str(got.value)
    assert not list(disk.glob(".receipt.json.*"))  # the temporary file is gone
    w = SpillWriter(0, disk / "task-00000.spill", disk / "task-00000.index.arrow")
    n = 2000
    t = pa.table({"id": [f"{i:08d}" for i in range(n)], "text_bytes": [9] * n, "text": ["some text"] * n,
                  "source": [0] * n, "line": list(range(n)), "url": ["u"] * n, "lang": ["x"] * n, "n_chars": [9] * n,
                  "sha256": [bytes(32)] * n, "pii_redactions": [0] * n, "val": [False] * n}, schema=SPILL_SCHEMA)
    with pytest.raises(OSError) as got:
        w.write_run(t, [0, 2000])
        w.flush()
    assert got.value.errno == errno.ENOSPC and got.value.filename == str(disk / "task-00000.spill")


def test_a_partition_checkpoint_names_its_receipts_log_on_a_full_disk(tmp_path, small_disk):
    """The receipts log is appended, not written atomically: its ENOSPC names it too (CI met it bare)."""
    from shard_pipeline.run.receipts import InputReceipt
    from shard_pipeline.run.records import made_here
    from shard_pipeline.run.rundir import RunDir
    from shard_pipeline.stages.checkpoint import PartitionCheckpoint
    from shard_pipeline.stages.spill import SpillWriter

    disk = small_disk("64k")
    run = RunDir(disk / "run")
    run.partition_checkpoint(0).parent.mkdir(parents=True)
    w = SpillWriter(0, tmp_path / "task-00000.spill", tmp_path / "task-00000.index.arrow")  # the spill has room
    fill(disk)
    with pytest.raises(OSError) as got:
        receipt = InputReceipt(0, "x" * 5000, "x", None, None, 1, 1, {}, 1, 1)
        PartitionCheckpoint(run, 0, made_here("0" * 64)).save(w, [receipt], 0)
    assert got.value.errno == errno.ENOSPC and got.value.filename == str(run.partition_receipts_log(0))
    assert f"the disk holding {run.partition_receipts_log(0).parent}" in str(got.value)


def test_an_empty_log_on_a_full_disk_says_so(tmp_path, small_disk):
    disk = small_disk("64k")
    log = disk / "logs" / "partition" / "local_0.log"
    log.parent.mkdir(parents=True)
    log.touch()
    assert "the task wrote nothing to it" in last_error_line(log)  # not full: the facts, no guess
    fill(disk)
    line = last_error_line(log)
    assert line.startswith(f"(empty log: the log could not be written: the disk holding {log.parent} is full")
    assert "free of" in line


def test_a_unit_killed_by_a_signal_says_so_not_its_trailer(tmp_path):
    """A unit SIGKILLed (OOM killer, kill -9) leaves only the group's trailer and exit record: the cause names
    the signal."""
    log = tmp_path / "local_0.log"
    ended = UnitExit("write group 3", 3, -9, 1796000560.632, 1796000560.851, 0.21, 79.0, 70)
    log.write_text("env PYTHONPATH=/x python -m shard_pipeline.worker.task write /r --task 3\n# " + ended.line() + "\n")
    record_exit(log, ended)
    line = last_error_line(log)
    assert line.startswith("killed by SIGKILL (signal 9) before it could log an error: the OOM killer"), line
    assert "exit -9" in line
    log.write_text("ERROR: OSError: disk on fire\n# " + ended.line() + "\n")
    record_exit(log, replace(ended, returncode=1))
    assert last_error_line(log) == "ERROR: OSError: disk on fire"  # its own error wins


def test_a_unit_that_wrote_nothing_but_failed_is_an_empty_log_not_its_trailer(tmp_path, small_disk):
    """On a full disk a unit may fail before its first line reaches the log: only the group's trailer
    (exit 1) is there, and the cause is the empty log, with what df says, not the trailer."""
    disk = small_disk("64k")
    log = disk / "logs" / "partition" / "local_1.log"
    log.parent.mkdir(parents=True)
    ended = UnitExit("partition group 1", 1, 1, 1796000562.717, 1796000562.792, 0.05, 501.0, 0)
    log.write_text(f"# {ended.line()}\n")
    record_exit(log, ended)
    fill(disk)
    line = last_error_line(log)
    assert line.startswith(f"(empty log: the log could not be written: the disk holding {log.parent} is full"), line
    assert line.endswith("max rss 501 MiB") and "exit 1" in line


def test_a_permission_error_names_the_owner_of_what_stops_this_user_and_the_way_on(tmp_path, monkeypatch):
    """--status of a colleague's run dir whose logs are private: the line names the folder that stops this
    user and its owner, and the chmod that opens it (a reading command), or a folder of one's own (a run)."""
    import errno
    import os
    import pwd
    from types import SimpleNamespace

    from shard_pipeline.submit.cli import os_error_line

    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    other = pwd.getpwnam("nobody").pw_uid
    os.chown(logs, other, -1)
    target = logs / "partition" / "local_0.log"
    real_stat = type(target).stat

    def stat(self, *a, **k):  # as this user sees it: logs/ is closed, so nothing under it can be looked at
        if logs in self.parents:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_stat(self, *a, **k)

    monkeypatch.setattr(type(target), "stat", stat)
    exc = PermissionError(errno.EACCES, "Permission denied", str(target))
    status = SimpleNamespace(status=tmp_path / "run", resume=None, verify=None, publish=None)
    assert os_error_line(exc, status) == (
        f"reading the run directory failed: {target}: Permission denied; it belongs to nobody: ask them to open "
        f"it to your group (chmod -R g+rX {logs}), or run this as nobody")
    new_run = SimpleNamespace(status=None, resume=None, verify=None, publish=None)
    assert os_error_line(exc, new_run).endswith("; it belongs to nobody: use a folder of your own, or ask nobody for access")
    os.chown(logs, os.geteuid(), -1)
    assert os_error_line(exc, status).endswith(f"; it is this user's: give yourself access (chmod -R u+rwX {logs}), "
                                               "then run this again")
    assert os_error_line(FileNotFoundError(errno.ENOENT, "No such file or directory", str(target)), status) == (
        f"reading the run directory failed: {target}: No such file or directory")
    resume = SimpleNamespace(status=None, resume=tmp_path / "run", verify=None, publish=None)
    assert os_error_line(exc, resume).startswith(f"resuming the run failed: {target}: Permission denied; ")
