"""The rule book: each safety rule about OUT, defined once with the moments that check it (`preflight`).

docs/operations.md's table of the rules is rendered from it (`python -m shard_pipeline.run.rulebook --table`). A
refused rule raises its own error carrying a typed `Refusal`. A run removes or replaces only what it can prove it
made (OUT, a previous output, its own marked OUT.tmp, its own run dir), so the run dir, the input root, OUT and
what a run keeps beside OUT must lie apart, and OUT in no other output.
"""
from __future__ import annotations

import enum
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from shard_pipeline.commands import resume_command
from shard_pipeline.contract.beside import root_work_folder
from shard_pipeline.contract.manifest import MANIFEST_NAME, load_manifest
from shard_pipeline.contract.replace import (NEW_RUN_STEP, TMP_MARKER, NotReplaceable, check_out_for_resume,
                                             check_tmp_free, parking_dir_for, tmp_dir_for, tmp_owner)
from shard_pipeline.contract.swap import folder_identity
from shard_pipeline.errors import UsageError, UserError
from shard_pipeline.run.claim import check_not_held, claim_lock_path, claim_path, holder, publish_lock_path
from shard_pipeline.run.registry import RunState, already_swapped, swap_receipt
from shard_pipeline.run.resume import ResumeRefused
from shard_pipeline.run.rundir import RunDir


class Moment(enum.Enum):
    """When a rule is checked."""

    NEW_RUN = "a new run"  # its --dry-run and its submit, before anything is written
    NEW_ROOT = "a new root"  # the same, for ROOT itself in a run of several languages
    DRY_RUN = "--dry-run"
    SUBMIT = "submit"
    RESUME = "--resume"
    FINALIZE = "finalize"


@dataclass(frozen=True)
class Context:
    """What a moment knows about one OUT: the run that means to write it, and (at a resume and at finalize)
    the run's records. `step`: the way on for a folder in the way that hplt-shard did not make."""

    out: Path
    run_root: Path
    step: str = NEW_RUN_STEP
    cfg: Any = None  # the run's RunConfig, at a resume and at finalize
    swapped: bool = False  # OUT is provably this run's output already: finalize will not swap
    planning: bool = True  # the plan is still to run, so this run's OUT.tmp is not made yet
    run_dir: Path | None = None  # --run-dir as given (the root of a run of several); None: run_root
    input_root: Path | None = None
    of_a_root: bool = False  # OUT is a language of a new root: its staging lives beside ROOT even before ROOT's manifest names it


@dataclass(frozen=True)
class Refusal:
    """A rule refused: which one, the paths in the way, who owns them (None: no run of hplt-shard), the next step."""

    kind: str
    paths: tuple[Path, ...]
    owner: str | None
    next_step: str


@dataclass(frozen=True)
class Rule:
    """One safety rule: its kind, the moments that check it, its check, and its row of docs/operations.md."""

    kind: str
    moments: frozenset[Moment]
    check: Callable[[Context], None]
    case: str
    exit: str
    next_step: str
    kept: str
    paths: Callable[[Context], tuple[Path, ...]]
    owner: Callable[[Context], str | None] = lambda ctx: None  # who owns what is in the way: no run of hplt-shard


def inside(a: Path, b: Path) -> bool:
    """True when `a` is `b` or lies under it."""
    return a == b or b in a.parents


def beside_out(out: Path) -> dict[str, Path]:
    """What runs and publishes keep beside an OUT (or a root of several languages): no run dir or input there."""
    return {"OUT.tmp": tmp_dir_for(out), "OUT.replaced": parking_dir_for(out), "OUT's claim": claim_path(out),
            "OUT's claim lock": claim_lock_path(out), "OUT's publish lock": publish_lock_path(out),
            "the work folder beside OUT (a root's)": root_work_folder(out)}


def check_no_overlap(named: dict[str, Path | None]) -> None:
    """Refuse any two of these folders that are equal or nested, in either direction (one message per pair)."""
    items = [(name, Path(os.path.realpath(p))) for name, p in named.items() if p is not None]
    for i, (na, a) in enumerate(items):
        for nb, b in items[i + 1:]:
            if a == b:
                raise UsageError(f"{na} {a} and {nb} {b} are the same path; they must be apart")
            if inside(a, b) or inside(b, a):
                inner, outer = ((na, a), (nb, b)) if inside(a, b) else ((nb, b), (na, a))
                raise UsageError(f"{inner[0]} {inner[1]} lies inside {outer[0]} {outer[1]}; they must be apart "
                                 "(a run replaces OUT and OUT.tmp and never touches its inputs)")


