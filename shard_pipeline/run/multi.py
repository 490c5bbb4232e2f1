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
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from shard_pipeline.run import group, live
from shard_pipeline.run.registry import STAGE_NAMES as STAGES
from shard_pipeline.run.rundir import RunDir, read_json, write_json_atomic
from shard_pipeline.run.taskcmd import task_argv

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
class UnitTable:
    """Every unit of a run: which language's task a global unit index is, and C per array task.

    A run of several languages has it in RUNDIR/languages.json, each language's run dir under
    RUNDIR; a run of one language is the case of one language whose run dir is RUNDIR itself
    (`load` reads it from config.json): so every executor, submitter and status sees one shape."""

    root: Path
    langs: tuple[str, ...]
    blocks: dict[str, tuple[Block, ...]]
    cpus: dict[str, int] | None = None  # array stage -> C, global units per array task (absent: 1)
    one_dir: bool = False  # a run of one language: RUNDIR is that language's run dir

    @property
    def several(self) -> bool:
        """More than one language's run dir under RUNDIR: each lands alone, failures do not stop the others."""
        return not self.one_dir

    def is_array(self, stage: str) -> bool:
        return stage not in SINGLE_JOB_STAGES

    def units_per_task(self, stage: str) -> int:
        """C of an array stage: units one array task runs at once; 1 for plan and finalize."""
        return (self.cpus or {}).get(stage, 1) if stage not in SINGLE_JOB_STAGES else 1

    def array_indices(self, stage: str, units: Sequence[int]) -> list[int]:
        """The array indices that run these global units (a resume's sparse `--array`): as in a single run."""
        return [0] if stage in SINGLE_JOB_STAGES else group.groups_of(units, self.units_per_task(stage))

    def units_of(self, stage: str, index: int) -> list[int]:
        """Global units of array index `index`: the group mapping of a single run (run/group.py)."""
        return list(group.units_of(index, self.units_per_task(stage), self.size(stage)))

    def lang_dir(self, lang: str) -> Path:
        return self.root if self.one_dir else self.root / lang

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


def unit_table(root: Path, tasks: Sequence[tuple[str, int, int]], cpus: int = 1) -> UnitTable:
    """Contiguous blocks per language, in the given order, from (lang, partition tasks, write tasks).

    With C cores per array task (`cpus`), array index i of partition and write runs global
    units [i*C, (i+1)*C): units of several languages may share one array task."""
    blocks: dict[str, list[Block]] = {s: [] for s in STAGES}
    nxt = {s: 0 for s in STAGES}
    for lang, p, w in tasks:
        for stage, n in (("partition", p), ("plan", 1), ("write", w), ("finalize", 1)):
            blocks[stage].append(Block(lang, nxt[stage], n))
            nxt[stage] += n
    sizes = {s: nxt[s] for s in STAGES}
    per_task = {s: max(1, min(cpus, sizes[s])) for s in STAGES if s not in SINGLE_JOB_STAGES}
    return UnitTable(Path(root), tuple(l for l, _, _ in tasks), {s: tuple(b) for s, b in blocks.items()}, per_task)


def load(root: Path) -> UnitTable:
    """The unit table of any run dir: languages.json, or for a run of one language its config.json."""
    if not is_multi(root):
        return one_language(Path(root))
    doc = read_json(Path(root) / LANGUAGES_JSON)
    if doc.get("format") != MULTI_FORMAT:
        raise ValueError(f"{root}/{LANGUAGES_JSON} has format {doc.get('format')}; this version reads {MULTI_FORMAT}")
    blocks = {s: tuple(Block(l, f, c) for l, f, c in doc["units"][s]) for s in STAGES}
    return UnitTable(Path(root), tuple(e["lang"] for e in doc["languages"]), blocks, dict(doc.get("cpus", {})))


def one_language(root: Path) -> UnitTable:
    """A run of one language as a unit table: global unit = task, C from its resources."""
    from shard_pipeline.run.runconfig import RunConfig

    cfg = RunConfig.from_json(read_json(RunDir(root).config_json))
    ex = cfg.execution
    table = unit_table(root, [(cfg.content.lang, ex.partition_tasks, ex.write_tasks)])
    return replace(table, cpus={s: ex.units_per_task(s) for s in table.cpus or {}}, one_dir=True)


def record_submission(table: UnitTable, kind: str, tasks: dict[str, list[int]], jobs: list[dict],
                      resources: dict[str, Any] | None = None) -> None:
    """RUNDIR/run.json gets the submission; in a run of several languages each language's run.json
    gets its chunks too, with offsets in its own task numbers (its --status reads them as a single run's)."""
    now = time.time()
    root = RunDir(table.root)
    rec = read_json(root.run_json)
    rec["submissions"].append({"kind": kind, "submitted_at": now, "tasks": tasks, "jobs": jobs,
                               **({"resources": resources} if resources else {})})
    write_json_atomic(root.run_json, rec)
    if not table.several:
        return
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
        lrec = read_json(run.run_json)
        lrec["submissions"].append({"kind": f"multi-{kind}", "submitted_at": now, "tasks": mine, "jobs": translated,
                                    "multi_run": str(table.root)})
        write_json_atomic(run.run_json, lrec)


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


