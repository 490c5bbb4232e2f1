"""The printed next steps: one definition each, and every path pastes as one shell word."""
import os
import shlex
from pathlib import Path

from shard_pipeline.commands import PROGRAM_ENV, command, program, resume_command, status_command, verify_command

REPO = Path(__file__).resolve().parents[3]


def test_each_step_pastes_back_to_its_argv(monkeypatch):
    monkeypatch.delenv(PROGRAM_ENV, raising=False)
    PROGRAM = program()
    odd = "/scratch/my run/it's"  # a space and a quote: both must survive the shell
    assert shlex.split(resume_command(odd, "--mem", "4G")) == [PROGRAM, "--resume", odd, "--mem", "4G"]
    assert shlex.split(status_command(odd)) == [PROGRAM, "--status", odd]
    assert shlex.split(verify_command(odd)) == [PROGRAM, "--verify", odd]
    assert shlex.split(command("scancel", "12", "13")) == ["scancel", "12", "13"]


def test_a_plain_path_is_printed_as_it_is(monkeypatch):
    monkeypatch.delenv(PROGRAM_ENV, raising=False)
    monkeypatch.chdir(REPO)  # the README's way: ./hplt-shard from the checkout
    assert resume_command("/scratch/run") == "./hplt-shard --resume /scratch/run"
    assert status_command("/scratch/run") == "./hplt-shard --status /scratch/run"


def test_the_program_is_the_readmes_way_from_the_checkout_else_its_absolute_path(tmp_path, monkeypatch):
    tool = tmp_path / "checkout" / "hplt-shard"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    monkeypatch.setenv(PROGRAM_ENV, str(tool))
    monkeypatch.chdir(tool.parent)  # started as the README says: ./hplt-shard
    assert program() == "./hplt-shard" and resume_command("/r").startswith("./hplt-shard --resume")
    monkeypatch.chdir(tmp_path)  # started from elsewhere (its full path, a symlink on PATH): ./hplt-shard is not there
    assert program() == str(tool) and shlex.split(status_command("/r")) == [str(tool), "--status", "/r"]
    (tmp_path / "hplt-shard").write_text("another one\n")  # a different file of that name here is not the tool
    assert program() == str(tool)


def test_an_installed_command_found_on_path_is_named_by_its_name(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    tool = bin_dir / "hplt-shard"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv(PROGRAM_ENV, str(tool))
    monkeypatch.chdir(tmp_path)
    assert program() == str(tool)  # not on PATH: its path
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert program() == "hplt-shard"


def test_a_task_rerun_by_hand_names_its_own_checkout(tmp_path, monkeypatch):
    """A task's first log line runs it with `python -m` (no HPLT_SHARD_PROGRAM): from another folder, whose
    own ./hplt-shard may be something else, its next steps name this checkout's tool by its path."""
    monkeypatch.delenv(PROGRAM_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hplt-shard").write_text("#!/bin/sh\necho FAKE\n")
    assert program() == str(REPO / "hplt-shard")
