"""Several languages in one run (#15), on the local executor: the unit table, the budget share, the
command line, and 20 small languages whose outputs equal write_shards and their single runs byte for byte."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from shard_pipeline.contract.shard import write_shards
from shard_pipeline.errors import UsageError
from shard_pipeline.input.corpus import find_shards
from shard_pipeline.input.reader import ReadStats, iter_records, to_doc
from shard_pipeline.input.synth import generate_corpus
from shard_pipeline.run import multi
from shard_pipeline.submit import cli
from shard_pipeline.submit.executors.slurm import job_tag
from shard_pipeline.submit.multi import languages, read_langs_file, share_budget, wants_multi
from tests.pipeline_util import LICENSE, config_sha, tree_bytes


def make_langs(base: Path, sizes: dict[str, tuple[int, tuple[str, ...]]], text_bytes: int = 300) -> Path:
    root = base / "clean"
    for i, (lang, (n, names)) in enumerate(sizes.items()):
        generate_corpus(root, lang, corpus="v4", n_docs=n, shard_names=list(names), seed=i + 1, text_bytes=text_bytes)
    return root


def multi_cli(root: Path, langs: str, out: Path, run_dir: Path, *extra: str) -> int:
    return cli.main([langs, "--corpus", "v4", "--local-root", str(root), "--out", str(out), "--run-dir", str(run_dir),
                     "--executor", "local", "--license", LICENSE, "--jobs", "2", *extra])


def expected_for(root: Path, lang: str, out: Path, run_dir: Path, shard_rows: int) -> None:
    """write_shards (the in-memory contract writer) over one language, with its run's config hash."""
    docs = [to_doc(r, s, LICENSE) for s in find_shards(lang, corpus="v4", local_root=root)
            for r in iter_records(s, corpus="v4", stats=ReadStats())]
    write_shards(docs, out, dataset=f"hplt-v4-clean-{lang}", version="1", shard_rows=shard_rows, val_permille=5,
                 row_group_bytes=64 << 20, config_sha256=config_sha(run_dir), ledger_ref=None)


# ---- pure parts -------------------------------------------------------------------------------

def test_budget_is_shared_by_bytes_with_at_least_two_tasks_each():
    shares = share_budget([1000, 10, 1], 40)
    assert sum(shares) == 40 and min(shares) == 2 and shares[0] == 36
    assert share_budget([5, 5, 5], 9) == [3, 3, 3]
    assert share_budget([0, 0], 5) == [3, 2]
    with pytest.raises(UsageError, match="at most 2 languages per run"):
        share_budget([1, 1, 1], 5)


def test_unit_table_maps_every_global_index_to_one_language_task(tmp_path):
    m = multi.unit_table(tmp_path, [("a", 3, 2), ("b", 1, 4), ("c", 2, 1)])
    assert m.size("partition") == 6 and m.size("write") == 7 and m.size("plan") == 3
    seen = [m.locate("write", g) for g in range(7)]
    assert seen == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("b", 3), ("c", 0)]
    assert all(m.global_index("write", l, t) == g for g, (l, t) in enumerate(seen))
    (tmp_path / multi.LANGUAGES_JSON).write_text(json.dumps(m.to_json()))
    assert multi.resolve(tmp_path, "partition", 4) == (tmp_path / "c", 0)
    with pytest.raises(IndexError):
        multi.resolve(tmp_path, "partition", 6)


def ns(**kw) -> argparse.Namespace:
    base = dict(lang=None, langs_file=None, dataset=None, local_root=None, corpus="v4")
    return argparse.Namespace(**{**base, **kw})


def test_language_lists_from_the_command_line_a_file_and_all(tmp_path):
    assert wants_multi(ns(lang="a_Latn,b_Latn")) and wants_multi(ns(lang="all")) and not wants_multi(ns(lang="a_Latn"))
    assert languages(ns(lang="fin_Latn, swe_Latn"), None) == ["fin_Latn", "swe_Latn"]
    f = tmp_path / "langs.txt"
    f.write_text("# Nordic\nfin_Latn\n\nswe_Latn  # Swedish\nbad/lang\n")
    with pytest.raises(UsageError, match=r"langs.txt:5: 'bad/lang' is not a language code"):
        read_langs_file(f)
    f.write_text("fin_Latn\nswe_Latn\nfin_Latn\n")
    with pytest.raises(UsageError, match="given twice: fin_Latn"):
        languages(ns(langs_file=f), None)
    with pytest.raises(UsageError, match="--dataset names one language"):
        languages(ns(lang="a_Latn,b_Latn", dataset="x"), None)
    for lang in ("zho_Hans", "eng_Latn"):
        (tmp_path / "root" / lang).mkdir(parents=True)
    (tmp_path / "root" / "README").write_text("")
    assert languages(ns(lang="all", local_root=tmp_path / "root"), None) == ["eng_Latn", "zho_Hans"]


