"""More of what LUMI does to a run, met for real on the LUMI-like test cluster (tests/slurm/cluster.sh):
the node fails under the write stage (and comes back at once, or stays down while it does not answer), a stage has more array tasks than MaxArraySize (33), and a task
ends TIMEOUT. Each run ends with the bytes of an uninterrupted one."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from shard_pipeline.run.rundir import RunDir
from shard_pipeline.submit import cli
from tests.pipeline_util import lang_dir, make_corpus, run_cli, tree_bytes
from tests.slurm_util import job_records, wait_for_jobs
from tests.e2e.faults.test_lumi_slurm import ARGS, reference, submit_argv  # noqa: F401  (reference: a fixture)
from tests.e2e.slurm.test_pipeline_slurm import slurm_conf
from tests.e2e.faults.test_resume_slurm import all_jobs, wait_for_log

pytestmark = pytest.mark.slow

TIMEOUT = 300
STAGES = ("partition", "plan", "write", "finalize")


def status(run_dir: Path, capsys) -> tuple[int, str, dict[str, list[int]]]:
    """--status: its exit code, its text, and per stage the row's numbers (tasks done running pending
    failed interrupted waiting)."""
    capsys.readouterr()
    code = cli.main(["--status", str(run_dir)])
    text = capsys.readouterr().out
    rows = {l.split()[0]: [int(x) for x in l.split()[1:]] for l in text.splitlines()
            if l.split() and l.split()[0] in STAGES}
    return code, text, rows


def squeue_state(task: str) -> str | None:
    """squeue's state of one array task ('123_1'), None when Slurm no longer queues it."""
    out = subprocess.run(["squeue", "-h", "-r", f"--jobs={task.split('_')[0]}", "-o", "%i %T"],
                         capture_output=True, text=True, timeout=30).stdout
    return next((s for line in out.splitlines() for i, s in [line.split()] if i == task), None)


def wait_until(check, what: str, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"no {what} after {timeout:g}s")


def node_state(node: str) -> str:
    return subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True,
                          timeout=30).stdout.strip()


def back_up(node: str) -> None:
    """Resume the node if it is still down, and wait until it takes jobs. Here slurmd answers at once, so
    ReturnToService=2 (tests/slurm/cluster.sh) has usually brought it back by itself, as when a failed
    node reboots and registers again; a resume of an idle node is refused, hence check=False."""
    if re.match(r"down|drain|fail", node_state(node)):
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False, timeout=30)
    wait_until(lambda: node_state(node) and not re.match(r"down|drain|fail", node_state(node)), f"node {node} up")


def the_node() -> str:
    return subprocess.run(["sinfo", "-h", "-o", "%N"], capture_output=True, text=True, check=True,
                          timeout=30).stdout.split()[0]


def hang_task_1(root: Path, tmp_path: Path, monkeypatch, fault: str) -> tuple[Path, str, Path]:
    """Submit a run (2 partition, 2 write tasks) with task 1 of a stage hanging (`fault`, as
    HPLT_SHARD_FAULT: 'write-start:1:hang-once'); return (run dir, that stage's job id, task 1's log)
    once it hangs."""
    run_dir, stage = tmp_path / "run", fault.split("-")[0]
    monkeypatch.setenv("HPLT_SHARD_FAULT", fault)
    assert cli.main(submit_argv(root, tmp_path, slurm_conf(tmp_path), "--partition-tasks", "2",
                                "--write-tasks", "2")) == 0
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    jobs = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    job = next(j["job_id"] for j in jobs if j["stage"] == stage)
    log = wait_for_log(run_dir / "logs" / stage / f"{job}_1.log", "fault injected", timeout=TIMEOUT)
    return run_dir, job, log


def hang_write_task_1(root: Path, tmp_path: Path, monkeypatch) -> tuple[Path, str, Path]:
    """Write task 1 hangs on its first start, alone on the node (write task 0 done)."""
    run_dir, write, log = hang_task_1(root, tmp_path, monkeypatch, "write-start:1:hang-once")
    wait_until(RunDir(lang_dir(run_dir)).write_receipt(0).exists, "write task 0 done", TIMEOUT)
    return run_dir, write, log


def set_down(node: str) -> None:
    """What slurmctld does to a node that stops answering (past SlurmdTimeout): DOWN, its jobs requeued."""
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=hplt-shard test: node failure"],
                   check=True, timeout=30)


def ends_like_the_reference(run_dir: Path, log: Path, tmp_path: Path, expected, capsys, stage: str = "write") -> None:
    """The run ended by itself: the stage's task 1 ran again (its log appended), DONE, the reference's bytes,
    --status done."""
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT + 200)
    assert "restart 1" in log.read_text()
    assert (lang_dir(run_dir) / "DONE").exists()
    assert tree_bytes(tmp_path / "out") == expected
    code, text, rows = status(run_dir, capsys)
    assert code == 0 and rows[stage][:2] == [2, 2] and "state: done" in text, text


