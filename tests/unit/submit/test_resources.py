"""The sbatch resources of a run: decided once by the layout, kept in the run dir, passed to sbatch unchanged.

--mem is one unit's memory at submission and on resume; an array task running C units asks for
C of them. Run dirs written before resources were kept per stage still resume and report.
(A fake sbatch records argv only; the real chain runs in test_pipeline_slurm and test_group_slurm.)
"""
from __future__ import annotations

import json

import pytest

from shard_pipeline.run import unit_table
from shard_pipeline.run.registry import STAGE_NAMES
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.run.runconfig import RunConfig, StageResources
from shard_pipeline.run.queue import resume_hint
from shard_pipeline.submit import cli
from shard_pipeline.submit.layout import lay_out_jobs
from shard_pipeline.units import parse_mem, scale_mem, share_of_mem
from tests.pipeline_util import LANG, LICENSE, lang_dir, make_corpus
from tests.e2e.local.test_multi_local import make_langs
from tests.unit.submit.test_submitter import opt, stage_of, submit


def by_stage(sbatch_calls: list[list[str]]) -> dict[str, StageResources]:
    return {stage_of(a): StageResources(opt(a, "--mem"), opt(a, "--time"),
                                                                  int(opt(a, "--cpus-per-task")))
            for a in sbatch_calls}


def kept(run_dir, lang: str = LANG) -> dict[str, StageResources]:
    """What the language's run dir keeps: one unit's resources (the array task of C units asks C x them)."""
    return RunConfig.from_json(json.loads((lang_dir(run_dir, lang) / "config.json").read_text())).execution.resources


def test_sbatch_gets_exactly_what_the_layout_decided_and_the_run_dir_kept(tmp_path, fake_slurm):
    root = make_corpus(tmp_path, n_docs=40, names=[f"9_{i}" for i in range(1, 6)])
    assert submit(tmp_path, root, "--mem", "300M", "--cpus-per-task", "2", "--partition-tasks", "5",
                  "--write-tasks", "3", "--time", "02:00:00") == 0
    res, asked = kept(tmp_path / "run"), by_stage(fake_slurm("sbatch"))
    layout = json.loads((lang_dir(tmp_path / "run") / "run.json").read_text())["layout"]["resources"]
    assert {stage: StageResources(**r) for stage, r in layout.items()} == res  # the layout's own record, verbatim
    assert res["partition"] == StageResources("300M", "02:00:00", 1)  # one unit
    assert asked["partition"] == StageResources("600M", "02:00:00", 2)  # 2 units of 300M each
    assert asked["plan"] == res["plan"] and asked["finalize"] == res["finalize"]
    assert res["plan"].time == "02:00:00" and res["plan"].cpus == 1 and parse_mem(res["plan"].mem) >= parse_mem("300M")
    assert asked["write"] == StageResources(scale_mem(res["write"].mem, 2), "02:00:00", 2) and res["write"].cpus == 1


def test_the_layout_raises_memory_to_the_need_then_times_the_cores():
    sizes = [10**11] * 1108  # HPLT v4 English
    one = lay_out_jobs(sizes, {}, shard_rows=1_000_000, task_budget=200, worker_mem="4G").resources
    eight = lay_out_jobs(sizes, {}, shard_rows=1_000_000, task_budget=200, worker_mem="4G", cpus=8).resources
    assert one["partition"] == StageResources("4G", one["partition"].time, 1)
    assert eight["partition"].mem == "32G" and eight["partition"].cpus == 8
    assert one["write"].mem != "4G"  # a writer needs more than 4G at this scale
    assert eight["write"].mem == scale_mem(share_of_mem(eight["write"].mem, 8), 8)
    assert one["plan"].cpus == eight["plan"].cpus == 1 and one["finalize"].cpus == eight["finalize"].cpus == 16
    assert tuple(one) == tuple(eight) == STAGE_NAMES  # a resource per stage of the registry, in its order


def test_resume_mem_is_per_unit_as_at_submission(tmp_path, fake_slurm):
    root = make_corpus(tmp_path, n_docs=40, names=[f"9_{i}" for i in range(1, 6)])
    assert submit(tmp_path, root, "--mem", "300M", "--cpus-per-task", "2", "--partition-tasks", "4",
                  "--write-tasks", "2", "--executor", "slurm") == 0
    first = len(fake_slurm("sbatch"))
    conf = tmp_path / "t.conf"
    assert cli.main(["--resume", str(tmp_path / "run"), "--conf", str(conf), "--mem", "1G"]) == 0
    again = by_stage(fake_slurm("sbatch")[first:])
    assert again["partition"] == StageResources("2G", again["partition"].time, 2)
    assert again["write"].mem == "2G" and again["plan"].mem == again["finalize"].mem == "1G"


