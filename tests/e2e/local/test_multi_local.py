"""Several languages in one run (#15), on the local executor: the unit table, the budget share, the
command line, and 20 small languages whose outputs equal write_shards and their single runs byte for byte."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from shard_pipeline.contract.beside import ROOT_MANIFEST_NAME
from shard_pipeline.contract.root_manifest import read_root_manifest
from shard_pipeline.contract.shard import write_shards
from shard_pipeline.errors import UsageError
from shard_pipeline.input.corpus import find_shards
from shard_pipeline.input.reader import ReadStats, iter_records, to_doc
from shard_pipeline.input.synth import generate_corpus
from shard_pipeline.run import unit_table
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.submit import cli
from shard_pipeline.submit.executors.slurm import job_tag
from shard_pipeline.submit.languages import languages, read_langs_file, share_budget, smallest_first, out_is_root
from tests.pipeline_util import lang_dir, LICENSE, config_sha, tree_bytes


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


def test_an_array_index_runs_c_global_units_of_any_language(tmp_path):
    m = unit_table.table_of(tmp_path, [("a", 3, 2), ("b", 1, 4), ("c", 2, 1)], cpus=3)
    assert m.units_per_task("write") == 3 and m.units_per_task("plan") == 1
    assert [m.units_of("write", i) for i in range(3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [m.locate("write", g)[0] for g in m.units_of("write", 0)] == ["a", "a", "b"]  # one task, two languages
    assert m.array_indices("write", [2, 3, 6]) == [0, 1, 2] and m.array_indices("plan", [0, 2]) == [0]
    RunDir(tmp_path).languages_json.write_text(json.dumps(m.to_json()))
    assert unit_table.load(tmp_path) == m
    small = unit_table.table_of(tmp_path, [("a", 1, 1)], cpus=4)  # never more cores than units
    assert (small.units_per_task("partition"), small.units_per_task("write")) == (1, 1)
    doc = m.to_json()
    del doc["cpus"]  # languages.json of a run made before C applied to several languages
    RunDir(tmp_path).languages_json.write_text(json.dumps(doc))
    assert unit_table.load(tmp_path).units_per_task("write") == 1


def test_unit_table_maps_every_global_index_to_one_language_task(tmp_path):
    m = unit_table.table_of(tmp_path, [("a", 3, 2), ("b", 1, 4), ("c", 2, 1)])
    assert m.size("partition") == 6 and m.size("write") == 7 and m.size("plan") == 3
    seen = [m.locate("write", g) for g in range(7)]
    assert seen == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("b", 3), ("c", 0)]
    assert all(m.global_index("write", l, t) == g for g, (l, t) in enumerate(seen))
    RunDir(tmp_path).languages_json.write_text(json.dumps(m.to_json()))
    assert unit_table.resolve(tmp_path, "partition", 4) == (tmp_path / "c", 0)
    with pytest.raises(IndexError):
        unit_table.resolve(tmp_path, "partition", 6)


def ns(**kw) -> argparse.Namespace:
    base = dict(lang=None, langs_file=None, dataset=None, local_root=None, corpus="v4")
    return argparse.Namespace(**{**base, **kw})


def test_language_lists_from_the_command_line_a_file_and_all(tmp_path):
    assert out_is_root(ns(lang="a_Latn,b_Latn")) and out_is_root(ns(lang="all")) and not out_is_root(ns(lang="a_Latn"))
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


def test_the_dry_run_projects_each_languages_landing_and_the_last(tmp_path, capsys):
    root = make_langs(tmp_path, {"fin_Latn": (120, ("10_1", "9_1", "9_2")), "est_Latn": (5, ("10_1",))})
    assert cli.main(["fin_Latn,est_Latn", "--local-root", str(root), "--license", LICENSE, "--dry-run",
                     "--executor", "local", "--shard-rows", "50", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "lands" in out.splitlines()[1]  # a column per language
    lands = {l.split()[0]: l.split()[-1] for l in out.splitlines() if l.split() and l.split()[0] in ("fin_Latn", "est_Latn")}
    assert all(re.fullmatch(r"\d+h\d\dm\d\ds", v) for v in lands.values()), lands
    last = re.search(r"projected wall +(\S+) to the last landing", out)
    assert last and last.group(1) == max(lands.values())  # same format, so the largest string is the latest


@pytest.mark.parametrize("where", ["out inside the input root", "run dir inside a language folder",
                                   "run dir inside out"])
def test_several_languages_get_every_path_guard_of_one(tmp_path, capsys, where):
    """A run of several languages refuses what a run of one refuses, before anything is written (--dry-run too)."""
    root = make_langs(tmp_path, {"fin_Latn": (20, ("10_1",)), "est_Latn": (5, ("10_1",))})
    out, run_dir = {"out inside the input root": (root / "out", tmp_path / "run"),
                    "run dir inside a language folder": (tmp_path / "out", root / "fin_Latn" / "run"),
                    "run dir inside out": (tmp_path / "out", tmp_path / "out" / "run")}[where]
    for extra in (("--dry-run",), ()):
        assert multi_cli(root, "fin_Latn,est_Latn", out, run_dir, *extra) == 2
        err = capsys.readouterr().err
        assert "lies inside" in err and "they must be apart" in err, err
        assert not run_dir.exists() and not (out / "fin_Latn").exists()
    # the same paths with one language are refused the same way
    assert multi_cli(root, "fin_Latn", out, run_dir,
                     "--dry-run") == 2
    assert "lies inside" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_of_one_language_is_the_one_language_case_of_the_unit_table(tmp_path, capsys):
    """A run of one language is a run of several with one element: RUNDIR/languages.json and RUNDIR/<LANG>,
    C in languages.json; the executors, the task entry and --status all go through it. Only OUT differs:
    one LANG writes OUT itself."""
    root = make_langs(tmp_path, {"fin_Latn": (60, ("10_1", "9_1", "9_2"))})
    run_dir, out = tmp_path / "run", tmp_path / "out"
    assert multi_cli(root, "fin_Latn", out, run_dir, "--shard-rows", "20", "--cpus-per-task", "2",
                     "--partition-tasks", "3", "--write-tasks", "3") == 0
    t = unit_table.load(run_dir)
    lang = lang_dir(run_dir, "fin_Latn")
    cfg = json.loads((lang / "config.json").read_text())["execution"]
    assert t.langs == ("fin_Latn",) and t.lang_dir("fin_Latn") == lang
    assert (t.size("partition"), t.size("write"), t.size("plan")) == (cfg["partition_tasks"], cfg["write_tasks"], 1)
    assert t.units_per_task("partition") == 2 and cfg["resources"]["partition"]["cpus"] == 1
    assert [t.locate("write", g) for g in range(t.size("write"))] == [("fin_Latn", g) for g in range(t.size("write"))]
    assert t.array_indices("partition", [0, 2]) == [0, 1] and not t.is_array("plan")
    assert (lang / "DONE").exists() and (run_dir / "languages.json").exists() and not (run_dir / "config.json").exists()
    assert (out / "_MANIFEST.json").exists() and not (out / "fin_Latn").exists()


@pytest.mark.slow
def test_twenty_languages_with_three_cores_per_task_equal_write_shards_and_their_single_runs(tmp_path, capsys):
    """C = 3: every array index runs three global units at once, of one or two languages."""
    sizes = {f"l{i:02d}_Latn": (3 + 4 * i, ("10_1", "9_1") if i % 3 == 0 else ("9_1",)) for i in range(20)}
    root = make_langs(tmp_path, sizes, text_bytes=200)
    langs_file = tmp_path / "langs.txt"
    langs_file.write_text("".join(f"{l}\n" for l in sizes))
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert cli.main(["--langs-file", str(langs_file), "--corpus", "v4", "--local-root", str(root), "--out", str(out),
                     "--run-dir", str(run_dir), "--executor", "local", "--license", LICENSE, "--jobs", "3",
                     "--shard-rows", "20", "--cpus-per-task", "3"]) == 0
    m = unit_table.load(run_dir)
    input_bytes = {l: sum(f.stat().st_size for f in (root / l).rglob("*.zst")) for l in sizes}
    assert m.langs == tuple(smallest_first(input_bytes)) != tuple(sizes)  # every array: the smallest language first
    assert m.size("partition") >= 20 and m.size("plan") == 1 * 20
    assert m.units_per_task("write") == 3 and {m.locate("write", g)[0] for g in m.units_of("write", 0)} != set()
    # every language landed when its last write unit ended: the finalize job found each one done
    fin_log = (run_dir / "logs" / "finalize" / "local_0.log").read_text()
    assert fin_log.count("landed before (its last write unit finalized it), skipped") == 20
    assert sorted(p.name for p in out.iterdir()) == sorted([*sizes, ROOT_MANIFEST_NAME])  # nothing else in ROOT
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
    assert sum(1 for l in status.splitlines() if "  landed 20" in l) == 20 and "languages landed 20/20" in status


@pytest.mark.slow
@pytest.mark.parametrize("cpus", [1, 2])
def test_languages_of_very_different_sizes_with_c_cores_equal_their_single_runs(tmp_path, cpus):
    sizes = {"fin_Latn": (90, ("10_1", "9_1", "9_2")), "swe_Latn": (25, ("9_1",)), "est_Latn": (3, ("9_1",))}
    root = make_langs(tmp_path, sizes)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    assert multi_cli(root, ",".join(sizes), out, run_dir, "--shard-rows", "15", "--cpus-per-task", str(cpus)) == 0
    m = unit_table.load(run_dir)
    assert m.units_per_task("write") == min(cpus, m.size("write"))
    for lang in sizes:
        expected = tmp_path / "expected" / lang
        expected_for(root, lang, expected, run_dir / lang, shard_rows=15)
        assert tree_bytes(out / lang) == tree_bytes(expected), lang


@pytest.mark.slow
def test_a_small_language_lands_while_a_large_one_is_still_writing(tmp_path, capsys):
    """fin_Latn's write unit 0 hangs (fault aimed at it): est_Latn's OUT is in place, --status says so, and
    after the run is stopped --resume finishes fin_Latn with its single run's bytes."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = make_langs(tmp_path, {"fin_Latn": (60, ("10_1", "9_1")), "est_Latn": (4, ("9_1",))})
    out, run_dir = tmp_path / "out", tmp_path / "run"
    argv = [sys.executable, "hplt-shard", "fin_Latn,est_Latn", "--corpus", "v4", "--local-root", str(root),
            "--out", str(out), "--run-dir", str(run_dir), "--executor", "local", "--license", LICENSE,
            "--jobs", "2", "--shard-rows", "20"]
    env = {**os.environ, "HPLT_SHARD_FAULT": "write-start:0:hang:fin_Latn"}
    proc = subprocess.Popen(argv, cwd=Path(__file__).resolve().parents[3], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "est_Latn" / "DONE").exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "est_Latn did not land while fin_Latn's write hung"
            time.sleep(0.3)
        assert (out / "est_Latn" / "_MANIFEST.json").exists()
        assert not (out / "fin_Latn").exists() and not (run_dir / "fin_Latn" / "DONE").exists()
        assert proc.poll() is None  # the run is still going: fin_Latn's write unit 0 hangs
        assert_root_holds_only_landed(out, ["est_Latn"])
        assert (tmp_path / "out.hplt-shard" / "fin_Latn.tmp").is_dir()  # fin_Latn is staged beside ROOT
        units = json.loads((run_dir / "languages.json").read_text())["units"]
        assert [u[0] for u in units["partition"]] == ["est_Latn", "fin_Latn"]  # the small language first
        capsys.readouterr()
        assert cli.main(["--status", str(run_dir)]) == 3
        status = capsys.readouterr().out
        rows = {l.split()[0]: l for l in status.splitlines() if l.split() and l.split()[0] in ("fin_Latn", "est_Latn")}
        assert rows["est_Latn"].split("  ")[-1].startswith("landed 20") and rows["fin_Latn"].endswith("  running")
        assert "languages landed 1/2, 1 running" in status and "state: running" in status
        assert cli.main(["--status", str(run_dir / "fin_Latn")]) == 3  # one language's own view: running too
        assert "state: running" in capsys.readouterr().out
    finally:
        proc.send_signal(signal.SIGTERM)  # the local executor stops its units, as on Ctrl-C
        said = proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + signal.SIGTERM
    assert f"est_Latn: landed: {out / 'est_Latn'} holds this run's output" in said  # the stop names what landed
    assert f"fin_Latn: {out / 'fin_Latn'} is as it was before this run" in said
    landed = tree_bytes(out / "est_Latn")
    capsys.readouterr()
    assert cli.main(["--status", str(run_dir)]) == 1
    assert "fin_Latn" in capsys.readouterr().out.split("state: interrupted, unfinished (")[1]
    assert cli.main(["--resume", str(run_dir)]) == 0
    assert tree_bytes(out / "est_Latn") == landed
    expected = tmp_path / "expected"
    expected_for(root, "fin_Latn", expected, run_dir / "fin_Latn", shard_rows=20)
    assert tree_bytes(out / "fin_Latn") == tree_bytes(expected)
    assert_root_holds_only_landed(out, ["est_Latn", "fin_Latn"])
    assert not (tmp_path / "out.hplt-shard").exists()  # nothing stays beside ROOT after the run