def test_the_node_fails_under_the_write_stage_and_the_run_ends_by_itself(slurm_cluster, tmp_path, monkeypatch,
                                                                         reference, capsys):
    """Write task 1 hangs on its first start; the node is set down under it. Slurm requeues the task
    (--requeue) and holds it ~2 minutes (BeginTime); the node is back at once (ReturnToService=2 and a
    slurmd that answers; else the test resumes it). --status says the task pends with Slurm's reason and
    was requeued; the run ends by itself with the same bytes."""
    root, expected = reference
    run_dir, write, log = hang_write_task_1(root, tmp_path, monkeypatch)
    node = the_node()
    try:
        set_down(node)
        wait_until(lambda: squeue_state(f"{write}_1") == "PENDING", "requeued write task 1")
        wait_for_log(log, "DUE TO NODE FAILURE", timeout=60)  # what slurmstepd writes when the node is lost
        code, text, rows = status(run_dir, capsys)
        assert code == 3 and rows["write"][3] >= 1 and rows["write"][4:6] == [0, 0], text  # pending: not failed
        assert re.search(r"^PENDING write \d tasks?: \S", text, re.M), text  # with Slurm's reason
        assert "REQUEUED write 1 task (1): requeued by Slurm after a start" in text, text
    finally:
        back_up(node)
    ends_like_the_reference(run_dir, log, tmp_path, expected, capsys)


def controller_state(node: str) -> str:
    """slurmctld's state of the node ('DOWN', 'MIXED+DOWN'...): sinfo's %T says 'mixed' for a down node whose
    cores are still held by a job it could not tell to end."""
    out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True, timeout=30).stdout
    return re.search(r"\bState=(\S+)", out).group(1) if "State=" in out else ""


def slurmd_pid() -> int:
    conf = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True, timeout=30).stdout
    pidfile = re.search(r"^SlurmdPidFile\s*=\s*(\S+)", conf, re.M).group(1)
    return int(Path(pidfile).read_text().split()[0])


def pending_reason(task: str) -> str:
    out = subprocess.run(["squeue", "-h", "-r", f"--jobs={task.split('_')[0]}", "-o", "%i %r"],
                         capture_output=True, text=True, timeout=30).stdout
    return next((r for line in out.splitlines() for i, r in [line.split(maxsplit=1)] if i == task), "")


def test_a_node_that_stops_answering_stays_down_and_the_run_waits_for_it(slurm_cluster, tmp_path, monkeypatch,
                                                                         reference, capsys):
    """The node stops answering (slurmd frozen with SIGSTOP) under write task 1 and is set DOWN, as
    slurmctld does past SlurmdTimeout. Frozen, slurmd cannot register, so the node stays down for as long as
    it takes the requeue's hold (BeginTime) to pass and Slurm to say the task waits for a node. All that
    time --status exits 3: the task pends, requeued, with Slurm's reason and not "will not clear by itself"
    (a down node comes back, or the job runs elsewhere). When slurmd answers again and the node is back,
    the run ends by itself with the reference's bytes."""
    root, expected = reference
    run_dir, write, log = hang_write_task_1(root, tmp_path, monkeypatch)
    node, slurmd = the_node(), slurmd_pid()
    os.kill(slurmd, signal.SIGSTOP)
    try:
        set_down(node)
        wait_until(lambda: squeue_state(f"{write}_1") == "PENDING", "requeued write task 1")
        reason = wait_until(lambda: (r := pending_reason(f"{write}_1")) not in ("", "BeginTime", "None") and r,
                            "a pending reason past the requeue's hold", timeout=240)
        assert "DOWN" in controller_state(node), (reason, controller_state(node))  # nothing brought it back
        code, text, rows = status(run_dir, capsys)
        assert code == 3 and rows["write"][3] == 1 and rows["write"][4:6] == [0, 0], text  # pending, not failed
        assert f"PENDING write 1 task: {reason}\n" in text + "\n", text  # Slurm's own reason, not called stuck
        assert "REQUEUED write 1 task (1): requeued by Slurm after a start" in text, text
    finally:
        os.kill(slurmd, signal.SIGCONT)
        back_up(node)
    ends_like_the_reference(run_dir, log, tmp_path, expected, capsys)


CHUNKED = ("--shard-rows", "2", "--buckets", "3", "--partition-tasks", "2")  # 80 documents: 40 shards
WRITE_TASKS = 35  # MaxArraySize 33: write tasks 0-32 in one array, 33-34 in a second


@pytest.fixture(scope="module")
def chunked_reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("chunked-ref")
    root = make_corpus(base, n_docs=80)
    assert run_cli(root, base / "out", base / "run", *CHUNKED, "--write-tasks", "4") == 0
    return root, tree_bytes(base / "out")