@pytest.mark.parametrize("stage,reason,flag", [("partition", "OUT_OF_MEMORY", "--mem 600M"),
                                               ("write", "TIMEOUT", "--time 04:00:00"),
                                               ("plan", "OUT_OF_MEMORY", "--mem 6G")])
def test_resume_hint_doubles_a_units_memory(tmp_path, stage, reason, flag):
    from shard_pipeline.run.runconfig import Content, Execution

    res = {"partition": StageResources("1200M", "01:00:00", 4), "plan": StageResources("3G", "00:30:00"),
           "write": StageResources("8G", "02:00:00", 4), "finalize": StageResources("300M", "00:30:00", 2)}
    content = Content(corpus="v4", subset="clean", lang="x", dataset="d", version="1", license_spdx="CC0-1.0",
                      shard_rows=10, val_permille=5, row_group_bytes=1 << 20, bad_records="fail", inputs=())
    cfg = RunConfig(content, Execution(executor="slurm", out="/o", partition_tasks=8, write_tasks=8, buckets=1,
                                       spill_bytes=1, python="python3", resources=res))
    assert resume_hint(RunDir(tmp_path), cfg, stage, reason).options == tuple(flag.split())


def test_share_and_scale_of_a_slurm_memory_size():
    assert (scale_mem("4G", 16), scale_mem("400M", 2), scale_mem("4000", 3)) == ("64G", "800M", "12000")
    assert (share_of_mem("64G", 16), share_of_mem("5G", 2), share_of_mem("4000", 1)) == ("4G", "2560M", "4000")


def test_a_multi_language_run_runs_c_units_per_array_task(tmp_path, fake_slurm, capsys):
    """--cpus-per-task C (and a conf's CPUS_PER_TASK) apply to several languages: C units per array task."""
    from shard_pipeline.run.unit_table import group_count
    from shard_pipeline.units import parse_mem

    root = make_langs(tmp_path, {"fin_Latn": (60, ("10_1", "9_1")), "est_Latn": (5, ("10_1",))})
    base = ["fin_Latn,est_Latn", "--local-root", str(root), "--license", LICENSE,
            "--executor", "slurm", "--mem", "500M", "--shard-rows", "4"]
    conf = tmp_path / "c.conf"
    conf.write_text("PRESET=local\nCPUS_PER_TASK=4\nMAX_TASKS=8\n")
    assert cli.main([*base, "--run-dir", str(tmp_path / "r2"), "--conf", str(conf), "--out", str(tmp_path / "o2")]) == 0
    assert "CPUS_PER_TASK" not in capsys.readouterr().err  # no note: it applies
    sb = by_stage(fake_slurm("sbatch"))
    m = unit_table.load(tmp_path / "r2")
    for stage in ("partition", "write"):
        c = m.units_per_task(stage)
        assert c == min(4, m.size(stage)) and sb[stage].cpus == c
        unit = max(parse_mem(r.mem) for r in (kept(tmp_path / "r2", l)[stage] for l in m.langs))
        assert parse_mem(sb[stage].mem) == c * unit and unit >= parse_mem("500M")
    assert m.size("write") > 4  # more units than a C = 1 run could queue under MAX_TASKS 8
    assert group_count(m.size("partition"), m.units_per_task("partition")) \
        + group_count(m.size("write"), m.units_per_task("write")) + 2 <= 8  # MAX_TASKS counts array tasks
    for lang in ("fin_Latn", "est_Latn"):  # each language's run dir keeps one unit's needs
        assert {r.cpus for s, r in kept(tmp_path / "r2", lang).items() if s != "finalize"} == {1}
    assert cli.main([*base, "--run-dir", str(tmp_path / "r1"), "--cpus-per-task", "2", "--out", str(tmp_path / "o1")]) == 0
    sb = by_stage(fake_slurm("sbatch")[-4:])
    assert sb["write"].cpus == 2