def paths_apart(ctx: Context) -> None:
    check_no_overlap({"--run-dir": ctx.run_dir or ctx.run_root, "input root": ctx.input_root, "--out": ctx.out,
                      **beside_out(ctx.out)})


def not_nested(ctx: Context) -> None:
    """OUT lies in no other output (an ancestor holds a manifest: its --verify would fail, its next run remove it)
    and in no other run's marked staging or parking folder (swapped away or removed with it). A root of several
    languages holds no manifest, so ROOT/<LANG> is not refused."""
    for parent in Path(os.path.realpath(ctx.out)).parents:
        try:  # a folder we may not look into is no output we could tell: the later checks say more
            if (parent / MANIFEST_NAME).is_file():
                where = f"inside the output {parent} (it holds {MANIFEST_NAME})"
            elif (owner := tmp_owner(parent)) is not None:
                where = f"inside {parent}, the staging folder of the run {owner} (it holds {TMP_MARKER})"
            else:
                continue
        except OSError:
            continue
        raise UsageError(f"--out {ctx.out} lies {where}; an output may not be nested in another: "
                         "choose an --out outside it")


def not_held(ctx: Context) -> None:
    check_not_held(ctx.out, ctx.run_root)


def staging_ours(ctx: Context) -> None:
    if ctx.planning:
        check_tmp_free(ctx.out, str(ctx.run_root), ctx.step, ctx.of_a_root)


def out_replaceable(ctx: Context) -> None:
    if not ctx.swapped:
        check_out_for_resume(ctx.out, str(ctx.run_root))


def no_newer_output(ctx: Context) -> None:
    """A newer run's output (another configuration) that reached OUT after this run's finalize recorded what it
    replaces (swap.json) is not replaced."""
    if ctx.swapped:
        return
    now = folder_identity(ctx.out)
    earlier = swap_receipt(RunDir(ctx.run_root)) if ctx.cfg is not None else None
    if earlier is None or now is None or now["manifest_sha256"] is None:
        return
    if now["manifest_sha256"] in ((earlier.previous or {}).get("manifest_sha256"), earlier.manifest_sha256):
        return
    try:
        theirs = load_manifest(ctx.out)
    except (OSError, ValueError):
        return
    if theirs.get("config_sha256") == ctx.cfg.content.sha256():
        return  # this run's own output, edited or damaged, or the same content again: replaced, as a re-run would
    raise NotReplaceable(f"{ctx.out} holds another output now (dataset {theirs.get('dataset')!r} version "
                         f"{theirs.get('version')!r}, another configuration), put there after this run's earlier "
                         f"finalize attempt: this run does not replace a newer output; to put this run's output "
                         f"there anyway, move {ctx.out} away, then {resume_command(ctx.run_root)}")


def _out(ctx: Context) -> tuple[Path, ...]:
    return (ctx.out,)


def _staging(ctx: Context) -> tuple[Path, ...]:
    return tmp_dir_for(ctx.out, ctx.of_a_root), parking_dir_for(ctx.out, ctx.of_a_root)


def _staging_owner(ctx: Context) -> str | None:
    return next((o for p in _staging(ctx) if (o := tmp_owner(p)) is not None and o != str(ctx.run_root)), None)


NEW_RUN, NEW_ROOT, DRY_RUN, SUBMIT, RESUME, FINALIZE = tuple(Moment)