def test_a_stage_above_max_array_size_is_chunked_chained_counted_and_resumed(slurm_cluster, tmp_path, monkeypatch,
                                                                               chunked_reference, capsys):
    """35 write tasks where MaxArraySize is 33: two arrays, finalize waits on both (afterany). Task 34, in
    the second array, is killed: finalize fails at once naming it, --status counts the 35 tasks of both arrays, and the
    resume queues task 34 alone (offset 33, index 1), then finalize; the bytes are those of 4 write tasks."""
    root, expected = chunked_reference
    run_dir = tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", f"write-start:{WRITE_TASKS - 1}:kill")
    argv = submit_argv(root, tmp_path, slurm_conf(tmp_path))[:-len(ARGS)]  # the module's ARGS replaced by CHUNKED
    assert cli.main([*argv, *CHUNKED, "--write-tasks", str(WRITE_TASKS)]) == 0
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    jobs = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    writes = [j for j in jobs if j["stage"] == "write"]
    assert [(j["offset"], j["tasks"]) for j in writes] == [(0, 33), (33, 2)], writes
    finalize = next(j["job_id"] for j in jobs if j["stage"] == "finalize")
    dependency = job_records(finalize)[0]["Dependency"]
    assert all(f"afterany:{j['job_id']}" in dependency for j in writes), dependency  # both chunks
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
    assert {r["JobState"] for r in job_records(finalize)} == {"FAILED"}  # it waited for both chunks, then failed at once
    assert not (lang_dir(run_dir) / "DONE").exists()
    code, text, rows = status(run_dir, capsys)
    assert code == 1 and rows["write"][:2] == [WRITE_TASKS, WRITE_TASKS - 1] and rows["write"][4] == 1, text
    assert f"FAILED write task {WRITE_TASKS - 1}: " in text and f"{writes[1]['job_id']}_1.log" in text, text
    assert cli.main(["--resume", str(run_dir)]) == 0
    resumed = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    assert [(j["stage"], j["offset"], j["array"].split("%")[0]) for j in resumed] == \
        [("write", 33, "1"), ("finalize", 0, "0")], resumed  # only what is unfinished
    wait_for_jobs([j["job_id"] for j in resumed], timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists()
    assert tree_bytes(tmp_path / "out") == expected
    code, text, rows = status(run_dir, capsys)
    assert code == 0 and rows["write"][:2] == [WRITE_TASKS, WRITE_TASKS], text


def test_a_task_slurm_will_not_requeue_ends_timeout_and_its_resume_gives_the_same_bytes(slurm_cluster, tmp_path,
                                                                                       monkeypatch, reference, capsys):
    """Partition task 1 hangs. Its time limit is lowered to 1 minute while it runs (--time under 10
    minutes is refused) and the job is made not requeueable (as a failed `scontrol requeue` would leave it): the
    signal near the limit cannot requeue it, so the job script waits and Slurm ends it TIMEOUT. --status
    names TIMEOUT with twice the time; that resume (no fault) gives the bytes of an uninterrupted run."""
    root, expected = reference
    run_dir, part, log = hang_task_1(root, tmp_path, monkeypatch, "partition-after-input:1:hang")
    subprocess.run(["scontrol", "update", f"JobId={part}_1", "TimeLimit=1", "Requeue=0"], check=True, timeout=30)
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
    assert f"the requeue of {part}_1 failed (above); it ends at its time limit (TIMEOUT)" in log.read_text()  # the job script did not end it as if done
    assert {r["JobState"] for r in job_records(f"{part}_1")} == {"TIMEOUT"}
    code, text, _ = status(run_dir, capsys)
    hint = f"./hplt-shard --resume {run_dir} --time 00:20:00"
    assert code == 1 and f"FAILED partition task 1: TIMEOUT ({hint})" in text and f"state: failed: {hint}" in text, text
    assert cli.main(shlex.split(hint)[1:]) == 0
    wait_for_jobs(all_jobs(run_dir), timeout=TIMEOUT)
    assert (lang_dir(run_dir) / "DONE").exists()
    assert tree_bytes(tmp_path / "out") == expected


def test_a_task_that_runs_into_its_own_time_limit_is_requeued_by_itself(slurm_cluster, tmp_path, monkeypatch,
                                                                         reference, capsys):
    """Nothing lowered by hand: partition task 1 hangs on its first start under the run's own --time 00:10:00
    (the shortest accepted). Slurm's signal 5 minutes before the limit (--signal=B:USR1@300) reaches the
    job script, which requeues the task; it starts again (after the requeue's hold) with a new limit and the
    run ends by itself with the bytes of an uninterrupted run. ~8 minutes, most of it waiting."""
    root, expected = reference
    run_dir, part, log = hang_task_1(root, tmp_path, monkeypatch, "partition-after-input:1:hang-once")
    assert job_records(f"{part}_1")[0]["TimeLimit"] == "00:10:00"  # --time, as sbatch gave it to Slurm
    wait_for_log(log, "time limit near; requeueing", timeout=420)  # ~300 s after the start
    ends_like_the_reference(run_dir, log, tmp_path, expected, capsys, stage="partition")
