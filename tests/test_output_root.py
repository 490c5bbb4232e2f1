"""`--verify ROOT` and `--publish ROOT DEST` of a multi-language output root (#20 "The whole output root").

The fast tests build language outputs with the contract writer (write_shards) and start no process;
the end-to-end ones (marked slow) verify and publish the root of a real three-language local run,
to a local folder and to `rclone serve webdav` on 127.0.0.1.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shard_pipeline.contract.root import is_root, scan
from shard_pipeline.contract.verify import main as verify_main
from shard_pipeline.contract.verify import verify_output
from shard_pipeline.contract.verify_root import against_root_manifest
from shard_pipeline.contract.beside import ROOT_MANIFEST_NAME, root_work_folder
from shard_pipeline.run.claim import claim_path
from shard_pipeline.submit import cli
from shard_pipeline.submit.publish import PUBLISHED_NAME, SUMS_NAME
from shard_pipeline.submit.publish_root import sub_dest
from tests.pipeline_util import tree_bytes
from tests.test_multi_local import make_langs, multi_cli
from tests.test_publish import RCLONE, WebDav, needs_rclone, published_tree
from tests.test_publish import rclone_config  # noqa: F401  (autouse: an empty rclone config of the test's own)
from tests.test_verify import make_output

LANGS = ("est_Latn", "fin_Latn", "swe_Latn")


def small_root(tmp_path: Path, langs=("est_Latn", "fin_Latn")) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    for lang in langs:
        make_output(root, lang)
        (root / f"{lang}.hplt-shard-claim").write_text("/somewhere/run\n")  # a run's bookkeeping: silent
        (root / f"{lang}.hplt-shard-publish").write_text("")
    return root


def verify(path: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    code = cli.main(["--verify", str(path), *extra])
    cap = capsys.readouterr()
    return code, (cap.out + cap.err).splitlines()


# ---------------------------------------------------------------- what a root is (fast)


def test_a_root_is_a_folder_without_manifest_holding_language_outputs(tmp_path):
    root = small_root(tmp_path)
    (root / "notes.txt").write_text("x")
    (root / "misc").mkdir()
    (root / "link").symlink_to(root / "est_Latn")  # a link to an output is not a language output
    (root / "deu_Latn.tmp").mkdir()
    (root / "deu_Latn.tmp" / ".hplt-shard-tmp").write_text("/runs/r1\n")
    (root / "fin_Latn.tmp").mkdir()
    (root / "fin_Latn.tmp" / ".hplt-shard-tmp").write_text("/runs/r2\n")
    e = scan(root)
    assert is_root(root) and e.languages == ("est_Latn", "fin_Latn")
    assert [(s.lang, s.owner) for s in e.unlanded] == [("deu_Latn", "/runs/r1")]
    assert [(s.lang, s.owner) for s in e.replacing] == [("fin_Latn", "/runs/r2")]
    assert e.other_folders == ("link (a symbolic link)", "misc/") and e.other_files == ("notes.txt",)
    assert not is_root(root / "est_Latn") and not is_root(tmp_path / "nowhere")
    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    (plain / "sub" / "x.parquet").write_text("")
    assert not is_root(plain)


def test_sub_dest_joins_as_rclone_reads_it():
    assert sub_dest("remote:bucket/prefix", "fin_Latn") == "remote:bucket/prefix/fin_Latn"
    assert sub_dest("remote:bucket/prefix/", "fin_Latn") == "remote:bucket/prefix/fin_Latn"
    assert sub_dest("remote:", "fin_Latn") == "remote:fin_Latn"
    assert sub_dest("/tmp/pub", "fin_Latn") == "/tmp/pub/fin_Latn"
    assert sub_dest(":webdav,url='http://127.0.0.1:1':pub", "x") == ":webdav,url='http://127.0.0.1:1':pub/x"


# ---------------------------------------------------------------- --verify ROOT (fast)


def test_verify_root_checks_every_language_with_one_summary(tmp_path, capsys):
    root = small_root(tmp_path)
    code, lines = verify(root, capsys)
    assert code == 0, lines
    assert lines[0] == f"{root}: a multi-language root; verifying its 2 language outputs one by one"
    assert lines[1] == "est_Latn: OK: 53 rows in 5 shards verified" and lines[2].startswith("fin_Latn: OK: 53 rows")
    assert lines[-1] == f"OK: 2 languages verified (106 rows in 10 shards) in {root}"
    assert verify_main([str(root), "--shallow"]) == 0 and "(shallow)" in capsys.readouterr().out


def test_verify_root_fails_for_a_broken_language_an_unlanded_one_and_a_stray_folder(tmp_path, capsys):
    root = small_root(tmp_path, LANGS)
    with open(root / "fin_Latn" / "shard-00001-of-00005.parquet", "ab") as f:
        f.write(b"x")
    code, lines = verify(root, capsys)
    assert code == 1
    assert "fin_Latn: FAILED: 3 problems:" in lines and lines.count("est_Latn: OK: 53 rows in 5 shards verified") == 1
    assert any(l.startswith("  fin_Latn/shard-00001-of-00005.parquet: 13615 bytes") for l in lines)
    assert lines[-1] == (f"FAILED: 2 of 3 languages verified; 1 failed: fin_Latn (./hplt-shard --verify {root}/LANG "
                         "lists every problem)")
    # a language whose output is not there but whose run is writing it, and a folder without a manifest
    shutil.rmtree(root / "fin_Latn")
    (root / "fin_Latn.tmp").mkdir()
    (root / "fin_Latn.tmp" / ".hplt-shard-tmp").write_text("/runs/r1\n")
    (root / "deu_Latn").mkdir()
    (root / "deu_Latn" / "shard-00000-of-00001.parquet").write_text("")
    (root / "README").write_text("")
    code, lines = verify(root, capsys)
    assert code == 1
    assert "not landed: fin_Latn.tmp is the unfinished output of run /runs/r1 (./hplt-shard --status /runs/r1)" in lines
    assert "not a language output (no _MANIFEST.json): deu_Latn/" in lines
    assert "not checked (files beside the language outputs): README" in lines
    assert lines[-1].startswith("FAILED: 2 of 2 languages verified; 1 not landed: fin_Latn") and "1 folder " in lines[-1]
    # the files alone are only named: a root with a README verifies
    shutil.rmtree(root / "fin_Latn.tmp")
    shutil.rmtree(root / "deu_Latn")
    assert verify(root, capsys)[0] == 0


def test_verify_root_of_languages_this_user_may_not_read_is_exit_2_as_for_one_output(tmp_path, monkeypatch, capsys):
    """Unreadable is not damaged: a root whose only problem is a colleague's private shards exits 2, names them
    apart, and exits 1 as soon as anything is really wrong."""
    from tests.test_access import deny_reading

    root = small_root(tmp_path, LANGS)
    deny_reading(monkeypatch, root / "fin_Latn" / "shard-00001-of-00005.parquet")
    code, lines = verify(root, capsys)
    assert code == 2, lines
    assert lines[-1] == ("FAILED: 2 of 3 languages verified; 1 not readable by this user, so not checked: fin_Latn "
                         "(the lines above say whose files and the way on)")
    with open(root / "swe_Latn" / "shard-00001-of-00005.parquet", "ab") as f:
        f.write(b"x")
    code, lines = verify(root, capsys)
    assert code == 1 and lines[-1].startswith("FAILED: 1 of 3 languages verified; 1 failed: swe_Latn (")


def test_a_folder_with_no_manifest_and_no_language_output_gets_a_hint(tmp_path, capsys):
    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    (plain / "notes.txt").write_text("x")
    code, lines = verify(plain, capsys)
    verdict = f"FAILED: 1 problem in {plain}; it is not the output its manifest describes"  # last, on stderr
    assert code == 1 and lines == [
        "_MANIFEST.json: missing: OUT holds no manifest and no language outputs (LANG/_MANIFEST.json): it is neither "
        "an output nor a multi-language root; give a run's --out (or ROOT/LANG of a run of several languages)", verdict]
    (plain / "deu_Latn.tmp").mkdir()  # a run of several languages none of which has landed
    (plain / "deu_Latn.tmp" / ".hplt-shard-tmp").write_text("/runs/r1\n")
    assert verify(plain, capsys) == (1, ["_MANIFEST.json: missing: OUT holds no manifest and no language output yet: "
                                         "deu_Latn.tmp is the unfinished output of run /runs/r1 (./hplt-shard --status /runs/r1)",
                                         verdict])
    root = small_root(tmp_path)  # verify_output (the API) checks one output: a root gets told what it is
    [p] = verify_output(root)
    assert p.what.startswith("missing: OUT holds no manifest; it is a multi-language root (2 language outputs: "
                             "est_Latn, fin_Latn): ./hplt-shard --verify OUT checks each")


# ---------------------------------------------------------------- --publish ROOT DEST refusals (fast: no transfer)


@pytest.mark.skipif(RCLONE is None, reason="needs rclone on PATH to get past the first check")
def test_dest_inside_the_root_or_a_language_is_refused_before_anything(tmp_path, capsys):
    root = small_root(tmp_path)
    before = tree_bytes(root)
    for dest in (root / "pub", root / "est_Latn" / "_pub", tmp_path / "x" / ".." / "root" / "pub"):
        assert cli.main(["--publish", str(root), str(dest)]) == 2
        err = capsys.readouterr().err
        assert f"lies inside OUT {root}" in err and "nothing was uploaded" in err
    assert tree_bytes(root) == before and not (root / "pub").exists()


@pytest.mark.skipif(RCLONE is None, reason="needs rclone on PATH to get past the first check")
def test_run_dir_that_holds_no_language_of_the_root_is_refused(tmp_path, capsys):
    root = small_root(tmp_path)
    (tmp_path / "run").mkdir()
    assert cli.main(["--publish", str(root), str(tmp_path / "pub"), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "holds no run directory of a language of" in err and "nothing was uploaded" in err
    assert not (tmp_path / "pub").exists()


def test_rclone_missing_is_one_message_for_the_root(tmp_path, monkeypatch, capsys):
    root = small_root(tmp_path)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert cli.main(["--publish", str(root), str(tmp_path / "pub")]) == 2
    assert "rclone is not on PATH" in capsys.readouterr().err and not (tmp_path / "pub").exists()


# ---------------------------------------------------------------- a real three-language run (slow)


@pytest.fixture(scope="module")
def multi_run(tmp_path_factory) -> tuple[Path, Path]:
    """(ROOT, RUNDIR) of a finished local run of three languages of different sizes."""
    base = tmp_path_factory.mktemp("multi-root")
    corpus = make_langs(base, {"fin_Latn": (60, ("10_1", "9_1")), "swe_Latn": (25, ("9_1",)), "est_Latn": (4, ("9_1",))})
    assert multi_cli(corpus, ",".join(LANGS), base / "out", base / "run", "--shard-rows", "20") == 0
    return base / "out", base / "run"


def copied(multi_run, tmp_path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(multi_run[0], root, symlinks=True)
    return root


@pytest.mark.slow
def test_verify_the_root_of_a_real_run_then_a_damaged_copy(multi_run, tmp_path, capsys):
    code, lines = verify(multi_run[0], capsys)
    assert code == 0, lines
    assert [l.split(":")[0] for l in lines[1:4]] == list(LANGS) and lines[-1].startswith("OK: 3 languages verified (89 rows")
    root = copied(multi_run, tmp_path)
    (root / "swe_Latn" / "_MANIFEST.json").unlink()  # a language whose manifest is gone is never passed over
    code, lines = verify(root, capsys)
    assert code == 1 and "not a language output (no _MANIFEST.json): swe_Latn/" in lines
    assert lines[-1].startswith("FAILED: 2 of 2 languages verified; 1 folder")


@pytest.mark.slow
@needs_rclone
def test_publish_root_to_webdav_language_by_language_recorded_then_again_is_a_success(multi_run, tmp_path, capsys):
    root, run = multi_run
    server = WebDav(tmp_path / "served")
    server.start()
    try:
        assert cli.main(["--publish", str(root), server.dest("pub"), "--run-dir", str(run)]) == 0
        out = capsys.readouterr().out
        for lang in LANGS:
            assert tree_bytes(server.root / "pub" / lang) == published_tree(root / lang), lang
            record = json.loads((run / lang / PUBLISHED_NAME).read_text())["publications"][-1]
            assert record["dest"] == server.dest(f"pub/{lang}") and record["out"] == str(root / lang)
        assert out.splitlines()[-1] == (f"published 3 languages of {root} to {server.dest('pub')}/LANG, each complete "
                                        f"and checked there: {', '.join(LANGS)}")
        assert cli.main(["--publish", str(root), server.dest("pub")]) == 0  # again: checked there, nothing sent
        assert capsys.readouterr().out.count("already published: ") == 3
    finally:
        server.kill()


@pytest.mark.slow
@needs_rclone
def test_one_language_refused_the_others_published_and_the_same_command_finishes(multi_run, tmp_path, capsys):
    root = copied(multi_run, tmp_path)
    dest = tmp_path / "pub"
    (dest / "fin_Latn").mkdir(parents=True)
    (dest / "fin_Latn" / "theirs.txt").write_text("not ours")  # fin's DEST holds another's file: refused
    claim_path(root / "swe_Latn").parent.mkdir(exist_ok=True)  # the claim lives beside ROOT, in its work folder
    claim_path(root / "swe_Latn").write_text(f"{tmp_path / 'live-run'}\n")  # swe held by an unfinished run
    assert cli.main(["--publish", str(root), str(dest)]) == 1
    err = capsys.readouterr().err
    assert f"hplt-shard: not published from {root} to {dest}/LANG: 2 of 3 (published: est_Latn):" in err
    assert "  fin_Latn: refusing to publish to" in err and f"  swe_Latn: {root}/swe_Latn is held by run" in err
    assert "run the same command again" in err.splitlines()[-1]
    assert tree_bytes(dest / "est_Latn") == published_tree(root / "est_Latn")
    assert sorted(p.name for p in (dest / "fin_Latn").iterdir()) == ["theirs.txt"] and not (dest / "swe_Latn").exists()
    # the user does what the messages say; the same command publishes the rest, est_Latn checked, not re-sent
    (dest / "fin_Latn" / "theirs.txt").unlink()
    claim_path(root / "swe_Latn").unlink()
    assert cli.main(["--publish", str(root), str(dest)]) == 0
    assert sorted(p.name for p in root.iterdir()) == sorted([*LANGS, ROOT_MANIFEST_NAME])  # nothing of the publish stays
    assert not root_work_folder(root).exists()
    out = capsys.readouterr().out
    assert out.count("already published: ") == 1 and f"already published: {dest}/est_Latn" in out
    for lang in LANGS:
        assert tree_bytes(dest / lang) == published_tree(root / lang), lang
    assert (dest / "fin_Latn" / SUMS_NAME).exists()


@pytest.mark.slow
@needs_rclone
def test_every_language_refused_is_exit_2_and_an_unlanded_language_fails_the_root(multi_run, tmp_path, capsys):
    root = copied(multi_run, tmp_path)
    dest = tmp_path / "pub"
    for lang in LANGS:
        (dest / lang).mkdir(parents=True)
        (dest / lang / "theirs.txt").write_text("x")
    assert cli.main(["--publish", str(root), str(dest)]) == 2  # nothing was uploaded anywhere
    assert "(none published)" in capsys.readouterr().err
    shutil.rmtree(dest)
    (root / "deu_Latn.tmp").mkdir()
    (root / "deu_Latn.tmp" / ".hplt-shard-tmp").write_text("/runs/r1\n")
    assert cli.main(["--publish", str(root), str(dest)]) == 1
    err = capsys.readouterr().err
    assert "deu_Latn: not landed: deu_Latn.tmp is the unfinished output of run /runs/r1" in err
    assert all(tree_bytes(dest / l) == published_tree(root / l) for l in LANGS) and not (dest / "deu_Latn").exists()


def test_the_run_dir_of_a_language_of_a_root_is_found_under_runs(tmp_path):
    """Without --run-dir, RUNDIR/<LANG> of a run of several languages under runs/ is found, as a single run's is."""
    from shard_pipeline.paths import home
    from shard_pipeline.submit.publish import find_run_dir

    root = small_root(tmp_path)
    out = (root / "est_Latn").resolve()
    m = json.loads((out / "_MANIFEST.json").read_text())
    lang_run = home() / "runs" / f"multi-{tmp_path.name}" / "est_Latn"
    lang_run.mkdir(parents=True)
    (lang_run / "config.json").write_text(json.dumps({"config_sha256": m["config_sha256"],
                                                      "execution": {"out": str(out)}}))
    (lang_run.parent / "fin_Latn").mkdir()
    (lang_run.parent / "fin_Latn" / "config.json").write_text("[]")  # not a run's config: passed over, no traceback
    try:
        assert find_run_dir(out, m, None) == lang_run
        assert find_run_dir((root / "fin_Latn").resolve(), m, None) is None
    finally:
        shutil.rmtree(lang_run.parent)


