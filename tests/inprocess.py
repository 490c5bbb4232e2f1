"""The local executor with every task run in this process, for fast tests of what a run leaves behind.

A run made this way is the real thing: the submitter writes its run dir, the local executor records its
submission, reports failures and releases OUT, and each task is the stage's own function
(`worker/entries.stage_main`) writing its own receipts, spills and shards. Only the process around a
task is left out (a fork and an interpreter per task), so a run of a few dozen documents takes
tenths of a second and stays in the fast tier. Use it through the `in_process` fixture (conftest.py).
"""
from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from shard_pipeline.contract.swap import swap_into_place
from shard_pipeline.run.registry import stage as registered
from shard_pipeline.run.rundir import RunDir
from shard_pipeline.submit import cli
from shard_pipeline.worker.entries import stage_main
from tests.pipeline_util import expected_output, lang_dir, make_corpus, run_cli


@dataclass
class InProcess:
    """What the next runs do: `stop_at` fails every task of that stage without running it (a task
    killed at its start). `ran` lists every (stage, task) started, in order; `errors` holds each
    failed task's exception."""

    stop_at: str | None = None
    ran: list[tuple[str, int]] = field(default_factory=list)
    errors: dict[tuple[str, int], BaseException] = field(default_factory=dict)

    def run_stage(self, python: str, stage: str, table, units: Sequence[int], jobs: int, progress=None) -> list:
        """executors/local.run_stage's contract (the failed units), each unit called here in turn."""
        from shard_pipeline.submit.executors.local import TaskResult, unit_log, unit_name

        from shard_pipeline.worker.landing import upstream_problem

        array = registered(stage).array
        failed = []
        for g in units:
            self.ran.append((stage, g))
            lang, t = table.locate(stage, g)
            run = RunDir(table.lang_dir(lang))
            why = upstream_problem(run, stage)  # a failed language's later units fail at once, as landing.py's
            error = RuntimeError(why) if why else self._run_one(stage, run, t, array)
            if error is not None:
                self.errors[(stage, g)] = error
                failed.append(TaskResult(stage, g, 1, unit_log(table, stage, g), unit_name(table, stage, g)))
        return failed

    def _run_one(self, stage: str, run: RunDir, task: int, array: bool) -> BaseException | None:
        if stage == self.stop_at:
            return RuntimeError(f"{stage} task {task} stopped by the test")
        main = stage_main(stage)
        try:
            main(run, task) if array else main(run)
        except Exception as exc:  # the task's failure, as its log's ERROR line would name it
            return exc
        return None


ARGS = ("--shard-rows", "10", "--partition-tasks", "2", "--write-tasks", "2", "--buckets", "3")


@dataclass(frozen=True)
class Made:
    """A run made in process: its corpus root, OUT and run dir, and the exit code of its submission."""

    root: Path  # the corpus root, holding LANG/
    out: Path
    run: RunDir  # LANG's run dir, RUNDIR/<LANG>
    code: int

    @property
    def rundir(self) -> Path:
        """RUNDIR, the run's own folder (run.json, languages.json, LANG/)."""
        return self.run.root.parent


_CORPORA: dict[tuple, Path] = {}


def corpus(base: Path, n_docs: int = 40, names: Sequence[str] = ("10_1.cc", "9_1.ia"), **kw) -> Path:
    """`make_corpus(base, ...)`, generated once per session and copied (with its files' mtimes) after that."""
    key = (n_docs, tuple(names), tuple(sorted(kw.items())))
    if key not in _CORPORA:
        cache = Path(tempfile.mkdtemp(prefix="hplt-shard-corpus-"))
        atexit.register(shutil.rmtree, cache, True)
        _CORPORA[key] = make_corpus(cache, n_docs=n_docs, names=names, **kw)
    root = base / _CORPORA[key].name
    shutil.copytree(_CORPORA[key], root)
    return root


def make_run(base, runner: InProcess, stop_at: str | None = None, *extra: str, n_docs: int = 40,
             names: Sequence[str] = ("10_1.cc", "9_1.ia"), args: Sequence[str] = ARGS, corpus_root=None) -> Made:
    """A new run of `n_docs` documents over `names` under `base`, every stage run in process up to `stop_at`
    (whose tasks fail: the run stops there, as when that stage's job was killed at its start)."""
    base = Path(base)
    root = corpus_root or corpus(base / "corpus", n_docs, names)
    runner.stop_at = stop_at
    try:
        code = run_cli(root, base / "out", base / "run", *args, *extra)
    finally:
        runner.stop_at = None
    return Made(root, base / "out", RunDir(lang_dir(base / "run")), code)


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    """Change a record the run wrote, in place (a test's damage: a receipt that does not add up)."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def resume(run: RunDir, *extra: str) -> int:
    """`--resume RUNDIR` with the local executor, every task in this process (the `in_process` fixture);
    `run`: RUNDIR or a language's run dir RUNDIR/<LANG> (its run is resumed)."""
    from shard_pipeline.run.unit_table import is_run_root

    root = run.root if is_run_root(run.root) else run.root.parent
    return cli.main(["--resume", str(root), "--executor", "local", *extra])


def newer_output_at_out(made: Made, monkeypatch) -> None:
    """Finalize stopped after it recorded what it replaces (swap.json); then a run of another configuration
    landed its output at OUT."""
    monkeypatch.setenv("HPLT_SHARD_FAULT", "finalize-before-swap::enospc")
    with pytest.raises(OSError):
        stage_main("finalize")(made.run)
    monkeypatch.delenv("HPLT_SHARD_FAULT")
    newer = made.out.with_name("newer")
    expected_output(made.root, newer, config_sha256="e" * 64, shard_rows=9)
    swap_into_place(newer, made.out)
