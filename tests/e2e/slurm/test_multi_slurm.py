"""Several languages in one chain on the real single-node Slurm (#15): byte identity with single runs,
quarantine conservation per language, and a failure in one language that the others survive."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import orjson

from shard_pipeline.errors import ExitCode
from shard_pipeline.submit import cli
from tests.pipeline_util import LICENSE, index_file, records, tree_bytes, write_records
from tests.slurm_util import job_records, squeue_reasons, wait_for_jobs
from tests.e2e.local.test_multi_local import make_langs, multi_cli
from tests.e2e.slurm.test_pipeline_slurm import slurm_conf

TIMEOUT = 300
LANGS = "fin_Latn,swe_Latn,est_Latn"
SIZES = {"fin_Latn": (400, ("10_1", "9_1", "9_2", "8_1")), "swe_Latn": (60, ("9_1", "8_1")), "est_Latn": (5, ("10_1",))}


def conf(tmp_path: Path) -> Path:
    c = slurm_conf(tmp_path)
    c.write_text(c.read_text() + "MAX_TASKS=14\n")
    return c


def submit_multi(root: Path, out: Path, run_dir: Path, tmp_path: Path, *extra: str) -> list[str]:
    assert cli.main([LANGS, "--corpus", "v4", "--local-root", str(root), "--out", str(out), "--run-dir", str(run_dir),
                     "--executor", "slurm", "--conf", str(conf(tmp_path)), "--license", LICENSE, "--time", "00:10:00",
                     *extra]) == 0
    return job_ids(run_dir)


def job_ids(run_dir: Path, last: bool = False) -> list[str]:
    subs = json.loads((run_dir / "run.json").read_text())["submissions"]
    return [j["job_id"] for s in (subs[-1:] if last else subs) for j in s["jobs"]]


def singles(root: Path, tmp_path: Path, *opts: str) -> dict[str, dict[str, bytes]]:
    """Each language as a run of its own (local executor, same options): the bytes to match."""
    out = {}
    for lang in SIZES:
        assert multi_cli(root, lang, tmp_path / "single" / lang, tmp_path / "single-run" / lang, *opts) == 0
        out[lang] = tree_bytes(tmp_path / "single" / lang)
    return out


def test_three_languages_in_one_chain_equal_three_single_runs(slurm_cluster, tmp_path, capsys):
    root = make_langs(tmp_path, SIZES)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    opts = ("--shard-rows", "40")
    jobs = submit_multi(root, out, run_dir, tmp_path, *opts)
    assert len(jobs) == 4  # one chain: partition, plan, write, finalize
    wait_for_jobs(jobs, timeout=TIMEOUT)
    assert all((run_dir / lang / "DONE").exists() for lang in SIZES), capsys.readouterr()
    assert {r["JobState"] for j in jobs for r in job_records(j)} <= {"COMPLETED"}
    expected = singles(root, tmp_path, *opts)
    for lang, (n, names) in SIZES.items():
        assert tree_bytes(out / lang) == expected[lang], lang
        assert cli.main(["--verify", str(out / lang)]) == 0
        # the counts index learned each language's exact counts, in its own file
        index = index_file(tmp_path / "counts-index", root, lang).read_text().splitlines()
        assert len(index) == 1 + len(names) and sum(int(l.split("\t")[3]) for l in index[1:]) == n
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 0
    status = capsys.readouterr().out
    assert sum(1 for l in status.splitlines() if "  landed 20" in l) == 3 and "state: done" in status
    assert cli.main(["--status", str(run_dir / "est_Latn")]) == 0
    assert "state: done" in capsys.readouterr().out


def test_two_cores_per_array_task_for_three_languages_equal_three_single_runs(slurm_cluster, tmp_path, capsys):
    """--cpus-per-task 2 with several languages: array tasks ask for 2 CPUs, run two units each (of one or
    two languages), and every language's bytes match its single run."""
    root = make_langs(tmp_path, SIZES)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    opts = ("--shard-rows", "40")
    jobs = submit_multi(root, out, run_dir, tmp_path, *opts, "--cpus-per-task", "2")
    wait_for_jobs(jobs, timeout=TIMEOUT)
    assert {r["JobState"] for j in jobs for r in job_records(j)} <= {"COMPLETED"}
    sub = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    cpus = {j["stage"]: j["argv"][j["argv"].index("--cpus-per-task") + 1] for j in sub}
    assert cpus["partition"] == cpus["write"] == "2", cpus
    m = json.loads((run_dir / "languages.json").read_text())
    n_write = sum(c for _, _, c in m["units"]["write"])
    assert next(j for j in sub if j["stage"] == "write")["array"].split("%")[0] == f"0-{(n_write + 1) // 2 - 1}"
    assert list((run_dir / "logs" / "write" / "units").iterdir())  # each unit's own log, in its language's numbers
    expected = singles(root, tmp_path, *opts)
    assert {l: tree_bytes(out / l) for l in SIZES} == expected
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 0
    assert "languages landed 3/3" in capsys.readouterr().out