RULES: tuple[Rule, ...] = (
    Rule("paths-apart", frozenset({NEW_RUN, NEW_ROOT}), paths_apart,
         "two of the run dir, the input root, OUT and what a run keeps beside OUT (`OUT.tmp`, `OUT.replaced`, the "
         "claim and lock files; for ROOT/LANG of a root, these in `ROOT.hplt-shard/`) are the same folder or lie one "
         "inside the other, however spelled (`..`, a link)", "2",
         "choose folders apart (`--run-dir`, `--out`, `--local-root`)", "everything; nothing written",
         lambda ctx: (ctx.out, ctx.run_dir or ctx.run_root)),
    Rule("out-nested", frozenset({NEW_RUN, NEW_ROOT}), not_nested,
         "OUT lies inside another output (an ancestor holds `_MANIFEST.json`) or inside another run's marked "
         "staging or parking folder", "2", "choose an `--out` outside it", "everything; nothing written",
         _out),
    Rule("out-held", frozenset({NEW_ROOT, DRY_RUN, SUBMIT, RESUME}), not_held,
         "another unfinished run holds OUT (its claim file, `OUT.hplt-shard-claim`, names that run)", "2",
         "finish that run with `--resume R`, or remove the claim file if that run was abandoned",
         "everything; nothing written", lambda ctx: (ctx.out, claim_path(ctx.out)), lambda ctx: holder(ctx.out)),
    Rule("out-not-replaceable", frozenset({RESUME}), out_replaceable,
         "OUT is not what this run's finalize may replace (not a previous output, a link, a mount point, another "
         "user's; a file added to this run's own output after its swap; something at OUT where an interrupted swap "
         "puts the previous version back), said before any stage unless OUT is provably this run's output already",
         "2",
         "move what is at OUT away (or unmount it), then `--resume RUNDIR`", "OUT; the run dir as it was",
         _out),
    Rule("newer-output", frozenset({RESUME, FINALIZE}), no_newer_output,
         "OUT holds an output of another configuration (a newer run's) put there after this run's earlier finalize "
         "attempt", "2 / 1 (finalize)",
         "move OUT away, then `--resume RUNDIR`", "the newer output; the run dir", _out),
    Rule("staging-not-ours", frozenset({NEW_RUN, SUBMIT, RESUME}), staging_ours,
         "`OUT.tmp` or `OUT.replaced` (where a swap without `RENAME_EXCHANGE` parks the previous OUT) exists and "
         "this run did not make it: no `.hplt-shard-tmp` marker (a user's folder, an earlier output a run could not "
         "delete, a copy), or another run's or `write_shards` call's marker; at a resume only while the plan is "
         "still to run (the writers and the swap check it again); a user's own `OUT.old` is never touched",
         "2 / 1 (a stage)",
         "move it away, then the same command again (a new run may choose another `--out`); another run's: "
         "`--status R`, finish it with `--resume R`, or remove the folder if that run is abandoned",
         "that folder and everything in it, OUT as it was; no run dir, no claim", _staging, _staging_owner),
)


def rules_for(moment: Moment) -> tuple[Rule, ...]:
    """The rules a moment checks, in the book's order."""
    return tuple(rule for rule in RULES if moment in rule.moments)


def preflight(moment: Moment, ctx: Context) -> None:
    """Check every rule of `moment`; the first refused raises its error, carrying its `Refusal`."""
    for rule in rules_for(moment):
        try:
            rule.check(ctx)
        except UserError as exc:
            exc.refusal = Refusal(rule.kind, rule.paths(ctx), rule.owner(ctx), rule.next_step)
            raise


def resume_preflight(run: RunDir, cfg: Any, planning: bool, resume_root: Path) -> None:
    """The RESUME moment for one language: what its finalize (and, while the plan is to run, its plan) would
    refuse at OUT, said before anything is queued, by reading alone."""
    out, plan = Path(cfg.execution.out), RunState(run).plan
    swapped = plan is not None and already_swapped(run, cfg, plan, out, rehash=False) is not None
    ctx = Context(out, run.root, f"move it away, then {resume_command(resume_root)}", cfg, swapped, planning)
    try:
        preflight(Moment.RESUME, ctx)
    except NotReplaceable as exc:
        refused = ResumeRefused(f"{exc}; nothing was started")
        refused.refusal = exc.refusal
        raise refused from None


def table() -> str:
    """The book as docs/operations.md shows it."""
    head = ["| Rule | Case | Checked at | Exit | Next step | What is kept |", "|---|---|---|---|---|---|"]
    rows = [f"| `{r.kind}` | {r.case} | {', '.join(f'`{m.value}`' for m in Moment if m in r.moments)} | {r.exit} | "
            f"{r.next_step} | {r.kept} |" for r in RULES]
    return "\n".join(head + rows)


if __name__ == "__main__":
    if sys.argv[1:] != ["--table"]:
        sys.exit("usage: python -m shard_pipeline.run.rulebook --table")
    print(table())
