"""User-facing message defects from the adversarial pass: each failure is one true message with
the next step, and what a run holds is released exactly.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from shard_pipeline.run.claim import claim, holder, release
from shard_pipeline.submit import cli
from tests.pipeline_util import LANG, as_from_a_terminal, lang_dir, make_corpus, records, run_cli, write_records


def test_a_run_dir_ending_in_a_space_releases_its_claim(tmp_path):
    out, run = tmp_path / "out", tmp_path / "run "
    claim(out, run)
    assert holder(out) == str(run)
    release(out, run)
    assert holder(out) is None


@pytest.mark.slow  # runs the pipeline
def test_a_single_language_run_whose_unit_is_killed_ends_with_the_resume_command(tmp_path, monkeypatch, capsys):
    root = make_corpus(tmp_path / "in", n_docs=60)
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:kill")
    assert run_cli(root, tmp_path / "out", tmp_path / "run") != 0
    err = capsys.readouterr().err
    assert f"./hplt-shard --resume {tmp_path / 'run'}" in err


@pytest.mark.slow  # runs the pipeline (the resume)
def test_ctrl_c_before_any_task_releases_the_claim_and_gives_a_resume_that_works(tmp_path, monkeypatch, capsys):
    from shard_pipeline.submit import launch

    root, out, run = make_corpus(tmp_path / "in", n_docs=60), tmp_path / "out", tmp_path / "run"
    real_start = launch.start

    def ctrl_c(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "start", ctrl_c)
    assert run_cli(root, out, run) == 130
    err = capsys.readouterr().err
    assert holder(out) is None
    assert f"./hplt-shard --resume {run}" in err
    monkeypatch.setattr(launch, "start", real_start)
    assert cli.main(["--resume", str(run), "--executor", "local"]) == 0
    assert (out / "_MANIFEST.json").exists()


@pytest.mark.slow  # runs the pipeline
def test_a_repeated_id_says_start_a_new_run_not_resume(tmp_path, capsys):
    recs = records(12, seed=17)
    recs[9]["id"] = recs[4]["id"]
    write_records(tmp_path / "clean" / LANG / "9_1.jsonl.zst", recs)
    run = tmp_path / "run"
    assert run_cli(tmp_path / "clean", tmp_path / "out", run) == 1
    err = capsys.readouterr().err
    assert "repeated document id" in err and "hplt-shard --resume" not in err, err
    assert f"--run-dir {run}-fixed" in err, err
    assert cli.main(["--status", str(run)]) != 0
    said = capsys.readouterr()
    assert "hplt-shard --resume" not in said.out + said.err and f"--run-dir {run}-fixed" in said.out + said.err, said


@pytest.mark.slow  # runs the pipeline
def test_a_starting_task_is_not_failed_in_status(tmp_path, monkeypatch):
    """Its log holds its first line, /proc does not know it as a task yet: a held run shows it running."""
    from shard_pipeline.run.claim import run_lock
    from shard_pipeline.run.outcome import forget_exit
    from shard_pipeline.run.rundir import RunDir
    from shard_pipeline.run.stage_status import stage_statuses

    root, run = make_corpus(tmp_path / "in", n_docs=60), tmp_path / "run"
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:kill")
    assert run_cli(root, tmp_path / "out", run) != 0
    (write,) = [s for s in stage_statuses(RunDir(lang_dir(run))) if s.stage == "write"]
    assert [f.task for f in write.failed] == [0]  # ended with its exit record: failed
    log = write.failed[0].log
    forget_exit(log)  # what its group does as it starts the unit again
    log.write_text(log.read_text().splitlines()[0] + "\n")  # only the rerun line a task writes first
    with run_lock(run):  # a live local submitter is starting the task again
        (write,) = [s for s in stage_statuses(RunDir(lang_dir(run))) if s.stage == "write"]
    assert write.failed == [] and write.running == 1


@pytest.mark.parametrize("text, reason", [("{", "not JSON"), ("[]", "a JSON list"), (b"\xff{}", "not UTF-8")])
def test_a_damaged_run_file_is_one_message_naming_it(tmp_path, text, reason):
    from shard_pipeline.errors import UserError
    from shard_pipeline.run.rundir import read_json

    p = tmp_path / "config.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserError) as e:
        read_json(p)
    assert str(p) in str(e.value) and reason in str(e.value) and "--run-dir" in str(e.value)


def test_a_run_file_missing_a_field_names_the_file_and_the_field(tmp_path):
    from shard_pipeline.errors import UserError
    from shard_pipeline.run.rundir import read_json

    p = tmp_path / "task-00000.receipt.json"
    p.write_text('{"task": 0, "nested": {}}')
    rec = read_json(p)
    for lookup in (lambda: rec["inputs"], lambda: rec["nested"]["x"]):
        with pytest.raises(UserError) as e:
            lookup()
        assert str(e.value).startswith(f"{p} is damaged (it has no field ")
    with pytest.raises(KeyError):  # callers that look a field up and fall back still do
        rec["inputs"]


def test_a_langs_file_that_is_not_utf8_is_one_message(tmp_path):
    from shard_pipeline.errors import UsageError
    from shard_pipeline.submit.languages import read_langs_file

    p = tmp_path / "langs.txt"
    p.write_bytes(b"eng_Latn\n\xff\xfe\n")
    with pytest.raises(UsageError, match=r"langs\.txt: line 2 is not UTF-8"):
        read_langs_file(p)


@pytest.mark.slow  # runs the pipeline
@pytest.mark.parametrize("how", ["--status", "--resume"])
def test_status_and_resume_of_a_damaged_config_are_one_message(tmp_path, capsys, how):
    root, run = make_corpus(tmp_path / "in", n_docs=60), tmp_path / "run"
    assert run_cli(root, tmp_path / "out", run) == 0
    (lang_dir(run) / "config.json").write_text("{")
    capsys.readouterr()
    assert cli.main([how, str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hplt-shard: {lang_dir(run) / 'config.json'} is damaged (not JSON") and "Traceback" not in err


@pytest.mark.slow  # starts a Python process
def test_ctrl_c_during_start_up_imports_is_one_line_and_130(tmp_path):
    """A pyarrow whose import is interrupted stands for Ctrl-C while ./hplt-shard imports."""
    import os
    import subprocess
    import sys

    fake = tmp_path / "fake" / "pyarrow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n")
    repo = Path(__file__).resolve().parents[3]
    p = subprocess.run([sys.executable, str(repo / "hplt-shard"), "--help"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(tmp_path / "fake")}, preexec_fn=as_from_a_terminal)
    assert p.returncode == 130
    assert p.stderr == "hplt-shard: interrupted while starting; nothing was written\n"


@pytest.mark.slow  # starts a Python process
def test_ctrl_c_in_a_forked_unit_at_its_fork_hooks_prints_no_traceback(tmp_path):
    """SIGINT while the child runs an at-fork hook (filelock registers one): no traceback on the terminal."""
    import subprocess
    import sys

    log = tmp_path / "unit.log"
    script = f"""