def test_a_small_language_lands_while_a_large_one_still_writes(slurm_cluster, tmp_path, monkeypatch, capsys):
    """fin_Latn's write unit 0 hangs: est_Latn and swe_Latn land from their own write units, without a
    finalize job of their own; scancel of the hung unit, and the finalize job names fin_Latn to resume."""
    import subprocess
    import time

    root = make_langs(tmp_path, SIZES)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:hang:fin_Latn")
    jobs = submit_multi(root, out, run_dir, tmp_path, "--shard-rows", "40")
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    assert len(jobs) == 4  # still one chain: no queue slot per language
    deadline = time.monotonic() + TIMEOUT
    while not all((run_dir / l / "DONE").exists() for l in ("swe_Latn", "est_Latn")):
        assert time.monotonic() < deadline, "the small languages did not land while fin_Latn's write hung"
        time.sleep(1)
    assert (out / "est_Latn" / "_MANIFEST.json").exists() and not (out / "fin_Latn").exists()
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 3
    status = capsys.readouterr().out
    rows = {l.split()[0]: l for l in status.splitlines() if l.split() and l.split()[0] in SIZES}
    assert rows["fin_Latn"].endswith("  running") and "  landed 20" in rows["est_Latn"], status
    write_units = json.loads((run_dir / "languages.json").read_text())["units"]["write"]
    assert [u[0] for u in write_units] == ["est_Latn", "swe_Latn", "fin_Latn"]  # smallest first
    fin0 = next(first for lang, first, _ in write_units if lang == "fin_Latn")
    subprocess.run(["scancel", f"{jobs[2]}_{fin0}"], check=True)
    wait_for_jobs(jobs, timeout=TIMEOUT)
    finalize_log = (run_dir / "logs" / "finalize" / f"{jobs[3]}_0.log").read_text()
    assert finalize_log.count("landed before") == 2 and "finalize failed for fin_Latn" in finalize_log
    assert f"--resume {run_dir}" in finalize_log
    landed = {l: tree_bytes(out / l) for l in ("swe_Latn", "est_Latn")}
    assert cli.main(["--resume", str(run_dir), "--conf", str(conf(tmp_path))]) == 0
    wait_for_jobs(job_ids(run_dir, last=True), timeout=TIMEOUT)
    assert {l: tree_bytes(out / l) for l in landed} == landed
    assert tree_bytes(out / "fin_Latn") == singles(root, tmp_path, "--shard-rows", "40")["fin_Latn"]