def test_the_summary_masks_dest_and_its_exit_code_tells_refused_from_failed(tmp_path):
    from shard_pipeline.submit.publish_root import LangOutcome, summary

    dest = ":s3,access_key_id=AKIA,secret_access_key='a:b':bucket/v4"
    text, code = summary(tmp_path, dest, [LangOutcome("est_Latn", 0), LangOutcome("fin_Latn", 2, "refusing ...")])
    assert "AKIA" not in text and "a:b" not in text and ":s3,access_key_id=***,secret_access_key=***:bucket/v4/LANG" in text
    assert code == 1 and "(published: est_Latn)" in text and "  fin_Latn: refusing ..." in text
    assert summary(tmp_path, dest, [LangOutcome("est_Latn", 2, "r"), LangOutcome("fin_Latn", 2, "r")])[1] == 2
    assert summary(tmp_path, dest, [LangOutcome("est_Latn", 2, "r"), LangOutcome("x/", 1, "not a language")])[1] == 1
    text, code = summary(tmp_path, dest, [LangOutcome("est_Latn", 0)])
    assert code == 0 and text.startswith(f"published 1 language of {tmp_path} to :s3,access_key_id=***")


@pytest.mark.slow
@needs_rclone
def test_a_dead_remote_fails_every_language_then_the_same_command_finishes(multi_run, tmp_path, capsys):
    root, _ = multi_run
    server = WebDav(tmp_path / "served")  # not started yet: nothing listens on its port
    assert cli.main(["--publish", str(root), server.dest("pub")]) == 1
    err = capsys.readouterr().err
    assert err.count("cannot reach") == 2 * len(LANGS) and "(none published)" in err  # as it happens, and in the summary
    assert "run the same command again" in err.splitlines()[-1] and "Traceback" not in err
    server.start()
    try:
        assert cli.main(["--publish", str(root), server.dest("pub")]) == 0
        assert all(tree_bytes(server.root / "pub" / l) == published_tree(root / l) for l in LANGS)
    finally:
        server.kill()


