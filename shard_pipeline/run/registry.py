"""The stages, written once: their order, array or single, and when a task is done (code: worker/entries.py).

--status and --resume ask `Stage.problem` whether a task is done, by one rule: its receipt is this run's record
(run/records.py) and agrees with the files it names: size and mtime as recorded, and bytes vouched for by a ctime
still equal to the recorded one (every write, rename, chmod or utime sets it to now) or, once something touched
the file, by its sha256. --status reads no file: it counts a touched one done by size and mtime and says so, and
--resume re-hashes it. Once DONE exists, every task of the run is done.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from shard_pipeline.commands import verify_command
from shard_pipeline.contract.manifest import MANIFEST_NAME, load_manifest
from shard_pipeline.files import file_sha256
from shard_pipeline.run.receipts import PartitionReceipt, Plan, Stamp, SwapReceipt, Validation, WriteReceipt
from shard_pipeline.run.records import RUN_FORMAT, Made, Problem, Why, made_here, read_record
from shard_pipeline.run.runconfig import RunConfig, load_config
from shard_pipeline.run.rundir import RunDir


def file_matches(path: Path, stamp: Stamp, sha256: str, rehash: bool = True,
                 touched: list[Path] | None = None) -> str | None:
    """None when `path` is what its receipt recorded, else why not (`rehash`: a touched file may be re-hashed).
    `touched` (--status, which reads no file): a file whose ctime alone changed (a chmod, a chgrp) is listed there
    and counted as matching by size and mtime."""
    if not path.is_file():
        return f"{path.name} missing"
    st = path.stat()
    if st.st_size != stamp.bytes:
        return f"{path.name} has {st.st_size} bytes, its receipt {stamp.bytes}"
    if st.st_mtime_ns != stamp.mtime_ns:
        return f"{path.name} was modified after its receipt was written"
    if st.st_ctime_ns == stamp.ctime_ns:
        return None  # untouched since it was finished
    if touched is not None and not rehash:
        touched.append(path)
        return None
    if not rehash:
        return f"{path.name} was touched after its receipt (its ctime changed); --resume re-hashes it"
    if file_sha256(path) != sha256:
        return f"{path.name} sha256 differs from its receipt"
    return None


def write_receipts(run: RunDir, cfg: RunConfig, plan: Plan) -> list[WriteReceipt] | None:
    """The write receipts of every task of the plan, each this run's; None if any is not."""
    got = [read_record(run.write_receipt(wt.task), WriteReceipt, made_here(cfg.content.sha256())) for wt in plan.write_tasks]
    return None if any(isinstance(r, Problem) for r in got) else got


def already_swapped(run: RunDir, cfg: RunConfig, plan: Plan, out: Path,
                    rehash: bool = True, touched: list[Path] | None = None) -> dict[str, Any] | None:
    """OUT's manifest, if OUT is provably this run's output: an earlier attempt of finalize swapped it in.

    A finalize killed after the swap must finish its last steps on rerun. Equal hashes in the manifest are no
    proof (a re-run over a damaged output makes the same manifest), so every shard in OUT must be the very file a
    writer of this run finished (its receipt's stamp; a touched one by sha256 when `rehash`), nothing else may be
    in OUT but this run's marker, and the manifest must be the one finalize wrote (`manifest_is_this_runs`).
    """
    from shard_pipeline.contract.previous import holdings
    from shard_pipeline.contract.replace import TMP_MARKER, tmp_owner

    try:
        manifest = load_manifest(out)
    except (OSError, ValueError):
        return None
    if manifest.get("config_sha256") != cfg.content.sha256() or manifest.get("rows") != plan.rows:
        return None
    receipts = write_receipts(run, cfg, plan)
    if receipts is None:
        return None
    recorded = {s.name: s for receipt in receipts for s in receipt.shards}
    try:
        listed = {s["name"]: s["sha256"] for s in manifest["shards"]}
    except (KeyError, TypeError):
        return None
    if listed != {n: s.sha256 for n, s in recorded.items()}:
        return None
    seen: list[Path] | None = None if touched is None else []  # told to the caller only if OUT is this run's
    for name, s in recorded.items():
        if file_matches(out / name, s.stamp, s.sha256, rehash, seen) is not None:
            return None
    try:
        held = holdings(out, manifest)
    except (OSError, ValueError):
        return None
    ours = tmp_owner(out) == str(run.root)
    if held.damaged or any(not (ours and p == TMP_MARKER) for p in held.foreign):
        return None
    if not manifest_is_this_runs(run, out, manifest, rehash):
        return None
    if touched is not None:
        touched += seen
    return manifest


