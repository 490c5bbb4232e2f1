"""The front door: --version, --help examples that run as written, Slurm asked for without sbatch."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from shard_pipeline.submit import cli
from shard_pipeline.submit.args import build_parser

REPO = Path(__file__).resolve().parents[2]


def test_version_names_the_package_version_and_the_commit(capsys):
    assert cli.main(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert re.match(r"hplt-shard \d+\.\d+\.\d+ \(commit ", line), line
    assert head and head in line


def test_slurm_without_sbatch_is_one_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch anywhere
    rc = cli.main(["eng_Latn", "--corpus", "v4", "--local-root", str(REPO / "examples/hplt-v4/clean"),
                   "--license", "CC0-1.0", "--dry-run", "--executor", "slurm"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "needs sbatch, which is not on PATH" in err and "--executor local" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("bad", ["0", "-1"])
def test_max_tasks_that_is_not_positive_is_refused_not_ignored(bad, capsys):
    rc = cli.main(["eng_Latn", "--corpus", "v4", "--local-root", str(REPO / "examples/hplt-v4/clean"),
                   "--license", "CC0-1.0", "--dry-run", "--executor", "local", f"--max-tasks={bad}"])
    assert rc == 2 and f"MAX_TASKS '{bad}' is not a positive integer" in capsys.readouterr().err


def help_examples() -> list[str]:
    """The --help examples marked to run as written here (the block before the LUMI ones)."""
    epilog = build_parser().epilog
    here = epilog.split("On LUMI")[0]
    joined = here.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("./hplt-shard")]


@pytest.mark.slow
def test_help_examples_run_as_written(tmp_path):
    examples = help_examples()
    assert len(examples) == 2
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # a copy of the checkout's entry, data and package, so the example's out/ and runs/ land in tmp
    work = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(REPO), str(work)], check=True)
    for rel in ("shard_pipeline", "hplt-shard", "stages", "examples"):  # the working tree, not only HEAD
        subprocess.run(["cp", "-a", str(REPO / rel), str(work / Path(rel).parent)], check=True)
    from tests.project.test_readme_snippets import first_command

    env["HPLT_SHARD_HOME"] = str(work)  # its default run dir in the copy, not in the session's home other tests use
    for ex in [shlex.join(["./hplt-shard", *first_command()]), *examples]:  # "after the README's first command"
        argv = shlex.split(ex)
        r = subprocess.run([sys.executable, *argv], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (ex, r.stderr[-2000:])
    assert (work / "out/help-example/_MANIFEST.json").is_file()


def test_several_languages_as_separate_arguments_get_the_command_that_works(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["fin_Latn", "swe_Latn", "dan_Latn", "--corpus", "v4", "--dry-run"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: swe_Latn dan_Latn" in err and "(fin_Latn,swe_Latn,dan_Latn)" in err
    with pytest.raises(SystemExit):
        cli.main(["fin_Latn", "--bogus", "--dry-run"])
    assert "comma-separated" not in capsys.readouterr().err  # an unknown option is only named
