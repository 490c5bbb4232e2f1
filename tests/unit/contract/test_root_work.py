"""A root holds only landed languages and files a reader may open: the working files of its languages live in
the work folder beside it (contract/beside.py); its root manifest names the languages asked for and landed
(contract/root_manifest.py), and `--verify ROOT` fails naming a missing one. Fast: no pipeline process."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shard_pipeline.contract import root_manifest
from shard_pipeline.contract.beside import ROOT_MANIFEST_NAME, in_root, root_work_folder
from shard_pipeline.contract.replace import NotReplaceable, fresh_tmp_dir, parking_dir_for, tmp_dir_for
from shard_pipeline.contract.swap import swap_into_place
from shard_pipeline.contract.root import is_root, scan
from shard_pipeline.contract.root_manifest import DamagedRootManifest, RootManifest, read_root_manifest
from shard_pipeline.contract.verify_root import verify_root
from shard_pipeline.errors import ExitCode
from shard_pipeline.run.claim import claim, claim_lock_path, claim_path, held_for_publish, publish_lock_path, release
from shard_pipeline.submit.languages import smallest_first
from tests.unit.contract.test_verify import make_output


def new_root(tmp_path: Path, langs=("est_Latn", "fin_Latn")) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    root_manifest.ask(root, langs)
    return root


def test_a_language_of_a_root_keeps_its_working_files_beside_root_a_plain_out_beside_itself(tmp_path):
    root = new_root(tmp_path)
    lang, plain = root / "est_Latn", tmp_path / "plain"
    work = tmp_path / "root.hplt-shard"
    assert in_root(lang) and not in_root(plain) and root_work_folder(root) == work
    assert [tmp_dir_for(lang), parking_dir_for(lang), claim_path(lang), claim_lock_path(lang), publish_lock_path(lang)] == [
        work / "est_Latn.tmp", work / "est_Latn.replaced", work / "est_Latn.hplt-shard-claim",
        work / "est_Latn.hplt-shard-claim.lock", work / "est_Latn.hplt-shard-publish"]
    assert [tmp_dir_for(plain), claim_path(plain)] == [tmp_path / "plain.tmp", tmp_path / "plain.hplt-shard-claim"]


def test_a_claim_and_a_publish_leave_nothing_in_root_or_beside_it(tmp_path):
    root = new_root(tmp_path)
    out = root / "est_Latn"
    claim(out, tmp_path / "run")
    assert claim_path(out).is_file() and sorted(p.name for p in root.iterdir()) == [ROOT_MANIFEST_NAME]
    release(out, tmp_path / "run")
    assert not root_work_folder(root).exists()
    with held_for_publish(out) as held:
        assert held and publish_lock_path(out).is_file()
    assert not root_work_folder(root).exists() and sorted(p.name for p in root.iterdir()) == [ROOT_MANIFEST_NAME]


def test_a_language_is_staged_beside_root_and_swapped_into_it(tmp_path):
    root = new_root(tmp_path)
    out = root / "est_Latn"
    tmp = fresh_tmp_dir(out, "/runs/r1")
    assert tmp.parent == root_work_folder(root)
    assert [(s.lang, s.owner) for s in scan(root).unlanded] == [("est_Latn", "/runs/r1")]
    with pytest.raises(NotReplaceable):  # another run's staging folder beside ROOT is refused as beside OUT
        fresh_tmp_dir(out, "/runs/r2")
    (tmp / "x.parquet").write_bytes(b"x")
    swap_into_place(tmp, out)
    assert (out / "x.parquet").is_file() and not root_work_folder(root).exists()


def landed_root(tmp_path: Path, asked=("deu_Latn", "est_Latn", "fin_Latn", "isl_Latn")) -> Path:
    root = new_root(tmp_path, asked)
    for lang in asked[:3]:
        make_output(root, lang)
        assert root_manifest.land(root / lang)
    return root


def fine(out: Path, deep: bool) -> list:
    return []


def test_the_root_manifest_names_the_languages_asked_for_and_landed(tmp_path):
    root = landed_root(tmp_path)
    m = read_root_manifest(root)
    assert m.asked == ("deu_Latn", "est_Latn", "fin_Latn", "isl_Latn") and sorted(m.landed) == list(m.asked[:3])
    assert m.missing(scan(root).languages) == ("isl_Latn",)
    assert not root_manifest.land(tmp_path / "plain")  # no root: nothing recorded
    root_manifest.ask(tmp_path / "elsewhere", ["x"], make=False)
    assert not (tmp_path / "elsewhere").exists()
    assert scan(root).other_files == ()  # the root manifest is no stray file
    (tmp_path / "e").mkdir()
    assert is_root(new_root(tmp_path / "e"))  # no language landed yet: still a root, --verify names what is missing


def test_verify_root_fails_naming_a_language_asked_for_and_not_landed(tmp_path):
    root = landed_root(tmp_path)
    res = verify_root(root, fine)
    assert not res.ok and res.missing == ("isl_Latn",) and res.exit_code == ExitCode.FAILED
    make_output(root, "isl_Latn")  # there, but not landed by a run: still missing
    assert verify_root(root, fine).missing == ("isl_Latn",)
    root_manifest.land(root / "isl_Latn")
    assert verify_root(root, fine).ok


def test_verify_root_fails_naming_an_unlisted_or_a_changed_language(tmp_path):
    root = landed_root(tmp_path, ("est_Latn", "fin_Latn"))
    make_output(root, "swe_Latn")
    res = verify_root(root, fine)
    assert (res.unlisted, res.missing, res.ok) == (("swe_Latn",), (), False)
    (root / "swe_Latn" / "_MANIFEST.json").unlink()
    (root / "swe_Latn").rename(tmp_path / "away")
    (root / "est_Latn" / "_MANIFEST.json").write_text(
        (root / "est_Latn" / "_MANIFEST.json").read_text().replace('"version": "1"', '"version": "2"'))
    assert verify_root(root, fine).changed == ("est_Latn",)


@pytest.mark.parametrize("text", ["{", json.dumps({"format": "other"}), json.dumps(
    {"format": root_manifest.ROOT_MANIFEST_FORMAT, "asked": "est", "landed": []})])
def test_a_damaged_root_manifest_is_a_named_refusal(tmp_path, text):
    (tmp_path / ROOT_MANIFEST_NAME).write_text(text)
    with pytest.raises(DamagedRootManifest) as exc:
        read_root_manifest(tmp_path)
    assert str(tmp_path / ROOT_MANIFEST_NAME) in str(exc.value)


def test_small_languages_come_first():
    assert smallest_first({"deu": 200_000, "est": 2_000, "isl": 300, "aaa": 300}) == ["aaa", "isl", "est", "deu"]
    assert RootManifest(("a", "b"), {"a": "x"}).unlisted(["a", "c"]) == ("c",)


def test_a_root_on_a_mount_point_is_refused_for_its_languages(tmp_path, monkeypatch):
    """The staging folder beside ROOT would lie on another filesystem than ROOT/LANG: the swap could not rename."""
    from shard_pipeline.contract import replace

    root = new_root(tmp_path)
    monkeypatch.setattr(replace, "mount_points", lambda: frozenset({str(root)}))
    with pytest.raises(NotReplaceable) as exc:
        replace.check_not_mounted(root / "est_Latn")
    assert str(root) in str(exc.value)
    replace.check_not_mounted(tmp_path / "plain")  # a plain OUT beside ROOT's folder: nothing to refuse


def test_publish_root_fails_for_a_language_asked_for_and_not_landed(tmp_path):
    from shard_pipeline.submit.publish_root import entry_outcomes

    root = new_root(tmp_path, ("est_Latn", "isl_Latn"))
    (root / "est_Latn").mkdir()  # a folder without its manifest is named as that, not twice
    assert [(o.lang, o.code) for o in entry_outcomes(scan(root))] == [("isl_Latn", ExitCode.FAILED),
                                                                       ("est_Latn/", ExitCode.FAILED)]


def test_a_submission_that_fails_takes_back_the_root_manifest_it_made(tmp_path):
    from shard_pipeline.submit.guards import languages_named

    root = tmp_path / "root"
    outs = [root / "est_Latn", root / "isl_Latn"]
    with pytest.raises(OSError):
        with languages_named({o.name: o for o in outs}, True, tmp_path / "run"):
            assert read_root_manifest(root).asked == ("est_Latn", "isl_Latn") and in_root(outs[0])
            raise OSError("the run dir cannot be made")
    assert not root.exists()  # ROOT and its root manifest were this submission's
    root = new_root(tmp_path, ("fin_Latn",))
    with pytest.raises(OSError):
        with languages_named({o.name: o for o in outs}, True, tmp_path / "run"):
            raise OSError("the run dir cannot be made")
    assert read_root_manifest(root).asked == ("fin_Latn",)  # an earlier root's: as it was