def assert_root_holds_only_landed(root: Path, landed: list[str]) -> None:
    """ROOT holds the landed languages and its root manifest, nothing else: what a reader globs or opens is data."""
    import glob

    import pyarrow.parquet as pq

    assert sorted(p.name for p in root.iterdir()) == sorted([*landed, ROOT_MANIFEST_NAME])
    files = glob.glob(str(root / "*" / "*.parquet"))
    assert files and {Path(f).parent.name for f in files} == set(landed)
    rows = sum(json.loads((root / l / "_MANIFEST.json").read_text())["rows"] for l in landed)
    assert pq.read_table(root).num_rows == rows
    assert sorted(read_root_manifest(root).landed) == sorted(landed)


@pytest.mark.slow
def test_a_finalize_that_fails_in_the_last_write_unit_is_left_to_the_finalize_job(tmp_path, monkeypatch, capsys):
    root = make_langs(tmp_path, {"fin_Latn": (40, ("10_1", "9_1")), "est_Latn": (4, ("9_1",))})
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-before-swap::enospc:est_Latn")
    assert multi_cli(root, "fin_Latn,est_Latn", out, run_dir, "--shard-rows", "20") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    est_write = (run_dir / "est_Latn" / "logs" / "write" / "local_0.log").read_text()
    assert "WARNING: est_Latn: finalize after its last write unit failed (OSError" in est_write
    assert "the finalize job of this run tries it again" in est_write
    assert "# est_Latn write task 0 done" in est_write  # the write itself succeeded: its receipt holds
    fin_log = (run_dir / "logs" / "finalize" / "local_0.log").read_text()
    assert "fin_Latn landed before" in fin_log and "finalize failed for est_Latn" in fin_log
    assert f"--resume {run_dir}" in fin_log
    assert (out / "fin_Latn" / "_MANIFEST.json").exists() and not (out / "est_Latn").exists()
    assert "est_Latn" in capsys.readouterr().err
    assert cli.main(["--resume", str(run_dir)]) == 0
    expected = tmp_path / "expected"
    expected_for(root, "est_Latn", expected, run_dir / "est_Latn", shard_rows=20)
    assert tree_bytes(out / "est_Latn") == tree_bytes(expected)


