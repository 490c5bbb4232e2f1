"""When --resume cannot help (an unreadable input, a changed input), the next step is the exact new
run: for a language of a run of several, that language alone into ROOT/<LANG>, so the languages
that landed are not made again. Each printed command is run as written."""
from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from shard_pipeline.run.next_step import FLAGS, language_alone_argv, new_run_argv
from shard_pipeline.submit import cli


def test_a_language_alone_keeps_every_content_option_and_drops_the_languages_and_the_root():
    argv = ["hplt-shard", "fin_Latn,swe_Latn", "--corpus", "v4", "--out", "/o", "--clean", "--shard-rows=10",
            "--run-dir", "/r", "--dry-run", "--dataset-card", "--license", "CC0-1.0"]
    assert language_alone_argv(argv, "swe_Latn", Path("/o/swe_Latn"), Path("/r-swe_Latn-new")) == [
        "./hplt-shard", "swe_Latn", "--corpus", "v4", "--clean", "--shard-rows=10", "--dataset-card",
        "--license", "CC0-1.0", "--out", "/o/swe_Latn", "--run-dir", "/r-swe_Latn-new"]
    by_file = ["hplt-shard", "--langs-file", "l.txt", "--corpus", "v3", "--out=/o", "--replace-other"]
    assert language_alone_argv(by_file, "fin_Latn", Path("/o/fin_Latn"), Path("/n")) == [
        "./hplt-shard", "fin_Latn", "--corpus", "v3", "--replace-other", "--out", "/o/fin_Latn", "--run-dir", "/n"]
    assert new_run_argv(["hplt-shard", "eng_Latn", "--run-dir=/r", "--bad-records", "fail", "--out", "/o"],
                        Path("/n")) == ["./hplt-shard", "eng_Latn", "--bad-records", "fail", "--out", "/o", "--run-dir", "/n"]


def test_the_new_run_keeps_the_runs_bad_records_unless_it_sets_it_anew():
    """A quarantining run's "start a new run" command used to drop --bad-records quarantine: pasted, it stopped
    at the first bad record, and on clean input made another config_sha256 than the run asked for."""
    run = ["hplt-shard", "fin_Latn", "--bad-records", "quarantine", "--out", "/o", "--run-dir", "/r"]
    assert new_run_argv(run, Path("/n")) == ["./hplt-shard", "fin_Latn", "--bad-records", "quarantine", "--out", "/o",
                                             "--run-dir", "/n"]
    several = ["hplt-shard", "fin_Latn,swe_Latn", "--bad-records=quarantine", "--out", "/o"]
    assert language_alone_argv(several, "swe_Latn", Path("/o/swe_Latn"), Path("/n")) == [
        "./hplt-shard", "swe_Latn", "--bad-records=quarantine", "--out", "/o/swe_Latn", "--run-dir", "/n"]
    failing = ["hplt-shard", "fin_Latn", "--bad-records=fail", "--out", "/o"]
    assert new_run_argv(failing, Path("/n"), ["--bad-records", "quarantine"]) == [
        "./hplt-shard", "fin_Latn", "--out", "/o", "--bad-records", "quarantine", "--run-dir", "/n"]


def test_every_option_without_a_value_is_known_to_the_argv_walk():
    """An option of the command line that takes no value but is missing from FLAGS would swallow the
    next argument of a printed command."""
    from shard_pipeline.submit.args import command_line

    parser, _ = command_line(given_only=True)
    no_value = {s for a in parser._actions if a.nargs == 0 for s in a.option_strings}
    assert no_value <= set(FLAGS), no_value - set(FLAGS)


def truncate(path: Path) -> bytes:
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    return whole


def commands_in(text: str) -> list[list[str]]:
    return [shlex.split(l.strip())[1:] for l in text.splitlines() if l.strip().startswith("./hplt-shard ")]


