"""The run directory: where every stage finds its inputs and leaves its receipts. One layout for all
executors, so a task can be rerun by hand from its log's command and --resume / --status work from it alone.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from shard_pipeline.commands import command, resume_command, status_command
from shard_pipeline.errors import UserError
from shard_pipeline.run.records import read_json  # noqa: F401  (the run dir's readers import it from here)

CHECKPOINT_FORMAT = "receipts-log"  # a partition checkpoint naming its receipts log (stages/checkpoint.py)


def submitted_commit(record: dict[str, Any]) -> tuple[str | None, bool]:
    """(git commit, with uncommitted changes) of the code that submitted the run (run.json `code`); None if unknown."""
    code = record.get("code")
    commit = code.get("commit") if isinstance(code, dict) else None
    return (str(commit), bool(code.get("dirty"))) if commit else (None, False)


def commit_words(record: dict[str, Any]) -> str | None:
    """The submitting commit as messages and the dataset card name it: `abc123 (with uncommitted changes)`."""
    commit, dirty = submitted_commit(record)
    return None if commit is None else f"{commit} (with uncommitted changes)" if dirty else commit


def check_whole(root: Path) -> None:
    """Refuse a run directory whose submission was killed while it wrote it: `create`'s folders are there, run.json
    (written last, before OUT is claimed) is not, so nothing ran and removing it is safe."""
    made = all((root / sub).is_dir() for sub in ("tasks", "logs"))
    if root.is_dir() and made and not (root / "run.json").exists():
        raise IncompleteRunDir(f"{root} was left by a submission stopped before it was complete (it has no run.json): "
                               f"nothing of it ran and no output was claimed; remove it ({command('rm', '-r', root)}) and submit again")


def fresh_run_dir(root: Path, suffix: str) -> Path:
    """`RUNDIR-suffix`, or `RUNDIR-suffix-2`, ...: a run directory is never reused."""
    candidate, n = root.with_name(f"{root.name}-{suffix}"), 2
    while candidate.exists():
        candidate, n = root.with_name(f"{root.name}-{suffix}-{n}"), n + 1
    return candidate


def is_finished(root: Path) -> bool:
    """The run in `root` is done (of several languages: every language is)."""
    run = RunDir(Path(root))
    if not run.languages_json.is_file():
        return run.done_marker.exists()
    try:
        langs = [RunDir(p) for p in run.root.iterdir() if RunDir(p).config_json.is_file()]
    except OSError:
        return False
    return bool(langs) and all(lang.done_marker.exists() for lang in langs)


def check_new(root: Path) -> None:
    """Refuse a run directory a new run would reuse; a finished run's points to a fresh one."""
    check_whole(root)
    if root.exists() and is_finished(root):
        fresh = fresh_run_dir(root, "new")
        raise RunDirExists(f"run directory {root} holds a finished run ({status_command(root)}); a new run needs a run "
                           f"directory of its own: add --run-dir {fresh}", fresh)
    if root.exists():
        raise RunDirExists(f"run directory {root} exists; use {resume_command(root)} or move it away")


class IncompleteRunDir(UserError):
    """A run directory whose submission was killed before its run.json was written."""


def unit_log(log_dir: Path, job: str, array_index: str | int, unit: int) -> Path:
    """A unit's log under Slurm, next to its group's `<job>_<index>.log`."""
    return log_dir / f"{job}_{array_index}.unit{unit}.log"


class RunDirExists(UserError, FileExistsError):
    """A new run was given a run directory that exists. `fresh`: the one to give instead, when the existing one
    holds a finished run (else --resume it)."""

    def __init__(self, message: str, fresh: Path | None = None) -> None:
        super().__init__(message)
        self.fresh = fresh