@pytest.mark.slow
def test_a_multi_language_run_without_run_dir_goes_under_runs(tmp_path, monkeypatch, capsys):
    root = make_langs(tmp_path, {"fin_Latn": (20, ("10_1",)), "est_Latn": (5, ("10_1",))})
    monkeypatch.setenv("HPLT_SHARD_HOME", str(tmp_path / "home"))
    assert cli.main(["fin_Latn,est_Latn", "--local-root", str(root), "--out", str(tmp_path / "out"),
                     "--license", LICENSE, "--executor", "local", "--jobs", "2"]) == 0
    made = list((tmp_path / "home" / "runs").iterdir())
    assert [p.name for p in made] == ["v4-clean-multi-fin_Latn+1-all"]
    assert (made[0] / "fin_Latn" / "DONE").exists() and (tmp_path / "out" / "est_Latn" / "_MANIFEST.json").exists()


def test_a_resume_raises_every_stage_to_at_least_its_mem_and_time_never_lower(tmp_path, fake_slurm):
    root = make_corpus(tmp_path, n_docs=40, names=[f"9_{i}" for i in range(1, 6)])
    assert submit(tmp_path, root, "--mem", "300M", "--cpus-per-task", "2", "--partition-tasks", "4",
                  "--write-tasks", "2", "--executor", "slurm", "--time", "03:00:00") == 0
    before = by_stage(fake_slurm("sbatch"))
    n = len(fake_slurm("sbatch"))
    assert cli.main(["--resume", str(tmp_path / "run"), "--conf", str(tmp_path / "t.conf"), "--mem", "600M",
                     "--time", "01:00:00"]) == 0
    after = by_stage(fake_slurm("sbatch")[n:])
    assert after["partition"].mem == "1200M"  # 2 units of 600M
    assert after["plan"].mem == before["plan"].mem != "600M"  # the plan's estimated need stays
    assert after["write"].mem == before["write"].mem  # 2 x 1G already
    assert {r.time for r in after.values()} == {"03:00:00"}  # --time 1h never shortens a 3h limit


def test_the_status_hint_counts_an_earlier_resumes_mem(tmp_path, fake_slurm):
    root = make_corpus(tmp_path, n_docs=40)
    assert submit(tmp_path, root, "--mem", "300M", "--executor", "slurm") == 0
    run = RunDir(lang_dir(tmp_path / "run"))
    cfg = RunConfig.from_json(json.loads(run.config_json.read_text()))
    assert resume_hint(run, cfg, "partition", "OUT_OF_MEMORY").options == ("--mem", "600M")
    assert cli.main(["--resume", str(run.root.parent), "--conf", str(tmp_path / "t.conf"), "--mem", "2G"]) == 0
    assert resume_hint(run, cfg, "partition", "OUT_OF_MEMORY").options == ("--mem", "4G")  # not back down to 600M


def test_a_later_plain_resume_keeps_an_earlier_partition_and_account(tmp_path, fake_slurm, capsys):
    root = make_corpus(tmp_path, n_docs=40)
    assert submit(tmp_path, root, "--executor", "slurm") == 0
    conf = str(tmp_path / "t.conf")
    assert cli.main(["--resume", str(tmp_path / "run"), "--conf", conf, "--partition", "largemem",
                     "--account", "project_9"]) == 0
    n = len(fake_slurm("sbatch"))
    assert cli.main(["--resume", str(tmp_path / "run"), "--conf", conf]) == 0
    again = fake_slurm("sbatch")[n:]
    assert again and {(opt(a, "--partition"), opt(a, "--account")) for a in again} == {("largemem", "project_9")}


@pytest.mark.parametrize("flag,value,words", [("--mem", "0", "not a Slurm memory size"), ("--time", "0", "is zero"),
                                              ("--max-tasks", "0", "positive integer"), ("--mem", "4 G", "memory")])
def test_resume_options_follow_the_rules_of_a_submission(tmp_path, fake_slurm, capsys, flag, value, words):
    root = make_corpus(tmp_path, n_docs=20)
    assert submit(tmp_path, root, "--executor", "slurm") == 0
    n = len(fake_slurm("sbatch"))
    assert cli.main(["--resume", str(tmp_path / "run"), "--conf", str(tmp_path / "t.conf"), flag, value]) == 2
    err = capsys.readouterr().err
    assert words in err and flag in err and "Traceback" not in err
    assert len(fake_slurm("sbatch")) == n