@pytest.mark.slow
def test_a_truncated_input_of_one_language_leads_to_a_new_run_of_that_language_alone(tmp_path, capsys):
    from shard_pipeline.run.outcome import Kind
    from tests.pipeline_util import failures_by_kind, view_of
    from shard_pipeline.run.steps import EachLanguage
    from tests.e2e.local.test_multi_local import make_langs, multi_cli

    root = make_langs(tmp_path, {"fin_Latn": (40, ("9_1", "9_2")), "swe_Latn": (30, ("9_1",))})
    broken = root / "swe_Latn" / "9_1.jsonl.zst"
    whole = truncate(broken)
    out, run = tmp_path / "out", tmp_path / "run"
    assert multi_cli(root, "fin_Latn,swe_Latn", out, run, "--shard-rows", "10") == 1
    err = capsys.readouterr().err
    assert (out / "fin_Latn" / "_MANIFEST.json").exists() and not (out / "swe_Latn").exists()
    assert "--resume" not in err.splitlines()[-1] and "truncated" in err
    assert cli.main(["--status", str(run)]) == 1
    status = capsys.readouterr().out
    assert "a resume cannot finish it" in status and f"--resume {run}" not in status.splitlines()[-3]
    view = view_of(run)  # what --status rendered, as a value
    assert isinstance(view.step, EachLanguage) and view.step.unfinished == ("swe_Latn",) and not view.step.resumable
    assert [lang for lang, _ in view.step.new_runs] == ["swe_Latn"]
    # the chain is afterany: swe_Latn's later stages ran, and each ended at once as UPSTREAM, not as a cause
    kinds = failures_by_kind(view)
    assert list(kinds) == [Kind.BROKEN_INPUT, Kind.UPSTREAM] and [o.stage for o in kinds[Kind.BROKEN_INPUT]] == ["partition"]
    assert [o.stage for o in kinds[Kind.UPSTREAM]] == ["plan", "write", "finalize"]
    (fixed,) = commands_in(status)
    assert fixed in commands_in(err)  # the run's end and --status say the same
    assert fixed[0] == "swe_Latn" and fixed[fixed.index("--out") + 1] == str(out / "swe_Latn")
    broken.write_bytes(whole)
    capsys.readouterr()
    assert cli.main(["--resume", str(run)]) == 2  # a repaired file is a changed input
    refusal = capsys.readouterr().err
    (new,) = commands_in(refusal)
    assert new[:-1] == fixed[:-1]  # the same new run, in another run dir
    assert cli.main(fixed) == 0
    capsys.readouterr()
    assert cli.main(["--status", str(run)]) == 0  # the step was taken: the run of several is done
    status = capsys.readouterr().out
    assert f"landed by {Path(fixed[fixed.index('--run-dir') + 1])}" in status and "state: done" in status, status
    assert multi_cli(root, "fin_Latn,swe_Latn", tmp_path / "whole", tmp_path / "run-whole", "--shard-rows", "10") == 0
    for lang in ("fin_Latn", "swe_Latn"):  # the same bytes as one run over the whole inputs
        assert (out / lang / "_MANIFEST.json").read_bytes() == (tmp_path / "whole" / lang / "_MANIFEST.json").read_bytes()
    assert cli.main(["--verify", str(out)]) == 0


@pytest.mark.slow
def test_a_truncated_input_of_a_single_run_names_the_new_run_not_a_resume(tmp_path, capsys):
    from tests.pipeline_util import LANG, generate_corpus, run_cli

    root = tmp_path / "clean"
    generate_corpus(root, LANG, corpus="v4", n_docs=30, shard_names=["9_1", "9_2"], seed=3, text_bytes=300)
    broken = root / LANG / "9_2.jsonl.zst"
    whole = truncate(broken)
    out, run = tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run, "--shard-rows", "10") == 1
    err = capsys.readouterr().err
    (fixed,) = commands_in(err)
    assert "cannot be read to its end" in err and "--resume" not in fixed
    shutil.copy(broken, tmp_path / "half")
    broken.write_bytes(whole)
    assert cli.main(fixed) == 0
    assert cli.main(["--verify", str(out)]) == 0