@dataclass(frozen=True)
class RunDir:
    root: Path

    # written by the submitter
    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def config_json(self) -> Path:
        return self.root / "config.json"

    @property
    def shard_list(self) -> Path:
        return self.root / "shard_list.txt"

    @property
    def inventory(self) -> Path:
        return self.root / "shard_inventory.tsv"

    @property
    def buckets_json(self) -> Path:
        return self.root / "buckets.json"

    def task_file(self, stage: str, task: int) -> Path:
        return self.root / "tasks" / f"{stage}-{task:05d}.json"

    def outcome(self, stage: str, task: int) -> Path:
        """What the last attempt of the task ended with (run/outcome.py)."""
        return self.root / "tasks" / f"{stage}-{task:05d}.outcome.json"

    def outcome_files(self) -> list[Path]:
        return sorted((self.root / "tasks").glob("*.outcome.json"))

    @property
    def languages_json(self) -> Path:
        """The unit table of a run of several languages (run/unit_table.py); absent for one language."""
        return self.root / "languages.json"

    def selection(self, stage: str) -> Path:
        """Which languages' units the single job of `stage` runs, in a run of several (run/unit_table.py)."""
        return self.root / "tasks" / f"{stage}-units.json"

    @property
    def lock_file(self) -> Path:
        """Held while a process runs or submits the run (claim.run_lock)."""
        return self.root / ".run.lock"

    @property
    def lock_holder(self) -> Path:
        """Which process holds lock_file (pid and host), for the refusal of a second one."""
        return self.root / ".run.lock.holder"

    @property
    def land_lock(self) -> Path:
        """Held while a write unit of a multi-language run checks whether its language can land (worker/landing.py)."""
        return self.root / ".land.lock"

    def log_dir(self, stage: str) -> Path:
        return self.root / "logs" / stage

    def unit_log_dir(self, stage: str) -> Path:
        """A run's unit logs when an array task runs C units: named in their language's task numbers."""
        return self.log_dir(stage) / "units"

    def local_log(self, stage: str, task: int) -> Path:
        return self.log_dir(stage) / f"local_{task}.log"

    def array_log(self, stage: str, job_id: str, index: int | str) -> Path:
        """A Slurm array task's log; `index` is local to its array chunk ("%a" in the sbatch pattern)."""
        return self.log_dir(stage) / f"{job_id}_{index}.log"

    # written by partition
    def spill_file(self, task: int) -> Path:
        return self.root / "partition" / f"task-{task:05d}.spill"

    def spill_index(self, task: int) -> Path:
        return self.root / "partition" / f"task-{task:05d}.index.arrow"

    def partition_receipt(self, task: int) -> Path:
        return self.root / "partition" / f"task-{task:05d}.receipt.json"

    def partition_checkpoint(self, task: int) -> Path:
        return self.root / "partition" / f"task-{task:05d}.checkpoint.json"

    def partition_receipts_log(self, task: int) -> Path:
        """One line per checkpointed input (stages/checkpoint.py); the checkpoint records its length."""
        return self.root / "partition" / f"task-{task:05d}.receipts.jsonl"

    def quarantine_file(self, task: int) -> Path:
        return self.root / "quarantine" / f"task-{task:05d}.jsonl"

    def cleaned_file(self, input_index: int) -> Path:
        """The documents --clean removed from one input (partition writes it, finalize gathers them)."""
        return self.root / "quarantine" / f"clean-{input_index:05d}.parquet"

    def cleaned_files(self) -> list[Path]:
        return sorted((self.root / "quarantine").glob("clean-*.parquet"))

    # written by plan
    @property
    def plan_json(self) -> Path:
        return self.root / "plan.json"

    @property
    def sections(self) -> Path:
        return self.root / "sections.arrow"

    # written by write and finalize
    def write_receipt(self, task: int) -> Path:
        return self.root / "write" / f"task-{task:05d}.receipt.json"

    def write_progress(self, task: int) -> Path:
        """The shards a write task finished so far: a restarted attempt keeps them."""
        return self.root / "write" / f"task-{task:05d}.progress.json"

    @property
    def swap_receipt(self) -> Path:
        """The sha256 of the manifest finalize put in OUT.tmp before the swap: what proves OUT's manifest is this run's."""
        return self.root / "swap.json"

    @property
    def validation_json(self) -> Path:
        return self.root / "validation.json"

    @property
    def done_marker(self) -> Path:
        return self.root / "DONE"

    @property
    def interrupted_marker(self) -> Path:
        """Written when Ctrl-C, SIGHUP or SIGTERM stopped the local executor; a new start removes it."""
        return self.root / "INTERRUPTED.json"

    def create(self, stages: Iterable[str], work: bool = True) -> None:
        """Make a new run directory with a log folder per stage, and with `work` a language's work folders."""
        check_new(self.root)
        self.root.mkdir(parents=True)
        try:
            for sub in ("tasks", *(("partition", "write", "quarantine") if work else ()), *(f"logs/{s}" for s in stages)):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except BaseException:  # a full disk, a Ctrl-C: no half-made run dir that --resume would then refuse
            shutil.rmtree(self.root, ignore_errors=True)
            raise
