"""The dry-run and the submit of a brand-new run of several languages look for each language's staging folder in
the same place, through the same function: the work folder beside ROOT (contract/beside.py), where the run keeps
it once the submit has written ROOT's root manifest."""
from __future__ import annotations

from pathlib import Path

import pytest

from shard_pipeline.contract.beside import root_work_folder
from shard_pipeline.contract.replace import tmp_dir_for
from shard_pipeline.errors import UsageError
from shard_pipeline.submit import cli
from tests.pipeline_util import LICENSE
from tests.test_multi_local import make_langs


def _refused(root: Path, out: Path, run_dir: Path, *extra: str) -> bool:
    try:
        code = cli.main(["fin_Latn,est_Latn", "--corpus", "v4", "--local-root", str(root), "--out", str(out),
                         "--run-dir", str(run_dir), "--executor", "local", "--license", LICENSE, "--jobs", "1",
                         *extra])
    except UsageError:
        return True
    return code != 0


def test_a_foreign_staging_folder_beside_root_stops_the_dry_run_as_it_stops_the_submit(tmp_path):
    corpus = make_langs(tmp_path, {"fin_Latn": (6, ("10_1",)), "est_Latn": (5, ("10_1",))})
    out = tmp_path / "root"
    staged = root_work_folder(out) / "est_Latn.tmp"
    assert tmp_dir_for(out / "est_Latn", of_a_root=True) == staged
    staged.mkdir(parents=True)
    (staged / "notes.txt").write_text("mine")
    dry = _refused(corpus, out, tmp_path / "run", "--dry-run")
    submit = _refused(corpus, out, tmp_path / "run")
    assert (dry, submit) == (True, True)
    assert not out.exists() and (staged / "notes.txt").read_text() == "mine"


def test_without_a_foreign_folder_the_dry_run_passes(tmp_path):
    corpus = make_langs(tmp_path, {"fin_Latn": (6, ("10_1",)), "est_Latn": (5, ("10_1",))})
    assert not _refused(corpus, tmp_path / "root", tmp_path / "run", "--dry-run")
    assert not (tmp_path / "root").exists() and not root_work_folder(tmp_path / "root").exists()
