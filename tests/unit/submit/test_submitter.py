"""The submitter's command lines, --dry-run and conf safety, with a fake sbatch that only records.

(A fake sbatch is for these unit tests of argv only; the real chain runs in test_pipeline_slurm.)
"""
from __future__ import annotations

import getpass
import json
import subprocess
from pathlib import Path

import pytest

from shard_pipeline.submit import cli
from shard_pipeline.submit.executors.slurm import job_tag
from tests.pipeline_util import LANG, make_corpus


def conf(tmp_path: Path, text: str = "") -> Path:
    c = tmp_path / "t.conf"
    c.write_text("PRESET=local\nACCOUNT=project_462000001\n" + text)
    return c


def submit(tmp_path, root, *extra) -> int:
    return cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out"),
                     "--run-dir", str(tmp_path / "run"), "--license", "CC0-1.0", "--conf", str(conf(tmp_path)), *extra])


def opt(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def stage_of(argv: list[str]) -> str:
    """The stage an sbatch argv runs (slurm_job.sh's STAGE argument)."""
    script = next(i for i, x in enumerate(argv) if x.endswith("slurm_job.sh"))
    return argv[script + 3]


def test_every_stage_is_queued_at_once_with_afterany_chain(tmp_path, fake_slurm, capsys):
    root = make_corpus(tmp_path, n_docs=40)
    assert submit(tmp_path, root, "--partition-tasks", "3", "--write-tasks", "2") == 0
    sb = fake_slurm("sbatch")
    names = [opt(a, "--job-name") for a in sb]
    tag = job_tag((tmp_path / "run").resolve(), LANG)
    assert names == [f"{c}{tag}" for c in "PLWF"] and tag.startswith(LANG[:3]) and len(set(names)) == 4
    assert all(len(n) == 8 for n in names)  # squeue's default NAME column shows them whole
    assert [opt(a, "--array").split("%")[0] for a in sb] == ["0-2", "0", "0-1", "0"]
    assert opt(sb[0], "--dependency") is None
    assert [opt(a, "--dependency") for a in sb[1:]] == ["afterany:1001", "afterany:1002", "afterany:1003"]
    for a in sb:
        assert a[0] == "--parsable" and opt(a, "--account") == "project_462000001" and opt(a, "--partition") == "small"
        assert "--requeue" in a and "--signal=B:USR1@300" in a
        assert ("--kill-on-invalid-dep=yes" in a) == (a is not sb[0])
        assert opt(a, "--output").endswith("%A_%a.log")
        script = next(i for i, x in enumerate(a) if x.endswith("slurm_job.sh"))
        assert a[script + 3] in ("partition", "plan", "write", "finalize")  # PYTHON CHECKOUT STAGE ...
        assert a[script + 2] == str(Path(__file__).resolve().parents[3])  # a checkout: on the job's PYTHONPATH
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [j["job_id"] for j in record["submissions"][0]["jobs"]] == ["1001", "1002", "1003", "1004"]
    out = capsys.readouterr().out
    assert f"watch:   squeue --me -n {','.join(names)}" in out and str(tmp_path / "run") in out


def test_arrays_above_max_array_size_are_chunked_and_all_chunks_depended_on(tmp_path, fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_MAX_ARRAY", "2")
    root = make_corpus(tmp_path, n_docs=40, names=[f"9_{i}" for i in range(1, 6)])
    assert submit(tmp_path, root, "--partition-tasks", "5", "--write-tasks", "3") == 0
    sb = fake_slurm("sbatch")
    names = [opt(a, "--job-name")[0] for a in sb]
    assert names == ["P"] * 3 + ["L"] + ["W"] * 2 + ["F"]
    assert [opt(a, "--array").split("%")[0] for a in sb[:3]] == ["0-1", "0-1", "0"]
    assert [a[-1] for a in sb[:3]] == ["0", "2", "4"]  # the task offset each chunk passes on
    assert opt(sb[3], "--dependency") == "afterany:1001:1002:1003"
    assert opt(sb[6], "--dependency") == "afterany:1005:1006"


def queued_array_tasks(tmp_path, root, c) -> int:
    """Submit LANG with conf `c` (fake sbatch); the array tasks its submission queued."""
    assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out"),
                     "--run-dir", str(tmp_path / "run"), "--license", "CC0-1.0", "--conf", str(c),
                     "--shard-rows", "5"]) == 0
    return sum(int(j["tasks"]) for j in json.loads((tmp_path / "run" / "run.json").read_text())["submissions"][0]["jobs"])


