"""A multi-language run: one ordinary run dir per language under RUNDIR, one chain for all.

RUNDIR/languages.json maps every global unit index of a stage to (language, task) of that
language's run dir, RUNDIR/<LANG>/, which is written by the same code as a single-language
run: so each language's output is byte-identical to its single run by construction. Partition
and write are arrays with one unit per array index; plan and finalize are one job each that
runs its selected units (one per language) in turn. Every stage after the first waits with
afterany, so one language's failure does not stop the others: a unit whose language has an
unfinished earlier stage says so and fails at once, and `--resume RUNDIR` redoes it.
"""
from __future__ import annotations

import bisect
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from shard_pipeline.run import live
from shard_pipeline.run.registry import STAGE_NAMES as STAGES
from shard_pipeline.run.rundir import RunDir, read_json, write_json_atomic

LANGUAGES_JSON = "languages.json"
MULTI_FORMAT = 1
SINGLE_JOB_STAGES = ("plan", "finalize")  # one job for all languages; array index 0
LANG_ENV = "HPLT_SHARD_LANG"  # set while a unit runs: fault injection can aim at one language


def is_multi(root: Path) -> bool:
    return (Path(root) / LANGUAGES_JSON).is_file()


@dataclass(frozen=True)
class Block:
    """Global unit indices first .. first+count-1 of a stage are tasks 0..count-1 of `lang`."""

    lang: str
    first: int
    count: int


@dataclass(frozen=True)
class MultiRun:
    root: Path
    langs: tuple[str, ...]
    blocks: dict[str, tuple[Block, ...]]

    def lang_dir(self, lang: str) -> Path:
        return self.root / lang

    def size(self, stage: str) -> int:
        return sum(b.count for b in self.blocks[stage])

    def locate(self, stage: str, index: int) -> tuple[str, int]:
        """(language, task) of a global unit index."""
        blocks = self.blocks[stage]
        i = bisect.bisect_right([b.first for b in blocks], index) - 1
        if i < 0 or index >= blocks[i].first + blocks[i].count:
            raise IndexError(f"{stage} has no unit {index} in {self.root} (units 0-{self.size(stage) - 1})")
        return blocks[i].lang, index - blocks[i].first

    def global_index(self, stage: str, lang: str, task: int) -> int:
        b = next(b for b in self.blocks[stage] if b.lang == lang)
        if not 0 <= task < b.count:
            raise IndexError(f"{lang} has no {stage} task {task}")
        return b.first + task

    def base(self, stage: str, lang: str) -> int:
        """First global index of `lang` in an array stage; 0 in a single-job stage (its one job is index 0)."""
        return 0 if stage in SINGLE_JOB_STAGES else next(b.first for b in self.blocks[stage] if b.lang == lang)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MULTI_FORMAT,
            "languages": [{"lang": l, "rundir": l} for l in self.langs],
            "single_job_stages": list(SINGLE_JOB_STAGES),
            "units": {s: [[b.lang, b.first, b.count] for b in self.blocks[s]] for s in STAGES},
        }


def unit_table(root: Path, tasks: Sequence[tuple[str, int, int]]) -> MultiRun:
    """Contiguous blocks per language, in the given order, from (lang, partition tasks, write tasks)."""
    blocks: dict[str, list[Block]] = {s: [] for s in STAGES}
    nxt = {s: 0 for s in STAGES}
    for lang, p, w in tasks:
        for stage, n in (("partition", p), ("plan", 1), ("write", w), ("finalize", 1)):
            blocks[stage].append(Block(lang, nxt[stage], n))
            nxt[stage] += n
    return MultiRun(Path(root), tuple(l for l, _, _ in tasks), {s: tuple(b) for s, b in blocks.items()})


