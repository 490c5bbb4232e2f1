"""The next step when a resume cannot help (it rereads the same input and refuses a changed one): a new run,
as the exact command: the run's own command line with a fresh --run-dir, or, for a language of a root, that
language alone into ROOT/<LANG>, so the languages that landed are not made again. And the refusal of a run
made by another version.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from shard_pipeline.commands import command, program, resume_command
from shard_pipeline.contract.replace import tmp_dir_for, tmp_owner
from shard_pipeline.run import codeversion, outcome
from shard_pipeline.run.claim import claim_path, holder
from shard_pipeline.run.outcome import Kind, Outcome
from shard_pipeline.run.records import RUN_FORMAT, DamagedRunFile, OtherCode, OtherFormat, Problem, Why
from shard_pipeline.run.steps import EachLanguage, NewRun
from shard_pipeline.run.rundir import (
    RunDir,
    commit_words,
    fresh_run_dir,
    is_finished,
    read_json,
    submitted_commit,
)
from shard_pipeline.run.typed import WrongType, parse_as
from shard_pipeline.run.run_json import read_run_json

_DROPPED = {"--run-dir": 1, "--dry-run": 0}  # option -> how many values follow it
FLAGS = ("--dry-run", "--replace-other", "--clean", "--dataset-card", "--keep-spill", "--release-changed", "--version",
         "-h", "--help")  # take no value
_OF_SEVERAL = {"--langs-file": 1, "--out": 1}  # what a language alone replaces (its LANG, its own OUT)


def _without(argv: Sequence[str], dropped: dict[str, int], positionals: bool = False) -> list[str]:
    """argv (program name first) without the `dropped` options and their values (with `positionals`, without
    LANG too): an option not in FLAGS takes one value."""
    kept, i = [], 1
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        takes = 0 if "=" in arg or name in FLAGS else dropped.get(name, 1)
        if name in dropped:
            i += 1 + takes
        elif arg.startswith("-") and arg != "-":
            kept += argv[i:i + 1 + takes]
            i += 1 + takes
        else:
            kept += [] if positionals else [arg]
            i += 1
    return kept


def _dropped(extra: Sequence[str]) -> dict[str, int]:
    """What the new command drops of the run's own: --run-dir, --dry-run, and an option `extra` sets anew."""
    return {**_DROPPED, **{a.split("=", 1)[0]: 1 for a in extra if a.startswith("--")}}


