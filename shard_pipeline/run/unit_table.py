"""The unit table of a run (RUNDIR/languages.json): which (language, task) every global unit index of a stage
is, and C units per array task of partition and write. Plan and finalize are one job each, which runs its
selected units (one per language) in turn (worker/landing.py). A run of one language is one with one element.
"""
from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from shard_pipeline.run.registry import STAGE_NAMES as STAGES
from shard_pipeline.run.registry import STAGES as STAGE_DEFS
from shard_pipeline.files import write_json_atomic
from shard_pipeline.run.records import DamagedRunFile
from shard_pipeline.run.typed import WrongType, parse_as
from shard_pipeline.run.rundir import RunDir, read_json
from shard_pipeline.run.run_json import read_run_json

MULTI_FORMAT = 1

SINGLE_JOB_STAGES = tuple(s.name for s in STAGE_DEFS if not s.array)  # one job each (array index 0)


def is_run_root(root: Path) -> bool:
    """`root` is a run's RUNDIR (it holds languages.json), not one language's run dir RUNDIR/<LANG>."""
    return RunDir(Path(root)).languages_json.is_file()


def units_of(index: int, cpus: int, n_units: int) -> range:
    """The units array task `index` runs: [index*C, min((index+1)*C, n)); empty past the end."""
    if cpus < 1 or index < 0 or n_units < 0:
        raise ValueError(f"no group {index} of {cpus} units among {n_units}")
    return range(min(index * cpus, n_units), min((index + 1) * cpus, n_units))