@pytest.mark.slow
def test_a_failed_language_does_not_stop_the_others_and_resume_finishes_it(tmp_path, monkeypatch, capsys):
    root = make_langs(tmp_path, {"fin_Latn": (80, ("10_1", "9_1")), "swe_Latn": (30, ("9_1",)), "est_Latn": (4, ("9_1",))})
    out, run_dir = tmp_path / "out", tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:kill:swe_Latn")
    assert multi_cli(root, "fin_Latn,swe_Latn,est_Latn", out, run_dir, "--shard-rows", "25") == 1
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    err = capsys.readouterr().err
    assert "1 language failed: swe_Latn" in err
    assert (out / "fin_Latn" / "_MANIFEST.json").exists() and (out / "est_Latn" / "_MANIFEST.json").exists()
    assert not (out / "swe_Latn").exists()
    assert cli.main(["--status", str(run_dir)]) == 1
    status = capsys.readouterr().out
    assert "failed (write)" in status and "FAILED swe_Latn write task 0" in status and "languages landed 2/3, 1 failed" in status
    assert "TOUCHED" not in status
    spill = RunDir(run_dir / "swe_Latn").spill_file(0)
    os.chmod(spill, spill.stat().st_mode)  # a chmod -R g+w of the shared run dir: the ctime changes, not a byte
    assert cli.main(["--status", str(run_dir)]) == 1
    status = capsys.readouterr().out
    assert "TOUCHED swe_Latn partition 1 task (0): " in status and "FAILED swe_Latn partition" not in status, status
    assert cli.main(["--status", str(run_dir / "swe_Latn")]) == 1
    assert "FAILED write task 0" in capsys.readouterr().out
    before = {l: tree_bytes(out / l) for l in ("fin_Latn", "est_Latn")}
    # the language's own run dir, as its --status names it: the resume is the whole run's (one chain, never two)
    assert cli.main(["--resume", str(run_dir / "swe_Latn")]) == 0
    resumed, note = capsys.readouterr()
    assert f"{run_dir / 'swe_Latn'} is swe_Latn of the run {run_dir}: resuming that run" in note
    assert "fin_Latn: done" in resumed and "1 of 3 languages unfinished (swe_Latn)" in resumed
    assert {l: tree_bytes(out / l) for l in before} == before
    assert multi_cli(root, "swe_Latn", tmp_path / "single", tmp_path / "run-single", "--shard-rows", "25") == 0
    assert tree_bytes(out / "swe_Latn") == tree_bytes(tmp_path / "single")
    capsys.readouterr()
    shutil.rmtree(out / "est_Latn")  # removed after the run: a resume of the done run says so, per language
    assert cli.main(["--resume", str(run_dir)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"{run_dir}: already done; output at {out}\n"), said
    assert f"  est_Latn: done; but {out / 'est_Latn'} holds no readable _MANIFEST.json now" in said
    assert "fin_Latn" not in said, said  # unchanged languages are not listed
    assert cli.main(["--status", str(run_dir)]) == 0  # --status says the same, per language
    said = capsys.readouterr().out
    assert f"\nest_Latn: done; but {out / 'est_Latn'} holds no readable _MANIFEST.json now" in said, said
    assert "fin_Latn: done" not in said and "\nstate: done" in said, said


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
    m = unit_table.load(run_dir)
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


def test_a_refused_chain_of_several_languages_is_cancelled_recorded_and_named(tmp_path, fake_slurm, monkeypatch,
                                                                             capsys):
    """sbatch refuses the write array (the cap met midway): what was queued is cancelled, run.json keeps the
    refusal, and --status of the run of several languages says so with the --resume step, as for one."""
    root = make_langs(tmp_path, {"fin_Latn": (60, ("10_1", "9_1")), "est_Latn": (3, ("9_1",))})
    conf = tmp_path / "t.conf"
    conf.write_text("PRESET=local\nMAX_TASKS=12\n")
    run_dir = tmp_path / "run"
    monkeypatch.setenv("FAKE_SBATCH_REFUSE_AT", "3")
    assert cli.main(["fin_Latn,est_Latn", "--local-root", str(root), "--out", str(tmp_path / "out"),
                     "--run-dir", str(run_dir), "--license", LICENSE, "--conf", str(conf)]) == 2
    assert "AssocMaxSubmitJobLimit" in capsys.readouterr().err
    assert fake_slurm("scancel") == [["1001", "1002"]]  # partition and plan, queued before the refusal
    record = json.loads((run_dir / "run.json").read_text())
    assert record["submissions"] == [] and record["refused_submissions"][-1]["cancelled"] == ["1001", "1002"]
    monkeypatch.setenv("FAKE_QUEUED", "0")
    assert cli.main(["--status", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "state: not queued: sbatch refused the last submission" in out and f"--resume {run_dir}" in out, out


def test_each_array_gets_the_most_any_language_needs():
    from types import SimpleNamespace

    from shard_pipeline.submit.layout import stage_resources
    from shard_pipeline.units import slurm_minutes

    from shard_pipeline.run.runconfig import StageResources as R

    from shard_pipeline.run.runconfig import Execution

    def cfg(mem_w, t_w, cpus):
        return SimpleNamespace(execution=Execution(
            executor="slurm", out="/o", partition_tasks=1, write_tasks=1, buckets=1, spill_bytes=1, python="p",
            resources={"partition": R("4G", "00:10:00"), "plan": R("4G", "00:30:00"), "write": R(mem_w, t_w),
                       "finalize": R("4G", "00:30:00", cpus)}))

    cfgs = {"a": cfg("9G", "32:30:00", 16), "b": cfg("4G", "00:10:00", 1), "c": cfg("700M", "1-12:00:00", 1)}
    m = unit_table.table_of(Path("/r"), [("a", 1, 20), ("b", 1, 10), ("c", 1, 10)])
    assert stage_resources(m, cfgs, "write", 40, False) == R("9G", "1-12:00:00", 1)
    assert stage_resources(m, cfgs, "finalize", 3, False) == R("4G", "00:36:00", 16)  # 2 minutes more per language
    assert stage_resources(m, cfgs, "plan", 3, True).time == "00:30:00"  # --time: exactly that
    # C = 3 units per array task: 3 x the largest unit memory, 3 cores; plan and finalize unchanged
    m3 = unit_table.table_of(Path("/r"), [("a", 1, 20), ("b", 1, 10), ("c", 1, 10)], cpus=3)
    assert stage_resources(m3, cfgs, "write", 40, False) == R("27G", "1-12:00:00", 3)
    assert stage_resources(m3, cfgs, "partition", 3, False) == R("12G", "00:10:00", 3)  # 3 units only: C = 3
    assert stage_resources(m3, cfgs, "finalize", 3, False) == R("4G", "00:36:00", 16)
    assert slurm_minutes("1-02:00:00") == 1560 and slurm_minutes("45") == 45 and slurm_minutes("10:30") == 10.5


def test_the_chains_array_indices_read_in_each_languages_task_numbers(tmp_path):
    """--status of a language looks squeue up as `<job>_<task - offset>`; with C = 2 global unit g of
    array index g // 2 must answer it, and a key of the raw queue must never answer for another unit."""
    m = unit_table.table_of(tmp_path, [("a", 3, 3), ("b", 1, 2)], cpus=2)  # write units: a 0-2, b 3-4
    jobs_b = {"write": [{"job_id": "7", "offset": 0 - m.base("write", "b")}]}  # as record_submission translates
    queue = {"7_0": "RUNNING", "7_1": "PENDING", "9_0": "RUNNING"}  # array index 1 = units 2 (a) and 3 (b)
    q = unit_table.language_queue(m, "b", jobs_b, queue)
    look = lambda t: q.get(f"7_{t - jobs_b['write'][0]['offset']}")  # noqa: E731  status.stage_statuses' key
    assert (look(0), look(1)) == ("PENDING", None)  # b's unit 0 is global 3 (index 1), unit 1 global 4 (index 2)
    assert q["9_0"] == "RUNNING" and "7_0" not in q and "7_1" not in q
    one = unit_table.table_of(tmp_path, [("a", 3, 3), ("b", 1, 2)])
    assert unit_table.language_queue(one, "b", jobs_b, queue) == queue  # C = 1: offsets already match


def test_languages_land_by_their_own_write_in_the_projection():
    from shard_pipeline.submit.layout import lay_out_jobs
    from shard_pipeline.submit.projection import landing_seconds, project

    lays = {l: lay_out_jobs([n * 16_400_000_000] if n else [10**9], {}, shard_rows=1_000_000, task_budget=40,
                            worker_mem="4G", cpus=4) for l, n in (("big", 40), ("small", 0))}
    lands = landing_seconds(lays, cpus=4)
    assert lands["small"] < lands["big"]
    part = max(s.seconds for lay in lays.values() for s in project(lay) if s.stage == "partition")
    assert lands["small"] > part  # every language waits for the slowest partition and the plan


@pytest.mark.slow  # runs the pipeline
def test_status_of_several_languages_whose_logs_this_user_may_not_read_shows_every_row(tmp_path, monkeypatch, capsys):
    """A colleague's run under `umask 077`: a row per language from the receipts, and no UNREAD line when every task
    is done (a done task's log is never read)."""
    root = make_langs(tmp_path, {"fin_Latn": (30, ("9_1",)), "swe_Latn": (20, ("9_1",))})
    run_dir = tmp_path / "run"
    assert multi_cli(root, "fin_Latn,swe_Latn", tmp_path / "out", run_dir, "--shard-rows", "10") == 0
    logs = sorted(p for p in run_dir.rglob("*.log") if p.is_file())
    assert logs
    capsys.readouterr()
    from tests.unit.common.test_access import hide

    hide(monkeypatch, lambda p: p in logs)  # every log folder of mode 700
    assert cli.main(["--status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "languages landed 2/2" in out and out.rstrip().endswith("state: done")
    # every task is done: its state from the receipts, its figures from its outcome record, no log is read
    assert not [l for l in out.splitlines() if l.startswith("UNREAD ")]