def test_a_multi_language_resume_applies_mem_and_refuses_content_options(tmp_path, fake_slurm, capsys):
    root = make_langs(tmp_path, {"fin_Latn": (60, ("10_1", "9_1")), "est_Latn": (5, ("10_1",))})
    run_dir = tmp_path / "run"
    assert cli.main(["fin_Latn,est_Latn", "--local-root", str(root), "--out", str(tmp_path / "out"), "--license",
                     LICENSE, "--executor", "slurm", "--mem", "500M", "--run-dir", str(run_dir)]) == 0
    n = len(fake_slurm("sbatch"))
    assert cli.main(["--resume", str(run_dir), "--shard-rows", "5"]) == 2
    assert "--shard-rows cannot change on resume" in capsys.readouterr().err and len(fake_slurm("sbatch")) == n
    assert cli.main(["--resume", str(run_dir), "--mem", "3G", "--time", "20:00:00"]) == 0
    again = by_stage(fake_slurm("sbatch")[n:])
    assert again["partition"] == StageResources("3G", "20:00:00", 1) and again["write"].mem == "3G"
    assert json.loads((run_dir / "run.json").read_text())["resources"] == {"mem": "3G", "time": "20:00:00"}


def test_slurm_time_limits_compare_in_minutes():
    from shard_pipeline.units import slurm_minutes

    assert [slurm_minutes(t) for t in ("45", "10:30", "02:00:00", "1-02:00:00", "1-02", "1-02:30")] == \
        [45, 10.5, 120, 1560, 1560, 1590]


def test_a_resume_may_change_cpus_per_task_and_regroups_the_units(tmp_path, fake_slurm, capsys):
    """C decides no byte: a resume with another C queues the same units in groups of the new C,
    with C x the unit memory, and languages.json says the new C for the array tasks that read it."""
    root = make_corpus(tmp_path, n_docs=40, names=[f"9_{i}" for i in range(1, 6)])
    assert submit(tmp_path, root, "--mem", "300M", "--cpus-per-task", "2", "--partition-tasks", "4",
                  "--write-tasks", "3", "--executor", "slurm") == 0
    run_dir = tmp_path / "run"
    sha = json.loads((lang_dir(run_dir) / "config.json").read_text())["config_sha256"]
    n = len(fake_slurm("sbatch"))
    assert cli.main(["--resume", str(run_dir), "--conf", str(tmp_path / "t.conf"), "--cpus-per-task", "1"]) == 0
    again = fake_slurm("sbatch")[n:]
    arrays = {stage_of(a): opt(a, "--array").split("%")[0] for a in again}
    assert arrays["partition"] == "0-3" and arrays["write"] == "0-2"  # 4 and 3 units, one per array task now
    res = by_stage(again)
    assert res["partition"] == StageResources("300M", res["partition"].time, 1) and res["write"].cpus == 1
    assert json.loads((run_dir / "languages.json").read_text())["cpus"] == {"partition": 1, "write": 1}
    assert json.loads((lang_dir(run_dir) / "config.json").read_text())["config_sha256"] == sha
    assert json.loads((run_dir / "run.json").read_text())["resources"] == {"cpus_per_task": 1}
    n = len(fake_slurm("sbatch"))
    assert cli.main(["--resume", str(run_dir), "--conf", str(tmp_path / "t.conf"), "--cpus-per-task", "3"]) == 0
    arrays = {stage_of(a): (opt(a, "--array").split("%")[0], opt(a, "--cpus-per-task"), opt(a, "--mem"))
              for a in fake_slurm("sbatch")[n:]}
    assert arrays["partition"] == ("0-1", "3", "900M") and arrays["write"][:2] == ("0", "3")


def test_a_multi_language_resume_regroups_its_units_with_another_cpus_per_task(tmp_path, fake_slurm, capsys):
    root = make_langs(tmp_path, {"fin_Latn": (20, ("10_1", "9_1")), "est_Latn": (5, ("10_1",))})
    run_dir = tmp_path / "run"
    assert cli.main(["fin_Latn,est_Latn", "--local-root", str(root), "--out", str(tmp_path / "out"), "--license",
                     LICENSE, "--executor", "slurm", "--run-dir", str(run_dir), "--mem", "300M"]) == 0
    n = len(fake_slurm("sbatch"))
    units = {s: b for s, b in json.loads((run_dir / "languages.json").read_text())["units"].items()}
    assert cli.main(["--resume", str(run_dir), "--cpus-per-task", "2"]) == 0
    table = json.loads((run_dir / "languages.json").read_text())
    assert table["cpus"] == {"partition": 2, "write": 2} and table["units"] == units  # the same units, regrouped
    again = by_stage(fake_slurm("sbatch")[n:])
    assert again["partition"] == StageResources("600M", again["partition"].time, 2)