@pytest.mark.slow
@needs_rclone
def test_publish_root_sends_the_root_manifest_last_and_the_published_root_verifies(multi_run, tmp_path, capsys):
    root = copied(multi_run, tmp_path)
    dest = tmp_path / "pub"
    (dest / ROOT_MANIFEST_NAME).parent.mkdir(parents=True)
    (dest / ROOT_MANIFEST_NAME).write_text('{"an earlier publish": 1}')  # fewer languages: replaced
    assert cli.main(["--publish", str(root), str(dest)]) == 0
    assert (dest / ROOT_MANIFEST_NAME).read_bytes() == (root / ROOT_MANIFEST_NAME).read_bytes()
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith(f"published {ROOT_MANIFEST_NAME} to ")  # after every language, before the summary
    # DEST's root manifest names every language there, each _MANIFEST.json as it landed (--verify of a published
    # copy is not supported: its _SHA256SUMS is not in the manifest)
    assert against_root_manifest(dest, scan(dest).languages) == ((), (), ())
    assert cli.main(["--publish", str(root), str(dest)]) == 0  # again: found there, nothing sent
    (root / "est_Latn" / "_MANIFEST.json").unlink()  # a root that fails: its manifest is not sent
    (dest / ROOT_MANIFEST_NAME).unlink()
    assert cli.main(["--publish", str(root), str(dest)]) == 1
    assert not (dest / ROOT_MANIFEST_NAME).exists()
