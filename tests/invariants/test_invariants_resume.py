"""A resume refuses at once, before any task starts, what its finalize would refuse at the end: a changed
input, an OUT that is not a previous output, a newer output of another configuration at OUT. A resume
of a run whose finalize already swapped its output in is not refused: it finishes the last steps."""
from __future__ import annotations

import os

import pytest

from shard_pipeline.errors import ExitCode
from tests.inprocess import Made, make_run, newer_output_at_out, resume
from tests.pipeline_util import LANG, tree_bytes


@pytest.fixture
def written(tmp_path, in_process) -> Made:
    """Every task but finalize finished; OUT was absent at submit."""
    made = make_run(tmp_path, in_process, "finalize")
    assert made.code == 1
    in_process.ran.clear()
    return made


def refused_at_once(made: Made, in_process) -> None:
    """The resume exits as a usage error, no task started, OUT as it was."""
    before = tree_bytes(made.out) if made.out.exists() else None
    assert resume(made.run) == ExitCode.USAGE
    assert in_process.ran == [] and not made.run.done_marker.exists()
    assert (tree_bytes(made.out) if made.out.exists() else None) == before


def test_a_resume_over_a_newer_output_of_another_configuration_is_refused_at_once(written, in_process, monkeypatch):
    newer_output_at_out(written, monkeypatch)
    refused_at_once(written, in_process)


def test_a_resume_over_a_folder_that_is_not_an_output_is_refused_at_once(written, in_process):
    written.out.mkdir()
    (written.out / "notes.txt").write_text("not an output's file\n")
    refused_at_once(written, in_process)


def test_a_resume_after_an_input_changed_is_refused_at_once(written, in_process):
    shard = next((written.root / LANG).glob("9_1*.jsonl.zst"))
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
    refused_at_once(written, in_process)


def test_a_resume_after_the_swap_only_finishes_the_last_steps(written, in_process, monkeypatch):
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-after-swap::enospc")
    assert resume(written.run) == ExitCode.FAILED and in_process.ran == [("finalize", 0)]
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    swapped = tree_bytes(written.out)
    in_process.ran.clear()
    assert resume(written.run) == ExitCode.OK and in_process.ran == [("finalize", 0)]
    assert tree_bytes(written.out) == swapped and written.run.done_marker.exists()


def test_why_a_resume_is_refused_in_words(written, in_process, monkeypatch, capsys):
    """The one golden text of a resume's early refusals: finalize's own words, and that nothing started."""
    newer_output_at_out(written, monkeypatch)
    capsys.readouterr()
    assert resume(written.run) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err == (
        f"hplt-shard: {written.out} holds another output now (dataset 'hplt-v4-clean-{LANG}' version '1', another "
        f"configuration), put there after this run's earlier finalize attempt: this run does not replace a newer output; to put this "
        f"run's output there anyway, move {written.out} away, then ./hplt-shard --resume {written.run.root}; "
        "nothing was started\n")
