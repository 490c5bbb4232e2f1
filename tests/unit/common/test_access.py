"""Shared folders (LUMI's project and scratch trees): what another user's run could not do is refused at
--dry-run and at submit, naming the owner, instead of failing after every stage or leaving what its owner
cannot remove; a colleague's resume writes what the run's owner can read.

Tests run as root, who may do everything: the other user is stood in for by patching the effective uid
(and `os.access`, which root passes)."""
from __future__ import annotations

import os
import pwd
import shutil
import stat
from pathlib import Path

import pytest

from shard_pipeline import access
from shard_pipeline.contract import replace
from shard_pipeline.contract.replace import NotReplaceable, check_replaceable, check_tmp_free

NOBODY = pwd.getpwnam("nobody").pw_uid
COLLEAGUE = 4242  # a uid that owns nothing here


@pytest.fixture
def as_colleague(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: COLLEAGUE)


def previous_output(folder: Path) -> Path:
    """A folder that replace.check_replaceable takes for a previous output (its manifest lists all it holds)."""
    from shard_pipeline.contract.rules import Doc
    from shard_pipeline.contract.shard import write_shards

    docs = [Doc(id=f"web:{i}", text=f"text {i}", meta={"url": f"https://example.org/{i}", "license_spdx": "CC0-1.0",
                                                          "source_id": "10_1", "lang": "eng_Latn"}) for i in range(20)]
    write_shards(docs, folder, dataset="t", version="1", shard_rows=10)
    return folder


def deny_reading(monkeypatch, closed: Path) -> None:
    """--verify as a user who may not read the shard `closed` (root may read everything)."""
    from shard_pipeline.contract import verify_files

    real_hash, real_access = verify_files._stream_sha256, os.access

    def stream_sha256(path):
        if Path(path) == closed:
            raise PermissionError(13, "Permission denied", str(path))
        return real_hash(path)

    monkeypatch.setattr(verify_files, "_stream_sha256", stream_sha256)
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != closed and real_access(p, mode))


def hide(monkeypatch, private) -> None:
    """As a user for whom the paths `private(path)` picks cannot even be looked at (in a folder of mode 700)."""
    real_stat, real_access = os.stat, os.access

    def hidden(path) -> bool:
        return not isinstance(path, int) and private(Path(os.fsdecode(path)))

    def stat(path, *args, **kwargs):
        if hidden(path):
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "access", lambda p, mode: not hidden(p) and real_access(p, mode))


def sticky_folder_with_their_out(tmp_path: Path) -> tuple[Path, Path]:
    """A sticky folder (mode 1777, as /tmp) holding an empty OUT of user nobody."""
    sticky = tmp_path / "scratch"
    sticky.mkdir()
    sticky.chmod(0o1777)
    out = sticky / "out"
    out.mkdir()
    os.chown(out, NOBODY, -1)
    return sticky, out


def test_an_output_in_a_sticky_folder_that_is_another_users_is_refused_naming_its_owner(tmp_path, as_colleague):
    sticky, out = sticky_folder_with_their_out(tmp_path)
    why = access.replace_refusal(out)
    assert why == f"{sticky} is sticky (only an entry's owner may rename or delete it there) and {out} belongs to nobody"
    sticky.chmod(0o777)  # not sticky: a rename needs only the folder's write permission
    assert access.replace_refusal(out) is None


def test_a_previous_output_whose_folder_this_user_cannot_write_is_refused(tmp_path, monkeypatch, as_colleague):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "shard.parquet").write_bytes(b"x")
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != out / "sub" and real(p, mode))
    assert access.replace_refusal(out) == (f"{out / 'sub'} is root's and not writable for this user, so the previous "
                                           "output's files in it could not be deleted")


def test_check_replaceable_refuses_before_the_run_what_the_swap_would_fail_on(tmp_path, monkeypatch):
    out = previous_output(tmp_path / "shared" / "out")
    assert check_replaceable(out) is not None  # root: replaceable
    out.parent.chmod(0o1777)
    os.chown(out, NOBODY, -1)
    monkeypatch.setattr(os, "geteuid", lambda: COLLEAGUE)
    with pytest.raises(NotReplaceable, match=r"holds a previous output this user cannot replace: .* is sticky .* "
                                             r"belongs to nobody; ask its owner to run this, or choose another --out"):
        check_replaceable(out)