def run_history(run: RunDir, path: Path, cls: type[Any]) -> Any:
    """A record finalize wrote about OUT (swap.json, validation.json), or None: made for this run's config, by any
    code version, since a finished run's --status and --resume read them whatever code runs them."""
    got = read_record(path, cls, Made(RUN_FORMAT, load_config(run).content.sha256(), ""), any_code=True)
    return None if isinstance(got, Problem) else got


def swap_receipt(run: RunDir) -> SwapReceipt | None:
    return run_history(run, run.swap_receipt, SwapReceipt)


def _swapped_manifest(run: RunDir, out: Path) -> bytes | str | None:
    """OUT's manifest as it is on disk when it is the one this run swapped in (swap.json), else why not; None when
    the run recorded none."""
    receipt = swap_receipt(run)
    if receipt is None:
        return None
    try:
        data = (out / MANIFEST_NAME).read_bytes()
    except OSError as exc:
        return f"{out} holds no readable {MANIFEST_NAME} now ({exc.strerror})"
    if hashlib.sha256(data).hexdigest() != receipt.manifest_sha256:
        return (f"{out}/{MANIFEST_NAME} is no longer the one this run wrote (a later run replaced the output, "
                "or it was edited)")
    return data


def manifest_is_this_runs(run: RunDir, out: Path, manifest: dict[str, Any], rehash: bool) -> bool:
    """OUT's manifest is the very one finalize wrote, and, when `rehash`, so are the other files it lists."""
    if not isinstance(_swapped_manifest(run, out), bytes):
        return False
    return not rehash or all(file_sha256(out / f["name"]) == f["sha256"] for f in manifest["files"])


def since_done(run: RunDir, out: Path) -> str:
    """What a done run adds to "done: output at OUT" (--status and --resume say the same): why OUT no longer holds
    what it swapped in, or "" while it does."""
    got = _swapped_manifest(run, out)
    since = _listed_gone(out, got) if isinstance(got, bytes) else got
    return f"; but {since}: {verify_command(out)} checks what it holds now" if since else ""


def _listed_gone(out: Path, data: bytes) -> str | None:
    """The first file OUT's manifest (`data`) lists that is gone, by one listing of each folder. A file edited in
    place is --verify's to find: a stat per file would cost --status seconds on Lustre at ~8,000 shards."""
    try:
        manifest = json.loads(data)
        files = [*manifest["shards"], *manifest["files"]]
    except (ValueError, KeyError, TypeError):
        return f"{out}/{MANIFEST_NAME} cannot be read"
    listed: dict[Path, set[str]] = {}
    for f in files:
        path = out / f["name"]
        if path.parent not in listed:
            try:
                listed[path.parent] = set(os.listdir(path.parent))
            except OSError:
                listed[path.parent] = set()
        if path.name not in listed[path.parent]:
            return f"{path}, which its manifest lists, is gone"
    return None


def done_warnings(run: RunDir) -> list[str]:
    """The warnings finalize recorded in validation.json, repeated where a user looks (not a finalize log)."""
    validation = run_history(run, run.validation_json, Validation)
    if validation is None:
        return []
    index = validation.counts_index_warning
    return [*validation.warnings, *([index] if index else [])]