import os, signal, sys
from shard_pipeline.worker.fork import fork_unit
def parent_handler(signum, frame):
    raise RuntimeError("the parent's handler ran in the child")
signal.signal(signal.SIGINT, parent_handler)
os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGINT))
with open({str(log)!r}, "wb") as f:
    child = fork_unit([sys.executable, "-m", "shard_pipeline.worker.task", "--help"], f.fileno(), None,
                      new_session=True)
    _, status = os.waitpid(child.pid, 0)
print("child exit", os.waitstatus_to_exitcode(status))
"""
    repo = Path(__file__).resolve().parents[3]
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=repo)
    assert p.stdout.startswith("child exit"), (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "parent's handler" not in p.stderr, p.stderr


def test_a_run_dir_interrupted_while_being_made_is_not_left_half_made(tmp_path, monkeypatch):
    from shard_pipeline.run.rundir import RunDir

    real, calls = Path.mkdir, []

    def mkdir(self, *a, **kw):
        calls.append(self)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(KeyboardInterrupt):
        RunDir(tmp_path / "run").create(["partition"])
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # runs the pipeline
def test_a_stop_after_every_language_landed_says_done_not_interrupted(tmp_path, capsys):
    from shard_pipeline.run import unit_table
    from shard_pipeline.run.rundir import RunDir, read_json
    from shard_pipeline.run.runconfig import RunConfig
    from shard_pipeline.submit.executors.local import Interrupted, stopped

    root, out, run = make_corpus(tmp_path / "in", n_docs=60), tmp_path / "out", tmp_path / "run"
    assert run_cli(root, out, run) == 0
    capsys.readouterr()
    table = unit_table.load(run)
    cfgs = {l: RunConfig.from_json(read_json(RunDir(table.lang_dir(l)).config_json)) for l in table.langs}
    assert stopped(table, cfgs, Interrupted("finalize", 0, 1)) == 0
    err = capsys.readouterr().err
    assert "nothing is left to do" in err and "--resume" not in err, err


@pytest.mark.slow  # starts Python processes
def test_an_ignored_ctrl_c_is_not_left_blocked_by_the_re_exec_into_the_venv(tmp_path):
    """`python3 hplt-shard` with a python3 that lacks pyarrow re-execs into .venv; a SIGINT the
    caller ignores (a background job of a script) stays ignored and is not left blocked."""
    import os
    import shutil
    import signal
    import subprocess

    repo = Path(__file__).resolve().parents[3]
    python3 = shutil.which("python3")
    if not (repo / ".venv" / "bin" / "python").is_file() or python3 is None or subprocess.run(
            [python3, "-c", "import pyarrow"], capture_output=True).returncode == 0:
        pytest.skip("needs the checkout's .venv and a python3 on PATH without pyarrow")
    site = tmp_path / "site"
    site.mkdir()
    mask = tmp_path / "mask"
    (site / "sitecustomize.py").write_text(
        "import atexit, signal, sys\n"
        f"atexit.register(lambda: open({str(mask)!r}, 'w').write(sys.prefix + ' ' + str(sorted(int(s) for s in "
        "signal.pthread_sigmask(signal.SIG_BLOCK, []))) + ' ' + str(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)))\n")

    def ignore_int():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    p = subprocess.run([python3, str(repo / "hplt-shard"), "--version"], capture_output=True, text=True,
                       preexec_fn=ignore_int, env={**os.environ, "PYTHONPATH": str(site)})
    assert p.returncode == 0 and p.stdout.startswith("hplt-shard "), p.stderr
    prefix, blocked, ignored = mask.read_text().split(" ")
    assert Path(prefix).resolve() == (repo / ".venv").resolve()  # the venv's Python ran the command
    assert blocked == "[]" and ignored == "True"


@pytest.mark.slow  # starts a Python process
def test_a_checkout_whose_venv_python_this_user_cannot_run_says_so_in_one_line(tmp_path):
    """A colleague's shared checkout whose .venv was made from a Python under its owner's home: the sh
    lines cannot start it, python3 from PATH lacks pyarrow, and what the user gets is one line naming the
    interpreter and the way on, not a PermissionError traceback. (Tests run as root, for whom a file
    with no x bit is what a folder closed to other users is to them.)"""
    import shutil
    import subprocess

    python3 = shutil.which("python3", path="/usr/bin:/bin")
    if python3 is None or subprocess.run([python3, "-c", "import pyarrow"], capture_output=True).returncode == 0:
        pytest.skip("needs a system python3 without pyarrow")
    repo = Path(__file__).resolve().parents[3]
    checkout = tmp_path / "shared checkout"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(repo / "hplt-shard", checkout / "hplt-shard")
    (checkout / ".venv" / "bin" / "python3.11").write_text("")  # not executable
    (checkout / ".venv" / "bin" / "python").symlink_to("python3.11")
    p = subprocess.run([python3, str(checkout / "hplt-shard"), "--version"], capture_output=True, text=True)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert p.stderr == (f"hplt-shard: this checkout's Python, {checkout}/.venv/bin/python, cannot be run by this user "
                        "(it, or a folder on its way, is not readable and executable for you): its owner can rebuild "
                        ".venv from a Python every user can run, or set up a checkout of your own (README.md)\n")


# ---- the adversarial pass of 2026-12-06 (option combinations) --------------------------------------


def _dry(root: Path, out: str, run: Path, capsys, *extra: str, lang: str = LANG) -> tuple[int, str]:
    try:
        code = cli.main([lang, "--corpus", "v4", "--local-root", str(root), "--out", out, "--run-dir", str(run),
                         "--executor", "local", "--license", "CC0-1.0", "--counts-index", str(run.parent / "ci"),
                         "--dry-run", *extra])
    except SystemExit as exc:  # argparse's own refusal: its usage and one error line, exit 2
        code = exc.code
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def test_out_at_the_filesystem_root_or_empty_is_one_line_not_a_traceback(tmp_path, capsys):
    """`--out /` was a ValueError traceback; `--out ""` was taken as the current folder, which a run replaces."""
    root = make_corpus(tmp_path / "in", n_docs=20)
    code, said = _dry(root, "/", tmp_path / "run", capsys)
    assert code == 2 and "--out / is the filesystem's root: a run replaces OUT whole; give a folder of its own" in said
    assert "Traceback" not in said
    code, said = _dry(root, "", tmp_path / "run", capsys)
    assert code == 2 and "argument --out: an empty path: give a folder" in said


@pytest.mark.parametrize("beside", [".replaced", ".hplt-shard-claim", ".hplt-shard-claim.lock", ".hplt-shard-publish"])
def test_a_run_dir_where_a_run_keeps_its_files_beside_out_is_refused_up_front(tmp_path, capsys, beside):
    """--run-dir OUT.replaced ran partition, then failed at plan for good (moving the folder away moved the run);
    --run-dir OUT.hplt-shard-claim left a half-made run dir. Refused like --run-dir OUT.tmp."""
    root = make_corpus(tmp_path / "in", n_docs=20)
    out = tmp_path / "out"
    code, said = _dry(root, str(out), tmp_path / f"out{beside}", capsys)
    assert code == 2 and f"--run-dir {tmp_path / f'out{beside}'} and OUT" in said and "are the same path" in said
    assert not (tmp_path / f"out{beside}").exists()


def test_a_single_language_into_the_root_of_several_is_told_to_use_root_lang(tmp_path, capsys):
    from tests.unit.contract.test_output_root import small_root

    root_out = small_root(tmp_path, ("est_Latn", "fin_Latn"))
    corpus = make_corpus(tmp_path / "in", n_docs=20)
    code, said = _dry(corpus, str(root_out), tmp_path / "run", capsys)
    assert code == 2 and said.strip().endswith(
        f"--out {root_out} is the root of a run of several languages (it holds LANG/ outputs), and a run replaces OUT "
        f"whole: give --out {root_out / LANG}, or a new folder")



def test_a_folder_holding_outputs_not_named_as_languages_is_not_called_a_root(tmp_path, capsys):
    """`--out /tmp` where /tmp holds someone's output folder: named for what it holds, no LANG/ advice."""
    from tests.unit.contract.test_output_root import small_root

    folder = small_root(tmp_path, ("myout",))
    corpus = make_corpus(tmp_path / "in", n_docs=20)
    code, said = _dry(corpus, str(folder), tmp_path / "run", capsys)
    assert code == 2 and "(myout/)" in said and "several languages" not in said and f"{folder / LANG}" not in said