def test_bad_langs_file_is_one_line_not_a_traceback(tmp_path, capsys):
    f = tmp_path / "langs.txt"
    f.write_text("fin_Latn\nfin Latn\n")
    assert cli.main(["--langs-file", str(f), "--local-root", str(tmp_path), "--license", LICENSE, "--dry-run",
                     "--executor", "local"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"hplt-shard: {f}:2: 'fin Latn' is not a language code (e.g. fin_Latn)"


# ---- end to end ---------------------------------------------------------------------------------

def test_dry_run_has_a_row_per_language_totals_and_the_separate_runs(tmp_path, capsys):
    root = make_langs(tmp_path, {"fin_Latn": (120, ("10_1", "9_1", "9_2")), "est_Latn": (5, ("10_1",))})
    assert cli.main(["fin_Latn,est_Latn", "--local-root", str(root), "--license", LICENSE, "--dry-run",
                     "--executor", "local", "--shard-rows", "50", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    rows = {l.split()[0]: l.split() for l in out.splitlines() if l.split() and l.split()[0] in ("fin_Latn", "est_Latn", "total")}
    assert rows["fin_Latn"][1] == "3" and rows["fin_Latn"][4:7] == ["120", "120", "3"]
    assert rows["est_Latn"][1] == "1" and rows["est_Latn"][4:6] == ["5", "5"]
    assert rows["total"][1] == "4" and rows["total"][4] == "125"
    assert "separate runs would queue" in out and "queued at once:" in out
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_twenty_languages_in_one_run_equal_write_shards_and_their_single_runs(tmp_path, capsys):
    sizes = {f"l{i:02d}_Latn": (3 + 4 * i, ("10_1", "9_1") if i % 3 == 0 else ("9_1",)) for i in range(20)}
    root = make_langs(tmp_path, sizes, text_bytes=200)
    langs_file = tmp_path / "langs.txt"
    langs_file.write_text("".join(f"{l}\n" for l in sizes))
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert cli.main(["--langs-file", str(langs_file), "--corpus", "v4", "--local-root", str(root), "--out", str(out),
                     "--run-dir", str(run_dir), "--executor", "local", "--license", LICENSE, "--jobs", "2",
                     "--shard-rows", "20"]) == 0
    m = multi.load(run_dir)
    assert m.langs == tuple(sizes) and m.size("partition") >= 20 and m.size("plan") == 1 * 20
    assert sorted(p.name for p in out.iterdir()) == sorted(sizes)
    for lang, (n, _) in sizes.items():
        expected = tmp_path / "expected" / lang
        expected_for(root, lang, expected, run_dir / lang, shard_rows=20)
        assert tree_bytes(out / lang) == tree_bytes(expected), lang
        assert json.loads((run_dir / lang / "validation.json").read_text())["rows"] == n
    # the same options as a run of its own give the same bytes (config hash included)
    one = "l07_Latn"
    assert multi_cli(root, one, tmp_path / "single", tmp_path / "run-single", "--shard-rows", "20") == 0
    assert tree_bytes(tmp_path / "single") == tree_bytes(out / one)
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 0
    status = capsys.readouterr().out
    assert sum(1 for l in status.splitlines() if l.endswith("  done")) == 20 and "languages done 20/20" in status


@pytest.mark.slow
def test_a_failed_language_does_not_stop_the_others_and_resume_finishes_it(tmp_path, monkeypatch, capsys):
    root = make_langs(tmp_path, {"fin_Latn": (80, ("10_1", "9_1")), "swe_Latn": (30, ("9_1",)), "est_Latn": (4, ("9_1",))})
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:kill:swe_Latn")
    assert multi_cli(root, "fin_Latn,swe_Latn,est_Latn", out, run_dir, "--shard-rows", "25") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    err = capsys.readouterr().err
    assert "1 language(s) failed: swe_Latn" in err
    assert (out / "fin_Latn" / "_MANIFEST.json").exists() and (out / "est_Latn" / "_MANIFEST.json").exists()
    assert not (out / "swe_Latn").exists()
    assert cli.main(["--status", str(run_dir)]) == 1
    status = capsys.readouterr().out
    assert "failed (write)" in status and "FAILED swe_Latn write task 0" in status and "languages done 2/3" in status
    assert cli.main(["--status", str(run_dir / "swe_Latn")]) == 1
    assert "FAILED write task 0" in capsys.readouterr().out
    before = {l: tree_bytes(out / l) for l in ("fin_Latn", "est_Latn")}
    assert cli.main(["--resume", str(run_dir)]) == 0
    resumed = capsys.readouterr().out
    assert "fin_Latn: done" in resumed and "1 of 3 languages unfinished (swe_Latn)" in resumed
    assert {l: tree_bytes(out / l) for l in before} == before
    assert multi_cli(root, "swe_Latn", tmp_path / "single", tmp_path / "run-single", "--shard-rows", "25") == 0
    assert tree_bytes(out / "swe_Latn") == tree_bytes(tmp_path / "single")


def test_one_chain_for_all_languages_fits_max_tasks_with_afterany(tmp_path, fake_slurm, capsys):
    """Fake sbatch (argv only): four arrays for three languages, every stage after the first afterany."""
    root = make_langs(tmp_path, {"fin_Latn": (200, ("10_1", "9_1", "9_2", "8_1")), "swe_Latn": (40, ("9_1",)),
                                 "est_Latn": (3, ("9_1",))})
    conf = tmp_path / "t.conf"
    conf.write_text("PRESET=local\nMAX_TASKS=12\n")
    run_dir = tmp_path / "run"
    assert cli.main(["fin_Latn,swe_Latn,est_Latn", "--local-root", str(root), "--out", str(tmp_path / "out"),
                     "--run-dir", str(run_dir), "--license", LICENSE, "--conf", str(conf), "--shard-rows", "20"]) == 0
    sb = fake_slurm("sbatch")
    names = [a[a.index("--job-name") + 1] for a in sb]
    assert names == [f"{c}{job_tag(run_dir.resolve(), 'mul')}" for c in "PLWF"]
    m = multi.load(run_dir)
    arrays = [a[a.index("--array") + 1].split("%")[0] for a in sb]
    assert arrays == [f"0-{m.size('partition') - 1}", "0", f"0-{m.size('write') - 1}", "0"]
    assert m.size("partition") + m.size("write") + 2 <= 12  # MAX_TASKS, as one run
    assert [a[a.index("--dependency") + 1] for a in sb[1:]] == ["afterany:1001", "afterany:1002", "afterany:1003"]
    assert all(str(run_dir) in a for a in sb)  # every job gets RUNDIR; the index picks (language, task)
    # the biggest language got the most tasks, every language at least one of each
    blocks = {s: {b.lang: b.count for b in m.blocks[s]} for s in ("partition", "write")}
    assert min(blocks["partition"].values()) == 1 and blocks["partition"]["fin_Latn"] > blocks["partition"]["est_Latn"]
    # each language's run.json has the chain in its own task numbers, for --status RUNDIR/<LANG>
    est = json.loads((run_dir / "est_Latn" / "run.json").read_text())["submissions"][-1]
    w = next(j for j in est["jobs"] if j["stage"] == "write")
    assert 0 - w["offset"] == m.global_index("write", "est_Latn", 0) and w["log_dir"] == str(run_dir / "logs" / "write")


def test_each_array_gets_the_most_any_language_needs():
    from types import SimpleNamespace

    from shard_pipeline.submit.multi_start import stage_resources
    from shard_pipeline.units import slurm_minutes

    from shard_pipeline.run.runconfig import StageResources as R

    from shard_pipeline.run.runconfig import Execution

    def cfg(mem_w, t_w, cpus):
        return SimpleNamespace(execution=Execution(
            executor="slurm", out="/o", partition_tasks=1, write_tasks=1, buckets=1, spill_bytes=1, python="p",
            resources={"partition": R("4G", "00:10:00"), "plan": R("4G", "00:30:00"), "write": R(mem_w, t_w),
                       "finalize": R("4G", "00:30:00", cpus)}))

    cfgs = {"a": cfg("9G", "32:30:00", 16), "b": cfg("4G", "00:10:00", 1), "c": cfg("700M", "1-12:00:00", 1)}
    assert stage_resources(cfgs, "write", 40, False) == R("9G", "1-12:00:00", 1)
    assert stage_resources(cfgs, "finalize", 3, False) == R("4G", "00:36:00", 16)  # 2 minutes more per language
    assert stage_resources(cfgs, "plan", 3, True).time == "00:30:00"  # --time: exactly that
    assert slurm_minutes("1-02:00:00") == 1560 and slurm_minutes("45") == 45 and slurm_minutes("10:30") == 10.5