def new_run_argv(argv: Sequence[str], run_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    """The run's own command line (run.json "argv") with another --run-dir (and `extra`), for ./hplt-shard."""
    return [program(), *_without(argv, _dropped(extra)), *extra, "--run-dir", str(run_dir)]


def language_alone_argv(argv: Sequence[str], lang: str, out: Path, run_dir: Path,
                        extra: Sequence[str] = ()) -> list[str]:
    """A run of several languages' command line made a run of `lang` alone into ROOT/<LANG>: the same content
    options, so the same bytes."""
    rest = _without(["hplt-shard", *_without(argv, _dropped(extra))], _OF_SEVERAL, positionals=True)
    return [program(), lang, *rest, "--out", str(out), *extra, "--run-dir", str(run_dir)]


def new_run_command(run: RunDir, suffix: str, extra: Sequence[str] = ()) -> str | None:
    """The exact new run that redoes `run` (RUNDIR/<LANG>), None if unknown; first dropping the claim on OUT and
    the OUT.tmp it holds, which a new run would otherwise be refused for."""
    try:
        cfg, record = read_json(run.config_json), read_run_json(run.run_json)
    except (OSError, ValueError):
        return None
    if not record.get("argv"):
        return None
    out = Path(cfg["execution"]["out"])
    unclaim = f"{command('rm', claim_path(out))} && " if holder(out) == str(run.root) else ""
    unclaim += f"{command('rm', '-r', tmp_dir_for(out))} && " if _staged_by(out, run) else ""
    root = run.root.parent
    try:
        out_is_root = read_json(RunDir(root).run_json).get("out_is_root", True)
    except (OSError, ValueError):
        return None
    if out_is_root:
        argv = language_alone_argv(record["argv"], run.root.name, out, fresh_run_dir(root, f"{run.root.name}-{suffix}"),
                                   extra)
    else:
        argv = new_run_argv(record["argv"], fresh_run_dir(root, suffix), extra)
    return unclaim + command(*argv)


def _staged_by(out: Path, run: RunDir) -> bool:
    try:
        return tmp_owner(tmp_dir_for(out)) == str(run.root)
    except OSError:
        return False


def new_run(run: RunDir, failed: Sequence[Outcome] | None = None) -> NewRun | None:
    """The new run after a failure a resume cannot go past (outcome.NEEDS_NEW_RUN; a bad record only under
    --bad-records fail), decided from the outcome records (`failed`, when the caller read them); else None."""
    failed = outcome.failures(run) if failed is None else failed
    try:
        failing = read_json(run.config_json)["content"].get("bad_records") == "fail"
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    stops = [o for o in failed if o.needs_new_run and (o.kind is not Kind.BAD_RECORD or failing)]
    if not stops:
        return None
    # what to fix first: a short input (every count depends on it), a repeated id, a broken input, a bad record
    first = min(stops, key=lambda o: (o.kind is not Kind.SHORT_INPUT, o.kind is Kind.BAD_RECORD,
                                      o.kind is Kind.BROKEN_INPUT))
    fixed = new_run_command(run, "fixed")
    if fixed is None:
        return None
    quarantine = (new_run_command(run, "quarantine", ["--bad-records", "quarantine"])
                  if first.kind is Kind.BAD_RECORD else None)
    return NewRun(first.kind, first.detail, fixed, quarantine)


def each_language(root: Path, langs: dict[str, Path], brief: bool = False) -> EachLanguage:
    """The next step of a run of several whose `langs` (language -> its run dir) did not land: a resume for
    those it finishes, the new run of each other."""
    new_runs = tuple((lang, new) for lang, d in langs.items() if (new := new_run(RunDir(d))) is not None)
    return EachLanguage(root, "failed", tuple(langs), new_runs, brief)


def check_this_version(root: Path, record: dict) -> None:
    """Refuse a run (`record`: its run.json) made by a version of another run-dir format, or by another code
    version unless it is finished: two versions may read or write its records differently. A finished run's
    records are history: its --status and --resume say it is done, whatever reads them."""
    made_by = record.get("run_format", 1)
    if made_by != RUN_FORMAT:
        commit = commit_words(record) or "(unknown commit)"
        raise OtherFormat(Problem(Why.OTHER_FORMAT, root, f"hplt-shard {commit}, whose run directories have "
                                  f"format {made_by}; this version reads format {RUN_FORMAT}",
                                  "see or resume it with that version (git checkout it), or start a new run: "
                                  "inputs and OUT are untouched by either"))
    try:
        made = parse_as(str, record.get("code_version"), "code_version")
    except WrongType as exc:
        raise DamagedRunFile(RunDir(root).run_json, str(exc)) from None
    now = codeversion.code_version()
    if made == now or is_finished(root):
        return
    raise OtherCode(Problem(Why.OTHER_CODE, root, f"code {codeversion.short(made)}{_commit_of(record)}; this code is "
                                                 f"{codeversion.short(now)}", _other_code_step(root, record)))


def _commit_of(record: dict) -> str:
    words = commit_words(record)
    return f", git commit {words}" if words else ""


def _other_code_step(root: Path, record: dict) -> str:
    commit, dirty = submitted_commit(record)
    back = (f"check out commit {commit} (git checkout {commit}), then {resume_command(root)}"
            if commit and not dirty else f"{resume_command(root)} with the code that made it")
    langs = record.get("languages")  # RUNDIR's record lists them; a language's run dir's does not
    one = (root / langs[0] if len(langs) == 1 else None) if isinstance(langs, list) else root
    fresh = new_run_command(RunDir(one), "new") if one is not None else None
    return (f"its tasks fail rather than mix what two versions wrote. Either {back}, or start a new run with this code"
            + (f": {fresh}" if fresh else " (a fresh --run-dir)"))