def load(root: Path) -> MultiRun:
    doc = read_json(Path(root) / LANGUAGES_JSON)
    if doc.get("format") != MULTI_FORMAT:
        raise ValueError(f"{root}/{LANGUAGES_JSON} has format {doc.get('format')}; this version reads {MULTI_FORMAT}")
    blocks = {s: tuple(Block(l, f, c) for l, f, c in doc["units"][s]) for s in STAGES}
    return MultiRun(Path(root), tuple(e["lang"] for e in doc["languages"]), blocks)


def resolve(rundir: Path, stage: str, index: int) -> tuple[Path, int]:
    """The one mapping from a global unit index to (language run dir, task of that run dir)."""
    m = load(rundir)
    lang, task = m.locate(stage, index)
    return m.lang_dir(lang), task


def selection_path(root: Path, stage: str) -> Path:
    return Path(root) / "tasks" / f"{stage}-units.json"


def write_selection(root: Path, stage: str, units: Sequence[int]) -> None:
    """Which units the single job of `stage` runs in this submission (a resume selects the unfinished)."""
    write_json_atomic(selection_path(root, stage), {"stage": stage, "units": sorted(units)})


def selected(root: Path, stage: str) -> list[int]:
    p = selection_path(root, stage)
    return read_json(p)["units"] if p.exists() else list(range(load(root).size(stage)))


def units_of(rundir: Path, stage: str, index: int) -> list[int]:
    """Global units one job of `stage` runs: its array index, or the selection of a single-job stage."""
    return selected(rundir, stage) if stage in SINGLE_JOB_STAGES else [index]


def upstream_problem(run: RunDir, stage: str) -> str | None:
    """Why a unit cannot start because an earlier stage of its language is unfinished (plan checks its own)."""
    if stage in ("write", "finalize") and not run.plan_json.exists():
        return "no plan.json: an earlier stage of this language failed"
    if stage == "finalize":
        from shard_pipeline.run.runconfig import RunConfig

        cfg = RunConfig.from_json(read_json(run.config_json))
        missing = [t for t in range(cfg.execution.write_tasks) if not run.write_receipt(t).exists()]
        if missing:
            return f"write task(s) {', '.join(map(str, missing[:10]))} left no receipt"
    return None


def run_entry(stage: str, fn: Callable[[RunDir, int], Any], rundir: Path, index: int) -> int:
    """Run the units of one job of a multi-language run; 1 if any failed (the others still ran)."""
    m = load(rundir)
    failed: list[str] = []
    causes: dict[str, str] = {}
    for g in units_of(rundir, stage, index):
        lang_dir, task = resolve(rundir, stage, g)
        run, lang = RunDir(lang_dir), lang_dir.name
        alone = [sys.executable, "-m", "shard_pipeline.run.task", stage, str(run.root), "--task", str(task)]
        print(f"# unit {g} = {lang} {stage} task {task}; this unit alone: {shlex.join(alone)}", flush=True)
        why = upstream_problem(run, stage)
        if why:
            causes[lang] = f"{stage} task {task} skipped: {why}"
            print(f"ERROR: {lang}: {causes[lang]}", file=sys.stderr, flush=True)
            failed.append(lang)
            continue
        os.environ[LANG_ENV] = lang
        try:
            with live.recorded(run.root, stage, task):  # the language's --status and --resume see it alive
                result = fn(run, task)
        except Exception as exc:  # one language's failure must not stop the others
            causes[lang] = f"{type(exc).__name__}: {exc}"
            print(f"ERROR: {lang}: {causes[lang]}", file=sys.stderr, flush=True)
            failed.append(lang)
            continue
        finally:
            os.environ.pop(LANG_ENV, None)
        print(f"# {lang} {stage} task {task} done: {result}", flush=True)
    if failed:
        print(f"ERROR: {stage} failed for {', '.join(sorted(set(failed)))} ("
              + "; ".join(f"{l}: {causes[l][:300]}" for l in sorted(causes)) + "); the other languages went on; "
              f"fix the cause, then ./hplt-shard --resume {m.root}", file=sys.stderr, flush=True)
        return 1
    return 0
