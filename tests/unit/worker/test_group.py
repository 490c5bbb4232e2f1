"""--cpus-per-task C: array tasks that run C units at once (worker/group.py), locally and in sbatch argv.

Units keep their receipts, checkpoints and logs, so the bytes are those of write_shards for every
C, and a failed unit inside a group is the only one redone. (The fake sbatch only checks argv;
tests/e2e/slurm/test_group_slurm.py runs groups on the real cluster.)
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.unit_table import group_count, groups_of, units_of
from shard_pipeline.worker.task import rerun_argv
from shard_pipeline.submit import cli
from shard_pipeline.submit.layout import lay_out_jobs
from shard_pipeline.units import scale_mem, share_of_mem
from tests.pipeline_util import LANG, lang_dir, config_sha, expected_output, make_corpus, manifest, run_cli, tree_bytes
from tests.unit.submit.test_submitter import opt, stage_of, submit

REPO = Path(__file__).resolve().parents[3]
HPLT_EN = [16_382_767_553] * 1108


def unit_interval(log: Path) -> tuple[float, float]:
    """(start, end) epoch seconds from the group runner's last line of a unit log (ISO local times)."""
    last = log.read_text().splitlines()[-1]
    m = re.search(r" exit -?\d+: (\S+) -> (\S+),", last)
    assert m, last
    return tuple(datetime.fromisoformat(t).timestamp() for t in m.groups())


# ---------------------------------------------------------------------------- the mapping


@pytest.mark.parametrize("n,cpus", [(1, 1), (7, 1), (7, 2), (7, 3), (8, 4), (5, 16), (1108, 16), (0, 3)])
def test_groups_cover_every_unit_once_in_order(n, cpus):
    groups = [list(units_of(g, cpus, n)) for g in range(group_count(n, cpus))]
    assert [u for g in groups for u in g] == list(range(n))
    assert all(1 <= len(g) <= cpus for g in groups)
    assert all(len(g) == cpus for g in groups[:-1])  # only the last group may be short
    assert list(units_of(group_count(n, cpus), cpus, n)) == []  # past the end: nothing
    for u in range(n):
        assert u in units_of(groups_of([u], cpus)[0], cpus, n)


def test_mapping_examples_and_bad_values():
    assert list(units_of(0, 2, 5)) == [0, 1] and list(units_of(2, 2, 5)) == [4]
    assert list(units_of(3, 1, 5)) == [3]  # C = 1: array index = unit, as before groups
    assert groups_of([5, 1, 4, 0], 2) == [0, 2]  # a sparse resubmission: groups holding unfinished units
    assert (group_count(1108, 16), group_count(7, 3), group_count(0, 4)) == (70, 3, 0)
    for bad in ((0, 0, 4), (-1, 2, 4)):
        with pytest.raises(ValueError):
            units_of(*bad)
    assert (scale_mem("4G", 16), scale_mem("400M", 2), scale_mem("1G", 1)) == ("64G", "800M", "1G")


# ---------------------------------------------------------------------------- the layout


@pytest.mark.parametrize("cpus", [1, 8, 16, 32])
def test_layout_fits_the_job_cap_with_c_times_the_cores(cpus):
    lay = lay_out_jobs(HPLT_EN, {}, shard_rows=1_000_000, task_budget=200, worker_mem="4G", cpus=cpus)
    assert lay.partition_groups + lay.write_groups + 2 <= 200  # array tasks: what the cap counts
    assert lay.partition_groups == group_count(lay.partition_tasks, cpus)
    assert lay.write_groups == group_count(lay.write_tasks, cpus)
    assert lay.partition_tasks == min(1108, 99 * cpus)  # one input per core once C x groups reach the inputs
    assert sorted(i for pk in lay.packing for i in pk) == list(range(1108))
    assert lay.throttle == lay.partition_groups + lay.write_groups
    if cpus == 1:
        assert (lay.partition_tasks, lay.write_tasks) == (99, 99)  # unchanged without groups