def test_a_language_output_that_is_a_symbolic_link_is_named_as_one(tmp_path, capsys):
    from shard_pipeline.contract.replace import NotReplaceable, check_replaceable

    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "root" / "fin_Latn"
    link.parent.mkdir()
    link.symlink_to(target)
    with pytest.raises(NotReplaceable) as err:
        check_replaceable(link)
    assert str(err.value) == (f"{link} is a symbolic link (to {target}); a run never replaces what a link points to: "
                              "remove the link (its target stays as it is), or choose another --out")


def test_empty_counts_index_or_publish_paths_and_abbreviated_options_are_refused(tmp_path, capsys):
    """An empty --counts-index wrote CWD/custom/...; an empty --publish OUT took the current folder; `--ou` for
    --out was accepted and reached the printed new-run commands, which then failed as printed."""
    root = make_corpus(tmp_path / "in", n_docs=20)
    for extra, said in ((("--counts-index", ""), "argument --counts-index: an empty path"),
                        (("--ou", str(tmp_path / "o")), "unrecognized arguments: --ou")):
        with pytest.raises(SystemExit) as exc:
            cli.main([LANG, "--corpus", "v4", "--local-root", str(root), "--executor", "local", "--license", "CC0-1.0",
                      "--run-dir", str(tmp_path / "run"), "--dry-run", *extra])
        assert exc.value.code == 2 and said in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["--publish", "", "remote:bucket"])
    assert exc.value.code == 2 and "argument --publish: an empty OUT or DEST" in capsys.readouterr().err
    assert not (Path.cwd() / "custom").exists()


def test_a_run_of_several_languages_refuses_a_run_dir_beside_its_root(tmp_path, capsys):
    """--run-dir ROOT.hplt-shard-claim made every later run into ROOT fail on a folder where its claim goes."""
    from shard_pipeline.input.synth import generate_corpus

    clean = tmp_path / "in" / "clean"
    for i, lang in enumerate(("fin_Latn", "swe_Latn")):
        generate_corpus(clean, lang, corpus="v4", n_docs=10, shard_names=["9_1"], seed=i + 1)
    out = tmp_path / "root"
    code = cli.main(["fin_Latn,swe_Latn", "--corpus", "v4", "--local-root", str(clean), "--out", str(out),
                     "--run-dir", f"{out}.hplt-shard-claim", "--executor", "local", "--license", "CC0-1.0", "--dry-run"])
    assert code == 2 and "are the same path" in capsys.readouterr().err
