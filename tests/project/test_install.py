"""A real install: `pip install .` (not editable) into a fresh venv gives a `hplt-shard` that runs
the bundled example from any folder, with its presets, schema and stage entry points packaged."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipeline_util import lang_dir, tree_bytes

REPO = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__", "runs", ".pytest_cache", "*.so")


@pytest.mark.slow
def test_pip_install_gives_a_command_that_runs_from_any_folder(tmp_path):
    src = tmp_path / "src"  # a copy, so that the build leaves nothing in the checkout
    shutil.copytree(REPO, src, symlinks=True, ignore=SKIP)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(src)], capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr
    shutil.rmtree(src)  # the installed package must not need its source
    if shutil.which("cc") or shutil.which("gcc"):  # the install compiled the read loop and the gather
        native = subprocess.run([str(venv / "bin" / "python"), "-c", "import shard_pipeline.input._scan, "
                                 "shard_pipeline.stages._gather"], capture_output=True, text=True, cwd=tmp_path)
        assert native.returncode == 0, native.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    hplt_shard = str(venv / "bin" / "hplt-shard")
    example = REPO / "examples" / "hplt-v4" / "clean"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}

    p = subprocess.run([hplt_shard, "eng_Latn", "--corpus", "v4", "--local-root", str(example), "--out", "X",
                        "--executor", "local", "--license", "CC0-1.0", "--shard-rows", "100"],
                       cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    out = elsewhere / "X"
    assert (out / "_MANIFEST.json").is_file()
    runs = list((elsewhere / "runs").iterdir())  # an installed command keeps runs/ in the current folder
    assert len(runs) == 1 and (lang_dir(runs[0], "eng_Latn") / "DONE").is_file()
    log = (lang_dir(runs[0], "eng_Latn") / "logs" / "partition" / "local_0.log").read_text()
    assert "-m shard_pipeline.worker.task partition" in log and "PYTHONPATH" not in log  # the installed package ran

    verify = subprocess.run([hplt_shard, "--verify", "X"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    packaged = ("import jsonschema; from shard_pipeline.paths import CARD_TEMPLATE, JOB_SCRIPT, MANIFEST_SCHEMA, PRESET_DIR; "
                "assert JOB_SCRIPT.is_file() and MANIFEST_SCHEMA.is_file() and (PRESET_DIR / 'lumi.conf').is_file() "
                "and CARD_TEMPLATE.is_file()")
    assert subprocess.run([str(venv / "bin" / "python"), "-c", packaged], cwd=elsewhere, env=env).returncode == 0

    # the packaged presets are found, and the bytes are those of the checkout's ./hplt-shard
    dry = subprocess.run([hplt_shard, "eng_Latn", "--local-root", str(example), "--preset", "lumi", "--executor", "local",
                          "--license", "CC0-1.0", "--run-dir", "runs/preview", "--dry-run"],  # the default one exists now
                         cwd=elsewhere, env=env, capture_output=True, text=True)
    assert dry.returncode == 0 and "dry run" in dry.stdout, dry.stderr
    ref = subprocess.run([str(REPO / "hplt-shard"), "eng_Latn", "--corpus", "v4", "--local-root", str(example),
                          "--out", str(tmp_path / "ref"), "--run-dir", str(tmp_path / "ref-run"), "--executor", "local",
                          "--license", "CC0-1.0", "--shard-rows", "100"], capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr
    assert tree_bytes(out) == tree_bytes(tmp_path / "ref")


def test_the_checkout_paths_are_the_packaged_files():
    """presets/, the schema and stages/slurm_job.sh in the checkout are links to the one packaged copy."""
    from shard_pipeline.paths import JOB_SCRIPT, MANIFEST_SCHEMA, PRESET_DIR

    assert (REPO / "presets").resolve() == PRESET_DIR
    assert (REPO / "docs" / "formats" / "corpus-manifest.schema.json").resolve() == MANIFEST_SCHEMA
    assert (REPO / "stages" / "slurm_job.sh").resolve() == JOB_SCRIPT


@pytest.mark.slow  # starts processes
def test_the_checkout_command_starts_its_venv_python_directly(tmp_path):
    """./hplt-shard is sh until it execs: the checkout's .venv Python when it exists (also through a
    symlink), without asking python3 on PATH first (a version manager's shim costs ~0.1 s a run);
    python3 from PATH otherwise. Python reads the sh lines as a string."""
    import os

    fake = tmp_path / "bin"
    fake.mkdir()
    marker = tmp_path / "python3-ran"
    (fake / "python3").write_text(f'#!/bin/sh\necho "$@" > {marker}\nexit 7\n')
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:/usr/bin:/bin"}

    link = tmp_path / "hs"
    link.symlink_to(REPO / "hplt-shard")
    if (REPO / ".venv" / "bin" / "python").is_file():
        p = subprocess.run([str(link), "--version"], env=env, capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.startswith("hplt-shard "), p.stderr
        assert not marker.exists()

    bare = tmp_path / "no venv here" / "hplt-shard"  # a folder without .venv, with a space in its name
    bare.parent.mkdir()
    shutil.copy(REPO / "hplt-shard", bare)
    p = subprocess.run([str(bare), "--version", "a b"], env=env, capture_output=True, text=True)
    assert p.returncode == 7 and marker.read_text() == f"{bare} --version a b\n"

    compiled = compile((REPO / "hplt-shard").read_text(), "hplt-shard", "exec")  # and it is still Python
    assert "command" in compiled.co_names