def test_dry_run_shows_cores_memory_projection_and_scratch(tmp_path, fake_slurm, capsys):
    root = make_corpus(tmp_path, n_docs=60)
    assert submit(tmp_path, root, "--dry-run", "--cpus-per-task", "2", "--partition-tasks", "3",
                  "--write-tasks", "4", "--mem", "1G") == 0
    text = capsys.readouterr().out
    assert fake_slurm("sbatch") == []
    assert "2 cores per partition/write array task" in text
    assert "3 tasks in 2 array tasks of 2 cores  mem 2G per array task (2 x 1G)" in text
    assert "4 tasks in 2 array tasks of 2 cores" in text
    assert "queued at once: 6 array tasks" in text and "7 partition/write cores" in text
    for stage in ("partition", "plan", "write", "finalize"):
        assert any(l.strip().startswith(stage) and "needs" in l for l in text.splitlines()), stage
    assert "whole run" in text and "scratch read" in text


def test_presets_set_c():
    from shard_pipeline.submit.settings import load_settings

    lumi = load_settings(cli={"PRESET": "lumi"}, conf_path=None, repo_root=REPO)
    assert lumi.cpus_per_task == 16
    assert load_settings(cli={"PRESET": "lumi", "CPUS_PER_TASK": "4"}, conf_path=None, repo_root=REPO).cpus_per_task == 4
    assert load_settings(cli={"PRESET": "local"}, conf_path=None, repo_root=REPO).cpus_per_task == 1


def test_cpus_per_task_must_be_positive(tmp_path, fake_slurm, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    assert submit(tmp_path, root, "--cpus-per-task", "0") == 2
    assert "CPUS_PER_TASK" in capsys.readouterr().err and fake_slurm("sbatch") == []


# ---------------------------------------------------------------------------- sbatch argv


def test_groups_are_submitted_with_c_cores_and_c_times_the_memory(tmp_path, fake_slurm):
    root = make_corpus(tmp_path, n_docs=40, names=[f"9_{i}" for i in range(1, 6)])
    assert submit(tmp_path, root, "--cpus-per-task", "2", "--partition-tasks", "5", "--write-tasks", "3",
                  "--mem", "300M") == 0
    sb = {stage_of(a): a for a in fake_slurm("sbatch")}
    ex = json.loads((lang_dir(tmp_path / "run") / "config.json").read_text())["execution"]
    res = ex["resources"]  # one unit's: the array task of C units asks C x them
    assert (res["partition"]["cpus"], res["write"]["cpus"]) == (1, 1) and (ex["partition_tasks"], ex["write_tasks"]) == (5, 3)
    assert json.loads((tmp_path / "run" / "languages.json").read_text())["cpus"] == {"partition": 2, "write": 2}
    assert opt(sb["partition"], "--array") == "0-2%5" and opt(sb["write"], "--array") == "0-1%5"
    assert opt(sb["partition"], "--cpus-per-task") == opt(sb["write"], "--cpus-per-task") == "2"
    assert opt(sb["partition"], "--mem") == scale_mem(res["partition"]["mem"], 2) == "600M"
    assert opt(sb["write"], "--mem") == scale_mem(res["write"]["mem"], 2)
    assert opt(sb["plan"], "--cpus-per-task") == opt(sb["finalize"], "--cpus-per-task") == "1"
    assert opt(sb["plan"], "--mem") == res["plan"]["mem"]
    # the batch script is unchanged: the stage entry finds C in the run's languages.json
    script = next(i for i, x in enumerate(sb["partition"]) if x.endswith("slurm_job.sh"))
    assert sb["partition"][script + 3] == "partition"


def test_a_stage_with_fewer_tasks_than_c_asks_only_for_its_tasks_cores(tmp_path, fake_slurm):
    root = make_corpus(tmp_path, n_docs=40)
    assert submit(tmp_path, root, "--cpus-per-task", "16", "--partition-tasks", "4", "--write-tasks", "1",
                  "--mem", "300M") == 0
    sb = {stage_of(a): a for a in fake_slurm("sbatch")}
    assert json.loads((tmp_path / "run" / "languages.json").read_text())["cpus"] == {"partition": 4, "write": 1}
    assert (opt(sb["partition"], "--cpus-per-task"), opt(sb["partition"], "--mem")) == ("4", "1200M")
    assert opt(sb["partition"], "--array").split("%")[0] == "0" and opt(sb["write"], "--cpus-per-task") == "1"


# ---------------------------------------------------------------------------- local executor

TASKS = ("--partition-tasks", "3", "--write-tasks", "4", "--buckets", "5", "--spill-bytes", "20000")


@pytest.mark.slow
@pytest.mark.parametrize("cpus", ["1", "2", "3"])
def test_same_bytes_as_write_shards_for_every_c(tmp_path, cpus):
    root = make_corpus(tmp_path)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run_dir, "--shard-rows", "50", "--val-permille", "200", "--row-group-bytes", "4000",
                   "--cpus-per-task", cpus, *TASKS) == 0
    expected = tmp_path / "expected"
    m = expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=50, val_permille=200,
                        row_group_bytes=4000)
    assert tree_bytes(out) == tree_bytes(expected) and manifest(out) == m
    logs = lang_dir(run_dir) / "logs" / "partition"
    # a log per unit, and the exit record its group wrote beside it
    assert sorted(p.name for p in logs.iterdir()) == sorted(f"local_{u}.{x}" for u in range(3) for x in ("log", "exit.json"))
    text = (logs / "local_0.log").read_text()
    assert text.splitlines()[0] == shlex.join(rerun_argv("partition", run_dir.resolve(), 0))  # the rerun command
    # every unit, C = 1 too, runs in a group (forked once imported) and ends with its wall, CPU and memory
    assert "# hplt-shard partition group 0 unit 0 exit 0: " in text and "max rss" in text.splitlines()[-1]
    for single in ("plan", "finalize"):  # the single jobs too: a group of one, forked, not a fresh interpreter
        last = (run_dir / "logs" / single / "local_0.log").read_text().splitlines()[-1]
        assert last.startswith(f"# hplt-shard {single} unit 0 exit 0: ") and "max rss" in last
    if cpus == "3":  # all three partition units of group 0 ran at once
        spans = [unit_interval(logs / f"local_{u}.log") for u in range(3)]
        assert max(s for s, _ in spans) < min(e for _, e in spans)