def group_count(n_units: int, cpus: int) -> int:
    """Array tasks needed for `n_units` units, C per task."""
    return -(-n_units // max(1, cpus))


def groups_of(units: Iterable[int], cpus: int) -> list[int]:
    """The array indices whose groups hold these units (a sparse resubmission's `--array`)."""
    return sorted({u // max(1, cpus) for u in units})


@dataclass(frozen=True)
class Block:
    """Global unit indices first .. first+count-1 of a stage are tasks 0..count-1 of `lang`."""

    lang: str
    first: int
    count: int


@dataclass(frozen=True)
class LanguageDir:
    lang: str
    rundir: str  # relative to RUNDIR


@dataclass(frozen=True)
class LanguagesFile:
    """languages.json as read: what `UnitTable.to_json` wrote, type-checked."""

    format: int
    languages: list[LanguageDir]
    single_job_stages: list[str]
    units: dict[str, list[tuple[str, int, int]]]
    cpus: dict[str, int] = field(default_factory=dict)  # absent: C = 1
    out: str = ""  # the output root (run.json has it too)


@dataclass(frozen=True)
class UnitTable:
    """Every unit of a run: which language's task a global unit index is, and C per array task."""

    root: Path
    langs: tuple[str, ...]
    blocks: dict[str, tuple[Block, ...]]
    cpus: dict[str, int] | None = None  # array stage -> C, global units per array task (absent: 1)

    def is_array(self, stage: str) -> bool:
        return stage not in SINGLE_JOB_STAGES

    def item_noun(self, stage: str) -> str:
        """What the progress line counts: units of an array stage, jobs (one per language) of plan and finalize."""
        return "unit" if self.is_array(stage) else "job"

    def units_per_task(self, stage: str) -> int:
        """C of an array stage: units one array task runs at once; 1 for plan and finalize."""
        return (self.cpus or {}).get(stage, 1) if stage not in SINGLE_JOB_STAGES else 1

    def array_indices(self, stage: str, units: Sequence[int]) -> list[int]:
        """The array indices that run these global units (a resume's sparse `--array`): as in a single run."""
        return [0] if stage in SINGLE_JOB_STAGES else groups_of(units, self.units_per_task(stage))

    def units_of(self, stage: str, index: int) -> list[int]:
        """Global units of array index `index`: the group mapping of a single run (units_of)."""
        return list(units_of(index, self.units_per_task(stage), self.size(stage)))

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
            "cpus": dict(self.cpus or {}),
            "units": {s: [[b.lang, b.first, b.count] for b in self.blocks[s]] for s in STAGES},
        }


def table_of(root: Path, tasks: Sequence[tuple[str, int, int]], cpus: int = 1) -> UnitTable:
    """Contiguous blocks per language, in the given order, from (lang, partition tasks, write tasks); with C
    `cpus` per array task, units of several languages may share one."""
    blocks: dict[str, list[Block]] = {s: [] for s in STAGES}
    nxt = {s: 0 for s in STAGES}
    for lang, p, w in tasks:
        for stage, n in (("partition", p), ("plan", 1), ("write", w), ("finalize", 1)):
            blocks[stage].append(Block(lang, nxt[stage], n))
            nxt[stage] += n
    table = UnitTable(Path(root), tuple(l for l, _, _ in tasks), {s: tuple(b) for s, b in blocks.items()})
    return with_cpus(table, cpus)


def load(root: Path) -> UnitTable:
    """The unit table of a run: its languages.json."""
    path = RunDir(Path(root)).languages_json
    try:
        doc = parse_as(LanguagesFile, read_json(path))
        if missing := [s for s in STAGES if s not in doc.units]:
            raise WrongType("is missing", f"units.{missing[0]}")
    except WrongType as exc:
        raise DamagedRunFile(path, str(exc)) from None
    if doc.format != MULTI_FORMAT:
        raise ValueError(f"{path} has format {doc.format}; this version reads {MULTI_FORMAT}")
    blocks = {s: tuple(Block(l, f, c) for l, f, c in doc.units[s]) for s in STAGES}
    return UnitTable(Path(root), tuple(e.lang for e in doc.languages), blocks, dict(doc.cpus))


def with_cpus(table: UnitTable, cpus: int | None) -> UnitTable:
    """The table with C units per array task (at most a stage's units); as it is when `cpus` is None."""
    if cpus is None:
        return table
    return replace(table, cpus={s: max(1, min(int(cpus), table.size(s))) for s in STAGES if s not in SINGLE_JOB_STAGES})


def save_cpus(table: UnitTable) -> None:
    """Record the table's C in languages.json, where every array task reads how its index maps to units."""
    path = RunDir(table.root).languages_json
    doc = read_json(path)
    if doc.get("cpus") != dict(table.cpus or {}):
        write_json_atomic(path, {**doc, "cpus": dict(table.cpus or {})})


def record_submission(table: UnitTable, kind: str, tasks: dict[str, list[int]], jobs: list[dict],
                      resources: dict[str, Any] | None = None) -> None:
    """RUNDIR/run.json gets the submission; each language's run.json its chunks too, with offsets in its own task
    numbers (its --status reads them as a single run's)."""
    now = time.time()
    root = RunDir(table.root)
    rec = read_run_json(root.run_json)
    rec["submissions"].append({"kind": kind, "submitted_at": now, "tasks": tasks, "jobs": jobs,
                               **({"resources": resources} if resources else {})})
    write_json_atomic(root.run_json, rec)
    for lang in table.langs:
        mine = {s: [table.locate(s, g)[1] for g in tasks.get(s, []) if table.locate(s, g)[0] == lang] for s in STAGES}
        if not any(mine.values()):
            continue
        translated = [{**{k: j[k] for k in ("stage", "job_id", "array", "tasks")},
                       "offset": j["offset"] - table.base(j["stage"], lang),
                       "log_dir": str(root.unit_log_dir(j["stage"]) if table.units_per_task(j["stage"]) > 1
                                      else root.log_dir(j["stage"]))}
                      for j in jobs if mine.get(j["stage"])]
        run = RunDir(table.lang_dir(lang))
        lrec = read_run_json(run.run_json)
        lrec["submissions"].append({"kind": f"multi-{kind}", "submitted_at": now, "tasks": mine, "jobs": translated,
                                    "multi_run": str(table.root)})
        write_json_atomic(run.run_json, lrec)


def resolve(rundir: Path, stage: str, index: int) -> tuple[Path, int]:
    """The one mapping from a global unit index to (language run dir, task of that run dir)."""
    m = load(rundir)
    lang, task = m.locate(stage, index)
    return m.lang_dir(lang), task


def write_selection(root: Path, stage: str, units: Sequence[int]) -> None:
    """Which units the single job of `stage` runs in this submission (a resume selects the unfinished)."""
    write_json_atomic(RunDir(Path(root)).selection(stage), {"stage": stage, "units": sorted(units)})


def selected(root: Path, stage: str) -> list[int]:
    p = RunDir(Path(root)).selection(stage)
    return read_json(p)["units"] if p.exists() else list(range(load(root).size(stage)))


def language_queue(m: UnitTable, lang: str, lang_jobs: dict[str, list[dict[str, Any]]],
                   queue: dict[str, str]) -> dict[str, str]:
    """squeue's states keyed as the language's --status looks them up (`<job>_<task - offset>`): with C units per
    array task, its task t is global unit g = first + t of array index g // C."""
    grouped = {stage for stage in lang_jobs if m.units_per_task(stage) > 1}
    ids = {j["job_id"] for stage in grouped for j in lang_jobs[stage]}
    out = {k: v for k, v in queue.items() if k.partition("_")[0] not in ids}  # C = 1: the shifted offsets match
    for stage in grouped:
        chunks, c = lang_jobs[stage], m.units_per_task(stage)
        base = m.base(stage, lang)
        count = next(b.count for b in m.blocks[stage] if b.lang == lang)
        for j in chunks:
            chunk = j["offset"] + base  # the chunk's offset in array indices
            for t in range(count):
                state = queue.get(f"{j['job_id']}_{(base + t) // c - chunk}")
                if state is not None:
                    out[f"{j['job_id']}_{t - j['offset']}"] = state
    return out