def test_an_unreadable_manifest_is_said_so_not_called_missing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "_MANIFEST.json").write_text("{}")

    def denied(folder):
        raise PermissionError(13, "Permission denied", str(folder / "_MANIFEST.json"))

    monkeypatch.setattr(replace, "load_manifest", denied)
    with pytest.raises(NotReplaceable) as err:
        check_replaceable(out)
    assert str(err.value).startswith(f"{out}/_MANIFEST.json cannot be read by this user (Permission denied), so {out} "
                                     "cannot be proved a previous output; refusing to replace it (")


def test_a_folder_this_user_cannot_write_is_named_at_its_nearest_existing_ancestor(tmp_path, monkeypatch, as_colleague):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, -1)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != theirs and real(p, mode))
    assert access.write_refusal(theirs / "a" / "b") == (
        f"this user cannot write in {theirs} (it belongs to nobody: use a folder of your own, or ask nobody for access)")
    assert access.write_refusal(tmp_path / "mine") is None


def test_the_way_on_opens_to_the_users_group_only_when_it_is_theirs(tmp_path, monkeypatch, as_colleague):
    logs = tmp_path / "logs"
    logs.mkdir()
    os.chown(logs, NOBODY, 0)
    monkeypatch.setattr(os, "getegid", lambda: 0)
    monkeypatch.setattr(os, "getgroups", lambda: [0])
    assert access.access_step(logs / "partition" / "x.log", reading=True) == (
        f"it belongs to nobody: ask them to open it to your group (chmod -R g+rX {logs}), or run this as nobody")
    monkeypatch.setattr(os, "getegid", lambda: 777)
    monkeypatch.setattr(os, "getgroups", lambda: [777])
    assert access.access_step(logs, reading=True) == ("it belongs to nobody, in a group you are not in: ask them to "
                                                      "share it with a group of yours, or run this as nobody")