@pytest.mark.slow
def test_default_layout_with_groups_gives_the_same_bytes(tmp_path):
    root = make_corpus(tmp_path, names=[f"9_{i}" for i in range(1, 8)], n_docs=210)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run_dir, "--shard-rows", "30", "--cpus-per-task", "2", "--jobs", "4") == 0
    ex = json.loads((lang_dir(run_dir) / "config.json").read_text())["execution"]
    # --jobs 4 at C = 2: one unit per core (scope.local_budget), 2 groups of 2 partition units (C: languages.json)
    cpus = json.loads((run_dir / "languages.json").read_text())["cpus"]
    assert (ex["partition_tasks"], cpus["partition"]) == (4, 2)
    expected = tmp_path / "expected"
    expected_output(root, expected, config_sha256=config_sha(run_dir), shard_rows=30)
    assert tree_bytes(out) == tree_bytes(expected)


# ---------------------------------------------------------------------------- a failed unit in a group

ARGS = ("--shard-rows", "25", "--partition-tasks", "3", "--write-tasks", "4", "--buckets", "4",
        "--spill-bytes", "20000", "--row-group-bytes", "6000", "--cpus-per-task", "2")

# the same shard rows and row group bytes as conftest.REFERENCE_ARGS: reference_run's bytes (C = 1)