def test_queue_room_is_respected(tmp_path, fake_slurm, monkeypatch, capsys):
    root = make_corpus(tmp_path, n_docs=40, names=[f"9_{i}" for i in range(1, 9)])
    monkeypatch.setenv("FAKE_QUEUED", "214")
    (tmp_path / "t.conf")  # SUBMIT_LIMIT=220 leaves 6 slots: 2 partition + 2 write + plan + finalize
    c = conf(tmp_path, "SUBMIT_LIMIT=220\n")
    assert queued_array_tasks(tmp_path, root, c) <= 6
    monkeypatch.setenv("FAKE_QUEUED", "218")
    assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out2"),
                     "--run-dir", str(tmp_path / "run2"), "--license", "CC0-1.0", "--conf", str(c)]) == 2
    assert "only 2 of the 220 jobs you may have queued (SUBMIT_LIMIT) are free" in capsys.readouterr().err


def test_the_association_cap_wins_over_submit_limit_and_counts_its_account(tmp_path, fake_slurm, monkeypatch):
    """sacctmgr's MaxSubmitJobs of the ACCOUNT's association is the cap; squeue counts that account."""
    root = make_corpus(tmp_path, n_docs=40, names=[f"9_{i}" for i in range(1, 9)])
    monkeypatch.setenv("FAKE_ASSOC", "other|3\nproject_462000001|7")  # conf() sets ACCOUNT=project_462000001
    monkeypatch.setenv("FAKE_QUEUED", "1")  # 7 - 1 leaves 6 slots, where SUBMIT_LIMIT would leave 219
    c = conf(tmp_path, "SUBMIT_LIMIT=220\n")
    assert queued_array_tasks(tmp_path, root, c) <= 6
    assert ["-h", "-r", "-u", getpass.getuser(), "-A", "project_462000001", "-o", "%i"] in fake_slurm("squeue")


def test_submit_cap_reads_the_association_else_the_conf():
    from shard_pipeline.submit.slurm_limits import SubmitCap, assoc_max_submit, submit_cap

    assert assoc_max_submit("tests|200\ncapped|5\n", "capped") == 5
    assert assoc_max_submit("tests|\n", "tests") is None  # no limit on the association
    answers = {"user": "tests\n", "assoc": "tests|200\ncapped|5\n"}

    def run(argv, **kw):
        return subprocess.CompletedProcess(argv, 0, answers[argv[3]], "")

    assert submit_cap(220, None, "u", run) == SubmitCap(200, "MaxSubmitJobs of association u/tests", "tests")
    assert submit_cap(220, "capped", "u", run).limit == 5

    def failing(argv, **kw):
        return subprocess.CompletedProcess(argv, 1, "", "sacctmgr: error: accounting storage is disabled")

    assert submit_cap(220, None, "u", failing) == SubmitCap(220, "SUBMIT_LIMIT", None)
    assert submit_cap(None, None, "u", failing) is None


def test_dry_run_writes_nothing_and_never_calls_sbatch(tmp_path, fake_slurm, capsys):
    root = make_corpus(tmp_path, n_docs=60)
    index = tmp_path / "index"
    c = conf(tmp_path, f"COUNTS_INDEX={index}\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out"),
                     "--run-dir", str(tmp_path / "run"), "--license", "CC0-1.0", "--conf", str(c), "--dry-run",
                     "--shard-rows", "20"]) == 0
    text = capsys.readouterr().out
    assert fake_slurm("sbatch") == [] and fake_slurm("scancel") == []
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no run dir, no OUT, no index
    sizes = sum(p.stat().st_size for p in (root / LANG).iterdir())
    assert "input shards     4" in text and f"{sizes / 1000:.2f} kB" in text
    assert "~60 " in text and "60 known exactly" in text  # small shards are read to their end by the sample
    assert "~3 of 20 rows" in text
    for stage in ("partition", "plan", "write", "finalize"):
        assert stage in text
    names = [f"{c}{job_tag((tmp_path / 'run').resolve(), LANG)}" for c in "PLWF"]
    assert f"job names        {' '.join(names)}" in text and f"watch: squeue --me -n {','.join(names)}" in text
    assert "nothing written, nothing submitted" in text