def test_quarantine_in_one_language_conserves_every_language(slurm_cluster, tmp_path):
    root = make_langs(tmp_path, SIZES)
    good = [orjson.dumps(r) for r in records(20, seed=9, text_bytes=200)]
    bad = good[:5] + [b"[1, 2]", b'{"id": "x", "text": '] + good[5:] + [b'{"id": "y"}']
    write_records(root / "swe_Latn" / "7_1.jsonl.zst", bad)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    opts = ("--shard-rows", "40", "--bad-records", "quarantine")
    wait_for_jobs(submit_multi(root, out, run_dir, tmp_path, *opts), timeout=TIMEOUT)
    for lang, (n, _) in SIZES.items():
        v = json.loads((run_dir / lang / "validation.json").read_text())
        for inp in v["inputs"]:
            assert inp["read"] == inp["kept"] + sum(inp["quarantined"].values()), (lang, inp)
        quarantined = sum(sum(i["quarantined"].values()) for i in v["inputs"])
        assert (v["conservation"]["read"], quarantined) == ((n + 23, 3) if lang == "swe_Latn" else (n, 0)), lang
        assert v["rows"] == n + (20 if lang == "swe_Latn" else 0)
    m = json.loads((out / "swe_Latn" / "_MANIFEST.json").read_text())
    assert sum(m["counts"]["filters"].values()) == 3
    kept = {l: [x for p in (run_dir / l / "quarantine").iterdir() for x in p.read_text().splitlines()] for l in SIZES}
    assert {l: len(v) for l, v in kept.items()} == {"fin_Latn": 0, "swe_Latn": 3, "est_Latn": 0}
    expected = singles(root, tmp_path, *opts)
    assert {l: tree_bytes(out / l) for l in SIZES} == expected


def test_failed_write_in_one_language_lets_the_others_land_then_resume(slurm_cluster, tmp_path, monkeypatch, capsys):
    root = make_langs(tmp_path, SIZES)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    opts = ("--shard-rows", "40")
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:kill:swe_Latn")  # sbatch exports it to the jobs
    jobs = submit_multi(root, out, run_dir, tmp_path, *opts)
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    wait_for_jobs(jobs, timeout=TIMEOUT)
    states = {s: {r["JobState"] for r in job_records(j)} for s, j in zip(("partition", "plan", "write", "finalize"), jobs)}
    assert "FAILED" in states["write"] and states["finalize"] == {"FAILED"}, states  # ran (afterany), exit 1
    assert (out / "fin_Latn" / "_MANIFEST.json").exists() and (out / "est_Latn" / "_MANIFEST.json").exists()
    assert not (out / "swe_Latn").exists() and not (run_dir / "swe_Latn" / "DONE").exists()
    finalize_log = (run_dir / "logs" / "finalize" / f"{jobs[3]}_0.log").read_text()
    assert "finalize failed for swe_Latn" in finalize_log and f"--resume {run_dir}" in finalize_log
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 1
    status = capsys.readouterr().out
    assert "FAILED swe_Latn write task 0" in status and "Killed" in status and "languages landed 2/3, 1 failed" in status
    assert "failed (write)" in status and status.count("  landed 20") == 2
    assert cli.main(["--status", str(run_dir / "swe_Latn")]) == 1
    assert "FAILED write task 0" in capsys.readouterr().out
    assert cli.main(["--verify", str(out)]) == 1  # ROOT names the language it was asked for and that did not land
    assert "not landed: swe_Latn" in capsys.readouterr().out.splitlines()[-1]
    landed = {l: tree_bytes(out / l) for l in ("fin_Latn", "est_Latn")}
    assert cli.main(["--resume", str(run_dir), "--conf", str(conf(tmp_path))]) == 0
    resumed = json.loads((run_dir / "run.json").read_text())["submissions"][-1]["jobs"]
    assert [j["stage"] for j in resumed] == ["write", "finalize"]
    units = json.loads((run_dir / "languages.json").read_text())["units"]["write"]
    assert [u[0] for u in units] == ["est_Latn", "swe_Latn", "fin_Latn"]  # the smallest language's units first
    assert resumed[0]["array"].split("%")[0] == str(units[1][1])
    wait_for_jobs(job_ids(run_dir, last=True), timeout=TIMEOUT)
    assert (run_dir / "swe_Latn" / "DONE").exists()
    assert {l: tree_bytes(out / l) for l in landed} == landed  # the landed languages were left alone
    assert tree_bytes(out / "swe_Latn") == singles(root, tmp_path, *opts)["swe_Latn"]


