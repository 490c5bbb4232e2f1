"""Every entry of a language folder is read, refused or named in a warning (issue #19, item 3)."""
from __future__ import annotations

import gzip
import shutil

import pytest
import zstandard

from shard_pipeline.input.corpus import InputError, find_shards
from tests.pipeline_util import LANG, make_corpus, run_cli

SIDE_FILES = ["counts.json", ".counts.json", ".filter.json", ".duplicate.ids", ".domains.zst", ".urls.zst",
              ".signatures.zst", ".9_1.ia.filter.json", ".9_1.ia.counts.json", ".10_1.jsonl.md5", ".9_1.ia.ids.zst",
              "9_1.ia.jsonl.zst.md5", "10_1.cc.jsonl.zst.sha256"]


def _with_extra(tmp_path, how: str):
    """A corpus of two shards, and a third real shard beside them under a name the run does not read."""
    root = make_corpus(tmp_path / "c", n_docs=60, names=("10_1.cc", "9_1.ia", "9_2.cc"))
    lang = root / LANG
    data = (lang / "9_2.cc.jsonl.zst").read_bytes()
    (lang / "9_2.cc.jsonl.zst").unlink()
    raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 30)
    if how == "sub/":
        (lang / "more").mkdir()
        (lang / "more" / "9_2.cc.jsonl.zst").write_bytes(data)
        return root, "more/ (1 data file, e.g. 9_2.cc.jsonl.zst)"
    name = {"upper": "9_2.cc.JSONL.ZST", "zstd": "9_2.cc.jsonl.zstd", "plain": "9_2.cc.jsonl",
            "gz": "9_2.cc.jsonl.gz"}[how]
    (lang / name).write_bytes(gzip.compress(raw) if how == "gz" else raw if how == "plain" else data)
    return root, name


@pytest.mark.parametrize("how", ["upper", "zstd", "plain", "gz", "sub/"])
def test_data_not_named_like_a_shard_stops_the_submit_and_the_dry_run(tmp_path, capsys, how):
    root, named = _with_extra(tmp_path, how)
    for extra in (("--dry-run",), ()):
        assert run_cli(root, tmp_path / "out", tmp_path / "run", *extra) == 2
        err = capsys.readouterr().err
        assert named in err and "would not be read" in err and "nothing was started" in err
        assert "Traceback" not in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()


def test_the_refusal_names_the_first_few_and_counts_the_rest(tmp_path):
    root = make_corpus(tmp_path, n_docs=20, names=("10_1.cc",))
    for k in range(8):
        (root / LANG / f"{k}_1.cc.jsonl").write_bytes(b"{}\n")
    with pytest.raises(InputError) as e:
        find_shards(LANG, corpus="v4", local_root=root)
    msg = str(e.value)
    assert msg.startswith(f"8 entries in {root / LANG} look like corpus data")
    assert "0_1.cc.jsonl, 1_1.cc.jsonl" in msg and "and 3 more" in msg and "7_1.cc.jsonl" not in msg


def test_hplt_side_files_are_silent_and_other_entries_are_named_in_a_warning(tmp_path):
    root = make_corpus(tmp_path, n_docs=20)
    lang = root / LANG
    for name in SIDE_FILES:
        (lang / name).write_bytes(b"{}")
    (lang / "README.md").write_text("notes")
    (lang / ".rsync-partial").write_text("x")
    (lang / "notes").mkdir()
    (lang / "notes" / "plan.txt").write_text("x")
    warned: list[str] = []
    shards = find_shards(LANG, corpus="v4", local_root=root, warn=warned.append)
    assert len(shards) == 4
    assert len(warned) == 1, warned
    assert "3 entries are not read" in warned[0] and ".rsync-partial, README.md, notes/" in warned[0]
    assert not any(name in warned[0] for name in SIDE_FILES)
    warned.clear()
    for name in ("README.md", ".rsync-partial"):
        (lang / name).unlink()
    shutil.rmtree(lang / "notes")
    find_shards(LANG, corpus="v4", local_root=root, warn=warned.append)
    assert warned == []  # a release folder as HPLT ships it: no warning at all


def test_the_warning_reaches_the_user_and_the_run_goes_on(tmp_path, capsys):
    root = make_corpus(tmp_path, n_docs=20)
    (root / LANG / "README.md").write_text("notes")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--dry-run") == 0
    assert f"hplt-shard: warning: {root / LANG}: 1 entry is not read" in capsys.readouterr().err


def test_a_selection_that_skips_shards_is_not_refused(tmp_path):
    root = make_corpus(tmp_path, n_docs=40)
    warned: list[str] = []
    assert [s.name for s in find_shards(LANG, corpus="v4", local_root=root, wds="9", sources="cc",
                                        warn=warned.append)] == ["9_2.cc"]
    assert warned == []
