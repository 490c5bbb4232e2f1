"""The README's "Reading the output" snippets run as written (#21), on the outputs the README says
they read: the first command's `out/example`, and the same command made with `--dataset-card`
(`out/card`) and with `--split-layout dirs --dataset-card` (`out/dirs`). Offline: datasets reads
local files only."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from shard_pipeline.submit import cli

pytestmark = pytest.mark.slow  # end-to-end: runs the pipeline and the snippets in Python processes
REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}")
    return README[start:README.index("\n## ", start + 1)]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def first_command() -> list[str]:
    """The README's first command, from its first bash block (after the venv and install steps)."""
    line = next(l for l in blocks(README, "bash")[0].splitlines() if "./hplt-shard " in l)
    argv = shlex.split(line.rsplit("&& ", 1)[1])
    assert argv[0] == "./hplt-shard"
    return argv[1:]


def with_out(argv: list[str], out: str, *extra: str) -> list[str]:
    argv = list(argv)
    argv[argv.index("--out") + 1] = out
    return [*argv, "--run-dir", f"runs/{Path(out).name}", *extra]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """The three outputs in a folder that holds `examples/` as a checkout does; the folder is the cwd."""
    home = tmp_path_factory.mktemp("readme")
    (home / "examples").symlink_to(REPO / "examples")
    cwd = os.getcwd()
    os.chdir(home)
    try:
        argv = first_command()
        assert cli.main(argv) == 0
        assert cli.main(with_out(argv, "out/card", "--dataset-card")) == 0
        assert cli.main(with_out(argv, "out/dirs", "--split-layout", "dirs", "--dataset-card")) == 0
    finally:
        os.chdir(cwd)
    val = {name: json.loads((home / "out" / name / "_MANIFEST.json").read_text())["splits"]["val"]
           for name in ("example", "card", "dirs")}
    assert all(v > 0 for v in val.values())  # a snippet that reads no validation row would prove little
    return home, val


SNIPPETS = blocks(section("Reading the output"), "python")


def test_the_section_has_the_snippets_this_test_runs():
    assert len(SNIPPETS) >= 4 and any('load_dataset("out/dirs")' in s for s in SNIPPETS)
    assert 'load_dataset("out/card", "validation")' in section("Reading the output")
    assert "--out out/card --dataset-card" in section("Reading the output")
    assert "--out out/dirs --split-layout dirs --dataset-card" in section("Reading the output")


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"python{i}" for i in range(len(SNIPPETS))])
def test_every_python_snippet_runs_as_written(outputs, tmp_path, snippet):
    home, val = outputs
    which = "dirs" if "out/dirs" in snippet else "card" if "out/card" in snippet else "example"
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "PYTHONPATH": str(REPO)}
    code = snippet + "\nprint('VALIDATION_ROWS', len(validation))\n"
    p = subprocess.run([sys.executable, "-c", code], cwd=home, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"VALIDATION_ROWS {val[which]}" in p.stdout.splitlines(), p.stdout


def test_the_sql_snippet_runs_as_written(outputs, monkeypatch):
    duckdb = pytest.importorskip("duckdb")
    home, val = outputs
    (sql,) = blocks(section("Reading the output"), "sql")
    monkeypatch.chdir(home)
    assert duckdb.connect().execute(sql.strip().rstrip(";")).fetchone()[0] == val["example"]