def test_a_resume_of_another_users_run_dir_writes_with_the_group_bits_it_grants(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.chown(run, NOBODY, -1)
    run.chmod(0o2775)
    old = os.umask(0o077)
    try:
        access.share_like(run)
        assert os.umask(0o077) == 0o007  # group rwx opened, others still closed
        os.chown(run, os.geteuid(), -1)
        access.share_like(run)  # this user's own run dir: the umask is the user's business
        assert os.umask(0o077) == 0o077
    finally:
        os.umask(old)
    assert stat.S_IMODE(run.stat().st_mode) == 0o2775


def test_a_staging_folder_of_another_run_says_it_may_still_be_running(tmp_path):
    out = tmp_path / "out"
    tmp = tmp_path / "out.tmp"
    tmp.mkdir()
    (tmp / replace.TMP_MARKER).write_text(str(tmp_path / "other run"))
    with pytest.raises(NotReplaceable) as err:
        check_tmp_free(out, str(tmp_path / "this run"))
    said = str(err.value)
    assert "which may still be running: see where it stands (" in said and "--status" in said
    assert "once it has stopped, finish it with" in said and "--resume" in said


def test_verify_of_a_shard_this_user_may_not_read_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """Not "damaged" (exit 1) and not two lines for one cause: the file is unchecked, and the line says why."""
    from shard_pipeline.contract import verify

    out = previous_output(tmp_path / "out")
    closed = sorted(out.glob("shard-*.parquet"))[1]
    deny_reading(monkeypatch, closed)
    assert verify.main([str(out)]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{closed.name}: cannot be read by this user (Permission denied), "
                                                   "so it was not checked; it is this user's: give yourself access")
    monkeypatch.undo()
    assert verify.main([str(out)]) == 0


def test_an_empty_out_of_another_user_in_a_sticky_folder_is_refused_too(tmp_path, as_colleague):
    """It is swapped out as a previous output is: the rename fails there for anyone but its owner."""
    sticky, out = sticky_folder_with_their_out(tmp_path)
    with pytest.raises(NotReplaceable, match=r"is an empty folder this user cannot replace: .* is sticky"):
        check_replaceable(out)
    sticky.chmod(0o777)
    assert check_replaceable(out) is None


def test_a_resume_into_a_folder_that_is_not_setgid_says_how_to_keep_the_group(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.chown(run, NOBODY, 4343)
    run.chmod(0o775)
    old = os.umask(0o022)
    try:
        said = access.share_like(run)
    finally:
        os.umask(old)
    assert said is not None and said.startswith(f"{run} is nobody's and its files' group is group 4343, but what this "
                                                "resume writes gets your primary group")
    assert "newgrp" in said and f"chmod g+s {run}" in said
    run.chmod(0o2775)
    old = os.umask(0o022)
    try:
        assert access.share_like(run) is None  # setgid: what is written takes the folder's group
    finally:
        os.umask(old)


def test_verify_of_an_output_this_user_cannot_list_is_not_ok(tmp_path, monkeypatch, capsys):
    """A folder it may not list (mode 711) was taken as empty: --verify said OK over a stray file."""
    from shard_pipeline.contract import verify

    out = previous_output(tmp_path / "out")
    real_scandir = os.scandir

    def scandir(path="."):
        if Path(path) == out:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert verify.main([str(out)]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines and lines[0].startswith(".: cannot be read by this user (Permission denied), so it was not checked")


@pytest.mark.slow  # runs the pipeline
def test_a_colleagues_resume_that_could_not_replace_out_is_refused_before_it_starts(tmp_path, monkeypatch, capsys):
    from shard_pipeline.submit import cli
    from tests.pipeline_util import lang_dir, make_corpus, run_cli

    root = make_corpus(tmp_path / "in", n_docs=40)
    shared = tmp_path / "scratch"
    shared.mkdir()
    assert run_cli(root, shared / "out", tmp_path / "run1", "--shard-rows", "10") == 0
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:kill")
    assert run_cli(root, shared / "out", tmp_path / "run2", "--shard-rows", "10") != 0
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    shared.chmod(0o1777)
    os.chown(shared / "out", NOBODY, -1)
    capsys.readouterr()
    old = os.umask(0o022)
    try:
        monkeypatch.setattr(os, "geteuid", lambda: COLLEAGUE)
        assert cli.main(["--resume", str(tmp_path / "run2")]) == 2
    finally:
        os.umask(old)
    err = capsys.readouterr().err
    assert (f"--out {shared / 'out'} holds a previous output this user cannot replace: {shared} is sticky (only an "
            f"entry's owner may rename or delete it there) and {shared / 'out'} belongs to nobody; ask its owner to resume "
            "this run; "
            "nothing was started") in err
    assert not (tmp_path / "run2" / "write" / "task-00000.receipt.json").exists()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert cli.main(["--resume", str(tmp_path / "run2")]) == 0  # its owner's resume finishes it


def test_a_previous_output_missing_a_listed_folder_is_still_replaceable_by_its_tree(tmp_path, monkeypatch, as_colleague):
    """The tree from the manifest names what a damaged output lost: nothing there is to delete, so it is no refusal;
    a sticky folder of someone else's holding a file of theirs still is."""
    out = tmp_path / "out"
    tree = [(str(out), ["gone"], ["_MANIFEST.json"]), (str(out / "gone"), [], ["a.parquet"])]
    out.mkdir()
    (out / "_MANIFEST.json").write_text("{}")
    assert access.replace_refusal(out, tree) is None
    (out / "gone").mkdir()
    (out / "gone" / "a.parquet").write_bytes(b"x")
    os.chown(out / "gone", NOBODY, -1)
    os.chown(out / "gone" / "a.parquet", NOBODY, -1)
    (out / "gone").chmod(0o1777)
    assert access.replace_refusal(out, tree) == (f"{out / 'gone'} is sticky and {out / 'gone' / 'a.parquet'} belongs "
                                                 "to nobody, so it could not be deleted")


def test_the_claim_beside_out_refuses_in_the_words_of_the_dry_run(tmp_path, monkeypatch, as_colleague):
    """Permissions can change between --dry-run and submit, so the claim checks again: one message for one cause."""
    from shard_pipeline.errors import UsageError
    from shard_pipeline.run import claim

    out = tmp_path / "theirs" / "out"
    out.parent.mkdir()
    os.chown(out.parent, NOBODY, -1)
    real_access, real_open = os.access, os.open
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != out.parent and real_access(p, mode))

    def denied(p, *args, **kwargs):
        if str(p).endswith(".lock"):
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(p, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(UsageError) as err:
        claim.check_claimable(out, tmp_path / "run")
    assert str(err.value) == access.place_refusal(out.parent, f"--out {out} cannot be written here", "--out")
    assert str(err.value).startswith(f"--out {out} cannot be written here: this user cannot write in {out.parent} "
                                     "(it belongs to nobody")


@pytest.mark.slow  # runs the pipeline
def test_status_of_a_run_whose_logs_this_user_may_not_read_shows_the_table_and_says_what_it_cannot(
        tmp_path, monkeypatch, capsys):
    """A colleague's run written under `umask 077`: --status used to stop at the first log with exit 2 and no table.
    The receipts say what is done and the outcome records what it used; a log needed and unread is said, with the way
    on."""
    from shard_pipeline.submit import cli
    from tests.pipeline_util import lang_dir, make_corpus, run_cli

    root = make_corpus(tmp_path / "in", n_docs=40)
    done, failed = tmp_path / "done", tmp_path / "failed"
    assert run_cli(root, tmp_path / "out1", done, "--shard-rows", "10") == 0
    monkeypatch.setenv("HPLT_SHARD_FAULT", "write-start:0:kill")
    assert run_cli(root, tmp_path / "out2", failed, "--shard-rows", "10") != 0
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    capsys.readouterr()
    hide(monkeypatch, lambda p: p.parent.parent.name == "logs"
         and p.parent.parent.parent in (done, failed, lang_dir(done), lang_dir(failed)))
    assert cli.main(["--status", str(done)]) == 0
    out = capsys.readouterr().out
    # what is done, from the receipts, and what it used, from the outcome records: a done task's log is not read
    assert "partition       2      2" in out and "FINISHED partition 2 tasks" in out and "state: done" in out
    assert "UNREAD " not in out
    code = cli.main(["--status", str(failed)])
    out = capsys.readouterr().out
    assert code != 2 and out.startswith(f"run {failed}")
    unread = next(l for l in out.splitlines() if l.startswith("UNREAD "))
    assert f" (the first: write task 0, {lang_dir(failed)}/logs/write/" in unread  # the unfinished tasks' logs
    assert "not readable by this user, so their last lines are not shown" in unread and "it is this user's" in unread
    assert "a task among them without a receipt is counted as not started even if it failed" in out


def test_a_colleagues_resume_of_a_run_it_cannot_write_is_refused_first_naming_the_owner(tmp_path, monkeypatch, capsys,
                                                                                     as_colleague):
    """A run made under `umask 022` (folders 755): the resume used to warn about groups, then fail on its lock
    file with "reading the run directory failed"; now one refusal, before any lock or warning."""
    from shard_pipeline.submit import cli

    run = tmp_path / "run"
    (run / "logs" / "write").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    os.chown(run / "logs" / "write", NOBODY, -1)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != run / "logs" / "write" and real(p, mode))
    assert access.resume_refusal(run) == (
        f"this user cannot resume {run}: it cannot write in {run / 'logs' / 'write'}, which is nobody's; ask nobody to "
        f"resume it (./hplt-shard --resume {run}), or to open the run to your group (chmod -R g+rwX {run}); nothing was "
        "started")
    assert cli.main(["--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"hplt-shard: {access.resume_refusal(run)}"
    assert not (run / ".run.lock").exists()
    monkeypatch.setattr(os, "access", real)
    assert access.resume_refusal(run) is None


@pytest.mark.slow  # runs the pipeline
def test_a_resume_refuses_at_once_what_its_finalize_would_refuse_even_after_a_finalize_attempt(tmp_path, monkeypatch,
                                                                                              capsys):
    """A file kept in OUT after the run began: the resume used to redo its stages and fail at finalize (its check
    was skipped once an attempt had recorded swap.json), and the message offered another --out, which a resume
    cannot choose."""
    from shard_pipeline.contract.manifest import load_manifest
    from shard_pipeline.submit import cli
    from tests.pipeline_util import lang_dir, make_corpus, run_cli

    root = make_corpus(tmp_path / "in", n_docs=40)
    out, run = tmp_path / "out", tmp_path / "run2"
    assert run_cli(root, out, tmp_path / "run1", "--shard-rows", "10") == 0
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-before-swap::kill")
    assert run_cli(root, out, run, "--shard-rows", "20") != 0
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    assert (lang_dir(run) / "swap.json").exists()
    (out / "notes.txt").write_text("mine")
    finalize_log = sorted((run / "logs" / "finalize").iterdir())
    before = [p.stat().st_mtime_ns for p in finalize_log]
    capsys.readouterr()
    assert cli.main(["--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith(f"{out} holds 1 entry its manifest does not list (notes.txt); a run replaces OUT whole "
                                f"and would delete them: move them out of {out}, then resume the run; nothing was started")
    assert "another --out" not in err
    assert [p.stat().st_mtime_ns for p in sorted((run / "logs" / "finalize").iterdir())] == before
    (out / "notes.txt").unlink()
    assert cli.main(["--resume", str(run)]) == 0
    assert load_manifest(out)["params"]["shard_rows"] == 20


@pytest.mark.slow  # runs the pipeline
def test_a_resume_refuses_at_once_after_the_swap_too_and_over_an_identical_or_newer_output(tmp_path, monkeypatch,
                                                                                          capsys):
    """OUT is "already swapped" only when finalize itself would say so (registry.already_swapped): a file added after
    the swap, an identical earlier output with a file added, and a newer output of another configuration are each
    refused at once (exit 2), not after the write stage was redone and finalize failed."""
    from shard_pipeline.submit import cli
    from tests.pipeline_util import lang_dir, make_corpus, run_cli

    root = make_corpus(tmp_path / "in", n_docs=40)
    out = tmp_path / "out"

    def stopped(run: Path, fault: str, *rows: str) -> None:
        monkeypatch.setenv("HPLT_SHARD_FAULT", fault)
        assert run_cli(root, out, run, *rows) != 0
        monkeypatch.delenv("HPLT_SHARD_FAULT")

    def refused(run: Path) -> str:
        capsys.readouterr()
        assert cli.main(["--resume", str(run)]) == 2
        return capsys.readouterr().err

    stopped(tmp_path / "after", "finalize-after-swap::enospc", "--shard-rows", "10")  # swapped in, last steps failed
    (out / "notes.txt").write_text("mine")
    assert "(notes.txt)" in refused(tmp_path / "after")
    assert not any((tmp_path / "after" / "write").glob("*.progress.json"))  # no write task ran again
    (out / "notes.txt").unlink()
    assert cli.main(["--resume", str(tmp_path / "after")]) == 0
    stopped(tmp_path / "same", "finalize-before-swap::kill", "--shard-rows", "10")  # OUT: an identical output
    (out / "notes.txt").write_text("mine")
    assert "(notes.txt)" in refused(tmp_path / "same")
    (out / "notes.txt").unlink()
    assert cli.main(["--resume", str(tmp_path / "same")]) == 0
    stopped(tmp_path / "older", "finalize-before-swap::kill", "--shard-rows", "20")
    assert run_cli(root, tmp_path / "newer-out", tmp_path / "newer", "--shard-rows", "15") == 0
    shutil.rmtree(out)
    shutil.copytree(tmp_path / "newer-out", out)  # another configuration's output lands after the older run's attempt
    assert "holds another output now" in refused(tmp_path / "older")