@pytest.mark.parametrize("line,expect", [
    ("ACCOUNT=$(touch {marker})", "literal"),
    ("ACCOUNT=`touch {marker}`", "literal"),
    ("ACCOUNT=x; touch {marker}", "literal"),
    ("MODULE_LOAD_CMD=module load x; touch {marker}", "refused"),
    ("PYTHON=python3 -c 'import os; os.system(\"touch {marker}\")'", "refused"),
])
def test_malicious_conf_values_never_run(tmp_path, fake_slurm, capsys, line, expect):
    marker = tmp_path / "pwned"
    root = make_corpus(tmp_path, n_docs=20)
    c = tmp_path / "evil.conf"
    c.write_text("PRESET=local\n" + line.format(marker=marker) + "\n")
    rc = cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out"),
                   "--run-dir", str(tmp_path / "run"), "--license", "CC0-1.0", "--conf", str(c)])
    assert not marker.exists()
    if expect == "refused":
        assert rc == 2 and "evil.conf:2" in capsys.readouterr().err
        assert fake_slurm("sbatch") == []
    else:
        assert rc == 0
        accounts = {opt(a, "--account") for a in fake_slurm("sbatch")}
        assert accounts == {line.split("=", 1)[1].format(marker=marker)}  # one argv element, never a shell string


def test_no_license_is_an_error_before_anything(tmp_path, fake_slurm, capsys):
    root = make_corpus(tmp_path, n_docs=10)
    c = tmp_path / "nolicense.conf"
    c.write_text("WORKER_PARTITION=small\n")
    assert cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--out", str(tmp_path / "out"),
                     "--run-dir", str(tmp_path / "run"), "--conf", str(c)]) == 2
    assert "no license" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and fake_slurm("sbatch") == []


@pytest.mark.parametrize("flag", ["--slurm-partition", "--partition"])
def test_slurm_partition_option_and_its_alias(tmp_path, fake_slurm, flag):
    root = make_corpus(tmp_path, n_docs=20)
    assert submit(tmp_path, root, flag, "debug", "--partition-tasks", "2") == 0
    sb = fake_slurm("sbatch")
    assert sb and all(opt(a, "--partition") == "debug" for a in sb)
    assert opt(sb[0], "--array").split("%")[0] == "0-1"  # --partition-tasks is its own option


@pytest.mark.parametrize("extra, says", [
    (("--wds", "11"), "bad --wds spec '11'"),
    (("--sources", "xx"), "unknown source 'xx'"),
    (("--dp-ranks", "0"), "dp ranks: 0"),
])
def test_bad_specs_are_one_line_usage_errors(tmp_path, capsys, extra, says):
    root = make_corpus(tmp_path, n_docs=10)
    assert submit(tmp_path, root, "--executor", "local", *extra) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_out_that_is_not_an_output_is_a_usage_error(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=10)
    (tmp_path / "out").write_text("precious")
    assert submit(tmp_path, root, "--executor", "local") == 2
    assert "refusing to replace it" in capsys.readouterr().err
    assert (tmp_path / "out").read_text() == "precious"


@pytest.mark.parametrize("cpus", ["1", "2"])
def test_the_throttle_the_dry_run_shows_is_the_one_queued(tmp_path, fake_slurm, capsys, cpus):
    """One definition (layout.array_throttle): the dry-run promises what the submission passes as `%N`."""
    root = make_corpus(tmp_path, n_docs=40)
    args = ("--partition-tasks", "3", "--write-tasks", "2", "--cpus-per-task", cpus)
    assert submit(tmp_path, root, "--dry-run", *args) == 0
    shown = capsys.readouterr().out.split("array throttle %", 1)[1].split()[0]
    assert submit(tmp_path, root, *args) == 0
    arrays = [opt(a, "--array") for a in fake_slurm("sbatch") if stage_of(a) in ("partition", "write")]
    assert arrays and {a.split("%")[1] for a in arrays} == {shown}