class RunState:
    """The run dir as the done rule reads it; config, plan and the swap are read once. `rehash=False` never
    reads a file: one whose ctime changed is not done, unless `trust_touched` (--status: a `chgrp -R` of a shared
    run dir changes every ctime, not one byte): then it is done by size and mtime, and listed in `touched`."""

    def __init__(self, run: RunDir, rehash: bool = True, trust_touched: bool = False) -> None:
        self.run = run
        self.rehash = rehash
        self.touched: list[Path] | None = [] if trust_touched and not rehash else None
        self.touched_in_out = None if self.touched is None else []  # shards in OUT: each write task claims its own

    @cached_property
    def cfg(self) -> RunConfig:
        return load_config(self.run)

    @cached_property
    def made(self) -> Made:
        return made_here(self.cfg.content.sha256())

    @cached_property
    def finished(self) -> bool:
        return self.run.done_marker.exists()

    @cached_property
    def plan_or_problem(self) -> Plan | Problem:
        return read_record(self.run.plan_json, Plan, self.made)

    @property
    def plan(self) -> Plan | None:
        return None if isinstance(self.plan_or_problem, Problem) else self.plan_or_problem

    @cached_property
    def swapped(self) -> bool:
        """Finalize exchanged OUT already: the shards left OUT.tmp, their receipts still hold."""
        return self.plan is not None and already_swapped(self.run, self.cfg, self.plan, Path(self.cfg.execution.out),
                                                        self.rehash, self.touched_in_out) is not None


def not_done(problem: Problem) -> str:
    """A record's problem as the done rule's reason."""
    return "no receipt" if problem.why is Why.MISSING else problem.reason


def partition_problem(state: RunState, task: int) -> str | None:
    run = state.run
    rc = read_record(run.partition_receipt(task), PartitionReceipt, state.made)
    if isinstance(rc, Problem):
        return not_done(rc)
    return (file_matches(run.spill_index(task), rc.index_stamp, rc.index_sha256, state.rehash, state.touched)
            or file_matches(run.spill_file(task), rc.spill_stamp, rc.spill_sha256, state.rehash, state.touched))


def plan_problem(state: RunState, task: int) -> str | None:
    plan = state.plan_or_problem
    if isinstance(plan, Problem):
        return "no plan" if plan.why is Why.MISSING else plan.reason
    return file_matches(state.run.sections, plan.sections_stamp, plan.sections_sha256, state.rehash, state.touched)


def write_problem(state: RunState, task: int) -> str | None:
    run = state.run
    rc = read_record(run.write_receipt(task), WriteReceipt, state.made)
    if isinstance(rc, Problem):
        return not_done(rc)
    if state.plan is None:
        return "no plan"
    if state.swapped:  # finalize was stopped after the exchange: the shards are in OUT
        if state.touched is not None:
            out = Path(state.cfg.execution.out)
            state.touched += [out / s.name for s in rc.shards if out / s.name in state.touched_in_out]
        return None
    tmp = Path(state.plan.tmp_dir)
    for s in rc.shards:
        why = file_matches(tmp / s.name, s.stamp, s.sha256, state.rehash, state.touched)
        if why:
            return why
    return None


def finalize_problem(state: RunState, task: int) -> str | None:
    return None if state.run.done_marker.exists() else f"no {state.run.done_marker.name} marker"


@dataclass(frozen=True)
class Stage:
    """One stage: `tasks(cfg)` of them (1 unless an array), each done when `problem` says None."""

    name: str
    array: bool  # an array of tasks whose array task runs C units at once (worker/group.py); else one job
    letter: str  # the first letter of its Slurm job name: squeue shows 8 characters (executors/slurm.py)
    summary: Callable[[Any], str]  # the result, as the last line of a task's log
    check: Callable[[RunState, int], str | None]

    def tasks(self, cfg: RunConfig) -> int:
        if not self.array:
            return 1
        return getattr(cfg.execution, f"{self.name}_tasks")

    def problem(self, state: RunState, task: int) -> str | None:
        """Why `task` is not done (None: done)."""
        return None if state.finished else self.check(state, task)

    def problem_and_touched(self, state: RunState, task: int) -> tuple[str | None, list[Path]]:
        """`problem`, and the files of `task` it counted done by size and mtime alone (RunState.touched)."""
        seen = len(state.touched or ())
        why = self.problem(state, task)
        return why, (state.touched or [])[seen:]


STAGES: tuple[Stage, ...] = (
    Stage("partition", True, "P", lambda r: f"{r.rows} rows", partition_problem),
    Stage("plan", False, "L", lambda r: f"{r.rows} rows", plan_problem),
    Stage("write", True, "W", lambda r: f"{len(r.shards)} shards", write_problem),
    Stage("finalize", False, "F", lambda r: f"{r['rows']} rows in place", finalize_problem),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}


def stage(name: str) -> Stage:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r} (stages: {', '.join(STAGE_NAMES)})") from None