def failed_write_unit(tmp_path, monkeypatch, root) -> Path:
    """A run whose write unit 1 (group 0, with unit 0) hits a full disk mid-shard."""
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-mid-shard:1:enospc")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", *ARGS) == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    run_dir = tmp_path / "run"
    receipts = sorted(p.name for p in (lang_dir(run_dir) / "write").glob("*.receipt.json"))
    assert receipts == ["task-00000.receipt.json", "task-00002.receipt.json", "task-00003.receipt.json"]
    return run_dir


def test_resume_redoes_only_the_failed_unit_of_a_group(tmp_path, monkeypatch, reference_run, capsys):
    root, expected = reference_run
    run_dir = failed_write_unit(tmp_path, monkeypatch, root)
    assert "No space left on device" in capsys.readouterr().err
    assert cli.main(["--status", str(run_dir)]) == 1  # failed: EXIT_STOPPED
    status = capsys.readouterr().out
    assert "FAILED write task 1" in status and "local_1.log" in status
    kept = (lang_dir(run_dir) / "write" / "task-00000.receipt.json").stat().st_mtime_ns
    log0 = (lang_dir(run_dir) / "logs" / "write" / "local_0.log").read_text()
    assert cli.main(["--resume", str(run_dir), "--executor", "local", "--jobs", "2"]) == 0
    assert "write     redo 1  [1: no receipt]" in capsys.readouterr().out
    assert tree_bytes(tmp_path / "out") == expected
    assert (lang_dir(run_dir) / "write" / "task-00000.receipt.json").stat().st_mtime_ns == kept  # unit 0 was not redone
    assert (lang_dir(run_dir) / "logs" / "write" / "local_0.log").read_text() == log0
    assert "write task 1 done" in (lang_dir(run_dir) / "logs" / "write" / "local_1.log").read_text()


def test_resume_under_slurm_resubmits_only_groups_with_unfinished_units(tmp_path, monkeypatch, reference_run, fake_slurm):
    root, _ = reference_run
    run_dir = failed_write_unit(tmp_path, monkeypatch, root)
    assert cli.main(["--resume", str(run_dir), "--executor", "slurm", "--conf", str(REPO / "presets" / "local.conf")]) == 0
    sb = {stage_of(a): a for a in fake_slurm("sbatch")}
    assert sorted(sb) == ["finalize", "write"]
    assert opt(sb["write"], "--array").split("%")[0] == "0"  # group 0 holds unit 1; group 1 (units 2, 3) is done
    assert opt(sb["write"], "--cpus-per-task") == "2"


