"""Shared paths on LUMI: no run writes where it has no business (issue #22, last section).

Real runs with the local executor and a counts index under tmp: the lumi preset's index is the
user's own project's; an index write never fails a finished run; a root that is no preset's HPLT
root never touches HPLT's rows; a corpus of the user's own is named after itself, not HPLT.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from shard_pipeline.input.corpus import find_shards
from shard_pipeline.input.counts_index import lookup
from shard_pipeline.input.identity import index_key, known_hplt_roots, names_for
from shard_pipeline.paths import PRESET_DIR
from shard_pipeline.submit import cli, scope
from shard_pipeline.submit.settings import preset_values
from tests.pipeline_util import LANG, LICENSE, index_file, lang_dir, make_corpus, manifest, read_rows, run_cli, tree_bytes

LUMI_V4 = Path("/appl/local/openeurollm/training/catalogue/hplt/4.0")


# ---- which roots are HPLT (fast) ---------------------------------------------------------------

def test_names_hplt_only_for_release_subset_folders() -> None:
    assert names_for("v4", "clean").dataset(LANG) == "hplt-v4-clean-eng_Latn"
    assert names_for("v4", "noisy").source_id(LANG, "9_1") == "hplt-v4/noisy/eng_Latn/9_1"
    assert names_for("v3", "sorted").hplt and not names_for("v3", "clean").hplt  # clean is v4's, not v3's
    big2 = names_for("v4", "big2")
    assert (big2.hplt, big2.dataset(LANG), big2.source_id(LANG, "9_1")) == (False, "big2-eng_Latn", "big2/eng_Latn/9_1")
    assert big2.source(LANG) == "big2 eng_Latn (a local corpus, not HPLT)"
    assert names_for("v4", "clean", "mine").source_id(LANG, "9_1") == "mine/eng_Latn/9_1"  # --corpus-name wins
    with pytest.raises(ValueError, match="--corpus-name"):
        names_for("v4", "my corpus")


def test_index_key_is_the_samplers_only_for_preset_roots(tmp_path: Path) -> None:
    known = known_hplt_roots(preset_values(PRESET_DIR))
    assert index_key("v4", LUMI_V4 / "clean", known) == ("v4", "clean")
    assert index_key("v4", LUMI_V4 / "noisy", known) == ("v4", "noisy")  # the sampler's --local-root .../4.0/noisy
    assert index_key("v3", LUMI_V4.parent / "3.0" / "sorted", known) == ("v3", "sorted")
    assert index_key("v3", None, known) == ("v3", "sorted")  # the HPLT v3 map, trusted by name as the sampler does
    a, b = index_key("v4", tmp_path / "a" / "clean", known), index_key("v4", tmp_path / "b" / "clean", known)
    assert a[0] == b[0] == "custom" and a != b and a[1].startswith("clean-")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    assert index_key("v4", tmp_path / "link" / "clean", known) == a  # one folder, one identity, however reached


# ---- real runs ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_lumi_preset_with_only_account_never_builds_another_tree(tmp_path: Path, capsys) -> None:
    """The reported case: the lumi preset and an ACCOUNT, locally; /projappl/<ACCOUNT> is not there."""
    if Path("/projappl").exists():
        pytest.skip("/projappl exists on this machine")
    root = make_corpus(tmp_path, n_docs=40)
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--preset", "lumi", "--account", "project_465000001",
                   "--cpus-per-task", "1", "--shard-rows", "10") == 0
    assert "/projappl/project_465000001/hplt-counts does not exist" in capsys.readouterr().err  # said at submit
    assert not Path("/projappl").exists()
    validation = json.loads((lang_dir(tmp_path / "run") / "validation.json").read_text())
    assert "/projappl/project_465000001/hplt-counts" in validation["counts_index_warning"]
    assert validation["counts_index_rows"] == 0 and (lang_dir(tmp_path / "run") / "DONE").exists()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["a file", "no parent"])
def test_index_write_failure_after_the_swap_is_a_warning(tmp_path: Path, capsys, kind: str) -> None:
    root = make_corpus(tmp_path, n_docs=40)
    idx = tmp_path / "idx"
    if kind == "a file":
        idx.write_text("not a folder\n")
    else:
        idx = tmp_path / "missing" / "idx"
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--counts-index", str(idx), "--shard-rows", "10") == 0
    validation = json.loads((lang_dir(tmp_path / "run") / "validation.json").read_text())
    assert str(idx) in validation["counts_index_warning"] and "output is complete" in validation["counts_index_warning"]
    said = capsys.readouterr()
    assert any(l.startswith("hplt-shard: warning: ") and l.endswith(validation["counts_index_warning"])
               for l in said.err.splitlines()), said.err  # on the terminal, not only in a log
    assert not (tmp_path / "missing").exists()
    assert cli.main(["--verify", str(tmp_path / "out")]) == 0
    assert cli.main(["--status", str(tmp_path / "run")]) == 0  # the run is done
    # the same bytes as a run whose index write succeeded
    assert run_cli(root, tmp_path / "out2", tmp_path / "run2", "--counts-index", str(tmp_path / "ok"),
                   "--shard-rows", "10") == 0
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "out2")
    assert index_file(tmp_path / "ok", root).is_file()


@pytest.mark.slow
def test_a_private_clean_never_touches_hplt_rows(tmp_path: Path, capsys, monkeypatch) -> None:
    """Two folders named clean with the same shard names: neither rewrites the other's or HPLT's rows."""
    presets = tmp_path / "presets"
    presets.mkdir()
    hplt = make_corpus(tmp_path / "hplt" / "4.0", n_docs=40)  # stands for the catalogue copy a preset names
    (presets / "site.conf").write_text(f"V4_ROOT={hplt}\n")
    monkeypatch.setattr(scope, "PRESET_DIR", presets)
    mine = make_corpus(tmp_path / "home", n_docs=60, seed=7)
    idx = tmp_path / "idx"
    args = ("--counts-index", str(idx), "--shard-rows", "10")
    assert run_cli(hplt, tmp_path / "o1", tmp_path / "r1", *args) == 0
    samplers = idx / "v4" / "clean" / f"{LANG}.tsv"
    before = samplers.read_bytes()
    assert sum(int(line.split("\t")[3]) for line in before.decode().splitlines()[1:]) == 40
    capsys.readouterr()
    assert run_cli(mine, tmp_path / "o2", tmp_path / "r2", *args) == 0
    assert samplers.read_bytes() == before  # my corpus wrote nothing there
    assert run_cli(hplt, tmp_path / "o3", tmp_path / "r3", *args) == 0
    err = capsys.readouterr()
    assert "counts index" not in err.err + err.out  # no disagreement, no row replaced, both ways

    def rows(text: str) -> list[list[str]]:
        return [line.split("\t")[:5] for line in text.splitlines()]  # all but the time of counting

    assert rows(samplers.read_text()) == rows(before.decode())
    own = index_file(idx, mine).read_text().splitlines()
    assert index_file(idx, mine).parent.parent == idx / "custom" and sum(int(l.split("\t")[3]) for l in own[1:]) == 60
    assert sorted(p.relative_to(idx).parts[0] for p in idx.glob("*/*/*.tsv")) == ["custom", "v4"]
    # a later run over my corpus finds every count in its own rows
    shards = find_shards(LANG, corpus="v4", local_root=mine)
    assert lookup(read_rows(idx, *index_file(idx, mine).relative_to(idx).parts[:2], LANG), shards) == {s.name: 15 for s in shards}


@pytest.mark.slow
def test_a_custom_corpus_is_named_after_itself(tmp_path: Path) -> None:
    root = make_corpus(tmp_path, n_docs=40).rename(tmp_path / "big2")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--shard-rows", "10", "--dataset-card") == 0
    m = manifest(tmp_path / "out")
    assert m["dataset"] == "big2-eng_Latn"
    ids = {json.loads(l)["source_id"] for l in (tmp_path / "out" / "_LEDGER.jsonl").read_text().splitlines()}
    assert ids and all(i.startswith("big2/eng_Latn/") for i in ids)
    column = set(pq.read_table(tmp_path / "out" / m["shards"][0]["name"], columns=["source_id"])["source_id"].to_pylist())
    assert column and column <= ids
    card = (tmp_path / "out" / "README.md").read_text()
    assert "big2 eng_Latn (a local corpus, not HPLT)" in card and "HPLT v4" not in card
    # --corpus-name on a folder called clean; --dataset names the manifest and the card's title
    clean = make_corpus(tmp_path / "x", n_docs=40)
    assert run_cli(clean, tmp_path / "o2", tmp_path / "r2", "--shard-rows", "10", "--dataset-card",
                   "--corpus-name", "web-crawl-2026", "--dataset", "crawl") == 0
    assert manifest(tmp_path / "o2")["dataset"] == "crawl"
    card = (tmp_path / "o2" / "README.md").read_text()
    assert "crawl 1" in card and "web-crawl-2026 eng_Latn (a local corpus, not HPLT)" in card
    led = (tmp_path / "o2" / "_LEDGER.jsonl").read_text()
    assert '"source_id":"web-crawl-2026/eng_Latn/' in led and "hplt-" not in led


@pytest.mark.slow
def test_a_folder_name_that_cannot_name_a_corpus_is_refused(tmp_path: Path, capsys) -> None:
    root = make_corpus(tmp_path, n_docs=20).rename(tmp_path / "my corpus")
    assert run_cli(root, tmp_path / "out", tmp_path / "run", "--dry-run") == 2
    err = capsys.readouterr().err
    assert "'my corpus' cannot name a corpus" in err and "--corpus-name NAME" in err
    assert not (tmp_path / "run").exists()