def test_requeued_task_holds_the_afterany_chain(slurm_cluster, tmp_path, monkeypatch, capsys):
    """A task requeued near its time limit has not terminated: plan (afterany) must wait for its rerun."""
    import subprocess

    from tests.e2e.faults.test_resume_slurm import wait_for_log

    root = make_langs(tmp_path, SIZES)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "partition-after-input:0:hang-once:fin_Latn")
    jobs = submit_multi(root, out, run_dir, tmp_path, "--shard-rows", "40")
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    units = json.loads((run_dir / "languages.json").read_text())["units"]["partition"]
    fin0 = next(first for lang, first, _ in units if lang == "fin_Latn")  # the largest language's units come last
    log = wait_for_log(run_dir / "logs" / "partition" / f"{jobs[0]}_{fin0}.log", "fault injected")
    # while it hangs, every language's row reads squeue through its own task numbers
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 3
    rows = {l.split()[0]: l for l in capsys.readouterr().out.splitlines() if l.split() and l.split()[0] in SIZES}
    assert rows["fin_Latn"].endswith("  running"), rows
    # the others wait for the plan, and say for what, as squeue gives it (Dependency, Priority, ...)
    assert all(r.endswith("  running") or re.search(r"  waiting \((partition|plan|write|finalize): \w+\)$", r)
               for r in rows.values()), rows
    assert cli.main(["--status", str(run_dir / "est_Latn")]) == 3
    est = {l.split()[0]: l.split()[1:] for l in capsys.readouterr().out.splitlines() if l.split() and l.split()[0] in ("plan", "write")}
    assert est["plan"][3] == "1" and est["write"][3] == "1", est  # pending on the dependency
    subprocess.run(["scancel", "--batch", "--signal=USR1", f"{jobs[0]}_{fin0}"], check=False)  # 228 here though delivered
    wait_for_log(log, "requeueing", timeout=60)
    # held by Slurm before it starts again (BeginTime): the summary says it was requeued, and by whom
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "PENDING" not in subprocess.run(
            ["squeue", "-h", "-r", f"--jobs={jobs[0]}", "-o", "%i %T"], capture_output=True, text=True).stdout:
        time.sleep(0.5)
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 3
    summary = capsys.readouterr().out
    assert "REQUEUED fin_Latn partition 1 task (0): requeued by Slurm after a start" in summary, summary
    wait_for_jobs(jobs, timeout=TIMEOUT + 200)
    assert "restart 1" in log.read_text()
    plan_log = (run_dir / "logs" / "plan" / f"{jobs[1]}_0.log").read_text()
    assert "ERROR" not in plan_log and plan_log.count("done:") == 3, plan_log  # the plan ran after the rerun, not when the task was requeued
    assert all((run_dir / lang / "DONE").exists() for lang in SIZES)


def test_held_jobs_show_as_waiting_with_slurms_reason_never_running(slurm_cluster, tmp_path, capsys):
    """A chain job an admin holds (scontrol hold): every unfinished language waits, with Slurm's reason, and
    the run is queued (exit 3), not running; released, the chain finishes."""
    root = make_langs(tmp_path, SIZES)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    jobs = submit_multi(root, out, run_dir, tmp_path, "--shard-rows", "40")
    subprocess.run(["scontrol", "hold", *jobs], capture_output=True, text=True)  # a task already running finishes
    try:
        deadline = time.monotonic() + TIMEOUT
        while any(r.strip() == "None" or not r.strip() for r in squeue_reasons(jobs).values()):  # until none runs
            assert time.monotonic() < deadline, squeue_reasons(jobs)
            time.sleep(0.5)
        capsys.readouterr()
        assert cli.main(["--status", str(run_dir)]) == ExitCode.BUSY
        status = capsys.readouterr().out
        rows = [l for l in status.splitlines() if l.split() and l.split()[0] in SIZES]
        assert len(rows) == 3 and not any(l.endswith(" running") for l in rows), status
        assert all(re.search(r"waiting \((partition|plan|write|finalize): JobHeldAdmin\)$", l) for l in rows), status
        assert "state: queued" in status, status
    finally:
        subprocess.run(["scontrol", "release", *jobs], capture_output=True, text=True)
    wait_for_jobs(jobs, timeout=TIMEOUT)
    assert all((run_dir / lang / "DONE").exists() for lang in SIZES)