def test_array_task_of_a_group_skips_its_finished_units(tmp_path, monkeypatch, reference_run):
    """What a requeued or resubmitted group does on a node: only the units without a valid receipt."""
    root, expected = reference_run
    run_dir = failed_write_unit(tmp_path, monkeypatch, root)
    env = {**os.environ, "SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "0"}
    p = subprocess.run([sys.executable, str(REPO / "stages" / "write.py"), str(run_dir), "--task-offset", "0"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "write group 0 unit 0: finished before" in p.stdout and "1 units, wall" in p.stdout
    logs = RunDir(run_dir).unit_log_dir("write")  # a unit's log: <job>_<unit - the chunk's offset>
    assert not (logs / "77_0.log").exists() and "write task 1 done" in (logs / "77_1.log").read_text()
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0  # only finalize is left
    assert tree_bytes(tmp_path / "out") == expected


def test_status_maps_a_queued_group_to_its_units(tmp_path, monkeypatch, reference_run):
    from shard_pipeline.run import outcome, unit_table
    from shard_pipeline.run.stage_status import stage_statuses

    root, _ = reference_run
    run_dir = failed_write_unit(tmp_path, monkeypatch, root)
    table = unit_table.load(run_dir)
    unit_table.record_submission(table, "resume", {"write": [1]},
                                 [{"stage": "write", "job_id": "900", "array": "0", "tasks": [1], "offset": 0}])
    lang = RunDir(lang_dir(run_dir))
    jobs = {"write": json.loads(lang.run_json.read_text())["submissions"][-1]["jobs"]}
    queue = unit_table.language_queue(table, LANG, jobs, {"900_0": "RUNNING"})  # squeue's array task 0 of job 900
    write = {s.stage: s for s in stage_statuses(lang, queue=queue)}["write"]
    assert (write.done, write.running, write.failed) == (3, 1, [])  # unit 1 runs in array task 0 (group 0)
    log = RunDir(run_dir).unit_log_dir("write") / "900_1.log"  # where group 0 of job 900 logs unit 1
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"# started\nERROR: {LANG}: OSError: disk on fire\n")  # a unit's line in a chain log names its language
    write = {s.stage: s for s in stage_statuses(lang, queue={})}["write"]
    said = outcome.read(lang, "write", 1).error_line()  # its outcome record's, whatever its log says
    assert said.startswith("ERROR: OSError: ") and "No space left on device" in said
    assert [(f.task, f.log.name, f.last_line) for f in write.failed] == [(1, "900_1.log", said)]
    # job 900's attempt ended (its exit record) after that outcome, and left none: the outcome is an earlier
    # attempt's, not shown as this one's end
    ended = outcome.read(lang, "write", 1).ended
    outcome.record_exit(log, outcome.UnitExit("write group 0", 1, 1, ended + 1, ended + 2, 0.1, 10.0, log.stat().st_size))
    write = {s.stage: s for s in stage_statuses(lang, queue={})}["write"]
    assert [(f.task, f.last_line) for f in write.failed] == [(1, f"ERROR: {LANG}: OSError: disk on fire")]


@pytest.mark.parametrize("cpus", ["1", "3"])
def test_a_resume_with_another_cpus_per_task_gives_the_same_bytes(tmp_path, monkeypatch, reference_run, capsys, cpus):
    """C decides no byte (#21): a run made with C = 2 finishes with C = 1 or 3, byte-identical."""
    root, expected = reference_run
    run_dir = failed_write_unit(tmp_path, monkeypatch, root)
    assert cli.main(["--resume", str(run_dir), "--executor", "local", "--cpus-per-task", cpus]) == 0
    assert f"cpus_per_task={cpus}" in capsys.readouterr().out
    assert tree_bytes(tmp_path / "out") == expected
    text = (lang_dir(run_dir) / "logs" / "write" / "local_1.log").read_text()
    assert ("group 0 unit 1 exit 0" in text) == (cpus != "1")  # regrouped by the new C


def test_sigterm_to_a_group_stops_its_units_and_the_group_reruns(tmp_path, monkeypatch, reference_run):
    """The requeue trap of slurm_job.sh sends TERM to the stage entry: the group forwards it to its units."""
    import signal
    import time

    root, expected = reference_run
    run_dir = failed_write_unit(tmp_path, monkeypatch, root)
    env = {**os.environ, "SLURM_ARRAY_JOB_ID": "78", "SLURM_ARRAY_TASK_ID": "0", "HPLT_SHARD_FAULT": "write-start:1:hang"}
    argv = [sys.executable, str(REPO / "stages" / "write.py"), str(run_dir), "--task-offset", "0"]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = RunDir(run_dir).unit_log_dir("write") / "78_1.log"  # unit 1 of array task 0
    deadline = time.monotonic() + 90
    while not (log.exists() and "fault injected" in log.read_text()):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 1 and "unit 1 exited -15" in out
    assert log.read_text().splitlines()[-1].startswith("# hplt-shard write group 0 unit 1 exit -15")
    env.pop("HPLT_SHARD_FAULT")
    assert subprocess.run(argv, env=env, capture_output=True, timeout=120).returncode == 0  # the requeued group
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    assert tree_bytes(tmp_path / "out") == expected


@pytest.mark.slow
def test_a_unit_that_cannot_start_counts_as_failed(tmp_path):
    from shard_pipeline.worker.group import run_units

    runs = run_units(lambda u: [str(tmp_path / "no-such-python"), "-c", "pass"] if u == 1 else [sys.executable, "-c", "pass"],
                     [0, 1], lambda u: tmp_path / f"u{u}.log", "test group 0", append=False)
    assert [(r.unit, r.returncode) for r in runs] == [(0, 0), (1, 127)]
    assert (tmp_path / "u0.log").read_text().splitlines()[-1].startswith("# hplt-shard test group 0 unit 0 exit 0")


@pytest.mark.slow
def test_a_forked_unit_ends_as_its_task_line_would(tmp_path, monkeypatch, reference_run):
    """A group forks its units from the process that imported the stage code (worker/fork.py fork_unit):
    the same log (rerun line first, the task's last word, the trailer) and exit status as a fresh interpreter."""
    from shard_pipeline.worker import fork, group
    from shard_pipeline.worker.taskcmd import task_argv

    root, expected = reference_run
    run_dir = failed_write_unit(tmp_path, monkeypatch, root)
    forks = []
    real = group.fork_unit
    monkeypatch.setattr(group, "fork_unit", lambda *a, **k: forks.append(a[0]) or real(*a, **k))
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-mid-shard:1:enospc")
    argv = lambda u: task_argv("write", run_dir, u)  # noqa: E731
    logs = {}
    for mode in ("1", "0"):
        monkeypatch.setenv(fork.FORK_ENV, mode)
        runs = group.run_units(argv, [0, 1], lambda u: tmp_path / mode / f"u{u}.log", "test group 0", append=False)
        assert [(r.unit, r.returncode) for r in runs] == [(0, 0), (1, 1)]
        logs[mode] = [(tmp_path / mode / f"u{u}.log").read_text().splitlines() for u in (0, 1)]
    assert sorted(map(tuple, forks)) == [tuple(argv(0)), tuple(argv(1))]  # mode 1 forked both, mode 0 none
    for u in (0, 1):
        forked, fresh = logs["1"][u], logs["0"][u]
        assert forked[0] == fresh[0] == shlex.join(rerun_argv("write", run_dir, u))
        # its last word (before the trailer; the figures line, wall/CPU/RSS, differs by nature)
        forked_word, fresh_word = (next(l for l in reversed(x[:-1]) if " figures: " not in l) for x in (forked, fresh))
        assert forked_word.split(" ", 1)[1].split("(")[0] == fresh_word.split(" ", 1)[1].split("(")[0]
        assert forked[-1].startswith(f"# hplt-shard test group 0 unit {u} exit {u}")
    assert "No space left on device" in logs["1"][1][-2]
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    assert cli.main(["--resume", str(run_dir), "--executor", "local"]) == 0
    assert tree_bytes(tmp_path / "out") == expected


def test_only_this_interpreters_task_line_is_forked(monkeypatch):
    from shard_pipeline.worker.fork import FORK_ENV, forkable
    from shard_pipeline.worker.taskcmd import task_argv

    line = task_argv("write", Path("/r"), 3)
    assert forkable(line, None) and forkable(line, dict(os.environ))
    assert not forkable(["/usr/bin/python3.9", *line[1:]], None)  # another interpreter: started fresh
    assert not forkable([sys.executable, "-c", "pass"], None)
    assert not forkable(line, {**os.environ, "PYTHONPATH": "/elsewhere"})  # other imports: started fresh
    # the local executor's env puts this checkout first on PYTHONPATH: the code this process runs, forked
    from shard_pipeline.paths import checkout_root
    from shard_pipeline.submit.executors import local_task_env

    assert "PYTHONPATH" in local_task_env() and forkable(line, local_task_env())
    assert not forkable(line, {**local_task_env(), "PYTHONPATH": f"{local_task_env()['PYTHONPATH']}{os.pathsep}/x"})
    root = str(checkout_root())
    monkeypatch.setenv("PYTHONPATH", root)  # the user put the checkout on the path too: task_env puts it twice
    assert local_task_env()["PYTHONPATH"] == f"{root}{os.pathsep}{root}" and forkable(line, local_task_env())
    monkeypatch.delenv("PYTHONPATH")
    monkeypatch.setenv(FORK_ENV, "0")
    assert not forkable(line, None)