def language_queue(m: UnitTable, lang: str, lang_jobs: dict[str, list[dict[str, Any]]],
                   queue: dict[str, str]) -> dict[str, str]:
    """squeue's states keyed as the language's --status looks them up (`<job>_<task - offset>`).

    The language's run.json keeps the chain's chunks with offsets shifted into its task numbers;
    with C units per array task, its task t is global unit g = first + t of array index g // C."""
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


def queue_of_language(run: RunDir, jobs: dict[str, list[dict[str, Any]]], queue: dict[str, str]) -> dict[str, str]:
    """squeue's states as `--status RUNDIR/<LANG>` looks them up: translated when the run dir is a language of a
    multi-language run (`language_queue`), else as they are."""
    root = run.root.parent
    return language_queue(load(root), run.root.name, jobs, queue) if is_multi(root) else queue


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


def run_entry(stage: str, fn: Callable[[RunDir, int], Any], rundir: Path, units: Sequence[int],
              finalize: Callable[[RunDir], Any] | None = None) -> int:
    """Run these global units of a multi-language run in turn; 1 if any failed (the others still ran).

    `finalize` (given for write): a language whose last write unit this was lands right here."""
    m = load(rundir)
    failed: list[str] = []
    causes: dict[str, str] = {}
    for g in units:
        lang_dir, task = resolve(rundir, stage, g)
        run, lang = RunDir(lang_dir), lang_dir.name
        alone = task_argv(stage, run.root, task)
        print(f"# unit {g} = {lang} {stage} task {task}; this unit alone: {shlex.join(alone)}", flush=True)
        if stage == "finalize" and run.done_marker.exists():
            print(f"# {lang} landed before (its last write unit finalized it), skipped", flush=True)
            continue
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
            print(f"# {lang} {stage} task {task} done: {result}", flush=True)
        except Exception as exc:  # one language's failure must not stop the others
            causes[lang] = f"{type(exc).__name__}: {exc}"
            print(f"ERROR: {lang}: {causes[lang]}", file=sys.stderr, flush=True)
            failed.append(lang)
            continue
        else:
            if finalize is not None:
                land_if_written(run, finalize)
        finally:
            os.environ.pop(LANG_ENV, None)
    if failed:
        print(f"ERROR: {stage} failed for {', '.join(sorted(set(failed)))} ("
              + "; ".join(f"{l}: {causes[l][:300]}" for l in sorted(causes)) + "); the other languages went on; "
              f"fix the cause, then ./hplt-shard --resume {m.root}", file=sys.stderr, flush=True)
        return 1
    return 0


def written(run: RunDir) -> bool:
    """Every write unit of this language is done by the registry's rule (receipts agree with their files)."""
    from shard_pipeline.run.registry import RunState
    from shard_pipeline.run.registry import stage as registered

    state, write = RunState(run, rehash=False), registered("write")
    return state.plan is not None and all(write.problem(state, t) is None for t in range(write.tasks(state.cfg)))


def land_if_written(run: RunDir, finalize: Callable[[RunDir], Any]) -> bool:
    """Finalize this language now if its write units are all done; True when it landed here.

    Under the language's land lock, so two write units finishing together finalize it once (the
    second sees DONE). A finalize that fails here leaves the language to the finalize job at the
    end of the chain, which retries it and names it with the --resume command: the write unit
    itself has succeeded (its receipt holds), so its exit status stays 0.
    """
    from filelock import FileLock

    try:
        with FileLock(str(run.land_lock)):  # held by a live process only (flock): never a stale lock
            if run.done_marker.exists() or not written(run):
                return False
            print(f"# {run.root.name}: every write unit is done: finalizing it now", flush=True)
            with live.recorded(run.root, "finalize", 0):
                result = finalize(run)
    except Exception as exc:  # the lock, the check or finalize itself
        print(f"WARNING: {run.root.name}: finalize after its last write unit failed ({type(exc).__name__}: "
              f"{str(exc)[:300]}); the finalize job of this run tries it again", file=sys.stderr, flush=True)
        return False
    print(f"# {run.root.name} landed: {result.get('rows') if isinstance(result, dict) else result} rows in place",
          flush=True)
    return True


def run_task(stage: str, entry: Callable[..., Any], finalize: Callable[[RunDir], Any], rundir: Path, index: int,
             array: bool) -> int:
    """One unit of a run of several languages (`--task G` names one global unit, as by hand), or a single
    job's selected languages in turn."""
    units = [index] if array else selected(rundir, stage)
    fn = (lambda r, t: entry(r, t)) if array else (lambda r, t: entry(r))
    return run_entry(stage, fn, rundir, units, finalize if stage == "write" else None)
